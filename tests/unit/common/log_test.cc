#include "common/log.h"

#include <gtest/gtest.h>

namespace onehpc {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override { log::ClearSecrets(); }
};

TEST_F(LogTest, RedactsRegisteredSecretsEverywhere) {
  log::AddSecret("s3cr3t-token");
  log::Capture capture;
  log::Info("token is {} and again {}", "s3cr3t-token", "xs3cr3t-tokenx");
  ASSERT_EQ(capture.lines().size(), 1u);
  EXPECT_EQ(capture.lines()[0], "token is <redacted> and again x<redacted>x");
}

TEST_F(LogTest, LongestSecretWinsAndShortOnesAreIgnored) {
  log::AddSecret("abcd");
  log::AddSecret("abcdefgh");
  log::AddSecret("no");  // too short to redact safely
  EXPECT_EQ(log::Redact("abcdefgh abcd no"), "<redacted> <redacted> no");
}

TEST_F(LogTest, OpLogsStartedFinishedFailedAndAbandoned) {
  log::Capture capture;
  {
    log::Op op("mount /export/home");
    op.Finished();
  }
  {
    log::Op op("mkfs /dev/vdb");
    op.Failed(Error{ErrorKind::kProcess, "exit 1"});
  }
  { log::Op op("never finished"); }
  std::string text = capture.text();
  EXPECT_NE(text.find("mount /export/home [started]"), std::string::npos);
  EXPECT_NE(text.find("mount /export/home [finished]"), std::string::npos);
  EXPECT_NE(text.find("mkfs /dev/vdb [failed] exit 1"), std::string::npos);
  EXPECT_NE(text.find("never finished [abandoned]"), std::string::npos);
}

TEST_F(LogTest, QuoteArgvQuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(log::QuoteArgv({"scontrol", "update", "NodeName=n1", "Reason=removed from OneFlow"}),
            "scontrol update NodeName=n1 'Reason=removed from OneFlow'");
  EXPECT_EQ(log::QuoteArgv({"echo", "it's", ""}), "echo 'it'\\''s' ''");
}

}  // namespace
}  // namespace onehpc
