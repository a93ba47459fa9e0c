// What a worker advertises to Slurm: CPUs, memory left after the OS reserve, GPUs.
#ifndef ONEHPC_ROLES_HOST_MACHINE_H_
#define ONEHPC_ROLES_HOST_MACHINE_H_

#include <string>
#include <vector>

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

/// The NVIDIA GPUs of this machine as Slurm should schedule them.
struct GpuInventory {
  /// The device files, in minor-number order ("/dev/nvidia0", "/dev/nvidia1", ...); empty
  /// when no GPU is registered.
  std::vector<std::string> devices;
  /// The Slurm GRES type ("tesla_t4") when every GPU is the same model, else "".
  std::string type;
  /// Why: what was found, or why nothing is registered.
  std::string why;
};

/// GPUs are registered only when the driver answers: `nvidia-smi --query-gpu=index,name
/// --format=csv,noheader` (15 s timeout; run first, as it creates missing device nodes) lists
/// exactly as many GPUs as there are /dev/nvidia<N> device nodes. Device nodes without a
/// working nvidia-smi, a failing or garbled answer, or counts that differ register none (the
/// reason is logged as a warning, configure goes on). nvidia-smi is the one under the Files
/// root (`--root`: a stand-in there).
GpuInventory DetectGpus(const Files& files, ProcessRunner& runner);

/// "Tesla T4" -> "tesla_t4": lower case, runs of other characters as one '_'.
std::string GresTypeFromModel(const std::string& model);

}  // namespace onehpc::host

#endif  // ONEHPC_ROLES_HOST_MACHINE_H_
