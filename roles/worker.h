// The OneSlurm worker role: finds the controller through OneGate and joins Slurm as a dynamic
// node (configless slurmd -Z), then proves that the node registered.
#ifndef ONEHPC_ROLES_WORKER_H_
#define ONEHPC_ROLES_WORKER_H_

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/retry.h"
#include "context/onegate.h"
#include "context/settings.h"
#include "roles/role.h"

namespace onehpc {

/// Role "worker" of service "OneSlurm".
std::unique_ptr<Role> MakeWorkerRole();

/// The worker's own settings (ONEAPP_SLURM_JOIN_TIMEOUT).
std::vector<SettingSpec> WorkerSettings();

/// What a worker learns about the controller from one extended service document.
struct ControllerInfo {
  int vm_id = -1;
  std::string addr;      ///< SLURM_CONTROLLER_ADDR
  std::string host;      ///< SLURM_CONTROLLER_HOST
  std::string munge_key; ///< decoded SLURM_MUNGE_KEY_BASE64 (secret)
  std::vector<VmNic> nics;      ///< the controller VM's NICs
  std::vector<VmNic> own_nics;  ///< this VM's NICs ({} when it is not listed yet)
  std::string own_published_name;  ///< this VM's SLURM_NODENAME as OneGate has it ("" if none)
};

/// Reads the controller from one service document: role "controller", a node whose
/// USER_TEMPLATE has READY=YES, the address, host and a valid base64 munge key. kNotFound
/// (role missing, nothing ready yet) or kInvalidInput (bad published values) otherwise.
Result<ControllerInfo> ControllerFromService(const ServiceInfo& service, int own_vm_id);

/// One `GET /service?extended=true` per attempt until ControllerFromService succeeds; every
/// failure (OneGate errors, no controller role yet, not ready) is retried with backoff and
/// jitter until `policy.deadline`; the final error says what was missing last.
Result<ControllerInfo> DiscoverController(OneGateClient& onegate, int own_vm_id,
                                          const RetryPolicy& policy, Clock& clock);

/// The Slurm node name of a worker: short SET_HOSTNAME when set, else slurm-one-worker-<VMID>.
Result<std::string> WorkerNodeName(const ContextVars& vars);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_WORKER_H_
