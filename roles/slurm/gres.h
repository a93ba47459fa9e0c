// GPUs as Slurm generic resources (GRES) on dynamic nodes of a configless cluster.
//
// slurmctld serves one gres.conf to every node; it cannot list dynamic nodes it does not know
// yet. So the controller's gres.conf only includes a file by absolute path, and every node
// (each worker, and the controller itself, which parses the file too) has its own copy there
// describing its devices: Slurm reads an Include of a fetched file from the node's own disk
// (proven on Slurm 22.05 in tests/integration/slurm_real_test.cc). A node without that file
// cannot start slurmd (Slurm retries for 60 s, then gives up): one-hpc writes it before every
// start. AutoDetect is off and said so: Debian's slurmd has no NVML plugin, so one-hpc finds
// the devices itself (host::DetectGpus) and writes them down.
#ifndef ONEHPC_ROLES_SLURM_GRES_H_
#define ONEHPC_ROLES_SLURM_GRES_H_

#include <string>

#include "roles/host/machine.h"
#include "roles/names.h"

namespace onehpc::slurm {

/// The controller's (or portal's) gres.conf: AutoDetect=off, Include `node_conf`.
std::string RenderGresConf(const std::string& node_conf = kGresNodeConfPath);

/// A node's own file: one `Name=gpu [Type=...] File=...` line, or only a comment.
std::string RenderNodeGresConf(const host::GpuInventory& gpus);

/// The `Gres=` value a dynamic node registers with: "gpu:tesla_t4:2", "gpu:2", or "".
std::string NodeGres(const host::GpuInventory& gpus);

/// "/dev/nvidia0" or "/dev/nvidia[0,1,3]" (a Slurm host-list expression) for the devices.
std::string GresFileList(const std::vector<std::string>& devices);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_GRES_H_
