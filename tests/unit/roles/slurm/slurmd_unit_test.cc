// The slurmd unit of a dynamic node.
#include "roles/slurm/slurmd_unit.h"

#include <gtest/gtest.h>

#include "tests/fakes/machine.h"

namespace onehpc::slurm {
namespace {

TEST(SlurmdUnitTest, DynamicNodeUnit) {
  SlurmdUnitParams p;
  p.node_name = "slurm-one-worker-7";
  p.controller_addr = "10.0.0.5";
  p.cpus = 4;
  p.real_memory_mb = 7000;
  EXPECT_EQ(SlurmdNodeConf(p), "CPUs=4 RealMemory=7000 Feature=one");
  std::string unit = RenderSlurmdUnit(p);
  EXPECT_NE(unit.find("ExecStart=/usr/sbin/slurmd -D -Z --conf-server 10.0.0.5:6817 -N "
                      "slurm-one-worker-7 --conf \"CPUs=4 RealMemory=7000 Feature=one\"\n"),
            std::string::npos)
      << unit;
  EXPECT_NE(unit.find("Restart=on-failure\n"), std::string::npos);
  EXPECT_NE(unit.find("After=munge.service network-online.target"), std::string::npos);
  EXPECT_EQ(unit.find("ConditionPathExists"), std::string::npos);
  EXPECT_NE(unit.find("WantedBy=multi-user.target"), std::string::npos);
  EXPECT_EQ(unit.find("RequiresMountsFor"), std::string::npos);  // OneSlurm: none
  p.gres = "gpu:tesla_t4:2";
  EXPECT_EQ(SlurmdNodeConf(p), "CPUs=4 RealMemory=7000 Feature=one Gres=gpu:tesla_t4:2");
}

// The self-drain reads the name slurmd runs with back from the unit (review finding L11).
TEST(SlurmdUnitTest, TheNodeNameReadsBackFromTheUnit) {
  SlurmdUnitParams p;
  p.node_name = "slurm-one-worker-7";
  p.controller_addr = "10.0.0.5";
  EXPECT_EQ(SlurmdUnitNodeName(RenderSlurmdUnit(p)), "slurm-one-worker-7");
  p.requires_mounts = {"/home"};
  p.gres = "gpu:2";
  EXPECT_EQ(SlurmdUnitNodeName(RenderSlurmdUnit(p)), "slurm-one-worker-7");
  EXPECT_EQ(SlurmdUnitNodeName("[Service]\nExecStart=/usr/sbin/slurmd -D $SLURMD_OPTIONS\n"),
            std::nullopt);
  EXPECT_EQ(SlurmdUnitNodeName("[Service]\nExecStart=/usr/sbin/slurmd -N\n"), std::nullopt);
}

TEST(SlurmdUnitTest, OpenOnDemandWorkerNeverStartsWithoutItsMounts) {
  SlurmdUnitParams p;
  p.node_name = "ood-worker-9";
  p.controller_addr = "10.0.1.12";
  p.requires_mounts = {"/home", "/opt/software"};
  std::string unit = RenderSlurmdUnit(p);
  const auto unit_section = unit.substr(0, unit.find("[Service]"));
  EXPECT_NE(unit_section.find("\nRequiresMountsFor=/home\nRequiresMountsFor=/opt/software\n"),
            std::string::npos)
      << unit;
}

}  // namespace
}  // namespace onehpc::slurm
