// The controller role on a fake machine: plans, files, argv lists, published attributes.
#include "roles/controller.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "common/base64.h"
#include "common/log.h"
#include "context/context_file.h"
#include "roles/names.h"
#include "roles/slurm/key_delivery.h"
#include "roles/slurm/slurm_conf.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc {
namespace {

using fakes::Exit;
using fakes::FakeMachine;
using fakes::RoleRun;

bool Has(const std::vector<std::string>& v, const std::string& item) {
  return std::find(v.begin(), v.end(), item) != v.end();
}

constexpr char kLuaPlugin[] = "/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so";

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(sim_.Start(), 0);
    int service = sim_.CreateService(
        "OneSlurm", {fakes::SimRole("controller", 1), fakes::SimRole("worker", 1)});
    sim::VmSpec spec;
    spec.nics.push_back(fakes::SimNic("10.0.0.5", "service"));
    vm_ = sim_.AddVm(service, "controller", spec);
    onegate_ = std::make_unique<OneGateClient>(fakes::SimConfig(sim_, vm_), http_, m_.clock);
    m_.runner.On({"scontrol", "ping"},
                 Exit(0, "Slurmctld(primary) at slurm-one-controller is UP\n"));
    m_.Write(kLuaPlugin, "");  // Debian's slurm-wlm-basic-plugins has it
    vars_ = {
        {"ETH0_IP", "10.0.0.5"}, {"ETH0_MASK", "255.255.255.0"}, {"VMID", std::to_string(vm_.id)}};
  }
  std::unique_ptr<RoleRun> Configure(PlanMode mode = PlanMode::kApply,
                                     LineExchange* exchange = nullptr) {
    auto run = std::make_unique<RoleRun>(m_, *role_, vars_, onegate_.get(), mode, exchange);
    auto s = role_->Configure(*run->env);
    EXPECT_TRUE(s) << (s ? "" : s.error().message) << "\n" << run->plan.Render();
    return run;
  }
  // What the configure flow does after a successful configure: one PUT with READY.
  void PublishWithReady(const RoleRun& run) {
    auto attrs = run.publish;
    attrs.emplace_back("READY", "YES");
    ASSERT_TRUE(onegate_->UpdateVm(attrs));
  }

  FakeMachine m_;
  sim::OneGateSimulator sim_;
  sim::VmHandle vm_;
  CurlTransport http_;
  std::unique_ptr<OneGateClient> onegate_;
  std::unique_ptr<Role> role_ = MakeControllerRole();
  ContextVars vars_;
};

TEST_F(ControllerTest, Identity) {
  EXPECT_EQ(role_->Name(), "controller");
  EXPECT_EQ(role_->Service(), "OneSlurm");
  auto specs = role_->Settings();
  ASSERT_EQ(specs.size(), 7u);
  EXPECT_EQ(specs[0].name, "ONEAPP_SLURM_MAX_NODES");
  EXPECT_EQ(specs[0].default_value, "100");
  EXPECT_EQ(specs[1].name, "ONEAPP_SLURM_ACCOUNTING_ENABLED");
  EXPECT_EQ(specs[1].default_value, "NO");
  // Elastic mode: off by default, an idle limit of 10 minutes.
  EXPECT_EQ(specs[2].name, "ONEAPP_SLURM_ELASTIC");
  EXPECT_EQ(specs[2].default_value, "NO");
  EXPECT_EQ(specs[5].name, "ONEAPP_SLURM_ELASTIC_IDLE_SECONDS");
  EXPECT_EQ(specs[5].default_value, "600");
  auto bad = Settings::Resolve(specs, {{"ONEAPP_SLURM_MAX_NODES", "0"}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("ONEAPP_SLURM_MAX_NODES"), std::string::npos);
}

TEST_F(ControllerTest, FirstBoot) {
  log::Capture logs;
  auto run = Configure();
  auto changes = run->Changes();
  EXPECT_TRUE(Has(changes, "write /etc/hostname"));
  EXPECT_TRUE(Has(changes, "set the running host name to slurm-one-controller"));
  EXPECT_TRUE(Has(changes, "write /etc/hosts"));
  EXPECT_TRUE(Has(changes, "generate a new munge key in /etc/munge/munge.key"));
  EXPECT_TRUE(Has(changes, "start munge.service (--no-block)"));
  EXPECT_TRUE(Has(changes, "write /etc/slurm/slurm.conf"));
  EXPECT_TRUE(Has(changes, "enable slurmctld.service"));
  EXPECT_TRUE(Has(changes, "start slurmctld.service (--no-block)"));
  EXPECT_TRUE(Has(changes, "enable oneslurm-reconcile.timer"));
  EXPECT_TRUE(Has(changes, "start oneslurm-reconcile.timer (--no-block)"));

  // Files.
  EXPECT_EQ(m_.Read("/proc/sys/kernel/hostname"), "slurm-one-controller\n");
  EXPECT_EQ(m_.Read("/etc/hostname"), "slurm-one-controller\n");
  EXPECT_EQ(m_.Read("/etc/hosts"),
            "# BEGIN one-hpc managed block (do not edit)\n10.0.0.5\tslurm-one-controller\n"
            "# END one-hpc managed block\n127.0.0.1\tlocalhost\n127.0.1.1\tdebian\n");
  std::string key = m_.Read("/etc/munge/munge.key");
  EXPECT_EQ(key.size(), 128u);
  struct stat st {};
  ASSERT_EQ(stat((m_.root + "/etc/munge/munge.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  EXPECT_TRUE(m_.Exists("/etc/munge/one-hpc-key-generated"));
  // StateSaveLocation made without a child process: slurm's, 0700.
  ASSERT_EQ(stat((m_.root + "/var/lib/slurm/slurmctld").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  if (const passwd* pw = ::getpwnam("slurm")) {
    EXPECT_EQ(st.st_uid, pw->pw_uid);
  }
  std::string conf = m_.Read("/etc/slurm/slurm.conf");
  EXPECT_EQ(slurm::SlurmConfValue(conf, "SlurmctldHost"), "slurm-one-controller(10.0.0.5)");
  EXPECT_EQ(slurm::SlurmConfValue(conf, "MaxNodeCount"), "200");
  EXPECT_EQ(slurm::DynamicNodeRoom(conf), 100);
  EXPECT_EQ(slurm::SlurmConfValue(conf, "ProctrackType"), "proctrack/linuxproc");
  EXPECT_TRUE(logs.Contains("proctrack/linuxproc + task/none (no usable cgroup controllers"));

  // Commands, in order (is-active probes left out); munge checked before slurmctld starts,
  // slurmctld checked with scontrol ping before anything is published.
  EXPECT_EQ(m_.Changes(), (std::vector<std::string>{
                              "hostname slurm-one-controller",
                              "systemctl enable --no-reload munge.service",
                              "systemctl --no-block start munge.service",
                              "munge -n",
                              "unmunge",
                              "systemctl enable --no-reload slurmctld.service",
                              "systemctl --no-block start slurmctld.service",
                              "scontrol ping",
                              "systemctl enable --no-reload oneslurm-reconcile.timer",
                              "systemctl --no-block start oneslurm-reconcile.timer",
                              "systemctl daemon-reload",
                              "systemctl enable --no-reload one-hpc-key-server.socket",
                              "systemctl --no-block start one-hpc-key-server.socket",
                          }));
  // Neither the key nor its base64 ever reaches a command line or a child's stdin.
  std::string b64 = Base64Encode(key);
  for (const auto& c : m_.runner.commands()) {
    for (const auto& arg : c.argv) {
      EXPECT_EQ(arg.find(b64), std::string::npos);
      EXPECT_NE(arg, key);
    }
    EXPECT_NE(c.stdin_data, key);
    EXPECT_EQ(c.stdin_data.find(b64), std::string::npos);
  }
  for (const auto& a : m_.runner.Argvs()) {
    EXPECT_EQ(a.find("reconfigure"), std::string::npos) << a;
  }

  // Published with READY by the configure flow: address, host, the key server's public key
  // and the key's id, in one update. Never the key.
  ASSERT_EQ(run->publish.size(), 5u);
  EXPECT_EQ(run->publish[0],
            (std::pair<std::string, std::string>{"SLURM_CONTROLLER_ADDR", "10.0.0.5"}));
  EXPECT_EQ(run->publish[1].second, "slurm-one-controller");
  std::string pair = m_.Read("/var/lib/one-hpc/key-server.key");
  ASSERT_EQ(pair.size(), 64u);
  ASSERT_EQ(stat((m_.root + "/var/lib/one-hpc/key-server.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(run->publish[2], (std::pair<std::string, std::string>{"SLURM_KEY_SERVER_PUBKEY",
                                                                  Base64Encode(pair.substr(32))}));
  EXPECT_EQ(run->publish[3],
            (std::pair<std::string, std::string>{"SLURM_MUNGE_KEY_ID", slurm::MungeKeyId(key)}));
  // The id of the slurm.conf written: a worker whose fetched copy differs restarts slurmd.
  EXPECT_EQ(run->publish[4],
            (std::pair<std::string, std::string>{
                "SLURM_CONF_ID", slurm::SlurmConfId(m_.Read("/etc/slurm/slurm.conf"))}));
  for (const auto& [k, v] : run->publish) {
    EXPECT_EQ(v.find(b64), std::string::npos) << k;
    EXPECT_EQ(v.find(Base64Encode(pair.substr(0, 32))), std::string::npos) << k;
  }
  EXPECT_FALSE(logs.Contains(Base64Encode(pair.substr(0, 32))));  // the secret key: never logged
}

// Accounting is off unless asked for; on, it is the portal's: MariaDB and slurmdbd before
// slurmctld restarts with slurmdbd in its slurm.conf, the cluster registered, the dumps on the
// controller's own disk. Turned off again, slurm.conf goes back to none (the units are retired
// by the configure flow: tests/integration/configure_flow_test.cc).
TEST_F(ControllerTest, AccountingIsOffByDefaultAndTheSameAsThePortalsWhenOn) {
  auto first = Configure();
  PublishWithReady(*first);
  for (const auto& c : first->Changes()) {
    EXPECT_EQ(c.find("slurmdbd"), std::string::npos) << c;
    EXPECT_EQ(c.find("mariadb"), std::string::npos) << c;
  }
  EXPECT_EQ(slurm::SlurmConfValue(m_.Read("/etc/slurm/slurm.conf"), "AccountingStorageType"),
            "accounting_storage/none");
  // Every host has the node GPU file the served gres.conf includes.
  EXPECT_NE(m_.Read("/etc/slurm/gres.conf").find("\nInclude /etc/slurm/gres-node.conf\n"),
            std::string::npos);
  EXPECT_TRUE(m_.Exists("/etc/slurm/gres-node.conf"));

  vars_["ONEAPP_SLURM_ACCOUNTING_ENABLED"] = "YES";
  // An empty database: no table, no dump to restore (the accounting test has the rest).
  m_.runner.On({"mariadb"}, [](const Command& c) {
    for (const auto& a : c.argv) {
      if (a.find("information_schema.tables") != std::string::npos) return Exit(0, "0\n");
    }
    return Exit(0, "");
  });
  // slurmdbd's port refuses twice (its first start makes the tables), then listens.
  struct SlurmdbdPort : LineExchange {
    Result<std::string> Exchange(const std::string&, int, const std::string&, Duration,
                                 size_t) override {
      return Fail(ErrorKind::kNetwork, "not the key server");
    }
    Status Listening(const std::string& ipv4, int port, Duration) override {
      asked.push_back(ipv4 + ":" + std::to_string(port));
      if (asked.size() <= 2) return Fail(ErrorKind::kNetwork, "Connection refused");
      return Ok();
    }
    std::vector<std::string> asked;
  } slurmdbd_port;
  log::Capture logs;
  auto on = Configure(PlanMode::kApply, &slurmdbd_port);
  // slurmctld (re)starts only once slurmdbd listens: without its state files and without an
  // answering slurmdbd it would exit.
  EXPECT_EQ(slurmdbd_port.asked, std::vector<std::string>(3, "127.0.0.1:6819"));
  EXPECT_TRUE(logs.Contains("waiting for slurmdbd to listen on 127.0.0.1:6819"));
  auto changes = on->Changes();
  auto at = [&](const std::string& what) {
    return std::find(changes.begin(), changes.end(), what) - changes.begin();
  };
  for (const char* c :
       {"create /var/lib/one-hpc/accounting-dumps (root:root, 0700)", "enable mariadb.service",
        "enable slurmdbd.service", "restart slurmctld.service (--no-block)",
        "sacctmgr add cluster one", "enable one-hpc-accounting-dump.timer"}) {
    EXPECT_TRUE(Has(changes, c)) << c << "\n" << on->plan.Render();
  }
  EXPECT_LT(at("enable slurmdbd.service"), at("restart slurmctld.service (--no-block)"));
  EXPECT_LT(at("restart slurmctld.service (--no-block)"), at("sacctmgr add cluster one"));
  const std::string conf = m_.Read("/etc/slurm/slurm.conf");
  EXPECT_EQ(slurm::SlurmConfValue(conf, "AccountingStorageType"), "accounting_storage/slurmdbd");
  // By name: sacct on a worker reads the same file.
  EXPECT_EQ(slurm::SlurmConfValue(conf, "AccountingStorageHost"), "slurm-one-controller");
  EXPECT_EQ(slurm::SlurmConfValue(conf, "JobAcctGatherType"), "jobacct_gather/linux");
  auto password = slurm::SlurmConfValue(m_.Read("/etc/slurm/slurmdbd.conf"), "StoragePass");
  ASSERT_TRUE(password && password->size() == 48);
  EXPECT_FALSE(logs.Contains(*password));
  EXPECT_FALSE(on->plan.Render().find(*password) != std::string::npos);
  for (const auto& c : m_.runner.commands()) {
    for (const auto& a : c.argv) EXPECT_EQ(a.find(*password), std::string::npos) << a;
  }

  vars_["ONEAPP_SLURM_ACCOUNTING_ENABLED"] = "NO";
  auto off = Configure();
  EXPECT_EQ(slurm::SlurmConfValue(m_.Read("/etc/slurm/slurm.conf"), "AccountingStorageType"),
            "accounting_storage/none");
  EXPECT_TRUE(Has(off->Changes(), "restart slurmctld.service (--no-block)"));
  EXPECT_TRUE(m_.Exists("/etc/slurm/slurmdbd.conf"));  // kept, with the password
}

// slurmctld cannot start with JobSubmitPlugins=lua and no script: one-hpc's is written first;
// a job_submit.lua of the site's (an image's own) is kept byte for byte and not loaded, and
// nothing is loaded where Slurm has no lua plugin.
TEST_F(ControllerTest, JobSubmitLuaIsWrittenBeforeSlurmConfNamesItAndASitesOwnIsKept) {
  auto first = Configure();
  ASSERT_TRUE(first);
  const std::string ours = m_.Read(slurm::kJobSubmitLuaPath);
  EXPECT_TRUE(ours.starts_with(slurm::kJobSubmitLuaFirstLine));
  EXPECT_THAT(ours,
              ::testing::HasSubstr("function slurm_job_submit(job_desc, part_list, submit_uid)"));
  EXPECT_THAT(ours, ::testing::HasSubstr("return slurm.SUCCESS"));
  EXPECT_EQ(slurm::SlurmConfValue(m_.Read("/etc/slurm/slurm.conf"), "JobSubmitPlugins"), "lua");
  auto first_changes = first->Changes();
  EXPECT_TRUE(std::any_of(first_changes.begin(), first_changes.end(), [](const std::string& c) {
    return c.find(slurm::kJobSubmitLuaPath) != std::string::npos;
  })) << first->plan.Render();
  auto again = Configure();
  for (const auto& c : again->Changes()) {
    EXPECT_EQ(c.find(slurm::kJobSubmitLuaPath), std::string::npos) << c;
  }

  const std::string site =
      "-- the site's own\nfunction slurm_job_submit() return slurm.SUCCESS end\n";
  m_.Write(slurm::kJobSubmitLuaPath, site);
  auto kept = Configure();
  ASSERT_TRUE(kept);
  EXPECT_EQ(m_.Read(slurm::kJobSubmitLuaPath), site);
  EXPECT_EQ(slurm::SlurmConfValue(m_.Read("/etc/slurm/slurm.conf"), "JobSubmitPlugins"),
            std::nullopt);

  // Without Slurm's lua plugin slurmctld could not start with JobSubmitPlugins=lua.
  m_.Write(slurm::kJobSubmitLuaPath, ours);
  ASSERT_EQ(::unlink((m_.root + kLuaPlugin).c_str()), 0);
  auto no_plugin = Configure();
  ASSERT_TRUE(no_plugin);
  EXPECT_EQ(slurm::SlurmConfValue(m_.Read("/etc/slurm/slurm.conf"), "JobSubmitPlugins"),
            std::nullopt);
}

TEST_F(ControllerTest, ElasticModeTurnsItsTimerOnAndBadLimitsStopBeforeAnyChange) {
  auto off = Configure();
  EXPECT_FALSE(Has(off->Changes(), "enable oneslurm-elastic.timer"));
  vars_["ONEAPP_SLURM_ELASTIC"] = "YES";
  vars_["ONEAPP_SLURM_ELASTIC_MIN_NODES"] = "1";
  vars_["ONEAPP_SLURM_ELASTIC_MAX_NODES"] = "16";
  auto on = Configure();
  EXPECT_TRUE(Has(on->Changes(), "enable oneslurm-elastic.timer")) << on->plan.Render();
  EXPECT_TRUE(Has(on->Changes(), "start oneslurm-elastic.timer (--no-block)")) << on->plan.Render();
  // A submission starts a cycle: the path unit watches the kick file that slurmctld's
  // job_submit.lua creates in a directory of the Slurm user's.
  EXPECT_TRUE(Has(on->Changes(), "enable oneslurm-elastic.path")) << on->plan.Render();
  EXPECT_TRUE(Has(on->Changes(), "start oneslurm-elastic.path (--no-block)")) << on->plan.Render();
  EXPECT_TRUE(m_.Exists(slurm::kElasticKickDir));
  EXPECT_EQ(slurm::SlurmConfValue(m_.Read("/etc/slurm/slurm.conf"), "JobSubmitPlugins"), "lua");
  EXPECT_THAT(m_.Read(slurm::kJobSubmitLuaPath),
              ::testing::HasSubstr(std::string("local kick = \"") + slurm::kElasticKickFile));

  // A maximum above what slurmctld accepts: the error names both variables and values, and
  // the run changes nothing (not even slurm.conf for the new ONEAPP_SLURM_MAX_NODES).
  vars_["ONEAPP_SLURM_MAX_NODES"] = "8";
  const std::string conf_before = m_.Read("/etc/slurm/slurm.conf");
  auto run = std::make_unique<RoleRun>(m_, *role_, vars_, onegate_.get(), PlanMode::kApply);
  auto s = role_->Configure(*run->env);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message,
              ::testing::HasSubstr("ONEAPP_SLURM_ELASTIC_MAX_NODES=16 is more than "
                                   "ONEAPP_SLURM_MAX_NODES=8"));
  EXPECT_TRUE(run->Changes().empty()) << run->plan.Render();
  EXPECT_EQ(m_.Read("/etc/slurm/slurm.conf"), conf_before);
  vars_["ONEAPP_SLURM_MAX_NODES"] = "100";
  vars_["ONEAPP_SLURM_ELASTIC_MIN_NODES"] = "20";
  auto run2 = std::make_unique<RoleRun>(m_, *role_, vars_, onegate_.get(), PlanMode::kApply);
  auto s2 = role_->Configure(*run2->env);
  ASSERT_FALSE(s2);
  EXPECT_THAT(s2.error().message,
              ::testing::HasSubstr("ONEAPP_SLURM_ELASTIC_MIN_NODES=20 is more than "
                                   "ONEAPP_SLURM_ELASTIC_MAX_NODES=16"));
}

TEST_F(ControllerTest, TheClearKeyOfAnEarlierVersionIsErased) {
  ASSERT_TRUE(
      sim_.SetUserAttr(vm_.id, "SLURM_MUNGE_KEY_BASE64", Base64Encode(std::string(32, 'o'))));
  log::Capture logs;
  auto run = Configure();
  EXPECT_EQ(sim_.UserAttr(vm_.id, "SLURM_MUNGE_KEY_BASE64"), "");
  EXPECT_TRUE(Has(run->Changes(), "erase SLURM_MUNGE_KEY_BASE64 from OneGate"));
  EXPECT_TRUE(logs.Contains("whoever read it holds the key: rotate it"));
  PublishWithReady(*run);
  auto again = Configure();
  EXPECT_TRUE(again->Changes().empty()) << again->plan.Render();
}

TEST_F(ControllerTest, RotationMakesANewKeyAndPublishesItsId) {
  {
    RoleRun early(m_, *role_, vars_, onegate_.get());
    auto refused = role_->RotateMungeKey(*early.env);
    ASSERT_FALSE(refused);  // nothing to rotate before the first configure
    EXPECT_NE(refused.error().message.find("configure it first"), std::string::npos);
  }
  auto first = Configure();
  PublishWithReady(*first);
  std::string old_key = m_.Read("/etc/munge/munge.key");
  log::Capture logs;
  RoleRun run(m_, *role_, vars_, onegate_.get());
  size_t before = m_.runner.commands().size();
  auto s = role_->RotateMungeKey(*run.env);
  ASSERT_TRUE(s) << s.error().message << "\n" << run.plan.Render();
  std::string new_key = m_.Read("/etc/munge/munge.key");
  EXPECT_EQ(new_key.size(), 128u);
  EXPECT_NE(new_key, old_key);
  EXPECT_TRUE(m_.Exists("/etc/munge/one-hpc-key-generated"));  // still ours: kept at reboots
  EXPECT_EQ(sim_.UserAttr(vm_.id, "SLURM_MUNGE_KEY_ID"), slurm::MungeKeyId(new_key));
  std::vector<std::string> after;
  for (size_t i = before; i < m_.runner.commands().size(); ++i) {
    std::string a = m_.runner.Argvs()[i];
    if (a.rfind("systemctl is-active", 0) != 0) after.push_back(a);
  }
  EXPECT_EQ(after, (std::vector<std::string>{
                       "systemctl show -P MainPID munge.service",  // the old munged, to wait out
                       "systemctl --no-block restart munge.service", "munge -n", "unmunge",
                       "systemctl --no-block restart slurmctld.service", "scontrol ping"}));
  EXPECT_FALSE(logs.Contains(Base64Encode(new_key)));
  // The next configure keeps the new key.
  auto again = Configure();
  EXPECT_EQ(m_.Read("/etc/munge/munge.key"), new_key);
}

// The key server listens on the service address alone, and `one-hpc key-serve` reads what it
// needs of the context from a root-only file configure writes (no disk probe, no CD mount per
// connection): review finding N1. A changed address restarts the socket (the same one changes
// nothing: RerunKeepsEverything).
TEST_F(ControllerTest, TheKeyServerListensOnTheServiceAddressAndReadsItsContextFromRun) {
  auto first = Configure();
  EXPECT_EQ(m_.Read(slurm::kKeyServerListenDropIn),
            "# one-hpc configure: workers ask for the munge key on the service network's "
            "address\n# only (10.0.0.5, the address published in OneGate), not on every "
            "interface.\n[Socket]\nListenStream=\nListenStream=10.0.0.5:6830\nFreeBind=yes\n");
  struct stat st {};
  ASSERT_EQ(stat((m_.root + slurm::kKeyServerContextPath).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto vars = ParseContextFile(m_.Read(slurm::kKeyServerContextPath));
  ASSERT_TRUE(vars) << vars.error().message;
  const OneGateConfig expected = fakes::SimConfig(sim_, vm_);
  EXPECT_EQ(*vars, (ContextVars{{"ONEGATE_ENDPOINT", expected.endpoint},
                                {"ONEGATE_TOKEN", expected.token},
                                {"VMID", std::to_string(vm_.id)}}));

  vars_["ETH0_IP"] = "10.0.0.9";
  auto moved = Configure();
  EXPECT_NE(m_.Read(slurm::kKeyServerListenDropIn).find("ListenStream=10.0.0.9:6830\n"),
            std::string::npos);
  auto argvs = m_.runner.Argvs();
  EXPECT_NE(std::find(argvs.begin(), argvs.end(),
                      "systemctl --no-block restart one-hpc-key-server.socket"),
            argvs.end())
      << moved->plan.Render();
}

TEST_F(ControllerTest, RerunKeepsEverything) {
  auto first = Configure();
  PublishWithReady(*first);
  std::string key = m_.Read("/etc/munge/munge.key");
  size_t before = m_.runner.commands().size();
  auto second = Configure();
  EXPECT_TRUE(second->Changes().empty()) << second->plan.Render();
  EXPECT_EQ(m_.Read("/etc/munge/munge.key"), key);
  std::vector<std::string> after;
  for (size_t i = before; i < m_.runner.commands().size(); ++i) {
    std::string a = m_.runner.Argvs()[i];
    if (a.rfind("systemctl is-active", 0) != 0) after.push_back(a);
  }
  // Only checks: munge round trip and scontrol ping.
  EXPECT_EQ(after, (std::vector<std::string>{"munge -n", "unmunge", "scontrol ping"}));
  ASSERT_EQ(second->publish.size(), 5u);       // sent again with READY (same values)
  EXPECT_EQ(second->publish, first->publish);  // the same key pair and key
}

TEST_F(ControllerTest, ChangedMaxNodesRestartsInsteadOfReconfigure) {
  auto first = Configure();
  PublishWithReady(*first);
  vars_["ONEAPP_SLURM_MAX_NODES"] = "3";
  size_t before = m_.runner.commands().size();
  auto second = Configure();
  auto changes = second->Changes();
  // The new SLURM_CONF_ID is published: each worker's follow restarts its slurmd, which fetches
  // the new slurm.conf (running jobs go on: tests/integration/slurm_real_test.cc).
  EXPECT_EQ(changes, (std::vector<std::string>{
                         "write /etc/slurm/slurm.conf", "restart slurmctld.service (--no-block)",
                         "publish SLURM_CONTROLLER_ADDR=10.0.0.5, "
                         "SLURM_CONTROLLER_HOST=slurm-one-controller, SLURM_KEY_SERVER_PUBKEY, "
                         "SLURM_MUNGE_KEY_ID and SLURM_CONF_ID after a successful configure"}));
  bool mentioned = false;
  for (const auto& a : second->plan.actions()) {
    if (a.what == "write /etc/slurm/slurm.conf") {
      mentioned =
          a.why.find("(was: MaxNodeCount=200, NodeName=one-hpc-slot[1-100] ") !=
              std::string::npos &&
          a.why.find("; now: MaxNodeCount=6, NodeName=one-hpc-slot[1-3] ") != std::string::npos;
    }
  }
  EXPECT_TRUE(mentioned) << second->plan.Render();
  for (size_t i = before; i < m_.runner.commands().size(); ++i) {
    EXPECT_EQ(m_.runner.Argvs()[i].find("reconfigure"), std::string::npos);
  }
  EXPECT_EQ(slurm::SlurmConfValue(m_.Read("/etc/slurm/slurm.conf"), "MaxNodeCount"), "6");
  EXPECT_EQ(slurm::DynamicNodeRoom(m_.Read("/etc/slurm/slurm.conf")), 3);
}

TEST_F(ControllerTest, ImageKeyIsReplacedOnceAndSaved) {
  m_.Write("/etc/munge/munge.key", std::string(128, 'I'));
  auto run = Configure();
  EXPECT_NE(m_.Read("/etc/munge/munge.key"), std::string(128, 'I'));
  EXPECT_EQ(m_.Read("/etc/munge/munge.key.before-one-hpc"), std::string(128, 'I'));
  bool explained = false;
  for (const auto& a : run->plan.actions()) {
    if (a.what.rfind("generate a new munge key", 0) == 0) {
      explained = a.why.find("not generated by one-hpc") != std::string::npos;
    }
  }
  EXPECT_TRUE(explained);
  std::string key = m_.Read("/etc/munge/munge.key");
  Configure();
  EXPECT_EQ(m_.Read("/etc/munge/munge.key"), key);  // kept from now on
}

TEST_F(ControllerTest, DryRunTouchesNothing) {
  auto run = Configure(PlanMode::kDryRun);
  EXPECT_FALSE(m_.Exists("/etc/munge/munge.key"));
  EXPECT_FALSE(m_.Exists("/etc/slurm/slurm.conf"));
  EXPECT_EQ(m_.Read("/etc/hostname"), "");
  for (const auto& a : m_.runner.Argvs()) {
    EXPECT_EQ(a.rfind("systemctl is-active", 0), 0u) << a;  // reads only
  }
  EXPECT_TRUE(run->publish.empty());
  EXPECT_TRUE(Has(run->Changes(), "generate a new munge key in /etc/munge/munge.key"));
  EXPECT_TRUE(Has(run->Changes(), "start slurmctld.service (--no-block)"));
}

TEST_F(ControllerTest, SlurmctldThatNeverAnswersFailsWithinTheDeadline) {
  m_.runner.On({"scontrol", "ping"},
               Exit(1, "Slurmctld(primary) at slurm-one-controller is DOWN\n"));
  // The daemon's own last words go into the error (and so into the published ERROR).
  m_.runner.On(
      {"journalctl", "--no-pager", "-q", "-o", "cat", "-n", "3", "-u", "slurmctld.service"},
      Exit(0,
           "slurmctld version 22.05.8 started\n"
           "error: Unable to bind listen port (6817): Address already in use\n"
           "fatal: slurm_init_msg_engine_port error Address already in use\n"));
  RoleRun run(m_, *role_, vars_, onegate_.get());
  auto s = role_->Configure(*run.env);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("journalctl -u slurmctld"), std::string::npos);
  EXPECT_NE(s.error().message.find("slurmctld did not start (its last log lines: slurmctld version "
                                   "22.05.8 started | error: Unable to bind listen port (6817): "
                                   "Address already in use | fatal: "),
            std::string::npos)
      << s.error().message;
  EXPECT_TRUE(run.publish.empty());  // READY never goes out with the data
  EXPECT_GE(m_.clock.slept(), Duration(80000));
  EXPECT_LE(m_.clock.slept(), Duration(90000));
}

TEST_F(ControllerTest, PackagedSlurmdIsDisabledOnTheController) {
  m_.Write("/etc/systemd/system/multi-user.target.wants/slurmd.service", "");
  auto run = Configure();
  EXPECT_TRUE(Has(run->Changes(), "disable slurmd.service"));
  EXPECT_FALSE(m_.Exists("/etc/systemd/system/multi-user.target.wants/slurmd.service"));
}

TEST_F(ControllerTest, SetHostnameAndErrors) {
  vars_["SET_HOSTNAME"] = "head.example.org";
  Configure();
  EXPECT_EQ(slurm::SlurmConfValue(m_.Read("/etc/slurm/slurm.conf"), "SlurmctldHost"),
            "head(10.0.0.5)");
  vars_.erase("ETH0_IP");
  RoleRun run(m_, *role_, vars_, onegate_.get());
  auto s = role_->Configure(*run.env);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("ETH0_IP"), std::string::npos);
}

TEST_F(ControllerTest, CgroupsWhenAvailable) {
  m_.Write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  m_.Write("/proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n");
  Configure();
  std::string conf = m_.Read("/etc/slurm/slurm.conf");
  EXPECT_EQ(slurm::SlurmConfValue(conf, "ProctrackType"), "proctrack/cgroup");
  EXPECT_NE(m_.Read("/etc/slurm/cgroup.conf").find("ConstrainCores=yes"), std::string::npos);
}

}  // namespace
}  // namespace onehpc
