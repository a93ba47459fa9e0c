// The storage role's CernVM-FS proxy configuration checked by the real `squid -k parse`
// (Debian package squid). The rendered file is written to a temporary directory and given
// with -f: the host's /etc/squid is never read or changed. Then the real squid runs it in a
// private network namespace, with HTTP servers there standing in for a stratum-1, this VM
// and a metadata service: only CernVM-FS traffic to the configured servers gets through.
// Skipped when squid is not installed (and the access test without root or curl).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "roles/os/process.h"
#include "roles/squid/cvmfs_proxy.h"
#include "tests/integration/loop_devices.h"

namespace onehpc {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class SquidParseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveProgram("squid")) GTEST_SKIP() << "squid missing (Debian package squid)";
    char tmpl[] = "/tmp/onehpc-squid.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string WriteConf(const std::string& content) {
    std::string path = dir_ + "/squid.conf";
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string dir_;
  RealProcessRunner runner_;
};

TEST_F(SquidParseTest, RenderedConfigurationIsAccepted) {
  for (const auto& nets : std::vector<std::vector<std::string>>{
           {"10.1.0.0/24"}, {"10.1.0.0/24", "172.16.0.0/12", "192.168.7.0/24"}}) {
    squid::SquidConfig config;
    config.nets = nets;
    config.destinations = {".eessi.science", ".eessi-infra.org", "cvmfs.example.org"};
    auto s = squid::ParseCheck(runner_, WriteConf(squid::RenderSquidConf(config)));
    EXPECT_TRUE(s) << (s ? "" : s.error().message);
  }
}

TEST_F(SquidParseTest, RenderedConfigurationGivesNoWarnings) {
  squid::SquidConfig config;
  config.nets = {"10.1.0.0/24"};
  config.destinations = {".eessi.science"};
  Command c;
  c.argv = {"squid", "-k", "parse", "-f", WriteConf(squid::RenderSquidConf(config))};
  c.timeout = Duration(30000);
  auto r = runner_.Run(c);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0) << r->err;
  for (const char* word : {"WARNING", "ERROR", "FATAL", "UPGRADE"}) {
    EXPECT_THAT(r->err + r->out, ::testing::Not(HasSubstr(word))) << r->err;
  }
}

TEST_F(SquidParseTest, BrokenConfigurationIsRejectedWithSquidsMessage) {
  squid::SquidConfig config;
  config.nets = {"10.1.0.0/33"};  // what a bad value would give if it got past the settings
  config.destinations = {".eessi.science"};
  auto s = squid::ParseCheck(runner_, WriteConf(squid::RenderSquidConf(config)));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(s.error().message, HasSubstr("squid -k parse rejected"));
  EXPECT_THAT(s.error().message, HasSubstr("10.1.0.0/33"));
}

TEST_F(SquidParseTest, MissingSquidIsAClearError) {
  auto s = squid::ParseCheck(runner_, dir_ + "/does-not-exist.conf");
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("does-not-exist.conf"));
}

// squid itself, in a private network namespace. The names resolve through squid's hosts_file:
// s1.eessi.science to 10.200.0.2 (a stratum-1), evil.eessi.science to 127.0.0.1 (this VM),
// meta.eessi.science to 169.254.169.254 (a cloud's metadata service); an HTTP server answers
// on every address of the namespace, on ports 80 and 8000.
class SquidAccessTest : public SquidParseTest {
 protected:
  void SetUp() override {
    SquidParseTest::SetUp();
    if (IsSkipped()) return;
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespace)";
    for (const char* p : {"ip", "curl", "python3"}) {
      if (!testing::HaveProgram(p)) GTEST_SKIP() << p << " missing";
    }
    ns_ = "onehpc-squid-" + std::to_string(::getpid());
    ASSERT_TRUE(Ok({"ip", "netns", "add", ns_}));
    ASSERT_TRUE(InNs({"ip", "link", "set", "lo", "up"}));
    for (const char* a : {"10.200.0.2/32", "10.1.0.5/32", "10.9.0.5/32", "169.254.169.254/32"}) {
      ASSERT_TRUE(InNs({"ip", "addr", "add", a, "dev", "lo"}));
    }
    ::chmod(dir_.c_str(), 0777);  // squid drops to its own user for its logs
    fs::create_directories(dir_ + "/www");
    std::ofstream(dir_ + "/www/index.html") << "served\n";
    std::ofstream(dir_ + "/hosts") << "10.200.0.2 s1.eessi.science\n127.0.0.1 evil.eessi.science\n"
                                      "169.254.169.254 meta.eessi.science\n";
    for (const char* port : {"80", "8000"}) {
      Spawn({"python3", "-m", "http.server", port, "--bind", "0.0.0.0", "--directory",
             dir_ + "/www"});
    }
    squid::SquidConfig config;
    config.nets = {"10.1.0.0/24"};
    config.destinations = {".eessi.science"};
    std::string conf = squid::RenderSquidConf(config);
    // Only what a daemon in a test directory needs changes: where it listens, its files, no
    // disk cache, names from hosts_file only.
    Replace(conf, "http_port 3128", "http_port 10.1.0.1:3128\nhttp_port 127.0.0.1:3128");
    Replace(conf, "cache_dir ufs /var/spool/squid 20000 16 256\n", "");
    Replace(conf, "coredump_dir /var/spool/squid", "coredump_dir " + dir_);
    conf += "pid_filename " + dir_ + "/squid.pid\naccess_log " + dir_ + "/access.log\ncache_log " +
            dir_ + "/cache.log\nhosts_file " + dir_ +
            "/hosts\ndns_nameservers 127.0.0.1\nshutdown_lifetime 1 seconds\n";
    ASSERT_TRUE(InNs({"ip", "addr", "add", "10.1.0.1/32", "dev", "lo"}));
    std::string path = WriteConf(conf);
    ASSERT_TRUE(squid::ParseCheck(runner_, path));
    Spawn({"squid", "-N", "-f", path});
    // Until squid and the stand-in stratum-1 both answer (or 20 s).
    for (int i = 0; i < 100 && Code("http://s1.eessi.science/", "10.1.0.5") != "200"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    if (!ns_.empty()) Ok({"ip", "netns", "del", ns_});
    SquidParseTest::TearDown();
  }
  static void Replace(std::string& text, const std::string& from, const std::string& to) {
    auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  }
  bool Ok(std::vector<std::string> argv) {
    Command c;
    c.argv = std::move(argv);
    c.timeout = Duration(20000);
    auto r = runner_.Run(c);
    return r && r->ok();
  }
  bool InNs(std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_});
    return Ok(std::move(argv));
  }
  void Spawn(std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_});
    pid_t pid = ::fork();
    if (pid == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    children_.push_back(pid);
  }
  // The HTTP status squid gives a client at `source` for `url` ("000": no answer).
  std::string Code(const std::string& url, const std::string& source,
                   const std::string& extra = "") {
    Command c;
    c.argv = {"ip",
              "netns",
              "exec",
              ns_,
              "curl",
              "-s",
              "-o",
              "/dev/null",
              "--max-time",
              "10",
              "-w",
              extra.empty() ? "%{http_code}" : extra,
              "--interface",
              source,
              "-x",
              "http://10.1.0.1:3128",
              url};
    if (!extra.empty()) c.argv.insert(c.argv.begin() + 5, "-p");
    c.timeout = Duration(20000);
    auto r = runner_.Run(c);
    return r ? r->out : "error";
  }
  std::string ns_;
  std::vector<pid_t> children_;
};

TEST_F(SquidAccessTest, OnlyCernVmFsServersOverHttpForTheComputeNetwork) {
  EXPECT_EQ(Code("http://s1.eessi.science/", "10.1.0.5"), "200");
  EXPECT_EQ(Code("http://s1.eessi.science:8000/", "10.1.0.5"), "200");
  // Refused, although an HTTP server answers each of them.
  EXPECT_EQ(Code("http://10.200.0.2/", "10.1.0.5"), "403") << "an address, not a listed server";
  EXPECT_EQ(Code("http://127.0.0.1:8000/", "10.1.0.5"), "403") << "this VM";
  EXPECT_EQ(Code("http://evil.eessi.science/", "10.1.0.5"), "403") << "a listed name for this VM";
  EXPECT_EQ(Code("http://meta.eessi.science/", "10.1.0.5"), "403") << "link-local";
  EXPECT_EQ(Code("http://169.254.169.254/", "10.1.0.5"), "403") << "link-local";
  EXPECT_EQ(Code("http://s1.eessi.science:22/", "10.1.0.5"), "403") << "another port";
  EXPECT_EQ(Code("https://s1.eessi.science/", "10.1.0.5", "%{http_connect}"), "403") << "CONNECT";
  EXPECT_EQ(Code("http://s1.eessi.science/", "10.9.0.5"), "403") << "not the compute network";
}

}  // namespace
}  // namespace onehpc
