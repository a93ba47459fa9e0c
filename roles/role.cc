#include "roles/role.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>

namespace onehpc {
namespace {

// Does the file at `path` already have this content, mode and (on the real root) owner?
bool Matches(const Files& files, const std::string& path, const std::string& content,
             mode_t mode, const std::optional<FileOwner>& owner) {
  auto existing = files.ReadIfExists(path);
  if (!existing || !existing->has_value() || **existing != content) return false;
  struct stat st {};
  if (::stat(files.HostPath(path).c_str(), &st) != 0) return false;
  if ((st.st_mode & 07777) != mode) return false;
  if (owner && (files.root().empty() || files.root() == "/")) {
    if (!owner->user.empty()) {
      const passwd* pw = ::getpwnam(owner->user.c_str());
      if (!pw || pw->pw_uid != st.st_uid) return false;
    }
    if (!owner->group.empty()) {
      const group* gr = ::getgrnam(owner->group.c_str());
      if (!gr || gr->gr_gid != st.st_gid) return false;
    }
  }
  return true;
}

}  // namespace

Status EnsureFile(RoleEnv& env, const std::string& path, const std::string& content, mode_t mode,
                  const std::optional<FileOwner>& owner, const std::string& why) {
  if (Matches(env.files, path, content, mode, owner)) {
    env.plan.Keep(path, "already up to date");
    return Ok();
  }
  return env.plan.Do("write " + path, why,
                     [&]() { return env.files.WriteAtomic(path, content, mode, owner); });
}

Status Role::Follow(RoleEnv&) {
  return Fail(ErrorKind::kInvalidInput,
              "role " + Name() + " has nothing to follow (only ood-worker does)");
}

}  // namespace onehpc
