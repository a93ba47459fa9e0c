#include "roles/configure.h"

#include <gtest/gtest.h>

#include <set>

#include "common/log.h"
#include "roles/dispatcher.h"

namespace onehpc {
namespace {

TEST(OneGateSafeMessageTest, ReplacesWhatOneGateWouldCorrupt) {
  EXPECT_EQ(OneGateSafeMessage("a, \"b\" \\c [d]\nnext"), "a; 'b' /c (d) | next");
  EXPECT_EQ(OneGateSafeMessage(""), "configure failed");
  EXPECT_EQ(OneGateSafeMessage(std::string(500, 'x')).size(), 240u);
}

TEST(OneGateSafeMessageTest, NeverCarriesARegisteredSecret) {
  log::AddSecret("s3cr3t-munge-key");
  std::string published = OneGateSafeMessage("cannot install key s3cr3t-munge-key: EACCES");
  log::ClearSecrets();
  EXPECT_EQ(published.find("s3cr3t"), std::string::npos) << published;
  EXPECT_NE(published.find("EACCES"), std::string::npos) << published;
}

TEST(ExitCodeTest, MapsKinds) {
  EXPECT_EQ(ExitCodeFor(ErrorKind::kInvalidInput), 3);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kNotFound), 3);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kUnsafe), 4);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kNetwork), 5);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kProcess), 1);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kIo), 1);
}

TEST(ChooseRoleTest, OneappRoleWins) {
  auto c = ChooseRole({{"ONEAPP_ROLE", "worker"}, {"ROLE_NAME", "controller"}}, nullptr);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "worker");
  EXPECT_EQ(c->source, "ONEAPP_ROLE");
}

TEST(ChooseRoleTest, FallsBackToRoleNameInContext) {
  auto c = ChooseRole({{"ONEAPP_ROLE", ""}, {"ROLE_NAME", "controller"}}, nullptr);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "controller");
  EXPECT_EQ(c->source, "ROLE_NAME (context)");
}

TEST(ChooseRoleTest, NothingSetWithoutOneGateIsAClearError) {
  auto c = ChooseRole({{"ONEAPP_ROLE", ""}}, nullptr);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, ErrorKind::kInvalidInput);
  EXPECT_NE(c.error().message.find("ONEAPP_ROLE is empty"), std::string::npos);
}

TEST(ChooseRoleTest, UnknownRoleListsTheKnownOnes) {
  Error e = UnknownRoleError({"frontend", "ONEAPP_ROLE"});
  EXPECT_NE(e.message.find("unknown role 'frontend' (from ONEAPP_ROLE); known roles: "),
            std::string::npos);
  for (const auto& role : AllRoles()) {
    EXPECT_NE(e.message.find(role->Name()), std::string::npos);
  }
}

TEST(SettingsTableTest, CommonSettingsComeFirstAndAreNotDuplicated) {
  auto all = AllSettings();
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[0].name, "ONEAPP_ROLE");
  EXPECT_EQ(all[1].name, "REPORT_READY");
  std::set<std::string> names;
  for (const auto& s : all) EXPECT_TRUE(names.insert(s.name).second) << s.name;
}

// The portal's passwords never sit in a storage VM's or a worker's context: those roles
// refuse to start (exit 3), and the message names the variable, never its value.
TEST(RefuseSecretsOfOtherRolesTest, StorageAndOodWorkerRefuseThePortalsUsers) {
  const std::string value = "alice:Wonderland-42 bob:$6$somesalt$hashpart:20001";
  for (const char* name : {"storage", "ood-worker"}) {
    auto role = MakeRole(name);
    ASSERT_TRUE(role) << name;
    Status s = RefuseSecretsOfOtherRoles(
        *role, {{"ONEAPP_AUTH_LOCAL_USERS", value}, {"ONEAPP_ROLE", name}});
    ASSERT_FALSE(s) << name;
    EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
    EXPECT_EQ(ExitCodeFor(s.error().kind), kExitInvalidInput);
    const std::string& m = s.error().message;
    EXPECT_NE(m.find(std::string("ONEAPP_AUTH_LOCAL_USERS is set in this ") + name +
                     " VM's context but belongs to the portal role only (value not shown)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(std::string("remove it from the ") + name + " role's context"),
              std::string::npos)
        << m;
    for (const char* piece : {"alice", "Wonderland", "somesalt", "hashpart", "20001"}) {
      EXPECT_EQ(m.find(piece), std::string::npos) << piece << " in: " << m;
    }
    // Whatever is logged later is redacted too.
    EXPECT_EQ(log::Redact("context: " + value), "context: <redacted>");
    log::ClearSecrets();
  }
}

TEST(RefuseSecretsOfOtherRolesTest, ThePortalBlankValuesAndOtherServicesPass) {
  ContextVars users = {{"ONEAPP_AUTH_LOCAL_USERS", "alice:Wonderland-42"}};
  EXPECT_TRUE(RefuseSecretsOfOtherRoles(*MakeRole("portal"), users));
  // Blank is what OpenNebula sends for an input left empty: nothing was given.
  for (const char* blank : {"", "  ", "\t\n"}) {
    EXPECT_TRUE(
        RefuseSecretsOfOtherRoles(*MakeRole("ood-worker"), {{"ONEAPP_AUTH_LOCAL_USERS", blank}}));
    EXPECT_TRUE(
        RefuseSecretsOfOtherRoles(*MakeRole("storage"), {{"ONEAPP_AUTH_LOCAL_USERS", blank}}));
  }
  EXPECT_TRUE(RefuseSecretsOfOtherRoles(*MakeRole("storage"), {}));
  // A OneSlurm VM is not a role of the Open OnDemand service: its settings say nothing there.
  EXPECT_TRUE(RefuseSecretsOfOtherRoles(*MakeRole("worker"), users));
  log::ClearSecrets();
}

}  // namespace
}  // namespace onehpc
