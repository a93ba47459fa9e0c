#include "roles/os/mounts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace onehpc {
namespace {

using ::testing::HasSubstr;

class MountsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mounts_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // A "device" that exists on this host, and a by-label style symlink to it, so that
    // canonicalisation can be checked without real devices.
    std::ofstream(dir_ + "/vdc") << "";
    std::filesystem::create_directories(dir_ + "/by-label");
    std::filesystem::create_symlink("../vdc", dir_ + "/by-label/ood-home");
    mountinfo_ = dir_ + "/mountinfo";
    std::ofstream(mountinfo_)
        << "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro\n"
           "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
           "30 22 254:16 / /export/home rw,relatime shared:20 - ext4 /dev/vdb rw\n"
           "31 22 254:16 /sub /srv/bind rw,relatime shared:20 - ext4 /dev/vdb rw\n"
           "40 22 0:50 / /home rw,relatime shared:30 - nfs4 10.0.0.5:/export/home "
           "rw,vers=4.2,hard,addr=10.0.0.5\n"
           "41 22 0:51 / /mnt/with\\040space rw - tmpfs tmpfs rw,size=1024k\n"
           "42 30 0:52 / /export/home rw,nosuid - tmpfs tmpfs rw\n"
           "43 22 254:32 / /srv/data rw,noatime shared:40 - xfs "
        << dir_ << "/vdc rw,attr2\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  std::string mountinfo_;
};

TEST_F(MountsTest, FindByTarget) {
  LibmountMounts mounts(mountinfo_);
  auto root = mounts.FindByTarget("/");
  ASSERT_TRUE(root) << root.error().message;
  ASSERT_TRUE(root->has_value());
  EXPECT_EQ((*root)->source, "/dev/vda1");
  EXPECT_EQ((*root)->fs_type, "ext4");
  EXPECT_THAT((*root)->options, HasSubstr("errors=remount-ro"));
  EXPECT_THAT((*root)->options, HasSubstr("relatime"));

  auto nfs = mounts.FindByTarget("/home");
  ASSERT_TRUE(nfs);
  ASSERT_TRUE(nfs->has_value());
  EXPECT_EQ((*nfs)->source, "10.0.0.5:/export/home");
  EXPECT_EQ((*nfs)->fs_type, "nfs4");
  EXPECT_EQ((*nfs)->target, "/home");
}

TEST_F(MountsTest, TheRootOfABindMountIsItsSubdirectory) {
  LibmountMounts mounts(mountinfo_);
  auto bind = mounts.FindByTarget("/srv/bind");
  ASSERT_TRUE(bind && bind->has_value());
  EXPECT_EQ((*bind)->source, "/dev/vdb");
  EXPECT_EQ((*bind)->root, "/sub");
  auto whole = mounts.FindByTarget("/");
  ASSERT_TRUE(whole && whole->has_value());
  EXPECT_EQ((*whole)->root, "/");
}

TEST_F(MountsTest, FindByTargetReturnsTheTopOfStackedMounts) {
  LibmountMounts mounts(mountinfo_);
  auto top = mounts.FindByTarget("/export/home");
  ASSERT_TRUE(top);
  ASSERT_TRUE(top->has_value());
  EXPECT_EQ((*top)->fs_type, "tmpfs");
}

TEST_F(MountsTest, FindByTargetUnescapesAndIsExact) {
  LibmountMounts mounts(mountinfo_);
  auto space = mounts.FindByTarget("/mnt/with space");
  ASSERT_TRUE(space);
  ASSERT_TRUE(space->has_value());
  EXPECT_EQ((*space)->target, "/mnt/with space");
  auto none = mounts.FindByTarget("/export");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  auto child = mounts.FindByTarget("/export/home/user");
  ASSERT_TRUE(child);
  EXPECT_FALSE(child->has_value());
  EXPECT_FALSE(mounts.FindByTarget(""));
}

TEST_F(MountsTest, FindBySourceReturnsEveryMount) {
  LibmountMounts mounts(mountinfo_);
  auto vdb = mounts.FindBySource("/dev/vdb");
  ASSERT_TRUE(vdb);
  ASSERT_EQ(vdb->size(), 2u);
  EXPECT_EQ((*vdb)[0].target, "/export/home");
  EXPECT_EQ((*vdb)[1].target, "/srv/bind");
  auto nfs = mounts.FindBySource("10.0.0.5:/export/home");
  ASSERT_TRUE(nfs);
  ASSERT_EQ(nfs->size(), 1u);
  EXPECT_EQ((*nfs)[0].target, "/home");
  auto none = mounts.FindBySource("/dev/vdz");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST_F(MountsTest, FindBySourceResolvesSymlinks) {
  LibmountMounts mounts(mountinfo_);
  auto by_label = mounts.FindBySource(dir_ + "/by-label/ood-home");
  ASSERT_TRUE(by_label);
  ASSERT_EQ(by_label->size(), 1u);
  EXPECT_EQ((*by_label)[0].target, "/srv/data");
  EXPECT_EQ((*by_label)[0].fs_type, "xfs");
}

TEST_F(MountsTest, MissingMountinfoIsAnError) {
  LibmountMounts mounts(dir_ + "/no-such-file");
  auto r = mounts.FindByTarget("/");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kIo);
  EXPECT_THAT(r.error().message, HasSubstr(dir_ + "/no-such-file"));
  EXPECT_FALSE(mounts.FindBySource("/dev/vdb"));
}

TEST_F(MountsTest, TheRealMountinfoHasARoot) {
  LibmountMounts mounts;
  auto root = mounts.FindByTarget("/");
  ASSERT_TRUE(root) << root.error().message;
  EXPECT_TRUE(root->has_value());
}

TEST_F(MountsTest, MountAndUnmountCheckTheirInput) {
  LibmountMounts mounts(mountinfo_);
  auto m = mounts.Mount(MountEntry{"", "/mnt", "ext4", ""});
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().kind, ErrorKind::kInvalidInput);
  EXPECT_FALSE(mounts.Unmount(""));
  // Nothing mounted at the target (per the table): nothing to do.
  EXPECT_TRUE(mounts.Unmount("/not/mounted"));
}

}  // namespace
}  // namespace onehpc
