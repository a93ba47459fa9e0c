#include "roles/ood/accounts.h"

#include <crypt.h>
#include <fmt/format.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "common/log.h"
#include "roles/role.h"

namespace onehpc::ood {
namespace {

constexpr char kPasswdPath[] = "/etc/passwd";
constexpr char kGroupPath[] = "/etc/group";
constexpr char kShadowPath[] = "/etc/shadow";
constexpr char kHomeBase[] = "/home/";
// usermod --expiredate 1: expired since 1970-01-02 (days since the epoch, as in /etc/shadow).
constexpr char kDisabledExpiry[] = "1";

struct PasswdEntry {
  std::string name;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::string gecos;
  std::string home;
  std::string shell;
};

struct GroupEntry {
  std::string name;
  std::uint32_t gid = 0;
};

struct ShadowEntry {
  std::string hash;    // field 2: "!"..., "*", "$y$..."
  std::string expire;  // field 8: "" or days since the epoch
};

// The account databases under the root, by name.
struct AccountDb {
  std::map<std::string, PasswdEntry> users;
  std::map<std::string, GroupEntry> groups;
  std::map<std::string, ShadowEntry> shadow;
};

struct ManagedAccount {
  std::uint32_t uid = 0;
  bool disabled = false;
};
using ManagedAccounts = std::map<std::string, ManagedAccount>;

std::vector<std::string> SplitFields(std::string_view line) {
  auto views = ood::SplitFields(line, ':');
  return std::vector<std::string>(views.begin(), views.end());
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    // Blank lines, comments and NIS compat entries ("+", "-") are not accounts.
    if (line.empty() || line[0] == '#' || line[0] == '+' || line[0] == '-') continue;
    lines.push_back(line);
  }
  return lines;
}

std::optional<std::uint32_t> ParseId(std::string_view text) {
  if (text.empty() || text.size() > 10) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > 0xffffffffu) return std::nullopt;
  return static_cast<std::uint32_t>(v);
}

// A missing database reads as empty (a bare --root): the tools then create it or fail.
Result<std::string> ReadDbFile(const Files& files, const std::string& path) {
  auto text = files.ReadIfExists(path);
  if (!text) return Fail(text.error());
  return text->value_or("");
}

Result<AccountDb> ReadAccountDb(const Files& files, bool with_shadow) {
  AccountDb db;
  auto passwd = ReadDbFile(files, kPasswdPath);
  if (!passwd) return Fail(passwd.error());
  for (std::string_view line : Lines(*passwd)) {
    auto f = SplitFields(line);
    if (f.size() < 7) continue;
    auto uid = ParseId(f[2]);
    auto gid = ParseId(f[3]);
    if (!uid || !gid) continue;
    db.users.emplace(f[0], PasswdEntry{f[0], *uid, *gid, f[4], f[5], f[6]});
  }
  auto group = ReadDbFile(files, kGroupPath);
  if (!group) return Fail(group.error());
  for (std::string_view line : Lines(*group)) {
    auto f = SplitFields(line);
    if (f.size() < 3) continue;
    auto gid = ParseId(f[2]);
    if (!gid) continue;
    db.groups.emplace(f[0], GroupEntry{f[0], *gid});
  }
  if (with_shadow) {
    auto shadow = ReadDbFile(files, kShadowPath);
    if (!shadow) return Fail(shadow.error());
    for (std::string_view line : Lines(*shadow)) {
      auto f = SplitFields(line);
      if (f.size() < 2) continue;
      db.shadow[f[0]] = ShadowEntry{f[1], f.size() > 7 ? f[7] : ""};
    }
  }
  return db;
}

Result<ManagedAccounts> ReadState(const Files& files) {
  auto text = files.ReadIfExists(kAccountsStateFile);
  if (!text) return Fail(text.error());
  ManagedAccounts managed;
  if (!text->has_value()) return managed;
  const std::string expected =
      "expected {\"accounts\": [{\"name\": NAME, \"uid\": UID, \"disabled\": BOOL}, ...]} as "
      "one-hpc writes it; fix or remove the file by hand (the accounts themselves are kept)";
  auto bad = [&](const std::string& what) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("{}: {}; {}", kAccountsStateFile, what, expected));
  };
  nlohmann::json doc = nlohmann::json::parse(**text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad("not valid JSON");
  if (!doc.is_object() || !doc.contains("accounts") || !doc["accounts"].is_array()) {
    return bad("no \"accounts\" list");
  }
  for (const auto& a : doc["accounts"]) {
    if (!a.is_object() || !a.contains("name") || !a["name"].is_string() || !a.contains("uid") ||
        !a["uid"].is_number_unsigned() || !a.contains("disabled") || !a["disabled"].is_boolean()) {
      return bad("an entry of \"accounts\" is not {\"name\", \"uid\", \"disabled\"}");
    }
    std::string name = a["name"].get<std::string>();
    if (!IsValidLoginName(name)) return bad(fmt::format("'{}' is not a valid user name", name));
    auto uid = a["uid"].get<std::uint64_t>();
    if (uid > 0xffffffffu) return bad(fmt::format("user '{}': uid {} is too large", name, uid));
    managed[name] = ManagedAccount{static_cast<std::uint32_t>(uid), a["disabled"].get<bool>()};
  }
  return managed;
}

std::string RenderState(const ManagedAccounts& managed) {
  nlohmann::json accounts = nlohmann::json::array();
  for (const auto& [name, m] : managed) {  // std::map: sorted by name
    accounts.push_back({{"name", name}, {"uid", m.uid}, {"disabled", m.disabled}});
  }
  nlohmann::json doc = {{"accounts", accounts}};
  return doc.dump(2) + "\n";
}

// Does `hash` (an /etc/shadow password field without a lock '!') verify `password`?
bool PasswordMatches(const std::string& password, const std::string& hash) {
  // Locked, "no password" markers and hashes too short to be one never verify.
  if (hash.size() < 13 || hash[0] == '!' || hash[0] == '*') return false;
  auto data = std::make_unique<crypt_data>();  // value-initialised: zeroed, as crypt_r wants
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  // crypt_r returns a string starting with '*' (never a valid hash) on failure.
  bool ok = out != nullptr && out[0] != '*' && hash == out;
  explicit_bzero(data.get(), sizeof(crypt_data));
  return ok;
}

// The chpasswd stdin of one run: "name:password\n" lines, the secrets in them, and why.
struct PasswordBatch {
  std::string input;
  std::vector<std::string> secrets;
  std::vector<std::string> who;
  std::vector<std::string> why;
};

bool UnderRoot(const Files& files) { return !files.root().empty() && files.root() != "/"; }

// --prefix DIR for groupadd/useradd/usermod under a root prefix (they edit DIR/etc/*
// without a chroot); nothing on the real root.
std::vector<std::string> WithPrefix(const Files& files, std::vector<std::string> argv) {
  if (UnderRoot(files)) {
    argv.insert(argv.begin() + 1, {"--prefix", files.root()});
  }
  return argv;
}

Status RunTool(RoleEnv& env, std::vector<std::string> argv, std::string stdin_data = "",
               std::vector<std::string> secrets = {}) {
  Command c;
  c.argv = std::move(argv);
  c.timeout = Duration(kAccountCommandTimeoutMs);
  c.env = {{"LC_ALL", "C"}};
  c.stdin_data = std::move(stdin_data);
  c.secrets = std::move(secrets);
  auto r = RunChecked(env.runner, c);
  if (!r) return Fail(r.error());
  return Ok();
}

std::string Who(const std::string& name, std::uint32_t uid) {
  return fmt::format("{} (uid {})", name, uid);
}

std::string JoinLines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) {
    if (!out.empty()) out += "\n";
    out += l;
  }
  return out;
}

std::string JoinComma(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) {
    if (!out.empty()) out += ", ";
    out += i;
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::string FormatUserTable(const std::vector<LocalUser>& users) {
  std::vector<std::pair<std::string, std::uint32_t>> rows;
  rows.reserve(users.size());
  for (const auto& u : users) rows.emplace_back(u.name, u.uid);
  std::sort(rows.begin(), rows.end());
  std::string out;
  for (const auto& [name, uid] : rows) {
    if (!out.empty()) out += ' ';
    out += fmt::format("{}:{}", name, uid);
  }
  return out;
}

Result<std::vector<LocalUser>> ParseUserTable(std::string_view text) {
  std::vector<std::string> problems;
  std::vector<LocalUser> users;
  std::map<std::string, size_t> name_at;
  std::map<std::uint32_t, size_t> uid_at;
  const std::string expected =
      fmt::format("expected space-separated entries name:uid (uid {}-{})", kMinUid, kMaxUid);
  size_t position = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    pos = text.find_first_not_of(" \t\r\n", pos);
    if (pos == std::string_view::npos) break;
    size_t end = text.find_first_of(" \t\r\n", pos);
    std::string_view entry = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    pos = end == std::string_view::npos ? text.size() : end;
    ++position;
    auto problem = [&](const std::string& what) {
      problems.push_back(
          fmt::format("{}: entry {} '{}': {}", kAttrUserTable, position, std::string(entry), what));
    };
    size_t colon = entry.find(':');
    if (colon == std::string_view::npos || entry.find(':', colon + 1) != std::string_view::npos) {
      problem(expected);
      continue;
    }
    std::string name(entry.substr(0, colon));
    auto uid = ParseId(entry.substr(colon + 1));
    bool bad = false;
    if (!IsValidLoginName(name)) {
      problem("not a valid user name (a-z first, then a-z 0-9 _ -, at most 32, not reserved)");
      bad = true;
    }
    if (!uid || *uid < kMinUid || *uid > kMaxUid) {
      problem(fmt::format("the uid is not a number in {}-{}", kMinUid, kMaxUid));
      bad = true;
    }
    if (bad) continue;
    if (auto [it, inserted] = name_at.emplace(name, position); !inserted) {
      problem(fmt::format("user '{}' is already listed in entry {}", name, it->second));
      continue;
    }
    if (auto [it, inserted] = uid_at.emplace(*uid, position); !inserted) {
      problem(fmt::format("uid {} is already given in entry {}", *uid, it->second));
      continue;
    }
    LocalUser user;
    user.name = name;
    user.uid = *uid;
    user.uid_given = true;
    users.push_back(std::move(user));
  }
  if (!problems.empty()) return Fail(ErrorKind::kInvalidInput, JoinLines(problems));
  return users;
}

Result<std::map<std::string, std::uint32_t>> ReadUidRegister(const Files& files) {
  std::map<std::string, std::uint32_t> out;
  auto text = files.ReadIfExists(kUidRegisterFile);
  if (!text) return Fail(text.error());
  if (!text->has_value()) return out;
  auto entries = ParseUserTable(**text);
  if (!entries) {
    return Fail(ErrorKind::kInvalidInput,
                std::string(kUidRegisterFile) +
                    " (the uids given so far) is not a name:uid list; fix it by hand, never "
                    "delete it (its uids would be given again): " +
                    entries.error().message);
  }
  for (const auto& u : *entries) out[u.name] = u.uid;
  return out;
}

Status RecordUids(RoleEnv& env, const std::vector<LocalUser>& users) {
  auto reg = ReadUidRegister(env.files);
  if (!reg) return Fail(reg.error());
  std::map<std::string, std::uint32_t> merged = *reg;
  for (const auto& u : users) merged[u.name] = u.uid;
  if (merged == *reg && env.files.Exists(kUidRegisterFile)) {
    env.plan.Keep(kUidRegisterFile, "every uid given is recorded");
    return Ok();
  }
  std::vector<LocalUser> all;
  std::set<std::uint32_t> seen;
  for (const auto& [name, uid] : merged) {
    if (!seen.insert(uid).second) {
      return Fail(ErrorKind::kInvalidInput,
                  fmt::format("uid {} would be recorded for two names in {}; fix it by hand", uid,
                              kUidRegisterFile));
    }
    LocalUser u;
    u.name = name;
    u.uid = uid;
    all.push_back(std::move(u));
  }
  auto written = EnsureFile(env, kUidRegisterFile, FormatUserTable(all) + "\n", 0644, std::nullopt,
                            "the uids given so far, kept with the Slurm state so that a "
                            "replaced portal never gives a removed user's uid to a new one");
  if (!written) return Fail(written.error());
  return Ok();
}

Result<LocalUserPolicy> AccountPolicy(RoleEnv& env,
                                      const std::vector<std::string>& candidate_names) {
  auto db = ReadAccountDb(env.files, /*with_shadow=*/false);
  if (!db) return Fail(db.error());
  auto managed = ReadState(env.files);
  if (!managed) return Fail(managed.error());
  const std::set<std::string> candidates(candidate_names.begin(), candidate_names.end());

  LocalUserPolicy policy;
  for (const auto& [name, p] : db->users) {
    if (!candidates.count(name)) policy.taken_uids.insert(p.uid);
  }
  for (const auto& [name, g] : db->groups) {
    if (!candidates.count(name)) policy.taken_uids.insert(g.gid);
  }
  // Disabled accounts whose passwd entry is gone keep their uid too.
  for (const auto& [name, m] : *managed) {
    if (!candidates.count(name)) policy.taken_uids.insert(m.uid);
  }
  // Every uid a portal of this service ever gave (a replaced portal has no passwd entry and
  // no state file of the old one), and the owner of every home, are nobody else's.
  auto reg = ReadUidRegister(env.files);
  if (!reg) return Fail(reg.error());
  for (const auto& [name, uid] : *reg) {
    if (!candidates.count(name)) policy.taken_uids.insert(uid);
  }
  if (auto homes = env.files.List(ood::kHomesDir); homes) {
    for (const auto& entry : *homes) {
      if (candidates.count(entry)) continue;
      struct stat st {};
      std::string path = env.files.HostPath(kHomeBase + entry);
      if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid != 0) {
        policy.taken_uids.insert(st.st_uid);
      }
    }
  } else if (homes.error().kind != ErrorKind::kNotFound) {
    return Fail(homes.error());
  }
  for (const std::string& name : candidates) {
    if (auto p = db->users.find(name); p != db->users.end()) {
      policy.previous_uids[name] = p->second.uid;
      continue;
    }
    if (auto r = reg->find(name); r != reg->end()) {
      policy.previous_uids[name] = r->second;
      continue;
    }
    if (!IsValidLoginName(name)) continue;  // never build a path from a bad name
    struct stat st {};
    std::string home = env.files.HostPath(kHomeBase + name);
    if (::lstat(home.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      policy.previous_uids[name] = st.st_uid;
    }
  }
  return policy;
}

Result<std::vector<LocalUser>> ParsePortalUsers(RoleEnv& env, std::string_view text) {
  auto first = ParseLocalUsers(text);
  if (!first) return Fail(first.error());
  std::vector<std::string> names;
  for (const auto& u : *first) names.push_back(u.name);
  auto policy = AccountPolicy(env, names);
  if (!policy) return Fail(policy.error());
  auto users = ParseLocalUsers(text, *policy);
  if (!users) return users;
  if (auto clear = ClearTextPasswordNames(text); !clear.empty()) {
    log::Warn("{}", ClearTextPasswordWarning(clear));
  }
  return users;
}

namespace {

std::string UserProblem(const std::string& var, const std::string& name, const std::string& what) {
  return fmt::format("{}: user '{}': {}", var, name, what);
}

// The list itself (ParseLocalUsers and ParseUserTable already check it; this guards the API).
Status CheckUserList(const std::vector<LocalUser>& users, bool portal, const std::string& var) {
  std::vector<std::string> problems;
  std::map<std::uint32_t, std::string> uid_owner;
  std::set<std::string> seen;
  for (const auto& u : users) {
    if (!IsValidLoginName(u.name)) {
      problems.push_back(fmt::format("{}: an invalid user name (not shown)", var));
      continue;
    }
    if (!seen.insert(u.name).second) problems.push_back(UserProblem(var, u.name, "listed twice"));
    if (u.uid < kMinUid || u.uid > kMaxUid) {
      problems.push_back(UserProblem(
          var, u.name, fmt::format("uid {} is outside {}-{}", u.uid, kMinUid, kMaxUid)));
    }
    if (auto [it, inserted] = uid_owner.emplace(u.uid, u.name); !inserted) {
      problems.push_back(UserProblem(
          var, u.name, fmt::format("uid {} is also given to user '{}'", u.uid, it->second)));
    }
    if (portal && u.password.empty()) problems.push_back(UserProblem(var, u.name, "no password"));
  }
  if (!problems.empty()) return Fail(ErrorKind::kInvalidInput, JoinLines(problems));
  return Ok();
}

// Every problem with the existing accounts, before anything changes; the accounts adopted now
// (an existing, unmanaged account with the listed uid and gid) when there is none.
Result<std::vector<std::string>> CheckExistingAccounts(const AccountDb& db,
                                                       const ManagedAccounts& managed,
                                                       const std::vector<LocalUser>& users,
                                                       const std::string& var) {
  std::map<std::uint32_t, std::string> user_by_uid;
  for (const auto& [name, p] : db.users) user_by_uid.emplace(p.uid, name);
  std::map<std::uint32_t, std::string> group_by_gid;
  for (const auto& [name, g] : db.groups) group_by_gid.emplace(g.gid, name);
  std::vector<std::string> problems, adopted;
  for (const auto& u : users) {
    const bool is_managed = managed.count(u.name) > 0;
    const std::string fix = fmt::format(
        "one-hpc never renumbers an account (files in the NFS homes would change owner) and "
        "adopts an existing one only with uid {0} and primary gid {0}: give the user its "
        "existing uid in the list, or rename or remove that account by hand",
        u.uid);
    if (auto p = db.users.find(u.name); p != db.users.end()) {
      if (p->second.uid != u.uid || p->second.gid != u.gid()) {
        problems.push_back(UserProblem(
            var, u.name,
            fmt::format("{} account '{}' exists with uid {} and primary gid {}, the list wants "
                        "uid {}; {}",
                        is_managed ? "the one-hpc managed" : "an (unmanaged)", u.name,
                        p->second.uid, p->second.gid, u.uid, fix)));
        continue;
      }
      if (!is_managed) adopted.push_back(Who(u.name, u.uid));
    } else if (auto o = user_by_uid.find(u.uid); o != user_by_uid.end()) {
      problems.push_back(
          UserProblem(var, u.name,
                      fmt::format("uid {} is already used by the account '{}'", u.uid, o->second)));
    }
    if (auto g = db.groups.find(u.name); g != db.groups.end()) {
      if (g->second.gid != u.gid()) {
        problems.push_back(UserProblem(
            var, u.name,
            fmt::format("a group '{}' exists with gid {}, the user's group needs gid {}; {}",
                        u.name, g->second.gid, u.gid(), fix)));
      }
    } else if (auto o = group_by_gid.find(u.gid()); o != group_by_gid.end()) {
      problems.push_back(UserProblem(
          var, u.name,
          fmt::format("gid {} (the user's group: gid = uid) is already used by the group '{}'",
                      u.gid(), o->second)));
    }
  }
  if (!problems.empty()) return Fail(ErrorKind::kInvalidInput, JoinLines(problems));
  return adopted;
}

// The new state, written before any account changes: every listed user enabled, every other
// managed account disabled.
Status WriteManagedState(RoleEnv& env, const ManagedAccounts& managed,
                         const std::vector<LocalUser>& users, const std::set<std::string>& listed,
                         const std::vector<std::string>& adopted) {
  ManagedAccounts next = managed;
  for (auto& [name, m] : next) {
    if (!listed.count(name)) m.disabled = true;
  }
  for (const auto& u : users) next[u.name] = ManagedAccount{u.uid, false};
  std::vector<std::string> enabled_names, disabled_names;
  for (const auto& [name, m] : next) (m.disabled ? disabled_names : enabled_names).push_back(name);
  std::string state_why =
      fmt::format("the accounts one-hpc manages, the only ones it ever changes: {}; disabled: {}",
                  JoinComma(enabled_names), JoinComma(disabled_names));
  if (!adopted.empty()) state_why += "; adopted now: " + JoinComma(adopted);
  auto s = EnsureFile(env, kAccountsStateFile, RenderState(next), 0600, std::nullopt, state_why);
  if (!s) return Fail(s.error());
  return Ok();
}

// Missing groups and users are created; `db` then holds what the tools made.
Status CreateMissingAccounts(RoleEnv& env, const std::vector<LocalUser>& users,
                             const std::string& var, AccountDb& db,
                             std::vector<std::string>& created) {
  for (const auto& u : users) {
    const std::string who = Who(u.name, u.uid);
    const std::string uid = std::to_string(u.uid);
    if (!db.groups.count(u.name)) {
      auto s = env.plan.Do(
          fmt::format("create group {} (gid {})", u.name, u.gid()),
          fmt::format("the primary group of the {} user {}", kLocalUsersVar, who), [&]() {
            return RunTool(env, WithPrefix(env.files, {"groupadd", "--gid", uid, u.name}));
          });
      if (!s) return s;
    }
    if (!db.users.count(u.name)) {
      auto s = env.plan.Do(
          fmt::format("create user {}", who),
          fmt::format("listed in {}; home {} is made at first login, not now", var, u.home()),
          [&]() {
            return RunTool(
                env, WithPrefix(env.files, {"useradd", "--uid", uid, "--gid", uid,
                                            "--no-create-home", "--home-dir", u.home(), "--shell",
                                            kAccountShell, "--comment", kAccountComment, u.name}));
          });
      if (!s) return s;
      created.push_back(who);
    }
  }
  if (created.empty()) return Ok();
  if (env.plan.dry_run()) {
    // What useradd makes: the entry asked for, with a locked password ("!") and no expiry.
    for (const auto& u : users) {
      if (db.users.count(u.name)) continue;
      db.users[u.name] =
          PasswdEntry{u.name, u.uid, u.gid(), kAccountComment, u.home(), kAccountShell};
      db.shadow[u.name] = ShadowEntry{"!", ""};
    }
    return Ok();
  }
  auto reread = ReadAccountDb(env.files, /*with_shadow=*/true);
  if (!reread) return Fail(reread.error());
  db = std::move(*reread);
  return Ok();
}

// What usermod must change on a listed account (its options, and why in words), and whether its
// password must be set: the portal's accounts carry the listed password, a worker's are locked.
struct AccountChange {
  std::vector<std::string> opts;
  std::vector<std::string> reasons;
  bool set_password = false;
};

AccountChange ListedAccountChange(const PasswdEntry& p, const ShadowEntry& sh, const LocalUser& u,
                                  bool portal) {
  AccountChange c;
  if (p.gecos != kAccountComment) {
    c.opts.insert(c.opts.end(), {"--comment", kAccountComment});
    c.reasons.push_back("comment '" + p.gecos + "'");
  }
  if (p.home != u.home()) {
    c.opts.insert(c.opts.end(), {"--home", u.home()});  // no --move-home: homes are never moved
    c.reasons.push_back("home '" + p.home + "'");
  }
  if (p.shell != kAccountShell) {
    c.opts.insert(c.opts.end(), {"--shell", kAccountShell});
    c.reasons.push_back("shell '" + p.shell + "'");
  }
  if (!sh.expire.empty()) {
    c.opts.insert(c.opts.end(), {"--expiredate", ""});
    c.reasons.push_back(sh.expire == kDisabledExpiry ? "disabled (expired) and listed again"
                                                     : "expiry date " + sh.expire);
  }
  const bool locked = !sh.hash.empty() && sh.hash[0] == '!';
  if (portal) {
    const std::string current = locked ? sh.hash.substr(1) : sh.hash;
    // A given hash is installed as it is: it is current when it is the very same text.
    const bool verifies =
        u.password_is_hash ? current == u.password : PasswordMatches(u.password, current);
    if (locked && verifies) {
      c.opts.push_back("--unlock");
      c.reasons.push_back("password locked");
    }
    c.set_password = !verifies;
  } else if (!locked) {
    c.opts.push_back("--lock");
    c.reasons.push_back("password not locked on a worker");
  }
  return c;
}

// Clear-text passwords are hashed by chpasswd (yescrypt); given hashes are installed as they
// are (--encrypted). Both on stdin only.
Status SetPasswords(RoleEnv& env, PasswordBatch& clear, PasswordBatch& hashed) {
  for (PasswordBatch* batch : {&clear, &hashed}) {
    if (batch->input.empty()) continue;
    const bool encrypted = batch == &hashed;
    std::vector<std::string> argv = {"chpasswd"};
    if (UnderRoot(env.files)) argv.insert(argv.end(), {"--root", env.files.root()});
    if (encrypted) {
      argv.push_back("--encrypted");
    } else {
      argv.insert(argv.end(), {"--crypt-method", "YESCRYPT"});
    }
    auto s = env.plan.Do(fmt::format("set the {} of {} (chpasswd{}, on stdin)",
                                     encrypted ? "given password hash" : "password",
                                     JoinComma(batch->who), encrypted ? " --encrypted" : ""),
                         JoinComma(batch->why),
                         [&]() { return RunTool(env, argv, batch->input, batch->secrets); });
    explicit_bzero(batch->input.data(), batch->input.size());
    if (!s) return s;
  }
  return Ok();
}

// The listed accounts: fields, expiry, password lock; then the passwords.
Status UpdateListedAccounts(RoleEnv& env, const std::vector<LocalUser>& users, bool portal,
                            const std::string& var, const AccountDb& db,
                            std::vector<std::string>& changed,
                            std::vector<std::string>& passwords) {
  PasswordBatch clear, hashed;
  for (const auto& u : users) {
    const std::string who = Who(u.name, u.uid);
    auto p = db.users.find(u.name);
    if (p == db.users.end()) {
      return Fail(ErrorKind::kInternal,
                  fmt::format("{}: user {} is not in {} after useradd", var, who, kPasswdPath));
    }
    ShadowEntry sh;
    if (auto s = db.shadow.find(u.name); s != db.shadow.end()) {
      sh = s->second;
    } else {
      sh.hash = "!";  // no shadow entry: no usable password
    }
    AccountChange c = ListedAccountChange(p->second, sh, u, portal);
    if (!c.opts.empty()) {
      std::vector<std::string> argv = {"usermod"};
      argv.insert(argv.end(), c.opts.begin(), c.opts.end());
      argv.push_back(u.name);
      std::string what = fmt::format("update user {}: {}", who, log::QuoteArgv(argv));
      auto s = env.plan.Do(what, "now: " + JoinComma(c.reasons),
                           [&]() { return RunTool(env, WithPrefix(env.files, argv)); });
      if (!s) return s;
      changed.push_back(who);
    }
    if (c.set_password) {
      PasswordBatch& batch = u.password_is_hash ? hashed : clear;
      batch.input += u.name + ":" + u.password + "\n";
      batch.secrets.push_back(u.password);
      batch.who.push_back(who);
      std::string why = "no password yet";
      if (sh.hash != "!" && !sh.hash.empty()) {
        why = u.password_is_hash ? "the current hash is not the hash in " + var
                                 : "the current hash does not verify the password in " + var;
      }
      batch.why.push_back(u.name + ": " + why);
      passwords.push_back(who);
    }
  }
  return SetPasswords(env, clear, hashed);
}

// Managed accounts no longer listed: locked and expired, never deleted.
Status DisableUnlistedAccounts(RoleEnv& env, const ManagedAccounts& managed,
                               const std::set<std::string>& listed, const AccountDb& db,
                               const std::string& var, std::vector<std::string>& disabled) {
  for (const auto& entry : managed) {
    // A named copy: lambdas below capture it (clang 14 cannot capture structured bindings).
    const std::string& name = entry.first;
    const auto& m = entry.second;
    if (listed.count(name)) continue;
    const std::string who = Who(name, m.uid);
    auto p = db.users.find(name);
    if (p == db.users.end()) {
      env.plan.Keep("disabled user " + who, "removed from " + var + "; the account is gone");
      continue;
    }
    if (p->second.uid != m.uid) {
      log::Warn(
          "{}: user '{}' was removed from the list, but the account of that name now has "
          "uid {} (one-hpc made uid {}): not one-hpc's, left alone",
          var, name, p->second.uid, m.uid);
      continue;
    }
    ShadowEntry sh;
    if (auto s = db.shadow.find(name); s != db.shadow.end()) sh = s->second;
    if (!sh.hash.empty() && sh.hash[0] == '!' && sh.expire == kDisabledExpiry) {
      env.plan.Keep("disabled user " + who, "removed from " + var + "; already locked and expired");
      continue;
    }
    auto s = env.plan.Do(
        fmt::format("disable user {} (lock and expire; the account and its home are kept)", who),
        "no longer listed in " + var, [&]() {
          return RunTool(env, WithPrefix(env.files, {"usermod", "--lock", "--expiredate",
                                                     kDisabledExpiry, name}));
        });
    if (!s) return s;
    disabled.push_back(who);
  }
  return Ok();
}

}  // namespace

Status EnsureLocalAccounts(RoleEnv& env, const std::vector<LocalUser>& users, AccountMode mode) {
  const bool portal = mode == AccountMode::kPortal;
  const std::string var = portal
                              ? std::string(kLocalUsersVar)
                              : fmt::format("{} (the portal's {})", kLocalUsersVar, kAttrUserTable);
  if (auto s = CheckUserList(users, portal, var); !s) return s;
  auto db = ReadAccountDb(env.files, /*with_shadow=*/true);
  if (!db) return Fail(db.error());
  auto managed = ReadState(env.files);
  if (!managed) return Fail(managed.error());
  auto adopted = CheckExistingAccounts(*db, *managed, users, var);
  if (!adopted) return Fail(adopted.error());
  std::set<std::string> listed;
  for (const auto& u : users) listed.insert(u.name);
  if (auto s = WriteManagedState(env, *managed, users, listed, *adopted); !s) return s;

  std::vector<std::string> created, changed, passwords, disabled;
  if (auto s = CreateMissingAccounts(env, users, var, *db, created); !s) return s;
  if (auto s = UpdateListedAccounts(env, users, portal, var, *db, changed, passwords); !s) return s;
  if (auto s = DisableUnlistedAccounts(env, *managed, listed, *db, var, disabled); !s) return s;

  if (created.empty() && changed.empty() && passwords.empty() && disabled.empty()) {
    log::Info("OOD accounts: {} listed, all up to date", users.size());
  } else {
    log::Info("OOD accounts{}: created: {}; updated: {}; password set: {}; disabled: {}",
              env.plan.dry_run() ? " (plan only)" : "", JoinComma(created), JoinComma(changed),
              JoinComma(passwords), JoinComma(disabled));
  }
  return Ok();
}

}  // namespace onehpc::ood
