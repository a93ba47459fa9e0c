// ONEAPP_AUTH_LOCAL_USERS: parsing, validation, uid allocation, and passwords never leaking
// into errors or logs.
#include "roles/ood/users.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/log.h"
#include "context/settings.h"
#include "roles/dispatcher.h"
#include "roles/ood/settings.h"

namespace onehpc::ood {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class LocalUsersTest : public ::testing::Test {
 protected:
  void TearDown() override { log::ClearSecrets(); }
  // The error text of a parse that must fail.
  std::string ErrorOf(const std::string& text, const LocalUserPolicy& policy = {}) {
    auto users = ParseLocalUsers(text, policy);
    EXPECT_FALSE(users.has_value()) << text;
    if (users) return "";
    EXPECT_EQ(users.error().kind, ErrorKind::kInvalidInput);
    return users.error().message;
  }
};

TEST_F(LocalUsersTest, ParsesNamesPasswordsAndUids) {
  auto users = ParseLocalUsers("alice:Secret-one  bob:Secret-two:2000\tcarol:x!y@z#w$v%u");
  ASSERT_TRUE(users) << users.error().message;
  ASSERT_EQ(users->size(), 3u);
  EXPECT_EQ((*users)[0].name, "alice");
  EXPECT_EQ((*users)[0].password, "Secret-one");
  EXPECT_EQ((*users)[0].uid, kFirstAutoUid);
  EXPECT_FALSE((*users)[0].uid_given);
  EXPECT_EQ((*users)[1].uid, 2000u);
  EXPECT_EQ((*users)[1].gid(), 2000u);
  EXPECT_TRUE((*users)[1].uid_given);
  EXPECT_EQ((*users)[1].home(), "/home/bob");
  EXPECT_EQ((*users)[2].password, "x!y@z#w$v%u");
  EXPECT_EQ((*users)[2].uid, kFirstAutoUid + 1);
}

TEST_F(LocalUsersTest, EmptyMeansNoUsers) {
  auto users = ParseLocalUsers("   ");
  ASSERT_TRUE(users);
  EXPECT_TRUE(users->empty());
}

TEST_F(LocalUsersTest, AutomaticUidsSkipExplicitAndTakenOnes) {
  LocalUserPolicy policy;
  policy.taken_uids = {10002};
  auto users = ParseLocalUsers("a1:password1 a2:password2 a3:password3:10001 a4:password4", policy);
  ASSERT_TRUE(users) << users.error().message;
  EXPECT_EQ((*users)[0].uid, 10003u);  // 10001 explicit, 10002 taken
  EXPECT_EQ((*users)[1].uid, 10004u);
  EXPECT_EQ((*users)[2].uid, 10001u);
  EXPECT_EQ((*users)[3].uid, 10005u);
}

TEST_F(LocalUsersTest, PreviousUidsAreKeptWhenTheListChanges) {
  LocalUserPolicy policy;
  policy.previous_uids = {{"bob", 10002}, {"carol", 10003}, {"dave", 10004}};
  // A new first entry and an explicit uid taking dave's old number.
  auto users = ParseLocalUsers(
      "newbie:password0 bob:password1 carol:password2 dave:password3 erin:password4:10004", policy);
  ASSERT_TRUE(users) << users.error().message;
  EXPECT_EQ((*users)[0].uid, 10001u);
  EXPECT_EQ((*users)[1].uid, 10002u);
  EXPECT_EQ((*users)[2].uid, 10003u);
  EXPECT_EQ((*users)[3].uid, 10005u);  // its old uid went to erin explicitly
  EXPECT_EQ((*users)[4].uid, 10004u);
}

TEST_F(LocalUsersTest, ReservedAndInvalidNames) {
  for (const char* name : {"root", "daemon", "slurm", "munge", "nobody", "sudo", "mysql",
                           "www-data", "systemd-network", "eessi", "openldap"}) {
    std::string error = ErrorOf(std::string(name) + ":password123");
    EXPECT_THAT(error, HasSubstr("reserved")) << name;
    EXPECT_THAT(error, HasSubstr(std::string("user '") + name + "'"));
  }
  EXPECT_FALSE(IsValidLoginName("Alice"));
  EXPECT_FALSE(IsValidLoginName("1abc"));
  EXPECT_FALSE(IsValidLoginName("-rf"));
  EXPECT_FALSE(IsValidLoginName("a.b"));
  EXPECT_FALSE(IsValidLoginName("../etc"));
  EXPECT_FALSE(IsValidLoginName("a/b"));
  EXPECT_FALSE(IsValidLoginName(""));
  EXPECT_FALSE(IsValidLoginName(std::string(33, 'a')));
  EXPECT_TRUE(IsValidLoginName(std::string(32, 'a')));
  EXPECT_TRUE(IsValidLoginName("a_b-c9"));
  EXPECT_THAT(ErrorOf("Alice:password123"), HasSubstr("lower-case"));
  EXPECT_THAT(ErrorOf(":password123"), HasSubstr("empty"));
}

TEST_F(LocalUsersTest, UidRules) {
  EXPECT_THAT(ErrorOf("bob:password123:999"), HasSubstr("uid 999 is outside 1000-60000"));
  EXPECT_THAT(ErrorOf("bob:password123:60001"), HasSubstr("outside"));
  EXPECT_THAT(ErrorOf("bob:password123:0"), HasSubstr("outside"));
  EXPECT_THAT(ErrorOf("bob:password123:99999999999999"), HasSubstr("not a uid"));
  EXPECT_THAT(ErrorOf("bob:password123:-5"), HasSubstr("not a uid"));
  EXPECT_THAT(ErrorOf("bob:password123:"), HasSubstr("uid after the second ':' is empty"));
  LocalUserPolicy policy;
  policy.taken_uids = {9999};
  EXPECT_THAT(ErrorOf("bob:password123:9999", policy), HasSubstr("account of the system"));
  std::string dup = ErrorOf("alice:password123:2000 bob:password456:2000");
  EXPECT_THAT(dup, HasSubstr("entry 2 (user 'bob'): uid 2000 is already given to user "
                             "'alice' in entry 1"));
}

TEST_F(LocalUsersTest, DuplicateNames) {
  std::string error = ErrorOf("alice:password123 bob:password456 alice:password789");
  EXPECT_THAT(error, HasSubstr("entry 3 (user 'alice'): the user is already listed in entry 1"));
  EXPECT_THAT(error, Not(HasSubstr("password789")));
}

TEST_F(LocalUsersTest, PasswordRules) {
  EXPECT_THAT(ErrorOf("bob:"), HasSubstr("password is empty"));
  EXPECT_THAT(ErrorOf("bob::2000"), HasSubstr("password is empty"));
  EXPECT_THAT(ErrorOf("bob:short"), HasSubstr("shorter than 8"));
  EXPECT_THAT(ErrorOf("bobbybob:bobbybob"), HasSubstr("password is the user name"));
  EXPECT_THAT(ErrorOf("bob:" + std::string(257, 'x')), HasSubstr("longer than 256"));
  EXPECT_THAT(ErrorOf(std::string("bob:passw\x01rd1")), HasSubstr("control character"));
  EXPECT_THAT(ErrorOf(std::string("bob:passw\x7frd1")), HasSubstr("control character"));
  EXPECT_THAT(ErrorOf(std::string("bob:passw\xff\xfe"
                                  "rd1")),
              HasSubstr("UTF-8"));
  auto utf8 = ParseLocalUsers("bob:pässwörd-ünï");
  ASSERT_TRUE(utf8) << utf8.error().message;
  EXPECT_EQ((*utf8)[0].password, "pässwörd-ünï");
}

// A ':' in a password is never guessed at: the entry is rejected and the error quotes
// neither the password nor the part after the second ':'.
TEST_F(LocalUsersTest, ColonInPasswordIsRejectedWithoutShowingIt) {
  std::string error = ErrorOf("bob:Hunter2:Extra");
  EXPECT_THAT(error, HasSubstr("ONEAPP_AUTH_LOCAL_USERS: entry 1 (user 'bob')"));
  EXPECT_THAT(error, HasSubstr("not a uid"));
  EXPECT_THAT(error, Not(HasSubstr("Hunter2")));
  EXPECT_THAT(error, Not(HasSubstr("Extra")));
  error = ErrorOf("bob:Hunter2:a:b:c");
  EXPECT_THAT(error, HasSubstr("more than two ':'"));
  EXPECT_THAT(error, Not(HasSubstr("Hunter2")));
  EXPECT_THAT(error, Not(HasSubstr("a:b:c")));
}

// Hostile and broken input: nothing after the first ':' and no entry without ':' (it may be
// a password split by a space) ever appears in the error; passwords are redacted in logs.
TEST_F(LocalUsersTest, HostileInputNeverLeaksPasswords) {
  const std::vector<std::string> inputs = {
      "alice:correct horse battery",  // a password with spaces
      "SECRETPASSWORD",               // only a password
      "Evil\"Name:TopSecret99",       // invalid name: not quoted
      "a$(reboot):TopSecret99",       // shell syntax in a name
      "alice:TopSecret99 ../../etc:TopSecret98",
      "alice:TopSecret99\nroot:TopSecret98",
      "root:TopSecret99:0",
      std::string("nul\0name:TopSecret99", 20),
  };
  for (const auto& input : inputs) {
    log::Capture capture;
    auto users = ParseLocalUsers(input);
    ASSERT_FALSE(users) << input;
    const std::string& error = users.error().message;
    EXPECT_THAT(error, HasSubstr("ONEAPP_AUTH_LOCAL_USERS: entry")) << input;
    for (const char* secret :
         {"horse", "battery", "SECRETPASSWORD", "TopSecret9", "Evil", "reboot"}) {
      EXPECT_THAT(error, Not(HasSubstr(secret))) << input;
    }
    // Whatever the caller logs afterwards is redacted.
    log::Info("configure failed: {} / {}", error, input);
    for (const char* secret : {"TopSecret99", "SECRETPASSWORD", "battery"}) {
      EXPECT_FALSE(capture.Contains(secret)) << input << "\n" << capture.text();
    }
  }
}

TEST_F(LocalUsersTest, ValidPasswordsAreRegisteredAsSecrets) {
  auto users = ParseLocalUsers("alice:Wonderland-42 bob:Builder-2024:3000");
  ASSERT_TRUE(users);
  EXPECT_EQ(log::Redact("x Wonderland-42 y Builder-2024"), "x <redacted> y <redacted>");
}

TEST_F(LocalUsersTest, EveryProblemIsReportedOnItsOwnLine) {
  std::string error = ErrorOf("root:password123 bob:short carol:password123:5");
  EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 2) << error;
}

// Real hashes (libxcrypt's yescrypt with Debian's default parameters; openssl passwd -6).
constexpr char kYescrypt[] =
    "$y$j9T$xPjg4GuvnuuYa6RMutRsc0$.FbMVNvpFXPt7EobIcbRSEw5sFFWXDV6hpQs9m0JwQ2";
constexpr char kSha512[] =
    "$6$l5h7pDGF7Ba7F6Ik$oFRQKXdXGs92N2EtvZvsyn0p7fNHP4Zzb28Ny91TOHK/0rSHEEjlVQytYVbSZaNdsB6jAAjwp"
    "/t39kPgI.k1D/";
constexpr char kSha512Rounds[] =
    "$6$rounds=10000$bWf/ppupQySvmmMD$5hCrfBupZNDXvSRzZMOxEzeIJkX0Y0Qu6L8PfCDGb1n1dt6RGcnwO2YDOwr0r"
    "hh2yLR8bzEoRXpQbKrUV6XaE0";

TEST_F(LocalUsersTest, ClearTextPasswordsAreNamedForTheWarning) {
  const std::string text =
      std::string("alice:") + kYescrypt + " bob:Plain-pass-1:20001 dave:Other-pass-2";
  EXPECT_EQ(ClearTextPasswordNames(text), (std::vector<std::string>{"bob", "dave"}));
  EXPECT_TRUE(ClearTextPasswordNames(std::string("alice:") + kSha512).empty());
  EXPECT_TRUE(ClearTextPasswordNames("bad name:pw").empty());  // configure reports that one
  const std::string warning = ClearTextPasswordWarning({"bob", "dave"});
  EXPECT_THAT(warning, HasSubstr("ONEAPP_AUTH_LOCAL_USERS gives clear-text passwords for bob, "
                                 "dave: root on every VM of this service can read them"));
  EXPECT_THAT(warning, HasSubstr("mkpasswd -m yescrypt"));
  EXPECT_THAT(warning, Not(HasSubstr("Plain-pass-1")));
}

TEST_F(LocalUsersTest, HashedPasswordsAreTakenAsTheyAre) {
  auto users = ParseLocalUsers(std::string("alice:") + kYescrypt + " bob:" + kSha512 +
                               ":20001 carol:" + kSha512Rounds + " dave:Plain-pass-1");
  ASSERT_TRUE(users) << users.error().message;
  ASSERT_EQ(users->size(), 4u);
  EXPECT_EQ((*users)[0].password, kYescrypt);
  EXPECT_TRUE((*users)[0].password_is_hash);
  // ':' separates the fields and a hash has none: the uid after a hash is the uid.
  EXPECT_EQ((*users)[1].password, kSha512);
  EXPECT_TRUE((*users)[1].password_is_hash);
  EXPECT_EQ((*users)[1].uid, 20001u);
  EXPECT_TRUE((*users)[1].uid_given);
  EXPECT_EQ((*users)[2].password, kSha512Rounds);
  EXPECT_TRUE((*users)[2].password_is_hash);
  // A clear-text password still works, and is still one.
  EXPECT_EQ((*users)[3].password, "Plain-pass-1");
  EXPECT_FALSE((*users)[3].password_is_hash);
  // Hashes are secrets too.
  EXPECT_EQ(log::Redact(std::string("x ") + kYescrypt + " y " + kSha512),
            "x <redacted> y <redacted>");
  for (const char* hash : {kYescrypt, kSha512, kSha512Rounds}) {
    EXPECT_EQ(PasswordHashProblem(hash), "") << hash;
  }
}

// Anything else that starts with '$' is refused, with a reason that names the method or the
// field, and never a piece of the value (a salt or a hash part helps an attacker).
TEST_F(LocalUsersTest, MalformedOrOtherHashesAreRefusedWithoutShowingThem) {
  const std::string y_salt = "xPjg4GuvnuuYa6RMutRsc0";
  const std::string y_hash = ".FbMVNvpFXPt7EobIcbRSEw5sFFWXDV6hpQs9m0JwQ2";
  const std::string s_salt = "l5h7pDGF7Ba7F6Ik";
  const std::string s_hash = std::string(kSha512).substr(20);
  struct Case {
    std::string password;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"$1$" + s_salt.substr(0, 8) + "$" + y_hash.substr(0, 22), "not a yescrypt ($y$...)"},
      {"$5$" + s_salt + "$" + y_hash, "other methods"},
      {"$2b$12$" + y_salt + y_hash.substr(0, 31), "other methods"},
      {"$Y$j9T$" + y_salt + "$" + y_hash, "not a yescrypt"},
      {"$" + y_salt + y_hash, "cannot start with '$'"},
      {"$$$$" + y_salt, "not a yescrypt"},
      {"$y$j9T$" + y_salt + "$" + y_hash.substr(1), "the hash part has 42 characters, 43"},
      {"$y$j9T$" + y_salt + "$" + y_hash + "x", "the hash part has 44 characters"},
      {"$y$j9T$" + y_salt + "$" + y_hash.substr(0, 42) + "z", "does not end as crypt ends it"},
      {"$y$j9T$" + y_salt + "!$" + y_hash, "the salt has characters outside the crypt alphabet"},
      {"$y$j9T$$" + y_hash, "the salt has 0 characters"},
      {"$y$j9$" + y_salt + "$" + y_hash, "the parameters field has 2 characters, 3-32"},
      {"$y$" + y_salt + "$" + y_hash, "3 expected"},
      {"$y$j9T$" + y_salt + "$" + y_hash + "$" + y_salt, "3 expected"},
      {"$6$" + s_salt + "$" + s_hash.substr(1), "the hash part has 85 characters, 86"},
      {"$6$" + s_salt + "$" + s_hash.substr(0, 85) + "A", "does not end as crypt ends it"},
      {"$6$" + s_salt + "xyz$" + s_hash, "the salt has 19 characters, 1-16"},
      {"$6$" + s_salt.substr(0, 8) + "=$" + s_hash, "outside the crypt alphabet"},
      {"$6$rounds=999$" + s_salt + "$" + s_hash, "rounds=N must be a number in 1000-999999999"},
      {"$6$rounds=01000$" + s_salt + "$" + s_hash, "without leading zeros"},
      {"$6$rounds=1000000000$" + s_salt + "$" + s_hash, "rounds=N must be"},
      {"$6$rounds=x$" + s_salt + "$" + s_hash, "rounds=N must be"},
      {"$6$turns=5000$" + s_salt + "$" + s_hash, "the first must be rounds=N"},
      {"$6$" + s_hash, "1 '$'-separated fields after the $6$ prefix, 2 or 3 expected"},
  };
  for (const auto& c : cases) {
    log::Capture capture;
    std::string error = ErrorOf("alice:" + c.password + ":20001 bob:Builder-4242");
    EXPECT_THAT(error, HasSubstr("ONEAPP_AUTH_LOCAL_USERS: entry 1 (user 'alice'): the password "))
        << c.password;
    EXPECT_THAT(error, HasSubstr(c.why)) << c.password;
    EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 0) << error;  // bob is fine
    for (const std::string& piece : {c.password, y_salt, y_hash.substr(0, 12), s_salt,
                                     s_hash.substr(0, 12), c.password.substr(3)}) {
      EXPECT_THAT(error, Not(HasSubstr(piece))) << c.password;
    }
    log::Info("configure failed: {} / {}", error, c.password);
    EXPECT_FALSE(capture.Contains(c.password)) << capture.text();
  }
}

TEST(OodSettingsTest, LocalUsersAreAPortalOnlySecret) {
  bool found = false;
  for (const auto& spec : AllSettings()) {
    if (spec.name != kLocalUsersVar) continue;
    found = true;
    EXPECT_TRUE(spec.secret);
    EXPECT_EQ(spec.roles, (std::vector<std::string>{"portal"}));
    // The operator guide's table and the templates say so (and how to give a hash, without a '$',
    // which the templates generator refuses in a description).
    EXPECT_THAT(SettingsMarkdownTable({spec}),
                HasSubstr("| `ONEAPP_AUTH_LOCAL_USERS` | portal | string |"));
    EXPECT_THAT(spec.description, HasSubstr("yescrypt or SHA-512 crypt hash"));
    EXPECT_THAT(spec.description, Not(HasSubstr("$")));
  }
  EXPECT_TRUE(found);
  for (const auto& spec : OodWorkerSettings()) EXPECT_NE(spec.name, kLocalUsersVar);
  ContextVars vars = {{kLocalUsersVar, "alice:Wonderland-42"}, {kNfsHost, "10.0.1.5"}};
  auto settings = Settings::Resolve(PortalSettings(), vars);
  ASSERT_TRUE(settings) << settings.error().message;
  EXPECT_EQ(settings->ToJson(false)[kLocalUsersVar]["value"], "********");
  EXPECT_EQ(log::Redact("alice:Wonderland-42"), "<redacted>");
  log::ClearSecrets();
}

TEST(OodSettingsTest, SiteSlurmSettingsAreValidated) {
  ContextVars vars = {{kSiteSlurmHost, "login.example.org\nevil: 1"},
                      {kSiteSlurmCluster, "Bad Id"},
                      {kSiteSlurmTitle, std::string("a\x01", 2)},
                      {kPortalHostName, "-bad-.example"}};
  auto settings = Settings::Resolve(PortalSettings(), vars);
  ASSERT_FALSE(settings);
  for (const char* name : {kSiteSlurmHost, kSiteSlurmCluster, kSiteSlurmTitle, kPortalHostName}) {
    EXPECT_THAT(settings.error().message, HasSubstr(name));
  }
  vars = {{kSiteSlurmEnabled, "yes"},
          {kSiteSlurmHost, "10.0.0.5"},
          {kNfsHost, "10.0.1.5"},
          {kSiteSlurmTitle, "HPC \"Big\": cluster #1"}};
  settings = Settings::Resolve(PortalSettings(), vars);
  ASSERT_TRUE(settings) << settings.error().message;
  EXPECT_TRUE(settings->GetBool(kSiteSlurmEnabled));
  EXPECT_EQ(settings->GetString(kSiteSlurmCluster), "site");
}

}  // namespace
}  // namespace onehpc::ood

namespace onehpc::ood {
namespace {

TEST(HomeSourceTest, StorageByDefaultSiteServerWithTheSwitch) {
  auto resolve = [](ContextVars vars) {
    vars.emplace(kNfsHost, "10.0.1.5");
    auto s = Settings::Resolve(SharedNfsSettings(), vars);
    EXPECT_TRUE(s) << s.error().message;
    return HomeSourceFrom(*s);
  };
  auto storage = resolve({{kHomeNfsServer, "nfs.site.example"}});  // ignored without the switch
  ASSERT_TRUE(storage);
  EXPECT_EQ(storage->server, "10.0.1.5");
  EXPECT_EQ(storage->export_path, "/export/home");
  EXPECT_EQ(storage->setting, kNfsHost);
  EXPECT_FALSE(storage->external);

  auto site = resolve({{kHomeNfsEnabled, "yes"},
                       {kHomeNfsServer, "nfs.site.example"},
                       {kHomeNfsExport, "/vol/homes"}});
  ASSERT_TRUE(site);
  EXPECT_EQ(site->server, "nfs.site.example");
  EXPECT_EQ(site->export_path, "/vol/homes");
  EXPECT_EQ(site->setting, kHomeNfsServer);
  EXPECT_TRUE(site->external);

  auto missing = resolve({{kHomeNfsEnabled, "YES"}});
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("ONEAPP_HOME_NFS_SERVER is empty but "
                                                 "ONEAPP_HOME_NFS_ENABLED=YES"));
}

TEST(HomeSourceTest, BadServerAndExportAreRefusedByTheSettings) {
  ContextVars vars = {{kNfsHost, "10.0.1.5"},
                      {kHomeNfsEnabled, "YES"},
                      {kHomeNfsServer, "nfs site"},
                      {kHomeNfsExport, "relative/path"}};
  auto s = Settings::Resolve(SharedNfsSettings(), vars);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("ONEAPP_HOME_NFS_SERVER"));
  EXPECT_THAT(s.error().message, HasSubstr("ONEAPP_HOME_NFS_EXPORT"));
  auto no_host = Settings::Resolve(SharedNfsSettings(), {});
  ASSERT_FALSE(no_host);
  EXPECT_THAT(no_host.error().message, HasSubstr("ONEAPP_NFS_HOST is required"));
}

}  // namespace
}  // namespace onehpc::ood
