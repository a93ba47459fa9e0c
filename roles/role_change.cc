#include "roles/role_change.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/log.h"
#include "roles/host/container.h"
#include "roles/names.h"
#include "roles/nfs/exports.h"
#include "roles/os/rooted.h"
#include "roles/role.h"

namespace onehpc {

Result<std::optional<RoleRecord>> ReadRoleRecord(const Files& files) {
  auto text = files.ReadIfExists(kRoleRecordFile);
  if (!text) return Fail(text.error());
  if (!text->has_value()) return std::optional<RoleRecord>();
  try {
    auto j = nlohmann::json::parse(**text);
    RoleRecord record;
    record.role = j.at("role").get<std::string>();
    for (const auto& u : j.at("units")) record.units.push_back(u.get<std::string>());
    return std::optional<RoleRecord>(std::move(record));
  } catch (const std::exception&) {
    return Fail(ErrorKind::kInvalidInput,
                std::string(kRoleRecordFile) +
                    " is not {\"role\": ..., \"units\": [...]}; delete it if this VM's role "
                    "did not change");
  }
}

Status WriteRoleRecord(Files& files, const RoleRecord& record) {
  std::set<std::string> units(record.units.begin(), record.units.end());
  nlohmann::json j = {{"role", record.role}, {"units", units}};
  return files.WriteAtomic(kRoleRecordFile, j.dump(2) + "\n", 0644);
}

Status RetirePreviousRole(RoleEnv& env, const RoleRecord& previous, const std::string& role,
                          const std::vector<std::string>& enabled_now) {
  const bool changed = previous.role != role;
  if (changed) log::Info("role change: this VM was the {} and is the {} now", previous.role, role);
  const std::string why = changed
                              ? "this VM was the " + previous.role + " and is the " + role + " now"
                              : "the " + role +
                                    "'s last configure enabled it and this one does not "
                                    "(a setting turned that part off)";
  const std::set<std::string> keep(enabled_now.begin(), enabled_now.end());
  for (const auto& unit : previous.units) {
    if (keep.count(unit)) continue;
    auto s = env.plan.Do("disable and stop " + unit, why, [&]() -> Status {
      if (auto d = env.systemd.Disable(unit); !d) return d;
      return env.systemd.StopNoBlock(unit);  // refused under --root: said, not skipped
    });
    if (!s) return s;
  }
  if (changed && previous.role == ood::kStorageRole && env.files.Exists(nfs::kExportsFile)) {
    auto s = env.plan.Do("remove " + std::string(nfs::kExportsFile),
                         why + ": it serves no export any more", [&]() -> Status {
                           if (auto r = env.files.Remove(nfs::kExportsFile); !r) return r;
                           if (IsOtherRoot(env.files.root()) || host::InContainer(env.files))
                             return Ok();
                           Command c;
                           c.argv = {"exportfs", "-ra"};
                           c.timeout = Duration(60000);
                           auto r = RunChecked(env.runner, c);
                           if (!r) return Fail(r.error());
                           return Ok();
                         });
    if (!s) return s;
  }
  return Ok();
}

Error RetireAfterFailedRoleChange(RoleEnv& env, const std::optional<RoleRecord>& previous,
                                  const std::string& role,
                                  const std::vector<std::string>& enabled_so_far, Error error) {
  if (!previous || previous->role == role) return error;
  log::Warn("role change: the {} failed to configure; retiring the {} anyway", role,
            previous->role);
  Status s = RetirePreviousRole(env, *previous, role, enabled_so_far);
  if (s && !env.plan.dry_run()) s = WriteRoleRecord(env.files, RoleRecord{role, enabled_so_far});
  if (!s) log::Warn("could not retire the {}: {}", previous->role, s.error().message);
  return error;
}

}  // namespace onehpc
