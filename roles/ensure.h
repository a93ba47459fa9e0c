// Idempotent steps every role uses: a file with this content, a directory, a unit enabled or
// running. Each goes through the plan (a keep when nothing changes, a Do otherwise), so that
// `one-hpc plan` prints exactly what `one-hpc configure` would change.
#ifndef ONEHPC_ROLES_ENSURE_H_
#define ONEHPC_ROLES_ENSURE_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "common/error.h"
#include "roles/os/files.h"

namespace onehpc {

struct RoleEnv;

/// Writes `content` to `path` unless the file already has exactly this content, mode and
/// owner. Returns whether it changed (or, in a plan, would change) the file.
Result<bool> EnsureFile(RoleEnv& env, const std::string& path, const std::string& content,
                        mode_t mode, const std::optional<FileOwner>& owner, const std::string& why);

/// Creates the directory `path` (`mode`, `owner`) unless it exists; an existing one, its
/// mode and its content are kept.
Status EnsureDirectory(RoleEnv& env, const std::string& path, mode_t mode,
                       const std::optional<FileOwner>& owner, const std::string& why);

/// `systemctl daemon-reload` through the plan when `changed` (a unit file or drop-in was
/// written).
Status DaemonReloadIf(RoleEnv& env, bool changed, const std::string& why);

/// `systemctl enable UNIT` unless /etc/systemd/system/<wanted_by>.wants/UNIT exists.
Status EnsureUnitEnabled(RoleEnv& env, const std::string& unit, const std::string& wanted_by,
                         const std::string& why);

/// Starts UNIT (--no-block) when it is not active; restarts it (--no-block) when `restart`;
/// otherwise records a keep. Callers wait for the effect with their own health check.
Status EnsureUnitRunning(RoleEnv& env, const std::string& unit, bool restart,
                         const std::string& restart_why, const std::string& why);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_ENSURE_H_
