// The local accounts of the Open OnDemand service with the real shadow tools (groupadd,
// useradd, usermod with --prefix; chpasswd with --root) against a temporary root holding a
// minimal /etc: the entries made, the password hash checked with crypt_r, a second run that
// changes no byte, removal (lock + expiry) and re-adding. Skipped without root or when
// useradd has no --prefix.
#include <crypt.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "context/settings.h"
#include "roles/ood/accounts.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/os/systemd.h"
#include "roles/plan.h"
#include "roles/role.h"
#include "tests/fakes/http.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"
#include "tests/integration/helpers.h"

namespace onehpc::ood {
namespace {

using testing::ReadAll;
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

void WriteFile(const std::string& path, const std::string& content, fs::perms perms) {
  std::ofstream(path, std::ios::binary) << content;
  fs::permissions(path, perms);
}

// The fields of `name`'s line in a colon-separated database ({} when absent).
std::vector<std::string> Entry(const std::string& path, const std::string& name) {
  std::istringstream in(ReadAll(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) != 0) continue;
    std::vector<std::string> f;
    size_t s = 0;
    while (true) {
      size_t c = line.find(':', s);
      f.push_back(line.substr(s, c == std::string::npos ? c : c - s));
      if (c == std::string::npos) break;
      s = c + 1;
    }
    return f;
  }
  return {};
}

bool Verifies(const std::string& hash, const std::string& password) {
  crypt_data data{};
  const char* out = crypt_r(password.c_str(), hash.c_str(), &data);
  return out != nullptr && out[0] != '*' && hash == out;
}

class AccountsRealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (the shadow tools lock and chroot)";
    Command help;
    help.argv = {"useradd", "--help"};
    help.timeout = Duration(10000);
    auto r = runner_.Run(help);
    if (!r || r->out.find("--prefix") == std::string::npos) {
      GTEST_SKIP() << "useradd has no --prefix (shadow older than 4.6)";
    }
    char tmpl[] = "/tmp/onehpc-accounts-it.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ + "/etc");
    const auto rw = fs::perms::owner_read | fs::perms::owner_write;
    const auto r_all = rw | fs::perms::group_read | fs::perms::others_read;
    const auto r_grp = rw | fs::perms::group_read;
    WriteFile(root_ + "/etc/passwd",
              "root:x:0:0:root:/root:/bin/bash\n"
              "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
              r_all);
    WriteFile(root_ + "/etc/group",
              "root:x:0:\ndaemon:x:1:\nshadow:x:42:\nusers:x:100:\nnogroup:x:65534:\n", r_all);
    WriteFile(root_ + "/etc/shadow",
              "root:*:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"
              "nobody:*:19000:0:99999:7:::\n",
              r_grp);
    WriteFile(root_ + "/etc/gshadow", "root:*::\ndaemon:*::\nshadow:*::\nusers:*::\nnogroup:*::\n",
              r_grp);
    if (fs::exists("/etc/login.defs")) {
      fs::copy_file("/etc/login.defs", root_ + "/etc/login.defs");
    } else {
      WriteFile(root_ + "/etc/login.defs",
                "UID_MIN 1000\nUID_MAX 60000\nGID_MIN 1000\nGID_MAX 60000\n"
                "ENCRYPT_METHOD YESCRYPT\n",
                r_all);
    }
    files_ = std::make_unique<Files>(root_);
    systemd_ = std::make_unique<SystemctlSystemd>(runner_, root_);
    auto settings = Settings::Resolve({}, {});
    ASSERT_TRUE(settings);
    settings_ = std::make_unique<Settings>(std::move(*settings));
  }
  void TearDown() override {
    if (!root_.empty()) {
      std::error_code ec;
      fs::remove_all(root_, ec);
    }
  }

  // Runs EnsureLocalAccounts; returns the actions that were not keeps.
  std::vector<std::string> Ensure(const std::vector<LocalUser>& users,
                                  AccountMode mode = AccountMode::kPortal) {
    Plan plan(PlanMode::kApply);
    fakes::NoHttp http;
    SystemAdapters sys{runner_, *files_, *systemd_, block_devices_, mounts_, clock_, http};
    RoleEnv env = RoleEnv::From(context_, *settings_, nullptr, sys, plan);
    auto s = EnsureLocalAccounts(env, users, mode);
    EXPECT_TRUE(s) << (s ? "" : s.error().message) << "\n" << plan.Render();
    std::vector<std::string> changes;
    for (const auto& a : plan.actions()) {
      if (a.outcome != PlannedAction::Outcome::kKept) changes.push_back(a.what);
    }
    return changes;
  }
  // Every file under <root>/etc, byte for byte.
  std::map<std::string, std::string> Etc() const {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(root_)) {
      if (e.is_regular_file()) out[e.path().string()] = ReadAll(e.path().string());
    }
    return out;
  }
  static LocalUser User(const std::string& name, std::uint32_t uid, const std::string& password) {
    LocalUser u;
    u.name = name;
    u.uid = uid;
    u.uid_given = true;
    u.password = password;
    return u;
  }
  std::string Path(const std::string& path) const { return root_ + path; }

  std::string root_;
  RealProcessRunner runner_;
  std::unique_ptr<Files> files_;
  std::unique_ptr<SystemctlSystemd> systemd_;
  std::unique_ptr<Settings> settings_;
  LoadedContext context_;
  fakes::FakeBlockDevices block_devices_;
  fakes::FakeMounts mounts_;
  fakes::FakeClock clock_;
};

TEST_F(AccountsRealTest, PortalCreatesAccountsOnceThenLocksRemovedOnes) {
  const std::vector<LocalUser> both = {User("alice", 10001, "Alice-pass-1"),
                                       User("bob", 10002, "Bob-pass-22")};
  auto changes = Ensure(both);
  EXPECT_EQ(changes.size(), 6u) << ::testing::PrintToString(changes);  // state, 2x2 adds, chpasswd

  EXPECT_EQ(Entry(Path("/etc/passwd"), "alice"),
            (std::vector<std::string>{"alice", "x", "10001", "10001", "one-hpc OOD user",
                                      "/home/alice", "/bin/bash"}));
  EXPECT_EQ(Entry(Path("/etc/passwd"), "bob").at(2), "10002");
  EXPECT_EQ(Entry(Path("/etc/group"), "alice").at(2), "10001");
  EXPECT_EQ(Entry(Path("/etc/group"), "bob").at(2), "10002");
  EXPECT_FALSE(Entry(Path("/etc/gshadow"), "bob").empty());
  EXPECT_FALSE(fs::exists(Path("/home/alice")));
  auto alice = Entry(Path("/etc/shadow"), "alice");
  ASSERT_GE(alice.size(), 8u);
  EXPECT_THAT(alice[1], StartsWith("$y$"));  // yescrypt
  EXPECT_TRUE(Verifies(alice[1], "Alice-pass-1"));
  EXPECT_FALSE(Verifies(alice[1], "Bob-pass-22"));
  EXPECT_TRUE(Verifies(Entry(Path("/etc/shadow"), "bob")[1], "Bob-pass-22"));
  EXPECT_EQ(alice[7], "");  // no expiry
  EXPECT_EQ(fs::status(Path(kAccountsStateFile)).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);

  // A second run changes nothing: not one byte of any file.
  auto before = Etc();
  EXPECT_TRUE(Ensure(both).empty());
  EXPECT_EQ(Etc(), before);

  // bob removed: locked and expired, still there; then stable.
  changes = Ensure({both[0]});
  EXPECT_THAT(changes.back(), HasSubstr("disable user bob (uid 10002)"));
  auto bob = Entry(Path("/etc/shadow"), "bob");
  ASSERT_GE(bob.size(), 8u);
  EXPECT_THAT(bob[1], StartsWith("!$y$"));
  EXPECT_EQ(bob[7], "1");
  EXPECT_EQ(Entry(Path("/etc/passwd"), "bob").at(2), "10002");
  EXPECT_THAT(ReadAll(Path(kAccountsStateFile)), HasSubstr("\"disabled\": true"));
  before = Etc();
  EXPECT_TRUE(Ensure({both[0]}).empty());
  EXPECT_EQ(Etc(), before);

  // bob re-added with the same password: unlocked (the old hash still verifies), not expired.
  changes = Ensure(both);
  ASSERT_EQ(changes.size(), 2u) << ::testing::PrintToString(changes);  // state, usermod
  bob = Entry(Path("/etc/shadow"), "bob");
  EXPECT_TRUE(Verifies(bob[1], "Bob-pass-22"));
  EXPECT_EQ(bob[7], "");

  // alice gets a new password: only that is set.
  changes = Ensure({User("alice", 10001, "Alice-new-pass"), both[1]});
  ASSERT_EQ(changes.size(), 1u) << ::testing::PrintToString(changes);
  EXPECT_TRUE(Verifies(Entry(Path("/etc/shadow"), "alice")[1], "Alice-new-pass"));
}

// A pre-hashed password (ONEAPP_AUTH_LOCAL_USERS entry name:$y$... or name:$6$...) reaches
// /etc/shadow byte for byte through the real `chpasswd --root DIR --encrypted` on stdin, and
// still verifies the password it was made from; a second run changes nothing.
TEST_F(AccountsRealTest, GivenHashesAreInstalledAsTheyAre) {
  const std::string yescrypt =
      "$y$j9T$xPjg4GuvnuuYa6RMutRsc0$.FbMVNvpFXPt7EobIcbRSEw5sFFWXDV6hpQs9m0JwQ2";
  const std::string sha512 =
      "$6$l5h7pDGF7Ba7F6Ik$oFRQKXdXGs92N2EtvZvsyn0p7fNHP4Zzb28Ny91TOHK/"
      "0rSHEEjlVQytYVbSZaNdsB6jAAjwp"
      "/t39kPgI.k1D/";
  LocalUser alice = User("alice", 10001, yescrypt);
  alice.password_is_hash = true;
  LocalUser carol = User("carol", 10003, sha512);
  carol.password_is_hash = true;
  const std::vector<LocalUser> users = {alice, User("bob", 10002, "Bob-pass-22"), carol};
  auto changes = Ensure(users);
  EXPECT_EQ(changes.size(), 9u) << ::testing::PrintToString(changes);  // state, 3x2, 2 chpasswd
  EXPECT_EQ(Entry(Path("/etc/shadow"), "alice").at(1), yescrypt);
  EXPECT_EQ(Entry(Path("/etc/shadow"), "carol").at(1), sha512);
  EXPECT_TRUE(Verifies(Entry(Path("/etc/shadow"), "alice").at(1), "alice-pass-1"));
  EXPECT_TRUE(Verifies(Entry(Path("/etc/shadow"), "carol").at(1), "alice-pass-1"));
  EXPECT_THAT(Entry(Path("/etc/shadow"), "bob").at(1), StartsWith("$y$"));
  EXPECT_TRUE(Verifies(Entry(Path("/etc/shadow"), "bob").at(1), "Bob-pass-22"));
  auto before = Etc();
  EXPECT_TRUE(Ensure(users).empty());
  EXPECT_EQ(Etc(), before);
}

TEST_F(AccountsRealTest, WorkerAccountsAreLocked) {
  LocalUser alice = User("alice", 10001, "");
  EXPECT_EQ(Ensure({alice}, AccountMode::kWorker).size(), 3u);  // state, groupadd, useradd
  auto shadow = Entry(Path("/etc/shadow"), "alice");
  ASSERT_GE(shadow.size(), 2u);
  EXPECT_EQ(shadow[1], "!");
  EXPECT_EQ(Entry(Path("/etc/passwd"), "alice").at(2), "10001");
  auto before = Etc();
  EXPECT_TRUE(Ensure({alice}, AccountMode::kWorker).empty());
  EXPECT_EQ(Etc(), before);
  Ensure({}, AccountMode::kWorker);
  EXPECT_EQ(Entry(Path("/etc/shadow"), "alice").at(7), "1");
}

}  // namespace
}  // namespace onehpc::ood
