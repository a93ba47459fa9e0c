// slurm.conf and cgroup.conf rendering; cgroup detection.
#include "roles/slurm/slurm_conf.h"

#include <gtest/gtest.h>

#include "roles/ensure.h"
#include "roles/host/machine.h"
#include "roles/slurm/slurmd_unit.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc::slurm {
namespace {

using fakes::Exit;
using fakes::FakeMachine;

SlurmConfParams Params() {
  SlurmConfParams p;
  p.controller_host = "slurm-one-controller";
  p.controller_addr = "10.0.0.5";
  p.max_nodes = 100;
  return p;
}

TEST(SlurmConfTest, ConfiglessDynamicNodes) {
  std::string conf = RenderSlurmConf(Params());
  EXPECT_EQ(SlurmConfValue(conf, "SlurmctldHost"), "slurm-one-controller(10.0.0.5)");
  EXPECT_EQ(SlurmConfValue(conf, "SlurmctldParameters"), "enable_configless");
  EXPECT_EQ(SlurmConfValue(conf, "MaxNodeCount"), "100");
  EXPECT_EQ(SlurmConfValue(conf, "TreeWidth"), "65533");
  EXPECT_EQ(SlurmConfValue(conf, "ReturnToService"), "2");
  EXPECT_EQ(SlurmConfValue(conf, "MailProg"), "/bin/true");
  EXPECT_EQ(SlurmConfValue(conf, "AuthType"), "auth/munge");
  EXPECT_EQ(SlurmConfValue(conf, "StateSaveLocation"), "/var/lib/slurm/slurmctld");
  EXPECT_EQ(SlurmConfValue(conf, "SlurmctldPidFile"), "/run/slurmctld.pid");
  EXPECT_EQ(SlurmConfValue(conf, "Nodeset"), "one");
  EXPECT_EQ(SlurmConfValue(conf, "PartitionName"), "all");
  EXPECT_EQ(SlurmConfValue(conf, "SlurmdTimeout"), "60");
  EXPECT_EQ(SlurmConfValue(conf, "GresTypes"), "gpu");
  EXPECT_EQ(conf.find("\nNodeName="), std::string::npos);  // all nodes are dynamic
  EXPECT_EQ(SlurmConfValue(conf, "SlurmctldLogFile"), std::nullopt);
  EXPECT_EQ(RenderSlurmConf(Params()), conf);  // deterministic
}

TEST(SlurmConfTest, MaxNodesAndPlugins) {
  SlurmConfParams p = Params();
  p.max_nodes = 3;
  p.use_cgroup = false;
  std::string plain = RenderSlurmConf(p);
  EXPECT_EQ(SlurmConfValue(plain, "MaxNodeCount"), "3");
  EXPECT_EQ(SlurmConfValue(plain, "ProctrackType"), "proctrack/linuxproc");
  EXPECT_EQ(SlurmConfValue(plain, "TaskPlugin"), "task/none");
  p.use_cgroup = true;
  std::string cg = RenderSlurmConf(p);
  EXPECT_EQ(SlurmConfValue(cg, "ProctrackType"), "proctrack/cgroup");
  EXPECT_EQ(SlurmConfValue(cg, "TaskPlugin"), "task/cgroup,task/affinity");
  EXPECT_NE(RenderCgroupConf(true).find("ConstrainCores=yes"), std::string::npos);
  EXPECT_EQ(RenderCgroupConf(false).find("Constrain"), std::string::npos);
}

TEST(SlurmConfTest, ValueLookup) {
  EXPECT_EQ(SlurmConfValue("# MaxNodeCount=1\nmaxnodecount = 7 # x\n", "MaxNodeCount"), "7");
  EXPECT_EQ(SlurmConfValue("A=1\n", "B"), std::nullopt);
  EXPECT_EQ(SlurmConfValue("A=\n", "A"), "");
}

TEST(DetectCgroupsTest, Choices) {
  FakeMachine m;
  EXPECT_FALSE(DetectCgroups(*m.files).use_cgroup);  // nothing mounted (booted container)
  m.Write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io pids\n");
  auto no_memory = DetectCgroups(*m.files);
  EXPECT_FALSE(no_memory.use_cgroup);
  EXPECT_NE(no_memory.why.find("without the memory controller"), std::string::npos);
  m.Write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
  m.Write("/proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n");
  EXPECT_TRUE(DetectCgroups(*m.files).use_cgroup);
  FakeMachine v1;
  v1.Write("/proc/mounts",
           "cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0\n"
           "cgroup /sys/fs/cgroup/freezer cgroup rw,nosuid,nodev,noexec,relatime,freezer 0 0\n"
           "cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0\n");
  v1.Write("/sys/fs/cgroup/memory/tasks", "");
  v1.Write("/sys/fs/cgroup/freezer/tasks", "");
  EXPECT_FALSE(DetectCgroups(*v1.files).use_cgroup);
  v1.Write("/sys/fs/cgroup/cpuset/tasks", "");
  EXPECT_TRUE(DetectCgroups(*v1.files).use_cgroup);
}

// systemd-nspawn (and other containers) show the host's v1 hierarchies read-only: the tasks
// files exist, but slurmd's proctrack/cgroup cannot create its cgroups there.
TEST(DetectCgroupsTest, ReadOnlyV1HierarchiesInAContainer) {
  FakeMachine m;
  m.Write("/sys/fs/cgroup/memory/tasks", "");
  m.Write("/sys/fs/cgroup/freezer/tasks", "");
  m.Write("/sys/fs/cgroup/cpuset/tasks", "");
  // As seen inside a booted nspawn container on a hybrid host.
  m.Write("/proc/mounts",
          "tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0\n"
          "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
          "cgroup /sys/fs/cgroup/systemd cgroup rw,nosuid,nodev,noexec,relatime,xattr,name=systemd "
          "0 0\n"
          "cgroup /sys/fs/cgroup/cpuset cgroup ro,nosuid,nodev,noexec,relatime,cpuset 0 0\n"
          "cgroup /sys/fs/cgroup/freezer cgroup ro,nosuid,nodev,noexec,relatime,freezer 0 0\n"
          "cgroup /sys/fs/cgroup/memory cgroup ro,nosuid,nodev,noexec,relatime,memory 0 0\n");
  auto c = DetectCgroups(*m.files);
  EXPECT_FALSE(c.use_cgroup);
  EXPECT_NE(c.why.find("read-only"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("/sys/fs/cgroup/"), std::string::npos) << c.why;
  // Only one read-only hierarchy is enough to fall back.
  m.Write("/proc/mounts",
          "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
          "cgroup /sys/fs/cgroup/freezer cgroup ro,relatime,freezer 0 0\n"
          "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n");
  EXPECT_FALSE(DetectCgroups(*m.files).use_cgroup);
  // A controller without a mount of its own (tasks file but no cgroup mount): not usable.
  m.Write("/proc/mounts",
          "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
          "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n");
  EXPECT_FALSE(DetectCgroups(*m.files).use_cgroup);
  // Co-mounted controllers (cpu,cpuacct style) are found by their option, not their path.
  m.Write("/proc/mounts",
          "cgroup /sys/fs/cgroup/cpuset,freezer cgroup rw,relatime,cpuset,freezer 0 0\n"
          "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n");
  EXPECT_TRUE(DetectCgroups(*m.files).use_cgroup);
}

TEST(DetectCgroupsTest, ReadOnlyV2) {
  FakeMachine m;
  m.Write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  m.Write("/proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 ro,nosuid,nodev,noexec,relatime 0 0\n");
  auto c = DetectCgroups(*m.files);
  EXPECT_FALSE(c.use_cgroup);
  EXPECT_NE(c.why.find("read-only"), std::string::npos) << c.why;
}

}  // namespace
}  // namespace onehpc::slurm
