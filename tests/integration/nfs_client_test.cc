// The NFS client helpers on the real kernel, in a forked child with private namespaces so that
// nothing of the host changes:
//  - SourceAddressFor runs the real `ip -j route get` in a private network namespace with two
//    veth pairs (10.81.0.23/24 and 10.81.1.7/24, a subnet no other test uses) and a default
//    route, and returns the address of the interface the kernel picks;
//  - CheckRootCanWrite on a read-only bind mount (EROFS) and on an immutable directory
//    (EPERM), both on a tmpfs in a private mount namespace, gives the no_root_squash message
//    with the source address from that network namespace; on a writable tmpfs it succeeds and
//    leaves no probe file behind. Root only.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "context/settings.h"
#include "roles/nfs/client_mounts.h"
#include "roles/os/block_devices.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"
#include "roles/os/systemd.h"
#include "roles/plan.h"
#include "roles/role.h"
#include "tests/fakes/http.h"
#include "tests/integration/loop_devices.h"

namespace onehpc::nfs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
namespace fs = std::filesystem;

constexpr char kSep = '\x1e';

// Runs `body` in a forked child after unshare(flags) (a private mount namespace is made
// rprivate first); returns what it returned, or "CHILD FAILED: ..." when the child died or
// took longer than 60 s.
std::string InNamespaces(int flags, const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "CHILD FAILED: pipe";
  pid_t pid = ::fork();
  if (pid < 0) return "CHILD FAILED: fork";
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    if (::unshare(flags) != 0) {
      out = "CHILD FAILED: unshare: " + std::string(std::strerror(errno));
    } else if ((flags & CLONE_NEWNS) &&
               ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      out = "CHILD FAILED: make-rprivate";
    } else {
      out = body();
    }
    for (size_t done = 0; done < out.size();) {
      ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      out = "CHILD FAILED: timed out; " + out;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) out = "CHILD FAILED: status; " + out;
  return out;
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t sep = text.find(kSep, start);
    parts.push_back(text.substr(start, sep - start));
    if (sep == std::string::npos) return parts;
    start = sep + 1;
  }
}

// In the child's fresh network namespace: lo, two veth pairs with one addressed end each.
// "" on success, else the failing command.
std::string SetUpNetwork() {
  RealProcessRunner runner;
  std::vector<std::vector<std::string>> steps = {
      {"ip", "link", "set", "lo", "up"},
      {"ip", "link", "add", "nfsc0", "type", "veth", "peer", "name", "nfsc0p"},
      {"ip", "addr", "add", "10.81.0.23/24", "dev", "nfsc0"},
      {"ip", "link", "set", "nfsc0", "up"},
      {"ip", "link", "set", "nfsc0p", "up"},
      {"ip", "link", "add", "nfsc1", "type", "veth", "peer", "name", "nfsc1p"},
      {"ip", "addr", "add", "10.81.1.7/24", "dev", "nfsc1"},
      {"ip", "link", "set", "nfsc1", "up"},
      {"ip", "link", "set", "nfsc1p", "up"},
  };
  for (const auto& argv : steps) {
    Command c;
    c.argv = argv;
    c.timeout = Duration(10000);
    auto r = RunChecked(runner, c);
    if (!r) return r.error().message;
  }
  return "";
}

std::string Describe(const Status& s) {
  return s ? std::string("OK")
           : "ERR " + std::to_string(static_cast<int>(s.error().kind)) + " " + s.error().message;
}

class NfsClientRealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network and mount namespaces need root";
    if (!testing::HaveProgram("ip")) GTEST_SKIP() << "ip missing (Debian package iproute2)";
  }
};

TEST_F(NfsClientRealTest, SourceAddressIsTheAddressOfTheRoutesInterface) {
  std::string out = InNamespaces(CLONE_NEWNET, [] {
    std::string setup = SetUpNetwork();
    if (!setup.empty()) return "CHILD FAILED: " + setup;
    RealProcessRunner runner;
    std::string out;
    for (const char* server : {"10.81.0.5", "10.81.1.9", "10.81.0.23", "198.51.100.10"}) {
      auto r = SourceAddressFor(runner, server);
      out += (r ? *r : "ERR " + r.error().message) + kSep;
    }
    Command c;
    c.argv = {"ip", "route", "add", "default", "via", "10.81.0.1"};
    c.timeout = Duration(10000);
    auto added = RunChecked(runner, c);
    auto r = SourceAddressFor(runner, "198.51.100.10");
    out += added ? (r ? *r : "ERR " + r.error().message) : "ERR route: " + added.error().message;
    return out;
  });
  ASSERT_THAT(out, Not(StartsWith("CHILD FAILED"))) << out;
  auto parts = Split(out);
  ASSERT_EQ(parts.size(), 5u) << out;
  EXPECT_EQ(parts[0], "10.81.0.23");  // on-link on nfsc0
  EXPECT_EQ(parts[1], "10.81.1.7");   // on-link on nfsc1: the route decides, not the first NIC
  EXPECT_EQ(parts[2], "10.81.0.23");  // our own address (a local route)
  EXPECT_THAT(parts[3], StartsWith("ERR "));  // no route at all
  EXPECT_THAT(parts[3], HasSubstr("ip -j route get 198.51.100.10"));
  EXPECT_THAT(parts[3], HasSubstr("Network is unreachable"));
  EXPECT_EQ(parts[4], "10.81.0.23");  // through the default gateway on nfsc0
}

TEST_F(NfsClientRealTest, CheckRootCanWriteOnReadOnlyImmutableAndWritableDirectories) {
  char tmpl[] = "/tmp/onehpc-nfsc.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  fs::create_directories(dir + "/mnt");
  std::string out = InNamespaces(CLONE_NEWNS | CLONE_NEWNET, [&]() -> std::string {
    std::string setup = SetUpNetwork();
    if (!setup.empty()) return "CHILD FAILED: " + setup;
    const std::string mnt = dir + "/mnt";
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "mode=0755") != 0) {
      return "CHILD FAILED: tmpfs";
    }
    for (const char* d : {"/ro", "/immutable", "/home"}) ::mkdir((mnt + d).c_str(), 0755);
    const std::string ro = mnt + "/ro";
    if (::mount(ro.c_str(), ro.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        ::mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
      return "CHILD FAILED: read-only bind";
    }
    // chattr +i (tmpfs has supported it since Linux 6.0); "SKIP" when not.
    std::string immutable_ok = "yes";
    int fd = ::open((mnt + "/immutable").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int attr = 0;
    if (fd < 0 || ::ioctl(fd, FS_IOC_GETFLAGS, &attr) != 0 ||
        (attr |= FS_IMMUTABLE_FL, ::ioctl(fd, FS_IOC_SETFLAGS, &attr) != 0)) {
      immutable_ok = "no";
    }
    if (fd >= 0) ::close(fd);

    LoadedContext context;
    auto settings = Settings::Resolve({}, ContextVars{});
    if (!settings) return "CHILD FAILED: settings";
    RealProcessRunner runner;
    Files files;
    SystemctlSystemd systemd(runner);
    BlkidBlockDevices devices(true);
    LibmountMounts mounts;
    RealClock clock;
    Plan plan(PlanMode::kApply);
    fakes::NoHttp http;
    SystemAdapters sys{runner, files, systemd, devices, mounts, clock, http};
    RoleEnv env = RoleEnv::From(context, *settings, nullptr, sys, plan);
    NfsMount m;
    m.server = "10.81.0.5";
    m.export_path = "/export/home";
    m.why = "homes";
    m.setting = "ONEAPP_HOME_NFS_SERVER";
    m.root_write_why = "the portal creates home directories as root";
    std::string result;
    m.where = ro;
    result += Describe(CheckRootCanWrite(env, m, Duration(1500))) + kSep;
    m.where = mnt + "/immutable";
    result += (immutable_ok == "yes" ? Describe(CheckRootCanWrite(env, m, Duration(1500)))
                                     : std::string("SKIP")) +
              kSep;
    m.where = mnt + "/home";
    result += Describe(CheckRootCanWrite(env, m, Duration(1500))) + kSep;
    std::string left;
    for (const auto& e : fs::directory_iterator(mnt + "/home")) {
      left += e.path().filename().string() + " ";
    }
    result += "left:" + left;
    // Let the tmpfs go with the namespace; clear the flag so nothing lingers if it does not.
    fd = ::open((mnt + "/immutable").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      attr &= ~FS_IMMUTABLE_FL;
      (void)::ioctl(fd, FS_IOC_SETFLAGS, &attr);
      ::close(fd);
    }
    return result;
  });
  std::error_code ec;
  fs::remove_all(dir, ec);
  ASSERT_THAT(out, Not(StartsWith("CHILD FAILED"))) << out;
  auto parts = Split(out);
  ASSERT_EQ(parts.size(), 4u) << out;
  const std::string kind = std::to_string(static_cast<int>(ErrorKind::kInvalidInput));

  // Read-only: EROFS.
  EXPECT_EQ(parts[0].substr(0, parts[0].find(" (create ")),
            "ERR " + kind + " root cannot write to " + dir +
                "/mnt/ro, mounted from 10.81.0.5:/export/home (ONEAPP_HOME_NFS_SERVER): the NFS "
                "server must export /export/home read-write (rw) and with no_root_squash to "
                "10.81.0.23, the address this VM uses to reach 10.81.0.5 (ip route get "
                "10.81.0.5); the portal creates home directories as root")
      << parts[0];
  EXPECT_THAT(parts[0], HasSubstr("Read-only file system (EROFS)"));

  // Immutable: EPERM, the no_root_squash action.
  if (parts[1] == "SKIP") {
    std::cout << "immutable directories are not supported on tmpfs here; EPERM not checked\n";
  } else {
    EXPECT_EQ(parts[1].substr(0, parts[1].find(" (create ")),
              "ERR " + kind + " root cannot write to " + dir +
                  "/mnt/immutable, mounted from 10.81.0.5:/export/home (ONEAPP_HOME_NFS_SERVER): "
                  "the NFS server must export /export/home with no_root_squash to 10.81.0.23, the "
                  "address this VM uses to reach 10.81.0.5 (ip route get 10.81.0.5); the portal "
                  "creates home directories as root")
        << parts[1];
    EXPECT_THAT(parts[1], HasSubstr("Operation not permitted (EPERM)"));
  }

  // Writable: success, and the probe is gone.
  EXPECT_EQ(parts[2], "OK");
  EXPECT_EQ(parts[3], "left:");
}

}  // namespace
}  // namespace onehpc::nfs
