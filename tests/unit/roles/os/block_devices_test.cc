// BlkidBlockDevices without root: a fake /sys/block tree, and libblkid on plain image
// files (it probes regular files as well as devices). Real mkfs and loop devices are in
// tests/integration/block_devices_test.cc.
#include "roles/os/block_devices.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace onehpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1024 * 1024;

class BlockDevicesImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/block_devices_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Image(const std::string& name, std::uint64_t size) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path).close();
    std::filesystem::resize_file(path, size);
    return path;
  }
  void WriteAt(const std::string& path, std::uint64_t offset, const std::string& data) {
    int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)),
              static_cast<ssize_t>(data.size()));
    ::close(fd);
  }
  void SysDisk(const std::string& name, const std::string& sectors) {
    std::filesystem::create_directories(dir_ + "/sys/" + name);
    std::ofstream(dir_ + "/sys/" + name + "/size") << sectors << "\n";
  }

  std::string dir_;
};

// The device links as a q35 guest's sysfs has them (seen on the lab's VMs: virtio-blk,
// virtio-scsi, SATA).
TEST_F(BlockDevicesImageTest, IdentifyReadsSizeAndScsiTargetOnlyOnAScsiBus) {
  auto link = [&](const std::string& name, const std::string& device_dir) {
    std::filesystem::create_directories(dir_ + "/devices/" + device_dir);
    std::filesystem::create_symlink(dir_ + "/devices/" + device_dir,
                                    dir_ + "/sys/" + name + "/device");
  };
  SysDisk("vdb", "2097152");
  link("vdb", "pci0000:00/0000:00:04.0/virtio3");
  SysDisk("sda", "4194304");
  link("sda", "pci0000:00/0000:00:05.0/virtio4/host2/target2:0:1/2:0:1:0");
  SysDisk("sdb", "4194304");
  link("sdb", "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0");
  SysDisk("sdc", "4194304");
  link("sdc", "pci0000:00/0000:00:05.0/virtio4/host2/target2:0:3/2:0:3:2");  // LUN 2
  SysDisk("loop0", "2048");
  BlkidBlockDevices devices(false, dir_ + "/sys");

  auto vdb = devices.Identify("/dev/vdb");
  ASSERT_TRUE(vdb) << vdb.error().message;
  EXPECT_EQ(vdb->size, 1024 * kMiB);
  EXPECT_EQ(vdb->scsi_target, -1);
  auto sda = devices.Identify("/dev/sda");
  ASSERT_TRUE(sda) << sda.error().message;
  EXPECT_EQ(sda->size, 2048 * kMiB);
  EXPECT_EQ(sda->scsi_target, 1);
  EXPECT_EQ(devices.Identify("/dev/sdb")->scsi_target, -1) << "an ATA port is not OpenNebula's";
  EXPECT_EQ(devices.Identify("/dev/sdc")->scsi_target, -1) << "LUN 2 is not unit 0";
  auto loop = devices.Identify("/dev/loop0");
  ASSERT_TRUE(loop) << loop.error().message;
  EXPECT_EQ(loop->scsi_target, -1);
  EXPECT_EQ(devices.Identify("/dev/vdz").error().kind, ErrorKind::kNotFound);
}

TEST_F(BlockDevicesImageTest, ListDisksSkipsVirtualAndEmptyDevices) {
  SysDisk("vdb", "2097152");
  SysDisk("vda", "41943040");
  SysDisk("sr0", "1000");
  SysDisk("loop0", "131072");
  SysDisk("loop1", "0");
  SysDisk("ram0", "8192");
  SysDisk("zram0", "8192");
  SysDisk("fd0", "2880");
  SysDisk("nvme0n1", "1000");
  SysDisk("sdb", "0");  // no medium
  SysDisk("cciss!c0d0", "1000");
  BlkidBlockDevices devices(false, dir_ + "/sys");
  auto disks = devices.ListDisks(false);
  ASSERT_TRUE(disks) << disks.error().message;
  EXPECT_THAT(*disks, ElementsAre("/dev/cciss/c0d0", "/dev/nvme0n1", "/dev/vda", "/dev/vdb"));
  auto with_loop = devices.ListDisks(true);
  ASSERT_TRUE(with_loop);
  EXPECT_THAT(*with_loop,
              ElementsAre("/dev/cciss/c0d0", "/dev/loop0", "/dev/nvme0n1", "/dev/vda", "/dev/vdb"));
  BlkidBlockDevices missing(false, dir_ + "/no-sys");
  EXPECT_FALSE(missing.ListDisks(false));
}

// Probes answered from a table, each probe recorded (the real ListDisks and CD-ROM listing
// read the fake /sys/block).
class TableProbes : public BlkidBlockDevices {
 public:
  using BlkidBlockDevices::BlkidBlockDevices;
  Result<DeviceProbe> Probe(const std::string& device) override {
    probed.push_back(device);
    DeviceProbe p;
    p.device = device;
    auto it = labels.find(device);
    if (it == labels.end()) return p;  // blank
    p.fs_type = "iso9660";
    p.label = it->second;
    p.signatures = {"iso9660 label=" + it->second};
    return p;
  }
  std::map<std::string, std::string> labels;
  std::vector<std::string> probed;
};

// Review L8: the context is read from its CD by the timers every minute; only the CD-ROM
// drives are probed for it, so a disk whose I/O hangs cannot stall them.
TEST_F(BlockDevicesImageTest, TheContextCdIsLookedForOnTheCdromDrivesFirst) {
  SysDisk("vda", "41943040");
  SysDisk("vdb", "2097152");
  SysDisk("sr1", "1000");
  SysDisk("sr0", "0");  // an empty drive
  TableProbes devices(false, dir_ + "/sys");
  EXPECT_THAT(devices.CdromDrives(), ElementsAre("/dev/sr0", "/dev/sr1"));
  devices.labels["/dev/sr1"] = "CONTEXT";
  auto cd = devices.FindContextCd("CONTEXT");
  ASSERT_TRUE(cd) << cd.error().message;
  EXPECT_EQ(*cd, "/dev/sr1");
  EXPECT_THAT(devices.probed, ElementsAre("/dev/sr0", "/dev/sr1"));
  // On no drive (a context on a disk): every device, as FindByLabel.
  devices.labels = {{"/dev/vdb", "CONTEXT"}};
  devices.probed.clear();
  cd = devices.FindContextCd("CONTEXT");
  ASSERT_TRUE(cd) << cd.error().message;
  EXPECT_EQ(*cd, "/dev/vdb");
  EXPECT_THAT(devices.probed,
              ElementsAre("/dev/sr0", "/dev/sr1", "/dev/vda", "/dev/vdb", "/dev/sr0", "/dev/sr1"));
  // Two drives with it: refused, as two disks would be.
  devices.labels = {{"/dev/sr0", "CONTEXT"}, {"/dev/sr1", "CONTEXT"}};
  auto two = devices.FindContextCd("CONTEXT");
  ASSERT_FALSE(two);
  EXPECT_EQ(two.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(two.error().message, HasSubstr("/dev/sr0, /dev/sr1"));
}

TEST_F(BlockDevicesImageTest, ZeroImageIsBlank) {
  BlkidBlockDevices devices;
  auto p = devices.Probe(Image("zero.img", 16 * kMiB));
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->size, 16 * kMiB);
  EXPECT_TRUE(p->blank());
  EXPECT_TRUE(p->signatures.empty());
  EXPECT_EQ(p->fs_type, "");
  EXPECT_EQ(p->pt_type, "");
  EXPECT_FALSE(p->ambivalent);
}

TEST_F(BlockDevicesImageTest, TinyImageIsBlank) {
  BlkidBlockDevices devices;
  auto p = devices.Probe(Image("tiny.img", 4096));
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_TRUE(p->blank());
}

TEST_F(BlockDevicesImageTest, DataAtTheStartIsNotBlank) {
  std::string img = Image("data.img", 16 * kMiB);
  WriteAt(img, 4096, "some old bytes without any known magic");
  BlkidBlockDevices devices;
  auto p = devices.Probe(img);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->blank());
  EXPECT_EQ(p->fs_type, "");
  EXPECT_THAT(p->signatures,
              ElementsAre(HasSubstr("unknown data (non-zero bytes in the first MiB)")));
}

TEST_F(BlockDevicesImageTest, DataAtTheEndIsNotBlank) {
  std::string img = Image("tail.img", 16 * kMiB);
  WriteAt(img, 15 * kMiB + 12345, "x");
  BlkidBlockDevices devices;
  auto p = devices.Probe(img);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->blank());
  EXPECT_THAT(p->signatures, ElementsAre(HasSubstr("last MiB")));
}

TEST_F(BlockDevicesImageTest, BackupGptHeaderAloneIsNotBlank) {
  for (std::uint64_t sector : {512u, 4096u}) {
    std::string img = Image("gpt" + std::to_string(sector) + ".img", 16 * kMiB);
    WriteAt(img, 16 * kMiB - sector, "EFI PART");
    BlkidBlockDevices devices;
    auto p = devices.Probe(img);
    ASSERT_TRUE(p);
    EXPECT_FALSE(p->blank()) << sector;
    EXPECT_THAT(p->signatures, ElementsAre("gpt backup header (no primary) offset=" +
                                           std::to_string(16 * kMiB - sector)));
  }
}

TEST_F(BlockDevicesImageTest, MissingDeviceIsNotFound) {
  BlkidBlockDevices devices;
  auto p = devices.Probe(dir_ + "/missing");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().kind, ErrorKind::kNotFound);
  EXPECT_THAT(p.error().message, HasSubstr(dir_ + "/missing"));
}

TEST_F(BlockDevicesImageTest, FindByLabelWithNoDisks) {
  std::filesystem::create_directories(dir_ + "/sys");
  BlkidBlockDevices devices(false, dir_ + "/sys");
  auto r = devices.FindByLabel("ood-home");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kNotFound);
  EXPECT_THAT(r.error().message, HasSubstr("'ood-home'"));
  EXPECT_EQ(devices.FindByLabel("").error().kind, ErrorKind::kInvalidInput);
}

}  // namespace
}  // namespace onehpc
