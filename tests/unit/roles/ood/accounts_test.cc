// The local accounts of the Open OnDemand service: creation, idempotence, adoption and
// refusal of existing accounts, removal and re-adding, worker locks, the published user
// table, the uid policy, and passwords that never reach a command line or a log line.
// groupadd/useradd/usermod/chpasswd are faked by FakeShadowTools, which edits the
// passwd/group/shadow files under the test root the way shadow 4.13 does.
#include "roles/ood/accounts.h"

#include <crypt.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "context/settings.h"
#include "roles/plan.h"
#include "roles/role.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc::ood {
namespace {

namespace fs = std::filesystem;
using fakes::Exit;
using fakes::FakeMachine;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPasswd[] =
    "root:x:0:0:root:/root:/bin/bash\n"
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    "eessi:x:999:999::/home/eessi:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
constexpr char kGroup[] =
    "root:x:0:\n"
    "daemon:x:1:\n"
    "users:x:100:\n"
    "eessi:x:999:\n"
    "nogroup:x:65534:\n";
constexpr char kShadow[] =
    "root:*:19000:0:99999:7:::\n"
    "daemon:*:19000:0:99999:7:::\n"
    "eessi:!:19000:0:99999:7:::\n"
    "nobody:*:19000:0:99999:7:::\n";

std::string Hash(const std::string& password) {
  crypt_data data{};
  const char* out = crypt_r(password.c_str(), "$6$onehpctest$", &data);
  return out ? out : "";
}

// groupadd, useradd, usermod and chpasswd of shadow 4.13, on the files under the root.
class FakeShadowTools {
 public:
  explicit FakeShadowTools(FakeMachine& m) : m_(m) {
    m.runner.On({"groupadd"}, [this](const Command& c) { return GroupAdd(c); });
    m.runner.On({"useradd"}, [this](const Command& c) { return UserAdd(c); });
    m.runner.On({"usermod"}, [this](const Command& c) { return UserMod(c); });
    m.runner.On({"chpasswd"}, [this](const Command& c) { return ChPasswd(c); });
  }

 private:
  using Table = std::vector<std::vector<std::string>>;
  Table Load(const std::string& path) {
    Table t;
    std::string text = m_.Read(path);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      std::string line = text.substr(pos, nl - pos);
      pos = nl == std::string::npos ? text.size() : nl + 1;
      std::vector<std::string> f;
      size_t s = 0;
      while (true) {
        size_t c = line.find(':', s);
        f.push_back(line.substr(s, c == std::string::npos ? c : c - s));
        if (c == std::string::npos) break;
        s = c + 1;
      }
      t.push_back(f);
    }
    return t;
  }
  void Save(const std::string& path, const Table& t) {
    std::string out;
    for (const auto& f : t) {
      for (size_t i = 0; i < f.size(); ++i) out += (i ? ":" : "") + f[i];
      out += "\n";
    }
    m_.Write(path, out);
  }
  static std::vector<std::string>* Find(Table& t, const std::string& name) {
    for (auto& f : t) {
      if (f[0] == name) return &f;
    }
    return nullptr;
  }
  // Options after argv[0] as a map (flags map to ""); the last argument is the name.
  std::map<std::string, std::string> Options(const Command& c, const char* root_flag,
                                             const std::set<std::string>& flags) {
    std::map<std::string, std::string> o;
    for (size_t i = 1; i + 1 < c.argv.size(); ++i) {
      if (flags.count(c.argv[i])) {
        o[c.argv[i]] = "";
      } else {
        o[c.argv[i]] = c.argv.at(i + 1);
        ++i;
      }
    }
    EXPECT_EQ(o[root_flag], m_.root) << log::QuoteArgv(c.argv);
    return o;
  }

  ProcessResult GroupAdd(const Command& c) {
    auto o = Options(c, "--prefix", {});
    Table g = Load("/etc/group");
    if (Find(g, c.argv.back())) return Exit(9, "", "groupadd: group already exists\n");
    for (const auto& f : g) {
      if (f[2] == o["--gid"]) return Exit(4, "", "groupadd: GID is not unique\n");
    }
    g.push_back({c.argv.back(), "x", o["--gid"], ""});
    Save("/etc/group", g);
    return Exit(0);
  }
  ProcessResult UserAdd(const Command& c) {
    auto o = Options(c, "--prefix", {"--no-create-home"});
    EXPECT_TRUE(o.count("--no-create-home"));
    Table p = Load("/etc/passwd");
    if (Find(p, c.argv.back())) return Exit(9, "", "useradd: user already exists\n");
    for (const auto& f : p) {
      if (f[2] == o["--uid"]) return Exit(4, "", "useradd: UID is not unique\n");
    }
    p.push_back({c.argv.back(), "x", o["--uid"], o["--gid"], o["--comment"], o["--home-dir"],
                 o["--shell"]});
    Save("/etc/passwd", p);
    Table s = Load("/etc/shadow");
    s.push_back({c.argv.back(), "!", "20000", "0", "99999", "7", "", "", ""});
    Save("/etc/shadow", s);
    return Exit(0);
  }
  ProcessResult UserMod(const Command& c) {
    auto o = Options(c, "--prefix", {"--lock", "--unlock"});
    Table p = Load("/etc/passwd");
    Table s = Load("/etc/shadow");
    auto* pf = Find(p, c.argv.back());
    auto* sf = Find(s, c.argv.back());
    if (!pf || !sf) return Exit(6, "", "usermod: user does not exist\n");
    if (o.count("--comment")) (*pf)[4] = o["--comment"];
    if (o.count("--home")) (*pf)[5] = o["--home"];
    if (o.count("--shell")) (*pf)[6] = o["--shell"];
    if (o.count("--lock") && (*sf)[1][0] != '!') (*sf)[1] = "!" + (*sf)[1];
    if (o.count("--unlock") && (*sf)[1][0] == '!' && (*sf)[1].size() > 1) {
      (*sf)[1] = (*sf)[1].substr(1);
    }
    if (o.count("--expiredate")) (*sf)[7] = o["--expiredate"];
    Save("/etc/passwd", p);
    Save("/etc/shadow", s);
    return Exit(0);
  }
  // --crypt-method YESCRYPT hashes each password; --encrypted stores each given hash as it is.
  ProcessResult ChPasswd(const Command& c) {
    auto o = Options(c, "--root", {"--encrypted"});
    EXPECT_EQ(c.argv.at(1), "--root");
    const bool encrypted = c.argv.back() == "--encrypted";
    EXPECT_NE(encrypted, o.count("--crypt-method") > 0) << log::QuoteArgv(c.argv);
    Table s = Load("/etc/shadow");
    size_t pos = 0;
    while (pos < c.stdin_data.size()) {
      size_t nl = c.stdin_data.find('\n', pos);
      std::string line = c.stdin_data.substr(pos, nl - pos);
      pos = nl + 1;
      size_t colon = line.find(':');
      auto* sf = Find(s, line.substr(0, colon));
      if (!sf) return Exit(1, "", "chpasswd: line 1: user does not exist\n");
      (*sf)[1] = encrypted ? line.substr(colon + 1) : Hash(line.substr(colon + 1));
    }
    Save("/etc/shadow", s);
    return Exit(0);
  }

  FakeMachine& m_;
};

class AccountsTest : public ::testing::Test {
 protected:
  AccountsTest() : tools_(m_) {
    m_.Write("/etc/passwd", kPasswd);
    m_.Write("/etc/group", kGroup);
    m_.Write("/etc/shadow", kShadow);
    auto resolved = Settings::Resolve({}, {});
    EXPECT_TRUE(resolved);
    settings_ = std::make_unique<Settings>(std::move(*resolved));
  }
  void TearDown() override { log::ClearSecrets(); }

  struct Run {
    std::unique_ptr<Plan> plan;
    std::unique_ptr<RoleEnv> env;
    Status status;
    size_t commands = 0;               // commands run by this call
    std::vector<std::string> changes;  // plan actions that are not keeps
  };
  std::unique_ptr<RoleEnv> Env(Plan& plan) {
    return std::make_unique<RoleEnv>(
        RoleEnv::From(context_, *settings_, nullptr,
                      SystemAdapters{m_.runner, *m_.files, m_.systemd, block_devices_, mounts_,
                                     m_.clock, m_.http},
                      plan, nullptr));
  }
  Run Ensure(const std::vector<LocalUser>& users, AccountMode mode = AccountMode::kPortal,
             PlanMode plan_mode = PlanMode::kApply) {
    Run r;
    r.plan = std::make_unique<Plan>(plan_mode);
    r.env = Env(*r.plan);
    size_t before = m_.runner.commands().size();
    r.status = EnsureLocalAccounts(*r.env, users, mode);
    r.commands = m_.runner.commands().size() - before;
    for (const auto& a : r.plan->actions()) {
      if (a.outcome != PlannedAction::Outcome::kKept) r.changes.push_back(a.what);
    }
    return r;
  }
  Run MustEnsure(const std::vector<LocalUser>& users, AccountMode mode = AccountMode::kPortal) {
    Run r = Ensure(users, mode);
    EXPECT_TRUE(r.status) << (r.status ? "" : r.status.error().message) << "\n" << r.plan->Render();
    return r;
  }
  static LocalUser User(const std::string& name, std::uint32_t uid,
                        const std::string& password = "") {
    LocalUser u;
    u.name = name;
    u.uid = uid;
    u.uid_given = true;
    u.password = password.empty() ? "pw-of-" + name + "-123" : password;
    return u;
  }
  std::string PasswdLine(const std::string& name) const { return Line("/etc/passwd", name); }
  std::string ShadowLine(const std::string& name) const { return Line("/etc/shadow", name); }
  std::string Line(const std::string& path, const std::string& name) const {
    std::string text = m_.Read(path);
    size_t pos = text.find("\n" + name + ":");
    if (text.rfind(name + ":", 0) == 0) {
      pos = 0;
    } else if (pos == std::string::npos) {
      return "";
    } else {
      ++pos;
    }
    return text.substr(pos, text.find('\n', pos) - pos);
  }
  std::vector<std::string> ShadowFields(const std::string& name) const {
    std::vector<std::string> f;
    std::string line = ShadowLine(name);
    size_t s = 0;
    while (true) {
      size_t c = line.find(':', s);
      f.push_back(line.substr(s, c == std::string::npos ? c : c - s));
      if (c == std::string::npos) break;
      s = c + 1;
    }
    return f;
  }
  bool Verifies(const std::string& name, const std::string& password) const {
    std::string hash = ShadowFields(name).at(1);
    return !hash.empty() && hash[0] != '!' && Hash(password) == hash;
  }
  std::string State() const { return m_.Read(kAccountsStateFile); }
  std::vector<std::string> ArgvsFrom(size_t first) const {
    auto all = m_.runner.Argvs();
    return std::vector<std::string>(all.begin() + first, all.end());
  }

  FakeMachine m_;
  FakeShadowTools tools_;
  LoadedContext context_;
  std::unique_ptr<Settings> settings_;
  fakes::FakeBlockDevices block_devices_;
  fakes::FakeMounts mounts_;
};

TEST_F(AccountsTest, CreatesGroupsUsersAndPasswordsOnThePortal) {
  auto r = MustEnsure({User("alice", 10001), User("bob", 10002)});
  const std::string R = m_.root;
  EXPECT_THAT(m_.runner.Argvs(),
              ElementsAre("groupadd --prefix " + R + " --gid 10001 alice",
                          "useradd --prefix " + R +
                              " --uid 10001 --gid 10001 --no-create-home --home-dir /home/alice "
                              "--shell /bin/bash --comment 'one-hpc OOD user' alice",
                          "groupadd --prefix " + R + " --gid 10002 bob",
                          "useradd --prefix " + R +
                              " --uid 10002 --gid 10002 --no-create-home --home-dir /home/bob "
                              "--shell /bin/bash --comment 'one-hpc OOD user' bob",
                          "chpasswd --root " + R + " --crypt-method YESCRYPT"));
  EXPECT_EQ(PasswdLine("alice"), "alice:x:10001:10001:one-hpc OOD user:/home/alice:/bin/bash");
  EXPECT_EQ(Line("/etc/group", "bob"), "bob:x:10002:");
  EXPECT_TRUE(Verifies("alice", "pw-of-alice-123"));
  EXPECT_TRUE(Verifies("bob", "pw-of-bob-123"));
  EXPECT_FALSE(m_.Exists("/home/alice"));  // homes are made at first login
  // Every command has a timeout; the passwords go on chpasswd's stdin, registered as secrets.
  for (const auto& c : m_.runner.commands()) EXPECT_GT(c.timeout.count(), 0);
  const Command& chpasswd = m_.runner.commands().back();
  EXPECT_EQ(chpasswd.stdin_data, "alice:pw-of-alice-123\nbob:pw-of-bob-123\n");
  EXPECT_THAT(chpasswd.secrets, ElementsAre("pw-of-alice-123", "pw-of-bob-123"));
  EXPECT_EQ(
      State(),
      "{\n  \"accounts\": [\n"
      "    {\n      \"disabled\": false,\n      \"name\": \"alice\",\n      \"uid\": 10001\n    "
      "},\n"
      "    {\n      \"disabled\": false,\n      \"name\": \"bob\",\n      \"uid\": 10002\n    }\n"
      "  ]\n}\n");
  struct stat st {};
  ASSERT_EQ(::stat(m_.files->HostPath(kAccountsStateFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(AccountsTest, SecondRunIssuesNoCommand) {
  std::vector<LocalUser> users = {User("alice", 10001), User("bob", 10002)};
  MustEnsure(users);
  std::string passwd = m_.Read("/etc/passwd"), shadow = m_.Read("/etc/shadow"), state = State();
  auto again = MustEnsure(users);
  EXPECT_EQ(again.commands, 0u) << again.plan->Render();
  EXPECT_TRUE(again.changes.empty()) << again.plan->Render();
  EXPECT_EQ(m_.Read("/etc/passwd"), passwd);
  EXPECT_EQ(m_.Read("/etc/shadow"), shadow);
  EXPECT_EQ(State(), state);
}

TEST_F(AccountsTest, DryRunRunsNothingAndWritesNothing) {
  auto r = Ensure({User("alice", 10001)}, AccountMode::kPortal, PlanMode::kDryRun);
  ASSERT_TRUE(r.status) << r.status.error().message;
  EXPECT_EQ(r.commands, 0u);
  EXPECT_FALSE(m_.Exists(kAccountsStateFile));
  std::string plan = r.plan->Render();
  EXPECT_THAT(plan, HasSubstr("create group alice (gid 10001)"));
  EXPECT_THAT(plan, HasSubstr("create user alice (uid 10001)"));
  EXPECT_THAT(plan, HasSubstr("set the password of alice (uid 10001)"));
  EXPECT_THAT(plan, Not(HasSubstr("pw-of-alice")));
}

TEST_F(AccountsTest, AdoptsAMatchingUnmanagedAccount) {
  m_.Write("/etc/passwd",
           std::string(kPasswd) + "alice:x:10001:10001:one-hpc OOD user:/home/alice:/bin/bash\n");
  m_.Write("/etc/group", std::string(kGroup) + "alice:x:10001:\n");
  m_.Write("/etc/shadow",
           std::string(kShadow) + "alice:" + Hash("pw-of-alice-123") + ":20000:0:99999:7:::\n");
  auto r = MustEnsure({User("alice", 10001)});
  EXPECT_EQ(r.commands, 0u) << r.plan->Render();
  EXPECT_THAT(State(), HasSubstr("\"name\": \"alice\""));
  EXPECT_THAT(r.plan->Render(), HasSubstr("adopted now: alice (uid 10001)"));
}

TEST_F(AccountsTest, AdoptedAccountIsMadeToMatch) {
  m_.Write("/etc/passwd", std::string(kPasswd) + "alice:x:10001:10001::/srv/alice:/bin/sh\n");
  m_.Write("/etc/group", std::string(kGroup) + "alice:x:10001:\n");
  m_.Write("/etc/shadow", std::string(kShadow) + "alice:!:20000:0:99999:7:::\n");
  MustEnsure({User("alice", 10001)});
  EXPECT_THAT(ArgvsFrom(0),
              ElementsAre("usermod --prefix " + m_.root +
                              " --comment 'one-hpc OOD user' --home /home/alice --shell "
                              "/bin/bash alice",
                          "chpasswd --root " + m_.root + " --crypt-method YESCRYPT"));
  EXPECT_EQ(PasswdLine("alice"), "alice:x:10001:10001:one-hpc OOD user:/home/alice:/bin/bash");
  EXPECT_TRUE(Verifies("alice", "pw-of-alice-123"));
}

TEST_F(AccountsTest, RefusesAnUnmanagedAccountWithAnotherUid) {
  m_.Write("/etc/passwd", std::string(kPasswd) + "alice:x:1000:1000::/home/alice:/bin/bash\n");
  m_.Write("/etc/group", std::string(kGroup) + "alice:x:1000:\n");
  auto r = Ensure({User("alice", 10001), User("bob", 10002)});
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(r.status.error().message,
              HasSubstr("ONEAPP_AUTH_LOCAL_USERS: user 'alice': an (unmanaged) account 'alice' "
                        "exists with uid 1000 and primary gid 1000, the list wants uid 10001"));
  EXPECT_EQ(r.commands, 0u);  // nothing changes, not even for bob
  EXPECT_FALSE(m_.Exists(kAccountsStateFile));
}

TEST_F(AccountsTest, RefusesAnUnmanagedAccountWithAnotherPrimaryGroup) {
  m_.Write("/etc/passwd", std::string(kPasswd) + "alice:x:10001:100::/home/alice:/bin/bash\n");
  auto r = Ensure({User("alice", 10001)});
  ASSERT_FALSE(r.status);
  EXPECT_THAT(r.status.error().message, HasSubstr("exists with uid 10001 and primary gid 100"));
  EXPECT_EQ(r.commands, 0u);
}

TEST_F(AccountsTest, NeverRenumbersAManagedAccount) {
  MustEnsure({User("alice", 10001)});
  size_t before = m_.runner.commands().size();
  auto r = Ensure({User("alice", 10005)});
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(r.status.error().message,
              HasSubstr("ONEAPP_AUTH_LOCAL_USERS: user 'alice': the one-hpc managed account "
                        "'alice' exists with uid 10001 and primary gid 10001, the list wants uid "
                        "10005; one-hpc never renumbers an account"));
  EXPECT_EQ(m_.runner.commands().size(), before);
}

TEST_F(AccountsTest, RefusesUidsAndGidsOfOtherAccounts) {
  m_.Write("/etc/group", std::string(kGroup) + "staff2:x:10002:\n");
  auto r = Ensure({User("alice", 999), User("bob", 10002)});
  ASSERT_FALSE(r.status);
  // 999 is outside the range: caught first, on its own.
  EXPECT_THAT(r.status.error().message, HasSubstr("user 'alice': uid 999 is outside 1000-60000"));
  r = Ensure({User("alice", 10002)});
  ASSERT_FALSE(r.status);
  EXPECT_THAT(r.status.error().message,
              HasSubstr("user 'alice': gid 10002 (the user's group: gid = uid) is already used by "
                        "the group 'staff2'"));
  m_.Write("/etc/passwd", std::string(kPasswd) + "carl:x:10003:10003::/home/carl:/bin/sh\n");
  r = Ensure({User("alice", 10003)});
  ASSERT_FALSE(r.status);
  EXPECT_THAT(r.status.error().message,
              HasSubstr("user 'alice': uid 10003 is already used by the account 'carl'"));
  EXPECT_EQ(m_.runner.commands().size(), 0u);
}

TEST_F(AccountsTest, RemovedUsersAreLockedAndExpiredNotDeleted) {
  MustEnsure({User("alice", 10001), User("bob", 10002)});
  size_t before = m_.runner.commands().size();
  auto r = MustEnsure({User("alice", 10001)});
  EXPECT_THAT(ArgvsFrom(before),
              ElementsAre("usermod --prefix " + m_.root + " --lock --expiredate 1 bob"));
  EXPECT_THAT(r.changes, ElementsAre(std::string("write ") + kAccountsStateFile,
                                     HasSubstr("disable user bob (uid 10002)")));
  auto f = ShadowFields("bob");
  EXPECT_EQ(f.at(1), "!" + Hash("pw-of-bob-123"));
  EXPECT_EQ(f.at(7), "1");
  EXPECT_THAT(PasswdLine("bob"), HasSubstr("bob:x:10002:10002:"));  // still there
  EXPECT_THAT(State(), HasSubstr("\"disabled\": true,\n      \"name\": \"bob\""));
  // Idempotent, and the disabled user's uid is not handed out again.
  auto again = MustEnsure({User("alice", 10001)});
  EXPECT_EQ(again.commands, 0u) << again.plan->Render();
  auto policy = AccountPolicy(*again.env, {"alice", "carol"});
  ASSERT_TRUE(policy);
  EXPECT_TRUE(policy->taken_uids.count(10002));
  EXPECT_FALSE(policy->taken_uids.count(10001));
}

TEST_F(AccountsTest, ReAddedUserIsUnlockedWithTheSamePassword) {
  MustEnsure({User("alice", 10001), User("bob", 10002)});
  MustEnsure({User("alice", 10001)});
  size_t before = m_.runner.commands().size();
  MustEnsure({User("alice", 10001), User("bob", 10002)});
  EXPECT_THAT(ArgvsFrom(before),
              ElementsAre("usermod --prefix " + m_.root + " --expiredate '' --unlock bob"));
  EXPECT_TRUE(Verifies("bob", "pw-of-bob-123"));
  EXPECT_EQ(ShadowFields("bob").at(7), "");
  EXPECT_THAT(State(), Not(HasSubstr("\"disabled\": true")));
}

TEST_F(AccountsTest, ReAddedUserWithANewPasswordGetsIt) {
  MustEnsure({User("bob", 10002)});
  MustEnsure({});
  size_t before = m_.runner.commands().size();
  MustEnsure({User("bob", 10002, "brand-new-pass")});
  EXPECT_THAT(ArgvsFrom(before),
              ElementsAre("usermod --prefix " + m_.root + " --expiredate '' bob",
                          "chpasswd --root " + m_.root + " --crypt-method YESCRYPT"));
  EXPECT_TRUE(Verifies("bob", "brand-new-pass"));
}

TEST_F(AccountsTest, ChangedPasswordIsSetAgainAndOnlyThatOne) {
  MustEnsure({User("alice", 10001), User("bob", 10002)});
  size_t before = m_.runner.commands().size();
  MustEnsure({User("alice", 10001), User("bob", 10002, "another-pass")});
  ASSERT_THAT(ArgvsFrom(before),
              ElementsAre("chpasswd --root " + m_.root + " --crypt-method YESCRYPT"));
  EXPECT_EQ(m_.runner.commands().back().stdin_data, "bob:another-pass\n");
  EXPECT_TRUE(Verifies("bob", "another-pass"));
}

TEST_F(AccountsTest, WorkersLockPasswordsAndNeverSetThem) {
  LocalUser alice = User("alice", 10001);
  alice.password.clear();  // from the OOD_USERS table: no password
  MustEnsure({alice, User("bob", 10002)}, AccountMode::kWorker);
  for (const auto& a : m_.runner.Argvs()) EXPECT_THAT(a, Not(HasSubstr("chpasswd")));
  EXPECT_EQ(ShadowFields("alice").at(1), "!");
  EXPECT_EQ(ShadowFields("bob").at(1), "!");
  EXPECT_EQ(MustEnsure({alice}, AccountMode::kWorker).commands, 1u);  // bob disabled
  size_t before = m_.runner.commands().size();
  // Re-added on a worker: expiry cleared, password stays locked.
  MustEnsure({alice, User("bob", 10002)}, AccountMode::kWorker);
  EXPECT_THAT(ArgvsFrom(before),
              ElementsAre("usermod --prefix " + m_.root + " --expiredate '' bob"));
  EXPECT_EQ(ShadowFields("bob").at(1), "!");
  EXPECT_EQ(MustEnsure({alice, User("bob", 10002)}, AccountMode::kWorker).commands, 0u);
}

TEST_F(AccountsTest, WorkerLocksAnAccountThatHasAPassword) {
  m_.Write("/etc/passwd",
           std::string(kPasswd) + "alice:x:10001:10001:one-hpc OOD user:/home/alice:/bin/bash\n");
  m_.Write("/etc/group", std::string(kGroup) + "alice:x:10001:\n");
  m_.Write("/etc/shadow",
           std::string(kShadow) + "alice:" + Hash("old-password") + ":20000:0:99999:7:::\n");
  auto r = Ensure({User("alice", 10001)}, AccountMode::kWorker);
  ASSERT_TRUE(r.status) << r.status.error().message;
  EXPECT_THAT(m_.runner.Argvs(), ElementsAre("usermod --prefix " + m_.root + " --lock alice"));
  EXPECT_EQ(ShadowFields("alice").at(1)[0], '!');
}

TEST_F(AccountsTest, WorkerErrorsNameTheTable) {
  m_.Write("/etc/passwd", std::string(kPasswd) + "alice:x:1000:1000::/home/alice:/bin/bash\n");
  auto r = Ensure({User("alice", 10001)}, AccountMode::kWorker);
  ASSERT_FALSE(r.status);
  EXPECT_THAT(r.status.error().message,
              HasSubstr("ONEAPP_AUTH_LOCAL_USERS (the portal's OOD_USERS): user 'alice'"));
}

TEST_F(AccountsTest, PasswordsNeverReachArgvOrLogs) {
  // Not registered as secrets (no ParseLocalUsers here): nothing may print them at all.
  log::Capture capture;
  MustEnsure({User("alice", 10001, "Top-Secret-1"), User("bob", 10002, "Top-Secret-2")});
  MustEnsure({User("alice", 10001, "Top-Secret-3")});
  MustEnsure({User("alice", 10001, "Top-Secret-3"), User("bob", 10002, "Top-Secret-4")});
  ASSERT_GE(m_.runner.commands().size(), 7u);
  for (const auto& c : m_.runner.commands()) {
    for (const auto& arg : c.argv) EXPECT_THAT(arg, Not(HasSubstr("Top-Secret"))) << arg;
    for (const auto& [k, v] : c.env) EXPECT_THAT(v, Not(HasSubstr("Top-Secret")));
  }
  EXPECT_FALSE(capture.Contains("Top-Secret")) << capture.text();
  EXPECT_TRUE(capture.Contains("created: alice (uid 10001), bob (uid 10002)")) << capture.text();
  EXPECT_TRUE(capture.Contains("disabled: bob (uid 10002)")) << capture.text();
}

// Real hashes of "alice-pass-1" (libxcrypt's yescrypt, openssl passwd -6).
constexpr char kYescryptHash[] =
    "$y$j9T$xPjg4GuvnuuYa6RMutRsc0$.FbMVNvpFXPt7EobIcbRSEw5sFFWXDV6hpQs9m0JwQ2";
constexpr char kSha512Hash[] =
    "$6$l5h7pDGF7Ba7F6Ik$oFRQKXdXGs92N2EtvZvsyn0p7fNHP4Zzb28Ny91TOHK/0rSHEEjlVQytYVbSZaNdsB6jAAjwp"
    "/t39kPgI.k1D/";

LocalUser Hashed(const std::string& name, std::uint32_t uid, const std::string& hash) {
  LocalUser u;
  u.name = name;
  u.uid = uid;
  u.uid_given = true;
  u.password = hash;
  u.password_is_hash = true;
  return u;
}

TEST_F(AccountsTest, GivenHashesAreInstalledAsTheyAreThroughStdin) {
  log::Capture capture;
  const std::vector<LocalUser> users = {Hashed("alice", 10001, kYescryptHash), User("bob", 10002),
                                        Hashed("carol", 10003, kSha512Hash)};
  auto r = MustEnsure(users);
  const std::string R = m_.root;
  auto argvs = m_.runner.Argvs();
  ASSERT_GE(argvs.size(), 2u);
  // The clear-text password is hashed by chpasswd; the hashes go in a second run, as they are.
  EXPECT_EQ(argvs[argvs.size() - 2], "chpasswd --root " + R + " --crypt-method YESCRYPT");
  EXPECT_EQ(argvs.back(), "chpasswd --root " + R + " --encrypted");
  const auto& commands = m_.runner.commands();
  EXPECT_EQ(commands[commands.size() - 2].stdin_data, "bob:pw-of-bob-123\n");
  const Command& encrypted = commands.back();
  EXPECT_EQ(encrypted.stdin_data,
            "alice:" + std::string(kYescryptHash) + "\ncarol:" + kSha512Hash + "\n");
  EXPECT_THAT(encrypted.secrets, ElementsAre(kYescryptHash, kSha512Hash));
  EXPECT_EQ(ShadowFields("alice").at(1), kYescryptHash);
  EXPECT_EQ(ShadowFields("carol").at(1), kSha512Hash);
  EXPECT_TRUE(Verifies("bob", "pw-of-bob-123"));
  EXPECT_THAT(r.plan->Render(),
              HasSubstr("set the given password hash of alice (uid 10001), carol (uid 10003) "
                        "(chpasswd --encrypted, on stdin)"));
  // A hash is a secret too: never on a command line, in the plan or in a log line.
  for (const auto& c : commands) {
    for (const auto& arg : c.argv) EXPECT_THAT(arg, Not(HasSubstr("$y$"))) << arg;
    for (const auto& arg : c.argv) EXPECT_THAT(arg, Not(HasSubstr("$6$"))) << arg;
  }
  EXPECT_THAT(r.plan->Render(), Not(HasSubstr("xPjg4GuvnuuYa6RMutRsc0")));
  EXPECT_FALSE(capture.Contains("xPjg4GuvnuuYa6RMutRsc0")) << capture.text();
  EXPECT_FALSE(capture.Contains("l5h7pDGF7Ba7F6Ik")) << capture.text();

  // A second run compares the text: nothing to do.
  EXPECT_EQ(MustEnsure(users).commands, 0u);
  // Removed, then listed again with the same hash: unlocked, not set again.
  MustEnsure({users[1], users[2]});
  EXPECT_EQ(ShadowFields("alice").at(1), std::string("!") + kYescryptHash);
  size_t before = m_.runner.commands().size();
  MustEnsure(users);
  EXPECT_THAT(ArgvsFrom(before),
              ElementsAre("usermod --prefix " + R + " --expiredate '' --unlock alice"));
  EXPECT_EQ(ShadowFields("alice").at(1), kYescryptHash);
  // A new hash for alice (another salt) is installed; a clear text replacing a hash is hashed.
  before = m_.runner.commands().size();
  MustEnsure({Hashed("alice", 10001, kSha512Hash), User("bob", 10002),
              User("carol", 10003, "carol-clear-1")});
  EXPECT_THAT(ArgvsFrom(before), ElementsAre("chpasswd --root " + R + " --crypt-method YESCRYPT",
                                             "chpasswd --root " + R + " --encrypted"));
  EXPECT_EQ(ShadowFields("alice").at(1), kSha512Hash);
  EXPECT_TRUE(Verifies("carol", "carol-clear-1"));
}

TEST_F(AccountsTest, ABrokenStateFileIsAnError) {
  m_.Write(kAccountsStateFile, "{\"accounts\": [{\"name\": \"alice\"}]}");
  auto r = Ensure({User("alice", 10001)});
  ASSERT_FALSE(r.status);
  EXPECT_THAT(r.status.error().message, HasSubstr(kAccountsStateFile));
  EXPECT_EQ(r.commands, 0u);
}

TEST_F(AccountsTest, PolicyTakesPreviousUidsFromPasswdAndHomeOwners) {
  m_.Write("/etc/passwd",
           std::string(kPasswd) + "alice:x:10007:10007:one-hpc OOD user:/home/alice:/bin/bash\n");
  m_.Write("/etc/group", std::string(kGroup) + "alice:x:10007:\nextra:x:20000:\n");
  fs::create_directories(m_.root + "/home/carol");
  fs::create_directories(m_.root + "/srv/dave");
  fs::create_directory_symlink(m_.root + "/srv/dave", m_.root + "/home/dave");
  uid_t owner = ::geteuid();
  if (owner == 0) {  // as root: a realistic owner
    ASSERT_EQ(::chown((m_.root + "/home/carol").c_str(), 12345, 12345), 0);
    ASSERT_EQ(::chown((m_.root + "/srv/dave").c_str(), 12346, 12346), 0);
    owner = 12345;
  }
  Plan plan(PlanMode::kApply);
  auto env = Env(plan);
  auto policy = AccountPolicy(*env, {"alice", "carol", "dave", "erin"});
  ASSERT_TRUE(policy) << policy.error().message;
  EXPECT_EQ(policy->previous_uids.at("alice"), 10007u);
  EXPECT_EQ(policy->previous_uids.at("carol"), owner);
  EXPECT_FALSE(policy->previous_uids.count("dave"));  // a symlink is not a home
  EXPECT_FALSE(policy->previous_uids.count("erin"));
  EXPECT_EQ(policy->taken_uids, (std::set<std::uint32_t>{0, 1, 100, 999, 20000, 65534}));
}

TEST_F(AccountsTest, ParsePortalUsersKeepsUidsAcrossAReplacedPortal) {
  // A new portal VM on the old home disk: no accounts yet, but the homes tell the uids.
  fs::create_directories(m_.root + "/home/bob");
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give /home/bob a realistic owner";
  ASSERT_EQ(::chown((m_.root + "/home/bob").c_str(), 10042, 10042), 0);
  Plan plan(PlanMode::kApply);
  auto env = Env(plan);
  auto users = ParsePortalUsers(*env, "alice:Secret-one bob:Secret-two");
  ASSERT_TRUE(users) << users.error().message;
  ASSERT_EQ(users->size(), 2u);
  EXPECT_EQ((*users)[0].uid, kFirstAutoUid);
  EXPECT_EQ((*users)[1].uid, 10042u);
  EXPECT_EQ(FormatUserTable(*users), "alice:10001 bob:10042");
}

// The replace-then-add case: bob (10002) is removed on the first portal, the portal is
// replaced (a new root disk: no passwd entry, no state file) and carol is added. bob never
// logged in (no home), so only the register on the state export remembers his uid: carol
// must not get it (she would own every file bob left in shared project trees).
TEST_F(AccountsTest, AReplacedPortalNeverGivesARemovedUsersUidToANewUser) {
  auto portal = [&](const std::string& list) -> std::vector<LocalUser> {
    Plan plan(PlanMode::kApply);
    auto env = Env(plan);
    auto users = ParsePortalUsers(*env, list);
    EXPECT_TRUE(users) << users.error().message;
    if (!users) return {};
    auto s = EnsureLocalAccounts(*env, *users, AccountMode::kPortal);
    EXPECT_TRUE(s) << s.error().message;
    auto recorded = RecordUids(*env, *users);
    EXPECT_TRUE(recorded) << recorded.error().message;
    return *users;
  };
  EXPECT_EQ(FormatUserTable(portal("alice:Secret-one bob:Secret-two")), "alice:10001 bob:10002");
  EXPECT_EQ(FormatUserTable(portal("alice:Secret-one")), "alice:10001");
  EXPECT_EQ(m_.Read(kUidRegisterFile), "alice:10001 bob:10002\n");

  // The new portal VM: its own /etc, no state file; the state export (and the register) stay.
  m_.Write("/etc/passwd", kPasswd);
  m_.Write("/etc/group", kGroup);
  m_.Write("/etc/shadow", kShadow);
  fs::remove(m_.root + kAccountsStateFile);
  auto users = portal("alice:Secret-one carol:Secret-three");
  EXPECT_EQ(FormatUserTable(users), "alice:10001 carol:10003");
  EXPECT_EQ(m_.Read(kUidRegisterFile), "alice:10001 bob:10002 carol:10003\n");

  // A home whose owner no account and no register line names is taken too.
  fs::create_directories(m_.root + "/home/dora");
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown((m_.root + "/home/dora").c_str(), 10004, 10004), 0);
    EXPECT_EQ(FormatUserTable(portal("alice:Secret-one carol:Secret-three erin:Secret-four")),
              "alice:10001 carol:10003 erin:10005");
  }
}

TEST_F(AccountsTest, AMalformedUidRegisterStopsBeforeAnyChange) {
  m_.Write(kUidRegisterFile, "alice:10001 alice:10002\n");
  Plan plan(PlanMode::kApply);
  auto env = Env(plan);
  auto users = ParsePortalUsers(*env, "alice:Secret-one");
  ASSERT_FALSE(users);
  EXPECT_THAT(users.error().message, HasSubstr(kUidRegisterFile));
  EXPECT_THAT(users.error().message, HasSubstr("never delete it"));
}

TEST(UserTableTest, RoundTrip) {
  LocalUser bob;
  bob.name = "bob";
  bob.uid = 10002;
  bob.password = "never-published";
  LocalUser alice;
  alice.name = "alice";
  alice.uid = 20001;
  std::string table = FormatUserTable({bob, alice});
  EXPECT_EQ(table, "alice:20001 bob:10002");
  EXPECT_EQ(FormatUserTable({}), "");
  auto parsed = ParseUserTable(table);
  ASSERT_TRUE(parsed) << parsed.error().message;
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].name, "alice");
  EXPECT_EQ((*parsed)[0].uid, 20001u);
  EXPECT_TRUE((*parsed)[0].uid_given);
  EXPECT_TRUE((*parsed)[0].password.empty());
  EXPECT_EQ((*parsed)[1].name, "bob");
  EXPECT_EQ(FormatUserTable(*parsed), table);
  auto spaced = ParseUserTable("  alice:20001\t\nbob:10002 ");
  ASSERT_TRUE(spaced);
  EXPECT_EQ(FormatUserTable(*spaced), table);
  auto empty = ParseUserTable("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(UserTableTest, BadInputIsRejectedNamingTheAttribute) {
  for (const char* bad : {"alice", "alice:", "alice:abc", "alice:10001:x", "root:10001",
                          "Alice:10001", "alice:999", "alice:60001", "alice:99999999999",
                          "alice:10001 alice:10002", "alice:10001 bob:10001", ":10001"}) {
    auto r = ParseUserTable(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalidInput);
    EXPECT_THAT(r.error().message, HasSubstr("OOD_USERS: entry ")) << bad;
  }
  auto r = ParseUserTable("alice:10001 bob:1 carol:10001");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "OOD_USERS: entry 2 'bob:1': the uid is not a number in 1000-60000\n"
            "OOD_USERS: entry 3 'carol:10001': uid 10001 is already given in entry 1");
}

}  // namespace
}  // namespace onehpc::ood
