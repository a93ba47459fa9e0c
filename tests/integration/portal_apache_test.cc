// The portal's login on the real Debian Apache: a forked child enters private mount and
// network namespaces (only 127.0.0.1, a tmpfs copy of /etc, tmpfs over /run and Apache's
// state), creates local accounts with the real useradd and chpasswd, runs the role's own code
// (certificate, pwauth's PAM stack, the users file, a2enmod, ood_portal.yml), builds
// the virtual host from ood_portal.yml the way Open OnDemand's generator does (ssl lines and
// custom_vhost_directives in the <VirtualHost *:443>, auth lines in the protected <Location>),
// starts apache2 and logs in with curl. Nothing on the host is read for writing or changed. Root
// only.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "roles/ood/certificate.h"
#include "roles/ood/ood_yaml.h"
#include "roles/ood/portal_login.h"
#include "roles/ood/settings.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/os/systemd.h"
#include "roles/plan.h"
#include "roles/portal.h"
#include "roles/role.h"
#include "tests/fakes/block_devices.h"
#include "tests/fakes/http.h"
#include "tests/fakes/mounts.h"
#include "tests/fakes/ood_portal_generator.h"
#include "tests/integration/loop_devices.h"

namespace onehpc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kServer[] = "127.0.0.1";
constexpr char kAlicePw[] = "Wonderland-42";
constexpr char kBobPw[] = "Builder-4242";
constexpr char kMalloryPw[] = "Mallory-4242";  // a local account that is not listed
constexpr char kMarker[] = "one-hpc portal test page";

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

Command Cmd60(std::vector<std::string> argv) {
  Command c;
  c.argv = std::move(argv);
  c.timeout = Duration(60000);
  return c;
}

// Everything below runs in the child, in its own namespaces; each check appends a line
// "PASS what" or "FAIL what: detail" to `report`.
class Child {
 public:
  explicit Child(std::string dir) : dir_(std::move(dir)), report_(dir_ + "/report") {}

  int Run() {
    if (::unshare(CLONE_NEWNS | CLONE_NEWNET) != 0) return Bad("unshare"), 2;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return Bad("mount --make-rprivate /"), 2;
    }
    // A private /etc (a copy), and empty /run and Apache state: the host's stay untouched.
    for (const char* d : {"/etc", "/var/lib/apache2"}) {
      const std::string copy = dir_ + "/copy" + d;
      fs::create_directories(copy);
      if (::mount("tmpfs", copy.c_str(), "tmpfs", 0, "mode=0755") != 0 ||
          !Cmd({"cp", "-a", std::string(d) + "/.", copy}) ||
          ::mount(copy.c_str(), d, nullptr, MS_BIND, nullptr) != 0) {
        return Bad(std::string("private copy of ") + d), 2;
      }
    }
    for (const char* d : {"/run", "/var/log/apache2", "/var/lib/one-hpc", "/var/www"}) {
      fs::create_directories(d);
      if (::mount("tmpfs", d, "tmpfs", 0, "mode=0755") != 0) {
        return Bad(std::string("tmpfs on ") + d), 2;
      }
    }
    fs::create_directories("/run/lock");  // /var/lock: apache2ctl's lock directory
    if (!Cmd({"ip", "link", "set", "lo", "up"})) return Bad("lo up"), 2;

    // Local accounts, as the portal role makes them (real useradd and chpasswd).
    for (const auto& [name, pw] : std::vector<std::pair<std::string, std::string>>{
             {"alice", kAlicePw}, {"bob", kBobPw}, {"mallory", kMalloryPw}, {"root", kBobPw}}) {
      if (name != "root" && !Cmd({"useradd", "-M", "-s", "/bin/bash", name})) {
        return Bad("useradd " + name), 2;
      }
      Command c;
      c.argv = {"chpasswd"};
      c.stdin_data = name + ":" + pw + "\n";
      if (!RunChecked(runner_, c)) return Bad("chpasswd " + name), 2;
    }

    if (auto s = RoleFiles(); !s) return Bad("the role's files: " + s.error().message), 2;
    if (auto s = BuildVirtualHost(); !s) return Bad("virtual host: " + s.error().message), 2;
    WriteFile("/var/www/ood-test/pun/sys/dashboard/index.html", std::string(kMarker) + "\n");

    auto t = runner_.Run(Cmd60({"apache2ctl", "-t"}));
    Check(t && t->exit_code == 0, "apache2ctl -t accepts the configuration",
          t ? t->err : t.error().message);
    auto start = runner_.Run(Cmd60({"apache2ctl", "start"}));
    if (!start || start->exit_code != 0) {
      Bad("apache2ctl start: " + (start ? start->err : start.error().message) +
          Slurp("/var/log/apache2/error.log"));
      return 1;
    }
    Checks();
    runner_.Run(Cmd60({"apache2ctl", "stop"}));
    return 0;
  }

 private:
  bool Cmd(std::vector<std::string> argv) {
    auto r = RunChecked(runner_, Cmd60(std::move(argv)));
    if (!r) Bad(r.error().message);
    return r.has_value();
  }
  void Append(const std::string& line) { std::ofstream(report_, std::ios::app) << line << "\n"; }
  void Bad(const std::string& what) { Append("FAIL " + what); }
  void Check(bool ok, const std::string& what, const std::string& detail = "") {
    Append((ok ? "PASS " : "FAIL ") + what + (ok || detail.empty() ? "" : ": " + detail));
  }

  // The portal role's code, on this (private) machine.
  Status RoleFiles() {
    LoadedContext context;
    context.vars = {{ood::kNfsHost, "127.0.0.1"}};
    auto settings = Settings::Resolve(MakePortalRole()->Settings(), context.vars);
    if (!settings) return onehpc::Fail(settings.error());
    Files files("");
    SystemctlSystemd systemd(runner_);
    fakes::FakeBlockDevices disks;
    fakes::FakeMounts mounts;
    RealClock clock;
    fakes::NoHttp http;
    Plan plan(PlanMode::kApply);
    SystemAdapters sys{runner_, files, systemd, disks, mounts, clock, http};
    RoleEnv env = RoleEnv::From(context, *settings, nullptr, sys, plan);
    if (auto s = ood::EnsurePortalCertificate(env, kServer, kServer, ood::kPortalStateDir); !s)
      return s;
    std::vector<ood::LocalUser> users = {ood::LocalUser{"alice", kAlicePw},
                                         ood::LocalUser{"bob", kBobPw}};
    if (auto s = ood::EnsurePortalLogin(env, users); !s) return s;
    return ood::WriteOodConfig(env, kServer, {});
  }

  // What ood-portal-generator makes of ood_portal.yml (the stand-in of
  // tests/fakes/ood_portal_generator.h), bound to the namespace's loopback.
  Status BuildVirtualHost() {
    std::string vhost = fakes::OodLoginVirtualHost(
        YAML::LoadFile(std::string(ood::kOodConfigDir) + "/ood_portal.yml"), kServer,
        "/var/www/ood-test");
    WriteFile("/etc/apache2/sites-available/ood-portal.conf", vhost);
    fs::remove("/etc/apache2/sites-enabled/000-default.conf");
    std::error_code ec;
    fs::create_symlink("../sites-available/ood-portal.conf",
                       "/etc/apache2/sites-enabled/ood-portal.conf", ec);
    // Open OnDemand's portal listens on 443 only; here on the namespace's loopback.
    WriteFile("/etc/apache2/ports.conf", fmt::format("Listen {}:443 https\n", kServer));
    if (ec) return onehpc::Fail(ErrorKind::kIo, ec.message());
    return Ok();
  }

  struct Answer {
    int curl_exit = -1;
    std::string code;
    std::string body;
    double seconds = 0;
  };
  // curl with the role's certificate as the only trust anchor; the credentials go in a
  // config on stdin (never on the command line).
  Answer Get(const std::string& user, const std::string& password) {
    Command c;
    c.argv = {"curl",
              "-sS",
              "--max-time",
              "30",
              "--cacert",
              fmt::format("{}/{}.crt", ood::kOodSslDir, kServer),
              "-o",
              dir_ + "/body",
              "-w",
              "%{http_code}",
              "-K",
              "-",
              fmt::format("https://{}/pun/sys/dashboard/", kServer)};
    if (!user.empty()) c.stdin_data = fmt::format("user = \"{}:{}\"\n", user, password);
    c.timeout = Duration(40000);
    auto t0 = std::chrono::steady_clock::now();
    auto r = runner_.Run(c);
    Answer a;
    a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) return a;
    a.curl_exit = r->exit_code;
    a.code = r->out;
    a.body = Slurp(dir_ + "/body");
    fs::remove(dir_ + "/body");
    return a;
  }

  void Checks() {
    auto anon = Get("", "");
    Check(anon.curl_exit == 0 && anon.code == "401",
          "HTTPS answers with the role's certificate (curl trusts only it); no credentials: 401",
          fmt::format("curl exit {}, HTTP {}", anon.curl_exit, anon.code));
    auto alice = Get("alice", kAlicePw);
    Check(alice.code == "200" && alice.body.find(kMarker) != std::string::npos,
          "a listed user's right password reaches the protected location",
          "HTTP " + alice.code + Slurp("/var/log/apache2/error.log"));
    auto wrong = Get("alice", "Not-her-password");
    Check(wrong.code == "401", "a wrong password gets 401", "HTTP " + wrong.code);
    Check(wrong.seconds >= 1.5, "a wrong password is slowed (>= 1.5 s)",
          fmt::format("{:.2f} s", wrong.seconds));
    auto mallory = Get("mallory", kMalloryPw);
    Check(mallory.code == "401", "an unlisted local account is refused with its right password",
          "HTTP " + mallory.code);
    auto root = Get("root", kBobPw);
    Check(root.code == "401", "root is refused with its right password", "HTTP " + root.code);
    for (int i = 0; i < ood::kLoginDeny; ++i) Get("bob", "guess-" + std::to_string(i));
    auto locked = Get("bob", kBobPw);
    Check(locked.code == "401",
          fmt::format("after {} wrong passwords bob is locked out, even with the right one",
                      ood::kLoginDeny),
          "HTTP " + locked.code);
    Cmd({"faillock", "--user", "bob", "--reset"});
    auto unlocked = Get("bob", kBobPw);
    Check(unlocked.code == "200", "faillock --reset lets bob in again", "HTTP " + unlocked.code);
  }

  std::string dir_;
  std::string report_;
  RealProcessRunner runner_;
};

class PortalApacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "namespaces and accounts need root";
    for (const char* p : {"apache2ctl", "a2enmod", "curl", "useradd", "faillock"}) {
      if (!testing::HaveProgram(p)) GTEST_SKIP() << p << " missing";
    }
    for (const char* f : {"/usr/sbin/pwauth", "/usr/lib/apache2/modules/mod_authnz_external.so"}) {
      if (!fs::exists(f)) GTEST_SKIP() << f << " missing (pwauth, libapache2-mod-authnz-external)";
    }
    char tmpl[] = "/tmp/onehpc-apache.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(PortalApacheTest, ListedUsersLogInOthersAreRefusedAndGuessingLocksOut) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(Child(dir_).Run());
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string report = Slurp(dir_ + "/report");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << report;
  EXPECT_THAT(report, Not(HasSubstr("FAIL"))) << report;
  size_t passes = 0;
  for (size_t at = report.find("PASS "); at != std::string::npos;
       at = report.find("PASS ", at + 1)) {
    ++passes;
  }
  EXPECT_EQ(passes, 9u) << report;
  std::cout << report;
}

}  // namespace
}  // namespace onehpc
