// Running slurmctld for a configless cluster of dynamic nodes: identity, munge key, the Slurm
// configuration, the daemon and the reconcile timer, and what the controller publishes.
// Shared by the OneSlurm controller and the Open OnDemand portal: one implementation, two
// services.
#ifndef ONEHPC_ROLES_SLURM_CONTROLLER_SETUP_H_
#define ONEHPC_ROLES_SLURM_CONTROLLER_SETUP_H_

#include <string>
#include <vector>

#include "context/settings.h"
#include "roles/names.h"
#include "roles/role.h"
#include "roles/slurm/munge.h"

namespace onehpc {

/// ONEAPP_SLURM_MAX_NODES: MaxNodeCount of the controller (OneSlurm) or the portal.
inline constexpr char kMaxNodesSetting[] = "ONEAPP_SLURM_MAX_NODES";

/// The MaxNodeCount setting for `role` (the controller, or the portal).
SettingSpec MaxNodesSetting(const std::string& role);

/// `one-hpc rotate-munge-key` on the controller or portal: a new key (WriteNewMungeKey),
/// munged and slurmctld restarted (running jobs go on; slurmd resends), the new key's id
/// published. Every worker's follow timer then sees a key that is not current, fetches the new
/// one from the key server and restarts munged and slurmd; until then it cannot talk to
/// slurmctld (credentials made with the old key are refused).
Status RotateControllerMungeKey(RoleEnv& env, const std::string& host,
                                const std::string& shared_munge_key);

/// How a VM runs slurmctld.
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
  /// Accounting through slurmdbd on this host with its dumps in this directory (created 0700
  /// root when missing); "" = no accounting (slurmdbd and the dump timer are then left to
  /// the retiring of units no longer enabled: roles/role_change.h).
  std::string accounting_dumps;
};

/// What a controller hands to its workers (through its key server and OneGate).
struct ControllerKeys {
  slurm::MungeKeyState munge;
  std::string server_public_key;  ///< the key server's box public key ("" in a dry run)
  std::string slurm_conf_id;      ///< SlurmConfId of the slurm.conf written
};

/// Hostname, /etc/hosts, munge key and munged, accounting (MariaDB, slurmdbd) when asked,
/// slurm.conf, cgroup.conf and gres.conf, slurmctld enabled, (re)started on change and
/// answering, the cluster registered for accounting and its dump timer, the reconcile timer,
/// the key server's key pair and socket (roles/slurm/key_delivery.h).
Result<ControllerKeys> SetUpSlurmController(RoleEnv& env, const ControllerSetup& setup);

/// Adds SLURM_CONTROLLER_ADDR/HOST, the key server's public key and the munge key's id to
/// env.publish (sent with READY=YES); erases the clear munge key an earlier one-hpc published.
Status PublishController(RoleEnv& env, const std::string& host, const std::string& addr,
                         const ControllerKeys& keys);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_SLURM_CONTROLLER_SETUP_H_
