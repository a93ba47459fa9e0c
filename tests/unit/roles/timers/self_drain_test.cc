// The shutdown hook: DOWN, delete, stop slurmd; bounded; never stuck.
#include "roles/timers/self_drain.h"

#include <gtest/gtest.h>

#include "common/log.h"
#include "roles/slurm/slurmd_unit.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc {
namespace {

using fakes::Exit;
using fakes::FakeMachine;
using fakes::FakeSlurm;

class SelfDrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    slurm_.Install(m_.runner);
    m_.Write("/run/slurm/conf/slurm.conf", "SlurmctldHost=ctl(10.0.0.5)\n");
    m_.active.insert("slurmd.service");
    options_.node_name = "slurm-one-worker-7";
    options_.slurm_conf = m_.root + "/run/slurm/conf/slurm.conf";
  }
  Result<SelfDrainReport> Run() { return RunSelfDrain(options_, m_.runner, m_.systemd, m_.clock); }

  FakeMachine m_;
  FakeSlurm slurm_;
  SelfDrainOptions options_;
};

TEST_F(SelfDrainTest, DownDeleteThenStopSlurmd) {
  slurm_.nodes["slurm-one-worker-7"].jobs = {"4"};
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->was_registered);
  EXPECT_TRUE(r->deleted);
  EXPECT_TRUE(r->slurmd_stop_requested);
  EXPECT_TRUE(r->problems.empty());
  EXPECT_EQ(SelfDrainExitCode(r), 0);
  EXPECT_EQ(m_.runner.Argvs(),
            (std::vector<std::string>{"scontrol update nodename=slurm-one-worker-7 state=DOWN "
                                      "'reason=one-hpc self-drain: VM shutting down'",
                                      "scontrol delete nodename=slurm-one-worker-7",
                                      "scontrol --json show node slurm-one-worker-7",
                                      "systemctl --no-block stop slurmd.service"}));
  EXPECT_TRUE(slurm_.nodes.empty());
  EXPECT_EQ(m_.active.count("slurmd.service"), 0u);
  for (const auto& c : m_.runner.commands()) {
    if (c.argv[0] != "scontrol") continue;
    EXPECT_EQ(c.timeout, Duration(10000));
    ASSERT_EQ(c.env.size(), 1u);
    EXPECT_EQ(c.env[0].second, options_.slurm_conf);
  }
}

TEST_F(SelfDrainTest, AnotherVmsNodeUnderTheSameNameIsLeftAlone) {
  slurm_.nodes["slurm-one-worker-7"].addr = "10.0.0.8";  // registered by the other VM
  options_.own_addresses = {"10.0.0.7", "192.0.2.7"};
  log::Capture logs;
  auto r = Run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->left_alone);
  EXPECT_FALSE(r->deleted);
  EXPECT_EQ(SelfDrainExitCode(r), 0);
  EXPECT_EQ(slurm_.nodes.count("slurm-one-worker-7"), 1u);  // neither DOWN nor deleted
  EXPECT_EQ(m_.runner.Argvs(),
            (std::vector<std::string>{"scontrol --json show node slurm-one-worker-7",
                                      "systemctl --no-block stop slurmd.service"}));
  EXPECT_TRUE(logs.Contains("registered from 10.0.0.8, no address of this VM"));
  // Registered from one of ours: removed as usual.
  slurm_.nodes["slurm-one-worker-7"].addr = "10.0.0.7";
  auto own = Run();
  ASSERT_TRUE(own);
  EXPECT_TRUE(own->deleted);
  EXPECT_TRUE(slurm_.nodes.empty());
}

// Review finding L11: a host name changed by hand after the join does not change which node
// the self-drain removes: the name comes from the slurmd unit the worker wrote.
TEST_F(SelfDrainTest, TheNodeNameIsSlurmdsNotTheHostNames) {
  slurm::SlurmdUnitParams p;
  p.node_name = "slurm-one-worker-7";
  p.controller_addr = "10.0.0.5";
  m_.Write(slurm::kSlurmdUnitPath, slurm::RenderSlurmdUnit(p));
  EXPECT_EQ(SelfDrainNodeName(*m_.files), "slurm-one-worker-7");
  m_.Write(slurm::kSlurmdUnitPath, "[Service]\nExecStart=/usr/sbin/slurmd -D\n");
  EXPECT_EQ(SelfDrainNodeName(*m_.files), "") << "not one-hpc's unit: the host name";
}

TEST_F(SelfDrainTest, NotRegisteredIsFine) {
  auto r = Run();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->was_registered);
  EXPECT_TRUE(r->deleted);
  EXPECT_EQ(SelfDrainExitCode(r), 0);
  EXPECT_EQ(m_.runner.Argvs().size(), 2u);  // DOWN ("Invalid node name"), stop slurmd
}

TEST_F(SelfDrainTest, NoConfiglessConfigMeansNoSlurmCalls) {
  options_.slurm_conf = m_.root + "/run/slurm/conf/missing.conf";
  auto r = Run();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->had_config);
  EXPECT_EQ(m_.runner.Argvs(),
            (std::vector<std::string>{"systemctl --no-block stop slurmd.service"}));
  EXPECT_EQ(SelfDrainExitCode(r), 0);
}

TEST_F(SelfDrainTest, UnreachableControllerDoesNotHangTheShutdown) {
  ProcessResult hung = Exit(-1);
  hung.timed_out = true;
  m_.runner.On({"scontrol"}, [&](const Command& c) {
    m_.clock.Advance(c.timeout);  // the call used its whole timeout
    return hung;
  });
  log::Capture logs;
  auto r = Run();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->deleted);
  EXPECT_TRUE(r->slurmd_stop_requested);
  EXPECT_EQ(SelfDrainExitCode(r), 1);
  EXPECT_EQ(m_.runner.Argvs().size(), 2u);  // DOWN timed out: no delete; slurmd stopped
  EXPECT_LE(m_.clock.Now() - TimePoint{}, Duration(20000));
  EXPECT_TRUE(logs.Contains("not trying the delete"));
}

TEST_F(SelfDrainTest, BudgetBoundsTheWholeRun) {
  slurm_.nodes["slurm-one-worker-7"];
  options_.budget = Duration(15000);
  m_.runner.On({"scontrol", "update"}, [&](const Command& c) {
    m_.clock.Advance(Duration(16000));  // slow, but answered
    FakeSlurm::Node& n = slurm_.nodes["slurm-one-worker-7"];
    n.base = "DOWN";
    return Exit(0);
  });
  auto r = Run();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->deleted);
  EXPECT_TRUE(r->slurmd_stop_requested);
  ASSERT_EQ(r->problems.size(), 1u);
  EXPECT_NE(r->problems[0].find("time budget"), std::string::npos);
  EXPECT_EQ(m_.runner.Argvs().back(), "systemctl --no-block stop slurmd.service");
}

TEST_F(SelfDrainTest, DeleteThatLiesIsReported) {
  slurm_.nodes["slurm-one-worker-7"];
  slurm_.delete_lies = true;
  auto r = Run();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->deleted);
  EXPECT_TRUE(r->slurmd_stop_requested);
  EXPECT_EQ(SelfDrainExitCode(r), 1);
}

TEST_F(SelfDrainTest, BadNodeName) {
  options_.node_name = "a,b";
  auto r = Run();
  ASSERT_FALSE(r);
  EXPECT_TRUE(m_.runner.commands().empty());
  EXPECT_EQ(SelfDrainExitCode(r), 1);
}

}  // namespace
}  // namespace onehpc
