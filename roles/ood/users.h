// Local users of the Open OnDemand service, from ONEAPP_AUTH_LOCAL_USERS.
//
// Format: entries separated by spaces or tabs, each `name:password` or `name:password:uid`.
//  - name: a portable login name, `[a-z][a-z0-9_-]*`, at most 32 characters, not a name
//    the image or the service uses itself (root, daemon, slurm, munge, nobody, sudo, ...,
//    anything starting with `systemd-`).
//  - password: 8 to 256 characters, none of them a control character; it cannot contain
//    whitespace (the entry separator) nor ':' (the field separator). An entry with a ':' too
//    many is rejected rather than guessed at: `bob:pa:ss` could be the password "pa:ss" or
//    the password "pa" with uid "ss". The password must differ from the name.
//    Or a crypt(5) hash, so that no clear text travels in the context: a password that
//    starts with '$' must be a yescrypt hash (`$y$PARAMS$SALT$HASH`, mkpasswd -m yescrypt)
//    or a SHA-512 crypt hash (`$6$[rounds=N$]SALT$HASH`, openssl passwd -6), and is then
//    installed as it is (LocalUser::password_is_hash). Only the shape is checked (prefix,
//    fields, lengths, the crypt alphabet `./0-9A-Za-z`), never by running crypt: a hash's
//    cost parameters are the operator's. Any other text starting with '$' (MD5 `$1$`,
//    SHA-256 `$5$`, bcrypt `$2b$`, a malformed hash) is refused. The crypt alphabet has no
//    ':' and no whitespace, so a hash never needs quoting inside an entry.
//  - uid: optional, decimal, in [kMinUid, kMaxUid] (the Debian range for ordinary users).
//    The user's primary group has the same number (gid = uid). Entries without a uid get one
//    in list order: the uid they had before (`previous_uids`) if still free, else the next
//    free number from kFirstAutoUid.
// Every error names the variable and the entry (position, and the user name when it is a
// valid one) but never the password or any part of it: an entry without ':' or an
// invalid name may be a fragment of a password, so it is never quoted.
#ifndef ONEHPC_ROLES_OOD_USERS_H_
#define ONEHPC_ROLES_OOD_USERS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace onehpc::ood {

inline constexpr const char* kLocalUsersVar = "ONEAPP_AUTH_LOCAL_USERS";
inline constexpr std::uint32_t kMinUid = 1000;
inline constexpr std::uint32_t kMaxUid = 60000;
inline constexpr std::uint32_t kFirstAutoUid = 10001;
inline constexpr size_t kMinPasswordLength = 8;
inline constexpr size_t kMaxPasswordLength = 256;
inline constexpr size_t kMaxNameLength = 32;

struct LocalUser {
  std::string name;
  std::string password;  ///< secret: registered with log::AddSecret by ParseLocalUsers
  /// `password` is a yescrypt or SHA-512 crypt hash, installed as it is (a secret too).
  bool password_is_hash = false;
  std::uint32_t uid = 0;
  bool uid_given = false;  ///< the entry had an explicit uid
  std::uint32_t gid() const { return uid; }
  std::string home() const { return "/home/" + name; }
};

struct LocalUserPolicy {
  /// uids that exist on the image (system accounts, eessi, ...): never allocated, and an
  /// explicit uid among them is an error.
  std::set<std::uint32_t> taken_uids;
  /// name -> uid the user had before (read back from the directory): kept for entries
  /// without a uid so that homes keep their owner when the list changes.
  std::map<std::string, std::uint32_t> previous_uids;
};

/// The password field of an entry is taken as a crypt(5) hash when it starts with this.
inline constexpr char kHashPrefix = '$';

/// Why `text` (a password field starting with kHashPrefix) is not a hash one-hpc installs,
/// without quoting any part of it; "" for a well-formed yescrypt or SHA-512 crypt hash.
std::string PasswordHashProblem(std::string_view text);

/// True for a portable login name that is not reserved.
bool IsValidLoginName(std::string_view name);
/// True for names the system or the service uses (root, slurm, munge, sudo, systemd-*...).
bool IsReservedLoginName(std::string_view name);

/// Parses and validates ONEAPP_AUTH_LOCAL_USERS. Every password is registered with
/// log::AddSecret before anything else happens. On failure the error (kInvalidInput) lists
/// every bad entry, one per line, each starting with the variable name.
Result<std::vector<LocalUser>> ParseLocalUsers(std::string_view text,
                                               const LocalUserPolicy& policy = {});

/// The names in ONEAPP_AUTH_LOCAL_USERS whose password is given in clear text (not a crypt(5)
/// hash), in order; none when the text does not parse (configure reports that).
std::vector<std::string> ClearTextPasswordNames(std::string_view text);
/// What the journal and `one-hpc status` say about them (security model: H3).
std::string ClearTextPasswordWarning(const std::vector<std::string>& names);

/// "a:b::c" split on `separator`: {"a", "b", "", "c"} (views into `line`).
std::vector<std::string_view> SplitFields(std::string_view line, char separator);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_USERS_H_
