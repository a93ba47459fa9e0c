// First-login home directories (`one-hpc home-create`, run as root by Open OnDemand's
// pre-start hook before the user's per-user nginx starts).
//
// The user may control everything inside an existing home, and a hostile or broken
// directory service decides the passwd entry, so nothing is trusted by path:
//  - the passwd entry must say home = <base>/<name>, uid >= 1000 (not nobody), gid != 0;
//  - <base> (/home) is opened without following any symlink in its path, and must be a
//    directory owned by root that only root can write (else nobody else's rename could be
//    excluded);
//  - every later step works on file descriptors relative to that directory;
//  - a missing home is built in a fresh, randomly named, root-owned 0700 directory inside
//    <base> (skel copied by fds: O_NOFOLLOW, O_CREAT|O_EXCL, regular files and directories
//    only), then handed to the user (fchown, fchmod 0700) and renamed into place with
//    RENAME_NOREPLACE: the user never sees a half-made home, and a home that appears
//    meanwhile is never replaced;
//  - an existing home must be a real directory owned by the user; it is then left exactly
//    as it is (no chown, no chmod, nothing written, no link followed). Anything else — a
//    symlink, a file, a directory owned by someone else — is refused (kUnsafe).
#ifndef ONEHPC_ROLES_OOD_HOME_H_
#define ONEHPC_ROLES_OOD_HOME_H_

#include <sys/types.h>

#include <string>

#include "common/error.h"
#include "roles/os/mounts.h"

namespace onehpc::ood {

inline constexpr uid_t kMinHomeUid = 1000;

struct HomeRequest {
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;                 ///< the passwd entry's home directory
  std::string home_base = "/home";  ///< must be absolute; home must be <home_base>/<user>
  std::string skel = "/etc/skel";   ///< missing = an empty home
};

enum class HomeOutcome { kCreated, kExisted };

/// The portal's /home must be the homes' NFS mount (the storage VM's export or the site's
/// server; any mount in a container, where the lab binds it): a home made on the portal's
/// root disk would be invisible to the workers and hidden once the mount comes back.
/// kUnsafe when `base` is not mounted, or mounted but not over NFS outside a container.
Status CheckHomesMounted(Mounts& mounts, const std::string& base, bool in_container);

/// Looks the user up with getpwnam_r (NSS: files, SSSD/LDAP). kNotFound for an unknown user.
Result<HomeRequest> LookUpHomeUser(const std::string& user, const std::string& home_base,
                                   const std::string& skel);

/// Checks the request (name, uid, gid, home path) without touching anything.
Status ValidateHomeRequest(const HomeRequest& request);

/// Creates the home if it is missing, or verifies the existing one (see the file comment).
/// Errors: kInvalidInput (request), kUnsafe (refused: symlinks, foreign owners, unsafe
/// base), kIo (a system call failed).
Result<HomeOutcome> CreateHome(const HomeRequest& request);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_HOME_H_
