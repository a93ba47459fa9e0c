// Local Unix accounts of the Open OnDemand service, from ONEAPP_AUTH_LOCAL_USERS (parsed by
// roles/ood/users.h). There is no directory service: every VM of the service creates the
// same local accounts.
//  - The portal creates them with the passwords of the list, and publishes the user table
//    (kAttrUserTable: names and uids, never passwords) through OneGate.
//  - Workers build theirs from that table, with a locked password ("!"): they only run the
//    users' Slurm jobs. uids therefore always match the portal's.
//
// Each account: group <name> with gid = uid; user <name> with that uid, that primary group,
// home /home/<name>, shell /bin/bash, comment kAccountComment. The home is NOT created here:
// `one-hpc home-create` makes it at first login on the portal, and workers see it over NFS.
//
// Only accounts one-hpc manages are touched. kAccountsStateFile (JSON, 0600) lists them:
//  - an existing account that is not in the state file is adopted (recorded) only if its uid
//    and primary gid are the wanted ones, else the run fails (kInvalidInput) naming
//    ONEAPP_AUTH_LOCAL_USERS, the user and the existing uid;
//  - a managed account whose uid or gid differs from the wanted one is an error too: an
//    account is never renumbered (files on the NFS homes would change owner);
//  - a managed account no longer listed is disabled, never deleted (nor its home):
//    `usermod --lock --expiredate 1`; it stays in the state file as disabled, and its uid is
//    never given to someone else. Listed again, it is enabled again: expiry cleared and, on
//    the portal, the password unlocked or set again (on workers it stays locked).
//
// Commands (argv vectors with timeouts, through env.plan.Do): groupadd, useradd, usermod and
// chpasswd from shadow 4.13 (Debian 12). Under a root prefix (`--root DIR`) groupadd,
// useradd and usermod get `--prefix DIR`; chpasswd has no --prefix in 4.13, so it gets
// `--root DIR` (a chroot, where PAM cannot run). chpasswd therefore always hashes the
// password itself with `--crypt-method YESCRYPT` (Debian 12's default method) instead of
// going through PAM, on the real root too: one code path everywhere. A password given as a
// hash (LocalUser::password_is_hash: yescrypt or SHA-512 crypt) goes to a second run,
// `chpasswd --encrypted`, which stores it as it is. The password or hash travels on
// chpasswd's stdin only ("name:password\n"), never on a command line or in a log line.
//
// Idempotent: the current hash is read from <root>/etc/shadow and checked with crypt_r(3)
// (libxcrypt), or compared with a given hash as text; a password is set only when the hash
// does not verify it (is not the given one). A second run with the same list runs no command
// and writes nothing.
#ifndef ONEHPC_ROLES_OOD_ACCOUNTS_H_
#define ONEHPC_ROLES_OOD_ACCOUNTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "roles/names.h"
#include "roles/ood/users.h"
#include "roles/os/files.h"

namespace onehpc {
struct RoleEnv;
}  // namespace onehpc

namespace onehpc::ood {

enum class AccountMode {
  kPortal,  ///< passwords set from the list (unlocked)
  kWorker,  ///< passwords locked ("!"); LocalUser::password is ignored
};

/// The names (and uids) of the accounts one-hpc manages, and which of them are disabled.
inline constexpr char kAccountsStateFile[] = "/var/lib/one-hpc/ood-accounts.json";
/// The kAttrUserTable value for "no user" (OneGate cannot store an empty value).
inline constexpr char kNoUsers[] = "none";
inline constexpr char kAccountComment[] = "one-hpc OOD user";
inline constexpr char kAccountShell[] = "/bin/bash";
/// Time limit for each groupadd/useradd/usermod/chpasswd run.
inline constexpr int kAccountCommandTimeoutMs = 60000;

/// "alice:10001 bob:10002": every user's name and uid (never the password), sorted by name,
/// separated by single spaces; "" for no user.
std::string FormatUserTable(const std::vector<LocalUser>& users);

/// Parses a FormatUserTable text (entries separated by whitespace, each `name:uid`). Every
/// name must satisfy IsValidLoginName, every uid be decimal in [kMinUid, kMaxUid], and names
/// and uids be unique. The users come back in the text's order with uid_given = true and no
/// password. On failure the error (kInvalidInput) lists every bad entry, one per line, each
/// starting with "OOD_USERS".
Result<std::vector<LocalUser>> ParseUserTable(std::string_view text);

/// The ParseLocalUsers policy of the portal, from <root>/etc/passwd, <root>/etc/group, the
/// state file and /home:
///  - taken_uids: the uids of every passwd entry and the gids of every group (gid = uid for
///    our users), every uid of kUidRegisterFile and the owner (not root) of every directory
///    in /home, except the entries, groups, register lines and homes named after a
///    candidate. This includes the managed accounts that are disabled and users removed on a
///    portal since replaced: their uids are never reused.
///  - previous_uids[name] for each candidate: the uid of its passwd entry when there is one
///    (managed, or unmanaged and then adopted if everything else matches), else its uid in
///    kUidRegisterFile, else the owner of
///    a real directory /home/<name> (lstat; a symlink or anything else is ignored): homes
///    survive a replaced portal or a new service on the same disk, so their owner is the
///    truth.
/// `candidate_names`: the names in ONEAPP_AUTH_LOCAL_USERS (see ParsePortalUsers).
Result<LocalUserPolicy> AccountPolicy(RoleEnv& env,
                                      const std::vector<std::string>& candidate_names);

/// kUidRegisterFile's name -> uid (empty when there is none); kInvalidInput when malformed.
Result<std::map<std::string, std::uint32_t>> ReadUidRegister(const Files& files);

/// Adds `users` to kUidRegisterFile (written only when it changes; entries are never removed).
Status RecordUids(RoleEnv& env, const std::vector<LocalUser>& users);

/// ParseLocalUsers(text) for the names, AccountPolicy for them, then ParseLocalUsers(text,
/// policy): the portal's users with their final uids.
Result<std::vector<LocalUser>> ParsePortalUsers(RoleEnv& env, std::string_view text);

/// Makes the accounts match `users` (see the file comment): creates missing groups and users,
/// fixes comment/home/shell, clears the expiry of listed users, sets or unlocks passwords
/// (kPortal) or locks them (kWorker), disables managed accounts no longer listed, and records
/// the managed names in kAccountsStateFile. Every problem with the existing accounts is found
/// before anything changes (kInvalidInput, one per line). Logs the names and uids of what was
/// created, changed and disabled.
Status EnsureLocalAccounts(RoleEnv& env, const std::vector<LocalUser>& users, AccountMode mode);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_ACCOUNTS_H_
