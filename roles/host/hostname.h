// The hostname and a managed block in /etc/hosts. The block is replaced in place (never
// appended again) and everything outside it is kept; a new block goes to the top of the file,
// so it wins over older lines for the same names (glibc takes the first match).
#ifndef ONEHPC_ROLES_HOST_HOSTNAME_H_
#define ONEHPC_ROLES_HOST_HOSTNAME_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::host {

inline constexpr char kHostsBlockBegin[] = "# BEGIN one-hpc managed block (do not edit)";
inline constexpr char kHostsBlockEnd[] = "# END one-hpc managed block";

/// address → names lines of the block, in order.
using HostEntries = std::vector<std::pair<std::string, std::string>>;

/// The text of `current` with the managed block replaced by `entries` (or inserted at the
/// top when there is none). Any further blocks (a corrupted file) are removed; an unterminated
/// block is an error (kInvalidInput), since we cannot tell where it ends.
Result<std::string> ReplaceHostsBlock(std::string_view current, const HostEntries& entries);

/// A hostname label we accept: [A-Za-z0-9-], 1..63 characters, not starting or ending with '-'.
bool IsValidHostLabel(std::string_view name);

/// The short name for a SET_HOSTNAME value (up to the first '.'); kInvalidInput naming
/// SET_HOSTNAME when it is not a valid host label.
Result<std::string> ShortNameFromSetHostname(std::string_view value);

/// Sets the static hostname (/etc/hostname) and the running one (`hostname NAME`, only when
/// /proc/sys/kernel/hostname differs), through the plan.
Status EnsureHostname(RoleEnv& env, const std::string& name, const std::string& why);

/// Writes /etc/hosts with the managed block through EnsureFile (keep when unchanged).
Status EnsureHostsBlock(RoleEnv& env, const HostEntries& entries, const std::string& why);

}  // namespace onehpc::host

#endif  // ONEHPC_ROLES_HOST_HOSTNAME_H_
