// The storage role's ood-home decisions on REAL loop devices with the real mkfs, libblkid and
// libmount, and the whole storage role run under a temporary --root (systemctl and exportfs
// answered by a fake; everything touching the disks is real). Every refused case checks that
// the device's bytes are unchanged. Root only (skips otherwise).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "common/log.h"
#include "roles/disk/home_disk.h"
#include "roles/nfs/exports.h"
#include "roles/os/block_devices.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"
#include "roles/os/systemd.h"
#include "roles/storage.h"
#include "tests/fakes/http.h"
#include "tests/fakes/process_runner.h"
#include "tests/integration/loop_devices.h"

namespace onehpc {
namespace {

using ::testing::HasSubstr;
using testing::HaveProgram;
using testing::kMiB;
using testing::LoopDevices;
using ::testing::Not;

/// FNV-1a over the whole device: "the image is unchanged".
std::uint64_t Checksum(const std::string& device) {
  int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::uint64_t h = 1469598103934665603ull;
  std::vector<char> buf(1 << 20);
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(buf[i]);
      h *= 1099511628211ull;
    }
  }
  ::close(fd);
  return h;
}

class StorageDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason = LoopDevices::SkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    loops_ = std::make_unique<LoopDevices>();
    auto probe = loops_->Attach(kMiB);
    if (!probe) GTEST_SKIP() << "loop devices unavailable: " << probe.error().message;
    root_ = loops_->dir() + "/root";
    std::filesystem::create_directories(root_ + "/etc/systemd/system");
    files_ = std::make_unique<Files>(root_);
    // Real tools for the disks; systemctl and exportfs answered here (no systemd, no nfsd).
    for (const char* tool : {"mkfs.ext4", "udevadm", "cp", "sync", "rm"}) {
      fake_.On({tool}, [this](const Command& c) {
        auto r = real_.Run(c);
        if (!r) return ProcessResult{127, 0, false, "", r.error().message};
        return *r;
      });
    }
    fake_.On({"systemctl", "is-active"}, [this](const Command& c) {
      return ProcessResult{active_.count(c.argv.back()) ? 0 : 3, 0, false, "", ""};
    });
    fake_.On({"systemctl", "--no-block", "start"}, [this](const Command& c) {
      active_.insert(c.argv.back());
      return ProcessResult{0, 0, false, "", ""};
    });
    fake_.On({"systemctl", "--no-block", "stop"}, [this](const Command& c) {
      active_.erase(c.argv.back());
      return ProcessResult{0, 0, false, "", ""};
    });
    fake_.On({"systemctl", "enable"}, [this](const Command& c) {
      const std::string& unit = c.argv.back();
      std::string target = unit.find(".timer") != std::string::npos   ? "timers.target"
                           : unit.find(".mount") != std::string::npos ? "local-fs.target"
                                                                      : "multi-user.target";
      std::string dir = root_ + "/etc/systemd/system/" + target + ".wants";
      std::filesystem::create_directories(dir);
      std::ofstream(dir + "/" + unit) << "enabled\n";
      return ProcessResult{0, 0, false, "", ""};
    });
    fake_.SetDefault(ProcessResult{0, 0, false, "", ""});
  }
  void TearDown() override {
    if (!root_.empty()) {
      for (const char* dir : {"/export/slurm", "/export/home"}) {
        while (::umount2((root_ + dir).c_str(), MNT_DETACH) == 0) {
        }
      }
    }
    for (const auto& m : extra_mounts_) ::umount2(m.c_str(), MNT_DETACH);
    loops_.reset();
  }

  std::string Disk(std::uint64_t size = 64 * kMiB) {
    auto device = loops_->Attach(size);
    EXPECT_TRUE(device) << device.error().message;
    if (device) disks_.push_back(*device);
    return device ? *device : "";
  }
  void Tool(std::vector<std::string> argv, std::string stdin_data = "") {
    auto r = loops_->Run(std::move(argv), std::move(stdin_data));
    ASSERT_TRUE(r) << r.error().message;
  }
  // Looks for the label only on this test's devices (other loop devices on the machine are
  // none of our business).
  disk::LabelFinder OurLabels() {
    return [this](const std::string& label) -> Result<std::optional<std::string>> {
      for (const auto& d : disks_) {
        auto p = devices_.Probe(d);
        if (p && !p->ambivalent && !p->fs_type.empty() && p->label == label) {
          return std::optional<std::string>(d);
        }
      }
      return std::optional<std::string>();
    };
  }
  Result<disk::HomeDiskDecision> Decide() {
    disk::HomeDiskInputs in;
    in.candidates = disks_;
    in.mount_point = root_ + "/export/home";
    in.facts = facts_;
    return disk::DecideHomeDisk(in, devices_, mounts_, OurLabels(), disk::OpenExclusive);
  }
  // The whole storage role, apply mode, under root_.
  Status RunRole() {
    StorageOptions o;
    o.exportfs_under_root = true;  // answered by the fake runner
    o.find_label = OurLabels();
    o.candidates = [this](RoleEnv&) -> Result<std::vector<std::string>> { return disks_; };
    if (facts_) {
      o.disk_facts = [this](RoleEnv&, std::string* note) {
        *note = "the test's disk list";
        return facts_;
      };
    }
    auto role = MakeStorageRole(o);
    LoadedContext context;
    // One NIC: the compute NIC without OneGate (several need a named NIC or
    // ONEAPP_COMPUTE_NETWORK, tests/unit/roles/storage_test.cc).
    context.vars = {{"ETH0_IP", "10.1.0.3"}, {"ETH0_MASK", "255.255.255.0"}};
    auto settings = Settings::Resolve(role->Settings(), context.vars);
    EXPECT_TRUE(settings);
    plan_ = std::make_unique<Plan>(PlanMode::kApply);
    SystemctlSystemd systemd(fake_);
    fakes::NoHttp http;
    SystemAdapters sys{fake_, *files_, systemd, devices_, mounts_, clock_, http};
    RoleEnv env = RoleEnv::From(context, *settings, nullptr, sys, *plan_);
    return role->Configure(env);
  }
  void ExpectRefused(const std::string& dev, const std::string& needle) {
    std::uint64_t before = Checksum(dev);
    auto d = Decide();
    ASSERT_FALSE(d) << "not refused: " << (d ? d->why : "");
    EXPECT_EQ(d.error().kind, ErrorKind::kUnsafe);
    EXPECT_THAT(d.error().message, HasSubstr(dev));
    EXPECT_THAT(d.error().message, HasSubstr(needle));
    // The whole role refuses too, and writes nothing to the disk.
    auto s = RunRole();
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().kind, ErrorKind::kUnsafe);
    EXPECT_THAT(s.error().message, HasSubstr(needle));
    EXPECT_EQ(Checksum(dev), before) << dev << " was modified";
    auto m = mounts_.FindBySource(dev);
    ASSERT_TRUE(m);
    for (const auto& e : *m) EXPECT_NE(e.target, root_ + "/export/home");
  }

  std::unique_ptr<LoopDevices> loops_;
  std::vector<std::string> disks_;
  std::vector<std::string> extra_mounts_;
  std::string root_;
  std::unique_ptr<Files> files_;
  BlkidBlockDevices devices_{true};
  LibmountMounts mounts_;
  RealProcessRunner real_;
  fakes::FakeProcessRunner fake_;
  RealClock clock_;
  std::set<std::string> active_;
  std::unique_ptr<Plan> plan_;
  std::optional<std::map<std::string, disk::DiskFacts>> facts_;
};

TEST_F(StorageDiskTest, BlankIsFormattedLabelledMountedAndConverges) {
  std::string dev = Disk();
  // A worker in the last good list of an earlier run (no OneGate here): the home export has a
  // client whose options the check below reads.
  nfs::ExportsConfig seen;
  seen.compute_net = "10.1.0.0/24";
  seen.clients = {nfs::ExportClient{20, "10.1.0.20"}};
  ASSERT_TRUE(files_->MakeDirs("/var/lib/one-hpc", 0755));
  ASSERT_TRUE(files_->WriteAtomic(nfs::kStateFile, nfs::StateJson(seen), 0644));
  ASSERT_TRUE(RunRole()) << plan_->Render();
  auto p = devices_.Probe(dev);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->fs_type, "ext4");
  EXPECT_EQ(p->label, "ood-home");
  auto m = mounts_.FindByTarget(root_ + "/export/home");
  ASSERT_TRUE(m && m->has_value());
  EXPECT_EQ((*m)->fs_type, "ext4");
  // The kernel's own view of the mount: nothing planted in the homes runs here.
  for (const char* flag : {"nosuid", "nodev", "noexec"}) {
    EXPECT_THAT("," + (*m)->options + ",", HasSubstr(std::string(",") + flag + ",")) << flag;
  }
  std::string unit = *files_->Read("/etc/systemd/system/export-home.mount");
  EXPECT_THAT(unit, HasSubstr("What=/dev/disk/by-uuid/" + p->uuid));
  EXPECT_THAT(unit, HasSubstr("Options=defaults,noatime,nosuid,nodev,noexec\n"));
  EXPECT_THAT(*files_->Read(nfs::kExportsFile),
              HasSubstr("/export/home 10.1.0.20(rw,sync,no_subtree_check,root_squash,fsid=1,"
                        "mountpoint)"));
  // The format marker outlives the real mkfs (it lies past the filesystem's end), and the
  // record on the root disk is gone.
  auto tail = devices_.ReadTail(dev, disk::kMkfsMarkerBytes);
  ASSERT_TRUE(tail) << tail.error().message;
  EXPECT_EQ(tail->rfind("one-hpc: mkfs of the ood-home disk begun by this VM", 0), 0u);
  EXPECT_FALSE(files_->Exists("/var/lib/one-hpc/home-mkfs.json"));
  // A home lands on the disk.
  std::ofstream(root_ + "/export/home/alice.txt") << "alice's data\n";

  // Second run: nothing changes, no mkfs.
  auto plan_before = fake_.commands().size();
  ASSERT_TRUE(RunRole()) << plan_->Render();
  for (const auto& a : plan_->actions()) {
    EXPECT_EQ(a.outcome, PlannedAction::Outcome::kKept) << a.what;
  }
  for (size_t i = plan_before; i < fake_.commands().size(); ++i) {
    EXPECT_NE(fake_.commands()[i].argv[0], "mkfs.ext4");
  }

  // Power loss after mkfs, before the mount was persisted: unmount, drop the unit, rerun.
  ASSERT_EQ(::umount2((root_ + "/export/home").c_str(), 0), 0);
  ASSERT_TRUE(files_->Remove("/etc/systemd/system/export-home.mount"));
  ASSERT_TRUE(RunRole()) << plan_->Render();
  auto again = devices_.Probe(dev);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->uuid, p->uuid);  // not formatted twice
  std::ifstream in(root_ + "/export/home/alice.txt");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "alice's data");
}

// The lab scenario on the host: a storage VM formats its disk and users write homes; the
// service is deleted (VM gone: unmounted, its root disk discarded) and instantiated again with
// the same persistent disk (a fresh --root); every home and file is there, nothing formatted.
TEST_F(StorageDiskTest, RecreatedVmWithTheSameDiskFindsEveryHome) {
  std::string dev = Disk();
  ASSERT_TRUE(RunRole()) << plan_->Render();
  std::string uuid = devices_.Probe(dev)->uuid;
  for (const char* user : {"alice", "bob"}) {
    std::filesystem::create_directories(root_ + "/export/home/" + user + "/project");
    std::ofstream(root_ + "/export/home/" + user + "/project/data.txt") << user << "'s results\n";
  }
  ASSERT_EQ(::umount2((root_ + "/export/slurm").c_str(), 0), 0);
  ASSERT_EQ(::umount2((root_ + "/export/home").c_str(), 0), 0);
  // The new VM: a new root disk.
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
  std::filesystem::create_directories(root_ + "/etc/systemd/system");
  active_.clear();
  size_t first_run = fake_.commands().size();
  ASSERT_TRUE(RunRole()) << plan_->Render();
  EXPECT_EQ(devices_.Probe(dev)->uuid, uuid);
  for (size_t i = first_run; i < fake_.commands().size(); ++i) {
    EXPECT_NE(fake_.commands()[i].argv[0], "mkfs.ext4") << "formatted again";
  }
  EXPECT_TRUE(files_->Exists("/etc/systemd/system/export-home.mount"));
  for (const char* user : {"alice", "bob"}) {
    std::ifstream in(root_ + "/export/home/" + user + "/project/data.txt");
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, std::string(user) + "'s results");
  }
}

// The Slurm state: a storage VM of the previous version kept the portal's state in
// /export/slurm on its root disk. The first configure copies it onto the ood-home disk (real
// cp -a: owners, modes and times kept), bind-mounts it back on /export/slurm, and persists
// that as units; the next run changes nothing; a VM replaced with the same disk (a new root
// disk, whose /export/slurm is empty) serves the same state.
TEST_F(StorageDiskTest, TheSlurmStateMovesOntoTheDiskOnceAndAReplacedVmFindsIt) {
  namespace fs = std::filesystem;
  std::string dev = Disk();
  const std::string old_state = root_ + "/export/slurm";
  fs::create_directories(old_state + "/state");
  fs::create_directories(old_state + "/accounting");
  std::ofstream(old_state + "/munge.key") << "the cluster's key";
  std::ofstream(old_state + "/state/job_state") << "the queue";
  std::ofstream(old_state + "/accounting/dump-1.sql.gz") << "a dump";
  ASSERT_EQ(::chmod((old_state + "/munge.key").c_str(), 0400), 0);
  ASSERT_EQ(::chown((old_state + "/state").c_str(), 64030, 64030), 0);
  ASSERT_EQ(::chmod((old_state + "/state").c_str(), 0700), 0);
  active_.insert("nfs-server.service");
  ASSERT_TRUE(RunRole()) << plan_->Render();

  // /export/slurm is the bind mount of the disk's directory (the kernel says so).
  auto at = mounts_.FindByTarget(old_state);
  ASSERT_TRUE(at && at->has_value());
  EXPECT_EQ((*at)->source, dev);
  EXPECT_EQ((*at)->root, "/.one-hpc-state/slurm");
  const std::string on_disk = root_ + "/export/home/.one-hpc-state";
  struct stat st {};
  ASSERT_EQ(::stat(on_disk.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, 0u);
  ASSERT_EQ(::stat((on_disk + "/slurm/munge.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  ASSERT_EQ(::stat((on_disk + "/slurm/state").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 64030u);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  std::string queue;
  std::getline(std::ifstream(old_state + "/state/job_state"), queue);
  EXPECT_EQ(queue, "the queue");  // read through the bind mount
  EXPECT_FALSE(fs::exists(on_disk + "/slurm.migrating"));
  EXPECT_THAT(*files_->Read("/etc/systemd/system/export-slurm.mount"),
              HasSubstr("What=/export/home/.one-hpc-state/slurm\n"));
  EXPECT_THAT(*files_->Read(nfs::kExportsFile), Not(HasSubstr("/export/slurm ")));  // no portal
  EXPECT_TRUE(active_.count("nfs-server.service"));  // stopped for the copy, started again

  // A write through the export lands on the disk; the next run changes nothing.
  std::ofstream(old_state + "/state/job_state") << "the queue, later";
  size_t before = fake_.commands().size();
  ASSERT_TRUE(RunRole()) << plan_->Render();
  for (const auto& a : plan_->actions()) {
    EXPECT_EQ(a.outcome, PlannedAction::Outcome::kKept) << a.what;
  }
  for (size_t i = before; i < fake_.commands().size(); ++i) {
    EXPECT_NE(fake_.commands()[i].argv[0], "cp") << "copied twice";
  }

  // The storage VM is replaced: its root disk is gone, the datablock comes back.
  ASSERT_EQ(::umount2(old_state.c_str(), 0), 0);
  ASSERT_EQ(::umount2((root_ + "/export/home").c_str(), 0), 0);
  std::error_code ec;
  fs::remove_all(root_, ec);
  ASSERT_FALSE(ec) << ec.message();
  fs::create_directories(root_ + "/etc/systemd/system");
  active_.clear();
  before = fake_.commands().size();
  ASSERT_TRUE(RunRole()) << plan_->Render();
  for (size_t i = before; i < fake_.commands().size(); ++i) {
    EXPECT_NE(fake_.commands()[i].argv[0], "cp");
  }
  std::getline(std::ifstream(old_state + "/state/job_state"), queue);
  EXPECT_EQ(queue, "the queue, later");
  std::string key;
  std::getline(std::ifstream(old_state + "/munge.key"), key);
  EXPECT_EQ(key, "the cluster's key");
}

TEST_F(StorageDiskTest, LabelledDiskIsMountedAsIsWithItsFiles) {
  std::string dev = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "ood-home", dev});
  // Put a home on it through a temporary mount.
  std::string tmp = loops_->dir() + "/prep";
  std::filesystem::create_directories(tmp);
  ASSERT_TRUE(mounts_.Mount({dev, tmp, "ext4", ""}));
  std::filesystem::create_directories(tmp + "/bob");
  std::ofstream(tmp + "/bob/notes.txt") << "keep me\n";
  ASSERT_EQ(::umount2(tmp.c_str(), 0), 0);
  std::string uuid = devices_.Probe(dev)->uuid;

  auto d = Decide();
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->source, disk::HomeSource::kReuseLabelled);
  ASSERT_TRUE(RunRole()) << plan_->Render();
  for (const auto& c : fake_.commands()) EXPECT_NE(c.argv[0], "mkfs.ext4");
  EXPECT_EQ(devices_.Probe(dev)->uuid, uuid);
  std::ifstream in(root_ + "/export/home/bob/notes.txt");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "keep me");
}

// The label alone does not make a home disk: a swap area labelled ood-home (owners and modes
// mean nothing there) is refused, untouched and not mounted.
TEST_F(StorageDiskTest, ASwapAreaLabelledOodHomeIsRefused) {
  std::string dev = Disk();
  Tool({"mkswap", "-L", "ood-home", dev});
  ExpectRefused(dev, "holds a swap filesystem labelled 'ood-home'");
}

TEST_F(StorageDiskTest, Ext4WithAnotherLabelRefused) {
  std::string dev = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "scratch", dev});
  ExpectRefused(dev, "ext4");
}

TEST_F(StorageDiskTest, XfsRefused) {
  if (!HaveProgram("mkfs.xfs")) GTEST_SKIP() << "mkfs.xfs missing (Debian package xfsprogs)";
  std::string dev = Disk(320 * kMiB);
  Tool({"mkfs.xfs", "-q", "-f", "-L", "data", dev});
  ExpectRefused(dev, "xfs");
}

TEST_F(StorageDiskTest, VfatRefused) {
  if (!HaveProgram("mkfs.vfat")) GTEST_SKIP() << "mkfs.vfat missing (Debian package dosfstools)";
  std::string dev = Disk();
  Tool({"mkfs.vfat", "-n", "DATA", dev});
  ExpectRefused(dev, "vfat");
}

TEST_F(StorageDiskTest, SwapRefused) {
  std::string dev = Disk();
  Tool({"mkswap", "-f", "-L", "swap1", dev});
  ExpectRefused(dev, "swap");
}

TEST_F(StorageDiskTest, LuksRefused) {
  if (!HaveProgram("cryptsetup"))
    GTEST_SKIP() << "cryptsetup missing (Debian package cryptsetup-bin)";
  std::string dev = Disk();
  Tool({"cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
        "--pbkdf-force-iterations", "1000", "--key-file", "-", dev},
       "not-a-real-secret");
  ExpectRefused(dev, "crypto_LUKS");
}

TEST_F(StorageDiskTest, LvmPhysicalVolumeRefused) {
  if (!HaveProgram("pvcreate")) GTEST_SKIP() << "pvcreate missing (Debian package lvm2)";
  std::string dev = Disk();
  auto r = loops_->Run({"pvcreate", "-ff", "-y", "--devices", dev, "--config",
                        "activation { udev_sync = 0 udev_rules = 0 }", dev});
  if (!r) GTEST_SKIP() << "pvcreate cannot run here: " << r.error().message;
  ExpectRefused(dev, "LVM2_member");
}

TEST_F(StorageDiskTest, MbrTableRefused) {
  if (!HaveProgram("sfdisk")) GTEST_SKIP() << "sfdisk missing (Debian package fdisk)";
  std::string dev = Disk();
  Tool({"sfdisk", "--no-reread", "--no-tell-kernel", dev}, "label: dos\n,16M,L\n");
  ExpectRefused(dev, "dos partition table");
}

TEST_F(StorageDiskTest, GptTableRefused) {
  if (!HaveProgram("sfdisk")) GTEST_SKIP() << "sfdisk missing (Debian package fdisk)";
  std::string dev = Disk();
  Tool({"sfdisk", "--no-reread", "--no-tell-kernel", dev}, "label: gpt\n,16M,L\n");
  ExpectRefused(dev, "gpt");
}

TEST_F(StorageDiskTest, GptBackupHeaderOnlyRefused) {
  if (!HaveProgram("sfdisk")) GTEST_SKIP() << "sfdisk missing (Debian package fdisk)";
  std::string dev = Disk();
  Tool({"sfdisk", "--no-reread", "--no-tell-kernel", dev}, "label: gpt\n,16M,L\n");
  ASSERT_TRUE(loops_->WriteAt(dev, 0, std::string(kMiB, '\0')));
  // Found at the end of the disk (libblkid's forced GPT probe, or our own backup-header read).
  ExpectRefused(dev, "gpt");
}

TEST_F(StorageDiskTest, RandomBytesRefused) {
  std::string dev = Disk();
  std::mt19937 rng(4242);
  std::string noise(4096, '\0');
  for (auto& c : noise) c = static_cast<char>(rng());
  ASSERT_TRUE(loops_->WriteAt(dev, 0, noise));
  ExpectRefused(dev, "");
}

TEST_F(StorageDiskTest, DiskMountedElsewhereRefused) {
  std::string dev = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "busy", dev});
  std::string elsewhere = loops_->dir() + "/elsewhere";
  std::filesystem::create_directories(elsewhere);
  ASSERT_TRUE(mounts_.Mount({dev, elsewhere, "ext4", "ro"}));
  extra_mounts_.push_back(elsewhere);
  ExpectRefused(dev, "mounted on " + elsewhere);
}

TEST_F(StorageDiskTest, LabelledDiskMountedElsewhereRefused) {
  std::string dev = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "ood-home", dev});
  std::string elsewhere = loops_->dir() + "/elsewhere";
  std::filesystem::create_directories(elsewhere);
  ASSERT_TRUE(mounts_.Mount({dev, elsewhere, "ext4", "ro"}));
  extra_mounts_.push_back(elsewhere);
  auto d = Decide();
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(d.error().message, HasSubstr("already mounted on " + elsewhere));
}

// Without OpenNebula's disk list (this test has no OneGate), two blank disks are refused, both
// unchanged: the first by name may be a volatile scratch disk (review M1).
TEST_F(StorageDiskTest, TwoBlankDisksWithoutOpenNebulasListAreRefusedBothUntouched) {
  std::string a = Disk();
  std::string b = Disk();
  std::uint64_t sum_a = Checksum(a);
  std::uint64_t sum_b = Checksum(b);
  auto s = RunRole();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(s.error().message, HasSubstr("2 blank disks"));
  EXPECT_THAT(s.error().message, HasSubstr("refusing to guess"));
  EXPECT_TRUE(devices_.Probe(a)->blank());
  EXPECT_EQ(Checksum(a), sum_a);
  EXPECT_EQ(Checksum(b), sum_b);
}

TEST_F(StorageDiskTest, DataDiskNextToBlankOneRefusedBothUntouched) {
  std::string a = Disk();
  std::string b = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "other", b});
  std::uint64_t sum_a = Checksum(a);
  std::uint64_t sum_b = Checksum(b);
  auto s = RunRole();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kUnsafe);
  EXPECT_EQ(Checksum(a), sum_a);
  EXPECT_EQ(Checksum(b), sum_b);
}

// A storage VM started without its datablock keeps homes in /export/home on the root disk; a
// disk attached later (blank or already ood-home) would hide them under its mount. Refused,
// with the disk untouched, until the directory is empty; then the disk is used.
TEST_F(StorageDiskTest, LateDiskOverRootDiskHomesIsRefusedUntilTheyAreMoved) {
  ASSERT_TRUE(RunRole()) << plan_->Render();  // no disk: homes on the root disk
  std::filesystem::create_directories(root_ + "/export/home/alice");
  std::ofstream(root_ + "/export/home/alice/thesis.tex") << "alice's thesis\n";
  std::string dev = Disk();
  std::uint64_t blank = Checksum(dev);
  auto s = RunRole();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(s.error().message,
              HasSubstr("/export/home on the root disk holds 1 entries (alice)"));
  EXPECT_THAT(s.error().message, HasSubstr("formatting and mounting " + dev));
  EXPECT_EQ(Checksum(dev), blank) << dev << " was modified";
  auto m = mounts_.FindByTarget(root_ + "/export/home");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->has_value());
  EXPECT_TRUE(std::filesystem::exists(root_ + "/export/home/alice/thesis.tex"));

  // An ood-home disk prepared elsewhere is refused the same way.
  Tool({"mkfs.ext4", "-q", "-F", "-L", "ood-home", dev});
  std::uint64_t labelled = Checksum(dev);
  auto again = RunRole();
  ASSERT_FALSE(again);
  EXPECT_THAT(again.error().message, HasSubstr("mounting " + dev + " over them"));
  EXPECT_EQ(Checksum(dev), labelled);

  // The operator moves the homes away: the disk is mounted, alice's file is not deleted.
  std::filesystem::rename(root_ + "/export/home/alice", loops_->dir() + "/alice-moved");
  ASSERT_TRUE(RunRole()) << plan_->Render();
  auto mounted = mounts_.FindByTarget(root_ + "/export/home");
  ASSERT_TRUE(mounted && mounted->has_value());
  EXPECT_TRUE(std::filesystem::exists(loops_->dir() + "/alice-moved/thesis.tex"));
}

// This VM's homes were on one ood-home filesystem; another one (another service's disk, another
// copy) is attached instead: refused, naming both UUIDs, the disk and the unit untouched.
TEST_F(StorageDiskTest, ForeignOodHomeIsRefusedNamingBothUuids) {
  std::string ours = Disk();
  ASSERT_TRUE(RunRole()) << plan_->Render();
  std::string our_uuid = devices_.Probe(ours)->uuid;
  std::string unit = *files_->Read("/etc/systemd/system/export-home.mount");
  ASSERT_EQ(::umount2((root_ + "/export/home").c_str(), 0), 0);
  disks_.clear();  // our disk detached
  std::string other = Disk();
  Tool({"mkfs.ext4", "-q", "-F", "-L", "ood-home", other});
  std::string other_uuid = devices_.Probe(other)->uuid;
  ASSERT_NE(other_uuid, our_uuid);
  std::uint64_t before = Checksum(other);
  auto s = RunRole();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(s.error().message, HasSubstr("has UUID " + other_uuid));
  EXPECT_THAT(s.error().message, HasSubstr("were on UUID " + our_uuid));
  EXPECT_EQ(Checksum(other), before);
  EXPECT_EQ(*files_->Read("/etc/systemd/system/export-home.mount"), unit);
  auto m = mounts_.FindByTarget(root_ + "/export/home");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->has_value());

  // Our disk back: mounted again as it is.
  disks_ = {ours};
  ASSERT_TRUE(RunRole()) << plan_->Render();
  EXPECT_EQ(devices_.Probe(ours)->uuid, our_uuid);
}

// OpenNebula says the first blank disk by name is volatile (deleted with the VM) and the
// second is the persistent datablock: the second is formatted, the first's bytes unchanged;
// with only the volatile one the role refuses and writes nothing.
TEST_F(StorageDiskTest, OpenNebulasDiskListKeepsTheHomesOffAVolatileDisk) {
  std::string scratch = Disk();
  std::string datablock = Disk();
  ASSERT_LT(scratch, datablock);
  std::uint64_t scratch_sum = Checksum(scratch);
  facts_ = std::map<std::string, disk::DiskFacts>{
      {scratch, disk::DiskFacts{"vdb", "", false, "fs"}},
      {datablock, disk::DiskFacts{"vdc", "ood-home", true, "FILE"}}};
  ASSERT_TRUE(RunRole()) << plan_->Render();
  EXPECT_EQ(devices_.Probe(datablock)->label, "ood-home");
  EXPECT_EQ(Checksum(scratch), scratch_sum);
}

TEST_F(StorageDiskTest, OnlyAVolatileDiskIsRefusedUntouched) {
  std::string scratch = Disk();
  facts_ =
      std::map<std::string, disk::DiskFacts>{{scratch, disk::DiskFacts{"vdb", "", false, "fs"}}};
  ExpectRefused(scratch, "no blank disk is a persistent datablock");
}

// The real thing: a format killed half-way. The first configure's mkfs is made to fail after
// the record and the marker are written (a power loss during mkfs), the head of the disk then
// holds a partial filesystem (what a killed mkfs leaves: random bytes here); the next
// configure recognises its own marker at the disk's end and finishes the format. Another
// disk in the same state, without the marker, is refused and unchanged.
TEST_F(StorageDiskTest, AnInterruptedFormatIsFinishedOnlyOnTheDiskThisVmBegan) {
  std::string dev = Disk();
  fake_.On({"mkfs.ext4"}, [](const Command&) { return ProcessResult{1, 0, false, "", "killed"}; });
  ASSERT_FALSE(RunRole());
  ASSERT_TRUE(files_->Exists("/var/lib/one-hpc/home-mkfs.json"));
  std::string head(1 << 20, '\0');
  std::mt19937 rng(42);
  for (auto& c : head) c = static_cast<char>(rng());
  {
    int fd = ::open(dev.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
    ::fsync(fd);
    ::close(fd);
  }
  ASSERT_FALSE(devices_.Probe(dev)->blank());

  // A second disk, half-written the same way but never begun by this VM.
  std::string other = Disk();
  {
    int fd = ::open(other.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
    ::fsync(fd);
    ::close(fd);
  }
  std::uint64_t other_sum = Checksum(other);
  fake_.On({"mkfs.ext4"}, [this](const Command& c) {
    auto r = real_.Run(c);
    if (!r) return ProcessResult{127, 0, false, "", r.error().message};
    return *r;
  });
  disks_ = {dev};
  ASSERT_TRUE(RunRole()) << plan_->Render();
  EXPECT_EQ(devices_.Probe(dev)->label, "ood-home");
  EXPECT_FALSE(files_->Exists("/var/lib/one-hpc/home-mkfs.json"));
  auto m = mounts_.FindByTarget(root_ + "/export/home");
  ASSERT_TRUE(m && m->has_value());
  ASSERT_EQ(::umount2((root_ + "/export/home").c_str(), 0), 0);

  // The other disk: this VM's record now names nothing of it.
  disks_ = {other};
  ASSERT_TRUE(files_->Remove("/etc/systemd/system/export-home.mount"));
  auto s = RunRole();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kUnsafe);
  EXPECT_EQ(Checksum(other), other_sum);
}

}  // namespace
}  // namespace onehpc
