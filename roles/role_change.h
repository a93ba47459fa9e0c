// A VM whose role changes between boots (re-contextualised from storage to worker, from
// controller to worker): what the role it no longer has left running is undone. Each
// successful configure records the role and every unit it enabled (kRoleRecordFile); when
// the next successful configure is of another role, the recorded units that this run did not
// enable are disabled and stopped, and a former storage VM's NFS exports are removed.
// Nothing else is touched: data (homes, disks, the Slurm state) stays where it is.
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

/// Disables and stops every unit of `previous` that `enabled_now` lacks, and removes the
/// exports of a former storage VM, each through env.plan. Nothing when the role is the same.
Status RetirePreviousRole(RoleEnv& env, const RoleRecord& previous, const std::string& role,
                          const std::vector<std::string>& enabled_now);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_ROLE_CHANGE_H_
