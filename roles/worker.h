// The OneSlurm worker role: finds the controller through OneGate and joins Slurm as a dynamic
// node (configless slurmd -Z), then proves that the node registered.
#ifndef ONEHPC_ROLES_WORKER_H_
#define ONEHPC_ROLES_WORKER_H_

#include <memory>
#include <string>
#include <vector>

#include "context/settings.h"
#include "roles/role.h"

namespace onehpc {

/// Role "worker" of service "OneSlurm".
std::unique_ptr<Role> MakeWorkerRole();

/// The worker's own settings (ONEAPP_SLURM_JOIN_TIMEOUT).
std::vector<SettingSpec> WorkerSettings();

}  // namespace onehpc

#endif  // ONEHPC_ROLES_WORKER_H_
