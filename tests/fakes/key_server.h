// The controller's key server for role tests: the real DecideKeyRequest, reading the
// requesting VM from the OneGate simulator with the controller's own token, as
// `one-hpc key-serve` does, but without a socket (the peer address is set by the test).
#ifndef ONEHPC_TESTS_FAKES_KEY_SERVER_H_
#define ONEHPC_TESTS_FAKES_KEY_SERVER_H_

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/base64.h"
#include "context/onegate.h"
#include "roles/names.h"
#include "roles/os/tcp.h"
#include "roles/slurm/key_delivery.h"
#include "tests/fakes/onegate_sim.h"

namespace onehpc::fakes {

class FakeKeyServer : public LineExchange {
 public:
  /// Serves `munge_key` as VM `controller` at `addr`; requests seem to come from `peer_ip`.
  FakeKeyServer(sim::OneGateSimulator& sim, const sim::VmHandle& controller, std::string addr,
                std::string munge_key, std::string peer_ip, HttpTransport& http, Clock& clock)
      : sim_(sim),
        controller_(controller),
        addr_(std::move(addr)),
        http_(http),
        clock_(clock),
        peer_ip(std::move(peer_ip)) {
    auto pair = slurm::NewBoxKeyPair();
    EXPECT_TRUE(pair);
    if (pair) secrets_.server = *pair;
    secrets_.munge_key = std::move(munge_key);
  }

  /// What the controller publishes about its key server, as PublishController does.
  std::vector<std::pair<std::string, std::string>> Published() const {
    return {{slurm::kAttrKeyServerPublicKey, Base64Encode(secrets_.server.public_key)},
            {slurm::kAttrMungeKeyId, slurm::MungeKeyId(secrets_.munge_key)}};
  }
  /// Publishes them in the simulator.
  void Publish() {
    for (const auto& [k, v] : Published()) EXPECT_TRUE(sim_.SetUserAttr(controller_.id, k, v));
  }
  /// A new munge key (a rotation), published.
  void Rotate(std::string munge_key) {
    secrets_.munge_key = std::move(munge_key);
    Publish();
  }
  /// A new munge key served before its id is published (a rotation under way: the controller
  /// writes the key and restarts slurmctld before it publishes the id).
  void RotateUnpublished(std::string munge_key) { secrets_.munge_key = std::move(munge_key); }

  Result<std::string> Exchange(const std::string& ipv4, int port, const std::string& line, Duration,
                               size_t) override {
    ++requests;
    if (down || requests <= refuse_first || ipv4 != addr_ || port != slurm::kKeyServerPort) {
      return Fail(ErrorKind::kNetwork,
                  "connect to " + ipv4 + ":" + std::to_string(port) + ": Connection refused");
    }
    auto request = slurm::ParseKeyRequest(line);
    if (!request) {
      last_answer = std::string(slurm::kKeyProtocol) + " DENIED " + request.error().message;
      return last_answer;
    }
    OneGateClient client(SimConfig(sim_, controller_), http_, clock_);
    last_answer =
        slurm::DecideKeyRequest(client, *request, peer_ip, slurm::kWorkerRole, secrets_).line;
    if (after_answer) after_answer(requests);
    return last_answer;
  }

  /// The key server's port listens unless `down`.
  Status Listening(const std::string& ipv4, int port, Duration) override {
    if (down || ipv4 != addr_ || port != slurm::kKeyServerPort) {
      return Fail(ErrorKind::kNetwork,
                  "connect to " + ipv4 + ":" + std::to_string(port) + ": Connection refused");
    }
    return Ok();
  }

  int requests = 0;
  bool down = false;
  int refuse_first = 0;  ///< the first requests find no server
  std::string last_answer;
  /// Called with the number of requests so far, after each answer is made.
  std::function<void(int)> after_answer;

 private:
  sim::OneGateSimulator& sim_;
  sim::VmHandle controller_;
  std::string addr_;
  HttpTransport& http_;
  Clock& clock_;
  slurm::KeyServerSecrets secrets_;

 public:
  std::string peer_ip;
};

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_KEY_SERVER_H_
