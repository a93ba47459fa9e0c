// The elastic cycle: OneGate is the in-process simulator (real HTTP on 127.0.0.1, modelling
// OneFlow's cardinality changes, cooldown and watchdog), Slurm is FakeSlurm, the state file
// lives under a temporary root.
#include "roles/timers/elastic_cycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "roles/names.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"

namespace onehpc {
namespace {

using ::testing::HasSubstr;
using Kind = elastic::Action::Kind;

// A time as slurmctld prints it, `ago` seconds before `now`.
std::string SlurmTime(long long now, long long ago) {
  std::time_t t = static_cast<std::time_t>(now - ago);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

class ElasticCycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(sim_.Start(), 0);
    sim::RoleSpec worker = fakes::SimRole("worker", 0);
    worker.min_vms = 1;
    worker.max_vms = 4;
    worker.cooldown_ms = 60000;
    service_ = sim_.CreateService("OneSlurm", {fakes::SimRole("controller", 1), worker});
    controller_ = sim_.AddVm(service_, "controller");
    slurm_.Install(machine_.runner);
    now_ = static_cast<long long>(std::time(nullptr));
  }
  // A worker VM publishing `name`, and its registered node (unless `registered` is false).
  int AddWorker(const std::string& name, bool registered = true) {
    sim::VmSpec spec;
    if (!name.empty()) spec.user_template[slurm::kAttrNodeName] = name;
    int id = sim_.AddVm(service_, "worker", spec).id;
    if (registered && !name.empty()) slurm_.nodes[name];
    return id;
  }
  void Idle(const std::string& name, long long seconds) {
    slurm_.nodes[name].last_busy = SlurmTime(now_, seconds);
  }
  Result<ElasticReport> Run(bool dry_run = false, std::optional<bool> kicked = std::nullopt) {
    OneGateClient client(fakes::SimConfig(sim_, controller_), http_, machine_.clock);
    ElasticOptions o;
    o.kicked = kicked;
    o.limits.min_nodes = 1;
    o.limits.max_nodes = 4;
    o.dry_run = dry_run;
    o.now = [this] { return now_ + shift_; };
    sim_.ClearRequests();
    slurm_.log.clear();
    return RunElastic(o, client, machine_.runner, machine_.clock, *machine_.files);
  }
  ElasticDecisionRecord LastDecision() {
    auto state = LoadElasticState(*machine_.files, kElasticStateFile);
    EXPECT_TRUE(state) << state.error().message;
    return state ? state->last_decision : ElasticDecisionRecord{};
  }
  std::string StateFile() {
    auto text = machine_.files->ReadIfExists(kElasticStateFile);
    return text && *text ? **text : "";
  }
  static std::vector<Kind> Kinds(const ElasticReport& r) {
    std::vector<Kind> out;
    for (const auto& o : r.outcomes) out.push_back(o.action.kind);
    return out;
  }

  fakes::FakeMachine machine_;
  sim::OneGateSimulator sim_;
  int service_ = -1;
  sim::VmHandle controller_;
  CurlTransport http_;
  fakes::FakeSlurm slurm_;
  long long now_ = 0;
  long long shift_ = 0;
};

TEST_F(ElasticCycleTest, AWaitingJobGrowsTheRoleAndARefusalDuringCooldownIsAskedAgain) {
  AddWorker("w1");
  slurm_.nodes["w1"].base = "ALLOCATED";
  slurm_.pending = {{"7", "Resources", 2}};
  ASSERT_EQ(sim_.SetCardinality(service_, "worker", 1), true);
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(Kinds(*r), std::vector<Kind>{Kind::kGrow});
  EXPECT_TRUE(r->outcomes[0].done);
  EXPECT_EQ(sim_.Cardinality(service_, "worker"), 3);
  // OneFlow creates the two VMs; the role cools down; another job waits.
  AddWorker("w2");
  AddWorker("w3");
  slurm_.nodes["w2"].base = slurm_.nodes["w3"].base = "ALLOCATED";
  slurm_.pending = {{"8", "Resources", 1}};
  auto refused = Run();
  ASSERT_TRUE(refused) << refused.error().message;
  ASSERT_EQ(Kinds(*refused), std::vector<Kind>{Kind::kWait})
      << "the service is in COOLDOWN: the cycle does not even ask";
  EXPECT_THAT(refused->outcomes[0].action.reason, HasSubstr("cooling down"));
  EXPECT_EQ(ElasticExitCode(refused), 0);
  // A 400 from OneFlow (the role state shows RUNNING, the service refuses): not a failure.
  sim_.SetServiceState(service_, sim::states::kRunning);
  sim_.SetPermission("service.change_cardinality", true);
  sim::Fault refuse;
  refuse.kind = sim::FaultKind::kStatus;
  refuse.method = "PUT";
  refuse.path_prefix = "/service/role";
  refuse.status = 400;
  refuse.body = "Error performing action on service 1 role worker";
  sim_.InjectFault(refuse);
  auto asked = Run();
  ASSERT_TRUE(asked) << asked.error().message;
  ASSERT_EQ(Kinds(*asked), std::vector<Kind>{Kind::kGrow});
  EXPECT_FALSE(asked->outcomes[0].done);
  EXPECT_FALSE(asked->outcomes[0].failed);
  EXPECT_THAT(asked->outcomes[0].note, HasSubstr("asked again next cycle"));
  EXPECT_EQ(ElasticExitCode(asked), 0);
  sim_.ClearFaults();
  auto again = Run();
  ASSERT_TRUE(again);
  EXPECT_EQ(sim_.Cardinality(service_, "worker"), 4);
}

TEST_F(ElasticCycleTest, IdleNodesAreDrainedThenTheirOwnVmsTerminatedAndTheWatchdogLowersTheRole) {
  AddWorker("w1");
  int w2 = AddWorker("w2");
  int w3 = AddWorker("w3");
  slurm_.nodes["w1"].base = "ALLOCATED";
  Idle("w2", 700);
  Idle("w3", 650);
  auto drain = Run();
  ASSERT_TRUE(drain) << drain.error().message;
  EXPECT_EQ(Kinds(*drain), (std::vector<Kind>{Kind::kDrain, Kind::kDrain}));
  EXPECT_EQ(slurm_.log,
            (std::vector<std::string>{"update w2 state=DRAIN reason=one-hpc elastic: idle",
                                      "update w3 state=DRAIN reason=one-hpc elastic: idle"}));
  auto terminate = Run();
  ASSERT_TRUE(terminate) << terminate.error().message;
  EXPECT_EQ(Kinds(*terminate), (std::vector<Kind>{Kind::kTerminate, Kind::kTerminate}));
  std::vector<int> gone;
  for (const auto& t : sim_.Terminations()) gone.push_back(t.vm_id);
  EXPECT_EQ(gone, (std::vector<int>{w2, w3}));
  EXPECT_EQ(sim_.Cardinality(service_, "worker"), 1);
  EXPECT_EQ(sim_.Nodes(service_, "worker").size(), 1u);
}

TEST_F(ElasticCycleTest, ANodeThatGotAJobBetweenTheReadAndTheTerminateKeepsItsVm) {
  AddWorker("w1");
  AddWorker("w2");
  slurm_.nodes["w1"].base = "ALLOCATED";
  slurm_.nodes["w2"].drain = true;
  slurm_.nodes["w2"].reason = elastic::kElasticIdleReason;
  // The cycle's first read shows w2 IDLE+DRAIN; the read right before the terminate shows a
  // job on it (a drain that came after the scheduler placed it). Slurm 22.05's text here.
  slurm_.json = false;
  machine_.runner.On({"scontrol", "-o", "show", "node", "w2"}, [](const Command&) {
    return fakes::Exit(0,
                       "NodeName=w2 State=MIXED+DRAIN+DYNAMIC_NORM Reason=one-hpc elastic: "
                       "idle [root@2026-11-29T16:12:52]\n");
  });
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(Kinds(*r), std::vector<Kind>{Kind::kTerminate});
  EXPECT_FALSE(r->outcomes[0].done);
  EXPECT_THAT(r->outcomes[0].note, HasSubstr("a job got onto it"));
  EXPECT_TRUE(sim_.Terminations().empty());
}

TEST_F(ElasticCycleTest, FailedBootsAreTerminatedCountedAcrossCyclesAndStopWithAnError) {
  AddWorker("w1");
  for (int i = 0; i < 3; ++i) {
    slurm_.pending = {{"9", "Resources", 2}};
    AddWorker("", false);
    auto seen = Run();  // the first cycle that sees it running: its boot's age starts
    ASSERT_TRUE(seen) << seen.error().message;
    for (const auto& o : seen->outcomes) EXPECT_NE(o.action.kind, Kind::kTerminate);
    shift_ += 1000;
    auto r = Run();
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_FALSE(r->outcomes.empty());
    EXPECT_EQ(r->outcomes[0].action.kind, Kind::kTerminate);
    EXPECT_THAT(r->outcomes[0].action.reason,
                HasSubstr("failed boot " + std::to_string(i + 1) + " in a row"));
  }
  EXPECT_EQ(sim_.Terminations().size(), 3u);
  std::string error = sim_.UserAttr(controller_.id, "ERROR");
  EXPECT_THAT(error, HasSubstr("elastic: 3 worker boots in a row never registered"));
  // Recorded as published (roles/published.h): configure's next success erases it too.
  EXPECT_EQ(machine_.Read("/var/lib/one-hpc/onegate-published"), "ERROR\n");
  // Stopped: a fourth bad VM is left for the operator, no grow.
  AddWorker("", false);
  ASSERT_TRUE(Run());
  shift_ += 1000;
  auto stopped = Run();
  ASSERT_TRUE(stopped);
  EXPECT_EQ(Kinds(*stopped), std::vector<Kind>{Kind::kStopReplacing});
  EXPECT_EQ(sim_.Terminations().size(), 3u);
  // A worker registers: the count starts again and the cycle's ERROR goes.
  AddWorker("w5");
  auto back = Run();
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(sim_.UserAttr(controller_.id, "ERROR"), "");
  EXPECT_EQ(machine_.Read("/var/lib/one-hpc/onegate-published"), "");
}

// Review finding N2: an operator's reboot of a worker (its node deleted by self-drain until it
// registers again) is no failed boot, and a VM still pending or held is not late whatever its
// STIME: the age of a boot counts from the first cycle that saw the VM running.
TEST_F(ElasticCycleTest, ARebootedWorkerOrAPendingVmIsNeverAFailedBoot) {
  AddWorker("w1");
  const int rebooted = AddWorker("w2");
  const int pending = AddWorker("", false);
  ASSERT_TRUE(sim_.SetVmState(pending, sim::states::kVmPending, 0));
  ASSERT_TRUE(Run());
  slurm_.nodes.erase("w2");  // self-drain deleted it at the shutdown of the reboot
  shift_ = 1000;             // past boot_seconds (900) for both
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(sim_.Terminations().empty());
  for (const auto& o : r->outcomes) EXPECT_NE(o.action.kind, Kind::kTerminate);
  for (const auto& w : r->snapshot.workers) {
    if (w.vm_id == rebooted) EXPECT_TRUE(w.registered_before);
    if (w.vm_id == pending) EXPECT_EQ(w.vm_age_seconds, 0);
  }
  // The pending VM runs at last: late only boot_seconds after this cycle saw it running.
  ASSERT_TRUE(sim_.SetVmState(pending, sim::states::kVmActive, sim::states::kLcmRunning));
  ASSERT_TRUE(Run());
  shift_ += 1000;
  auto late = Run();
  ASSERT_TRUE(late) << late.error().message;
  ASSERT_FALSE(late->outcomes.empty());
  EXPECT_EQ(late->outcomes[0].action.vm_id, pending);
  EXPECT_THAT(late->outcomes[0].action.reason, HasSubstr("failed boot 1 in a row"));
  // The rebooted worker that never comes back is replaced after an hour, not counted.
  shift_ += 3600;
  auto gone = Run();
  ASSERT_TRUE(gone) << gone.error().message;
  bool replaced = false;
  for (const auto& o : gone->outcomes) {
    if (o.action.kind != Kind::kTerminate || o.action.vm_id != rebooted) continue;
    replaced = true;
    EXPECT_THAT(o.action.reason, HasSubstr("not a failed boot"));
  }
  EXPECT_TRUE(replaced);
}

// Review finding N5: a publication the cycle cannot read for sure changes nothing. Read as "not
// published", a malformed name would make a busy worker a failed boot; a name published twice
// would tie two VMs to one node; a VM that publishes nothing while a node has its address may
// be that node.
TEST_F(ElasticCycleTest, AMalformedDuplicateOrUnmatchedPublicationSkipsTheCycle) {
  AddWorker("w1");
  const int twin_a = AddWorker("w2");
  const int twin_b = AddWorker("w2", false);
  shift_ = 1000;
  auto twice = Run();
  ASSERT_TRUE(twice) << twice.error().message;
  EXPECT_THAT(twice->skipped,
              HasSubstr("VMs " + std::to_string(twin_a) + " and " + std::to_string(twin_b) +
                        " both publish SLURM_NODENAME=w2"));
  EXPECT_TRUE(twice->outcomes.empty());

  // The same VM, its name an array (OneGate's real document, one attribute changed).
  ASSERT_TRUE(sim_.SetUserAttr(twin_b, slurm::kAttrNodeName, "w3"));
  auto doc = nlohmann::json::parse(sim_.ServiceJson(service_, true));
  for (auto& role : doc["SERVICE"]["roles"]) {
    for (auto& node : role["nodes"]) {
      if (node["deploy_id"] == twin_b) {
        node["vm_info"]["VM"]["USER_TEMPLATE"]["SLURM_NODENAME"] = {"w3", "w4"};
      }
    }
  }
  sim_.InjectFault(fakes::SimFault(sim::FaultKind::kMalformed, 200, doc.dump()));
  auto array = Run();
  ASSERT_TRUE(array) << array.error().message;
  EXPECT_THAT(array->skipped,
              HasSubstr("VM " + std::to_string(twin_b) + " has a SLURM_NODENAME that is not text"));
  sim_.ClearFaults();

  // A VM that publishes nothing, long past its boot time, while Slurm has a node at its address.
  ASSERT_TRUE(sim_.SetUserAttr(twin_b, slurm::kAttrNodeName, "w2"));
  ASSERT_TRUE(sim_.Terminations().empty());
  sim::VmSpec spec;
  spec.nics.push_back(fakes::SimNic("10.0.0.42", "service"));
  const int silent = sim_.AddVm(service_, "worker", spec).id;
  slurm_.nodes["w9"].addr = "10.0.0.42";
  sim_.ClearRequests();
  auto unmatched = Run();
  ASSERT_TRUE(unmatched) << unmatched.error().message;
  EXPECT_THAT(unmatched->skipped, HasSubstr("both publish"));  // the twins still
  // Without the twins: only the silent VM is in question.
  ASSERT_TRUE(sim_.SetUserAttr(twin_b, slurm::kAttrNodeName, "w5"));
  slurm_.nodes["w5"];
  ASSERT_TRUE(Run());
  shift_ += 1000;
  auto late = Run();
  ASSERT_TRUE(late) << late.error().message;
  EXPECT_THAT(late->skipped, HasSubstr("VM " + std::to_string(silent) +
                                       " publishes no SLURM_NODENAME but Slurm node w9 has its "
                                       "address 10.0.0.42"));
  EXPECT_TRUE(sim_.Terminations().empty());
}

// Review finding N13: a job array counts each pending task (squeue -r), and a too large one is
// told once, through the array's id; a job the idle nodes cannot serve stops counting after
// unservable_seconds of them standing ready, the time kept across cycles.
TEST_F(ElasticCycleTest, AJobArrayCountsItsTasksAndIsToldOnce) {
  AddWorker("w1");
  slurm_.nodes["w1"].base = "ALLOCATED";
  slurm_.nodes["w1"].jobs = {"1"};
  slurm_.pending = {{"77", "Resources", 1, "", 3}, {"88", "Resources", 9, "", 2}};
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_FALSE(r->outcomes.empty());
  EXPECT_EQ(r->outcomes.back().action.kind, Kind::kGrow);
  EXPECT_THAT(r->outcomes.back().action.reason, HasSubstr("(77_1,77_2,77_3) wait for 3 node(s)"));
  EXPECT_EQ(r->outcomes.back().action.target, 4);
  // The array too large for the role: one AdminComment, on the array.
  std::vector<std::string> told;
  for (const auto& line : slurm_.log) {
    if (line.rfind("update job ", 0) == 0) told.push_back(line.substr(0, line.find(' ', 11)));
  }
  EXPECT_EQ(told, std::vector<std::string>{"update job 88"});
  EXPECT_THAT(slurm_.pending[1].admin_comment, HasSubstr("asks for 9 nodes"));
}

TEST_F(ElasticCycleTest, AJobTheIdleNodesCannotServeStopsCountingAcrossCycles) {
  AddWorker("w1");
  AddWorker("w2");
  Idle("w1", 5000);
  Idle("w2", 5000);
  slurm_.pending = {{"7", "Resources", 2}};
  auto first = Run();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->outcomes.empty());
  EXPECT_EQ(first->snapshot.ready_seconds.at("7"), 0);
  shift_ = 600;
  auto later = Run();
  ASSERT_TRUE(later) << later.error().message;
  EXPECT_EQ(later->snapshot.ready_seconds.at("7"), 600);
  bool drained = false;
  for (const auto& o : later->outcomes) drained = drained || o.action.kind == Kind::kDrain;
  EXPECT_TRUE(drained);
}

TEST_F(ElasticCycleTest, APoweredOffWorkerIsTheOperatorsAndNeverAFailedBoot) {
  AddWorker("w1");
  int parked = AddWorker("w2", false);  // powered off by the operator: its node left Slurm
  ASSERT_TRUE(sim_.SetVmState(parked, sim::states::kVmPoweroff, 0));
  shift_ = 5000;
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->outcomes.empty());
  EXPECT_TRUE(sim_.Terminations().empty());
  EXPECT_EQ(r->snapshot.workers.size(), 1u);
  EXPECT_EQ(r->snapshot.leaving_vms, 1);
  // What `one-hpc status` shows: nothing to change, and the VM left to the operator.
  EXPECT_EQ(LastDecision().lines,
            (std::vector<std::string>{
                "no change: 1 worker VM(s), 1 registered, 0 pending job(s)",
                "not counted as capacity and never terminated by the cycle: VM " +
                    std::to_string(parked) +
                    " is POWEROFF; the operator resumes (onevm resume) or terminates (onevm "
                    "terminate) it"}));
}

// The last decision, as `one-hpc status` shows it: each action as it went, or why nothing was
// decided, with the time of the first cycle that decided exactly that.
TEST_F(ElasticCycleTest, TheLastDecisionIsKeptWithTheTimeItFirstStood) {
  AddWorker("w1");
  slurm_.nodes["w1"].base = "ALLOCATED";
  slurm_.pending = {{"7", "Resources", 2}};
  ASSERT_EQ(sim_.SetCardinality(service_, "worker", 1), true);
  ASSERT_TRUE(Run());
  ElasticDecisionRecord grown = LastDecision();
  ASSERT_EQ(grown.lines.size(), 1u);
  EXPECT_THAT(grown.lines[0],
              ::testing::StartsWith("grow role worker to 3 VMs: 1 job(s) (7) wait"));
  EXPECT_EQ(grown.since, now_);
  // The two VMs asked for are still to be created: the next cycles change nothing, and say
  // so from the first of them on.
  shift_ = 10;
  ASSERT_TRUE(Run());
  const std::vector<std::string> nothing = {
      "no change: 1 worker VM(s), 1 registered, 1 pending job(s)"};
  EXPECT_EQ(LastDecision().lines, nothing);
  EXPECT_EQ(LastDecision().since, now_ + 10);
  shift_ = 70;
  ASSERT_TRUE(Run());
  EXPECT_EQ(LastDecision().lines, nothing);
  EXPECT_EQ(LastDecision().since, now_ + 10) << "the same decision: the time it first stood";
  // A cycle that decides nothing says why.
  sim_.InjectFault(fakes::SimFault(sim::FaultKind::kStatus, 500, "Internal error"));
  shift_ = 130;
  ASSERT_TRUE(Run());
  ElasticDecisionRecord skipped = LastDecision();
  ASSERT_EQ(skipped.lines.size(), 1u);
  EXPECT_THAT(skipped.lines[0],
              ::testing::StartsWith("no change this cycle: OneGate GET /service?extended=true "
                                    "failed: "));
  EXPECT_EQ(skipped.since, now_ + 130);
}

// One worker powered off puts the service in WARNING (the simulator, as OneFlow's role
// monitor: a POWEROFF or UNKNOWN VM), and OneFlow then refuses every scale request: the cycle
// waits, naming the VM and what the operator can do, never terminates it, and grows as soon
// as the VM runs again.
TEST_F(ElasticCycleTest, InWarningTheCycleNamesTheVmThatHoldsItAndGrowsOnceItRuns) {
  AddWorker("w1");
  int parked = AddWorker("w2");
  ASSERT_TRUE(sim_.SetVmState(parked, sim::states::kVmPoweroff, 0));
  slurm_.nodes.erase("w2");
  slurm_.pending = {{"7", "Resources", 2}};
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(Kinds(*r), std::vector<Kind>{Kind::kWait});
  EXPECT_THAT(r->outcomes[0].action.reason,
              HasSubstr("the service is in WARNING, and OneFlow scales it only when it is "
                        "RUNNING: VM " +
                        std::to_string(parked) + " (worker) is POWEROFF; the operator resumes"));
  EXPECT_EQ(sim_.Cardinality(service_, "worker"), 2);
  EXPECT_TRUE(sim_.Terminations().empty());
  for (const auto& req : sim_.Requests()) EXPECT_NE(req.method, "PUT") << req.path;
  // Lost rather than powered off (UNKNOWN: its host does not answer): the same, and its node,
  // still in Slurm, is no capacity.
  ASSERT_TRUE(sim_.SetVmState(parked, sim::states::kVmActive, 16));
  slurm_.nodes["w2"].not_responding = true;
  shift_ = 5000;
  auto lost = Run();
  ASSERT_TRUE(lost) << lost.error().message;
  ASSERT_EQ(Kinds(*lost), std::vector<Kind>{Kind::kWait});
  EXPECT_THAT(lost->outcomes[0].action.reason,
              HasSubstr("VM " + std::to_string(parked) + " (worker) is in LCM state 16 (UNKNOWN)"));
  EXPECT_EQ(lost->snapshot.workers.size(), 1u);
  EXPECT_EQ(lost->snapshot.leaving_vms, 1);
  EXPECT_TRUE(sim_.Terminations().empty());
  // Resumed: the service runs again and the cycle asks for the node the job waits for.
  ASSERT_TRUE(sim_.SetVmState(parked, sim::states::kVmActive, sim::states::kLcmRunning));
  slurm_.nodes["w2"].not_responding = false;
  slurm_.nodes["w2"].base = "ALLOCATED";
  auto resumed = Run();
  ASSERT_TRUE(resumed) << resumed.error().message;
  EXPECT_EQ(Kinds(*resumed), std::vector<Kind>{Kind::kGrow});
  EXPECT_EQ(sim_.Cardinality(service_, "worker"), 3);
}

TEST_F(ElasticCycleTest, AJobLargerThanTheMaximumIsToldOnceInItsAdminComment) {
  AddWorker("w1");
  slurm_.pending = {{"11", "Resources", 9}};
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(Kinds(*r), std::vector<Kind>{Kind::kJobTooLarge});
  EXPECT_THAT(slurm_.pending[0].admin_comment,
              HasSubstr("one-hpc elastic: job 11 asks for 9 nodes; the service has at most 4"));
  auto again = Run();
  ASSERT_TRUE(again);
  EXPECT_TRUE(slurm_.log.empty()) << "told once";
  EXPECT_EQ(sim_.Cardinality(service_, "worker"), 1);
}

TEST_F(ElasticCycleTest, OneGateTroubleOrADryRunChangesNothing) {
  AddWorker("w1");
  AddWorker("w2");
  Idle("w1", 5000);
  Idle("w2", 5000);
  slurm_.pending = {};
  sim_.InjectFault(fakes::SimFault(sim::FaultKind::kStatus, 500, "Internal error"));
  auto failed = Run();
  ASSERT_TRUE(failed);
  EXPECT_THAT(failed->skipped, HasSubstr("GET /service?extended=true failed"));
  EXPECT_TRUE(slurm_.log.empty());
  const std::string state = StateFile();  // the skipped cycle's decision, for `one-hpc status`
  EXPECT_THAT(state, HasSubstr("no change this cycle"));
  sim_.ClearFaults();
  shift_ = 60;
  auto dry = Run(true);
  ASSERT_TRUE(dry) << dry.error().message;
  EXPECT_EQ(Kinds(*dry), std::vector<Kind>{Kind::kDrain});
  EXPECT_TRUE(slurm_.log.empty());
  EXPECT_EQ(StateFile(), state) << "a dry run writes no state";
}

TEST_F(ElasticCycleTest, ACycleReadsWithOneOneGateRequestAndTwoSlurmCallsWhateverTheWorkers) {
  for (int i = 0; i < 60; ++i) {
    std::string name = "w" + std::to_string(i);
    AddWorker(name);
    slurm_.nodes[name].base = "ALLOCATED";
  }
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->outcomes.empty());
  EXPECT_EQ(r->onegate_requests, 1);
  EXPECT_EQ(r->slurm_calls, 2);
}

// A submission (job_submit.lua creates the kick file) starts a cycle through
// oneslurm-elastic.path: the cycle waits out the spacing from the last one, removes the kick,
// and waits for the new job to get its reason before it counts.
TEST_F(ElasticCycleTest, AKickedCycleKeepsItsSpacingRemovesTheKickAndWaitsForTheNewJobsReason) {
  AddWorker("w1");
  slurm_.nodes["w1"].base = "ALLOCATED";
  machine_.Write(slurm::kElasticKickFile, "");
  machine_.Write(slurm::kElasticLastCycleFile, std::to_string(now_ - 2) + "\n");
  int reads = 0;
  machine_.runner.On({"squeue", "-h", "-a", "-t", "PENDING"}, [&reads](const Command&) {
    // slurmctld's scheduler looks at the job two reads after its submission.
    return fakes::Exit(0, ++reads <= 2 ? "7|None|2\n" : "7|Resources|2\n");
  });
  const Duration slept_before = machine_.clock.slept();
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(Kinds(*r), std::vector<Kind>{Kind::kGrow});
  EXPECT_EQ(sim_.Cardinality(service_, "worker"), 3);
  EXPECT_FALSE(machine_.Exists(slurm::kElasticKickFile)) << "the cycle consumed the kick";
  EXPECT_EQ(machine_.Read(slurm::kElasticLastCycleFile), std::to_string(now_) + "\n");
  EXPECT_EQ(reads, 4) << "3 polls until the reason came, then the cycle's own read";
  // 3 s left of the 5 s spacing, then 2 polls 1 s apart.
  EXPECT_EQ((machine_.clock.slept() - slept_before).count(), 5000);
  EXPECT_EQ(r->onegate_requests, 2) << "the read and the grow: the polls are squeue's alone";
}

TEST_F(ElasticCycleTest, AJobThatNeverGetsAReasonHoldsAKickedCycleFourSecondsAtMost) {
  AddWorker("w1");
  slurm_.nodes["w1"].base = "ALLOCATED";
  slurm_.pending = {{"7", "None", 2}};
  machine_.Write(slurm::kElasticKickFile, "");
  const int cardinality = sim_.Cardinality(service_, "worker");
  const Duration slept_before = machine_.clock.slept();
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((machine_.clock.slept() - slept_before).count(), 4000);
  EXPECT_TRUE(r->outcomes.empty()) << "a job Slurm has not looked at is not counted";
  EXPECT_EQ(sim_.Cardinality(service_, "worker"), cardinality);
  // A cycle of the timer (no kick) right after it reads once and waits for nothing: neither
  // the spacing (only a kicked cycle keeps it) nor the new job's reason.
  ASSERT_EQ(machine_.Read(slurm::kElasticLastCycleFile), std::to_string(now_) + "\n");
  const Duration slept_then = machine_.clock.slept();
  auto timer = Run();
  ASSERT_TRUE(timer) << timer.error().message;
  EXPECT_EQ(timer->slurm_calls, 2);
  EXPECT_EQ(machine_.clock.slept(), slept_then);
}

// `one-hpc elastic` consumes the kick before it loads anything (a kick left by a run that stops
// early would start the unit again at once); the cycle then behaves as a kicked one.
TEST_F(ElasticCycleTest, ACallersConsumedKickMakesAKickedCycle) {
  AddWorker("w1");
  slurm_.nodes["w1"].base = "ALLOCATED";
  machine_.Write(slurm::kElasticKickFile, "");
  ElasticOptions paths;
  ASSERT_TRUE(ConsumeTheKick(paths, machine_.clock, *machine_.files, [this] { return now_; }));
  EXPECT_FALSE(machine_.Exists(slurm::kElasticKickFile));
  EXPECT_FALSE(ConsumeTheKick(paths, machine_.clock, *machine_.files, [this] { return now_; }))
      << "consumed once";
  int reads = 0;
  machine_.runner.On({"squeue", "-h", "-a", "-t", "PENDING"}, [&reads](const Command&) {
    return fakes::Exit(0, ++reads <= 1 ? "7|None|2\n" : "7|Resources|2\n");
  });
  auto r = Run(false, true);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(Kinds(*r), std::vector<Kind>{Kind::kGrow});
  EXPECT_EQ(reads, 3) << "2 polls until the reason came, then the cycle's own read";
}

TEST_F(ElasticCycleTest, ADryRunNeitherWaitsNorConsumesTheKick) {
  AddWorker("w1");
  machine_.Write(slurm::kElasticKickFile, "");
  machine_.Write(slurm::kElasticLastCycleFile, std::to_string(now_) + "\n");
  const Duration slept_before = machine_.clock.slept();
  ASSERT_TRUE(Run(true));
  EXPECT_TRUE(machine_.Exists(slurm::kElasticKickFile));
  EXPECT_EQ(machine_.Read(slurm::kElasticLastCycleFile), std::to_string(now_) + "\n");
  EXPECT_EQ(machine_.clock.slept(), slept_before);
}

}  // namespace
}  // namespace onehpc
