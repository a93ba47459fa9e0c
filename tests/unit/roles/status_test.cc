// `one-hpc status`: what it reads (role record, status file, OneGate, systemctl show, the
// reconciler's dry run), what it prints, its cost, and that it changes nothing.
#include "roles/status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "roles/configure.h"
#include "roles/names.h"
#include "roles/role_change.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"

namespace onehpc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What `systemctl show --property=...` prints for the units asked, in order.
std::string Shown(const std::vector<std::vector<std::string>>& blocks) {
  std::string out;
  for (const auto& lines : blocks) {
    if (!out.empty()) out += "\n";
    for (const auto& l : lines) out += l + "\n";
  }
  return out;
}

class StatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(sim_.Start(), 0);
    slurm_.Install(m_.runner);
  }
  void Configured(const std::string& role, const std::vector<std::string>& units, int exit_code,
                  const std::string& error = "") {
    ASSERT_TRUE(WriteRoleRecord(*m_.files, RoleRecord{role, units}));
    m_.Write(kStatusFile, nlohmann::json({{"result", exit_code == 0 ? "success" : "failure"},
                                          {"exit_code", exit_code},
                                          {"role", role},
                                          {"entry", "service"},
                                          {"error", error},
                                          {"finished", "2026-12-02T10:00:00Z"}})
                              .dump());
  }
  void SystemctlShows(const std::string& out) {
    m_.runner.On({"systemctl", "show"}, [out](const Command&) { return fakes::Exit(0, out); });
  }
  StatusReport Collect(const sim::VmHandle& self) {
    OneGateClient client(fakes::SimConfig(sim_, self), http_, m_.clock);
    StatusInputs inputs;
    inputs.onegate = &client;
    inputs.own_vm_id = self.id;
    sim_.ClearRequests();
    return CollectStatus(inputs, *m_.files, m_.runner, m_.clock);
  }

  sim::OneGateSimulator sim_;
  CurlTransport http_;
  fakes::FakeMachine m_;
  fakes::FakeSlurm slurm_;
};

TEST_F(StatusTest, AControllerShowsItsUnitsAndTheReconcilersTableWithOneOneGateRequest) {
  int service = sim_.CreateService("OneSlurm",
                                   {fakes::SimRole("controller", 1), fakes::SimRole("worker", 2)});
  sim::VmSpec controller_spec;
  controller_spec.user_template[kAttrReady] = "YES";
  auto controller = sim_.AddVm(service, "controller", controller_spec);
  sim::VmSpec worker_spec;
  worker_spec.user_template[slurm::kAttrNodeName] = "w1";
  auto worker = sim_.AddVm(service, "worker", worker_spec);
  slurm_.nodes["w1"].base = "IDLE";
  slurm_.nodes["w2"].base = "DOWN";
  slurm_.nodes["w2"].not_responding = true;
  Configured("controller", {"munge.service", "oneslurm-reconcile.timer", "slurmctld.service"}, 0);
  SystemctlShows(Shown({
      {"Id=one-hpc-configure.service", "ActiveState=active", "SubState=exited", "Result=success",
       "ExecMainStatus=0", "LastTriggerUSec=", "NextElapseUSecRealtime="},
      {"Id=munge.service", "ActiveState=active", "SubState=running", "Result=success",
       "ExecMainStatus=0"},
      {"Id=oneslurm-reconcile.timer", "ActiveState=active", "SubState=waiting", "Result=success",
       "LastTriggerUSec=Wed 2026-12-02 10:29:00 UTC",
       "NextElapseUSecRealtime=Wed 2026-12-02 10:30:00 UTC"},
      {"Id=oneslurm-reconcile.service", "ActiveState=inactive", "SubState=dead", "Result=success",
       "ExecMainStatus=0"},
      {"Id=slurmctld.service", "ActiveState=active", "SubState=running", "Result=success",
       "ExecMainStatus=0"},
  }));

  StatusReport r = Collect(controller);
  EXPECT_EQ(r.role, "controller");
  EXPECT_EQ(r.service, "OneSlurm");
  ASSERT_TRUE(r.last_run);
  EXPECT_EQ(r.last_run->finished, "2026-12-02T10:00:00Z");
  EXPECT_EQ(r.ready.value_or(""), "YES");
  EXPECT_FALSE(r.error);
  // The timer brings its service (the result of its last run), in the order asked.
  std::vector<std::string> asked;
  for (const auto& c : m_.runner.commands()) {
    if (c.argv.size() > 1 && c.argv[1] == "show") asked.assign(c.argv.begin() + 4, c.argv.end());
  }
  EXPECT_EQ(asked, (std::vector<std::string>{"one-hpc-configure.service", "munge.service",
                                             "oneslurm-reconcile.timer",
                                             "oneslurm-reconcile.service", "slurmctld.service"}));
  ASSERT_EQ(r.units.size(), 5u);
  EXPECT_EQ(r.units[2].next_run, "Wed 2026-12-02 10:30:00 UTC");
  EXPECT_EQ(r.units[0].last_run, "");
  ASSERT_TRUE(r.reconcile);
  ASSERT_EQ(r.reconcile->decisions.size(), 2u);
  EXPECT_THAT(r.reconcile->decisions[0].vm,
              ::testing::StartsWith("VM " + std::to_string(worker.id) + " ("));
  EXPECT_EQ(r.reconcile->decisions[1].action, ReconcileDecision::Action::kDelete);
  // One OneGate request for the VM's own attributes and the reconciler's table; the
  // reconciler's two reads; and nothing changed.
  EXPECT_EQ(r.onegate_requests, 1);
  EXPECT_EQ(sim_.Requests().size(), 1u);
  EXPECT_EQ(r.slurm_calls, 2);
  EXPECT_TRUE(slurm_.log.empty());
  EXPECT_TRUE(slurm_.nodes.count("w2"));
  EXPECT_EQ(StatusExitCode(r), 0);

  std::string text = RenderStatus(r);
  EXPECT_THAT(text, HasSubstr("role:            controller (OneSlurm)\n"));
  EXPECT_THAT(text, HasSubstr("last configure:  success (exit 0, entry service), finished "
                              "2026-12-02T10:00:00Z\n"));
  EXPECT_THAT(text, HasSubstr("OneGate:         READY=YES ERROR=(not set)\n"));
  EXPECT_THAT(text, HasSubstr("oneslurm-reconcile.timer    active (waiting), last result success, "
                              "last run Wed 2026-12-02 10:29:00 UTC, next run Wed 2026-12-02 "
                              "10:30:00 UTC\n"));
  EXPECT_THAT(text, HasSubstr("NODE  STATE"));
  EXPECT_THAT(text, HasSubstr("w2    DOWN+NOT_RESPONDING+DYNAMIC_NORM  -"));
  EXPECT_THAT(text, HasSubstr("delete: "));
  EXPECT_THAT(text, HasSubstr("cost: 1 OneGate request, 2 Slurm calls\n"));
  EXPECT_THAT(text, Not(HasSubstr("FAILED")));
  auto j = StatusJson(r);
  EXPECT_EQ(j["reconciler"]["nodes"][1]["action"], "delete");
  EXPECT_EQ(j["onegate"]["READY"], "YES");
  EXPECT_EQ(j["exit_code"], 0);
}

// With elastic mode on, the last cycle's decision and since when it stands, read from the
// cycle's state file at no extra request; without it (its timer not enabled), no such section.
TEST_F(StatusTest, AControllerInElasticModeShowsTheLastCyclesDecision) {
  int service = sim_.CreateService("OneSlurm",
                                   {fakes::SimRole("controller", 1), fakes::SimRole("worker", 0)});
  auto controller = sim_.AddVm(service, "controller");
  SystemctlShows("");
  Configured("controller", {"munge.service", slurm::kElasticTimer, "slurmctld.service"}, 0);
  StatusReport none = Collect(controller);
  ASSERT_TRUE(none.elastic);
  EXPECT_THAT(RenderStatus(none),
              HasSubstr("elastic mode: no cycle has recorded a decision yet\n"));

  ElasticState state;
  state.last_decision.lines = {
      "wait: 1 job(s) (7) wait for 2 node(s); 0 idle, 0 booting, 0 to be "
      "created: the service is in WARNING",
      "not counted as capacity and never terminated by the cycle: VM 4 "
      "is POWEROFF"};
  state.last_decision.since = 1796637600;  // 2026-12-07T10:00:00Z
  ASSERT_TRUE(SaveElasticState(*m_.files, kElasticStateFile, state));
  StatusReport r = Collect(controller);
  ASSERT_TRUE(r.elastic);
  EXPECT_EQ(r.elastic->lines, state.last_decision.lines);
  EXPECT_EQ(r.onegate_requests, 1) << "the decision costs no request";
  std::string text = RenderStatus(r);
  EXPECT_THAT(text, HasSubstr("elastic mode: the last cycle's decision, the same since "
                              "2026-12-07T10:00:00Z:\n  wait: 1 job(s) (7) wait for 2 node(s)"));
  EXPECT_THAT(text, HasSubstr("\n  not counted as capacity and never terminated by the cycle: "
                              "VM 4 is POWEROFF\n"));
  auto j = StatusJson(r);
  EXPECT_EQ(j["elastic"]["since"], "2026-12-07T10:00:00Z");
  EXPECT_EQ(j["elastic"]["decision"].size(), 2u);

  Configured("controller", {"munge.service", "slurmctld.service"}, 0);  // elastic mode off again
  StatusReport off = Collect(controller);
  EXPECT_FALSE(off.elastic);
  EXPECT_THAT(RenderStatus(off), Not(HasSubstr("elastic mode")));
  EXPECT_TRUE(StatusJson(off)["elastic"].is_null());
}

TEST_F(StatusTest, AWorkerWhoseConfigureFailedShowsTheErrorAndAFailedUnitAndExitsOne) {
  int service = sim_.CreateService("OneSlurm",
                                   {fakes::SimRole("controller", 1), fakes::SimRole("worker", 1)});
  sim_.AddVm(service, "controller");
  sim::VmSpec spec;
  spec.user_template["ERROR"] = "the controller did not publish its address";
  auto worker = sim_.AddVm(service, "worker", spec);
  Configured("worker", {"oneslurm-follow-controller.timer"}, 5,
             "the controller did not publish its address");
  SystemctlShows(Shown({
      {"Id=one-hpc-configure.service", "ActiveState=failed", "SubState=failed", "Result=exit-code",
       "ExecMainStatus=5"},
      {"Id=oneslurm-follow-controller.timer", "ActiveState=active", "SubState=waiting",
       "Result=success"},
      {"Id=oneslurm-follow-controller.service", "ActiveState=inactive", "SubState=dead",
       "Result=success", "ExecMainStatus=0"},
  }));
  StatusReport r = Collect(worker);
  EXPECT_FALSE(r.reconcile);  // a worker runs no reconciler
  EXPECT_EQ(r.slurm_calls, 0);
  EXPECT_EQ(r.onegate_requests, 1);  // GET /vm
  EXPECT_EQ(r.error.value_or(""), "the controller did not publish its address");
  EXPECT_EQ(StatusExitCode(r), 1);
  std::string text = RenderStatus(r);
  EXPECT_THAT(text, HasSubstr("last configure:  failure (exit 5, entry service)"));
  EXPECT_THAT(text, HasSubstr("  its log:       journalctl -u one-hpc-configure.service\n"));
  // Run as one-context's hook, the output reaches the journal under one-contextd's name.
  EXPECT_THAT(ConfigureLogCommand("one-context"), HasSubstr("journalctl -t one-contextd"));
  EXPECT_EQ(ConfigureLogCommand("reconfigure"), "journalctl -u one-hpc-reconfigure.service");
  EXPECT_THAT(text, HasSubstr("  error:         the controller did not publish its address\n"));
  EXPECT_THAT(text, HasSubstr("one-hpc-configure.service           failed (failed), last result "
                              "exit-code (exit 5)   <- FAILED\n"));
  EXPECT_THAT(text, Not(HasSubstr("Slurm nodes")));
}

TEST_F(StatusTest, WithoutOneGateOrSystemdItSaysWhatItCouldNotRead) {
  StatusInputs inputs;
  inputs.onegate_why = "cannot read the VM's context: no context found";
  m_.runner.On({"systemctl", "show"}, [](const Command&) {
    return fakes::Exit(1, "", "System has not been booted with systemd as init system (PID 1).");
  });
  StatusReport r = CollectStatus(inputs, *m_.files, m_.runner, m_.clock);
  EXPECT_EQ(StatusExitCode(r), 1);
  std::string text = RenderStatus(r);
  EXPECT_THAT(text, HasSubstr("role:            unknown (no configure has recorded one)\n"));
  EXPECT_THAT(text, HasSubstr("last configure:  none since boot\n"));
  EXPECT_THAT(text, HasSubstr("OneGate:         not read: cannot read the VM's context"));
  EXPECT_THAT(text, HasSubstr("has not been booted with systemd"));
  // Under --root nothing of this machine is asked, and that is not a failure of the VM.
  Configured("storage", {}, 0);
  inputs.query_machine = false;
  size_t before = m_.runner.commands().size();
  StatusReport rooted = CollectStatus(inputs, *m_.files, m_.runner, m_.clock);
  EXPECT_EQ(m_.runner.commands().size(), before);
  EXPECT_EQ(rooted.service, "Open OnDemand");
  EXPECT_EQ(StatusExitCode(rooted), 0);
}

TEST_F(StatusTest, ItRepeatsTheWarningsOfTheContext) {
  StatusInputs inputs;
  inputs.onegate_why = "no OneGate here";
  StatusReport r = CollectStatus(inputs, *m_.files, m_.runner, m_.clock);
  r.warnings = {"ONEAPP_AUTH_LOCAL_USERS gives clear-text passwords for bob: ..."};
  EXPECT_THAT(RenderStatus(r),
              HasSubstr("warning:         ONEAPP_AUTH_LOCAL_USERS gives clear-text passwords for "
                        "bob: ...\n"));
  EXPECT_EQ(StatusJson(r)["warnings"][0], r.warnings[0]);
}

TEST_F(StatusTest, APortalSaysWhetherItsImageHasOpenOnDemand) {
  StatusInputs inputs;
  inputs.onegate_why = "no OneGate here";
  inputs.query_machine = false;
  Configured("portal", {}, 0);
  m_.Write(ood::kImageInfoFile, R"({"open_ondemand": false, "variant": "VM lab"})");
  std::string text = RenderStatus(CollectStatus(inputs, *m_.files, m_.runner, m_.clock));
  EXPECT_THAT(text, HasSubstr("Open OnDemand:   absent: no Open OnDemand in this image (VM lab)"));
  m_.Write(ood::kUpdateOodPortal, "#!/bin/sh\n");
  StatusReport installed = CollectStatus(inputs, *m_.files, m_.runner, m_.clock);
  EXPECT_EQ(installed.open_ondemand, "installed");
  EXPECT_EQ(StatusJson(installed)["open_ondemand"], "installed");
  // Other roles have no such line.
  Configured("storage", {}, 0);
  EXPECT_THAT(RenderStatus(CollectStatus(inputs, *m_.files, m_.runner, m_.clock)),
              Not(HasSubstr("Open OnDemand:")));
}

}  // namespace
}  // namespace onehpc
