// The storage role's CernVM-FS proxy configuration checked by the real `squid -k parse`
// (Debian package squid). The rendered file is written to a temporary directory and given
// with -f: the host's /etc/squid is never read or changed, and no daemon is started (parse
// only reads the file). Skipped when squid is not installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
    auto s = squid::ParseCheck(runner_, WriteConf(squid::RenderSquidConf(config)));
    EXPECT_TRUE(s) << (s ? "" : s.error().message);
  }
}

TEST_F(SquidParseTest, RenderedConfigurationGivesNoWarnings) {
  squid::SquidConfig config;
  config.nets = {"10.1.0.0/24"};
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

}  // namespace
}  // namespace onehpc
