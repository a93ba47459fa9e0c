// BlkidBlockDevices on real loop devices formatted with the real tools. Root only.
#include "roles/os/block_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "tests/integration/loop_devices.h"

namespace onehpc {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using testing::HaveProgram;
using ::testing::IsEmpty;
using testing::kMiB;
using testing::LoopDevices;

class BlockDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = LoopDevices::SkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    loops_ = std::make_unique<LoopDevices>();
    auto probe = loops_->Attach(kMiB);
    if (!probe) GTEST_SKIP() << "loop devices unavailable: " << probe.error().message;
  }
  void TearDown() override { loops_.reset(); }  // detaches, even after a failure

  /// A fresh loop device of `size` bytes (fails the test when it cannot be made).
  std::string Disk(std::uint64_t size = 64 * kMiB) {
    auto device = loops_->Attach(size);
    EXPECT_TRUE(device) << device.error().message;
    return device ? *device : "";
  }
  void Tool(std::vector<std::string> argv, std::string stdin_data = "") {
    auto r = loops_->Run(std::move(argv), std::move(stdin_data));
    ASSERT_TRUE(r) << r.error().message;
  }
  DeviceProbe MustProbe(const std::string& device) {
    auto p = devices_.Probe(device);
    EXPECT_TRUE(p) << p.error().message;
    return p ? *p : DeviceProbe{};
  }
  static bool AnySignature(const DeviceProbe& p, const std::string& needle) {
    return std::any_of(p.signatures.begin(), p.signatures.end(),
                       [&](const std::string& s) { return s.find(needle) != std::string::npos; });
  }

  std::unique_ptr<LoopDevices> loops_;
  BlkidBlockDevices devices_{true};
};

TEST_F(BlockDevicesTest, BlankDevice) {
  std::string dev = Disk();
  DeviceProbe p = MustProbe(dev);
  EXPECT_EQ(p.device, dev);
  EXPECT_EQ(p.size, 64 * kMiB);
  EXPECT_TRUE(p.blank());
  EXPECT_THAT(p.signatures, IsEmpty());
  EXPECT_EQ(p.fs_type, "");
  EXPECT_EQ(p.pt_type, "");
}

TEST_F(BlockDevicesTest, Ext4WithLabel) {
  std::string dev = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "ood-home", dev});
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_FALSE(p.ambivalent);
  EXPECT_EQ(p.fs_type, "ext4");
  EXPECT_EQ(p.fs_usage, "filesystem");
  EXPECT_EQ(p.label, "ood-home");
  EXPECT_EQ(p.uuid.size(), 36u);
  EXPECT_EQ(p.pt_type, "");
  EXPECT_THAT(p.signatures,
              Contains("ext4 usage=filesystem label=ood-home uuid=" + p.uuid + " offset=1080"));
}

TEST_F(BlockDevicesTest, Xfs) {
  if (!HaveProgram("mkfs.xfs")) GTEST_SKIP() << "mkfs.xfs missing (Debian package xfsprogs)";
  std::string dev = Disk(320 * kMiB);  // xfsprogs 6 refuses filesystems below 300 MB
  Tool({"mkfs.xfs", "-q", "-f", "-L", "data", dev});
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_EQ(p.fs_type, "xfs");
  EXPECT_EQ(p.label, "data");
  EXPECT_FALSE(p.uuid.empty());
}

TEST_F(BlockDevicesTest, Vfat) {
  if (!HaveProgram("mkfs.vfat")) GTEST_SKIP() << "mkfs.vfat missing (Debian package dosfstools)";
  std::string dev = Disk();
  Tool({"mkfs.vfat", "-n", "CONTEXT", dev});
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_EQ(p.fs_type, "vfat");
  EXPECT_EQ(p.label, "CONTEXT");
  EXPECT_EQ(p.uuid.size(), 9u);  // ABCD-EF01
}

TEST_F(BlockDevicesTest, Swap) {
  std::string dev = Disk();
  Tool({"mkswap", "-f", "-L", "swap1", dev});
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_EQ(p.fs_type, "swap");
  EXPECT_EQ(p.fs_usage, "other");
  EXPECT_EQ(p.label, "swap1");
}

TEST_F(BlockDevicesTest, MbrPartitionTable) {
  if (!HaveProgram("sfdisk")) GTEST_SKIP() << "sfdisk missing (Debian package fdisk)";
  std::string dev = Disk();
  Tool({"sfdisk", "--no-reread", "--no-tell-kernel", dev}, "label: dos\n,16M,L\n");
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_EQ(p.pt_type, "dos");
  EXPECT_EQ(p.fs_type, "");
  EXPECT_TRUE(AnySignature(p, "dos partition table")) << ::testing::PrintToString(p.signatures);
}

TEST_F(BlockDevicesTest, GptPartitionTable) {
  if (!HaveProgram("sfdisk")) GTEST_SKIP() << "sfdisk missing (Debian package fdisk)";
  std::string dev = Disk();
  Tool({"sfdisk", "--no-reread", "--no-tell-kernel", dev}, "label: gpt\n,16M,L\n");
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_EQ(p.pt_type, "gpt");
  EXPECT_EQ(p.fs_type, "");
  EXPECT_TRUE(AnySignature(p, "gpt partition table")) << ::testing::PrintToString(p.signatures);
}

TEST_F(BlockDevicesTest, GptWithOnlyTheBackupHeaderIsNotBlank) {
  if (!HaveProgram("sfdisk")) GTEST_SKIP() << "sfdisk missing (Debian package fdisk)";
  std::string dev = Disk();
  Tool({"sfdisk", "--no-reread", "--no-tell-kernel", dev}, "label: gpt\n,16M,L\n");
  // Zero the first MiB: protective MBR, primary header and entries are gone.
  ASSERT_TRUE(loops_->WriteAt(dev, 0, std::string(kMiB, '\0')));
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank()) << "backup GPT at the end must count";
  EXPECT_TRUE(AnySignature(p, "gpt")) << ::testing::PrintToString(p.signatures);
  EXPECT_EQ(p.fs_type, "");
}

TEST_F(BlockDevicesTest, LuksHeader) {
  if (!HaveProgram("cryptsetup"))
    GTEST_SKIP() << "cryptsetup missing (Debian package cryptsetup-bin)";
  std::string dev = Disk();
  // The key comes on stdin, never on the command line; cheap KDF settings for speed.
  Tool({"cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
        "--pbkdf-force-iterations", "1000", "--key-file", "-", dev},
       "not-a-real-secret");
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_EQ(p.fs_type, "crypto_LUKS");
  EXPECT_EQ(p.fs_usage, "crypto");
  EXPECT_FALSE(p.uuid.empty());
}

TEST_F(BlockDevicesTest, LvmPhysicalVolume) {
  if (!HaveProgram("pvcreate")) GTEST_SKIP() << "pvcreate missing (Debian package lvm2)";
  std::string dev = Disk();
  auto r = loops_->Run({"pvcreate", "-ff", "-y", "--devices", dev, "--config",
                        "activation { udev_sync = 0 udev_rules = 0 }", dev});
  if (!r) GTEST_SKIP() << "pvcreate cannot run here: " << r.error().message;
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_EQ(p.fs_type, "LVM2_member");
  EXPECT_EQ(p.fs_usage, "raid");
}

TEST_F(BlockDevicesTest, RandomBytesAtTheStartAreNotBlank) {
  std::string dev = Disk();
  std::mt19937 rng(12345);
  std::string noise(kMiB, '\0');
  for (auto& c : noise) c = static_cast<char>(rng());
  ASSERT_TRUE(loops_->WriteAt(dev, 0, noise));
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank()) << "a headerless encrypted volume looks exactly like this";
  EXPECT_EQ(p.fs_type, "");
  EXPECT_TRUE(AnySignature(p, "unknown data")) << ::testing::PrintToString(p.signatures);
}

TEST_F(BlockDevicesTest, TwoFilesystemSignaturesAreAmbivalent) {
  if (!HaveProgram("mkfs.vfat")) GTEST_SKIP() << "mkfs.vfat missing (Debian package dosfstools)";
  std::string dev = Disk();
  // A FAT boot sector at 0 and an ext4 superblock at 1024: what a disk reformatted by a tool
  // that does not wipe old signatures looks like.
  Tool({"mkfs.vfat", "-n", "OLD", dev});
  std::string boot_sector(512, '\0');
  {
    std::ifstream in(dev, std::ios::binary);
    ASSERT_TRUE(in.read(boot_sector.data(), 512));
  }
  Tool({"mkfs.ext4", "-q", "-F", "-L", "new", dev});
  ASSERT_TRUE(loops_->WriteAt(dev, 0, boot_sector));
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_TRUE(p.ambivalent) << ::testing::PrintToString(p.signatures);
  EXPECT_EQ(p.fs_type, "");  // no single answer
  EXPECT_TRUE(AnySignature(p, "ext4")) << ::testing::PrintToString(p.signatures);
  EXPECT_TRUE(AnySignature(p, "vfat")) << ::testing::PrintToString(p.signatures);
}

TEST_F(BlockDevicesTest, EverySignatureIsListed) {
  std::string dev = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "under", dev});
  // A LUKS1 magic and version at 0: libblkid answers crypto_LUKS (it wins over the
  // filesystem), but the ext4 superblock underneath is listed too.
  ASSERT_TRUE(loops_->WriteAt(dev, 0, std::string("LUKS\xba\xbe\x00\x01", 8)));
  DeviceProbe p = MustProbe(dev);
  EXPECT_FALSE(p.blank());
  EXPECT_EQ(p.fs_type, "crypto_LUKS");
  EXPECT_TRUE(AnySignature(p, "crypto_LUKS")) << ::testing::PrintToString(p.signatures);
  EXPECT_TRUE(AnySignature(p, "ext4 usage=filesystem label=under"))
      << ::testing::PrintToString(p.signatures);
}

TEST_F(BlockDevicesTest, ListDisksIncludesLoopOnlyWhenAsked) {
  std::string dev = Disk();
  auto with = devices_.ListDisks(true);
  ASSERT_TRUE(with) << with.error().message;
  EXPECT_THAT(*with, Contains(dev));
  EXPECT_TRUE(std::is_sorted(with->begin(), with->end()));
  auto without = devices_.ListDisks(false);
  ASSERT_TRUE(without);
  for (const auto& d : *without) EXPECT_EQ(d.find("/dev/loop"), std::string::npos) << d;
}

TEST_F(BlockDevicesTest, FindByLabel) {
  std::string a = Disk();
  std::string b = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "onehpc-it-a", a});
  Tool({"mkfs.ext4", "-q", "-F", "-L", "onehpc-it-b", b});
  auto found = devices_.FindByLabel("onehpc-it-b");
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(*found, b);
  auto missing = devices_.FindByLabel("onehpc-it-none");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ErrorKind::kNotFound);
  // Relabel b like a: ambiguous, refused.
  Tool({"e2label", b, "onehpc-it-a"});
  auto twice = devices_.FindByLabel("onehpc-it-a");
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(twice.error().message, HasSubstr(a));
  EXPECT_THAT(twice.error().message, HasSubstr(b));
  // Without loop devices, none of ours is found.
  BlkidBlockDevices no_loop;
  auto r = no_loop.FindByLabel("onehpc-it-a");
  EXPECT_FALSE(r && (*r == a || *r == b));
}

TEST_F(BlockDevicesTest, FindByLabelSeesPartitions) {
  if (!HaveProgram("sfdisk")) GTEST_SKIP() << "sfdisk missing (Debian package fdisk)";
  auto dev = loops_->Attach(64 * kMiB, /*partscan=*/true);
  ASSERT_TRUE(dev) << dev.error().message;
  Tool({"sfdisk", *dev}, "label: gpt\n,32M,L\n");
  std::string part = *dev + "p1";
  if (::access(part.c_str(), F_OK) != 0) {
    GTEST_SKIP() << "the kernel made no partition device " << part << " here";
  }
  Tool({"mkfs.ext4", "-q", "-F", "-L", "onehpc-it-part", part});
  auto found = devices_.FindByLabel("onehpc-it-part");
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(*found, part);
}

}  // namespace
}  // namespace onehpc
