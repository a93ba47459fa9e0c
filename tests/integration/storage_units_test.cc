// The units the storage role generates for the ood-home mount pass `systemd-analyze verify`
// (which also checks that the unit name is the escaped Where= path), and the nfs-server
// drop-in is accepted on top of a stand-in nfs-server.service. The same for the NFS client
// mounts of the portal and worker roles (roles/nfs/client_mounts.h), also with the lab's
// bind drop-in.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "roles/disk/home_disk.h"
#include "roles/disk/mount_unit.h"
#include "roles/nfs/client_mounts.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"
#include "tests/integration/loop_devices.h"

namespace onehpc {
namespace {

namespace fs = std::filesystem;

// `systemd-analyze verify` of each unit in `dir` (the unit path), with no output at all.
void ExpectVerifies(const std::string& dir, const std::vector<std::string>& units) {
  RealProcessRunner runner;
  for (const std::string& unit : units) {
    Command c;
    c.argv = {"systemd-analyze", "verify", "--man=no", unit};
    c.cwd = dir;
    c.env = {{"SYSTEMD_LOG_LEVEL", "warning"}, {"SYSTEMD_UNIT_PATH", dir + ":"}};
    c.timeout = Duration(60000);
    auto r = runner.Run(c);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->exit_code, 0) << unit << ": " << r->out << r->err;
    EXPECT_EQ(r->out + r->err, "") << unit;
  }
}

TEST(StorageUnitsTest, GeneratedMountUnitsVerify) {
  if (!testing::HaveProgram("systemd-analyze")) GTEST_SKIP() << "systemd-analyze missing";
  char tmpl[] = "/tmp/onehpc-units.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  auto files =
      disk::RenderMountUnits("0b1c2d3e-aaaa-bbbb-cccc-0123456789ab", "ext4", "/export/home");
  auto name = [](const std::string& path) { return path.substr(path.rfind('/') + 1); };
  std::ofstream(dir + "/" + name(files.mount_unit_path)) << files.mount_unit;
  // A stand-in nfs-server.service (the real one may not be installed here) with our drop-in.
  std::ofstream(dir + "/nfs-server.service")
      << "[Unit]\nDescription=stand-in\n[Service]\nType=oneshot\nExecStart=/bin/true\n";
  fs::create_directories(dir + "/nfs-server.service.d");
  std::ofstream(dir + "/nfs-server.service.d/50-one-hpc-home.conf") << files.nfs_dropin;
  EXPECT_EQ(name(files.mount_unit_path), "export-home.mount");
  // Nothing planted in the homes runs on the storage VM: no setuid, no device files, no exec.
  EXPECT_NE(files.mount_unit.find("\nOptions=defaults,noatime,nosuid,nodev,noexec\n"),
            std::string::npos)
      << files.mount_unit;
  // The Slurm state's bind mount from the home disk, with its own drop-in.
  auto state = disk::RenderBindMountUnits("/export/home/.one-hpc-state/slurm", "/export/home",
                                          "/export/slurm");
  EXPECT_EQ(name(state.mount_unit_path), "export-slurm.mount");
  std::ofstream(dir + "/" + name(state.mount_unit_path)) << state.mount_unit;
  std::ofstream(dir + "/nfs-server.service.d/" + name(state.nfs_dropin_path)) << state.nfs_dropin;

  ExpectVerifies(dir, {"export-home.mount", "export-slurm.mount", "nfs-server.service"});
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(StorageUnitsTest, NfsClientMountUnitsVerify) {
  if (!testing::HaveProgram("systemd-analyze")) GTEST_SKIP() << "systemd-analyze missing";
  char tmpl[] = "/tmp/onehpc-units.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::vector<std::string> units;
  for (const auto& [server, where] : std::vector<std::pair<std::string, std::string>>{
           {"10.0.1.5", "/home"}, {"nfs.example.org", "/var/lib/one-hpc/portal-state"}}) {
    nfs::NfsMount m;
    m.server = server;
    m.export_path = "/export/home";
    m.where = where;
    m.why = "homes at 100% (test)";
    units.push_back(nfs::NfsMountUnitName(where));
    std::ofstream(dir + "/" + units.back()) << nfs::RenderNfsMountUnit(m);
  }
  EXPECT_EQ(units[1], "var-lib-one\\x2dhpc-portal\\x2dstate.mount");
  // The lab replaces the NFS transport with a bind mount through a drop-in.
  fs::create_directories(dir + "/home.mount.d");
  std::ofstream(dir + "/home.mount.d/lab-bind.conf")
      << "[Mount]\nWhat=/lab/nfs/home\nType=none\nOptions=bind\n";
  ExpectVerifies(dir, units);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// On this machine: the root disk, if one can be told, is a whole disk that exists.
TEST(StorageUnitsTest, RootDiskIsAWholeDiskOrUnknown) {
  LibmountMounts mounts;
  std::string disk = disk::RootDisk(mounts);
  if (disk.empty()) GTEST_SKIP() << "/ is not on a block device here (container overlay?)";
  EXPECT_EQ(disk.rfind("/dev/", 0), 0u) << disk;
  EXPECT_TRUE(fs::exists("/sys/block/" + disk.substr(5))) << disk << " is not a whole disk";
}

}  // namespace
}  // namespace onehpc
