// The adapters of a --root run: nothing acts on the machine the command runs on.
#include "roles/os/rooted.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/mounts.h"
#include "tests/fakes/process_runner.h"

namespace onehpc {
namespace {

using ::testing::HasSubstr;

TEST(RootedTest, OnlyCommandsNamingTheRootRun) {
  EXPECT_FALSE(IsOtherRoot(""));
  EXPECT_FALSE(IsOtherRoot("/"));
  EXPECT_FALSE(IsOtherRoot("//"));
  EXPECT_TRUE(IsOtherRoot("/tmp/r"));
  const std::string r = "/tmp/r/";
  EXPECT_TRUE(CommandNamesRoot({"systemctl", "--root=/tmp/r", "enable", "x"}, r));
  EXPECT_TRUE(CommandNamesRoot({"useradd", "--root", "/tmp/r", "alice"}, r));
  EXPECT_TRUE(CommandNamesRoot({"mkfs.ext4", "/tmp/r/disk.img"}, r));
  EXPECT_FALSE(CommandNamesRoot({"hostname", "ood-portal"}, r));
  EXPECT_FALSE(CommandNamesRoot({"exportfs", "-r"}, r));
  EXPECT_FALSE(CommandNamesRoot({"/tmp/r/bin/tool", "x"}, r));  // the program is not an argument
  EXPECT_FALSE(CommandNamesRoot({"cat", "/tmp/rx/file"}, r));   // a sibling, not under it
  EXPECT_FALSE(CommandNamesRoot({"tool", "--root=/tmp/rx"}, r));
}

TEST(RootedTest, RunnerRefusesWhatWouldActOnThisMachine) {
  fakes::FakeProcessRunner inner;
  inner.SetDefault(ProcessResult{0, 0, false, "", ""});
  RootedProcessRunner runner(inner, "/tmp/r");
  Command hostname;
  hostname.argv = {"hostname", "ood-portal"};
  auto refused = runner.Run(hostname);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(refused.error().message,
              HasSubstr("running `hostname` would act on this machine, not on --root /tmp/r"));
  EXPECT_THAT(refused.error().message, ::testing::Not(HasSubstr("ood-portal")));
  Command enable;
  enable.argv = {"systemctl", "--root=/tmp/r", "enable", "nfs-server.service"};
  EXPECT_TRUE(runner.Run(enable));
  ASSERT_EQ(inner.commands().size(), 1u);
  EXPECT_EQ(inner.commands()[0].argv[0], "systemctl");
  // The tree's own program (a stand-in nvidia-smi under the root) runs; the host's does not.
  Command smi;
  smi.argv = {"/tmp/r/usr/bin/nvidia-smi", "--query-gpu=index,name"};
  EXPECT_TRUE(runner.Run(smi));
  smi.argv[0] = "/usr/bin/nvidia-smi";
  EXPECT_FALSE(runner.Run(smi));
  smi.argv[0] = "/tmp/rx/usr/bin/nvidia-smi";
  EXPECT_FALSE(runner.Run(smi));
}

TEST(RootedTest, NoBlockDeviceAndNoMount) {
  RootedBlockDevices devices("/tmp/r");
  auto disks = devices.ListDisks(true);
  ASSERT_TRUE(disks);
  EXPECT_TRUE(disks->empty());
  EXPECT_FALSE(devices.Probe("/dev/vdb"));
  auto label = devices.FindByLabel("ood-home");
  ASSERT_FALSE(label);
  EXPECT_EQ(label.error().kind, ErrorKind::kNotFound);

  fakes::FakeMounts inner;
  inner.table.push_back({"/dev/vda1", "/", "ext4", "rw"});
  RootedMounts mounts(inner, "/tmp/r");
  auto root = mounts.FindByTarget("/");
  ASSERT_TRUE(root && root->has_value());  // reading is fine
  auto m = mounts.Mount({"/dev/vdb", "/tmp/r/export/home", "ext4", ""});
  ASSERT_FALSE(m);
  EXPECT_THAT(m.error().message, HasSubstr("mounting /dev/vdb on /tmp/r/export/home"));
  EXPECT_FALSE(mounts.Unmount("/tmp/r/export/home"));
  EXPECT_EQ(inner.table.size(), 1u);
}

}  // namespace
}  // namespace onehpc
