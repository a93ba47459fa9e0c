// The OneSlurm controller role: slurmctld for a configless cluster of dynamic nodes, the munge
// key, and the cluster data workers read from OneGate.
#ifndef ONEHPC_ROLES_CONTROLLER_H_
#define ONEHPC_ROLES_CONTROLLER_H_

#include <memory>
#include <string>
#include <vector>

#include "context/settings.h"
#include "roles/role.h"
#include "roles/slurm/munge.h"
#include "roles/slurm/protocol.h"

namespace onehpc {

/// Role "controller" of service "OneSlurm".
std::unique_ptr<Role> MakeControllerRole();

/// The controller's own settings (ONEAPP_SLURM_MAX_NODES).
std::vector<SettingSpec> ControllerSettings();

/// How a VM runs slurmctld (shared by the OneSlurm controller and the Open OnDemand portal:
/// one implementation, two services).
struct ControllerSetup {
  std::string host;  ///< short host name (SlurmctldHost)
  std::string addr;  ///< address on the service (compute) network
  int max_nodes = 100;
  std::string cluster_name = "one";
  /// slurmctld's state; created slurm:slurm 0700 when missing.
  std::string state_save_location = slurm::kStateSaveLocation;
  /// "" = the key lives in /etc/munge only (OneSlurm). Else the key's home on the shared
  /// state export: created there once, installed from there on every boot (a replaced portal
  /// gets the same key).
  std::string shared_munge_key;
  /// Mount points slurmctld must never start without (a drop-in RequiresMountsFor=).
  std::vector<std::string> requires_mounts;
  /// Accounting through slurmdbd on this host (the caller runs MariaDB and slurmdbd first).
  bool accounting = false;
};

/// Hostname, /etc/hosts, munge key and munged, slurm.conf and cgroup.conf, slurmctld enabled,
/// (re)started on change and answering, the reconcile timer. Returns the munge key.
Result<slurm::MungeKeyState> SetUpSlurmController(RoleEnv& env, const ControllerSetup& setup);

/// Adds SLURM_CONTROLLER_ADDR/HOST and the munge key to env.publish (sent with READY=YES).
Status PublishController(RoleEnv& env, const std::string& host, const std::string& addr,
                         const slurm::MungeKeyState& key);

/// The controller's host name: the short SET_HOSTNAME when set, else "slurm-one-controller".
Result<std::string> ControllerHostname(const ContextVars& vars);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_CONTROLLER_H_
