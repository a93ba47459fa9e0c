#include "roles/ensure.h"

#include <fmt/format.h>

#include "roles/role.h"

namespace onehpc {

Result<bool> EnsureFile(RoleEnv& env, const std::string& path, const std::string& content,
                        mode_t mode, const std::optional<FileOwner>& owner,
                        const std::string& why) {
  auto same = env.files.Matches(path, content, mode, owner);
  if (!same) return Fail(same.error());
  if (*same) {
    env.plan.Keep(path, "already up to date");
    return false;
  }
  auto s = env.plan.Do("write " + path, why,
                       [&]() { return env.files.WriteAtomic(path, content, mode, owner); });
  if (!s) return Fail(s.error());
  return true;
}

Status EnsureDirectory(RoleEnv& env, const std::string& path, mode_t mode,
                       const std::optional<FileOwner>& owner, const std::string& why) {
  if (env.files.Exists(path)) {
    env.plan.Keep(path, "directory exists; its content is kept");
    return Ok();
  }
  std::string how = fmt::format("{:04o}", mode);
  if (owner) how = owner->user + ":" + owner->group + ", " + how;
  return env.plan.Do("create " + path + " (" + how + ")", why,
                     [&] { return env.files.MakeDirs(path, mode, owner); });
}

Status DaemonReloadIf(RoleEnv& env, bool changed, const std::string& why) {
  if (!changed) return Ok();
  return env.plan.Do("systemctl daemon-reload", why, [&] { return env.systemd.DaemonReload(); });
}

Status EnsureUnitEnabled(RoleEnv& env, const std::string& unit, const std::string& wanted_by,
                         const std::string& why) {
  if (env.enabled_units != nullptr) env.enabled_units->push_back(unit);
  std::string link = "/etc/systemd/system/" + wanted_by + ".wants/" + unit;
  if (env.files.Exists(link)) {
    env.plan.Keep("enabled " + unit, "it is enabled (" + link + ")");
    return Ok();
  }
  return env.plan.Do("enable " + unit, why, [&] { return env.systemd.Enable(unit); });
}

Status EnsureUnitRunning(RoleEnv& env, const std::string& unit, bool restart,
                         const std::string& restart_why, const std::string& why) {
  auto active = env.systemd.IsActive(unit);
  if (!active) {
    if (!env.plan.dry_run()) return Fail(active.error());
    return env.plan.Do("start " + unit + " (--no-block)",
                       why + "; its state is unknown here (" + active.error().message + ")",
                       [] { return Ok(); });
  }
  if (!*active) {
    return env.plan.Do("start " + unit + " (--no-block)", why + "; it is not running",
                       [&] { return env.systemd.StartNoBlock(unit); });
  }
  if (restart) {
    return env.plan.Do("restart " + unit + " (--no-block)", restart_why,
                       [&] { return env.systemd.RestartNoBlock(unit); });
  }
  env.plan.Keep(unit + " running", "it is active and nothing it reads changed");
  return Ok();
}

}  // namespace onehpc
