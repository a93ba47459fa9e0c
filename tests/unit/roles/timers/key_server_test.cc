// The key server's answer to one connection, from what configure left: no answer without a
// request, DENIED for anything but a request, RETRY until the munge key, the key pair and
// OneGate are there (OneGate asked only then). The socket and OneGate's decision: the real
// program in tests/integration/key_delivery_test.cc.
#include "roles/timers/key_server.h"

#include <gtest/gtest.h>

#include "roles/names.h"
#include "tests/fakes/machine.h"

namespace onehpc {
namespace {

class KeyServerTest : public ::testing::Test {
 protected:
  void PutKeys() {
    machine_.Write(slurm::kMungeKeyPath, std::string(128, 'm'));
    auto pair = slurm::NewBoxKeyPair();
    ASSERT_TRUE(pair) << pair.error().message;
    machine_.Write(slurm::kKeyServerKeyPath, pair->secret_key + pair->public_key);
  }
  slurm::KeyAnswer Serve(const Result<std::string>& line) {
    return ServeKeyRequest(*machine_.files, line, "10.0.0.7", [this] {
      ++opened_;
      return KeyServerOneGate{nullptr, "no OneGate in this test"};
    });
  }
  static std::string Request() {
    return slurm::FormatKeyRequest({7, std::string(slurm::kBoxNonceBytes, 'n')});
  }

  fakes::FakeMachine machine_;
  int opened_ = 0;
};

TEST_F(KeyServerTest, NoRequestGetsNoAnswer) {
  PutKeys();
  auto a = Serve(Fail(ErrorKind::kNetwork, "timed out"));
  EXPECT_FALSE(a.granted);
  EXPECT_EQ(a.line, "");
  EXPECT_EQ(a.log, "no request: timed out");
  EXPECT_EQ(opened_, 0);
}

TEST_F(KeyServerTest, AnythingButARequestIsDeniedAndOneGateNotAsked) {
  PutKeys();
  auto a = Serve(std::string("GET / HTTP/1.0"));
  EXPECT_FALSE(a.granted);
  EXPECT_EQ(a.line.rfind("ONEHPC-MUNGE/1 DENIED ", 0), 0u) << a.line;
  EXPECT_EQ(opened_, 0);
}

TEST_F(KeyServerTest, BeforeConfigureMadeTheKeysTheWorkerIsToldToRetry) {
  auto a = Serve(Request());
  EXPECT_EQ(a.line, "ONEHPC-MUNGE/1 RETRY the controller has no munge key yet");
  machine_.Write(slurm::kMungeKeyPath, std::string(8, 'm'));  // not a munge key: too short
  a = Serve(Request());
  EXPECT_EQ(a.line, "ONEHPC-MUNGE/1 RETRY the controller has no munge key yet");
  machine_.Write(slurm::kMungeKeyPath, std::string(128, 'm'));
  a = Serve(Request());
  EXPECT_EQ(a.line, "ONEHPC-MUNGE/1 RETRY the key server has no key pair yet");
  EXPECT_FALSE(a.granted);
  EXPECT_EQ(opened_, 0);
}

TEST_F(KeyServerTest, WithTheKeysOneGateIsAskedAndItsAbsenceMeansRetry) {
  PutKeys();
  auto a = Serve(Request());
  EXPECT_FALSE(a.granted);
  EXPECT_EQ(a.line, "ONEHPC-MUNGE/1 RETRY no OneGate in this test");
  EXPECT_EQ(opened_, 1);
}

}  // namespace
}  // namespace onehpc
