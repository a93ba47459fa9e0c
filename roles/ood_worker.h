// The Open OnDemand worker role: the homes and the software tree from NFS, the service's
// users (names and uids as the portal publishes them, passwords locked), and a dynamic Slurm
// node of the portal's slurmctld (the OneSlurm worker code). `one-hpc follow`
// (one-hpc-follow-portal.timer) keeps following the portal: a replaced portal's new address,
// users added or removed.
#ifndef ONEHPC_ROLES_OOD_WORKER_H_
#define ONEHPC_ROLES_OOD_WORKER_H_

#include <memory>
#include <string>

#include "roles/role.h"

namespace onehpc {

/// Role "ood-worker" of service "Open OnDemand" (OneFlow role `worker`).
std::unique_ptr<Role> MakeOodWorkerRole();

/// The node name: short SET_HOSTNAME when set, else ood-worker-<VMID>.
Result<std::string> OodWorkerNodeName(const ContextVars& vars);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OOD_WORKER_H_
