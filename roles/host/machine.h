// What a worker advertises to Slurm: CPUs, memory left after the OS reserve, GPUs.
#ifndef ONEHPC_ROLES_HOST_MACHINE_H_
#define ONEHPC_ROLES_HOST_MACHINE_H_

#include "common/error.h"
#include "roles/os/files.h"
#include "roles/os/process.h"

namespace onehpc::host {

/// "processor" lines of /proc/cpuinfo (under the Files root); kIo when there are none.
Result<int> CountCpus(const Files& files);

/// MemTotal of /proc/meminfo in MiB.
Result<long> MemTotalMb(const Files& files);

/// Memory kept for the OS: 10% of MemTotal, at least 256 MiB, at most 4096 MiB.
long OsMemoryReserveMb(long mem_total_mb);
/// RealMemory to advertise: MemTotal minus the reserve, at least 1.
long RealMemoryMb(long mem_total_mb);

/// NVIDIA GPUs: the /dev/nvidia<N> device nodes, else (when /usr/bin/nvidia-smi exists)
/// `nvidia-smi --query-gpu=count --format=csv,noheader` with a 15 s timeout; 0 when neither
/// answers (a failing nvidia-smi is logged, not fatal).
int CountGpus(const Files& files, ProcessRunner& runner);

}  // namespace onehpc::host

#endif  // ONEHPC_ROLES_HOST_MACHINE_H_
