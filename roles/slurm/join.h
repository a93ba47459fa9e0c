// Joining a Slurm cluster as a dynamic node (configless slurmd -Z): the controller found
// through OneGate, then host name, munge key, slurmd unit, registration and self-drain.
// Shared by the OneSlurm worker and the Open OnDemand worker: one implementation, two services.
#ifndef ONEHPC_ROLES_SLURM_JOIN_H_
#define ONEHPC_ROLES_SLURM_JOIN_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/retry.h"
#include "context/onegate.h"
#include "roles/names.h"
#include "roles/role.h"

namespace onehpc {

/// What a worker learns about the controller: its VM (GET /vms/<id>) and this VM (GET /vm).
struct ControllerInfo {
  int vm_id = -1;
  std::string addr;                   ///< SLURM_CONTROLLER_ADDR
  std::string host;                   ///< SLURM_CONTROLLER_HOST
  std::string key_server_public_key;  ///< decoded SLURM_KEY_SERVER_PUBKEY (32 bytes)
  std::string munge_key_id;           ///< SLURM_MUNGE_KEY_ID (roles/slurm/key_delivery.h)
  /// SLURM_CONF_ID: "" from a controller of an earlier one-hpc that does not publish it.
  std::string slurm_conf_id;
  std::vector<VmNic> nics;         ///< the controller VM's NICs
  std::vector<VmNic> own_nics;     ///< this VM's NICs ({} when it is not listed yet)
  std::string own_published_name;  ///< this VM's SLURM_NODENAME as OneGate has it ("" if none)
  std::string own_published_key;   ///< this VM's SLURM_WORKER_PUBKEY as OneGate has it
  /// The controller VM's USER_TEMPLATE (what else it publishes, e.g. the portal's users).
  std::map<std::string, std::string> published;
};

/// Reads a controller from its VM as OneGate shows it (GET /vms/<id>): ACTIVE, READY=YES, the
/// address, host, the key server's public key and the munge key's id. kNotFound "<id> (what
/// is missing)" while it is not ready, kInvalidInput for bad published values.
Result<ControllerInfo> ControllerFromVm(
    const VmInfo& vm, const std::string& controller_role = slurm::kControllerRole);

/// Why an HTTP status from OneGate means it refuses this VM for good (400, 401 after the
/// client's boot window, 403, 404), "" for any other status.
std::string OneGateRefusal(long status);

/// Where a worker looks for its controller.
struct Discovery {
  std::string controller_role = slurm::kControllerRole;  ///< "portal" in Open OnDemand
  /// The controller's VM id found last (slurm::kControllerVmIdFile), -1 if none.
  int known_vm_id = -1;
};

/// Finds the ready controller with requests whose size does not grow with the service:
/// GET /vms/<known id> when that VM is still a ready controller of the role (a follow pass,
/// a reboot); else the compact GET /service (the role's VM ids, a few bytes per VM) and
/// GET /vms/<id> of the role's VMs, oldest first, until one is ready; then GET /vm for this
/// VM's NICs and what it publishes. Every other failure (no answer, 5xx, no controller role
/// yet, not ready) is retried with backoff and jitter until `policy.deadline`, and the final
/// error says what was missing last. OneGate refusing this VM (OneGateRefusal) fails at once
/// with kInvalidInput.
Result<ControllerInfo> DiscoverController(OneGateClient& onegate, const Discovery& discovery,
                                          const RetryPolicy& policy, Clock& clock);

/// How a VM joins a Slurm cluster as a dynamic node.
struct JoinSetup {
  std::string controller_role = slurm::kControllerRole;  ///< OneFlow role of slurmctld's VM
  std::string node_name;
  Duration timeout{300000};  ///< for the controller to be ready, and for the registration
  /// Follow mode (a timer, not configure): one look at OneGate, no waiting for a controller
  /// that is not ready (the next tick looks again).
  bool once = false;
  /// Run after the controller is found and before slurmd (re)starts (e.g. the accounts that
  /// jobs run as, from what the controller publishes).
  std::function<Status(const ControllerInfo&)> before_slurmd;
  /// Mount points slurmd must not start without (slurm::SlurmdUnitParams::requires_mounts).
  std::vector<std::string> requires_mounts;
};

/// Finds the controller through OneGate, then: host name, /etc/hosts, this worker's box key
/// pair, SLURM_NODENAME and SLURM_WORKER_PUBKEY published, the munge key fetched from the
/// controller's key server unless the installed one has the published id (roles/slurm/
/// key_delivery.h), the slurmd unit of a dynamic node, slurmd
/// (re)started when something changed or the node is not registered, the registration
/// checked, self-drain armed. Returns what it learnt about the controller.
Result<ControllerInfo> JoinSlurmCluster(RoleEnv& env, const JoinSetup& setup);

/// The Slurm node name of a worker: short SET_HOSTNAME when set, else <prefix><VMID>
/// (slurm-one-worker-<VMID> for OneSlurm, ood-worker-<VMID> for Open OnDemand). A
/// SET_HOSTNAME naming another VM's node (<prefix><id>) or a placeholder record
/// (one-hpc-slot...) is refused.
Result<std::string> WorkerNodeName(const ContextVars& vars,
                                   const std::string& prefix = "slurm-one-worker-");

/// ONEAPP_SLURM_CONTROLLER_VM_ID: the controller's (or the portal's) VM id, set by the service
/// template with OneFlow's reference to a parent role (`${controller.vm.id}`, resolved when
/// each worker is created). A worker that has found no controller yet reads that VM alone
/// (GET /vms/<id>) instead of the role's list of VMs; a VM that is not a ready controller of
/// the role, or no value, falls back to the list. Read by the worker and the ood-worker.
inline constexpr char kControllerVmIdSetting[] = "ONEAPP_SLURM_CONTROLLER_VM_ID";
SettingSpec ControllerVmIdSetting();

}  // namespace onehpc

#endif  // ONEHPC_ROLES_SLURM_JOIN_H_
