// LibmountMounts with a real ext4 on a loop device mounted on a temporary directory. Root only.
#include "roles/os/mounts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>

#include "tests/integration/loop_devices.h"

namespace onehpc {
namespace {

using ::testing::HasSubstr;
using testing::LoopDevices;

using testing::kMiB;

class MountsIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = LoopDevices::SkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    loops_ = std::make_unique<LoopDevices>();
    auto dev = loops_->Attach(64 * kMiB);
    if (!dev) GTEST_SKIP() << "loop devices unavailable: " << dev.error().message;
    device_ = *dev;
    auto mkfs = loops_->Run({"mkfs.ext4", "-q", "-F", "-L", "onehpc-mnt", device_});
    ASSERT_TRUE(mkfs) << mkfs.error().message;
    target_ = loops_->dir() + "/mnt";
    std::filesystem::create_directories(target_);
  }
  void TearDown() override {
    // Never leave a mount behind, even when an assertion failed half-way.
    if (!target_.empty()) {
      while (::umount2(target_.c_str(), MNT_DETACH) == 0) {
      }
    }
    loops_.reset();
  }

  std::unique_ptr<LoopDevices> loops_;
  std::string device_;
  std::string target_;
  LibmountMounts mounts_;
};

TEST_F(MountsIntegrationTest, MountFindUnmount) {
  auto before = mounts_.FindByTarget(target_);
  ASSERT_TRUE(before);
  EXPECT_FALSE(before->has_value());

  ASSERT_TRUE(mounts_.Mount(MountEntry{device_, target_, "ext4", "rw,noatime"}));

  auto found = mounts_.FindByTarget(target_);
  ASSERT_TRUE(found) << found.error().message;
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->source, device_);
  EXPECT_EQ((*found)->target, target_);
  EXPECT_EQ((*found)->fs_type, "ext4");
  EXPECT_THAT((*found)->options, HasSubstr("noatime"));

  auto by_source = mounts_.FindBySource(device_);
  ASSERT_TRUE(by_source) << by_source.error().message;
  ASSERT_EQ(by_source->size(), 1u);
  EXPECT_EQ((*by_source)[0].target, target_);

  // Through a symlink, as /dev/disk/by-label/... would be.
  std::string link = loops_->dir() + "/by-label-onehpc-mnt";
  std::filesystem::create_symlink(device_, link);
  auto by_link = mounts_.FindBySource(link);
  ASSERT_TRUE(by_link);
  ASSERT_EQ(by_link->size(), 1u);
  EXPECT_EQ((*by_link)[0].target, target_);

  ASSERT_TRUE(mounts_.Unmount(target_));
  auto after = mounts_.FindByTarget(target_);
  ASSERT_TRUE(after);
  EXPECT_FALSE(after->has_value());
  EXPECT_TRUE(mounts_.Unmount(target_));  // idempotent
  auto gone = mounts_.FindBySource(device_);
  ASSERT_TRUE(gone);
  EXPECT_TRUE(gone->empty());
}

TEST_F(MountsIntegrationTest, WrongTypeGivesAReadableError) {
  auto s = mounts_.Mount(MountEntry{device_, target_, "xfs", ""});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kIo);
  EXPECT_THAT(s.error().message, HasSubstr("mount " + device_ + " on " + target_ + " type xfs"));
  EXPECT_THAT(s.error().message, HasSubstr("wrong fs type"));
  auto still = mounts_.FindByTarget(target_);
  ASSERT_TRUE(still);
  EXPECT_FALSE(still->has_value());
}

TEST_F(MountsIntegrationTest, MissingDeviceAndMissingTargetGiveReadableErrors) {
  auto s = mounts_.Mount(MountEntry{"/dev/onehpc-no-such-device", target_, "ext4", ""});
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("/dev/onehpc-no-such-device"));
  EXPECT_THAT(s.error().message, HasSubstr("does not exist"));
  auto t = mounts_.Mount(MountEntry{device_, target_ + "/missing", "ext4", ""});
  ASSERT_FALSE(t);
  EXPECT_THAT(t.error().message, HasSubstr("does not exist"));
}

TEST_F(MountsIntegrationTest, BusyUnmountFails) {
  ASSERT_TRUE(mounts_.Mount(MountEntry{device_, target_, "ext4", ""}));
  std::string busy = target_ + "/busy";
  std::filesystem::create_directories(busy);
  int fd = ::open(busy.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  auto s = mounts_.Unmount(target_);
  ::close(fd);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("umount " + target_));
  EXPECT_THAT(s.error().message, HasSubstr("busy"));
  EXPECT_TRUE(mounts_.Unmount(target_));
}

}  // namespace
}  // namespace onehpc
