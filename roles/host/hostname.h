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
#include "roles/os/files.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::host {

inline constexpr char kHostsBlockBegin[] = "# BEGIN one-hpc managed block (do not edit)";
inline constexpr char kHostsBlockEnd[] = "# END one-hpc managed block";

/// The lines that open and close one managed block.
struct HostsBlockMarkers {
  const char* begin;
  const char* end;
};
/// The role's block (its own name, the controller's): written by configure.
inline constexpr HostsBlockMarkers kRoleBlock{kHostsBlockBegin, kHostsBlockEnd};
/// The service's workers, by node name (the portal's /node and /rnode proxies reach them by
/// name): written by the reconciler at each cycle.
inline constexpr HostsBlockMarkers kWorkersBlock{
    "# BEGIN one-hpc workers of the service (do not edit)", "# END one-hpc workers of the service"};

/// address → names lines of the block, in order.
using HostEntries = std::vector<std::pair<std::string, std::string>>;

/// The text of `current` with the managed block `markers` replaced by `entries` (or inserted
/// at the top when there is none). Any further blocks with these markers (a corrupted file)
/// are removed; other blocks are kept as they are; an unterminated block is an error
/// (kInvalidInput), since we cannot tell where it ends.
Result<std::string> ReplaceHostsBlock(std::string_view current, const HostEntries& entries,
                                      const HostsBlockMarkers& markers = kRoleBlock);

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

/// systemd-resolved's drop-in that turns off LLMNR and multicast DNS.
inline constexpr char kResolvedNoMulticast[] = "/etc/systemd/resolved.conf.d/one-hpc.conf";

/// Names are answered from /etc/hosts and DNS only, never by whoever on the link answers an
/// LLMNR or mDNS query first (the image runs systemd-resolved, whose LLMNR is on by default):
/// writes kResolvedNoMulticast and restarts a running systemd-resolved when it changed.
Status EnsureNoMulticastNames(RoleEnv& env, const std::string& why);

/// Outside a role run (the reconciler): `path` with the block `markers` replaced by `entries`,
/// written atomically (0644) only when that changes it; true when it did. A missing file is
/// left missing (false): /etc/hosts is the image's and configure's, not a timer's to create.
Result<bool> UpdateHostsBlock(Files& files, const std::string& path, const HostEntries& entries,
                              const HostsBlockMarkers& markers);

}  // namespace onehpc::host

#endif  // ONEHPC_ROLES_HOST_HOSTNAME_H_
