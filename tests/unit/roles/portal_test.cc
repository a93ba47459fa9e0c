// The Open OnDemand portal and worker roles on a fake machine: what a plan (dry run) decides
// from the context, with the homes on the storage VM or on the site's NFS server. The apply
// path runs for real in tests/lab/lab_ood_test.sh.
#include "roles/portal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/log.h"
#include "roles/host/address.h"
#include "roles/ood/portal_login.h"
#include "roles/ood/settings.h"
#include "roles/ood/users.h"
#include "roles/ood_worker.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc {
namespace {

using fakes::FakeMachine;
using fakes::RoleRun;
using ::testing::HasSubstr;
using ::testing::Not;

class PortalPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_.Write("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n");
    m_.Write("/etc/group", "root:x:0:\n");
    m_.Write("/etc/shadow", "root:*:19000:0:99999:7:::\n");
    for (const auto& mod : ood::PortalApacheModules()) {
      m_.Write("/etc/apache2/mods-available/" + mod + ".load", "LoadModule x\n");
    }
    m_.Write("/usr/bin/fail2ban-server", "#!/usr/bin/python3\n");
    m_.Write("/usr/sbin/nft", "ELF\n");
    // One NIC (without OneGate, several need ONEAPP_COMPUTE_NETWORK or a NIC named compute).
    vars_ = {{"ETH0_IP", "10.0.1.23"},
             {"ETH0_MASK", "24"},
             {"VMID", "7"},
             {ood::kNfsHost, "10.0.1.5"},
             {ood::kLocalUsersVar, "alice:Wonderland-42 bob:Builder-4242:20001"}};
  }
  std::unique_ptr<RoleRun> Plan(const std::unique_ptr<Role>& role) {
    auto run = std::make_unique<RoleRun>(m_, *role, vars_, nullptr, PlanMode::kDryRun);
    status_ = role->Configure(*run->env);
    return run;
  }
  FakeMachine m_;
  ContextVars vars_;
  Status status_ = Ok();
};

TEST_F(PortalPlanTest, HomesStateAndSoftwareFromTheStorageVm) {
  auto role = MakePortalRole();
  auto run = Plan(role);
  ASSERT_TRUE(status_) << status_.error().message << "\n" << run->plan.Render();
  std::string plan = run->plan.Render();
  EXPECT_THAT(plan, HasSubstr("mount 10.0.1.5:/export/home on /home"));
  EXPECT_THAT(plan, HasSubstr("mount 10.0.1.5:/export/slurm on /var/lib/one-hpc/portal-state"));
  EXPECT_THAT(plan, HasSubstr("mount 10.0.1.5:/export/software on /opt/software"));
  EXPECT_THAT(plan, HasSubstr("/var/lib/one-hpc/portal-state/munge.key"));
  EXPECT_THAT(plan, HasSubstr("write /var/lib/one-hpc/portal-state/ssl/portal.key"));
  EXPECT_THAT(plan, HasSubstr("write /etc/ood/ssl/10.0.1.23.crt"));
  EXPECT_THAT(plan, HasSubstr("write /etc/pam.d/pwauth"));
  EXPECT_THAT(plan, HasSubstr("a2enmod ssl socache_shmcb authnz_external"));
  EXPECT_THAT(plan, HasSubstr("write /etc/systemd/resolved.conf.d/one-hpc.conf"));
  // A plan changes nothing: no command ran, no file was written.
  EXPECT_TRUE(m_.Changes().empty()) << ::testing::PrintToString(m_.Changes());
  EXPECT_FALSE(m_.Exists("/etc/systemd/system/home.mount"));
  EXPECT_FALSE(m_.Exists("/etc/slurm/slurm.conf"));
}

// Review finding L3: a cluster file one-hpc wrote for a cluster no longer configured (the site
// cluster renamed or switched off) goes; a file of the site's own stays.
TEST_F(PortalPlanTest, ClusterFilesNoLongerConfiguredAreRemovedOnlyWhenOurs) {
  m_.Write("/etc/ood/config/clusters.d/oldsite.yml",
           "# Written by one-hpc; changes are overwritten at the next configure.\nv2: {}\n");
  m_.Write("/etc/ood/config/clusters.d/admins.yml", "v2: {}\n");
  auto role = MakePortalRole();
  auto run = Plan(role);
  ASSERT_TRUE(status_) << status_.error().message << "\n" << run->plan.Render();
  std::string plan = run->plan.Render();
  EXPECT_THAT(plan, HasSubstr("remove /etc/ood/config/clusters.d/oldsite.yml"));
  EXPECT_THAT(plan, Not(HasSubstr("clusters.d/admins.yml")));
  EXPECT_TRUE(m_.Exists("/etc/ood/config/clusters.d/oldsite.yml"));  // a plan changes nothing
}

TEST_F(PortalPlanTest, SiteNfsServerForTheHomesStorageForTheState) {
  vars_[ood::kHomeNfsEnabled] = "YES";
  vars_[ood::kHomeNfsServer] = "nfs.site.example";
  vars_[ood::kHomeNfsExport] = "/vol/homes";
  auto role = MakePortalRole();
  auto run = Plan(role);
  ASSERT_TRUE(status_) << status_.error().message;
  std::string plan = run->plan.Render();
  EXPECT_THAT(plan, HasSubstr("mount nfs.site.example:/vol/homes on /home"));
  EXPECT_THAT(plan, Not(HasSubstr("10.0.1.5:/export/home")));
  EXPECT_THAT(plan, HasSubstr("mount 10.0.1.5:/export/slurm on /var/lib/one-hpc/portal-state"));
}

TEST_F(PortalPlanTest, SiteSwitchWithoutServerFailsBeforeAnyChange) {
  vars_[ood::kHomeNfsEnabled] = "YES";
  auto role = MakePortalRole();
  auto run = Plan(role);
  ASSERT_FALSE(status_);
  EXPECT_THAT(status_.error().message,
              HasSubstr("ONEAPP_HOME_NFS_SERVER is empty but ONEAPP_HOME_NFS_ENABLED=YES"));
  EXPECT_TRUE(run->plan.actions().empty()) << run->plan.Render();
}

TEST_F(PortalPlanTest, BadUserListFailsBeforeAnyChangeAndNeverShowsThePassword) {
  vars_[ood::kLocalUsersVar] = "alice:Wonderland-42 root:Secret-99999";
  auto role = MakePortalRole();
  auto run = Plan(role);
  ASSERT_FALSE(status_);
  EXPECT_THAT(status_.error().message, HasSubstr("ONEAPP_AUTH_LOCAL_USERS"));
  EXPECT_THAT(status_.error().message, Not(HasSubstr("Secret-99999")));
  EXPECT_TRUE(run->plan.actions().empty()) << run->plan.Render();
}

TEST_F(PortalPlanTest, HashedPasswordsArePlannedWithoutShowingThem) {
  const std::string hash =
      "$y$j9T$xPjg4GuvnuuYa6RMutRsc0$.FbMVNvpFXPt7EobIcbRSEw5sFFWXDV6hpQs9m0JwQ2";
  vars_[ood::kLocalUsersVar] = "alice:" + hash + " bob:Builder-4242:20001";
  auto role = MakePortalRole();
  log::Capture logs;
  auto run = Plan(role);
  ASSERT_TRUE(status_) << status_.error().message << "\n" << run->plan.Render();
  // The clear-text password is named (the user, never the password): every VM of the service
  // can read the portal's context.
  EXPECT_TRUE(
      logs.Contains("ONEAPP_AUTH_LOCAL_USERS gives clear-text passwords for bob: root "
                    "on every VM of this service can read them"))
      << logs.text();
  EXPECT_THAT(logs.text(), Not(HasSubstr("Builder-4242")));
  std::string plan = run->plan.Render();
  EXPECT_THAT(plan, HasSubstr("set the password of bob (uid 20001) (chpasswd, on stdin)"));
  EXPECT_THAT(plan, HasSubstr("set the given password hash of alice (uid 10001) (chpasswd "
                              "--encrypted, on stdin)"));
  EXPECT_THAT(plan, Not(HasSubstr("xPjg4GuvnuuYa6RMutRsc0")));
  EXPECT_THAT(plan, Not(HasSubstr("Builder-4242")));
}

TEST_F(PortalPlanTest, MalformedHashFailsBeforeAnyChangeAndIsNotShown) {
  vars_[ood::kLocalUsersVar] = "alice:$y$j9T$xPjg4GuvnuuYa6RMutRsc0$tooshort";
  auto role = MakePortalRole();
  auto run = Plan(role);
  ASSERT_FALSE(status_);
  EXPECT_EQ(status_.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(status_.error().message,
              HasSubstr("ONEAPP_AUTH_LOCAL_USERS: entry 1 (user 'alice'): the password is not a "
                        "well-formed yescrypt hash"));
  EXPECT_THAT(status_.error().message, Not(HasSubstr("xPjg4GuvnuuYa6RMutRsc0")));
  EXPECT_THAT(status_.error().message, Not(HasSubstr("tooshort")));
  EXPECT_TRUE(run->plan.actions().empty()) << run->plan.Render();
}

// The worker takes the users from the portal's OOD_USERS: it neither declares nor reads nor
// validates ONEAPP_AUTH_LOCAL_USERS (the dispatcher refuses it before the role runs, see
// RefuseSecretsOfOtherRoles).
TEST_F(PortalPlanTest, WorkerNeitherReadsNorValidatesTheUsersList) {
  auto role = MakeOodWorkerRole();
  for (const auto& spec : role->Settings()) EXPECT_NE(spec.name, ood::kLocalUsersVar);
  vars_[ood::kLocalUsersVar] = "root:x";  // would be refused by the portal
  auto run = std::make_unique<RoleRun>(m_, *role, vars_, nullptr, PlanMode::kDryRun);
  Status s = role->Configure(*run->env);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("TOKEN=YES"));  // as far as without the variable
  EXPECT_THAT(s.error().message, Not(HasSubstr(ood::kLocalUsersVar)));
  EXPECT_THAT(run->plan.Render(), HasSubstr("mount 10.0.1.5:/export/home on /home"));
}

TEST_F(PortalPlanTest, WorkerMountsHomesAndSoftwareButNotTheState) {
  vars_.erase(ood::kLocalUsersVar);  // the portal's only
  auto role = MakeOodWorkerRole();
  auto run = std::make_unique<RoleRun>(m_, *role, vars_, nullptr, PlanMode::kDryRun);
  Status s = role->Configure(*run->env);
  // Without OneGate the worker cannot find the portal: the plan stops there, after the mounts.
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("TOKEN=YES"));
  std::string plan = run->plan.Render();
  EXPECT_THAT(plan, HasSubstr("mount 10.0.1.5:/export/home on /home"));
  EXPECT_THAT(plan, HasSubstr("mount 10.0.1.5:/export/software on /opt/software"));
  EXPECT_THAT(plan, Not(HasSubstr("/export/slurm")));
}

TEST_F(PortalPlanTest, TheComputeAddressIsTheNicNamedComputeNotTheLast) {
  sim::OneGateSimulator sim;
  ASSERT_GT(sim.Start(), 0);
  int service = sim.CreateService("Open OnDemand", {fakes::SimRole("portal", 1)});
  sim::VmSpec spec;
  spec.nics = {fakes::SimNic("192.168.10.4", "Management", "0"),
               fakes::SimNic("10.0.1.23", "Compute", "1", "compute"),
               fakes::SimNic("172.16.0.9", "Backup", "2")};  // attached later: the last NIC
  auto vm = sim.AddVm(service, "portal", spec);
  CurlTransport http;
  OneGateClient onegate(fakes::SimConfig(sim, vm), http, m_.clock);
  vars_.erase("ETH0_MASK");
  vars_["ETH0_IP"] = "192.168.10.4";
  vars_["ETH1_IP"] = "10.0.1.23";
  vars_["ETH2_IP"] = "172.16.0.9";
  vars_["VMID"] = std::to_string(vm.id);
  auto role = MakePortalRole();
  RoleRun run(m_, *role, vars_, &onegate, PlanMode::kDryRun);
  auto status = role->Configure(*run.env);
  ASSERT_TRUE(status) << status.error().message << "\n" << run.plan.Render();
  EXPECT_THAT(run.plan.Render(), HasSubstr("10.0.1.23"));
  EXPECT_THAT(run.plan.Render(), Not(HasSubstr("172.16.0.9")));
  // Without OneGate, three NICs and no ONEAPP_COMPUTE_NETWORK: refused, nothing planned.
  RoleRun blind(m_, *role, vars_, nullptr, PlanMode::kDryRun);
  auto refused = role->Configure(*blind.env);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("ONEAPP_COMPUTE_NETWORK"));
}

TEST(OodWorkerNameTest, FromSetHostnameOrVmid) {
  EXPECT_EQ(*OodWorkerNodeName({{"VMID", "42"}}), "ood-worker-42");
  EXPECT_EQ(*OodWorkerNodeName({{"VMID", "42"}, {"SET_HOSTNAME", "gpu1.example.org"}}), "gpu1");
  EXPECT_FALSE(OodWorkerNodeName({}));
}

}  // namespace
}  // namespace onehpc
