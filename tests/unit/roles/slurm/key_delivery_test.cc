// The munge key's delivery: requests, the server's decision, the worker's checks.
#include "roles/slurm/key_delivery.h"

#include <gtest/gtest.h>

#include <map>

#include "common/base64.h"
#include "roles/names.h"
#include "tests/fakes/clock.h"
#include "tests/fakes/onegate_sim.h"

namespace onehpc::slurm {
namespace {

class KeyDeliveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = NewBoxKeyPair().value();
    worker_ = NewBoxKeyPair().value();
    other_ = NewBoxKeyPair().value();
    secrets_.munge_key = std::string(128, 'm');
    secrets_.server = server_;
    vms_[3] = Vm(3, "controller", "10.0.0.5", other_);
    vms_[7] = Vm(7, "worker", "10.0.0.7", worker_);
    vms_[8] = Vm(8, "worker", "10.0.0.8", other_);
    request_ = {7, std::string(kBoxNonceBytes, 'n')};
  }
  // A VM as GET /vms/<id> shows it to the key server.
  static VmInfo Vm(int id, const std::string& role, const std::string& ip, const BoxKeyPair& pair) {
    VmInfo vm;
    vm.id = id;
    VmNic nic;
    nic.ip = ip;
    vm.nics.push_back(nic);
    vm.user_template["ROLE_NAME"] = role;
    vm.user_template[kAttrWorkerPublicKey] = Base64Encode(pair.public_key);
    return vm;
  }
  KeyAnswer Answer(const KeyRequest& r, const std::string& peer, const KeyServerSecrets& secrets) {
    return AnswerKeyRequest(r, peer, vms_[r.vm_id], "worker", secrets);
  }
  Result<std::string> Open(const KeyAnswer& answer, const BoxKeyPair& me) {
    return OpenKeyAnswer(answer.line, request_, me, server_.public_key,
                         MungeKeyId(secrets_.munge_key));
  }

  BoxKeyPair server_, worker_, other_;
  KeyServerSecrets secrets_;
  std::map<int, VmInfo> vms_;
  KeyRequest request_;
};

TEST_F(KeyDeliveryTest, RequestsRoundTripAndBadOnesAreRefused) {
  auto parsed = ParseKeyRequest(FormatKeyRequest(request_));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->vm_id, 7);
  EXPECT_EQ(parsed->nonce, request_.nonce);
  for (const std::string& bad : std::vector<std::string>{
           "", "GET / HTTP/1.0", "ONEHPC-MUNGE/1 7", "ONEHPC-MUNGE/1 x7 bm9uY2U=",
           "ONEHPC-MUNGE/1 1234567890 " + Base64Encode(request_.nonce),
           "ONEHPC-MUNGE/1 7 " + Base64Encode("short"),
           "ONEHPC-MUNGE/2 7 " + Base64Encode(request_.nonce)}) {
    EXPECT_FALSE(ParseKeyRequest(bad)) << bad;
  }
}

TEST_F(KeyDeliveryTest, OnlyTheWorkerOpensItsBoxAndGetsTheKey) {
  auto answer = Answer(request_, "10.0.0.7", secrets_);
  ASSERT_TRUE(answer.granted) << answer.line;
  EXPECT_EQ(answer.line.find(Base64Encode(secrets_.munge_key)), std::string::npos);
  EXPECT_EQ(answer.log.find(Base64Encode(secrets_.munge_key)), std::string::npos);
  auto key = Open(answer, worker_);
  ASSERT_TRUE(key) << key.error().message;
  EXPECT_EQ(*key, secrets_.munge_key);
  // Anyone else who records the answer, with any other secret key, cannot open it.
  auto stolen = Open(answer, other_);
  ASSERT_FALSE(stolen);
  EXPECT_EQ(stolen.error().kind, ErrorKind::kInvalidInput);
  // A recorded answer is useless for another request (another nonce).
  KeyRequest later{7, std::string(kBoxNonceBytes, 'N')};
  EXPECT_FALSE(OpenKeyAnswer(answer.line, later, worker_, server_.public_key,
                             MungeKeyId(secrets_.munge_key)));
  // A box from anyone but the published server does not open.
  KeyServerSecrets impostor = secrets_;
  impostor.server = other_;
  auto forged = Answer(request_, "10.0.0.7", impostor);
  auto opened = Open(forged, worker_);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.error().message.find("does not open"), std::string::npos);
  // A key that is not the one whose id the controller publishes is refused, as a try-again: the
  // box proves the controller made it, so its key is newer than the id read (a rotation).
  auto other_id = OpenKeyAnswer(answer.line, request_, worker_, server_.public_key,
                                MungeKeyId(std::string(128, 'x')));
  ASSERT_FALSE(other_id);
  EXPECT_EQ(other_id.error().kind, ErrorKind::kNetwork);
  EXPECT_EQ(forged.line.rfind("ONEHPC-MUNGE/1 OK ", 0), 0u);
  EXPECT_EQ(opened.error().kind, ErrorKind::kInvalidInput);  // an impostor's: never retried
}

TEST_F(KeyDeliveryTest, ForgedRequestsAreDenied) {
  struct Case {
    int vm_id;
    std::string peer;
    std::string why;
  };
  for (const auto& c : std::vector<Case>{
           {3, "10.0.0.5", "VM 3 is not a node of role 'worker' (its ROLE_NAME is 'controller')"},
           {7, "10.0.0.8", "the request came from 10.0.0.8, which is no address of VM 7"},
           {7, "192.0.2.1", "the request came from 192.0.2.1, which is no address of VM 7"}}) {
    KeyRequest r{c.vm_id, request_.nonce};
    auto answer = Answer(r, c.peer, secrets_);
    EXPECT_FALSE(answer.granted) << c.why;
    EXPECT_NE(answer.line.find("ONEHPC-MUNGE/1 DENIED " + c.why), std::string::npos) << answer.line;
    auto opened = OpenKeyAnswer(answer.line, r, worker_, server_.public_key, "");
    ASSERT_FALSE(opened);
    EXPECT_EQ(opened.error().kind, ErrorKind::kInvalidInput);  // permanent: not retried
  }
  vms_[7].user_template.erase(kAttrWorkerPublicKey);
  auto none = Answer(request_, "10.0.0.7", secrets_);
  EXPECT_NE(none.line.find("VM 7 publishes no SLURM_WORKER_PUBKEY"), std::string::npos);
  vms_[7].user_template[kAttrWorkerPublicKey] = "bm9wZQ==";
  auto bad = Answer(request_, "10.0.0.7", secrets_);
  EXPECT_NE(bad.line.find("is not the base64 of a 32-byte public key"), std::string::npos);
}

// The key server reads the requesting VM alone (one GET /vms/<id>, whatever the size of the
// service); OneGate refusing to show it (a VM of another service) is a denial, OneGate down a
// try-again.
TEST_F(KeyDeliveryTest, TheServerReadsTheRequestingVmAlone) {
  sim::OneGateSimulator sim;
  ASSERT_GT(sim.Start(), 0);
  int service =
      sim.CreateService("OneSlurm", {fakes::SimRole("controller", 1), fakes::SimRole("worker", 1)});
  int other = sim.CreateService("Other", {fakes::SimRole("worker", 1)});
  sim::VmSpec spec;
  spec.nics.push_back(fakes::SimNic("10.0.0.5", "service"));
  auto ctl = sim.AddVm(service, "controller", spec);
  spec.nics[0] = fakes::SimNic("10.0.0.7", "service");
  spec.user_template = {{kAttrWorkerPublicKey, Base64Encode(worker_.public_key)}};
  auto worker = sim.AddVm(service, "worker", spec);
  for (int i = 0; i < 20; ++i) sim.AddVm(service, "worker", sim::VmSpec{});
  auto stranger = sim.AddVm(other, "worker", spec);
  CurlTransport http;
  fakes::FakeClock clock;
  OneGateClient client(fakes::SimConfig(sim, ctl), http, clock);
  sim.ClearRequests();
  auto granted =
      DecideKeyRequest(client, {worker.id, request_.nonce}, "10.0.0.7", "worker", secrets_);
  EXPECT_TRUE(granted.granted) << granted.line;
  auto requests = sim.Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].path, "/vms/" + std::to_string(worker.id));
  auto denied =
      DecideKeyRequest(client, {stranger.id, request_.nonce}, "10.0.0.7", "worker", secrets_);
  EXPECT_FALSE(denied.granted);
  EXPECT_NE(denied.line.find("DENIED VM " + std::to_string(stranger.id) +
                             " is not a VM of this service (OneGate: HTTP 400)"),
            std::string::npos)
      << denied.line;
  sim::Fault down = fakes::SimFault(sim::FaultKind::kStatus, 503, "down");
  down.path_prefix = "/vms/";
  sim.InjectFault(down);
  auto later =
      DecideKeyRequest(client, {worker.id, request_.nonce}, "10.0.0.7", "worker", secrets_);
  EXPECT_FALSE(later.granted);
  EXPECT_EQ(later.line.rfind("ONEHPC-MUNGE/1 RETRY the controller cannot read VM ", 0), 0u)
      << later.line;
}

TEST_F(KeyDeliveryTest, RetryIsTransient) {
  auto opened =
      OpenKeyAnswer(RetryAnswer("OneGate is down").line, request_, worker_, server_.public_key, "");
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().kind, ErrorKind::kNetwork);
  EXPECT_NE(opened.error().message.find("OneGate is down"), std::string::npos);
  EXPECT_EQ(OpenKeyAnswer("HTTP/1.1 400 Bad Request", request_, worker_, server_.public_key, "")
                .error()
                .kind,
            ErrorKind::kNetwork);
}

TEST_F(KeyDeliveryTest, KeyIdIdentifiesWithoutRevealing) {
  std::string id = MungeKeyId(secrets_.munge_key);
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(id, MungeKeyId(std::string(128, 'm')));
  EXPECT_NE(id, MungeKeyId(std::string(128, 'n')));
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace onehpc::slurm
