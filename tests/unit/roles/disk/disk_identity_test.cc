// Matching OpenNebula's disk list to the guest's devices without trusting the guest's names.
#include "roles/disk/disk_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace onehpc::disk {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1024 * 1024;

ListedDisk Listed(const std::string& target, std::uint64_t size_mib, const std::string& image = "",
                  bool persistent = false) {
  return ListedDisk{DiskFacts{target, image, persistent, image.empty() ? "fs" : "FILE"}, size_mib};
}
DiskIdentity Guest(const std::string& device, std::uint64_t size_mib, int scsi_target = -1) {
  return DiskIdentity{device, size_mib * kMiB, scsi_target};
}
std::string TargetOf(const DiskMatch& m, const std::string& device) {
  auto it = m.by_device.find(device);
  return it == m.by_device.end() ? "(none)" : it->second.target;
}

TEST(ScsiTargetOfTest, OnlySingleLetterSdTargets) {
  EXPECT_EQ(ScsiTargetOf("sda"), 0);
  EXPECT_EQ(ScsiTargetOf("sdc"), 2);
  EXPECT_EQ(ScsiTargetOf("vdb"), -1);
  EXPECT_EQ(ScsiTargetOf("hdb"), -1);
  EXPECT_EQ(ScsiTargetOf("sdaa"), -1);
  EXPECT_EQ(ScsiTargetOf("sd"), -1);
}

TEST(MatchListedDisksTest, NamesThatAgreeWithSizes) {
  auto m =
      MatchListedDisks({Listed("vda", 8192), Listed("vdb", 1024), Listed("vdc", 2048)},
                       {Guest("/dev/vda", 8192), Guest("/dev/vdb", 1024), Guest("/dev/vdc", 2048)});
  EXPECT_EQ(TargetOf(m, "/dev/vda"), "vda");
  EXPECT_EQ(TargetOf(m, "/dev/vdb"), "vdb");
  EXPECT_EQ(TargetOf(m, "/dev/vdc"), "vdc");
}

// A disk detached and another hot-plugged: the guest gives the new disk the lowest free name,
// OpenNebula the next target. The sizes say which is which.
TEST(MatchListedDisksTest, ShiftedNamesAreFoundBySize) {
  auto m = MatchListedDisks(
      {Listed("vda", 8192), Listed("vdc", 2048, "ood-home", true), Listed("vdd", 1024)},
      {Guest("/dev/vda", 8192), Guest("/dev/vdb", 2048), Guest("/dev/vdc", 1024)});
  EXPECT_EQ(TargetOf(m, "/dev/vdb"), "vdc");
  EXPECT_EQ(m.by_device.at("/dev/vdb").image, "ood-home");
  EXPECT_THAT(m.by_device.at("/dev/vdb").Describe(),
              HasSubstr("found by its size, 2048 MiB; the guest names it otherwise"));
  EXPECT_EQ(TargetOf(m, "/dev/vdc"), "vdd") << "the name vdc is OpenNebula's other disk";
}

// TARGET hdb on a q35 machine is a SATA disk the guest calls sda.
TEST(MatchListedDisksTest, AnotherBusIsFoundBySize) {
  auto m = MatchListedDisks({Listed("vda", 8192), Listed("hdb", 4096, "ood-home", true)},
                            {Guest("/dev/sda", 4096), Guest("/dev/vda", 8192)});
  EXPECT_EQ(TargetOf(m, "/dev/sda"), "hdb");
}

// OpenNebula pins TARGET sdX to SCSI target X - 'a': the address wins over sizes and names.
TEST(MatchListedDisksTest, ScsiTargetsAreFoundByAddress) {
  auto m = MatchListedDisks(
      {Listed("vda", 8192), Listed("sdb", 1024, "ood-home", true), Listed("vdc", 1024)},
      {Guest("/dev/sda", 1024, 1), Guest("/dev/vda", 8192), Guest("/dev/vdb", 1024)});
  EXPECT_EQ(TargetOf(m, "/dev/sda"), "sdb");
  EXPECT_THAT(m.by_device.at("/dev/sda").found_by, "SCSI target 1");
  EXPECT_EQ(TargetOf(m, "/dev/vdb"), "vdc") << "the one 1024 MiB disk left";
}

TEST(MatchListedDisksTest, AScsiTargetOfAnotherSizeIsNotTheDisk) {
  auto m = MatchListedDisks({Listed("sdb", 1024, "ood-home", true)},
                            {Guest("/dev/sdb", 2048, 1), Guest("/dev/sdc", 1024, 2)});
  EXPECT_TRUE(m.by_device.empty()) << "not by size either: the address is OpenNebula's";
  EXPECT_THAT(m.notes.at(0), HasSubstr("TARGET sdb (SCSI target 1) is not /dev/sdb"));
}

TEST(MatchListedDisksTest, EqualSizesFallBackOnTheNameOnly) {
  auto m = MatchListedDisks({Listed("vdb", 1024), Listed("vdc", 1024, "ood-home", true)},
                            {Guest("/dev/vdb", 1024), Guest("/dev/vdc", 1024)});
  EXPECT_EQ(TargetOf(m, "/dev/vdb"), "vdb");
  EXPECT_THAT(m.by_device.at("/dev/vdb").found_by, HasSubstr("its name and size"));
  EXPECT_EQ(TargetOf(m, "/dev/vdc"), "vdc");
}

TEST(MatchListedDisksTest, EqualSizesAndNoNameLeaveTheDiskUnidentified) {
  auto m = MatchListedDisks({Listed("vdd", 1024, "ood-home", true)},
                            {Guest("/dev/vdb", 1024), Guest("/dev/vdc", 1024)});
  EXPECT_TRUE(m.by_device.empty());
  EXPECT_THAT(m.notes.at(0), HasSubstr("not identified: 2 disk(s) of that size, none named vdd"));
}

TEST(MatchListedDisksTest, ADeviceOfTheNameButAnotherSizeIsNotTheDisk) {
  auto m = MatchListedDisks({Listed("vdb", 1024, "ood-home", true)}, {Guest("/dev/vdb", 4096)});
  EXPECT_TRUE(m.by_device.empty());
}

TEST(MatchListedDisksTest, NoSizeMeansTheNameAloneAndSaysSo) {
  auto m = MatchListedDisks({Listed("vda", 0), Listed("vdb", 0)}, {Guest("/dev/vda", 8192)});
  EXPECT_EQ(TargetOf(m, "/dev/vda"), "vda");
  EXPECT_THAT(m.by_device.at("/dev/vda").found_by, HasSubstr("name only"));
  EXPECT_THAT(m.notes.at(1), HasSubstr("TARGET vdb (no SIZE) is not identified"));
}

// OpenNebula's SIZE is whole MiB; a raw image of 1000000000 bytes is 953.67 MiB.
TEST(MatchListedDisksTest, SizesAreComparedInWholeMiBEitherWay) {
  DiskIdentity odd{"/dev/vdb", 1000000000, -1};
  EXPECT_EQ(TargetOf(MatchListedDisks({Listed("vdx", 953)}, {odd}), "/dev/vdb"), "vdx");
  EXPECT_EQ(TargetOf(MatchListedDisks({Listed("vdx", 954)}, {odd}), "/dev/vdb"), "vdx");
  EXPECT_EQ(TargetOf(MatchListedDisks({Listed("vdx", 955)}, {odd}), "/dev/vdb"), "(none)");
}

}  // namespace
}  // namespace onehpc::disk
