#include "roles/ood/users.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "common/log.h"

namespace onehpc::ood {

std::vector<std::string_view> SplitFields(std::string_view line, char separator) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t at = line.find(separator, start);
    fields.push_back(line.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return fields;
}
namespace {

// Accounts and groups of Debian's base-passwd and of the packages the appliance image
// installs (Slurm, munge, MariaDB, slapd, SSSD, Apache, Open OnDemand, Dex, CernVM-FS,
// Squid, NFS...), plus names with a special meaning to people or tools. A local user with
// one of these names would share its uid/gid or its group with a privileged one (the
// user's group has the user's name: a user called "sudo" would get group "sudo").
constexpr std::string_view kReserved[] = {
    "root",       "daemon",
    "bin",        "sys",
    "sync",       "games",
    "man",        "lp",
    "mail",       "news",
    "uucp",       "proxy",
    "www-data",   "backup",
    "list",       "irc",
    "gnats",      "nobody",
    "nogroup",    "adm",
    "tty",        "disk",
    "kmem",       "dialout",
    "fax",        "voice",
    "cdrom",      "floppy",
    "tape",       "sudo",
    "audio",      "dip",
    "operator",   "src",
    "shadow",     "utmp",
    "video",      "sasl",
    "plugdev",    "staff",
    "users",      "wheel",
    "admin",      "administrator",
    "input",      "kvm",
    "render",     "sgx",
    "netdev",     "crontab",
    "messagebus", "sshd",
    "ssh",        "polkitd",
    "tss",        "uuidd",
    "tcpdump",    "dnsmasq",
    "statd",      "ntp",
    "ntpsec",     "chrony",
    "syslog",     "postfix",
    "slurm",      "munge",
    "mysql",      "mariadb",
    "openldap",   "ldap",
    "sssd",       "apache",
    "ondemand",   "ondemand-nginx",
    "dex",        "cvmfs",
    "eessi",      "squid",
    "oneadmin",   "one",
    "debian",     "ubuntu",
    "cloud",      "lxd",
    "docker",
};

constexpr std::string_view kReservedPrefixes[] = {"systemd-", "_", "nixbld"};

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::vector<std::string_view> SplitEntries(std::string_view text) {
  std::vector<std::string_view> entries;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    size_t start = i;
    while (i < text.size() && !IsSpace(text[i])) ++i;
    if (i > start) entries.push_back(text.substr(start, i - start));
  }
  return entries;
}

// Why `name` is not a valid login name, without quoting it ("" if it is valid).
std::string NameProblem(std::string_view name) {
  if (name.empty()) return "the user name is empty";
  if (name.size() > kMaxNameLength) {
    return fmt::format("the user name is longer than {} characters", kMaxNameLength);
  }
  if (!(name[0] >= 'a' && name[0] <= 'z')) {
    return "the user name does not start with a lower-case letter a-z";
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return "the user name has characters other than a-z, 0-9, '_' and '-'";
  }
  return "";
}

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t len;
    unsigned code;
    unsigned min;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, code = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, code = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, code = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (i + len > text.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

// The crypt(5) alphabet of salts and hashes (base64 with "./" first): no ':', no whitespace.
bool IsCryptChar(char c) {
  return c == '.' || c == '/' || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
         (c >= 'a' && c <= 'z');
}

// Why `field` is not `min`..`max` characters of the crypt alphabet ("" if it is), without
// quoting it; `what` names the field.
std::string CryptFieldProblem(std::string_view field, const char* what, size_t min, size_t max) {
  if (field.size() < min || field.size() > max) {
    return min == max
               ? fmt::format("{} has {} characters, {} expected", what, field.size(), min)
               : fmt::format("{} has {} characters, {}-{} expected", what, field.size(), min, max);
  }
  if (!std::all_of(field.begin(), field.end(), IsCryptChar)) {
    return fmt::format("{} has characters outside the crypt alphabet ./0-9A-Za-z", what);
  }
  return "";
}

// The fields of "$id$f1$f2...": {"id", "f1", "f2", ...} (text starts with '$').
std::vector<std::string_view> DollarFields(std::string_view text) {
  return SplitFields(text.substr(1), '$');
}

// yescrypt: $y$PARAMS$SALT$HASH. PARAMS encodes the flavour, N and r (at least 3 characters);
// the salt is up to 64 bytes (86 characters); the hash is 32 bytes, 43 characters whose
// last carries 4 bits (one of the first 16 of the alphabet).
constexpr size_t kYescryptMinParams = 3;
constexpr size_t kYescryptMaxParams = 32;
constexpr size_t kYescryptMaxSalt = 86;
constexpr size_t kYescryptHashChars = 43;
constexpr std::string_view kYescryptLastChars = "./0123456789ABCD";
// SHA-512 crypt: $6$[rounds=N$]SALT$HASH. N in 1000-999999999 (what crypt accepts, written
// without leading zeros as crypt writes it); the salt is at most 16 characters (crypt
// ignores the rest, so a longer one would never verify); the hash is 64 bytes, 86
// characters whose last carries 2 bits.
constexpr std::uint64_t kSha512MinRounds = 1000;
constexpr std::uint64_t kSha512MaxRounds = 999999999;
constexpr size_t kSha512MaxSalt = 16;
constexpr size_t kSha512HashChars = 86;
constexpr std::string_view kSha512LastChars = "./01";
constexpr std::string_view kRoundsPrefix = "rounds=";

std::string HashPartProblem(std::string_view hash, size_t chars, std::string_view last_chars) {
  std::string p = CryptFieldProblem(hash, "the hash part", chars, chars);
  if (p.empty() && last_chars.find(hash.back()) == std::string_view::npos) {
    p = "the hash part does not end as crypt ends it (its last character holds the spare bits)";
  }
  return p;
}

std::string YescryptProblem(const std::vector<std::string_view>& f) {
  if (f.size() != 4) {
    return fmt::format("it has {} '$'-separated fields after the $y$ prefix, 3 expected",
                       f.size() - 1);
  }
  std::string p =
      CryptFieldProblem(f[1], "the parameters field", kYescryptMinParams, kYescryptMaxParams);
  if (p.empty()) p = CryptFieldProblem(f[2], "the salt", 1, kYescryptMaxSalt);
  if (p.empty()) p = HashPartProblem(f[3], kYescryptHashChars, kYescryptLastChars);
  return p;
}

std::string Sha512Problem(const std::vector<std::string_view>& f) {
  if (f.size() != 3 && f.size() != 4) {
    return fmt::format("it has {} '$'-separated fields after the $6$ prefix, 2 or 3 expected",
                       f.size() - 1);
  }
  size_t salt = 1;
  if (f.size() == 4) {
    salt = 2;
    std::string_view rounds = f[1];
    if (rounds.substr(0, kRoundsPrefix.size()) != kRoundsPrefix) {
      return "with 3 fields after $6$ the first must be rounds=N";
    }
    std::string_view digits = rounds.substr(kRoundsPrefix.size());
    bool ok =
        !digits.empty() && digits.size() <= 9 && digits[0] != '0' &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    std::uint64_t n = ok ? std::stoull(std::string(digits)) : 0;
    if (!ok || n < kSha512MinRounds || n > kSha512MaxRounds) {
      return fmt::format("rounds=N must be a number in {}-{} without leading zeros",
                         kSha512MinRounds, kSha512MaxRounds);
    }
  }
  std::string p = CryptFieldProblem(f[salt], "the salt", 1, kSha512MaxSalt);
  if (p.empty()) p = HashPartProblem(f[salt + 1], kSha512HashChars, kSha512LastChars);
  return p;
}

// Why the password is not acceptable ("" if it is), without quoting it.
std::string PasswordProblem(std::string_view password, std::string_view name) {
  if (password.empty()) return "the password is empty";
  if (password[0] == kHashPrefix) return PasswordHashProblem(password);
  size_t chars = 0;
  for (char c : password) {
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++chars;
  }
  if (chars < kMinPasswordLength) {
    return fmt::format("the password is shorter than {} characters", kMinPasswordLength);
  }
  if (chars > kMaxPasswordLength) {
    return fmt::format("the password is longer than {} characters", kMaxPasswordLength);
  }
  for (char c : password) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return "the password contains a control character";
  }
  if (!IsValidUtf8(password)) return "the password is not valid UTF-8 text";
  if (password == name) return "the password is the user name";
  return "";
}

struct Entry {
  size_t position = 0;  // 1-based
  std::string name;     // only set when valid
  std::string password;
  bool password_is_hash = false;
  std::uint32_t uid = 0;
  bool uid_given = false;
};

}  // namespace

std::string PasswordHashProblem(std::string_view text) {
  if (text.empty() || text[0] != kHashPrefix) return "the password is not a hash";
  const std::vector<std::string_view> f = DollarFields(text);
  std::string method;
  std::string problem;
  if (f[0] == "y") {
    method = "yescrypt hash ($y$PARAMS$SALT$HASH, as mkpasswd -m yescrypt prints it)";
    problem = YescryptProblem(f);
  } else if (f[0] == "6") {
    method = "SHA-512 crypt hash ($6$[rounds=N$]SALT$HASH, as openssl passwd -6 prints it)";
    problem = Sha512Problem(f);
  } else {
    return "the password starts with '$' but is not a yescrypt ($y$...) or SHA-512 crypt "
           "($6$...) hash (not shown); other methods (MD5 $1$, SHA-256 $5$, bcrypt $2b$...) "
           "are refused, and a clear-text password cannot start with '$'";
  }
  if (problem.empty()) return "";
  return "the password is not a well-formed " + method + " (not shown): " + problem;
}

bool IsReservedLoginName(std::string_view name) {
  for (std::string_view r : kReserved) {
    if (name == r) return true;
  }
  for (std::string_view p : kReservedPrefixes) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

bool IsValidLoginName(std::string_view name) {
  return NameProblem(name).empty() && !IsReservedLoginName(name);
}

namespace {

void AddProblem(std::vector<std::string>& problems, size_t position, const std::string& who,
                const std::string& what) {
  problems.push_back(fmt::format("{}: entry {}{}: {}", kLocalUsersVar, position,
                                 who.empty() ? "" : " (user '" + who + "')", what));
}

// Secrets first: nothing after this may log or return a password or a piece of one.
void RegisterSecrets(const std::vector<std::string_view>& raw_entries) {
  for (std::string_view raw : raw_entries) {
    size_t colon = raw.find(':');
    if (colon == std::string_view::npos) {
      log::AddSecret(std::string(raw));  // may be a password fragment
      continue;
    }
    std::string_view rest = raw.substr(colon + 1);
    log::AddSecret(std::string(rest));
    size_t second = rest.find(':');
    log::AddSecret(std::string(rest.substr(0, second)));
  }
}

// The uid given after the second ':' of entry `position` into `entry`; false (a problem added)
// when it is not a free uid in range.
bool ParseGivenUid(std::string_view uid_text, size_t position, const std::string& who,
                   const LocalUserPolicy& policy, Entry& entry,
                   std::vector<std::string>& problems) {
  bool digits =
      !uid_text.empty() && uid_text.size() <= 9 &&
      std::all_of(uid_text.begin(), uid_text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    AddProblem(problems, position, who,
               uid_text.empty() ? "the uid after the second ':' is empty"
                                : "the part after the second ':' is not a uid (not shown: "
                                  "passwords cannot contain ':', so it may be part of a password)");
    return false;
  }
  std::uint32_t uid = static_cast<std::uint32_t>(std::stoul(std::string(uid_text)));
  entry.uid = uid;
  entry.uid_given = true;
  if (uid < kMinUid || uid > kMaxUid) {
    AddProblem(problems, position, who,
               fmt::format("uid {} is outside {}-{}", uid, kMinUid, kMaxUid));
    return false;
  }
  if (policy.taken_uids.count(uid)) {
    AddProblem(problems, position, who,
               fmt::format("uid {} belongs to an account of the system", uid));
    return false;
  }
  return true;
}

// One entry, name:password or name:password:uid; nullopt (problems added) when it is not valid.
std::optional<Entry> ParseEntry(std::string_view raw, size_t position,
                                const LocalUserPolicy& policy, const std::string& expected,
                                std::vector<std::string>& problems) {
  size_t colon = raw.find(':');
  if (colon == std::string_view::npos) {
    AddProblem(problems, position, "",
               "has no ':' (not shown: it may be part of a password); " + expected);
    return std::nullopt;
  }
  std::string_view name = raw.substr(0, colon);
  std::string_view rest = raw.substr(colon + 1);
  std::string_view password = rest;
  bool bad = false;
  std::string who;
  if (std::string name_problem = NameProblem(name); !name_problem.empty()) {
    AddProblem(problems, position, "", name_problem + " (not shown: it may be part of a password)");
    bad = true;
  } else {
    who = std::string(name);
    if (IsReservedLoginName(name)) {
      AddProblem(problems, position, who, "the name is reserved for a system account or group");
      bad = true;
    }
  }
  std::optional<std::string_view> uid_text;
  if (size_t second = rest.find(':'); second != std::string_view::npos) {
    password = rest.substr(0, second);
    uid_text = rest.substr(second + 1);
    if (uid_text->find(':') != std::string_view::npos) {
      AddProblem(problems, position, who, "has more than two ':'; passwords cannot contain ':'");
      return std::nullopt;
    }
  }
  if (std::string password_problem = PasswordProblem(password, name); !password_problem.empty()) {
    AddProblem(problems, position, who, password_problem);
    bad = true;
  }
  Entry entry;
  entry.position = position;
  if (uid_text && !ParseGivenUid(*uid_text, position, who, policy, entry, problems)) bad = true;
  if (bad) return std::nullopt;
  entry.name = std::string(name);
  entry.password = std::string(password);
  entry.password_is_hash = password[0] == kHashPrefix;
  return entry;
}

// Duplicates among the valid entries (a name listed twice, a uid given twice); the given uids.
std::map<std::uint32_t, const Entry*> CheckDuplicates(const std::vector<Entry>& entries,
                                                      std::vector<std::string>& problems) {
  std::map<std::string, size_t> first_by_name;
  std::map<std::uint32_t, const Entry*> explicit_uids;
  for (const Entry& e : entries) {
    auto [it, inserted] = first_by_name.emplace(e.name, e.position);
    if (!inserted) {
      AddProblem(problems, e.position, e.name,
                 fmt::format("the user is already listed in entry {}", it->second));
    }
    if (e.uid_given) {
      auto [uit, uinserted] = explicit_uids.emplace(e.uid, &e);
      if (!uinserted) {
        AddProblem(problems, e.position, e.name,
                   fmt::format("uid {} is already given to user '{}' in entry {}", e.uid,
                               uit->second->name, uit->second->position));
      }
    }
  }
  return explicit_uids;
}

// uids for entries without one: the previous uid if still free (first claim wins), else the
// next free one from kFirstAutoUid.
Result<std::vector<LocalUser>> AssignUids(const std::vector<Entry>& entries,
                                          const LocalUserPolicy& policy,
                                          const std::map<std::uint32_t, const Entry*>& given) {
  std::set<std::uint32_t> used = policy.taken_uids;
  for (const auto& [uid, entry] : given) used.insert(uid);
  std::map<std::string, std::uint32_t> kept;
  for (const Entry& e : entries) {
    if (e.uid_given) continue;
    auto prev = policy.previous_uids.find(e.name);
    if (prev == policy.previous_uids.end()) continue;
    std::uint32_t uid = prev->second;
    if (uid >= kMinUid && uid <= kMaxUid && !used.count(uid)) {
      used.insert(uid);
      kept[e.name] = uid;
    }
  }
  std::vector<LocalUser> users;
  std::uint32_t next = kFirstAutoUid;
  for (const Entry& e : entries) {
    LocalUser user;
    user.name = e.name;
    user.password = e.password;
    user.password_is_hash = e.password_is_hash;
    user.uid_given = e.uid_given;
    if (e.uid_given) {
      user.uid = e.uid;
    } else if (auto k = kept.find(e.name); k != kept.end()) {
      user.uid = k->second;
    } else {
      while (next <= kMaxUid && used.count(next)) ++next;
      if (next > kMaxUid) {
        return Fail(ErrorKind::kInvalidInput,
                    fmt::format("{}: entry {} (user '{}'): no free uid left in {}-{}",
                                kLocalUsersVar, e.position, e.name, kFirstAutoUid, kMaxUid));
      }
      user.uid = next;
      used.insert(next);
    }
    users.push_back(std::move(user));
  }
  return users;
}

}  // namespace

Result<std::vector<LocalUser>> ParseLocalUsers(std::string_view text,
                                               const LocalUserPolicy& policy) {
  const std::vector<std::string_view> raw_entries = SplitEntries(text);
  const std::string expected = fmt::format(
      "expected space-separated entries name:password or name:password:uid (uid {}-{}); "
      "passwords cannot contain ':' or whitespace",
      kMinUid, kMaxUid);
  RegisterSecrets(raw_entries);

  std::vector<std::string> problems;
  std::vector<Entry> entries;
  for (size_t i = 0; i < raw_entries.size(); ++i) {
    if (auto entry = ParseEntry(raw_entries[i], i + 1, policy, expected, problems)) {
      entries.push_back(std::move(*entry));
    }
  }
  const auto given = CheckDuplicates(entries, problems);
  if (!problems.empty()) {
    std::string joined;
    for (const auto& p : problems) {
      if (!joined.empty()) joined += "\n";
      joined += p;
    }
    return Fail(ErrorKind::kInvalidInput, joined);
  }
  return AssignUids(entries, policy, given);
}

std::vector<std::string> ClearTextPasswordNames(std::string_view text) {
  std::vector<std::string> names;
  auto users = ParseLocalUsers(text);
  if (!users) return names;
  for (const auto& u : *users) {
    if (!u.password.empty() && !u.password_is_hash) names.push_back(u.name);
  }
  return names;
}

std::string ClearTextPasswordWarning(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return fmt::format(
      "{} gives clear-text passwords for {}: root on every VM of this service can read them "
      "(OneGate's service document carries the portal's context); give crypt(5) hashes instead "
      "(mkpasswd -m yescrypt)",
      kLocalUsersVar, list);
}

}  // namespace onehpc::ood
