// The workers' health check: each check, the drain reason naming it, the resume of our own
// drain only, and the slurm.conf lines that make slurmd run it.
#include "roles/timers/health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "roles/slurm/slurm_conf.h"
#include "tests/fakes/machine.h"

namespace onehpc {
namespace {

using fakes::Exit;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class HealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    slurm_.Install(m_.runner);
    slurm_.nodes["w1"];
    m_.Write("/proc/self/mountinfo",
             "22 1 8:1 / / rw,relatime - ext4 /dev/vda1 rw\n"
             "40 22 0:50 / /home rw,relatime - nfs4 10.0.0.2:/export/home rw\n");
    options_.node_name = "w1";
  }
  HealthReport Run() {
    slurm_.log.clear();
    auto r = RunHealthCheck(options_, m_.runner, *m_.files);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : HealthReport{};
  }

  fakes::FakeMachine m_;
  fakes::FakeSlurm slurm_;
  HealthOptions options_;
};

TEST_F(HealthTest, AHealthyNodeIsLeftAlone) {
  auto r = Run();
  EXPECT_TRUE(r.healthy());
  EXPECT_EQ(r.action, "");
  EXPECT_TRUE(slurm_.log.empty());
  EXPECT_EQ(HealthExitCode(r), 0);
}

TEST_F(HealthTest, AMissingMountDrainsTheNodeNamingTheCheckAndARecoveryResumesIt) {
  options_.required_mounts = {"/home", "/opt/software"};
  auto r = Run();
  EXPECT_FALSE(r.healthy());
  EXPECT_EQ(r.action, "drain");
  EXPECT_THAT(slurm_.log, ElementsAre("update w1 state=DRAIN reason=one-hpc health: mounts: "
                                      "/opt/software is not mounted"));
  EXPECT_EQ(HealthExitCode(r), 1);
  // The same failure again: already drained with that reason, nothing changes.
  auto again = Run();
  EXPECT_EQ(again.action, "");
  EXPECT_TRUE(slurm_.log.empty());
  // Mounted again: every check passes, the health drain is lifted.
  m_.Write("/proc/self/mountinfo",
           "22 1 8:1 / / rw - ext4 /dev/vda1 rw\n40 22 0:50 / /home rw - nfs4 s:/h rw\n"
           "41 22 0:51 / /opt/software rw - nfs4 s:/s rw\n");
  auto back = Run();
  EXPECT_TRUE(back.healthy());
  EXPECT_EQ(back.action, "resume");
  EXPECT_THAT(slurm_.log, ElementsAre("update w1 state=RESUME"));
}

TEST_F(HealthTest, ADrainBySomeoneElseKeepsItsReason) {
  slurm_.nodes["w1"].drain = true;
  slurm_.nodes["w1"].reason = "maintenance by the admin";
  m_.runner.On({"unmunge"}, Exit(1, "", "unmunge: Error: Invalid credential"));
  auto r = Run();
  EXPECT_FALSE(r.healthy());
  EXPECT_EQ(r.action, "");
  EXPECT_TRUE(slurm_.log.empty());
  // ... and a healthy node drained by someone else is not resumed either.
  m_.runner.On({"unmunge"}, Exit(0, "STATUS: Success (0)\n"));
  auto healthy = Run();
  EXPECT_TRUE(healthy.healthy());
  EXPECT_EQ(healthy.action, "");
}

TEST_F(HealthTest, MungeDiskAndGpuFailuresAreNamed) {
  m_.runner.On({"unmunge"}, Exit(1, "", "unmunge: Error: Invalid credential"));
  EXPECT_THAT(Run().DrainReason(),
              HasSubstr("one-hpc health: munge: unmunge refused a fresh credential"));
  slurm_.nodes["w1"].drain = false;
  slurm_.nodes["w1"].reason.clear();
  m_.runner.On({"unmunge"}, Exit(0, "STATUS: Success (0)\n"));
  m_.runner.On({"stat", "-f"}, Exit(0, "1000 30\n"));
  EXPECT_EQ(Run().DrainReason(), "one-hpc health: disk: / is 97% full (limit 95%)");
  m_.runner.On({"stat", "-f"}, Exit(0, "1000 900\n"));
  // A node with GPUs whose driver does not answer (Slurm 22.05's text).
  slurm_.json = false;
  m_.runner.On({"scontrol", "-o", "show", "node"}, [](const Command&) {
    return Exit(0, "NodeName=w1 Gres=gpu:2 State=IDLE+DYNAMIC_NORM\n");
  });
  m_.runner.On({"nvidia-smi"}, Exit(9, "", "NVIDIA-SMI has failed\n"));
  EXPECT_THAT(Run().DrainReason(),
              HasSubstr("one-hpc health: gpus: the node has gpu:2 but nvidia-smi -L fails"));
}

TEST_F(HealthTest, ANodeTheControllerDoesNotKnowIsNotChanged) {
  slurm_.nodes.clear();  // before it registered (slurmd runs the check at its start too)
  options_.required_mounts = {"/nowhere"};
  auto r = Run();
  EXPECT_FALSE(r.healthy());
  EXPECT_EQ(r.action, "");
  EXPECT_TRUE(slurm_.log.empty());
}

TEST_F(HealthTest, SlurmConfRunsItOnEveryNodeEveryMinuteInAnyState) {
  slurm::SlurmConfParams p;
  p.controller_host = "ctl";
  p.controller_addr = "10.0.0.1";
  const std::string conf = slurm::RenderSlurmConf(p);
  EXPECT_EQ(slurm::SlurmConfValue(conf, "HealthCheckProgram"),
            "/usr/libexec/one-hpc/slurm-health-check");
  EXPECT_EQ(slurm::SlurmConfValue(conf, "HealthCheckInterval"), "60");
  EXPECT_EQ(slurm::SlurmConfValue(conf, "HealthCheckNodeState"), "ANY");
}

}  // namespace
}  // namespace onehpc
