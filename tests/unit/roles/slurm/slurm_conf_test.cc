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
  EXPECT_EQ(SlurmConfValue(conf, "MaxNodeCount"), "200");
  EXPECT_EQ(DynamicNodeRoom(conf), 100);
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
  // Every node is dynamic; the one NodeName= line holds the placeholders, never contacted.
  EXPECT_EQ(conf.find("\nNodeName="), conf.rfind("\nNodeName="));
  EXPECT_NE(conf.find("\nNodeName=one-hpc-slot[1-100] State=FUTURE CPUs=4096 "
                      "RealMemory=16777216 Gres=gpu:64\n"),
            std::string::npos);
  EXPECT_EQ(SlurmConfValue(conf, "SlurmctldLogFile"), std::nullopt);
  EXPECT_EQ(RenderSlurmConf(Params()), conf);  // deterministic
}

TEST(SlurmConfTest, MaxNodesAndPlugins) {
  SlurmConfParams p = Params();
  p.max_nodes = 3;
  p.use_cgroup = false;
  std::string plain = RenderSlurmConf(p);
  EXPECT_EQ(SlurmConfValue(plain, "MaxNodeCount"), "6");
  EXPECT_EQ(SlurmConfValue(plain, "NodeName"), "one-hpc-slot[1-3]");
  EXPECT_EQ(DynamicNodeRoom(plain), 3);
  p.max_nodes = 1;
  EXPECT_EQ(SlurmConfValue(RenderSlurmConf(p), "NodeName"), "one-hpc-slot1");
  EXPECT_EQ(DynamicNodeRoom(RenderSlurmConf(p)), 1);
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

TEST(SlurmConfTest, DynamicNodeRoom) {
  // A slurm.conf of an earlier one-hpc, without placeholders: all of MaxNodeCount.
  EXPECT_EQ(DynamicNodeRoom("MaxNodeCount=7\n"), 7);
  EXPECT_EQ(DynamicNodeRoom("MaxNodeCount=7\nNodeName=one-hpc-slot[1-3] State=FUTURE\n"), 4);
  EXPECT_EQ(DynamicNodeRoom("MaxNodeCount=7\nNodeName=one-hpc-slot1 State=FUTURE\n"), 6);
  // Another site's NodeName line is not ours: it does not count.
  EXPECT_EQ(DynamicNodeRoom("MaxNodeCount=7\nNodeName=n[1-3] State=FUTURE\n"), 7);
  EXPECT_EQ(DynamicNodeRoom("MaxNodeCount=3\nNodeName=one-hpc-slot[1-3]\n"), std::nullopt);
  EXPECT_EQ(DynamicNodeRoom("MaxNodeCount=9\nNodeName=one-hpc-slot[1-x]\n"), std::nullopt);
  EXPECT_EQ(DynamicNodeRoom("MaxNodeCount=x\n"), std::nullopt);
  EXPECT_EQ(DynamicNodeRoom("ClusterName=one\n"), std::nullopt);
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
