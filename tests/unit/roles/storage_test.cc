// The Open OnDemand storage role on a fake machine: every home-disk decision (fake libblkid
// probes, fake mounts, fake O_EXCL), the exports rendering and the refresher.
#include "roles/storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "common/log.h"
#include "roles/disk/home_disk.h"
#include "roles/disk/mount_unit.h"
#include "roles/nfs/exports.h"
#include "roles/squid/cvmfs_proxy.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/mounts.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc {
namespace {

using fakes::Exit;
using fakes::FakeMachine;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using fakes::FakeMounts;

// ---- the role on a fake machine ------------------------------------------------------------

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One NIC: the compute NIC without asking OneGate (StorageOneGateTest has two).
    vars_ = {{"ETH0_IP", "10.1.0.3"}, {"ETH0_MASK", "255.255.255.0"}};
    m_.runner.On({"mkfs.ext4"}, [this](const Command& c) {
      const std::string& dev = c.argv.at(c.argv.size() - 2);  // then the block count
      disks_.writes.push_back(dev);
      disks_.Fs(dev, "ext4", c.argv.at(4),
                "aaaaaaaa-0000-0000-0000-00000000000" + std::to_string(disks_.writes.size()));
      return Exit(0);
    });
    m_.runner.On({"exportfs"}, Exit(0));
    m_.runner.On({"systemctl", "daemon-reload"}, Exit(0));
    m_.runner.On({"systemctl", "enable"}, [this](const Command& c) {
      const std::string& unit = c.argv.back();
      std::string target = unit.find(".timer") != std::string::npos   ? "timers.target"
                           : unit.find(".mount") != std::string::npos ? "local-fs.target"
                                                                      : "multi-user.target";
      m_.Write("/etc/systemd/system/" + target + ".wants/" + unit, "enabled\n");
      return Exit(0);
    });
  }

  StorageOptions Options() {
    StorageOptions o;
    o.exportfs_under_root = true;  // the fake runner answers exportfs
    o.exclusive = [this](const std::string& dev) -> Status {
      if (busy_.count(dev)) return Fail(ErrorKind::kUnsafe, dev + " is in use (held)");
      return Ok();
    };
    o.candidates = [this](RoleEnv&) -> Result<std::vector<std::string>> {
      ++candidate_calls_;
      std::vector<std::string> out;
      for (const auto& [d, p] : disks_.probes) {
        if (d != "/dev/vda") out.push_back(d);
      }
      return out;
    };
    if (facts_) {
      o.disk_facts = [this](RoleEnv&, std::string* note) {
        *note = "the test's disk list";
        return facts_;
      };
    }
    return o;
  }
  static disk::DiskFacts Persistent(const std::string& target, const std::string& image) {
    return disk::DiskFacts{target, image, true, "FILE"};
  }
  static disk::DiskFacts Volatile(const std::string& target) {
    return disk::DiskFacts{target, "", false, "fs"};
  }

  struct Run {
    std::unique_ptr<fakes::RoleRun> run;
    Status status;
  };
  Run Configure(PlanMode mode = PlanMode::kApply) {
    role_ = MakeStorageRole(Options());
    Run r;
    r.run = std::make_unique<fakes::RoleRun>(m_, *role_, vars_, nullptr, mode);
    // Use our disk and mount fakes instead of the Slurm stubs.
    r.run->env = std::make_unique<RoleEnv>(RoleEnv::From(
        r.run->context, *r.run->settings, onegate_,
        SystemAdapters{m_.runner, *m_.files, m_.systemd, disks_, mounts_, m_.clock, m_.http},
        r.run->plan, &r.run->publish));
    r.status = role_->Configure(*r.run->env);
    return r;
  }
  Run MustConfigure(PlanMode mode = PlanMode::kApply) {
    Run r = Configure(mode);
    EXPECT_TRUE(r.status) << (r.status ? "" : r.status.error().message) << "\n"
                          << r.run->plan.Render();
    return r;
  }
  std::string HomeHost() const { return m_.root + "/export/home"; }
  // A worker (VM 20, 10.1.0.20) in the last good list of an earlier run: without OneGate the
  // tests of this fixture have no other client.
  void SeedClient() {
    nfs::ExportsConfig c;
    c.compute_net = "10.1.0.0/24";
    c.clients = {nfs::ExportClient{20, "10.1.0.20"}};
    m_.Write(nfs::kStateFile, nfs::StateJson(c));
  }
  // /export/slurm is the bind mount of the disk's .one-hpc-state/slurm, persisted as a unit.
  void ExpectStateBindMount(const std::string& device) {
    auto at = mounts_.FindByTarget(m_.root + "/export/slurm");
    ASSERT_TRUE(at && at->has_value()) << "/export/slurm is not mounted";
    EXPECT_EQ((*at)->source, device);
    EXPECT_EQ((*at)->root, "/.one-hpc-state/slurm");
    EXPECT_EQ((*at)->options, "bind");
    std::string unit = m_.Read("/etc/systemd/system/export-slurm.mount");
    EXPECT_THAT(unit, HasSubstr("What=/export/home/.one-hpc-state/slurm\n"));
    EXPECT_THAT(unit, HasSubstr("Where=/export/slurm\n"));
    EXPECT_THAT(unit, HasSubstr("RequiresMountsFor=/export/home\n"));
    EXPECT_THAT(unit, HasSubstr("Options=bind\n"));
    // A link planted through the homes export is never followed at boot either.
    EXPECT_THAT(unit, HasSubstr("AssertPathIsSymbolicLink=!/export/home/.one-hpc-state\n"
                                "AssertPathIsSymbolicLink=!/export/home/.one-hpc-state/slurm\n"
                                "AssertPathIsDirectory=/export/home/.one-hpc-state/slurm\n"));
    EXPECT_THAT(m_.Read("/etc/systemd/system/nfs-server.service.d/50-one-hpc-state.conf"),
                HasSubstr("RequiresMountsFor=/export/slurm\n"));
    EXPECT_TRUE(m_.Exists("/etc/systemd/system/local-fs.target.wants/export-slurm.mount"));
    struct stat st {};
    ASSERT_EQ(::stat((m_.root + "/export/home/.one-hpc-state").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
  }
  // A reboot without the mounts: the fake mounts are not real, so what the disk holds (the
  // state directory) leaves the view with them.
  void UnmountAll() {
    mounts_.table.clear();
    std::filesystem::remove_all(m_.root + "/export/home/.one-hpc-state");
  }
  // The home disk mounted at boot by export-home.mount, before configure runs.
  void MountedAtBoot(const std::string& device) {
    mounts_.table.push_back({device, HomeHost(), "ext4", "rw", "/"});
  }
  // cp -a and rm -r as the real tools would do them (the fake mounts are not real).
  void RealCopyAndRemove() {
    m_.runner.On({"cp", "-a", "--"}, [this](const Command& c) {
      std::filesystem::copy(c.argv.at(3), c.argv.at(4), std::filesystem::copy_options::recursive);
      return Exit(0);
    });
    m_.runner.On({"rm", "-r", "--one-file-system", "--"}, [this](const Command& c) {
      std::filesystem::remove_all(c.argv.at(4));
      return Exit(0);
    });
  }
  size_t IndexOf(const std::string& prefix) const {
    auto a = m_.runner.Argvs();
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].rfind(prefix, 0) == 0) return i;
    }
    return a.size();
  }
  bool Ran(const std::string& prefix) const {
    for (const auto& a : m_.runner.Argvs()) {
      if (a.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }
  void ExpectRefusedUntouched(const std::string& needle) {
    Run r = Configure();
    ASSERT_FALSE(r.status) << r.run->plan.Render();
    EXPECT_EQ(r.status.error().kind, ErrorKind::kUnsafe);
    EXPECT_THAT(r.status.error().message, HasSubstr(needle));
    EXPECT_THAT(r.status.error().message, HasSubstr("/dev/vdb"));
    EXPECT_TRUE(disks_.writes.empty());
    EXPECT_FALSE(Ran("mkfs"));
    EXPECT_EQ(mounts_.mounts, 0);
    EXPECT_FALSE(m_.Exists(nfs::kExportsFile));
  }

  FakeMachine m_;
  fakes::FakeBlockDevices disks_;
  fakes::FakeMounts mounts_;
  std::set<std::string> busy_;
  int candidate_calls_ = 0;
  OneGateClient* onegate_ = nullptr;
  ContextVars vars_;
  std::unique_ptr<Role> role_;
  std::optional<std::map<std::string, disk::DiskFacts>> facts_;
};

TEST_F(StorageTest, Identity) {
  auto role = MakeStorageRole();
  EXPECT_EQ(role->Name(), "storage");
  EXPECT_EQ(role->Service(), "Open OnDemand");
  auto bad = Settings::Resolve(role->Settings(), {{"ONEAPP_HOME_NFS_ENABLED", "maybe"}});
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("ONEAPP_HOME_NFS_ENABLED"));
  EXPECT_THAT(bad.error().message, HasSubstr("maybe"));
}

TEST_F(StorageTest, NoDataDiskHomesOnRootDisk) {
  disks_.Fs("/dev/vda", "ext4", "root");  // excluded as the root disk
  SeedClient();
  auto r = MustConfigure();
  EXPECT_FALSE(Ran("mkfs"));
  EXPECT_EQ(mounts_.mounts, 0);
  EXPECT_TRUE(m_.Exists("/export/home"));
  EXPECT_TRUE(m_.Exists("/export/slurm"));
  EXPECT_TRUE(m_.Exists("/export/software"));
  std::string exports = m_.Read(nfs::kExportsFile);
  EXPECT_THAT(exports,
              HasSubstr("/export/home 10.1.0.20(rw,sync,no_subtree_check,root_squash,fsid=1)\n"));
  EXPECT_THAT(exports, Not(HasSubstr("mountpoint")));
  EXPECT_FALSE(m_.Exists("/etc/systemd/system/export-home.mount"));
  EXPECT_TRUE(Ran("exportfs -ra"));
  EXPECT_TRUE(m_.Exists("/etc/systemd/system/timers.target.wants/one-hpc-exports-refresh.timer"));
}

// In a container (systemd's /run/systemd/container, as in the lab) the block devices are the
// host's and kernel NFS cannot be served: no disk is looked at, the exports file is still
// written, but nfs-server and exportfs are left alone.
TEST_F(StorageTest, ContainerLooksAtNoDiskAndServesNothing) {
  m_.Write(host::kContainerMarker, "systemd-nspawn\n");
  disks_.Blank("/dev/vdb");  // would be formatted on a VM
  SeedClient();
  log::Capture logs;
  auto r = MustConfigure();
  EXPECT_EQ(candidate_calls_, 0);
  EXPECT_TRUE(disks_.writes.empty());
  EXPECT_FALSE(Ran("mkfs"));
  EXPECT_EQ(mounts_.mounts, 0);
  EXPECT_TRUE(m_.Exists("/export/home"));
  EXPECT_TRUE(m_.Exists("/export/slurm"));
  EXPECT_TRUE(m_.Exists("/export/software"));
  EXPECT_FALSE(m_.Exists("/etc/systemd/system/export-home.mount"));
  std::string exports = m_.Read(nfs::kExportsFile);
  EXPECT_THAT(exports,
              HasSubstr("/export/home 10.1.0.20(rw,sync,no_subtree_check,root_squash,fsid=1)\n"));
  EXPECT_THAT(exports, HasSubstr("/export/software 10.1.0.20("));
  EXPECT_FALSE(Ran("exportfs"));
  for (const auto& a : m_.runner.Argvs()) EXPECT_THAT(a, Not(HasSubstr("nfs-server"))) << a;
  EXPECT_FALSE(m_.Exists("/etc/systemd/system/multi-user.target.wants/nfs-server.service"));
  // The refresher still keeps the exports file current.
  EXPECT_TRUE(m_.Exists("/etc/systemd/system/timers.target.wants/one-hpc-exports-refresh.timer"));
  EXPECT_TRUE(logs.Contains("in a container the NFS transport is stood in by bind mounts"));
  EXPECT_TRUE(logs.Contains("no block device is looked at"));
  EXPECT_THAT(r.run->plan.Render(), HasSubstr("nfs-server.service"));
}

TEST_F(StorageTest, ContainerRerunChangesNothing) {
  m_.Write(host::kContainerMarker, "systemd-nspawn\n");
  MustConfigure();
  auto second = MustConfigure();
  EXPECT_TRUE(second.run->Changes().empty()) << second.run->plan.Render();
  EXPECT_FALSE(Ran("exportfs"));
  EXPECT_EQ(candidate_calls_, 0);
}

// With ONEAPP_HOME_NFS_ENABLED in a container: no home export, still no disk and no server.
TEST_F(StorageTest, ContainerWithExternalHome) {
  m_.Write(host::kContainerMarker, "systemd-nspawn\n");
  vars_["ONEAPP_HOME_NFS_ENABLED"] = "YES";
  MustConfigure();
  EXPECT_EQ(candidate_calls_, 0);
  EXPECT_THAT(m_.Read(nfs::kExportsFile), Not(HasSubstr("/export/home")));
  EXPECT_FALSE(Ran("exportfs"));
}

TEST_F(StorageTest, BlankDiskIsFormattedMountedPersisted) {
  disks_.Blank("/dev/vdb");
  SeedClient();
  log::Capture logs;
  auto r = MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdb"});
  EXPECT_TRUE(Ran("mkfs.ext4 -F -q -L ood-home -E nodiscard -b 4096 /dev/vdb 261888"));
  ASSERT_EQ(mounts_.table.size(), 2u);  // the homes, then the Slurm state
  EXPECT_EQ(mounts_.table[0].source, "/dev/vdb");
  EXPECT_EQ(mounts_.table[0].target, HomeHost());
  ExpectStateBindMount("/dev/vdb");
  std::string unit = m_.Read("/etc/systemd/system/export-home.mount");
  EXPECT_THAT(unit, HasSubstr("What=/dev/disk/by-uuid/aaaaaaaa-0000-0000-0000-000000000001\n"));
  EXPECT_THAT(unit, HasSubstr("Where=/export/home\n"));
  EXPECT_THAT(unit, HasSubstr("Before=nfs-server.service\n"));
  EXPECT_THAT(m_.Read("/etc/systemd/system/nfs-server.service.d/50-one-hpc-home.conf"),
              HasSubstr("RequiresMountsFor=/export/home\n"));
  EXPECT_TRUE(
      m_.Exists("/etc/systemd/system/"
                "dev-disk-by\\x2duuid-aaaaaaaa\\x2d0000\\x2d0000\\x2d0000\\x2d000000000001"
                ".device.d/50-one-hpc-timeout.conf"));
  EXPECT_THAT(
      m_.Read(nfs::kExportsFile),
      HasSubstr("/export/home 10.1.0.20(rw,sync,no_subtree_check,root_squash,fsid=1,mountpoint)"));
  EXPECT_TRUE(logs.Contains("disk /dev/vdb: blank"));
}

TEST_F(StorageTest, RerunChangesNothing) {
  disks_.Blank("/dev/vdb");
  MustConfigure();
  size_t commands = m_.runner.commands().size();
  auto second = MustConfigure();
  EXPECT_TRUE(second.run->Changes().empty()) << second.run->plan.Render();
  EXPECT_EQ(disks_.writes.size(), 1u);
  EXPECT_EQ(mounts_.mounts, 2);
  for (size_t i = commands; i < m_.runner.commands().size(); ++i) {
    std::string a = log::QuoteArgv(m_.runner.commands()[i].argv);  // reads only
    EXPECT_TRUE(a.rfind("systemctl is-active", 0) == 0 || a.rfind("stat -f", 0) == 0) << a;
  }
}

TEST_F(StorageTest, LabelledDiskIsReusedNeverFormatted) {
  disks_.Fs("/dev/vdc", "ext4", "ood-home", "cccccccc-0000-0000-0000-000000000000");
  disks_.Blank("/dev/vdb");  // the label wins over a blank disk
  auto r = MustConfigure();
  EXPECT_FALSE(Ran("mkfs"));
  ASSERT_EQ(mounts_.table.size(), 2u);
  EXPECT_EQ(mounts_.table[0].source, "/dev/vdc");
  EXPECT_EQ(mounts_.table[0].fs_type, "ext4");
  ExpectStateBindMount("/dev/vdc");
  EXPECT_THAT(m_.Read("/etc/systemd/system/export-home.mount"),
              HasSubstr("What=/dev/disk/by-uuid/cccccccc-0000-0000-0000-000000000000"));
}

TEST_F(StorageTest, LabelledPartitionIsReused) {
  disks_.Signature("/dev/vdb", "gpt partition table", "gpt");
  disks_.Fs("/dev/vdb1", "ext4", "ood-home");
  // The label anywhere wins, also on a partition of a partitioned disk.
  auto r = MustConfigure();
  EXPECT_FALSE(Ran("mkfs"));
  ASSERT_EQ(mounts_.table.size(), 2u);
  EXPECT_EQ(mounts_.table[0].source, "/dev/vdb1");
  ExpectStateBindMount("/dev/vdb1");
}

TEST_F(StorageTest, ContextImageAttachedAsDiskIsSkipped) {
  disks_.Fs("/dev/vdb", "iso9660", "CONTEXT");
  disks_.Blank("/dev/vdc");
  MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdc"});
}

TEST_F(StorageTest, ForeignFilesystemRefused) {
  disks_.Fs("/dev/vdb", "xfs", "data");
  ExpectRefusedUntouched("xfs label=data");
}

TEST_F(StorageTest, Ext4WithOtherLabelRefused) {
  disks_.Fs("/dev/vdb", "ext4", "backup");
  ExpectRefusedUntouched("ext4 label=backup");
}

TEST_F(StorageTest, PartitionTableRefused) {
  disks_.Signature("/dev/vdb", "dos partition table", "dos");
  ExpectRefusedUntouched("dos partition table");
}

TEST_F(StorageTest, BackupGptOnlyRefused) {
  disks_.Signature("/dev/vdb", "gpt backup header (no primary) offset=1073741312");
  ExpectRefusedUntouched("gpt backup header");
}

TEST_F(StorageTest, LvmRaidLuksSwapRefused) {
  for (const char* sig : {"LVM2_member usage=raid", "linux_raid_member usage=raid",
                          "crypto_LUKS usage=crypto", "swap usage=other label=swap1"}) {
    SCOPED_TRACE(sig);
    disks_.probes.clear();
    disks_.Signature("/dev/vdb", sig);
    ExpectRefusedUntouched(sig);
  }
}

TEST_F(StorageTest, AmbivalentRefused) {
  disks_.Signature("/dev/vdb", "", "", /*ambivalent=*/true);
  ExpectRefusedUntouched("ambivalent");
}

TEST_F(StorageTest, UnknownDataRefused) {
  disks_.Signature("/dev/vdb", "unknown data (non-zero bytes in the first MiB)");
  ExpectRefusedUntouched("unknown data");
}

TEST_F(StorageTest, MountedBlankRefused) {
  disks_.Blank("/dev/vdb");
  mounts_.table.push_back({"/dev/vdb", "/mnt/other", "ext4", "rw"});
  ExpectRefusedUntouched("mounted on /mnt/other");
}

TEST_F(StorageTest, HeldBlankRefused) {
  disks_.Blank("/dev/vdb");
  busy_.insert("/dev/vdb");
  ExpectRefusedUntouched("in use");
}

TEST_F(StorageTest, SeveralDataDisksNeverGuess) {
  disks_.Fs("/dev/vdb", "ext4", "one");
  disks_.Fs("/dev/vdc", "ext4", "two");
  ExpectRefusedUntouched("/dev/vdc: ext4 label=two");
}

TEST_F(StorageTest, BlankAndDataDiskRefused) {
  disks_.Blank("/dev/vdc");
  disks_.Fs("/dev/vdb", "ext4", "data");
  ExpectRefusedUntouched("/dev/vdb: ext4 label=data");
}

// Review finding M1: without OpenNebula's disk list (OneGate down at the first boot, or no
// TOKEN), several blank disks are refused: the first by name may be a volatile scratch disk.
TEST_F(StorageTest, SeveralBlankDisksWithoutOpenNebulasListAreRefused) {
  disks_.Blank("/dev/vdc");
  disks_.Blank("/dev/vdb");
  ExpectRefusedUntouched(
      "2 blank disks (/dev/vdb, /dev/vdc) and no disk list from OpenNebula (OneGate "
      "unreachable, or no TOKEN=YES): refusing to guess which one holds the homes");
  EXPECT_TRUE(disks_.probes["/dev/vdb"].blank());
  EXPECT_TRUE(disks_.probes["/dev/vdc"].blank());
}

// ---- the choice among blank disks from OpenNebula's disk list (OneGate TEMPLATE.DISK) -----

TEST_F(StorageTest, OpenNebulasListChoosesThePersistentDatablockNotTheFirstByName) {
  disks_.Blank("/dev/vdb");  // volatile scratch disk, first by name
  disks_.Blank("/dev/vdc");
  facts_ = std::map<std::string, disk::DiskFacts>{{"/dev/vdb", Volatile("vdb")},
                                                  {"/dev/vdc", Persistent("vdc", "homes-2026")}};
  auto r = MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdc"});
  EXPECT_TRUE(disks_.probes["/dev/vdb"].blank());
  EXPECT_THAT(r.run->plan.Render(), HasSubstr("only persistent datablock"));
}

TEST_F(StorageTest, OpenNebulasListPrefersTheImageNamedOodHome) {
  disks_.Blank("/dev/vdb");
  disks_.Blank("/dev/vdc");
  facts_ = std::map<std::string, disk::DiskFacts>{{"/dev/vdb", Persistent("vdb", "scratch")},
                                                  {"/dev/vdc", Persistent("vdc", "ood-home")}};
  MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdc"});
}

TEST_F(StorageTest, AVolatileDiskIsNeverTheHomeUnlessTheSettingSaysSo) {
  disks_.Blank("/dev/vdb");
  facts_ = std::map<std::string, disk::DiskFacts>{{"/dev/vdb", Volatile("vdb")}};
  ExpectRefusedUntouched("no blank disk is a persistent datablock");
  auto again = Configure();
  EXPECT_THAT(again.status.error().message, HasSubstr("ONEAPP_HOME_DISK_VOLATILE=YES"));
  EXPECT_THAT(again.status.error().message, HasSubstr("volatile disk (TYPE=fs"));
  vars_["ONEAPP_HOME_DISK_VOLATILE"] = "YES";
  MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdb"});
}

TEST_F(StorageTest, OpenNebulasListAmbiguousOrSilentIsRefused) {
  disks_.Blank("/dev/vdb");
  disks_.Blank("/dev/vdc");
  facts_ = std::map<std::string, disk::DiskFacts>{{"/dev/vdb", Persistent("vdb", "a")},
                                                  {"/dev/vdc", Persistent("vdc", "b")}};
  ExpectRefusedUntouched("several blank persistent datablocks");
  facts_ = std::map<std::string, disk::DiskFacts>{};  // lists no disk with that target
  ExpectRefusedUntouched("not identified in OpenNebula's disk list");
}

TEST_F(StorageTest, WithoutOpenNebulasListTheContentRulesStayAndThePlanSaysSo) {
  disks_.Blank("/dev/vdb");
  auto r = MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdb"});
  EXPECT_THAT(r.run->plan.Render(), HasSubstr("chosen from the disks' content alone"));
}

// A format this VM began and did not finish (mkfs killed by a power loss) is finished at the
// next boot: the record on the root disk and the marker at the disk's end agree. A disk in
// the same state without this VM's marker stays refused.
TEST_F(StorageTest, AnInterruptedFormatIsFinishedAtTheNextBoot) {
  disks_.Blank("/dev/vdb");
  m_.runner.On({"mkfs.ext4"}, Exit(1));  // killed half-way
  auto first = Configure();
  ASSERT_FALSE(first.status);
  ASSERT_TRUE(m_.Exists("/var/lib/one-hpc/home-mkfs.json"));
  const std::string marker = disks_.tails["/dev/vdb"];
  ASSERT_EQ(marker.size(), disk::kMkfsMarkerBytes);
  EXPECT_THAT(marker, HasSubstr("one-hpc: mkfs of the ood-home disk begun by this VM"));
  // What the half-done mkfs left: no filesystem a probe recognises, bytes at the head.
  disks_.Signature("/dev/vdb", "unknown data (non-zero bytes in the first MiB)");
  m_.runner.On({"mkfs.ext4"}, [this](const Command& c) {
    const std::string& dev = c.argv.at(c.argv.size() - 2);
    disks_.writes.push_back(dev);
    disks_.Fs(dev, "ext4", c.argv.at(4), "aaaaaaaa-0000-0000-0000-000000000001");
    return Exit(0);
  });
  auto second = MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdb"});
  EXPECT_THAT(second.run->plan.Render(), HasSubstr("the format did not finish: finishing it"));
  EXPECT_FALSE(m_.Exists("/var/lib/one-hpc/home-mkfs.json"));
  EXPECT_EQ(mounts_.mounts, 2);  // the homes and the Slurm state
}

TEST_F(StorageTest, AHalfFormattedDiskWithoutThisVmsMarkerStaysRefused) {
  disks_.Signature("/dev/vdb", "unknown data (non-zero bytes in the first MiB)");
  m_.Write("/var/lib/one-hpc/home-mkfs.json",
           R"({"device":"/dev/vdb","nonce":"0123456789abcdef0123456789abcdef"})");
  ExpectRefusedUntouched("not blank");
  EXPECT_FALSE(m_.Exists("/var/lib/one-hpc/home-mkfs.json"));  // forgotten
}

TEST_F(StorageTest, CrashAfterMkfsBeforeMountConverges) {
  disks_.Blank("/dev/vdb");
  // The first boot got as far as mkfs: the disk has the label, nothing is mounted or persisted.
  disks_.Fs("/dev/vdb", "ext4", "ood-home", "dddddddd-0000-0000-0000-000000000000");
  auto r = MustConfigure();
  EXPECT_FALSE(Ran("mkfs"));
  ASSERT_EQ(mounts_.table.size(), 2u);
  EXPECT_EQ(mounts_.table[0].source, "/dev/vdb");
  EXPECT_TRUE(m_.Exists("/etc/systemd/system/export-home.mount"));
}

TEST_F(StorageTest, CrashAfterMountBeforeUnitsConverges) {
  disks_.Blank("/dev/vdb");
  MustConfigure();
  // Power loss: the mounts are gone and the units were never written.
  UnmountAll();
  std::filesystem::remove(m_.root + "/etc/systemd/system/export-home.mount");
  auto r = MustConfigure();
  EXPECT_EQ(disks_.writes.size(), 1u);  // formatted once
  EXPECT_EQ(mounts_.mounts, 4);
  EXPECT_TRUE(m_.Exists("/etc/systemd/system/export-home.mount"));
}

// ---- the Slurm state on the home disk (roles/disk/state_mount.h)

TEST_F(StorageTest, TheRootDisksSlurmStateIsCopiedOntoTheDiskOnceWithNfsServerStopped) {
  disks_.Fs("/dev/vdb", "ext4", "ood-home", "bbbbbbbb-0000-0000-0000-000000000000");
  // What the portal kept in the root disk's /export/slurm before this version.
  m_.Write("/export/slurm/munge.key", "the cluster's key\n");
  m_.Write("/export/slurm/state/node_state", "nodes\n");
  m_.active.insert("nfs-server.service");
  RealCopyAndRemove();
  bool unit_before_bind = false;
  mounts_.on_mount = [&](const MountEntry& e) {
    if (e.target == m_.root + "/export/slurm") {
      unit_before_bind =
          m_.Exists("/etc/systemd/system/export-slurm.mount") &&
          m_.Exists("/etc/systemd/system/nfs-server.service.d/50-one-hpc-state.conf");
    }
  };
  auto r = MustConfigure();
  const std::string state = "/export/home/.one-hpc-state/slurm";
  EXPECT_EQ(m_.Read(state + "/munge.key"), "the cluster's key\n");
  EXPECT_EQ(m_.Read(state + "/state/node_state"), "nodes\n");
  EXPECT_FALSE(m_.Exists(state + ".migrating"));
  ExpectStateBindMount("/dev/vdb");
  // nfs-server stops before the copy (the portal waits), the copy is synced, then mounted
  // over, and nfs-server runs again at the end.
  const std::string host_state = m_.root + state;
  size_t stop = IndexOf("systemctl --no-block stop nfs-server.service");
  size_t cp = IndexOf("cp -a -- " + m_.root + "/export/slurm " + host_state + ".migrating");
  size_t sync = IndexOf("sync -f " + host_state + ".migrating");
  size_t start = IndexOf("systemctl --no-block start nfs-server.service");
  size_t n = m_.runner.Argvs().size();
  ASSERT_LT(stop, n);
  ASSERT_LT(cp, n);
  ASSERT_LT(sync, n);
  ASSERT_LT(start, n);
  EXPECT_LT(stop, cp);
  EXPECT_LT(cp, sync);
  EXPECT_LT(sync, start);
  // The mount unit and nfs-server's drop-in are in place before the state is bind-mounted
  // (review N10; the code writes them before the copy is renamed into place): a power loss
  // once the copy is there boots the disk's copy, never an nfs-server exporting the root disk's.
  EXPECT_TRUE(unit_before_bind);
  EXPECT_TRUE(m_.active.count("nfs-server.service"));
  EXPECT_THAT(r.run->plan.Render(), HasSubstr("copy /export/slurm (2 entries) onto the ood-home "
                                              "disk, /export/home/.one-hpc-state/slurm"));
  // Once: the next run copies nothing and changes nothing.
  size_t before = m_.runner.commands().size();
  auto second = MustConfigure();
  EXPECT_TRUE(second.run->Changes().empty()) << second.run->plan.Render();
  for (size_t i = before; i < m_.runner.commands().size(); ++i) {
    EXPECT_NE(m_.runner.commands()[i].argv[0], "cp");
  }
}

TEST_F(StorageTest, AFailedCopyStartsNfsServerAgainWithTheRootDisksStateWhole) {
  disks_.Fs("/dev/vdb", "ext4", "ood-home", "bbbbbbbb-0000-0000-0000-000000000000");
  m_.Write("/export/slurm/munge.key", "the cluster's key\n");
  m_.active.insert("nfs-server.service");
  RealCopyAndRemove();
  m_.runner.On({"cp", "-a", "--"}, [](const Command&) {
    return Exit(1, "", "cp: error writing: No space left on device");
  });
  log::Capture logs;
  auto r = Configure();
  ASSERT_FALSE(r.status);
  EXPECT_THAT(r.status.error().message, HasSubstr("No space left on device"));
  // Stopped for the copy, started again once it failed: the portal keeps its export of the
  // root disk's state, which nothing moved or hid.
  EXPECT_LT(IndexOf("systemctl --no-block stop nfs-server.service"),
            IndexOf("systemctl --no-block start nfs-server.service"));
  EXPECT_TRUE(m_.active.count("nfs-server.service"));
  EXPECT_TRUE(logs.Contains("starting nfs-server.service again"));
  EXPECT_EQ(m_.Read("/export/slurm/munge.key"), "the cluster's key\n");
  EXPECT_FALSE(m_.Exists("/export/home/.one-hpc-state/slurm"));
  for (const auto& m : mounts_.table) EXPECT_NE(m.target, m_.root + "/export/slurm");
  // The next run, with room on the disk, copies it.
  RealCopyAndRemove();
  MustConfigure();
  EXPECT_EQ(m_.Read("/export/home/.one-hpc-state/slurm/munge.key"), "the cluster's key\n");
  ExpectStateBindMount("/dev/vdb");
}

TEST_F(StorageTest, TheDisksSlurmStateWinsOverTheRootDisksAndIsNeverCopiedAgain) {
  // A replaced storage VM whose new root disk has an /export/slurm of its own, or a boot on
  // which the bind mount did not come up: the disk's state is the state.
  disks_.Fs("/dev/vdb", "ext4", "ood-home", "bbbbbbbb-0000-0000-0000-000000000000");
  MountedAtBoot("/dev/vdb");
  m_.Write("/export/home/.one-hpc-state/slurm/munge.key", "the disk's key\n");
  m_.Write("/export/slurm/munge.key", "an old copy\n");
  RealCopyAndRemove();
  log::Capture logs;
  auto r = MustConfigure();
  EXPECT_FALSE(Ran("cp"));
  EXPECT_EQ(m_.Read("/export/home/.one-hpc-state/slurm/munge.key"), "the disk's key\n");
  ExpectStateBindMount("/dev/vdb");
  EXPECT_TRUE(logs.Contains("the root disk's stay underneath, unused"));
}

TEST_F(StorageTest, AnInterruptedCopyIsStartedAgainFromTheRootDisk) {
  disks_.Fs("/dev/vdb", "ext4", "ood-home", "bbbbbbbb-0000-0000-0000-000000000000");
  MountedAtBoot("/dev/vdb");
  m_.Write("/export/home/.one-hpc-state/slurm.migrating/munge.key", "half");
  m_.Write("/export/slurm/munge.key", "the cluster's key\n");
  RealCopyAndRemove();
  MustConfigure();
  EXPECT_TRUE(
      Ran("rm -r --one-file-system -- " + m_.root + "/export/home/.one-hpc-state/slurm.migrating"));
  EXPECT_LT(IndexOf("rm -r"), IndexOf("cp -a"));
  EXPECT_EQ(m_.Read("/export/home/.one-hpc-state/slurm/munge.key"), "the cluster's key\n");
}

// Review finding N6: the portal is root on the homes export (no_root_squash), where the state
// directory lies. A link it plants there is never bind-mounted on /export/slurm (which would
// serve this VM's own files back to it, writable as root).
TEST_F(StorageTest, ALinkPlantedInTheStateDirectoryIsNeverFollowed) {
  disks_.Fs("/dev/vdb", "ext4", "ood-home", "bbbbbbbb-0000-0000-0000-000000000000");
  MountedAtBoot("/dev/vdb");
  m_.Write("/etc/secret-of-the-storage-vm", "x\n");
  std::filesystem::create_directories(m_.root + "/export/home/.one-hpc-state");
  ::chmod((m_.root + "/export/home/.one-hpc-state").c_str(), 0700);
  std::filesystem::create_directory_symlink(m_.root + "/etc",
                                            m_.root + "/export/home/.one-hpc-state/slurm");
  m_.active.insert("nfs-server.service");
  auto r = Configure();
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(r.status.error().message,
              HasSubstr(m_.root + "/export/home/.one-hpc-state/slurm is a symbolic link"));
  for (const auto& m : mounts_.table) EXPECT_NE(m.target, m_.root + "/export/slurm");
  EXPECT_TRUE(m_.active.count("nfs-server.service"));  // serving what it served before
}

TEST_F(StorageTest, SomethingElseMountedOnTheSlurmStateIsRefused) {
  disks_.Fs("/dev/vdb", "ext4", "ood-home", "bbbbbbbb-0000-0000-0000-000000000000");
  mounts_.table.push_back({"tmpfs", m_.root + "/export/slurm", "tmpfs", "rw", "/"});
  auto r = Configure();
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(r.status.error().message,
              HasSubstr("/export/slurm has tmpfs (tmpfs) mounted on it, not the Slurm state of "
                        "the ood-home disk"));
  EXPECT_FALSE(m_.Exists(nfs::kExportsFile));
}

TEST_F(StorageTest, WithTheHomesOnTheRootDiskTheSlurmStateStaysThereAndThePlanSaysSo) {
  auto r = MustConfigure(PlanMode::kDryRun);
  EXPECT_THAT(r.run->plan.Render(),
              HasSubstr("the Slurm state in /export/slurm on the root disk [keep]\n   because: no "
                        "ood-home disk"));
  disks_.Blank("/dev/vdb");
  auto planned = MustConfigure(PlanMode::kDryRun);
  EXPECT_THAT(planned.run->plan.Render(),
              HasSubstr("bind-mount /export/home/.one-hpc-state/slurm on /export/slurm"));
  EXPECT_EQ(mounts_.mounts, 0);
}

TEST_F(StorageTest, HomeDiskMissingLaterIsRefusedNotReplaced) {
  disks_.Blank("/dev/vdb");
  MustConfigure();
  // The persistent disk is detached; the VM reboots with no disk, then with a new blank one.
  disks_.probes.clear();
  UnmountAll();
  for (bool with_blank : {false, true}) {
    SCOPED_TRACE(with_blank ? "a new blank disk" : "no disk");
    if (with_blank) disks_.Blank("/dev/vdc");
    auto r = Configure();
    ASSERT_FALSE(r.status);
    EXPECT_EQ(r.status.error().kind, ErrorKind::kUnsafe);
    EXPECT_THAT(
        r.status.error().message,
        HasSubstr("ood-home filesystem /dev/disk/by-uuid/aaaaaaaa-0000-0000-0000-000000000001"));
    EXPECT_THAT(r.status.error().message, HasSubstr("not attached now"));
    EXPECT_EQ(disks_.writes.size(), 1u);
    EXPECT_TRUE(mounts_.table.empty());
  }
  // Re-attached: mounted again, nothing formatted.
  disks_.probes.clear();
  disks_.Fs("/dev/vdd", "ext4", "ood-home", "aaaaaaaa-0000-0000-0000-000000000001");
  MustConfigure();
  ASSERT_EQ(mounts_.table.size(), 2u);
  EXPECT_EQ(mounts_.table[0].source, "/dev/vdd");
}

TEST_F(StorageTest, SomethingElseMountedOnHomeRefused) {
  disks_.Fs("/dev/vdb", "ext4", "ood-home");
  mounts_.table.push_back({"/dev/vdz", HomeHost(), "ext4", "rw"});
  auto r = Configure();
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(r.status.error().message, HasSubstr("/dev/vdz"));
}

TEST_F(StorageTest, ExternalHomeSkipsDiskAndHomeExport) {
  vars_["ONEAPP_HOME_NFS_ENABLED"] = "YES";
  disks_.Fs("/dev/vdb", "xfs", "data");  // not even looked at
  SeedClient();
  auto r = MustConfigure();
  EXPECT_FALSE(Ran("mkfs"));
  std::string exports = m_.Read(nfs::kExportsFile);
  EXPECT_THAT(exports, Not(HasSubstr("/export/home ")));
  EXPECT_THAT(exports, HasSubstr("/export/software 10.1.0.20("));
  EXPECT_FALSE(m_.Exists("/export/home"));
}

TEST_F(StorageTest, PlanShowsDecisionsAndChangesNothing) {
  disks_.Blank("/dev/vdb");
  auto r = MustConfigure(PlanMode::kDryRun);
  std::string plan = r.run->plan.Render();
  EXPECT_THAT(plan, HasSubstr("disk /dev/vdb [keep]\n   because: blank (1.0 GiB)"));
  EXPECT_THAT(plan, HasSubstr("format /dev/vdb (mkfs.ext4 -F -L ood-home)"));
  EXPECT_THAT(plan, HasSubstr("mount /dev/vdb on /export/home"));
  EXPECT_TRUE(disks_.writes.empty());
  EXPECT_EQ(mounts_.mounts, 0);
  EXPECT_FALSE(m_.Exists(nfs::kExportsFile));
}

TEST_F(StorageTest, NoExportfsUnderARootPrefixByDefault) {
  role_ = MakeStorageRole(StorageOptions{});  // real options: exportfs only on the real root
  fakes::RoleRun run(m_, *role_, vars_, nullptr);
  run.env = std::make_unique<RoleEnv>(RoleEnv::From(
      run.context, *run.settings, nullptr,
      SystemAdapters{m_.runner, *m_.files, m_.systemd, disks_, mounts_, m_.clock, m_.http},
      run.plan, nullptr));
  ASSERT_TRUE(role_->Configure(*run.env)) << run.plan.Render();
  EXPECT_TRUE(m_.Exists(nfs::kExportsFile));
  EXPECT_FALSE(Ran("exportfs"));
  EXPECT_THAT(run.plan.Render(),
              HasSubstr("exportfs -ra [keep]\n   because: not run: the files are under --root"));
}

TEST_F(StorageTest, NoComputeNicIsAClearError) {
  vars_ = {};
  auto r = Configure();
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(r.status.error().message, HasSubstr("ETH0_IP"));
}

// ---- exports -------------------------------------------------------------------------------

TEST(ExportsTest, ComputeNetworkIsTheNicsCidr) {
  host::ContextNic nic{1, "10.1.2.3", "255.255.0.0", ""};
  EXPECT_EQ(*nfs::ComputeNetwork(nic), "10.1.0.0/16");
  EXPECT_EQ(*nfs::ComputeNetwork({0, "10.1.2.3", "", ""}), "10.1.2.0/24");
  auto bad = nfs::ComputeNetwork({0, "10.1.2.3", "255.0.255.0", ""});
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("ETH0_MASK='255.0.255.0'"));
}

TEST(ExportsTest, Render) {
  nfs::ExportsConfig c;
  c.compute_net = "10.1.0.0/24";
  c.portal_ips = {"10.1.0.5"};
  // The storage VM, two workers (sorted by address, not as text), and the portal listed again
  // (it gets root once, no second line).
  c.clients = {nfs::ExportClient{3, "10.1.0.3"}, nfs::ExportClient{12, "10.1.0.12"},
               nfs::ExportClient{9, "10.1.0.9"}, nfs::ExportClient{5, "10.1.0.5"}};
  c.home_on_disk = true;
  EXPECT_EQ(nfs::RenderExports(c),
            "# Generated by one-hpc (Open OnDemand storage role); rewritten by\n"
            "# one-hpc-exports-refresh.timer when the service's VMs change. Do not edit.\n"
            "# portal (root, Slurm state): 10.1.0.5; the service's other VMs on 10.1.0.0/24 "
            "(root_squash): 10.1.0.3 10.1.0.9 10.1.0.12\n"
            "/export/home 10.1.0.5(rw,sync,no_subtree_check,no_root_squash,fsid=1,mountpoint)\n"
            "/export/home 10.1.0.3(rw,sync,no_subtree_check,root_squash,fsid=1,mountpoint)\n"
            "/export/home 10.1.0.9(rw,sync,no_subtree_check,root_squash,fsid=1,mountpoint)\n"
            "/export/home 10.1.0.12(rw,sync,no_subtree_check,root_squash,fsid=1,mountpoint)\n"
            "/export/slurm 10.1.0.5(rw,sync,no_subtree_check,no_root_squash,fsid=2,mountpoint)\n"
            "/export/software 10.1.0.3(rw,sync,no_subtree_check,root_squash,fsid=3)\n"
            "/export/software 10.1.0.5(rw,sync,no_subtree_check,root_squash,fsid=3)\n"
            "/export/software 10.1.0.9(rw,sync,no_subtree_check,root_squash,fsid=3)\n"
            "/export/software 10.1.0.12(rw,sync,no_subtree_check,root_squash,fsid=3)\n");
  c.portal_ips.clear();
  c.home_on_disk = false;
  std::string no_portal = nfs::RenderExports(c);
  EXPECT_THAT(no_portal, Not(HasSubstr("/export/slurm")));  // no client: no line
  EXPECT_THAT(no_portal,
              HasSubstr("/export/home 10.1.0.5(rw,sync,no_subtree_check,root_squash,fsid=1)\n"));
  EXPECT_THAT(no_portal, Not(HasSubstr("0/24(")));  // never the whole compute network
  auto state = nfs::ParseStateJson(nfs::StateJson(c));
  ASSERT_TRUE(state);
  EXPECT_EQ(state->compute_net, c.compute_net);
  EXPECT_EQ(state->clients, c.clients);
  EXPECT_FALSE(nfs::ParseStateJson("{\"compute_net\":\"x\"}"));
  EXPECT_FALSE(nfs::ParseStateJson("[]"));
  EXPECT_FALSE(nfs::ParseStateJson(
      "{\"compute_net\":\"10.1.0.0/24\",\"clients\":[{\"vm\":1,\"ip\":\"10.1.0\"}]}"));
  // A state file of an earlier one-hpc (no clients) is read, with no client.
  auto old = nfs::ParseStateJson("{\"compute_net\":\"10.1.0.0/24\",\"portal_ips\":[]}");
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->clients.empty());
}

// No client at all (the first configure with OneGate down): no export line, since a line that
// names no client exports to the world.
TEST(ExportsTest, NoClientNoLine) {
  nfs::ExportsConfig c;
  c.compute_net = "10.1.0.0/24";
  const std::string text = nfs::RenderExports(c);
  EXPECT_THAT(text, HasSubstr("portal (root, Slurm state): none;"));
  EXPECT_THAT(text, HasSubstr("(root_squash): none\n"));
  for (const char* path : {"/export/home", "/export/slurm", "/export/software"}) {
    EXPECT_THAT(text, Not(HasSubstr(std::string("\n") + path))) << text;
  }
}

ServiceInfo Service(const std::vector<std::vector<std::string>>& portal_nics) {
  ServiceInfo s;
  ServiceRole storage{"storage", 1, 2, {}};
  ServiceRole portal{"portal", static_cast<int>(portal_nics.size()), 2, {}};
  int id = 10;
  for (const auto& ips : portal_nics) {
    ServiceNode node;
    node.vm_id = id++;
    VmInfo vm;
    vm.id = node.vm_id;
    vm.state = kVmStateActive;
    vm.lcm_state = 3;  // RUNNING
    for (const auto& ip : ips) vm.nics.push_back(VmNic{"", "", ip, "", "", "", ""});
    node.vm = vm;
    portal.nodes.push_back(node);
  }
  // A worker, VM 20 at 10.1.0.20 (and an address on the management network).
  ServiceRole worker{"worker", 1, 2, {}};
  ServiceNode w;
  w.vm_id = 20;
  VmInfo wvm;
  wvm.id = 20;
  wvm.state = kVmStateActive;
  wvm.lcm_state = 3;
  wvm.nics = {VmNic{"", "", "192.168.1.30", "", "", "", ""},
              VmNic{"", "", "10.1.0.20", "", "", "", ""}};
  w.vm = wvm;
  worker.nodes.push_back(w);
  s.roles = {storage, portal, worker};
  return s;
}

ServiceNode Vm(int id, int state, const std::vector<std::string>& ips) {
  ServiceNode node;
  node.vm_id = id;
  VmInfo vm;
  vm.id = id;
  vm.state = state;
  vm.lcm_state = state == kVmStateActive ? 3 : 0;
  for (const auto& ip : ips) vm.nics.push_back(VmNic{"", "", ip, "", "", "", ""});
  node.vm = vm;
  return node;
}

// Review M5: the homes go to the service's VMs, each by its compute address, never to the
// whole compute network.
TEST(ExportsTest, ServiceClientsAreTheVmsOfTheServiceOnTheComputeNetwork) {
  ServiceInfo s = Service({{"10.1.0.5"}});
  s.roles[0].nodes = {Vm(3, kVmStateActive, {"192.168.1.10", "10.1.0.3"})};  // the storage VM
  s.roles[2].nodes.push_back(Vm(21, kVmStateDone, {"10.1.0.21"}));      // terminated: its lease
  s.roles[2].nodes.push_back(Vm(22, 8, {"10.1.0.22"}));                 // POWEROFF keeps its lease
  s.roles[2].nodes.push_back(Vm(23, kVmStateActive, {"172.16.0.23"}));  // none on the network
  auto clients = nfs::ServiceClients(s, "10.1.0.0/24", {});
  ASSERT_TRUE(clients) << clients.error().message;
  EXPECT_EQ(*clients, (std::vector<nfs::ExportClient>{
                          {3, "10.1.0.3"}, {20, "10.1.0.20"}, {22, "10.1.0.22"}}));
  // The portals are not among them (PortalAddresses gives theirs), and a compact document
  // is refused.
  s.roles[2].nodes[0].vm.reset();
  EXPECT_FALSE(nfs::ServiceClients(s, "10.1.0.0/24", {}));
}

// A VM shown without its compute address (a partial view) keeps the entries it had: dropping
// it would stop its jobs' I/O on the homes. One that had none gets none.
TEST(ExportsTest, AVmShownWithoutItsComputeAddressKeepsItsEntries) {
  ServiceInfo s = Service({});
  s.roles[2].nodes = {Vm(20, kVmStateActive, {"192.168.1.30"}),
                      Vm(24, kVmStateActive, {"192.168.1.34"})};
  log::Capture logs;
  auto clients = nfs::ServiceClients(s, "10.1.0.0/24",
                                     {{20, "10.1.0.20"}, {21, "10.1.0.21"}, {24, "10.9.0.1"}});
  ASSERT_TRUE(clients);
  // VM 21 is gone from the document: dropped. VM 24 keeps what it had, even off the network.
  EXPECT_EQ(*clients, (std::vector<nfs::ExportClient>{{20, "10.1.0.20"}, {24, "10.9.0.1"}}));
  EXPECT_TRUE(
      logs.Contains("VM 20 of role worker shows no address on the compute network "
                    "10.1.0.0/24: keeping 10.1.0.20"))
      << logs.text();
}

TEST(ExportsTest, PortalAddressesOnlyOnTheComputeNetwork) {
  auto ips = nfs::PortalAddresses(Service({{"192.168.1.20", "10.1.0.5"}}), "10.1.0.0/24");
  ASSERT_TRUE(ips);
  EXPECT_EQ(*ips, std::vector<std::string>{"10.1.0.5"});  // never the management address
  EXPECT_TRUE(nfs::PortalAddresses(Service({}), "10.1.0.0/24")->empty());
  // Review L16: a live portal shown without its compute address is a partial view, not "no
  // portal": an error, so that the refresh keeps the last good list.
  auto partial = nfs::PortalAddresses(Service({{"192.168.1.20"}}), "10.1.0.0/24");
  ASSERT_FALSE(partial);
  EXPECT_THAT(partial.error().message,
              HasSubstr("shows no address on the compute network 10.1.0.0/24"));
  ServiceInfo compact = Service({{"10.1.0.5"}});
  compact.roles[1].nodes[0].vm.reset();
  EXPECT_FALSE(nfs::PortalAddresses(compact, "10.1.0.0/24"));
  ServiceInfo no_portal;
  EXPECT_FALSE(nfs::PortalAddresses(no_portal, "10.1.0.0/24"));
}

// Review finding N11: a portal VM that is gone (DONE) no longer holds its lease, and its address
// may be another VM's: it gets no root export. One powered off keeps its lease and its exports.
TEST(ExportsTest, APortalVmThatIsGoneIsNotCountedOnePoweredOffIs) {
  ServiceInfo s = Service({{"10.1.0.5"}, {"10.1.0.6"}, {"10.1.0.7"}});
  s.roles[1].nodes[0].vm->state = kVmStateDone;
  s.roles[1].nodes[1].vm->state = 8;   // POWEROFF
  s.roles[1].nodes[2].vm->state = -1;  // no STATE in the document: not counted either
  log::Capture logs;
  auto ips = nfs::PortalAddresses(s, "10.1.0.0/24");
  ASSERT_TRUE(ips);
  EXPECT_EQ(*ips, std::vector<std::string>{"10.1.0.6"});
  EXPECT_TRUE(logs.Contains("portal VM 10 is not counted: it is DONE")) << logs.text();
}

class RefreshTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_.runner.On({"exportfs"}, Exit(0));
    nfs::ExportsConfig c;
    c.compute_net = "10.1.0.0/24";
    c.portal_ips = {"10.1.0.5"};
    c.clients = {nfs::ExportClient{20, "10.1.0.20"}};
    c.home_on_disk = true;
    Plan plan(PlanMode::kApply);
    ASSERT_TRUE(nfs::EnsureExports(plan, *m_.files, m_.runner, c));
    before_ = m_.Read(nfs::kExportsFile);
  }
  int Exportfs() const {
    int n = 0;
    for (const auto& a : m_.runner.Argvs()) n += a == "exportfs -ra";
    return n;
  }
  FakeMachine m_;
  std::string before_;
};

TEST_F(RefreshTest, UnchangedMeansNoExportfs) {
  int n = Exportfs();
  auto out = nfs::RefreshExports(*m_.files, m_.runner,
                                 [] { return Result<ServiceInfo>(Service({{"10.1.0.5"}})); });
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_FALSE(out->changed);
  EXPECT_EQ(Exportfs(), n);
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before_);
}

TEST_F(RefreshTest, OneGateFailureKeepsLastGood) {
  log::Capture logs;
  auto out = nfs::RefreshExports(*m_.files, m_.runner, []() -> Result<ServiceInfo> {
    return Fail(ErrorKind::kNetwork, "OneGate timed out");
  });
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->onegate_failed);
  EXPECT_FALSE(out->changed);
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before_);
  EXPECT_THAT(before_, HasSubstr("10.1.0.5(rw,sync,no_subtree_check,no_root_squash"));
  EXPECT_TRUE(logs.Contains("keeping the last good exports (portal: 10.1.0.5) for"));
  EXPECT_TRUE(logs.Contains("the other VMs' (10.1.0.20) until OneGate answers")) << logs.text();
}

// The last good list outlives OneGate's failures for kLastGoodLimitSeconds from the first
// of them (kept in the state file, across runs), then expires: no root for anybody until
// OneGate answers again, which brings the portal back and clears the count.
TEST_F(RefreshTest, TheLastGoodListExpiresAfterTheLimitOfFailuresInARow) {
  auto down = []() -> Result<ServiceInfo> { return Fail(ErrorKind::kNetwork, "OneGate down"); };
  const std::int64_t t0 = 1'800'000'000;
  auto first = nfs::RefreshExports(*m_.files, m_.runner, down, true, t0);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE(first->expired);
  auto state = nfs::ParseStateJson(m_.Read(nfs::kStateFile));
  ASSERT_TRUE(state);
  EXPECT_EQ(state->onegate_failing_since, t0);
  auto later =
      nfs::RefreshExports(*m_.files, m_.runner, down, true, t0 + nfs::kLastGoodLimitSeconds - 1);
  ASSERT_TRUE(later);
  EXPECT_FALSE(later->expired);
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before_);  // still served to 10.1.0.5
  log::Capture logs;
  auto expired =
      nfs::RefreshExports(*m_.files, m_.runner, down, true, t0 + nfs::kLastGoodLimitSeconds);
  ASSERT_TRUE(expired);
  EXPECT_TRUE(expired->expired);
  EXPECT_TRUE(expired->changed);
  EXPECT_THAT(m_.Read(nfs::kExportsFile), Not(HasSubstr("10.1.0.5")));
  EXPECT_THAT(m_.Read(nfs::kExportsFile), Not(HasSubstr("no_root_squash")));
  // The other VMs keep their homes: their list does not expire.
  EXPECT_THAT(m_.Read(nfs::kExportsFile),
              HasSubstr("/export/home 10.1.0.20(rw,sync,no_subtree_check,root_squash"));
  EXPECT_TRUE(logs.Contains("the last good portal list (10.1.0.5) expires"));
  auto back = nfs::RefreshExports(
      *m_.files, m_.runner, [] { return Result<ServiceInfo>(Service({{"10.1.0.5"}})); }, true,
      t0 + nfs::kLastGoodLimitSeconds + 60);
  ASSERT_TRUE(back);
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before_);
  state = nfs::ParseStateJson(m_.Read(nfs::kStateFile));
  ASSERT_TRUE(state);
  EXPECT_EQ(state->onegate_failing_since, 0);
  EXPECT_THAT(m_.Read(nfs::kStateFile), Not(HasSubstr("onegate_failing_since")));
}

// Configure without OneGate (no TOKEN=YES) takes the same lists, with the same limit.
TEST_F(RefreshTest, ConfigureWithoutOneGateKeepsTheListUntilItExpires) {
  nfs::ExportsConfig config;
  config.compute_net = "10.1.0.0/24";
  const std::vector<nfs::ExportClient> worker = {{20, "10.1.0.20"}};
  nfs::ExportClientsOrLastGood(config, *m_.files, nullptr, 1000);
  EXPECT_EQ(config.portal_ips, std::vector<std::string>{"10.1.0.5"});
  EXPECT_EQ(config.clients, worker);
  EXPECT_EQ(config.onegate_failing_since, 1000);
  m_.Write(nfs::kStateFile, nfs::StateJson(config));
  nfs::ExportClientsOrLastGood(config, *m_.files, nullptr, 1000 + nfs::kLastGoodLimitSeconds - 1);
  EXPECT_EQ(config.portal_ips, std::vector<std::string>{"10.1.0.5"});
  EXPECT_EQ(config.onegate_failing_since, 1000);  // the first failure's time, not this one's
  nfs::ExportClientsOrLastGood(config, *m_.files, nullptr, 1000 + nfs::kLastGoodLimitSeconds);
  EXPECT_TRUE(config.portal_ips.empty());
  EXPECT_EQ(config.clients, worker);
}

// A worker created by a scale-up is a client at the next refresh; a terminated one (DONE)
// is no longer; the portal's partial view leaves the other VMs' changes through.
TEST_F(RefreshTest, TheClientsFollowTheServicesVms) {
  int n = Exportfs();
  ServiceInfo grown = Service({{"10.1.0.5"}});
  grown.roles[2].nodes.push_back(Vm(25, kVmStateActive, {"10.1.0.25"}));
  log::Capture logs;
  auto out = nfs::RefreshExports(*m_.files, m_.runner, [&] { return Result<ServiceInfo>(grown); });
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_TRUE(out->changed);
  EXPECT_EQ(Exportfs(), n + 1);
  EXPECT_THAT(m_.Read(nfs::kExportsFile),
              HasSubstr("/export/home 10.1.0.25(rw,sync,no_subtree_check,root_squash,fsid=1,"
                        "mountpoint)\n"));
  EXPECT_THAT(m_.Read(nfs::kExportsFile), HasSubstr("/export/software 10.1.0.25("));
  EXPECT_TRUE(
      logs.Contains("the service's other VMs change from [10.1.0.20] to [10.1.0.20 "
                    "10.1.0.25]"))
      << logs.text();
  ServiceInfo shrunk = Service({{"192.168.1.20"}});  // the portal shown without its address
  shrunk.roles[2].nodes.push_back(Vm(25, kVmStateDone, {"10.1.0.25"}));
  out = nfs::RefreshExports(*m_.files, m_.runner, [&] { return Result<ServiceInfo>(shrunk); });
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->onegate_failed);  // the portal's list kept
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before_);
}

TEST_F(RefreshTest, OneGateFailureRepairsAMissingFileFromLastGood) {
  std::filesystem::remove(m_.root + nfs::kExportsFile);
  auto out = nfs::RefreshExports(*m_.files, m_.runner, []() -> Result<ServiceInfo> {
    return Fail(ErrorKind::kNetwork, "down");
  });
  ASSERT_TRUE(out);
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before_);
}

TEST_F(RefreshTest, CompactDocumentKeepsLastGood) {
  ServiceInfo compact = Service({{"10.1.0.9"}});
  compact.roles[1].nodes[0].vm.reset();
  auto out =
      nfs::RefreshExports(*m_.files, m_.runner, [&] { return Result<ServiceInfo>(compact); });
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->onegate_failed);
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before_);
}

// Review L16: before, such a view emptied the list: the portal lost no_root_squash and the
// Slurm state's export at once.
TEST_F(RefreshTest, APortalShownWithoutItsComputeAddressKeepsLastGood) {
  auto out = nfs::RefreshExports(*m_.files, m_.runner,
                                 [] { return Result<ServiceInfo>(Service({{"192.168.1.20"}})); });
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->onegate_failed);
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before_);
}

TEST_F(RefreshTest, PortalAddressChange) {
  int n = Exportfs();
  log::Capture logs;
  auto out = nfs::RefreshExports(*m_.files, m_.runner,
                                 [] { return Result<ServiceInfo>(Service({{"10.1.0.7"}})); });
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->changed);
  EXPECT_EQ(Exportfs(), n + 1);
  std::string now = m_.Read(nfs::kExportsFile);
  EXPECT_THAT(now, HasSubstr("/export/home 10.1.0.7(rw,sync,no_subtree_check,no_root_squash"));
  EXPECT_THAT(now, HasSubstr("/export/slurm 10.1.0.7("));
  EXPECT_THAT(now, Not(HasSubstr("10.1.0.5")));  // the old address lost root and the state
  EXPECT_TRUE(logs.Contains("portal clients change from [10.1.0.5] to [10.1.0.7]"));
  auto state = nfs::ParseStateJson(m_.Read(nfs::kStateFile));
  ASSERT_TRUE(state);
  EXPECT_EQ(state->portal_ips, std::vector<std::string>{"10.1.0.7"});
  EXPECT_TRUE(state->home_on_disk);
}

// `one-hpc storage-refresh` in a container: the exports file follows the portal, exportfs
// is not run (no kernel NFS server there).
TEST_F(RefreshTest, ContainerRewritesExportsWithoutExportfs) {
  m_.Write(host::kContainerMarker, "systemd-nspawn\n");
  int n = Exportfs();
  log::Capture logs;
  auto out = nfs::RefreshExports(*m_.files, m_.runner,
                                 [] { return Result<ServiceInfo>(Service({{"10.1.0.7"}})); });
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_TRUE(out->changed);
  EXPECT_EQ(Exportfs(), n);
  EXPECT_THAT(m_.Read(nfs::kExportsFile), HasSubstr("/export/slurm 10.1.0.7("));
  EXPECT_TRUE(logs.Contains("in a container the NFS transport is stood in by bind mounts"));
}

TEST_F(RefreshTest, MissingStateIsNotFound) {
  std::filesystem::remove(m_.root + nfs::kStateFile);
  auto out =
      nfs::RefreshExports(*m_.files, m_.runner, [] { return Result<ServiceInfo>(Service({})); });
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind, ErrorKind::kNotFound);
}

// ---- systemd escaping ------------------------------------------------------------------------

TEST(MountUnitTest, EscapePathLikeSystemdEscape) {
  EXPECT_EQ(disk::EscapePath("/export/home"), "export-home");
  EXPECT_EQ(disk::EscapePath("/dev/disk/by-uuid/ab-cd"), "dev-disk-by\\x2duuid-ab\\x2dcd");
  EXPECT_EQ(disk::EscapePath("//a//b/"), "a-b");
  EXPECT_EQ(disk::EscapePath("/"), "-");
  EXPECT_EQ(disk::EscapePath("/.hidden/x y"), "\\x2ehidden-x\\x20y");
}

}  // namespace
}  // namespace onehpc

namespace onehpc {
namespace {

// The storage role reading the portal from the OneGate simulator (real HTTP on 127.0.0.1,
// the extended service document as OneFlow sends it).
class StorageOneGateTest : public StorageTest {
 protected:
  void SetUp() override {
    StorageTest::SetUp();
    ASSERT_GT(sim_.Start(), 0);
    service_ = sim_.CreateService(
        "Open OnDemand",
        {fakes::SimRole("storage", 1), fakes::SimRole("portal", 1), fakes::SimRole("worker", 1)});
    sim::VmSpec storage;
    storage.nics = {fakes::SimNic("192.168.1.10", "Management", "0"),
                    fakes::SimNic("10.1.0.3", "Compute", "1", "compute")};
    vm_ = sim_.AddVm(service_, "storage", storage);
    // Management on ETH0, compute on ETH1 (the NIC the template names "compute").
    vars_ = {{"ETH0_IP", "192.168.1.10"},
             {"ETH0_MASK", "255.255.255.0"},
             {"ETH1_IP", "10.1.0.3"},
             {"ETH1_MASK", "255.255.255.0"},
             {"VMID", std::to_string(vm_.id)}};
    client_ = std::make_unique<OneGateClient>(fakes::SimConfig(sim_, vm_), http_, m_.clock);
    onegate_ = client_.get();
  }
  void AddPortal(const std::string& compute_ip) {
    sim::VmSpec portal;
    portal.nics = {fakes::SimNic("192.168.1.20", "Management", "0"),
                   fakes::SimNic(compute_ip, "Compute", "1")};
    portal_ = sim_.AddVm(service_, "portal", portal);
  }
  sim::OneGateSimulator sim_;
  int service_ = -1;
  sim::VmHandle vm_;
  sim::VmHandle portal_;
  CurlTransport http_;
  std::unique_ptr<OneGateClient> client_;
};

// The disk list comes from OneGate's extended service document: the VM's TEMPLATE.DISK.
TEST_F(StorageOneGateTest, TheHomeDiskIsTheDatablockOneGateNames) {
  disks_.Blank("/dev/vdb");
  disks_.Blank("/dev/vdc");
  ASSERT_TRUE(sim_.AddDisk(
      vm_.id,
      {{"TARGET", "vda"}, {"IMAGE", "open-ondemand"}, {"PERSISTENT", "NO"}, {"TYPE", "FILE"}}));
  ASSERT_TRUE(sim_.AddDisk(vm_.id, {{"TARGET", "vdb"}, {"TYPE", "fs"}, {"SIZE", "1024"}}));
  ASSERT_TRUE(sim_.AddDisk(
      vm_.id, {{"TARGET", "vdc"}, {"IMAGE", "ood-home"}, {"PERSISTENT", "YES"}, {"TYPE", "FILE"}}));
  auto r = MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdc"});
  EXPECT_THAT(r.run->plan.Render(), HasSubstr("OpenNebula lists 3 disk(s) of VM"));
  EXPECT_THAT(r.run->plan.Render(), HasSubstr("persistent image 'ood-home'"));
  // Two requests per configure: GET /vm for the NIC the template names `compute`, and one
  // read of the extended service document for the disks and the portal's addresses (each
  // asked for it before); the next configure reads them again.
  EXPECT_EQ(client_->requests_sent(), 2);
  MustConfigure();
  EXPECT_EQ(client_->requests_sent(), 4);
}

// The guest's names are not OpenNebula's (disk_identity.h): a hot-plug after a detach gave
// the datablock the name OpenNebula uses for the volatile disk; the sizes tell them apart.
TEST_F(StorageOneGateTest, TheDatablockIsFoundBySizeWhenTheNamesShifted) {
  disks_.Blank("/dev/vdb", 2048ull << 20);
  disks_.Blank("/dev/vdc", 1024ull << 20);
  ASSERT_TRUE(sim_.AddDisk(vm_.id, {{"TARGET", "vdb"}, {"TYPE", "fs"}, {"SIZE", "1024"}}));
  ASSERT_TRUE(sim_.AddDisk(vm_.id, {{"TARGET", "vdc"},
                                    {"IMAGE", "ood-home"},
                                    {"PERSISTENT", "YES"},
                                    {"TYPE", "FILE"},
                                    {"SIZE", "2048"}}));
  auto r = MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/vdb"});
  EXPECT_THAT(r.run->plan.Render(), HasSubstr("TARGET vdc is /dev/vdb (its size, 2048 MiB; the "
                                              "guest names it otherwise)"));
}

// TARGET sdb is SCSI target 1 (OpenNebula's KVM driver pins it); the guest calls it sda.
TEST_F(StorageOneGateTest, ADatablockOnTheScsiBusIsFoundByItsAddress) {
  disks_.Blank("/dev/sda");
  disks_.scsi_targets["/dev/sda"] = 1;
  disks_.Blank("/dev/vdb");
  ASSERT_TRUE(sim_.AddDisk(vm_.id, {{"TARGET", "vdc"}, {"TYPE", "fs"}, {"SIZE", "1024"}}));
  ASSERT_TRUE(sim_.AddDisk(vm_.id, {{"TARGET", "sdb"},
                                    {"IMAGE", "ood-home"},
                                    {"PERSISTENT", "YES"},
                                    {"TYPE", "FILE"},
                                    {"SIZE", "1024"}}));
  auto r = MustConfigure();
  EXPECT_EQ(disks_.writes, std::vector<std::string>{"/dev/sda"});
  EXPECT_THAT(r.run->plan.Render(),
              HasSubstr("persistent image 'ood-home' (TARGET sdb, found by SCSI target 1)"));
}

TEST_F(StorageOneGateTest, PortalGetsRootOnlyOnItsComputeAddress) {
  AddPortal("10.1.0.5");
  MustConfigure();
  std::string exports = m_.Read(nfs::kExportsFile);
  EXPECT_THAT(exports,
              HasSubstr("/export/home 10.1.0.5(rw,sync,no_subtree_check,no_root_squash,fsid=1)"));
  EXPECT_THAT(
      exports,
      HasSubstr("/export/slurm 10.1.0.5(rw,sync,no_subtree_check,no_root_squash,fsid=2)\n"));
  EXPECT_THAT(exports, Not(HasSubstr("192.168.1.")));  // never the management network
}

// Review M5: the homes are exported to the service's VMs by address: the storage VM, the
// portal and the worker of this service, never the compute network's CIDR; a VM on that
// network outside the service is no client.
TEST_F(StorageOneGateTest, TheHomesGoToTheServicesVmsAlone) {
  AddPortal("10.1.0.5");
  sim::VmSpec worker;
  worker.nics = {fakes::SimNic("192.168.1.40", "Management", "0"),
                 fakes::SimNic("10.1.0.40", "Compute", "1")};
  sim_.AddVm(service_, "worker", worker);
  const int other = sim_.CreateService("Another", {fakes::SimRole("worker", 1)});
  sim::VmSpec stranger;
  stranger.nics = {fakes::SimNic("10.1.0.66", "Compute", "1")};
  sim_.AddVm(other, "worker", stranger);
  MustConfigure();
  std::string exports = m_.Read(nfs::kExportsFile);
  EXPECT_THAT(exports, HasSubstr("/export/home 10.1.0.3(rw,sync,no_subtree_check,root_squash"));
  EXPECT_THAT(exports, HasSubstr("/export/home 10.1.0.5(rw,sync,no_subtree_check,no_root_squash"));
  EXPECT_THAT(exports, HasSubstr("/export/home 10.1.0.40(rw,sync,no_subtree_check,root_squash"));
  EXPECT_THAT(exports, HasSubstr("/export/software 10.1.0.5(rw"));
  EXPECT_THAT(exports, Not(HasSubstr("10.1.0.66")));
  EXPECT_THAT(exports, Not(HasSubstr("/24(")));
}

TEST_F(StorageOneGateTest, PortalNotDeployedYetThenRefresherAddsIt) {
  MustConfigure();  // straight deployment: the storage role is ready before the portal exists
  EXPECT_THAT(m_.Read(nfs::kExportsFile), Not(HasSubstr("/export/slurm")));
  AddPortal("10.1.0.5");
  auto out = nfs::RefreshExports(*m_.files, m_.runner,
                                 [&] { return client_->GetService(/*extended=*/true); });
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_TRUE(out->changed);
  EXPECT_THAT(m_.Read(nfs::kExportsFile), HasSubstr("/export/slurm 10.1.0.5("));
}

TEST_F(StorageOneGateTest, OneGateDownAtRebootKeepsLastGood) {
  AddPortal("10.1.0.5");
  MustConfigure();
  std::string before = m_.Read(nfs::kExportsFile);
  sim_.InjectFault(fakes::SimFault(sim::FaultKind::kStatus, 503, "down"));
  auto again = MustConfigure();
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before);
  // Only the time of the first failure is recorded (the last good list's limit counts from it).
  EXPECT_THAT(again.run->Changes(), ElementsAre(std::string("write ") + nfs::kStateFile))
      << again.run->plan.Render();
  EXPECT_TRUE(MustConfigure().run->Changes().empty());
  auto out = nfs::RefreshExports(*m_.files, m_.runner,
                                 [&] { return client_->GetService(/*extended=*/true); });
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->onegate_failed);
  EXPECT_EQ(m_.Read(nfs::kExportsFile), before);
}

TEST_F(StorageOneGateTest, PortalAddressChangeThroughOneGate) {
  AddPortal("10.1.0.5");
  MustConfigure();
  ASSERT_TRUE(sim_.SetNicIp(portal_.id, 1, "10.1.0.8"));
  auto out = nfs::RefreshExports(*m_.files, m_.runner,
                                 [&] { return client_->GetService(/*extended=*/true); });
  ASSERT_TRUE(out);
  EXPECT_EQ(out->old_portals, std::vector<std::string>{"10.1.0.5"});
  EXPECT_EQ(out->new_portals, std::vector<std::string>{"10.1.0.8"});
  std::string exports = m_.Read(nfs::kExportsFile);
  EXPECT_THAT(exports, HasSubstr("10.1.0.8(rw,sync,no_subtree_check,no_root_squash"));
  EXPECT_THAT(exports, Not(HasSubstr("10.1.0.5")));
}

// ---- the compute NIC: by its name or by ONEAPP_COMPUTE_NETWORK, never by its position -------

TEST_F(StorageOneGateTest, ANicAttachedLaterMovesNeitherTheExportsNorSquid) {
  AddPortal("10.1.0.5");
  MustConfigure();
  const std::string exports = m_.Read(nfs::kExportsFile);
  const std::string squid = m_.Read(squid::kSquidConf);
  EXPECT_THAT(exports, HasSubstr("/export/home 10.1.0.3(rw"));  // the storage VM's own
  // onevm nic-attach: the CD gets ETH2 (the context's last NIC now), OneGate a third NIC.
  ASSERT_TRUE(sim_.AddNic(vm_.id, fakes::SimNic("172.16.9.3", "Backup", "9")));
  vars_["ETH2_IP"] = "172.16.9.3";
  vars_["ETH2_MASK"] = "255.255.255.0";
  auto again = MustConfigure();
  EXPECT_EQ(m_.Read(nfs::kExportsFile), exports);
  EXPECT_EQ(m_.Read(squid::kSquidConf), squid);
  EXPECT_THAT(again.run->plan.Render(), Not(HasSubstr("172.16.9.")));
}

TEST_F(StorageOneGateTest, TheSettingNamesTheNetworkByNameOrId) {
  AddPortal("10.1.0.5");
  vars_[host::kComputeNetworkSetting] = "Management";
  MustConfigure();
  EXPECT_THAT(m_.Read(nfs::kExportsFile), HasSubstr("/export/slurm 192.168.1.20(rw"));
  vars_[host::kComputeNetworkSetting] = "1";  // Compute's id: in the extended document only
  MustConfigure();
  std::string exports = m_.Read(nfs::kExportsFile);
  EXPECT_THAT(exports, HasSubstr("/export/slurm 10.1.0.5(rw"));
  EXPECT_THAT(exports, Not(HasSubstr("192.168.1.")));
  vars_[host::kComputeNetworkSetting] = "Storage-net";
  auto bad = Configure();
  ASSERT_FALSE(bad.status);
  EXPECT_EQ(bad.status.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(bad.status.error().message, HasSubstr("ONEAPP_COMPUTE_NETWORK='Storage-net'"));
  EXPECT_THAT(bad.status.error().message, HasSubstr("'Compute'"));
  EXPECT_EQ(m_.Read(nfs::kExportsFile), exports);  // nothing changed
}

TEST_F(StorageOneGateTest, TwoUnnamedNicsAreRefusedBeforeAnyChange) {
  sim::VmSpec unnamed;
  unnamed.nics = {fakes::SimNic("192.168.1.11", "Management", "0"),
                  fakes::SimNic("10.1.0.4", "Compute", "1")};
  auto vm = sim_.AddVm(service_, "storage", unnamed);
  OneGateClient other(fakes::SimConfig(sim_, vm), http_, m_.clock);
  onegate_ = &other;
  vars_ = {{"ETH0_IP", "192.168.1.11"}, {"ETH1_IP", "10.1.0.4"}, {"VMID", std::to_string(vm.id)}};
  auto r = Configure();
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(r.status.error().message, HasSubstr("set ONEAPP_COMPUTE_NETWORK"));
  EXPECT_TRUE(r.run->Changes().empty()) << r.run->plan.Render();
  onegate_ = client_.get();
}

TEST_F(StorageOneGateTest, OneGateDownAtRebootKeepsTheComputeNetwork) {
  AddPortal("10.1.0.5");
  MustConfigure();
  const std::string exports = m_.Read(nfs::kExportsFile);
  auto down = fakes::SimFault(sim::FaultKind::kStatus, 503, "down");
  down.path_prefix = "/";
  sim_.InjectFault(down);
  auto again = MustConfigure();
  EXPECT_EQ(m_.Read(nfs::kExportsFile), exports);
  EXPECT_THAT(again.run->Changes(), ElementsAre(std::string("write ") + nfs::kStateFile))
      << again.run->plan.Render();
}

// ---- the software cache (Squid for CernVM-FS) ----------------------------------------------

class SquidTest : public StorageTest {
 protected:
  void SetUp() override {
    StorageTest::SetUp();
    m_.Write(squid::kSquidConf, "# packaged squid.conf\nhttp_port 3128\n");
  }
  int Parses() const {
    int n = 0;
    for (const auto& a : m_.runner.Argvs()) {
      if (a.rfind("squid -k parse -f ", 0) == 0) ++n;
    }
    return n;
  }
  std::string WantsSquid() const {
    return "/etc/systemd/system/multi-user.target.wants/squid.service";
  }
};

TEST_F(SquidTest, RendersForTheComputeNetworkValidatedThenStarted) {
  std::string candidate;
  m_.runner.On({"squid", "-k", "parse", "-f"}, [&](const Command& c) {
    std::ifstream in(c.argv.back());
    candidate.assign(std::istreambuf_iterator<char>(in), {});
    EXPECT_FALSE(m_.Read(squid::kSquidConf).rfind(squid::kHeader, 0) == 0)
        << "squid.conf replaced before the check";
    return Exit(0);
  });
  MustConfigure();
  std::string conf = m_.Read(squid::kSquidConf);
  EXPECT_EQ(candidate, conf);
  EXPECT_EQ(Parses(), 1);
  EXPECT_EQ(conf.rfind(squid::kHeader, 0), 0u);
  EXPECT_THAT(conf, HasSubstr("\nhttp_port 3128\n"));
  EXPECT_THAT(conf, HasSubstr("\nacl localnet src 10.1.0.0/24\n"));
  EXPECT_THAT(conf, HasSubstr("\nhttp_access allow localnet\n"));
  EXPECT_THAT(conf, HasSubstr("\nhttp_access deny all\n"));
  EXPECT_THAT(conf, HasSubstr("\ncache_dir ufs /var/spool/squid 20000 16 256\n"));
  EXPECT_THAT(conf, HasSubstr("\nmaximum_object_size 1024 MB\n"));
  EXPECT_THAT(conf, HasSubstr("\ncache_mem 256 MB\n"));
  EXPECT_LT(conf.find("http_access allow localnet"), conf.find("http_access deny all"));
  EXPECT_EQ(m_.Read(squid::kSquidConfOriginal), "# packaged squid.conf\nhttp_port 3128\n");
  EXPECT_FALSE(m_.Exists(squid::kSquidConfCandidate));
  EXPECT_TRUE(m_.Exists(WantsSquid()));
  EXPECT_TRUE(Ran("systemctl --no-block start squid.service"));
  EXPECT_FALSE(Ran("systemctl --no-block restart squid.service"));
}

TEST_F(SquidTest, SecondRunChangesNothing) {
  MustConfigure();
  size_t commands = m_.runner.commands().size();
  auto second = MustConfigure();
  EXPECT_TRUE(second.run->Changes().empty()) << second.run->plan.Render();
  for (size_t i = commands; i < m_.runner.commands().size(); ++i) {
    std::string a = log::QuoteArgv(m_.runner.commands()[i].argv);  // reads only
    EXPECT_TRUE(a.rfind("systemctl is-active", 0) == 0 || a.rfind("stat -f", 0) == 0) << a;
  }
  EXPECT_THAT(second.run->plan.Render(), HasSubstr("/etc/squid/squid.conf [keep]"));
  EXPECT_EQ(Parses(), 1);
}

TEST_F(SquidTest, NetsOverrideRestartsOnlyWhenChanged) {
  MustConfigure();
  vars_["ONEAPP_SQUID_NETS"] = "10.1.0.0/24, 172.16.0.0/16";
  MustConfigure();
  EXPECT_THAT(m_.Read(squid::kSquidConf),
              HasSubstr("\nacl localnet src 10.1.0.0/24 172.16.0.0/16\n"));
  EXPECT_TRUE(Ran("systemctl --no-block restart squid.service"));
  // The packaged original was kept once, not overwritten by our own file.
  EXPECT_EQ(m_.Read(squid::kSquidConfOriginal), "# packaged squid.conf\nhttp_port 3128\n");
}

TEST_F(SquidTest, BadNetsNameVariableValueAndExpectation) {
  for (const char* bad : {"10.1.0.0", "10.1.0.0/33", "300.1.0.0/24", "fe80::/10", "any"}) {
    auto s = Settings::Resolve(StorageSettings(), {{"ONEAPP_SQUID_NETS", bad}});
    ASSERT_FALSE(s) << bad;
    EXPECT_THAT(s.error().message, HasSubstr("ONEAPP_SQUID_NETS")) << bad;
    EXPECT_THAT(s.error().message, HasSubstr(bad));
    EXPECT_THAT(s.error().message, HasSubstr("CIDR"));
  }
}

TEST_F(SquidTest, ParseFailureIsFatalAndKeepsTheOldFile) {
  m_.runner.On({"squid", "-k", "parse"},
               Exit(1, "", "2026/01/01| Processing: x\n2026/01/01| FATAL: Bungled x line 3\n"));
  auto r = Configure();
  ASSERT_FALSE(r.status);
  EXPECT_THAT(r.status.error().message, HasSubstr("squid -k parse rejected"));
  EXPECT_THAT(r.status.error().message, HasSubstr("FATAL: Bungled x line 3"));
  EXPECT_THAT(r.status.error().message, Not(HasSubstr("Processing")));
  EXPECT_EQ(m_.Read(squid::kSquidConf), "# packaged squid.conf\nhttp_port 3128\n");
  EXPECT_FALSE(m_.Exists(squid::kSquidConfCandidate));
  EXPECT_FALSE(m_.Exists(WantsSquid()));
  EXPECT_FALSE(Ran("systemctl --no-block start squid.service"));
}

TEST_F(SquidTest, SiteProxyMeansNoSquidAndDisablesOurs) {
  MustConfigure();
  ASSERT_TRUE(m_.Exists(WantsSquid()));
  vars_["ONEAPP_SOFTWARE_PROXY_ENABLED"] = "yes";
  vars_["ONEAPP_SOFTWARE_PROXY_URL"] = "http://squid.example.org:3128";
  auto r = MustConfigure();
  EXPECT_FALSE(m_.Exists(WantsSquid()));
  EXPECT_TRUE(Ran("systemctl disable --no-reload squid.service"));
  EXPECT_TRUE(Ran("systemctl --no-block stop squid.service"));
  EXPECT_EQ(Parses(), 1);
  EXPECT_THAT(r.run->plan.Render(), HasSubstr("http://squid.example.org:3128"));
  auto again = MustConfigure();
  EXPECT_TRUE(again.run->Changes().empty()) << again.run->plan.Render();
}

TEST_F(SquidTest, SiteProxyOnAFreshVmTouchesNoSquid) {
  vars_["ONEAPP_SOFTWARE_PROXY_ENABLED"] = "1";
  vars_["ONEAPP_SOFTWARE_PROXY_URL"] = "https://proxy.example.org/";
  MustConfigure();
  EXPECT_EQ(Parses(), 0);
  EXPECT_EQ(m_.Read(squid::kSquidConf), "# packaged squid.conf\nhttp_port 3128\n");
  EXPECT_FALSE(Ran("systemctl disable --no-reload squid.service"));
  EXPECT_FALSE(Ran("systemctl --no-block stop squid.service"));
}

TEST_F(SquidTest, UrlIgnoredWhenTheSwitchIsOff) {
  vars_["ONEAPP_SOFTWARE_PROXY_URL"] = "ftp://not used";
  MustConfigure();
  EXPECT_EQ(Parses(), 1);
}

TEST_F(SquidTest, UrlRequiredAndValidatedWhenTheSwitchIsOn) {
  vars_["ONEAPP_SOFTWARE_PROXY_ENABLED"] = "YES";
  auto r = Configure();
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(r.status.error().message, HasSubstr("ONEAPP_SOFTWARE_PROXY_URL is empty"));
  EXPECT_THAT(r.status.error().message, HasSubstr("ONEAPP_SOFTWARE_PROXY_ENABLED=YES"));
  EXPECT_FALSE(m_.Exists(nfs::kExportsFile)) << "nothing changes before the inputs are checked";
  for (const char* bad : {"ftp://x.org", "squid.example.org:3128", "http://a b", "http://",
                          "http://x.org:99999", "http://x.org/ path", "http://-x.org"}) {
    vars_["ONEAPP_SOFTWARE_PROXY_URL"] = bad;
    auto b = Configure();
    ASSERT_FALSE(b.status) << bad;
    EXPECT_THAT(b.status.error().message,
                HasSubstr(std::string("ONEAPP_SOFTWARE_PROXY_URL='") + bad + "'"));
    EXPECT_THAT(b.status.error().message, HasSubstr("expected an http(s) URL without whitespace"));
  }
  for (const char* good : {"http://10.0.0.1:3128", "HTTPS://proxy.example.org/cvmfs",
                           "http://[fd00::1]:3128", "http://squid"}) {
    auto s = Settings::Resolve(StorageSettings(), {{"ONEAPP_SOFTWARE_PROXY_ENABLED", "YES"},
                                                   {"ONEAPP_SOFTWARE_PROXY_URL", good}});
    ASSERT_TRUE(s);
    auto url = squid::SiteProxyUrl(*s);
    EXPECT_TRUE(url) << good << ": " << (url ? "" : url.error().message);
  }
}

TEST_F(SquidTest, PlanShowsTheSquidStepsAndChangesNothing) {
  auto r = MustConfigure(PlanMode::kDryRun);
  std::string plan = r.run->plan.Render();
  EXPECT_THAT(plan, HasSubstr("write /etc/squid/squid.conf (checked with squid -k parse first)"));
  EXPECT_THAT(plan, HasSubstr("localnet 10.1.0.0/24"));
  EXPECT_THAT(plan, HasSubstr("keep the packaged /etc/squid/squid.conf"));
  EXPECT_THAT(plan, HasSubstr("enable squid.service"));
  EXPECT_THAT(plan, HasSubstr("start squid.service (--no-block)"));
  EXPECT_EQ(Parses(), 0);
  EXPECT_EQ(m_.Read(squid::kSquidConf), "# packaged squid.conf\nhttp_port 3128\n");
  EXPECT_FALSE(m_.Exists(squid::kSquidConfOriginal));
}

// The cache on disk from the size of the file system that holds it: 40%, 256 to 20000 MB; the
// most when the size cannot be read (the role test above: the fake's stat prints nothing).
TEST(SquidCache, SizedFromTheFileSystem) {
  EXPECT_EQ(squid::CacheMbFor(8192), 3276);     // the image's 8 GiB root disk
  EXPECT_EQ(squid::CacheMbFor(40960), 16384);   // grown to 40 GiB
  EXPECT_EQ(squid::CacheMbFor(102400), 20000);  // a 100 GiB datablock
  EXPECT_EQ(squid::CacheMbFor(100), 256);       // never below 256 MB
  EXPECT_EQ(squid::CacheMbFor(std::nullopt), 20000);
}

TEST_F(SquidTest, TheCacheFitsTheRootDiskItIsOn) {
  m_.runner.On({"stat", "-f", "-c", "%S %b"}, [&](const Command& c) {
    EXPECT_EQ(c.argv.back(), m_.files->HostPath("/var/spool/squid"));
    return Exit(0, "4096 2097152\n");  // 8 GiB
  });
  MustConfigure();
  EXPECT_THAT(m_.Read(squid::kSquidConf),
              HasSubstr("\ncache_dir ufs /var/spool/squid 3276 16 256\n"));
  // The same size at the next configure: nothing rewritten, Squid not restarted.
  m_.runner.On({"systemctl", "--no-block", "restart"}, Exit(0));
  MustConfigure();
  EXPECT_FALSE(Ran("systemctl --no-block restart squid.service"));
}

TEST(SquidRender, OnlyTheListedServersOverHttpAndNeverThisVm) {
  squid::SquidConfig config;
  config.nets = {"10.1.0.0/24"};
  config.destinations = {".eessi.science", "cvmfs.example.org"};
  std::string conf = squid::RenderSquidConf(config);
  EXPECT_THAT(conf, HasSubstr("acl cvmfs_servers dstdomain -n .eessi.science cvmfs.example.org\n"));
  EXPECT_THAT(conf, HasSubstr("acl cvmfs_ports port 80 8000\n"));
  // Every deny comes before the allows.
  auto allow = conf.find("http_access allow localnet");
  for (const char* deny : {"http_access deny CONNECT", "http_access deny !cvmfs_ports",
                           "http_access deny to_localhost", "http_access deny link_local",
                           "http_access deny !cvmfs_servers"}) {
    auto at = conf.find(deny);
    ASSERT_NE(at, std::string::npos) << deny;
    EXPECT_LT(at, allow) << deny;
  }
}

TEST(SquidRender, DefaultsListed) {
  auto specs = StorageSettings();
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  EXPECT_THAT(names,
              ::testing::ElementsAre("ONEAPP_HOME_NFS_ENABLED", "ONEAPP_HOME_DISK_VOLATILE",
                                     "ONEAPP_COMPUTE_NETWORK", "ONEAPP_SOFTWARE_PROXY_ENABLED",
                                     "ONEAPP_SOFTWARE_PROXY_URL", "ONEAPP_SQUID_NETS",
                                     "ONEAPP_SQUID_DESTINATIONS"));
  auto s = Settings::Resolve(specs, {});
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->GetBool("ONEAPP_SOFTWARE_PROXY_ENABLED"));
  EXPECT_TRUE(s->GetList("ONEAPP_SQUID_NETS").empty());
}

}  // namespace
}  // namespace onehpc
