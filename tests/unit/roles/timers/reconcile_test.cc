// The reconciler: every case of the three conditions, OneGate faults, cost per cycle.
// OneGate is the in-process simulator (real HTTP on 127.0.0.1); Slurm is FakeSlurm.
#include "roles/timers/reconcile.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "roles/names.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc {
namespace {

using fakes::FakeSlurm;
using Action = ReconcileDecision::Action;

class ReconcileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(sim_.Start(), 0);
    service_ = sim_.CreateService("OneSlurm",
                                  {fakes::SimRole("controller", 1), fakes::SimRole("worker", 2)});
    controller_ = sim_.AddVm(service_, "controller");
    slurm_.Install(runner_);
  }
  // A worker VM publishing `name` (nothing when empty), with NICs at `ips`.
  int AddWorker(const std::string& name, const std::vector<std::string>& ips = {}) {
    sim::VmSpec spec;
    if (!name.empty()) spec.user_template[slurm::kAttrNodeName] = name;
    for (const auto& ip : ips) {
      sim::NicSpec nic;
      nic.ip = ip;
      spec.nics.push_back(nic);
    }
    return sim_.AddVm(service_, "worker", spec).id;
  }
  FakeSlurm::Node& Node(const std::string& name, const std::string& base = "IDLE",
                        bool not_responding = false) {
    FakeSlurm::Node& n = slurm_.nodes[name];
    n.base = base;
    n.not_responding = not_responding;
    return n;
  }
  Result<ReconcileReport> Run(ReconcileOptions options = {}) {
    OneGateClient client(fakes::SimConfig(sim_, controller_), http_, clock_);
    sim_.ClearRequests();
    runner_calls_before_ = runner_.commands().size();
    return RunReconcile(options, client, runner_, clock_);
  }
  const ReconcileDecision* Find(const ReconcileReport& r, const std::string& node) {
    for (const auto& d : r.decisions) {
      if (d.node == node) return &d;
    }
    return nullptr;
  }
  size_t SlurmCalls() const { return runner_.commands().size() - runner_calls_before_; }

  sim::OneGateSimulator sim_;
  int service_ = -1;
  sim::VmHandle controller_;
  CurlTransport http_;
  fakes::FakeClock clock_;
  fakes::FakeProcessRunner runner_;
  FakeSlurm slurm_;
  size_t runner_calls_before_ = 0;
};

TEST_F(ReconcileTest, PublishedNodesAreNeverTouched) {
  AddWorker("w1");
  AddWorker("w2");
  Node("w1", "DOWN", true).jobs = {"5"};
  Node("w2", "IDLE", true);
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->skipped, "");
  EXPECT_EQ(r->Count(Action::kKeepPublished), 2);
  EXPECT_TRUE(slurm_.log.empty());
  EXPECT_EQ(ReconcileExitCode(r), 0);
}

TEST_F(ReconcileTest, UnpublishedDownOrNotRespondingIsDeleted) {
  AddWorker("w1");
  Node("w1");
  Node("gone-down", "DOWN", true);
  Node("gone-idle", "IDLE", true);  // idle* (NOT_RESPONDING before DOWN)
  log::Capture logs;
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(Find(*r, "gone-down")->action, Action::kDelete);
  EXPECT_EQ(Find(*r, "gone-idle")->action, Action::kDelete);
  EXPECT_EQ(slurm_.log, (std::vector<std::string>{"delete gone-down", "delete gone-idle"}));
  EXPECT_EQ(slurm_.nodes.size(), 1u);
  EXPECT_TRUE(
      logs.Contains("reconcile: delete gone-down: no VM of the service publishes it "
                    "and State=DOWN+NOT_RESPONDING+DYNAMIC_NORM and no job holds it"));
  // Cost: one OneGate request; show nodes + squeue + one delete per node + one verify.
  EXPECT_EQ(r->onegate_requests, 1);
  EXPECT_EQ(sim_.Requests().size(), 1u);
  EXPECT_EQ(sim_.Requests()[0].path, "/service");
  EXPECT_EQ(SlurmCalls(), 2u + 2u + 1u);
  EXPECT_EQ(r->slurm_calls, 5);
}

TEST_F(ReconcileTest, RunningJobMeansDrainWithTheExactReasonThenDeleteWhenIdle) {
  AddWorker("w1");
  Node("busy", "MIXED", true).jobs = {"17"};
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(Find(*r, "busy")->action, Action::kDrain);
  EXPECT_EQ(
      slurm_.log,
      (std::vector<std::string>{"update busy state=DRAIN reason=removed from OneFlow service"}));
  // Next cycle: still running -> left alone (no second drain).
  slurm_.log.clear();
  auto again = Run();
  ASSERT_TRUE(again);
  EXPECT_EQ(Find(*again, "busy")->action, Action::kKeepDrained);
  EXPECT_TRUE(slurm_.log.empty());
  EXPECT_EQ(SlurmCalls(), 2u);  // reads only, no verify
  // The job ended: deleted.
  slurm_.nodes["busy"].jobs.clear();
  auto later = Run();
  ASSERT_TRUE(later);
  EXPECT_EQ(Find(*later, "busy")->action, Action::kDelete);
  EXPECT_EQ(slurm_.log, (std::vector<std::string>{"delete busy"}));
  EXPECT_TRUE(slurm_.nodes.empty());
}

TEST_F(ReconcileTest, UnpublishedButRespondingIsLeftAlone) {
  AddWorker("w1");
  Node("manual", "IDLE");
  Node("drained-by-admin", "IDLE").drain = true;
  Node("allocated", "ALLOCATED").jobs = {"3"};
  auto r = Run();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->Count(Action::kKeepResponding), 3);
  EXPECT_TRUE(slurm_.log.empty());
}

TEST_F(ReconcileTest, OneGateFailuresChangeNothing) {
  AddWorker("w1");
  Node("gone", "DOWN", true);
  struct Case {
    const char* name;
    sim::Fault fault;
  } cases[] = {
      {"5xx", fakes::SimFault(sim::FaultKind::kStatus, 503, "Service Unavailable")},
      {"401", fakes::SimFault(sim::FaultKind::kStatus, 401, "Not authorized")},
      {"malformed", fakes::SimFault(sim::FaultKind::kMalformed, 200, "{\"SERVICE\": [1,")},
      {"not-a-service", fakes::SimFault(sim::FaultKind::kMalformed, 200, "{\"VM\":{}}")},
      {"reset", fakes::SimFault(sim::FaultKind::kReset)},
      {"hang", fakes::SimFault(sim::FaultKind::kHang, 0, "", std::chrono::milliseconds(1500))},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    sim_.ClearFaults();
    sim_.InjectFault(c.fault);
    log::Capture logs;
    auto r = Run();
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_NE(r->skipped, "");
    EXPECT_TRUE(r->decisions.empty());
    EXPECT_EQ(SlurmCalls(), 0u);  // not even a read
    EXPECT_TRUE(slurm_.log.empty());
    EXPECT_TRUE(logs.Contains("reconcile: no change this cycle: OneGate"));
    EXPECT_EQ(ReconcileExitCode(r), 0);
  }
  sim_.ClearFaults();
  auto ok = Run();
  ASSERT_TRUE(ok);
  EXPECT_EQ(slurm_.log, (std::vector<std::string>{"delete gone"}));
}

TEST_F(ReconcileTest, NobodyPublishedChangesNothing) {
  AddWorker("");
  AddWorker("  ");
  Node("gone", "DOWN", true);
  log::Capture logs;
  auto r = Run();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->skipped, "no VM of the service has published SLURM_NODENAME yet");
  EXPECT_EQ(SlurmCalls(), 0u);
  EXPECT_EQ(slurm_.nodes.size(), 1u);
}

TEST_F(ReconcileTest, CostDoesNotGrowWithWorkers) {
  for (int i = 0; i < 100; ++i) {
    std::string name = "w" + std::to_string(i);
    AddWorker(name);
    Node(name, i % 7 == 0 ? "DOWN" : "IDLE", i % 7 == 0);
  }
  Node("gone", "DOWN", true);
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->published_names, 100);
  EXPECT_EQ(r->Count(Action::kKeepPublished), 100);
  EXPECT_EQ(r->Count(Action::kDelete), 1);
  EXPECT_EQ(sim_.Requests().size(), 1u);
  EXPECT_EQ(SlurmCalls(), 4u);  // show nodes, squeue, delete, verify
}

// The portal: the workers' names in /etc/hosts, each at its Slurm NodeAddr when that is one of
// the publishing VM's addresses; nothing else; rewritten only when it changes; no extra call.
TEST_F(ReconcileTest, ThePortalNamesTheServicesWorkersInEtcHosts) {
  fakes::FakeMachine m;
  AddWorker("ood-worker-7", {"192.168.1.7", "10.0.1.7"});
  const int vm8 = AddWorker("ood-worker-8", {"192.168.1.8", "10.0.1.8"});
  AddWorker("ood-worker-9", {"10.0.1.9"});
  Node("ood-worker-7").addr = "10.0.1.7";
  Node("ood-worker-8").addr = "10.0.1.8";
  Node("ood-worker-9").addr = "10.0.1.5";  // another machine's address: never written
  Node("stranger").addr = "10.0.1.66";     // registered, published by no VM of the service
  ReconcileOptions options;
  options.files = m.files.get();
  auto r = Run(options);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->worker_hosts, 2);
  EXPECT_TRUE(r->hosts_changed);
  EXPECT_EQ(m.Read("/etc/hosts"), std::string(host::kWorkersBlock.begin) +
                                      "\n10.0.1.7\tood-worker-7\n10.0.1.8\tood-worker-8\n" +
                                      host::kWorkersBlock.end +
                                      "\n127.0.0.1\tlocalhost\n127.0.1.1\tdebian\n");
  EXPECT_EQ(sim_.Requests().size(), 1u);
  EXPECT_EQ(SlurmCalls(), 2u);  // show nodes, squeue: the hosts cost no call
  // Unchanged: not rewritten. A worker gone from OneGate: its name goes.
  auto again = Run(options);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->hosts_changed);
  slurm_.nodes.erase("ood-worker-8");
  sim_.TerminateVm(vm8, false);
  auto after = Run(options);
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->hosts_changed);
  EXPECT_EQ(m.Read("/etc/hosts").find("ood-worker-8"), std::string::npos);
  EXPECT_NE(m.Read("/etc/hosts").find("10.0.1.7\tood-worker-7\n"), std::string::npos);
}

TEST_F(ReconcileTest, WithoutFilesOrInADryRunEtcHostsIsLeftAlone) {
  fakes::FakeMachine m;
  AddWorker("w1", {"10.0.1.7"});
  Node("w1").addr = "10.0.1.7";
  const std::string before = m.Read("/etc/hosts");
  ASSERT_TRUE(Run());
  ReconcileOptions dry;
  dry.files = m.files.get();
  dry.dry_run = true;
  auto r = Run(dry);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->worker_hosts, 1);
  EXPECT_EQ(m.Read("/etc/hosts"), before);
}

TEST_F(ReconcileTest, ExitCodesLieAndFailuresAreReported) {
  AddWorker("w1");
  Node("gone", "DOWN", true);
  slurm_.delete_lies = true;
  log::Capture logs;
  auto r = Run();
  ASSERT_TRUE(r);
  const ReconcileDecision* d = Find(*r, "gone");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->ok);
  EXPECT_NE(d->error.find("still registered"), std::string::npos);
  EXPECT_EQ(ReconcileExitCode(r), 1);
  // A refused delete (busy: NOT_RESPONDING but not DOWN yet with a job that squeue missed).
  slurm_.delete_lies = false;
  slurm_.nodes["gone"].base = "IDLE";
  slurm_.nodes["gone"].jobs = {"9"};
  runner_.On({"squeue"}, fakes::Exit(0, ""));
  auto busy = Run();
  ASSERT_TRUE(busy);
  EXPECT_FALSE(Find(*busy, "gone")->ok);
  EXPECT_NE(Find(*busy, "gone")->error.find("Requested nodes are busy"), std::string::npos);
  EXPECT_TRUE(logs.Contains("FAILED"));
}

TEST_F(ReconcileTest, SlurmUnreadableIsAnError) {
  AddWorker("w1");
  slurm_.down = true;
  auto r = Run();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("Unable to contact slurm controller"), std::string::npos);
  EXPECT_EQ(ReconcileExitCode(r), 1);
}

TEST_F(ReconcileTest, DryRunDecidesButChangesNothing) {
  AddWorker("w1");
  Node("gone", "DOWN", true);
  ReconcileOptions o;
  o.dry_run = true;
  log::Capture logs;
  auto r = Run(o);
  ASSERT_TRUE(r);
  EXPECT_EQ(Find(*r, "gone")->action, Action::kDelete);
  EXPECT_TRUE(slurm_.log.empty());
  EXPECT_TRUE(logs.Contains("reconcile: would delete gone"));
}

TEST_F(ReconcileTest, OptionsReachSlurm) {
  AddWorker("w1");
  ReconcileOptions o;
  o.slurm_conf = "/lab/slurm.conf";
  o.command_timeout = Duration(3000);
  ASSERT_TRUE(Run(o));
  for (size_t i = runner_calls_before_; i < runner_.commands().size(); ++i) {
    const Command& c = runner_.commands()[i];
    EXPECT_EQ(c.timeout, Duration(3000));
    ASSERT_EQ(c.env.size(), 1u);
    EXPECT_EQ(c.env[0].second, "/lab/slurm.conf");
  }
}

// An answer the reconciler does not understand changes nothing: read as "not published", it
// would delete that VM's DOWN node. OneGate's real document, with one VM's USER_TEMPLATE made
// malformed.
TEST_F(ReconcileTest, APublicationNotUnderstoodChangesNothing) {
  AddWorker("w1");
  int w2 = AddWorker("w2");
  Node("w1");
  Node("w2", "DOWN", true);
  Node("gone", "DOWN", true);
  const auto doc = nlohmann::json::parse(sim_.ServiceJson(service_, true));
  struct Case {
    const char* name;
    std::function<void(nlohmann::json& user, nlohmann::json& vm)> change;
    const char* why;
  } cases[] = {
      {"array",
       [](auto& user, auto&) {
         user["SLURM_NODENAME"] = {"w2", "w2b"};
       },
       "SLURM_NODENAME that is not text"},
      {"object",
       [](auto& user, auto&) {
         user["SLURM_NODENAME"] = {{"NAME", "w2"}};
       },
       "SLURM_NODENAME that is not text"},
      {"no USER_TEMPLATE", [](auto&, auto& vm) { vm.erase("USER_TEMPLATE"); },
       "without a USER_TEMPLATE"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    nlohmann::json changed = doc;
    bool found = false;
    for (auto& role : changed["SERVICE"]["roles"]) {
      for (auto& node : role["nodes"]) {
        if (node["deploy_id"] != w2) continue;
        auto& vm = node["vm_info"]["VM"];
        c.change(vm["USER_TEMPLATE"], vm);
        found = true;
      }
    }
    ASSERT_TRUE(found);
    sim_.ClearFaults();
    sim_.InjectFault(fakes::SimFault(sim::FaultKind::kMalformed, 200, changed.dump()));
    log::Capture logs;
    auto r = Run();
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_NE(r->skipped.find(c.why), std::string::npos) << r->skipped;
    EXPECT_NE(r->skipped.find("VM " + std::to_string(w2)), std::string::npos) << r->skipped;
    EXPECT_EQ(SlurmCalls(), 0u);
    EXPECT_TRUE(slurm_.log.empty());
    EXPECT_EQ(slurm_.nodes.size(), 3u);
  }
  // The same document as OneGate really sends it: only the node of no VM goes.
  sim_.ClearFaults();
  auto ok = Run();
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(slurm_.log, (std::vector<std::string>{"delete gone"}));
}

TEST(ReconcileDecisionTest, PureRules) {
  slurm::SlurmNode n;
  n.name = "x";
  n.state = "DOWN+DYNAMIC_NORM+NOT_RESPONDING";
  EXPECT_EQ(DecideNode(n, {"x"}, {}).action, Action::kKeepPublished);
  EXPECT_EQ(DecideNode(n, {"y"}, {}).action, Action::kDelete);
  EXPECT_EQ(DecideNode(n, {"y"}, {"1"}).action, Action::kDrain);
  n.state = "DOWN+DRAIN+DYNAMIC_NORM+NOT_RESPONDING";
  n.reason = "removed from OneFlow service";
  EXPECT_EQ(DecideNode(n, {"y"}, {"1"}).action, Action::kKeepDrained);
  n.reason = "admin";
  EXPECT_EQ(DecideNode(n, {"y"}, {"1"}).action, Action::kDrain);
  n.state = "IDLE+DYNAMIC_NORM";
  EXPECT_EQ(DecideNode(n, {"y"}, {}).action, Action::kKeepResponding);
  n.state = "DOWN+DYNAMIC_NORM";
  n.name = "a,b";
  EXPECT_EQ(DecideNode(n, {"y"}, {}).action, Action::kSkipped);
}

TEST(ReconcileDecisionTest, NodesWithoutVmDetailsBlockTheCycle) {
  ServiceInfo s;
  s.roles.push_back({"worker", 2, 2, {}});
  ServiceNode with;
  with.vm_id = 1;
  with.vm = VmInfo{};
  with.vm->has_user_template = true;
  with.vm->user_template[slurm::kAttrNodeName] = " w1 ";
  ServiceNode without;
  without.vm_id = 2;
  s.roles[0].nodes = {with};
  auto names = PublishedNodeNames(s);
  ASSERT_TRUE(names);
  EXPECT_EQ(*names, (std::set<std::string>{"w1"}));
  s.roles[0].nodes.push_back(without);
  auto blocked = PublishedNodeNames(s);
  ASSERT_FALSE(blocked);
  EXPECT_NE(blocked.error().message.find("VM 2"), std::string::npos);
}

}  // namespace
}  // namespace onehpc
