// `one-hpc home-create` against hostile homes, as root on a temporary tree: symlinks to an
// "/etc", homes owned by others, skel entries swapped for symlinks, links planted in a
// half-made home, and a thread racing the creation. Nothing outside the user's home may be
// written, chowned or chmodded. Skipped without root (chown needs it).
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "roles/host/container.h"
#include "roles/ood/home.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"
#include "tests/integration/helpers.h"

namespace onehpc::ood {
namespace {

using testing::ReadAll;
namespace fs = std::filesystem;

constexpr uid_t kUid = 54321;
constexpr gid_t kGid = 54322;
constexpr uid_t kOtherUid = 54400;

void WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream(path, std::ios::binary) << content;
  ::chmod(path.c_str(), mode);
}

// Everything about a tree that an attack could change: type, mode, owner, size, content or
// link target of every entry (lstat, never following).
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  std::function<void(const std::string&, const std::string&)> walk = [&](const std::string& dir,
                                                                         const std::string& rel) {
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0) return;
    std::ostringstream line;
    line << std::oct << st.st_mode << std::dec << " " << st.st_uid << ":" << st.st_gid << " "
         << st.st_size << " " << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec;
    if (S_ISREG(st.st_mode)) line << " " << std::hash<std::string>()(ReadAll(dir));
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(dir.c_str(), target, sizeof target);
      line << " -> " << std::string(target, n > 0 ? n : 0);
    }
    out[rel.empty() ? "." : rel] = line.str();
    if (!S_ISDIR(st.st_mode)) return;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    std::vector<std::string> names;
    while (auto* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    for (const auto& n : names) walk(dir + "/" + n, rel.empty() ? n : rel + "/" + n);
  };
  walk(root, "");
  return out;
}

class HomeCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown to another uid)";
    char tmpl[] = "/tmp/one-hpc-home-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ::chmod(root_.c_str(), 0755);
    base_ = root_ + "/home";
    skel_ = root_ + "/skel";
    etc_ = root_ + "/etc";  // stands for /etc: must never change
    fs::create_directories(base_);
    fs::create_directories(skel_ + "/.config/app");
    fs::create_directories(etc_ + "/sub");
    ::chmod(base_.c_str(), 0755);
    ::chmod(skel_.c_str(), 0755);
    WriteFile(skel_ + "/.bashrc", "# bashrc\n");
    WriteFile(skel_ + "/.profile", "# profile\n", 0600);
    WriteFile(skel_ + "/.config/app/settings", "x=1\n", 04755);  // setuid bit must go
    WriteFile(etc_ + "/shadow", "root:*:1:0:99999:7:::\n", 0640);
    WriteFile(etc_ + "/passwd", "root:x:0:0:root:/root:/bin/bash\n");
    WriteFile(etc_ + "/sub/file", "deep\n", 0600);
    ::symlink((etc_ + "/shadow").c_str(), (skel_ + "/.evil-link").c_str());
    ::mkfifo((skel_ + "/.fifo").c_str(), 0644);
    etc_before_ = Snapshot(etc_);
    skel_before_ = Snapshot(skel_);
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }
  HomeRequest Request(const std::string& user = "alice") const {
    HomeRequest r;
    r.user = user;
    r.uid = kUid;
    r.gid = kGid;
    r.home = base_ + "/" + user;
    r.home_base = base_;
    r.skel = skel_;
    return r;
  }
  void ExpectOutsideUntouched() {
    EXPECT_EQ(Snapshot(etc_), etc_before_);
    EXPECT_EQ(Snapshot(skel_), skel_before_);
  }
  // No entry of base other than the user's home (and nothing left over).
  std::vector<std::string> BaseEntries() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(base_)) names.push_back(e.path().filename());
    return names;
  }

  std::string root_, base_, skel_, etc_;
  std::map<std::string, std::string> etc_before_, skel_before_;
};

TEST_F(HomeCreateTest, CreatesTheHomeFromSkelOwnedByTheUser) {
  auto outcome = CreateHome(Request());
  ASSERT_TRUE(outcome) << outcome.error().message;
  EXPECT_EQ(*outcome, HomeOutcome::kCreated);
  struct stat st;
  ASSERT_EQ(::lstat((base_ + "/alice").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, kUid);
  EXPECT_EQ(st.st_gid, kGid);
  EXPECT_EQ(ReadAll(base_ + "/alice/.bashrc"), "# bashrc\n");
  ASSERT_EQ(::lstat((base_ + "/alice/.profile").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, kUid);
  ASSERT_EQ(::lstat((base_ + "/alice/.config/app/settings").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // no setuid
  EXPECT_EQ(st.st_uid, kUid);
  ASSERT_EQ(::lstat((base_ + "/alice/.config").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUid);
  // The symlink and the FIFO of skel are not copied.
  EXPECT_NE(::lstat((base_ + "/alice/.evil-link").c_str(), &st), 0);
  EXPECT_NE(::lstat((base_ + "/alice/.fifo").c_str(), &st), 0);
  EXPECT_THAT(BaseEntries(), ::testing::ElementsAre("alice"));
  ExpectOutsideUntouched();
}

TEST_F(HomeCreateTest, AnExistingHomeIsLeftExactlyAsItIs) {
  ASSERT_TRUE(CreateHome(Request()));
  WriteFile(base_ + "/alice/notes", "mine\n", 0644);
  ::chown((base_ + "/alice/notes").c_str(), kUid, kGid);
  ::chmod((base_ + "/alice").c_str(), 0750);
  ::unlink((base_ + "/alice/.bashrc").c_str());
  auto before = Snapshot(base_);
  auto outcome = CreateHome(Request());
  ASSERT_TRUE(outcome) << outcome.error().message;
  EXPECT_EQ(*outcome, HomeOutcome::kExisted);
  EXPECT_EQ(Snapshot(base_), before);
}

TEST_F(HomeCreateTest, AHomeThatIsASymlinkToEtcIsRefused) {
  ASSERT_EQ(::symlink(etc_.c_str(), (base_ + "/alice").c_str()), 0);
  auto outcome = CreateHome(Request());
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(outcome.error().message, ::testing::HasSubstr("symbolic link"));
  ExpectOutsideUntouched();
}

TEST_F(HomeCreateTest, AHomeOwnedBySomeoneElseIsRefusedAndUnchanged) {
  fs::create_directories(base_ + "/alice");
  ::chown((base_ + "/alice").c_str(), kOtherUid, kOtherUid);
  ::chmod((base_ + "/alice").c_str(), 0755);
  WriteFile(base_ + "/alice/planted", "x");
  ::chown((base_ + "/alice/planted").c_str(), kOtherUid, kOtherUid);
  auto before = Snapshot(base_);
  auto outcome = CreateHome(Request());
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(outcome.error().message, ::testing::HasSubstr("belongs to uid 54400"));
  EXPECT_EQ(Snapshot(base_), before);
  // Owned by root (e.g. made by a careless admin) is refused too.
  ::chown((base_ + "/alice").c_str(), 0, 0);
  EXPECT_FALSE(CreateHome(Request()));
}

TEST_F(HomeCreateTest, AFileOrFifoAtTheHomeIsRefused) {
  WriteFile(base_ + "/alice", "not a dir");
  auto outcome = CreateHome(Request());
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().kind, ErrorKind::kUnsafe);
  ::unlink((base_ + "/alice").c_str());
  ::mkfifo((base_ + "/alice").c_str(), 0666);
  outcome = CreateHome(Request());  // must not block on the FIFO
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().kind, ErrorKind::kUnsafe);
}

// A home left half-made (or filled by the user) with links to /etc: existing, the user's,
// so nothing is done — no link is followed, nothing is chowned.
TEST_F(HomeCreateTest, LinksPlantedInAHalfMadeHomeAreNeverFollowed) {
  fs::create_directories(base_ + "/alice");
  ::chown((base_ + "/alice").c_str(), kUid, kGid);
  ::chmod((base_ + "/alice").c_str(), 0700);
  ::symlink((etc_ + "/shadow").c_str(), (base_ + "/alice/.bashrc").c_str());
  ::symlink(etc_.c_str(), (base_ + "/alice/.config").c_str());
  ::lchown((base_ + "/alice/.bashrc").c_str(), kUid, kGid);
  auto before = Snapshot(base_);
  auto outcome = CreateHome(Request());
  ASSERT_TRUE(outcome) << outcome.error().message;
  EXPECT_EQ(*outcome, HomeOutcome::kExisted);
  EXPECT_EQ(Snapshot(base_), before);
  ExpectOutsideUntouched();
}

TEST_F(HomeCreateTest, ASkelEntrySwappedForASymlinkIsSkipped) {
  ::unlink((skel_ + "/.bashrc").c_str());
  ::symlink((etc_ + "/shadow").c_str(), (skel_ + "/.bashrc").c_str());
  ::unlink((skel_ + "/.config/app/settings").c_str());
  ::symlink(etc_.c_str(), (skel_ + "/.config/app/settings").c_str());
  ::rename((skel_ + "/.config").c_str(), (root_ + "/real-config").c_str());
  ::symlink(etc_.c_str(), (skel_ + "/.config").c_str());
  skel_before_ = Snapshot(skel_);
  auto outcome = CreateHome(Request());
  ASSERT_TRUE(outcome) << outcome.error().message;
  struct stat st;
  EXPECT_NE(::lstat((base_ + "/alice/.bashrc").c_str(), &st), 0);
  EXPECT_NE(::lstat((base_ + "/alice/.config").c_str(), &st), 0);
  EXPECT_EQ(ReadAll(base_ + "/alice/.profile"), "# profile\n");
  ExpectOutsideUntouched();
}

TEST_F(HomeCreateTest, UnsafeBaseDirectoriesAreRefused) {
  // Base writable by others: someone could swap the home between our checks.
  ::chmod(base_.c_str(), 0777);
  auto outcome = CreateHome(Request());
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().kind, ErrorKind::kUnsafe);
  ::chmod(base_.c_str(), 0755);
  ::chown(base_.c_str(), kOtherUid, 0);
  EXPECT_FALSE(CreateHome(Request()));
  ::chown(base_.c_str(), 0, 0);
  // Base reached through a symlink.
  ::symlink(base_.c_str(), (root_ + "/home-link").c_str());
  HomeRequest r = Request();
  r.home_base = root_ + "/home-link";
  r.home = r.home_base + "/alice";
  outcome = CreateHome(r);
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().kind, ErrorKind::kUnsafe);
  // A skeleton writable by others.
  ::chmod(skel_.c_str(), 0777);
  outcome = CreateHome(Request());
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().kind, ErrorKind::kUnsafe);
  EXPECT_TRUE(BaseEntries().empty());
}

TEST_F(HomeCreateTest, BadRequestsAreRefusedBeforeTouchingAnything) {
  HomeRequest r = Request();
  r.uid = 999;
  EXPECT_EQ(CreateHome(r).error().kind, ErrorKind::kInvalidInput);
  r = Request();
  r.uid = 65534;
  EXPECT_EQ(CreateHome(r).error().kind, ErrorKind::kInvalidInput);
  r = Request();
  r.gid = 0;
  EXPECT_EQ(CreateHome(r).error().kind, ErrorKind::kInvalidInput);
  r = Request();
  r.home = etc_;  // the directory says the home is elsewhere
  EXPECT_EQ(CreateHome(r).error().kind, ErrorKind::kInvalidInput);
  for (const char* name : {"..", ".", "a/b", "../etc", "", "-rf", ".hidden"}) {
    r = Request();
    r.user = name;
    r.home = base_ + "/" + name;
    EXPECT_EQ(CreateHome(r).error().kind, ErrorKind::kInvalidInput) << name;
  }
  EXPECT_TRUE(BaseEntries().empty());
  ExpectOutsideUntouched();
}

TEST_F(HomeCreateTest, MissingSkelGivesAnEmptyHome) {
  HomeRequest r = Request();
  r.skel = root_ + "/no-skel";
  auto outcome = CreateHome(r);
  ASSERT_TRUE(outcome) << outcome.error().message;
  EXPECT_TRUE(fs::is_empty(base_ + "/alice"));
}

// A thread keeps replacing the home by a symlink to "/etc" (and a skel file by a symlink
// to the shadow file) while home-create runs again and again: every run either creates a
// real home, finds the user's real home, or refuses; "/etc" never changes.
TEST_F(HomeCreateTest, RacingSymlinkSwapsNeverReachOutside) {
  std::atomic<bool> stop{false};
  const std::string home = base_ + "/alice";
  const std::string trash = root_ + "/trash";
  fs::create_directories(trash);
  std::thread attacker([&] {
    int i = 0;
    while (!stop.load()) {
      // Move away whatever is there (a home just made), put the symlink in.
      std::string moved = trash + "/" + std::to_string(i++);
      ::rename(home.c_str(), moved.c_str());
      ::symlink(etc_.c_str(), home.c_str());
      std::this_thread::yield();
      ::unlink(home.c_str());
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // let some runs create
      // Swap a skel file for a symlink and back.
      ::rename((skel_ + "/.bashrc").c_str(), (root_ + "/bashrc.real").c_str());
      ::symlink((etc_ + "/shadow").c_str(), (skel_ + "/.bashrc").c_str());
      std::this_thread::yield();
      ::unlink((skel_ + "/.bashrc").c_str());
      ::rename((root_ + "/bashrc.real").c_str(), (skel_ + "/.bashrc").c_str());
    }
  });
  int created = 0, existed = 0, refused = 0;
  for (int run = 0; run < 300; ++run) {
    auto outcome = CreateHome(Request());
    if (!outcome) {
      ++refused;
      EXPECT_NE(outcome.error().kind, ErrorKind::kInvalidInput) << outcome.error().message;
    } else if (*outcome == HomeOutcome::kCreated) {
      ++created;
    } else {
      ++existed;
    }
  }
  stop = true;
  attacker.join();
  EXPECT_EQ(Snapshot(etc_), etc_before_);
  // Every home that was made (moved to trash by the attacker) is a real directory owned by
  // the user with no symlink copied in, and no temporary directory is left behind.
  for (const auto& e : fs::directory_iterator(trash)) {
    struct stat st;
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    if (!S_ISDIR(st.st_mode)) continue;
    EXPECT_EQ(st.st_uid, kUid) << e.path();
    for (const auto& f : fs::recursive_directory_iterator(e.path())) {
      EXPECT_FALSE(f.is_symlink()) << f.path();
    }
  }
  for (const auto& name : BaseEntries()) {
    EXPECT_EQ(name.find(".one-hpc-home-"), std::string::npos) << name;
  }
  RecordProperty("created", created);
  RecordProperty("existed", existed);
  RecordProperty("refused", refused);
  EXPECT_GT(created + existed + refused, 0);
}

// The command line: unknown users, system accounts and homes elsewhere are refused with
// exit 3 before anything is touched.
TEST_F(HomeCreateTest, CommandRefusesUnknownAndSystemUsers) {
  const char* bin = std::getenv("ONEHPC_BIN");
#ifdef ONEHPC_TEST_BIN
  if (!bin) bin = ONEHPC_TEST_BIN;
#endif
  if (!bin) GTEST_SKIP() << "ONEHPC_BIN not set";
  auto run = [&](std::vector<std::string> args) {
    pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(bin));
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 2);
      ::execv(bin, argv.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(run({"home-create", "no-such-user-4711", "--home-base", base_, "--skel", skel_}), 3);
  EXPECT_EQ(run({"home-create", "--user", "root", "--home-base", base_}), 3);
  EXPECT_EQ(run({"home-create", "nobody", "--home-base", base_}), 3);
  EXPECT_EQ(run({"home-create", "../etc", "--home-base", base_}), 3);
  EXPECT_EQ(run({"home-create"}), 2);
  // The real base: this machine's /home is no NFS mount, so nothing is made on its root disk
  // (exit 4) whoever the user is (the portal's test is tests/vm/ood_scenarios_test.sh).
  LibmountMounts mounts;
  auto home = mounts.FindByTarget("/home");
  ASSERT_TRUE(home);
  if (!home->has_value() ||
      ((*home)->fs_type != "nfs" && (*home)->fs_type != "nfs4" && !host::InContainer(Files("")))) {
    EXPECT_EQ(run({"home-create", "no-such-user-4711"}), 4);
    EXPECT_EQ(run({"home-create", "--user", "root"}), 4);
  }
  EXPECT_TRUE(BaseEntries().empty());
  ExpectOutsideUntouched();
}

}  // namespace
}  // namespace onehpc::ood
