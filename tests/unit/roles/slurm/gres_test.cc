// gres.conf on the controller and on each node.
#include "roles/slurm/gres.h"

#include <gtest/gtest.h>

namespace onehpc::slurm {
namespace {

TEST(GresTest, TheControllersFileIncludesEachNodesOwn) {
  const std::string conf = RenderGresConf();
  EXPECT_NE(conf.find("\nAutoDetect=off\nInclude /etc/slurm/gres-node.conf\n"), std::string::npos)
      << conf;
}

TEST(GresTest, ANodeDescribesItsDevicesWithTheirTypeWhenKnown) {
  host::GpuInventory gpus;
  gpus.devices = {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"};
  gpus.type = "tesla_t4";
  gpus.why = "3 x Tesla T4";
  EXPECT_EQ(NodeGres(gpus), "gpu:tesla_t4:3");
  std::string conf = RenderNodeGresConf(gpus);
  EXPECT_NE(conf.find("\nName=gpu Type=tesla_t4 File=/dev/nvidia[0,1,3]\n"), std::string::npos)
      << conf;
  gpus.type = "";
  gpus.devices = {"/dev/nvidia0"};
  EXPECT_EQ(NodeGres(gpus), "gpu:1");
  EXPECT_NE(RenderNodeGresConf(gpus).find("\nName=gpu File=/dev/nvidia0\n"), std::string::npos);
}

TEST(GresTest, ANodeWithoutGpusHasOnlyACommentEvenWhenTheDriverSaidMoreLines) {
  host::GpuInventory none;
  none.why = "nvidia-smi failed (line one\nline two)";
  EXPECT_EQ(NodeGres(none), "");
  std::string conf = RenderNodeGresConf(none);
  size_t lines = 0;
  for (size_t b = 0; b < conf.size();) {
    size_t e = conf.find('\n', b);
    EXPECT_EQ(conf[b], '#') << conf;
    ++lines;
    b = e + 1;
  }
  EXPECT_EQ(lines, 2u) << conf;
}

}  // namespace
}  // namespace onehpc::slurm
