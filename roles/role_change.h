// What a VM no longer does is undone: its role changed between boots (re-contextualised from
// storage to worker, from controller to worker), or a setting of the same role turned a part
// off (ONEAPP_SLURM_ACCOUNTING_ENABLED=NO after YES, the storage's CernVM-FS proxy). Each
// successful configure records the role and every unit it enabled (kRoleRecordFile); the
// next successful configure disables and stops the recorded units that it did not enable,
// and after a role change removes a former storage VM's NFS exports. Nothing else is touched:
// data (homes, disks, the Slurm state, the accounting database) stays where it is.
#ifndef ONEHPC_ROLES_ROLE_CHANGE_H_
#define ONEHPC_ROLES_ROLE_CHANGE_H_

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "roles/os/files.h"

namespace onehpc {

struct RoleEnv;

inline constexpr char kRoleRecordFile[] = "/var/lib/one-hpc/configured-role.json";

struct RoleRecord {
  std::string role;
  std::vector<std::string> units;  ///< sorted, unique
};

/// nullopt when there is no record (a first boot, or an older one-hpc); kInvalidInput when
/// it cannot be read as one.
Result<std::optional<RoleRecord>> ReadRoleRecord(const Files& files);
Status WriteRoleRecord(Files& files, const RoleRecord& record);

/// Disables and stops every unit of `previous` that `enabled_now` lacks, and (after a role
/// change) removes the exports of a former storage VM, each through env.plan.
Status RetirePreviousRole(RoleEnv& env, const RoleRecord& previous, const std::string& role,
                          const std::vector<std::string>& enabled_now);

/// A configure of a new role that failed with `error` (returned): the previous role (when the
/// record names another one) is retired all the same, but for the units the new role enabled
/// before it failed, and the record then names the new role with those units. A VM
/// re-contextualised to a role that keeps failing must not go on serving as the old one
/// (slurmctld, nfs-server and its exports, the old timers). Nothing when the role did not
/// change (its units stay until a configure succeeds); a dry run plans it. Trouble retiring is
/// logged: `error` is what the run reports.
Error RetireAfterFailedRoleChange(RoleEnv& env, const std::optional<RoleRecord>& previous,
                                  const std::string& role,
                                  const std::vector<std::string>& enabled_so_far, Error error);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_ROLE_CHANGE_H_
