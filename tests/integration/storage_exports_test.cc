// The rendered exports validated by the real exportfs (nfs-kernel-server). exportfs parses
// /etc/exports and /etc/exports.d/*.exports and writes /var/lib/nfs/etab without a kernel NFS
// server; the test runs it in a private mount namespace (a forked child calls
// unshare(CLONE_NEWNS)) with a tmpfs over /var/lib/nfs and the rendered file bind-mounted
// over /etc/exports (or placed in a tmpfs over /etc/exports.d when that directory exists),
// so the host's exports are never read or changed. The exported paths are rewritten into a
// temporary directory so that nothing is created under the host's /export. Root only.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "roles/nfs/exports.h"
#include "roles/os/process.h"
#include "tests/integration/helpers.h"
#include "tests/integration/loop_devices.h"

namespace onehpc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadAll;
namespace fs = std::filesystem;

struct ExportfsRun {
  int ra_exit = -1;
  std::string ra_err;
  std::string listing;  // exportfs -v
};

class ExportfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "mount namespaces need root";
    if (!testing::HaveProgram("exportfs")) {
      GTEST_SKIP() << "exportfs missing (Debian package nfs-kernel-server)";
    }
    char tmpl[] = "/tmp/onehpc-exportfs.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* d : {"/export/home", "/export/slurm", "/export/software", "/nfs"}) {
      fs::create_directories(dir_ + d);
    }
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Runs exportfs -ra and exportfs -v on `exports` in a private mount namespace.
  ExportfsRun Validate(std::string exports) {
    for (size_t pos = 0; (pos = exports.find(" /export/", pos)) != std::string::npos;) {
      exports.replace(pos + 1, 0, dir_);
      pos += dir_.size() + 2;
    }
    for (size_t pos = 0; (pos = exports.find("\n/export/", pos)) != std::string::npos;) {
      exports.replace(pos + 1, 0, dir_);
      pos += dir_.size() + 2;
    }
    if (exports.rfind("/export/", 0) == 0) exports.insert(0, dir_);
    std::string file = dir_ + "/rendered.exports";
    std::ofstream(file) << exports;
    std::ofstream(dir_ + "/empty") << "";
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = Child(file);
      ::_exit(rc);
    }
    ExportfsRun out;
    int status = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ADD_FAILURE() << "exportfs child timed out";
        return out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "namespace setup failed: " << ReadAll(dir_ + "/child.err");
    out.ra_exit = std::atoi(ReadAll(dir_ + "/ra.exit").c_str());
    out.ra_err = ReadAll(dir_ + "/ra.err");
    out.listing = ReadAll(dir_ + "/v.out");
    return out;
  }

  int Child(const std::string& file) {
    std::ofstream err(dir_ + "/child.err");
    if (::unshare(CLONE_NEWNS) != 0) return err << "unshare failed", 2;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return err << "make-rprivate failed", 3;
    }
    if (::mount("tmpfs", "/var/lib/nfs", "tmpfs", 0, "mode=0755") != 0) {
      return err << "tmpfs on /var/lib/nfs failed", 4;
    }
    struct stat st {};
    std::string etc_exports = dir_ + "/empty";
    if (::stat("/etc/exports.d", &st) == 0 && S_ISDIR(st.st_mode)) {
      if (::mount("tmpfs", "/etc/exports.d", "tmpfs", 0, "mode=0755") != 0) {
        return err << "tmpfs on /etc/exports.d failed", 5;
      }
      fs::copy_file(file, "/etc/exports.d/one-hpc.exports");
    } else {
      etc_exports = file;  // no exports.d here: the same parser reads /etc/exports
    }
    if (::stat("/etc/exports", &st) != 0) {
      return err << "/etc/exports missing (nfs-kernel-server not installed?)", 6;
    }
    if (::mount(etc_exports.c_str(), "/etc/exports", nullptr, MS_BIND, nullptr) != 0) {
      return err << "bind over /etc/exports failed", 7;
    }
    RealProcessRunner runner;
    Command ra;
    ra.argv = {"exportfs", "-ra"};
    ra.timeout = Duration(30000);
    auto r = runner.Run(ra);
    std::ofstream(dir_ + "/ra.exit") << (r ? r->exit_code : 127);
    std::ofstream(dir_ + "/ra.err") << (r ? r->err : r.error().message);
    Command v;
    v.argv = {"exportfs", "-v"};
    v.timeout = Duration(30000);
    auto l = runner.Run(v);
    std::ofstream(dir_ + "/v.out") << (l ? l->out : "");
    return 0;
  }

  std::string dir_;
};

TEST_F(ExportfsTest, RenderedExportsAreAccepted) {
  nfs::ExportsConfig c;
  c.compute_net = "10.1.0.0/24";
  c.portal_ips = {"10.1.0.5"};
  c.clients = {nfs::ExportClient{3, "10.1.0.3"}, nfs::ExportClient{20, "10.1.0.20"}};
  c.home_on_disk = true;
  ExportfsRun run = Validate(nfs::RenderExports(c));
  EXPECT_EQ(run.ra_exit, 0) << run.ra_err;
  EXPECT_EQ(run.ra_err, "");
  EXPECT_THAT(run.listing,
              HasSubstr("10.1.0.5(sync,wdelay,hide,no_subtree_check,fsid=1,mountpoint"));
  EXPECT_THAT(run.listing, HasSubstr("no_root_squash"));
  // One line per client, the same path on several lines: each is its own export entry.
  EXPECT_THAT(run.listing, HasSubstr("10.1.0.3(sync,wdelay,hide,no_subtree_check,fsid=1,"));
  EXPECT_THAT(run.listing, HasSubstr("10.1.0.20(sync,wdelay,hide,no_subtree_check,fsid=1,"));
  EXPECT_THAT(run.listing, Not(HasSubstr("/24(")));
  EXPECT_THAT(run.listing, HasSubstr("fsid=2"));
  EXPECT_THAT(run.listing, HasSubstr("fsid=3"));
}

TEST_F(ExportfsTest, ExportsWithoutPortalOrHomeAreAccepted) {
  nfs::ExportsConfig c;
  c.compute_net = "172.16.0.0/16";
  c.clients = {nfs::ExportClient{3, "172.16.0.3"}};
  c.export_home = false;
  ExportfsRun run = Validate(nfs::RenderExports(c));
  EXPECT_EQ(run.ra_exit, 0) << run.ra_err;
  EXPECT_EQ(run.ra_err, "");
  EXPECT_THAT(run.listing, HasSubstr("172.16.0.3("));
  EXPECT_THAT(run.listing, Not(HasSubstr("/export/home")));
}

// A thousand workers: a thousand lines per export, which exportfs takes whole (the figure of
// the exports' size the refresher rewrites when a worker comes or goes).
TEST_F(ExportfsTest, AThousandClientsAreAccepted) {
  nfs::ExportsConfig c;
  c.compute_net = "10.2.0.0/16";
  c.portal_ips = {"10.2.0.5"};
  for (int i = 0; i < 1000; ++i) {
    c.clients.push_back(nfs::ExportClient{
        100 + i, "10.2." + std::to_string(1 + i / 250) + "." + std::to_string(1 + i % 250)});
  }
  const auto t0 = std::chrono::steady_clock::now();
  ExportfsRun run = Validate(nfs::RenderExports(c));
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(run.ra_exit, 0) << run.ra_err;
  EXPECT_EQ(run.ra_err, "");
  size_t entries = 0;
  for (size_t at = run.listing.find("(sync"); at != std::string::npos;
       at = run.listing.find("(sync", at + 1)) {
    ++entries;
  }
  // /export/home and /export/software for 1001 addresses, /export/slurm for the portal.
  EXPECT_EQ(entries, 2u * 1001u + 1u);
  std::cout << "exportfs -ra and -v with 1000 clients: " << ms << " ms\n";
}

// The validation has teeth: exportfs rejects a bad option.
TEST_F(ExportfsTest, BadOptionIsRejected) {
  ExportfsRun run = Validate("/export/home 10.1.0.0/24(rw,no_such_option)\n");
  EXPECT_NE(run.ra_exit, 0);
  EXPECT_THAT(run.ra_err, HasSubstr("no_such_option"));
}

}  // namespace
}  // namespace onehpc
