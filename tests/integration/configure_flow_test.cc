// The configure flow end to end over real HTTP: a role module stands in for the real ones,
// OneGate is the simulator, files go to a temporary root.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "roles/configure.h"
#include "roles/dispatcher.h"
#include "roles/role_change.h"
#include "tests/fakes/clock.h"
#include "tests/fakes/process_runner.h"
#include "tests/simulator/onegate_simulator.h"

namespace onehpc {
namespace {

// A role that writes one file, publishes one attribute, and fails when told to.
class ProbeRole : public Role {
 public:
  std::string Name() const override { return "probe"; }
  std::string Service() const override { return "Test"; }
  std::string Summary() const override { return "test role"; }
  std::vector<SettingSpec> Settings() const override {
    SettingSpec fail;
    fail.name = "ONEAPP_PROBE_FAIL";
    fail.type = SettingType::kBool;
    fail.default_value = "NO";
    fail.description = "fail on purpose";
    return {fail};
  }
  Status Configure(RoleEnv& env) override {
    if (auto s = EnsureFile(env, "/etc/probe.conf", "probe=1\n", 0644, std::nullopt,
                            "the probe role needs it");
        !s) {
      return Fail(s.error());
    }
    if (env.settings.GetBool("ONEAPP_PROBE_FAIL")) {
      return Fail(ErrorKind::kProcess, "slurmctld did not start: \"exit 1\", see [log]\nmore");
    }
    if (env.publish) env.publish->emplace_back("PROBE_ADDRESS", "10.0.0.5");
    return Ok();
  }
};

// A role that enables the units it is given.
class UnitsRole : public Role {
 public:
  UnitsRole(std::string name, std::vector<std::string> units, bool fails = false)
      : name_(std::move(name)), units_(std::move(units)), fails_(fails) {}
  std::string Name() const override { return name_; }
  std::string Service() const override { return "Test"; }
  std::string Summary() const override { return "test role"; }
  std::vector<SettingSpec> Settings() const override { return {}; }
  Status Configure(RoleEnv& env) override {
    for (const auto& unit : units_) {
      if (auto s = EnsureUnitEnabled(env, unit, "multi-user.target", "the test role runs it"); !s) {
        return s;
      }
    }
    if (fails_) return Fail(ErrorKind::kProcess, "the " + name_ + " failed after its units");
    return Ok();
  }

 private:
  std::string name_;
  std::vector<std::string> units_;
  bool fails_ = false;
};

class ConfigureFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(sim_.Start(), 0);
    service_ = sim_.CreateService("svc", {sim::RoleSpec{.name = "probe"}});
    vm_ = sim_.AddVm(service_, "probe");
    root_ = std::filesystem::temp_directory_path() /
            ("one-hpc-configure-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_);
  }
  void TearDown() override {
    sim_.Stop();
    std::filesystem::remove_all(root_);
  }

  ConfigureOutcome Run(ContextVars extra, PlanMode mode = PlanMode::kApply) {
    ConfigureRequest request;
    request.context.vars = {{"ONEGATE_ENDPOINT", sim_.Endpoint()},
                            {"VMID", std::to_string(vm_.id)},
                            {"ONEAPP_ROLE", "probe"},
                            {"REPORT_READY", "YES"}};
    for (auto& [k, v] : extra) request.context.vars[k] = v;
    request.context.token = vm_.token;
    request.context.origin = "test";
    request.mode = mode;
    request.make_role = [](const std::string& name) -> std::unique_ptr<Role> {
      if (name == "probe") return std::make_unique<ProbeRole>();

      return MakeRole(name);  // the real modules (nullptr for an unknown name)
    };
    return RunConfigure(request, adapters_);
  }

  std::string ReadRoot(const std::string& path) {
    std::ifstream in(root_ / path.substr(1));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  sim::OneGateSimulator sim_;
  int service_ = -1;
  sim::VmHandle vm_;
  std::filesystem::path root_;
  fakes::FakeProcessRunner runner_;
  Files files_{""};
  SystemctlSystemd systemd_{runner_, "/nonexistent"};
  BlkidBlockDevices block_devices_;
  LibmountMounts mounts_;
  CurlTransport http_;
  fakes::FakeClock clock_;
  SystemAdapters adapters_{runner_, files_, systemd_, block_devices_, mounts_, clock_, http_};

 public:
  ConfigureFlowTest() = default;
  void UseRoot() { files_ = Files(root_.string()); }
};

TEST_F(ConfigureFlowTest, SuccessPublishesAttributesAndReadyInOneRequest) {
  UseRoot();
  sim_.ClearRequests();
  ConfigureOutcome out = Run({});
  ASSERT_EQ(out.exit_code, kExitOk) << out.error;
  EXPECT_EQ(ReadRoot("/etc/probe.conf"), "probe=1\n");
  EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "YES");
  EXPECT_EQ(sim_.UserAttr(vm_.id, "PROBE_ADDRESS"), "10.0.0.5");
  int puts_with_ready = 0;
  for (const auto& r : sim_.Requests()) {
    if (r.method == "PUT" && r.body.find("READY%3DYES") != std::string::npos) {
      ++puts_with_ready;
      EXPECT_NE(r.body.find("PROBE_ADDRESS"), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(puts_with_ready, 1);
  auto status = nlohmann::json::parse(ReadRoot(kStatusFile));
  EXPECT_EQ(status["result"], "success");
  EXPECT_EQ(status["role"], "probe");
}

TEST_F(ConfigureFlowTest, SecondRunChangesNoFile) {
  UseRoot();
  ASSERT_EQ(Run({}).exit_code, kExitOk);
  ConfigureOutcome again = Run({});
  ASSERT_EQ(again.exit_code, kExitOk);
  for (const auto& a : again.plan.actions()) {
    EXPECT_FALSE(a.what.rfind("write ", 0) == 0) << "rewrote " << a.what;
  }
}

TEST_F(ConfigureFlowTest, FailurePublishesOneLineErrorAndNoReady) {
  UseRoot();
  ASSERT_EQ(Run({}).exit_code, kExitOk);  // READY=YES from an earlier boot
  ConfigureOutcome out = Run({{"ONEAPP_PROBE_FAIL", "yes"}});
  EXPECT_EQ(out.exit_code, kExitFailed);
  EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "");  // the stale READY was erased
  EXPECT_EQ(sim_.UserAttr(vm_.id, "ERROR"), "slurmctld did not start: 'exit 1'; see (log) | more");
  auto status = nlohmann::json::parse(ReadRoot(kStatusFile));
  EXPECT_EQ(status["result"], "failure");
  // The next successful run erases ERROR.
  ASSERT_EQ(Run({}).exit_code, kExitOk);
  EXPECT_EQ(sim_.UserAttr(vm_.id, "ERROR"), "");
  EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "YES");
}

// The erases a run sends (PUT /vm type=2), by attribute name.
std::vector<std::string> Erased(const std::vector<sim::RecordedRequest>& requests) {
  std::vector<std::string> names;
  for (const auto& r : requests) {
    if (r.method != "PUT" || r.body.find("type=2") == std::string::npos) continue;
    const auto start = r.body.find("data=") + 5;
    names.push_back(r.body.substr(start, r.body.find('&', start) - start));
  }
  return names;
}

// READY and ERROR are erased only where this VM may have published them
// (roles/published.h): a first boot sends no erase, a reboot erases its READY alone.
TEST_F(ConfigureFlowTest, AFirstBootErasesNothingItNeverPublished) {
  UseRoot();
  sim_.ClearRequests();
  ASSERT_EQ(Run({}).exit_code, kExitOk);
  EXPECT_EQ(Erased(sim_.Requests()), std::vector<std::string>{});
  EXPECT_EQ(ReadRoot("/var/lib/one-hpc/onegate-published"), "READY\n");
  sim_.ClearRequests();
  ASSERT_EQ(Run({}).exit_code, kExitOk);  // a reboot: its READY erased, then published again
  EXPECT_EQ(Erased(sim_.Requests()), std::vector<std::string>{"READY"});
  EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "YES");
  // A failure records its ERROR; the next success erases it and READY, once each.
  ASSERT_EQ(Run({{"ONEAPP_PROBE_FAIL", "yes"}}).exit_code, kExitFailed);
  EXPECT_EQ(ReadRoot("/var/lib/one-hpc/onegate-published"), "ERROR\n");
  sim_.ClearRequests();
  ASSERT_EQ(Run({}).exit_code, kExitOk);
  EXPECT_EQ(Erased(sim_.Requests()), std::vector<std::string>{"ERROR"});
  EXPECT_EQ(sim_.UserAttr(vm_.id, "ERROR"), "");
  EXPECT_EQ(ReadRoot("/var/lib/one-hpc/onegate-published"), "READY\n");
}

// A VM an older one-hpc configured (a role record, no record of what it published) may have
// both: both are erased, as before the record.
TEST_F(ConfigureFlowTest, AVmAnOlderOneHpcConfiguredErasesBoth) {
  UseRoot();
  ASSERT_TRUE(files_.WriteAtomic(kRoleRecordFile, "{\"role\": \"probe\", \"units\": []}\n", 0644));
  sim_.SetUserAttr(vm_.id, "READY", "YES");
  sim_.SetUserAttr(vm_.id, "ERROR", "an old failure");
  sim_.ClearRequests();
  ConfigureOutcome out = Run({});
  ASSERT_EQ(out.exit_code, kExitOk) << out.error;
  EXPECT_EQ(Erased(sim_.Requests()), (std::vector<std::string>{"READY", "ERROR"}));
  EXPECT_EQ(sim_.UserAttr(vm_.id, "ERROR"), "");
  EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "YES");
  EXPECT_EQ(ReadRoot("/var/lib/one-hpc/onegate-published"), "READY\n");
}

TEST_F(ConfigureFlowTest, InvalidSettingIsExitThreeAndNamesTheVariable) {
  UseRoot();
  ConfigureOutcome out = Run({{"ONEAPP_PROBE_FAIL", "maybe"}});
  EXPECT_EQ(out.exit_code, kExitInvalidInput);
  EXPECT_NE(out.error.find("ONEAPP_PROBE_FAIL"), std::string::npos) << out.error;
  EXPECT_NE(out.error.find("maybe"), std::string::npos) << out.error;
  EXPECT_NE(sim_.UserAttr(vm_.id, "ERROR").find("ONEAPP_PROBE_FAIL"), std::string::npos);
}

TEST_F(ConfigureFlowTest, UnknownRoleIsExitThree) {
  UseRoot();
  ConfigureOutcome out = Run({{"ONEAPP_ROLE", "frontend"}});
  EXPECT_EQ(out.exit_code, kExitInvalidInput);
  EXPECT_NE(out.error.find("unknown role 'frontend'"), std::string::npos);
}

TEST_F(ConfigureFlowTest, NoReadyWithoutReportReady) {
  UseRoot();
  ConfigureOutcome out = Run({{"REPORT_READY", "NO"}});
  ASSERT_EQ(out.exit_code, kExitOk) << out.error;
  EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "");
  EXPECT_EQ(sim_.UserAttr(vm_.id, "PROBE_ADDRESS"), "10.0.0.5");
}

TEST_F(ConfigureFlowTest, RoleNameFromOneGateWhenOneappRoleIsEmpty) {
  UseRoot();
  ConfigureOutcome out = Run({{"ONEAPP_ROLE", ""}});
  ASSERT_EQ(out.exit_code, kExitOk) << out.error;
  EXPECT_EQ(out.role, "probe");
}

TEST_F(ConfigureFlowTest, PlanChangesNothingAndPublishesNothing) {
  UseRoot();
  sim_.ClearRequests();
  ConfigureOutcome out = Run({}, PlanMode::kDryRun);
  ASSERT_EQ(out.exit_code, kExitOk) << out.error;
  EXPECT_FALSE(std::filesystem::exists(root_ / "etc/probe.conf"));
  EXPECT_FALSE(std::filesystem::exists(root_ / "run/one-hpc/status.json"));
  for (const auto& r : sim_.Requests()) EXPECT_NE(r.method, "PUT") << r.path;
  std::string text = out.plan.Render();
  EXPECT_NE(text.find("write /etc/probe.conf"), std::string::npos) << text;
  EXPECT_NE(text.find("publish PROBE_ADDRESS, READY through OneGate"), std::string::npos) << text;
}

TEST_F(ConfigureFlowTest, OneGateDownStillConfiguresButFailsToReportReady) {
  UseRoot();
  sim_.InjectFault(sim::Fault{.kind = sim::FaultKind::kStatus, .status = 503, .body = "down"});
  ConfigureOutcome out = Run({});
  EXPECT_EQ(out.exit_code, kExitNetwork) << out.error;
  EXPECT_EQ(ReadRoot("/etc/probe.conf"), "probe=1\n");  // ONEAPP_ROLE did not need OneGate
}

// A root file system without room: refused before the role changes anything (what breaks on
// a full root shows up later and elsewhere: slurmctld's state, MariaDB, the homes).
TEST_F(ConfigureFlowTest, AFullRootFileSystemIsRefusedBeforeAnyChange) {
  UseRoot();
  std::string answer;
  runner_.On({"stat", "-f"}, [&](const Command& c) {
    EXPECT_EQ(c.argv, (std::vector<std::string>{"stat", "-f", "-c", "%S %b %a %c %d",
                                                root_.string() + "/"}));
    return ProcessResult{0, 0, false, answer, ""};
  });
  // 8 GiB, 300 MiB available (4096-byte blocks), plenty of inodes.
  answer = "4096 2097152 76800 524288 400000\n";
  ConfigureOutcome out = Run({});
  EXPECT_EQ(out.exit_code, kExitFailed) << out.error;
  EXPECT_NE(out.error.find("the root file system is full: 300 MiB of 8192 MiB and 400000 inodes "
                           "are free (expected at least 512 MiB and 10000 inodes)"),
            std::string::npos)
      << out.error;
  EXPECT_NE(sim_.UserAttr(vm_.id, "ERROR").find("the root file system is full"), std::string::npos);
  EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "");
  EXPECT_EQ(ReadRoot("/etc/probe.conf"), "") << "the role ran";
  // Inodes run out first on a root of small files.
  answer = "4096 2097152 1000000 524288 900\n";
  out = Run({});
  EXPECT_EQ(out.exit_code, kExitFailed);
  EXPECT_NE(out.error.find("and 900 inodes are free"), std::string::npos) << out.error;
  // A file system that counts no inodes (btrfs: 0 of 0) has no inode floor.
  answer = "4096 2097152 1000000 0 0\n";
  out = Run({});
  ASSERT_EQ(out.exit_code, kExitOk) << out.error;
  // Room again: configured.
  answer = "4096 2097152 1000000 524288 400000\n";
  out = Run({});
  ASSERT_EQ(out.exit_code, kExitOk) << out.error;
  EXPECT_EQ(ReadRoot("/etc/probe.conf"), "probe=1\n");
  EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "YES");
  // An answer that cannot be read is not a full disk.
  answer = "garbage";
  EXPECT_EQ(Run({}).exit_code, kExitOk);
}

// The portal's users (passwords) in the context of a storage VM or a worker: refused before
// the role does anything, exit 3, and the published ERROR says what to do without the value.
// `one-hpc follow` (the worker's timer) refuses the same way.
TEST_F(ConfigureFlowTest, StorageAndWorkerRefuseThePortalsUsersBeforeAnyChange) {
  UseRoot();
  for (const char* role : {"storage", "ood-worker"}) {
    ConfigureOutcome out =
        Run({{"ONEAPP_ROLE", role}, {"ONEAPP_AUTH_LOCAL_USERS", "alice:Wonderland-42"}});
    EXPECT_EQ(out.exit_code, kExitInvalidInput) << out.error;
    EXPECT_EQ(out.role, role);
    EXPECT_NE(out.error.find("ONEAPP_AUTH_LOCAL_USERS is set in this"), std::string::npos)
        << out.error;
    std::string published = sim_.UserAttr(vm_.id, "ERROR");
    EXPECT_NE(published.find("ONEAPP_AUTH_LOCAL_USERS"), std::string::npos) << published;
    EXPECT_NE(published.find("portal role only"), std::string::npos) << published;
    EXPECT_NE(published.find("and reconfigure"), std::string::npos) << published;  // whole
    for (const std::string& text : {out.error, published, ReadRoot(kStatusFile)}) {
      EXPECT_EQ(text.find("Wonderland"), std::string::npos) << text;
      EXPECT_EQ(text.find("alice"), std::string::npos) << text;
    }
    EXPECT_EQ(sim_.UserAttr(vm_.id, "READY"), "");
    EXPECT_TRUE(runner_.commands().empty()) << role;  // nothing ran
    // Nothing but one-hpc's own records: the run's status, and the ERROR it published (with
    // the lock of that record).
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root_)) {
      if (entry.is_regular_file() && entry.path() != root_ / "var/lib/one-hpc/onegate-published" &&
          entry.path() != root_ / "run/one-hpc/onegate-published.lock") {
        EXPECT_EQ(entry.path(), root_ / std::string(kStatusFile).substr(1)) << "wrote " << entry;
      }
    }
    EXPECT_EQ(ReadRoot("/var/lib/one-hpc/onegate-published"), "ERROR\n");
  }
  LoadedContext context;
  context.vars = {{"ONEGATE_ENDPOINT", sim_.Endpoint()},
                  {"VMID", std::to_string(vm_.id)},
                  {"ONEAPP_ROLE", "ood-worker"},
                  {"ONEAPP_AUTH_LOCAL_USERS", "alice:Wonderland-42"}};
  context.token = vm_.token;
  EXPECT_EQ(RunFollow(context, adapters_), kExitInvalidInput);
  EXPECT_TRUE(runner_.commands().empty());
  log::ClearSecrets();
}

// A VM re-contextualised to another role: once the new role is configured, the units only the
// old one enabled are disabled and stopped (the shared ones stay), and the record names the
// new role; the same role again changes nothing.
TEST_F(ConfigureFlowTest, ARoleChangeDisablesAndStopsTheOldRolesUnits) {
  UseRoot();
  runner_.On({"systemctl"}, [this](const Command& c) {
    if (c.argv.size() >= 3 && c.argv[1] == "enable") {
      std::filesystem::create_directories(root_ / "etc/systemd/system/multi-user.target.wants");
      std::ofstream(root_ / "etc/systemd/system/multi-user.target.wants" / c.argv.back()) << "x";
    }
    return ProcessResult{0, 0, false, "", ""};
  });
  SystemctlSystemd online(runner_, "");  // the fake runner answers; nothing leaves the test
  SystemAdapters sys{runner_, files_, online, block_devices_, mounts_, clock_, http_};
  auto run = [&](const std::string& role) {
    ConfigureRequest request;
    request.context.vars = {{"ONEAPP_ROLE", role}};
    request.context.origin = "test";
    request.make_role = [](const std::string& name) -> std::unique_ptr<Role> {
      return std::make_unique<UnitsRole>(
          name, name == "was" ? std::vector<std::string>{"old-only.timer", "shared.service"}
                              : std::vector<std::string>{"shared.service", "new-only.service"});
    };
    size_t before = runner_.commands().size();
    ConfigureOutcome out = RunConfigure(request, sys);
    EXPECT_EQ(out.exit_code, kExitOk) << out.error;
    auto all = runner_.Argvs();
    return std::vector<std::string>(all.begin() + before, all.end());
  };
  run("was");
  auto record = nlohmann::json::parse(ReadRoot(kRoleRecordFile));
  EXPECT_EQ(record["role"], "was");
  EXPECT_EQ(record["units"], nlohmann::json({"old-only.timer", "shared.service"}));

  auto cmds = run("now");
  auto has = [&](const std::string& c) {
    return std::find(cmds.begin(), cmds.end(), c) != cmds.end();
  };
  EXPECT_TRUE(has("systemctl disable --no-reload old-only.timer"))
      << ::testing::PrintToString(cmds);
  EXPECT_TRUE(has("systemctl --no-block stop old-only.timer")) << ::testing::PrintToString(cmds);
  EXPECT_FALSE(has("systemctl disable --no-reload shared.service"));
  EXPECT_FALSE(has("systemctl --no-block stop shared.service"));
  record = nlohmann::json::parse(ReadRoot(kRoleRecordFile));
  EXPECT_EQ(record["role"], "now");
  EXPECT_EQ(record["units"], nlohmann::json({"new-only.service", "shared.service"}));

  for (const auto& c : run("now")) EXPECT_EQ(c.find("disable"), std::string::npos) << c;
}

// A VM re-contextualised to a role that fails: the old role is retired all the same (review
// L14: it must not go on serving), but for what the new role enabled before it failed; the
// record names the new role, so that its next run retires nothing more.
TEST_F(ConfigureFlowTest, ARoleChangeThatFailsStillRetiresTheOldRole) {
  UseRoot();
  runner_.On({"systemctl"}, [](const Command&) { return ProcessResult{0, 0, false, "", ""}; });
  SystemctlSystemd online(runner_, "");
  SystemAdapters sys{runner_, files_, online, block_devices_, mounts_, clock_, http_};
  ASSERT_TRUE(WriteRoleRecord(files_, RoleRecord{"was", {"old-only.timer", "shared.service"}}));
  auto run = [&](const std::string& role, int want_exit) {
    ConfigureRequest request;
    request.context.vars = {{"ONEAPP_ROLE", role}};
    request.context.origin = "test";
    request.make_role = [](const std::string& name) -> std::unique_ptr<Role> {
      return std::make_unique<UnitsRole>(name, std::vector<std::string>{"shared.service"},
                                         /*fails=*/true);
    };
    size_t before = runner_.commands().size();
    ConfigureOutcome out = RunConfigure(request, sys);
    EXPECT_EQ(out.exit_code, want_exit) << out.error;
    EXPECT_NE(out.error.find("failed after its units"), std::string::npos) << out.error;
    auto all = runner_.Argvs();
    return std::vector<std::string>(all.begin() + before, all.end());
  };
  auto cmds = run("now", kExitFailed);
  auto has = [&](const std::string& c) {
    return std::find(cmds.begin(), cmds.end(), c) != cmds.end();
  };
  EXPECT_TRUE(has("systemctl disable --no-reload old-only.timer"))
      << ::testing::PrintToString(cmds);
  EXPECT_TRUE(has("systemctl --no-block stop old-only.timer")) << ::testing::PrintToString(cmds);
  EXPECT_FALSE(has("systemctl --no-block stop shared.service")) << "the new role enabled it";
  auto record = nlohmann::json::parse(ReadRoot(kRoleRecordFile));
  EXPECT_EQ(record["role"], "now");
  EXPECT_EQ(record["units"], nlohmann::json({"shared.service"}));
  for (const auto& c : run("now", kExitFailed)) {
    EXPECT_EQ(c.find("disable"), std::string::npos) << c;
  }
}

// The same role with a part turned off (accounting: slurmdbd, MariaDB, the dump timer): what
// only the last configure enabled is disabled and stopped; turned on again, it is enabled.
TEST_F(ConfigureFlowTest, APartTurnedOffDisablesAndStopsOnlyItsUnits) {
  UseRoot();
  runner_.On({"systemctl"}, [this](const Command& c) {
    if (c.argv.size() >= 3 && c.argv[1] == "enable") {
      std::filesystem::create_directories(root_ / "etc/systemd/system/multi-user.target.wants");
      std::ofstream(root_ / "etc/systemd/system/multi-user.target.wants" / c.argv.back()) << "x";
    }
    if (c.argv.size() >= 3 && c.argv[1] == "disable") {
      std::filesystem::remove(root_ / "etc/systemd/system/multi-user.target.wants" / c.argv.back());
    }
    return ProcessResult{0, 0, false, "", ""};
  });
  SystemctlSystemd online(runner_, "");
  SystemAdapters sys{runner_, files_, online, block_devices_, mounts_, clock_, http_};
  std::vector<std::string> units;
  auto run = [&] {
    ConfigureRequest request;
    request.context.vars = {{"ONEAPP_ROLE", "controller"}};
    request.context.origin = "test";
    request.make_role = [&](const std::string& name) -> std::unique_ptr<Role> {
      return std::make_unique<UnitsRole>(name, units);
    };
    size_t before = runner_.commands().size();
    ConfigureOutcome out = RunConfigure(request, sys);
    EXPECT_EQ(out.exit_code, kExitOk) << out.error;
    auto all = runner_.Argvs();
    return std::vector<std::string>(all.begin() + before, all.end());
  };
  units = {"slurmctld.service", "slurmdbd.service", "mariadb.service"};
  run();
  units = {"slurmctld.service"};
  auto off = run();
  auto has = [&](const std::string& c) {
    return std::find(off.begin(), off.end(), c) != off.end();
  };
  for (const char* u : {"slurmdbd.service", "mariadb.service"}) {
    EXPECT_TRUE(has(std::string("systemctl disable --no-reload ") + u))
        << ::testing::PrintToString(off);
    EXPECT_TRUE(has(std::string("systemctl --no-block stop ") + u));
  }
  EXPECT_FALSE(has("systemctl disable --no-reload slurmctld.service"));
  EXPECT_EQ(nlohmann::json::parse(ReadRoot(kRoleRecordFile))["units"],
            nlohmann::json({"slurmctld.service"}));
  for (const auto& c : run()) EXPECT_EQ(c.find("disable"), std::string::npos) << c;
  units = {"slurmctld.service", "slurmdbd.service", "mariadb.service"};
  auto on = run();
  EXPECT_NE(std::find(on.begin(), on.end(), "systemctl enable --no-reload slurmdbd.service"),
            on.end())
      << ::testing::PrintToString(on);
}

}  // namespace
}  // namespace onehpc
