#include "roles/os/files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace onehpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/files_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    old_umask_ = ::umask(022);
  }
  void TearDown() override {
    ::umask(old_umask_);
    std::filesystem::remove_all(root_);
  }

  struct stat Stat(const std::string& host_path) {
    struct stat st {};
    EXPECT_EQ(::lstat(host_path.c_str(), &st), 0) << host_path;
    return st;
  }

  void WriteHostFile(const std::string& host_path, const std::string& content) {
    std::filesystem::create_directories(std::filesystem::path(host_path).parent_path());
    std::ofstream(host_path) << content;
  }

  std::string root_;
  mode_t old_umask_ = 022;
};

TEST_F(FilesTest, HostPathPutsTheRootInFront) {
  EXPECT_EQ(Files("").HostPath("/etc/hosts"), "/etc/hosts");
  EXPECT_EQ(Files("/").HostPath("/etc/hosts"), "/etc/hosts");
  EXPECT_EQ(Files("/srv/root/").HostPath("/etc/hosts"), "/srv/root/etc/hosts");
  EXPECT_EQ(Files("/srv/root").root(), "/srv/root");
}

TEST_F(FilesTest, RefusesDotDotAndRelativePaths) {
  Files files(root_);
  for (const std::string path : {"/etc/../../x", "/..", "/a/..", "etc/x", ""}) {
    auto w = files.WriteAtomic(path, "x", 0644);
    ASSERT_FALSE(w) << path;
    EXPECT_EQ(w.error().kind, ErrorKind::kInvalidInput) << path;
    auto r = files.Read(path);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalidInput);
    EXPECT_FALSE(files.Exists(path));
    EXPECT_FALSE(files.MakeDirs(path));
    EXPECT_FALSE(files.Remove(path));
    EXPECT_FALSE(files.List(path));
  }
  auto w = files.WriteAtomic("/etc/../x", "x", 0644);
  EXPECT_THAT(w.error().message, HasSubstr("'..'"));
  // Names that merely contain dots are fine.
  EXPECT_TRUE(files.WriteAtomic("/a/..b/...", "x", 0644));
  EXPECT_TRUE(std::filesystem::exists(root_ + "/a/..b/..."));
}

// One holder at a time (flock(2) locks belong to the open file: a second open in this very
// process is another holder); released when the lock object goes.
TEST_F(FilesTest, LockIsExclusiveAndReleasedWithItsObject) {
  Files files(root_);
  {
    auto first = files.Lock("/run/x/test.lock", /*wait=*/false);
    ASSERT_TRUE(first) << first.error().message;
    ASSERT_TRUE(first->has_value());
    auto second = files.Lock("/run/x/test.lock", /*wait=*/false);
    ASSERT_TRUE(second) << second.error().message;
    EXPECT_FALSE(second->has_value()) << "taken while the first is held";
    struct stat st {};
    ASSERT_EQ(::stat((root_ + "/run/x/test.lock").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
  }
  auto again = files.Lock("/run/x/test.lock", /*wait=*/false);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->has_value()) << "free once the first object is gone";
  std::filesystem::create_symlink(root_ + "/elsewhere", root_ + "/run/x/link.lock");
  EXPECT_FALSE(files.Lock("/run/x/link.lock", /*wait=*/false)) << "a symlink is refused";
  EXPECT_FALSE(files.Lock("/run/../etc/x.lock", /*wait=*/false));
}

TEST_F(FilesTest, WriteAtomicCreatesParentsAndSetsMode) {
  ::umask(077);  // the requested modes win over the umask
  Files files(root_);
  ASSERT_TRUE(files.WriteAtomic("/etc/one-hpc/conf.d/a.conf", "hello\n", 0640));
  EXPECT_EQ(Stat(root_ + "/etc/one-hpc/conf.d/a.conf").st_mode & 07777, 0640u);
  EXPECT_EQ(Stat(root_ + "/etc/one-hpc").st_mode & 07777, 0755u);
  EXPECT_EQ(Stat(root_ + "/etc/one-hpc/conf.d").st_mode & 07777, 0755u);
  auto content = files.Read("/etc/one-hpc/conf.d/a.conf");
  ASSERT_TRUE(content);
  EXPECT_EQ(*content, "hello\n");
  EXPECT_TRUE(files.Exists("/etc/one-hpc/conf.d/a.conf"));
  // No temporary file is left behind.
  auto names = files.List("/etc/one-hpc/conf.d");
  ASSERT_TRUE(names);
  EXPECT_THAT(*names, ElementsAre("a.conf"));
}

TEST_F(FilesTest, WriteAtomicReplacesContentAndMode) {
  Files files(root_);
  ASSERT_TRUE(files.WriteAtomic("/f", "one", 0600));
  ino_t first = Stat(root_ + "/f").st_ino;
  ASSERT_TRUE(files.WriteAtomic("/f", "two", 04755));
  EXPECT_EQ(*files.Read("/f"), "two");
  EXPECT_EQ(Stat(root_ + "/f").st_mode & 07777, 04755u);
  EXPECT_NE(Stat(root_ + "/f").st_ino, first);  // a new file renamed over the old one
  ASSERT_TRUE(files.WriteAtomic("/empty", "", 0644));
  EXPECT_EQ(*files.Read("/empty"), "");
}

TEST_F(FilesTest, WriteAtomicReplacesASymlinkInsteadOfWritingThroughIt) {
  Files files(root_);
  WriteHostFile(root_ + "/target", "original");
  std::filesystem::create_symlink(root_ + "/target", root_ + "/link");
  ASSERT_TRUE(files.WriteAtomic("/link", "new", 0644));
  EXPECT_EQ(*files.Read("/target"), "original");
  EXPECT_TRUE(S_ISREG(Stat(root_ + "/link").st_mode));
}

TEST_F(FilesTest, FailedWriteLeavesNoTemporaryFile) {
  Files files(root_);
  ASSERT_TRUE(files.MakeDirs("/dir/sub"));
  auto w = files.WriteAtomic("/dir/sub", "x", 0644);  // rename onto a directory fails
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().kind, ErrorKind::kIo);
  EXPECT_THAT(w.error().message, HasSubstr(root_ + "/dir/sub"));
  auto names = files.List("/dir");
  ASSERT_TRUE(names);
  EXPECT_THAT(*names, ElementsAre("sub"));
  // A parent that is a file.
  ASSERT_TRUE(files.WriteAtomic("/plain", "x", 0644));
  auto p = files.WriteAtomic("/plain/child", "x", 0644);
  ASSERT_FALSE(p);
  EXPECT_THAT(p.error().message, HasSubstr("not a directory"));
}

TEST_F(FilesTest, ReadMissing) {
  Files files(root_);
  auto r = files.Read("/missing");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kNotFound);
  auto maybe = files.ReadIfExists("/missing");
  ASSERT_TRUE(maybe);
  EXPECT_FALSE(maybe->has_value());
  EXPECT_FALSE(files.Exists("/missing"));
}

// What EnsureFile does with Files: compare (Matches), then write only when different.
Result<bool> WriteIfChanged(Files& files, const std::string& path, const std::string& content,
                            mode_t mode, const std::optional<FileOwner>& owner = std::nullopt) {
  auto same = files.Matches(path, content, mode, owner);
  if (!same) return Fail(same.error());
  if (*same) return false;
  if (auto s = files.WriteAtomic(path, content, mode, owner); !s) return Fail(s.error());
  return true;
}

TEST_F(FilesTest, MakeDirsGivesTheLastDirectoryItsOwnerAndMode) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root";
  Files files(root_);
  ASSERT_TRUE(files.MakeDirs("/var/lib/x/state", 0700, FileOwner{"4321", "4322"}));
  struct stat st = Stat(root_ + "/var/lib/x/state");
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_gid, 4322u);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(Stat(root_ + "/var/lib/x").st_uid, 0u);  // parents stay root's, 0755
  EXPECT_EQ(Stat(root_ + "/var/lib/x").st_mode & 07777, 0755u);
  // An existing directory gets them too (as install -d -o -g -m).
  ASSERT_TRUE(::chmod((root_ + "/var/lib/x/state").c_str(), 0755) == 0);
  ASSERT_TRUE(files.MakeDirs("/var/lib/x/state", 0700, FileOwner{"4321", "4322"}));
  EXPECT_EQ(Stat(root_ + "/var/lib/x/state").st_mode & 07777, 0700u);
}

TEST_F(FilesTest, WriteIfChangedComparesContentModeAndOwner) {
  Files files(root_);
  auto w = WriteIfChanged(files, "/etc/x.conf", "a=1\n", 0644);
  ASSERT_TRUE(w);
  EXPECT_TRUE(*w);
  ino_t ino = Stat(root_ + "/etc/x.conf").st_ino;
  w = WriteIfChanged(files, "/etc/x.conf", "a=1\n", 0644);
  ASSERT_TRUE(w);
  EXPECT_FALSE(*w);
  EXPECT_EQ(Stat(root_ + "/etc/x.conf").st_ino, ino);  // untouched
  w = WriteIfChanged(files, "/etc/x.conf", "a=2\n", 0644);
  ASSERT_TRUE(w);
  EXPECT_TRUE(*w);
  EXPECT_EQ(*files.Read("/etc/x.conf"), "a=2\n");
  w = WriteIfChanged(files, "/etc/x.conf", "a=2\n", 0600);
  ASSERT_TRUE(w);
  EXPECT_TRUE(*w);
  EXPECT_EQ(Stat(root_ + "/etc/x.conf").st_mode & 07777, 0600u);
  w = WriteIfChanged(files, "/etc/x.conf", "a=2\n", 0600);
  ASSERT_TRUE(w);
  EXPECT_FALSE(*w);
  if (::geteuid() != 0) GTEST_SKIP() << "owner comparison needs root";
  w = WriteIfChanged(files, "/etc/x.conf", "a=2\n", 0600, FileOwner{"4321", "4322"});
  ASSERT_TRUE(w);
  EXPECT_TRUE(*w);
  EXPECT_EQ(Stat(root_ + "/etc/x.conf").st_uid, 4321u);
  w = WriteIfChanged(files, "/etc/x.conf", "a=2\n", 0600, FileOwner{"4321", "4322"});
  ASSERT_TRUE(w);
  EXPECT_FALSE(*w);
}

TEST_F(FilesTest, WriteIfChangedReplacesASymlink) {
  Files files(root_);
  WriteHostFile(root_ + "/target", "same");
  std::filesystem::create_symlink(root_ + "/target", root_ + "/link");
  auto w = WriteIfChanged(files, "/link", "same", 0644);
  ASSERT_TRUE(w);
  EXPECT_TRUE(*w);
  EXPECT_TRUE(S_ISREG(Stat(root_ + "/link").st_mode));
}

TEST_F(FilesTest, OwnerIsLookedUpUnderTheRootFirstThenOnTheHost) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root";
  WriteHostFile(root_ + "/etc/passwd",
                "# comment\n"
                "root:x:0:0:root:/root:/bin/bash\n"
                "slurm:x:4242:4343:Slurm:/var/lib/slurm:/usr/sbin/nologin\n"
                "nobody:x:5555:5556::/nonexistent:/usr/sbin/nologin\n");
  WriteHostFile(root_ + "/etc/group", "root:x:0:\nslurm:x:4343:\nnogroup:x:5556:\n");
  Files files(root_);
  ASSERT_TRUE(files.WriteAtomic("/etc/slurm/slurm.key", "k", 0600, FileOwner{"slurm", "slurm"}));
  struct stat st = Stat(root_ + "/etc/slurm/slurm.key");
  EXPECT_EQ(st.st_uid, 4242u);
  EXPECT_EQ(st.st_gid, 4343u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  // The root's passwd wins over the host's.
  ASSERT_TRUE(files.WriteAtomic("/n", "x", 0644, FileOwner{"nobody", "nogroup"}));
  EXPECT_EQ(Stat(root_ + "/n").st_uid, 5555u);
  EXPECT_EQ(Stat(root_ + "/n").st_gid, 5556u);

  // Not under the root: the host's database (daemon is uid 1 on Debian).
  struct passwd* daemon = ::getpwnam("daemon");
  if (daemon) {
    ASSERT_TRUE(files.WriteAtomic("/d", "x", 0644, FileOwner{"daemon", ""}));
    EXPECT_EQ(Stat(root_ + "/d").st_uid, daemon->pw_uid);
    EXPECT_EQ(Stat(root_ + "/d").st_gid, 0u);  // group left unchanged
  }

  // Unknown names fail before anything is written.
  auto bad = files.WriteAtomic("/u", "x", 0644, FileOwner{"onehpc-no-such-user", "root"});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, ErrorKind::kNotFound);
  EXPECT_THAT(bad.error().message, HasSubstr("onehpc-no-such-user"));
  EXPECT_FALSE(files.Exists("/u"));
  auto bad_group = files.WriteAtomic("/u", "x", 0644, FileOwner{"root", "onehpc-no-such-group"});
  ASSERT_FALSE(bad_group);
  EXPECT_THAT(bad_group.error().message, HasSubstr("group 'onehpc-no-such-group'"));
  auto names = files.List("/");
  ASSERT_TRUE(names);
  EXPECT_THAT(*names, ElementsAre("d", "etc", "n"));
}

TEST_F(FilesTest, HostNssOwnerWithRealRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root";
  if (!::getpwnam("nobody")) GTEST_SKIP() << "no user nobody on this host";
  // A root without etc/passwd: the host's user database answers.
  Files files(root_);
  ASSERT_TRUE(files.WriteAtomic("/x", "x", 0644, FileOwner{"nobody", ""}));
  EXPECT_EQ(Stat(root_ + "/x").st_uid, ::getpwnam("nobody")->pw_uid);
}

TEST_F(FilesTest, MakeDirs) {
  ::umask(077);
  Files files(root_);
  ASSERT_TRUE(files.MakeDirs("/var/lib/one-hpc", 0700));
  EXPECT_EQ(Stat(root_ + "/var").st_mode & 07777, 0700u);
  EXPECT_EQ(Stat(root_ + "/var/lib/one-hpc").st_mode & 07777, 0700u);
  // Existing directories are left alone.
  ASSERT_TRUE(files.MakeDirs("/var/lib/one-hpc/x", 0755));
  EXPECT_EQ(Stat(root_ + "/var/lib/one-hpc").st_mode & 07777, 0700u);
  EXPECT_EQ(Stat(root_ + "/var/lib/one-hpc/x").st_mode & 07777, 0755u);
  EXPECT_TRUE(files.MakeDirs("/var//lib/./one-hpc/"));
  ASSERT_TRUE(files.WriteAtomic("/file", "x", 0644));
  auto over_file = files.MakeDirs("/file/sub");
  ASSERT_FALSE(over_file);
  EXPECT_EQ(over_file.error().kind, ErrorKind::kIo);
  Files missing_root(root_ + "/no-such-root");
  auto m = missing_root.MakeDirs("/etc");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().kind, ErrorKind::kNotFound);
}

TEST_F(FilesTest, RemoveAndList) {
  Files files(root_);
  ASSERT_TRUE(files.WriteAtomic("/d/b", "", 0644));
  ASSERT_TRUE(files.WriteAtomic("/d/a", "", 0644));
  ASSERT_TRUE(files.WriteAtomic("/d/.hidden", "", 0644));
  auto names = files.List("/d");
  ASSERT_TRUE(names);
  EXPECT_THAT(*names, ElementsAre(".hidden", "a", "b"));
  ASSERT_TRUE(files.Remove("/d/a"));
  EXPECT_FALSE(files.Exists("/d/a"));
  EXPECT_TRUE(files.Remove("/d/a"));  // already gone: fine
  EXPECT_TRUE(files.Remove("/no/such/dir/file"));
  auto dir = files.Remove("/d");
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.error().kind, ErrorKind::kIo);
  auto missing = files.List("/missing");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ErrorKind::kNotFound);
}

}  // namespace
TEST_F(FilesTest, RenameMovesADirectoryUnderTheRootAndRefusesDotDot) {
  Files files(root_);
  ASSERT_TRUE(files.WriteAtomic("/state/copy.tmp/key", "k", 0400));
  ASSERT_TRUE(files.Rename("/state/copy.tmp", "/state/copy"));
  EXPECT_FALSE(files.Exists("/state/copy.tmp"));
  EXPECT_EQ(*files.Read("/state/copy/key"), "k");
  auto missing = files.Rename("/state/copy.tmp", "/state/other");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ErrorKind::kIo);
  EXPECT_THAT(missing.error().message, HasSubstr(root_ + "/state/copy.tmp"));
  EXPECT_FALSE(files.Rename("/state/copy", "/state/../escape"));
  EXPECT_TRUE(files.Exists("/state/copy/key"));
}

}  // namespace onehpc
