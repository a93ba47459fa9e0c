// OneGateClient + CurlTransport against the in-process OneGate simulator over real HTTP on
// 127.0.0.1: every client path and every fault kind. Backoff sleeps go to a fakes::FakeClock; the
// only real waiting comes from the (short) per-request timeouts.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "context/http.h"
#include "context/onegate.h"
#include "tests/fakes/clock.h"
#include "tests/simulator/onegate_simulator.h"

namespace onehpc {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr char kAdminPassword[] = "adm1n-pa55word-xyz";
/// Total request timeout of the tests about timeouts: the only real waiting in this file.
constexpr milliseconds kShortTimeout{300};

sim::NicSpec Nic(const std::string& ip, const std::string& network) {
  sim::NicSpec nic;
  nic.ip = ip;
  nic.mac = "02:00:00:00:00:01";
  nic.network = network;
  nic.network_id = "7";
  return nic;
}

sim::RoleSpec Role(const std::string& name, int cardinality) {
  sim::RoleSpec role;
  role.name = name;
  role.cardinality = cardinality;
  role.min_vms = 0;
  role.max_vms = 10;
  role.cooldown_seconds = 30;
  return role;
}

long long MillisSince(steady_clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count();
}

class OneGateClientSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(sim_.Start(), 0);
    service_ = sim_.CreateService("hpc", {Role("head", 1), Role("compute", 2)});
    sim::VmSpec head;
    head.nics = {Nic("172.16.4.10", "hpc-private")};
    head.context = {{"TOKEN", "YES"}, {"ONEAPP_ADMIN_PASSWORD", kAdminPassword}};
    head_ = sim_.AddVm(service_, "head", head);
    sim::VmSpec worker;
    worker.nics = {Nic("172.16.4.21", "hpc-private"), Nic("192.0.2.40", "public")};
    worker1_ = sim_.AddVm(service_, "compute", worker);
    worker.nics = {Nic("", "hpc-private")};  // no IP yet
    worker2_ = sim_.AddVm(service_, "compute", worker);
    ASSERT_GE(head_.id, 0);
    ASSERT_GE(worker1_.id, 0);
    ASSERT_GE(worker2_.id, 0);
  }
  void TearDown() override {
    sim_.Stop();
    log::ClearSecrets();
  }

  OneGateConfig Config(const sim::VmHandle& vm) {
    OneGateConfig c;
    c.endpoint = sim_.Endpoint();
    c.vmid = std::to_string(vm.id);
    c.token = vm.token;
    c.connect_timeout = milliseconds(200);
    // Generous for ordinary requests on a loaded machine; the timeout tests use kShortTimeout.
    c.request_timeout = milliseconds(1000);
    c.retry.initial_delay = milliseconds(100);
    c.retry.multiplier = 2.0;
    c.retry.max_delay = milliseconds(1000);
    c.retry.max_attempts = 4;
    c.retry.deadline = milliseconds(60000);
    c.retry.jitter = 0.0;
    return c;
  }
  OneGateClient Client(const sim::VmHandle& vm) { return OneGateClient(Config(vm), http_, clock_); }
  OneGateClient Client(const OneGateConfig& c) { return OneGateClient(c, http_, clock_); }

  sim::Fault MakeFault(sim::FaultKind kind, const std::string& path, int times) {
    sim::Fault f;
    f.kind = kind;
    f.path_prefix = path;
    f.times = times;
    return f;
  }

  sim::OneGateSimulator sim_;
  CurlTransport http_;
  fakes::FakeClock clock_;
  int service_ = -1;
  sim::VmHandle head_, worker1_, worker2_;
};

// ---- Every client path

TEST_F(OneGateClientSimTest, GetVm) {
  auto client = Client(worker1_);
  auto vm = client.GetVm();
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(vm->id, worker1_.id);
  EXPECT_EQ(vm->state, 3);
  EXPECT_EQ(vm->lcm_state, 3);
  EXPECT_EQ(vm->Attr("ROLE_NAME"), "compute");
  EXPECT_EQ(vm->Attr("SERVICE_ID"), std::to_string(service_));
  ASSERT_EQ(vm->nics.size(), 2u);
  EXPECT_EQ(vm->nics[0].ip, "172.16.4.21");
  EXPECT_EQ(vm->nics[0].network, "hpc-private");
  EXPECT_EQ(vm->nics[1].ip, "192.0.2.40");
  EXPECT_TRUE(vm->context.empty());  // filtered output has no CONTEXT
  auto requests = sim_.Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].path, "/vm");
  EXPECT_EQ(requests[0].vm_id, worker1_.id);
  EXPECT_EQ(requests[0].status, 200);
  EXPECT_EQ(client.requests_sent(), 1);
}

TEST_F(OneGateClientSimTest, GetVmByIdOfPeers) {
  auto client = Client(worker1_);
  auto head = client.GetVmById(head_.id);
  ASSERT_TRUE(head) << head.error().message;
  EXPECT_EQ(head->id, head_.id);
  EXPECT_EQ(head->Attr("ROLE_NAME"), "head");
  ASSERT_EQ(head->nics.size(), 1u);
  EXPECT_EQ(head->nics[0].ip, "172.16.4.10");
  auto late = client.GetVmById(worker2_.id);
  ASSERT_TRUE(late) << late.error().message;
  ASSERT_EQ(late->nics.size(), 1u);
  EXPECT_EQ(late->nics[0].ip, "");
  EXPECT_EQ(sim_.Requests().at(0).path, "/vms/" + std::to_string(head_.id));
}

TEST_F(OneGateClientSimTest, GetVmByIdOutsideTheServiceIsRefusedWithoutRetry) {
  sim::VmHandle lone = sim_.AddVm(-1, "");
  auto client = Client(worker1_);
  auto vm = client.GetVmById(lone.id);
  ASSERT_FALSE(vm);
  EXPECT_NE(vm.error().message.find("GET /vms/" + std::to_string(lone.id) + ": HTTP 400"),
            std::string::npos)
      << vm.error().message;
  EXPECT_EQ(client.requests_sent(), 1);
  EXPECT_EQ(sim_.Requests().size(), 1u);
}

TEST_F(OneGateClientSimTest, UpdateVmSeveralAttributesInOneRequest) {
  auto client = Client(worker1_);
  ASSERT_TRUE(client.UpdateVm(
      {{"READY", "YES"}, {"SLURM_NODENAME", "hpc-w-1"}, {"NOTE", "two words x=y"}}));
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "READY"), "YES");
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "SLURM_NODENAME"), "hpc-w-1");
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "NOTE"), "two words x=y");
  auto requests = sim_.Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "PUT");
  EXPECT_EQ(requests[0].path, "/vm");
  EXPECT_EQ(requests[0].body,
            "data=READY%3DYES%0ASLURM_NODENAME%3Dhpc-w-1%0ANOTE%3Dtwo+words+x%3Dy&type=1");
  // And the client reads back what it wrote.
  auto vm = client.GetVm();
  ASSERT_TRUE(vm);
  EXPECT_EQ(vm->Attr("NOTE"), "two words x=y");
}

TEST_F(OneGateClientSimTest, UpdateVmByIdWritesThePeer) {
  auto client = Client(worker1_);
  ASSERT_TRUE(client.UpdateVmById(head_.id, {{"WORKER_SEEN", "YES"}}));
  EXPECT_EQ(sim_.UserAttr(head_.id, "WORKER_SEEN"), "YES");
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "WORKER_SEEN"), "");
  EXPECT_EQ(sim_.Requests().at(0).path, "/vms/" + std::to_string(head_.id));
}

TEST_F(OneGateClientSimTest, RestrictedAttributeIsAFailureNotRetried) {
  auto client = Client(worker1_);
  auto st = client.UpdateVm({{"ROLE_NAME", "head"}});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message.rfind("PUT /vm: HTTP 403", 0), 0u) << st.error().message;
  EXPECT_EQ(client.requests_sent(), 1);
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "ROLE_NAME"), "compute");
}

TEST_F(OneGateClientSimTest, EraseAndEraseAgain) {
  auto client = Client(worker1_);
  ASSERT_TRUE(client.UpdateVm({{"READY", "YES"}}));
  ASSERT_EQ(sim_.UserAttr(worker1_.id, "READY"), "YES");
  ASSERT_TRUE(client.EraseVmAttribute("READY"));
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "READY"), "");
  EXPECT_EQ(sim_.UserTemplate(worker1_.id).count("READY"), 0u);
  // Already absent: the server says 500 attribute not found; that is success, not retried.
  ASSERT_TRUE(client.EraseVmAttribute("READY"));
  auto requests = sim_.Requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].body, "data=READY&type=2");
  EXPECT_EQ(requests[2].status, 500);
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.sleeps(), 0);
}

TEST_F(OneGateClientSimTest, GetServiceCompact) {
  auto client = Client(worker1_);
  auto service = client.GetService(false);
  ASSERT_TRUE(service) << service.error().message;
  EXPECT_EQ(service->id, std::to_string(service_));
  EXPECT_EQ(service->name, "hpc");
  EXPECT_EQ(service->state, 2);
  const ServiceRole* compute = service->FindRole("compute");
  ASSERT_NE(compute, nullptr);
  EXPECT_EQ(compute->cardinality, 2);
  ASSERT_EQ(compute->nodes.size(), 2u);
  EXPECT_EQ(compute->nodes[0].vm_id, worker1_.id);
  EXPECT_EQ(compute->nodes[1].vm_id, worker2_.id);
  EXPECT_FALSE(compute->nodes[0].vm.has_value());
  EXPECT_FALSE(compute->nodes[0].vm_name.empty());
  auto requests = sim_.Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].path, "/service");
  EXPECT_EQ(requests[0].query, "");
}

TEST_F(OneGateClientSimTest, GetServiceExtendedCarriesPeersButNeverReachesTheLog) {
  log::Capture capture;
  auto client = Client(worker1_);
  auto service = client.GetService(true);
  ASSERT_TRUE(service) << service.error().message;
  const ServiceRole* head = service->FindRole("head");
  ASSERT_NE(head, nullptr);
  ASSERT_EQ(head->nodes.size(), 1u);
  ASSERT_TRUE(head->nodes[0].vm.has_value());
  const VmInfo& vm = *head->nodes[0].vm;
  EXPECT_EQ(vm.id, head_.id);
  EXPECT_EQ(vm.state, 3);
  ASSERT_EQ(vm.nics.size(), 1u);  // NIC as an object in extended output
  EXPECT_EQ(vm.nics[0].ip, "172.16.4.10");
  EXPECT_EQ(vm.context.at("ONEAPP_ADMIN_PASSWORD"), kAdminPassword);
  const ServiceRole* compute = service->FindRole("compute");
  ASSERT_NE(compute, nullptr);
  ASSERT_TRUE(compute->nodes[0].vm.has_value());
  EXPECT_EQ(compute->nodes[0].vm->nics.size(), 2u);  // NIC as an array
  auto requests = sim_.Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].path, "/service");
  EXPECT_EQ(requests[0].query, "extended=true");
  EXPECT_TRUE(capture.Contains("GET /service?extended=true")) << capture.text();
  EXPECT_FALSE(capture.Contains(kAdminPassword)) << capture.text();
  EXPECT_FALSE(capture.Contains(worker1_.token)) << capture.text();
}

TEST_F(OneGateClientSimTest, GetServiceOutsideAnyService) {
  sim::VmHandle lone = sim_.AddVm(-1, "");
  auto client = Client(lone);
  auto service = client.GetService(false);
  ASSERT_FALSE(service);
  EXPECT_EQ(service.error().message, "GET /service: HTTP 400 Empty or invalid SERVICE_ID");
  EXPECT_EQ(client.requests_sent(), 1);
}

TEST_F(OneGateClientSimTest, ScaleRoleThenRefusedDuringCooldown) {
  auto client = Client(worker1_);
  ASSERT_TRUE(client.ScaleRole("compute", 3));
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 3);
  auto requests = sim_.Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "PUT");
  EXPECT_EQ(requests[0].path, "/service/role/compute");
  EXPECT_EQ(requests[0].body, R"({"cardinality":3})");
  // The service is now SCALING/COOLDOWN: OneFlow refuses; 400 is not retried.
  auto again = client.ScaleRole("compute", 4);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().message,
            "PUT /service/role/compute: HTTP 400 Error performing action on service " +
                std::to_string(service_) + " role compute");
  EXPECT_EQ(client.requests_sent(), 2);
  EXPECT_EQ(client.last_failure().status, 400);
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 3);
}

TEST_F(OneGateClientSimTest, ScaleUnknownRoleIsRefused) {
  auto client = Client(worker1_);
  auto st = client.ScaleRole("storage", 1);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("HTTP 400"), std::string::npos);
  EXPECT_EQ(client.requests_sent(), 1);
}

// ---- Faults: what the client does, how many attempts, how long

TEST_F(OneGateClientSimTest, ServerErrorsAreRetriedWithBackoff) {
  sim::Fault f = MakeFault(sim::FaultKind::kStatus, "/vm", 2);
  f.status = 503;
  f.body = "Service Unavailable";
  sim_.InjectFault(f);
  auto client = Client(worker1_);
  auto vm = client.GetVm();
  ASSERT_TRUE(vm) << vm.error().message;
  auto requests = sim_.Requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].status, 503);
  EXPECT_EQ(requests[2].status, 200);
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.slept(), milliseconds(100 + 200));
}

TEST_F(OneGateClientSimTest, PersistentServerErrorGivesUp) {
  sim::Fault f = MakeFault(sim::FaultKind::kStatus, "/service", -1);
  f.status = 500;
  f.body = "Internal error";
  sim_.InjectFault(f);
  auto client = Client(worker1_);
  auto service = client.GetService(false);
  ASSERT_FALSE(service);
  EXPECT_EQ(service.error().message,
            "GET /service: gave up after 4 attempts: HTTP 500 Internal error");
  EXPECT_EQ(sim_.Requests().size(), 4u);
  EXPECT_EQ(client.requests_sent(), 4);
  EXPECT_EQ(clock_.slept(), milliseconds(100 + 200 + 400));
}

TEST_F(OneGateClientSimTest, TransientUnauthorizedAtBootRecovers) {
  sim::Fault f = MakeFault(sim::FaultKind::kStatus, "", 1);
  f.status = 401;
  f.body = "Not authorized";
  sim_.InjectFault(f);
  auto client = Client(worker1_);
  ASSERT_TRUE(client.UpdateVm({{"READY", "YES"}}));
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "READY"), "YES");
  EXPECT_EQ(sim_.Requests().size(), 2u);
  EXPECT_EQ(client.requests_sent(), 2);
  EXPECT_EQ(clock_.slept(), milliseconds(100));
}

TEST_F(OneGateClientSimTest, WrongTokenIsFatalAfterTheShortBudget) {
  OneGateConfig c = Config(worker1_);
  c.token = "not-the-right-token";
  c.retry.max_attempts = 10;
  auto client = Client(c);
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().message.rfind("GET /vm: HTTP 401 Not authorized", 0), 0u)
      << vm.error().message;
  EXPECT_EQ(vm.error().message.find("not-the-right-token"), std::string::npos);
  EXPECT_EQ(sim_.Requests().size(), 3u);  // unauthorized_attempts
  EXPECT_EQ(sim_.Requests()[0].status, 401);
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.slept(), milliseconds(100 + 200));
}

TEST_F(OneGateClientSimTest, HangPastTheTimeoutIsRetried) {
  sim::Fault f = MakeFault(sim::FaultKind::kHang, "/vm", 1);
  f.delay = milliseconds(3000);
  sim_.InjectFault(f);
  OneGateConfig c = Config(worker1_);
  c.request_timeout = kShortTimeout;
  auto client = Client(c);
  auto start = steady_clock::now();
  auto vm = client.GetVm();
  const long long wall = MillisSince(start);
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(sim_.Requests().size(), 2u);
  EXPECT_EQ(client.requests_sent(), 2);
  EXPECT_EQ(clock_.slept(), milliseconds(100));
  EXPECT_GE(wall, 280);   // the 300 ms total timeout, really waited
  EXPECT_LT(wall, 2000);  // ...and not the 3 s hang
}

TEST_F(OneGateClientSimTest, PersistentHangGivesUpWithATimeout) {
  sim::Fault f = MakeFault(sim::FaultKind::kHang, "/service", -1);
  f.delay = milliseconds(3000);
  sim_.InjectFault(f);
  OneGateConfig c = Config(worker1_);
  c.request_timeout = kShortTimeout;
  c.extended_service_timeout = kShortTimeout;  // the extended document's own limit
  c.retry.max_attempts = 3;
  auto client = Client(c);
  auto start = steady_clock::now();
  auto service = client.GetService(true);
  const long long wall = MillisSince(start);
  ASSERT_FALSE(service);
  EXPECT_EQ(service.error().kind, ErrorKind::kNetwork);
  EXPECT_NE(service.error().message.find("gave up after 3 attempts: timeout:"), std::string::npos)
      << service.error().message;
  EXPECT_EQ(sim_.Requests().size(), 3u);
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.slept(), milliseconds(100 + 200));
  EXPECT_GE(wall, 3 * 280);
  EXPECT_LT(wall, 3000);
}

// The extended service document (every VM of the service, slow for a large one) gets its own,
// longer limit: an answer slower than the request limit but within it is read in one attempt;
// the compact document keeps the request limit.
TEST_F(OneGateClientSimTest, SlowExtendedServiceDocumentHasItsOwnLimit) {
  sim::Fault f = MakeFault(sim::FaultKind::kSlow, "/service", -1);
  f.delay = milliseconds(900);
  sim_.InjectFault(f);
  OneGateConfig c = Config(worker1_);
  c.request_timeout = kShortTimeout;
  c.extended_service_timeout = milliseconds(3000);
  c.retry.max_attempts = 1;
  auto client = Client(c);
  auto extended = client.GetService(true);
  ASSERT_TRUE(extended) << extended.error().message;
  EXPECT_EQ(client.requests_sent(), 1);
  auto compact = client.GetService(false);
  ASSERT_FALSE(compact);
  EXPECT_NE(compact.error().message.find("timeout"), std::string::npos) << compact.error().message;
}

TEST_F(OneGateClientSimTest, SlowAnswerUnderTheTimeoutIsFine) {
  sim::Fault f = MakeFault(sim::FaultKind::kSlow, "/vm", 1);
  f.delay = milliseconds(150);
  sim_.InjectFault(f);
  auto client = Client(worker1_);  // 1000 ms total timeout
  auto start = steady_clock::now();
  auto vm = client.GetVm();
  const long long wall = MillisSince(start);
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(client.requests_sent(), 1);
  EXPECT_EQ(sim_.Requests().size(), 1u);
  EXPECT_EQ(clock_.sleeps(), 0);
  EXPECT_GE(wall, 140);
  EXPECT_LT(wall, 1000);
}

TEST_F(OneGateClientSimTest, SlowUpdatePastTheTimeoutIsRetriedIdempotently) {
  // kSlow runs the request after the delay: the first PUT takes effect even though the
  // client gave up on it; the retry writes the same value again.
  sim::Fault f = MakeFault(sim::FaultKind::kSlow, "/vm", 1);
  f.method = "PUT";
  f.delay = milliseconds(1000);
  sim_.InjectFault(f);
  OneGateConfig c = Config(worker1_);
  c.request_timeout = kShortTimeout;
  auto client = Client(c);
  ASSERT_TRUE(client.UpdateVm({{"READY", "YES"}}));
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "READY"), "YES");
  EXPECT_EQ(client.requests_sent(), 2);
  EXPECT_EQ(sim_.Requests().size(), 2u);
  EXPECT_EQ(clock_.slept(), milliseconds(100));
}

TEST_F(OneGateClientSimTest, TruncatedBodyIsAnErrorAndRetried) {
  sim_.InjectFault(MakeFault(sim::FaultKind::kTruncated, "/service", 1));
  auto client = Client(worker1_);
  auto service = client.GetService(false);
  ASSERT_TRUE(service) << service.error().message;
  EXPECT_EQ(service->roles.size(), 2u);
  EXPECT_EQ(sim_.Requests().size(), 2u);
  EXPECT_EQ(client.requests_sent(), 2);
  EXPECT_EQ(clock_.slept(), milliseconds(100));
}

TEST_F(OneGateClientSimTest, PersistentTruncationGivesUpNamingIt) {
  sim_.InjectFault(MakeFault(sim::FaultKind::kTruncated, "/vm", -1));
  auto client = Client(worker1_);
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().kind, ErrorKind::kNetwork);
  EXPECT_NE(vm.error().message.find("truncated"), std::string::npos) << vm.error().message;
  EXPECT_EQ(client.requests_sent(), 4);
  EXPECT_EQ(sim_.Requests().size(), 4u);
}

TEST_F(OneGateClientSimTest, MalformedJsonIsRetriedTwiceThenFails) {
  sim::Fault f = MakeFault(sim::FaultKind::kMalformed, "/vm", -1);
  f.body = "<html><body>502 proxy error</body></html>";
  sim_.InjectFault(f);
  OneGateConfig c = Config(worker1_);
  c.retry.max_attempts = 10;
  auto client = Client(c);
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(vm.error().message.rfind("GET /vm: malformed response (HTTP 200): malformed JSON", 0),
            0u)
      << vm.error().message;
  EXPECT_EQ(sim_.Requests().size(), 3u);  // 1 + malformed_retries
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.slept(), milliseconds(100 + 200));
}

TEST_F(OneGateClientSimTest, MalformedJsonOnceRecovers) {
  sim::Fault f = MakeFault(sim::FaultKind::kMalformed, "/service", 1);
  f.body = R"({"SERVICE":{"id":"1","roles":[)";
  sim_.InjectFault(f);
  auto client = Client(worker1_);
  auto service = client.GetService(true);
  ASSERT_TRUE(service) << service.error().message;
  EXPECT_EQ(client.requests_sent(), 2);
}

TEST_F(OneGateClientSimTest, ConnectionResetIsRetried) {
  sim_.InjectFault(MakeFault(sim::FaultKind::kReset, "/vm", 2));
  auto client = Client(worker1_);
  ASSERT_TRUE(client.UpdateVm({{"READY", "YES"}}));
  EXPECT_EQ(sim_.UserAttr(worker1_.id, "READY"), "YES");
  EXPECT_EQ(sim_.Requests().size(), 3u);
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.slept(), milliseconds(100 + 200));
}

TEST_F(OneGateClientSimTest, PersistentResetGivesUp) {
  sim_.InjectFault(MakeFault(sim::FaultKind::kReset, "", -1));
  auto client = Client(worker1_);
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().kind, ErrorKind::kNetwork);
  EXPECT_NE(vm.error().message.find("GET /vm: gave up after 4 attempts"), std::string::npos)
      << vm.error().message;
  EXPECT_EQ(sim_.Requests().size(), 4u);
  EXPECT_EQ(client.last_failure().status, 0);
}

TEST_F(OneGateClientSimTest, ConnectionRefusedIsRetriedThenFails) {
  OneGateConfig c = Config(worker1_);
  sim_.Stop();  // nothing listens on that port any more
  auto client = Client(c);
  auto start = steady_clock::now();
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_LT(MillisSince(start), 2000);
  EXPECT_EQ(vm.error().kind, ErrorKind::kNetwork);
  EXPECT_EQ(client.requests_sent(), 4);
  EXPECT_EQ(clock_.slept(), milliseconds(700));
  EXPECT_NE(vm.error().message.find("127.0.0.1"), std::string::npos) << vm.error().message;
}

// ---- CurlTransport specifics

TEST_F(OneGateClientSimTest, ProxyEnvironmentIsIgnored) {
  ::setenv("http_proxy", "http://127.0.0.1:9", 1);
  ::setenv("HTTP_PROXY", "http://127.0.0.1:9", 1);
  ::setenv("ALL_PROXY", "http://127.0.0.1:9", 1);
  auto client = Client(worker1_);
  auto vm = client.GetVm();
  ::unsetenv("http_proxy");
  ::unsetenv("HTTP_PROXY");
  ::unsetenv("ALL_PROXY");
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(client.requests_sent(), 1);
}

TEST_F(OneGateClientSimTest, HttpTransportSendsAGetBody) {
  // What the official CLI does for --extended: a form body on a GET.
  HttpRequest r;
  r.method = "GET";
  r.url = sim_.Endpoint() + "/service";
  r.headers = {{"X-ONEGATE-TOKEN", worker1_.token},
               {"X-ONEGATE-VMID", std::to_string(worker1_.id)},
               {"Content-Type", "application/x-www-form-urlencoded"}};
  r.body = "extended=true";
  auto response = http_.Send(r);
  ASSERT_TRUE(response) << response.error().message;
  EXPECT_EQ(response->status, 200);
  auto service = ParseServiceJson(response->body);
  ASSERT_TRUE(service);
  EXPECT_TRUE(service->roles.at(0).nodes.at(0).vm.has_value());
  EXPECT_EQ(sim_.Requests().at(0).body, "extended=true");
}

TEST_F(OneGateClientSimTest, HttpTransportCapsTheResponseSize) {
  HttpRequest r;
  r.method = "GET";
  r.url = sim_.Endpoint() + "/service?extended=true";
  r.headers = {{"X-ONEGATE-TOKEN", worker1_.token},
               {"X-ONEGATE-VMID", std::to_string(worker1_.id)}};
  r.max_response_bytes = 64;
  auto response = http_.Send(r);
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().kind, ErrorKind::kNetwork);
  EXPECT_NE(response.error().message.find("larger than 64 bytes"), std::string::npos)
      << response.error().message;
}

TEST_F(OneGateClientSimTest, HttpTransportRefusesHeaderInjection) {
  HttpRequest r;
  r.method = "GET";
  r.url = sim_.Endpoint() + "/vm";
  r.headers = {{"X-ONEGATE-VMID", "1\r\nX-Evil: 1"}};
  auto response = http_.Send(r);
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().kind, ErrorKind::kInvalidInput);
  EXPECT_TRUE(sim_.Requests().empty());
}

TEST(HttpTransportTest, RedirectsAreNotFollowedAndStatusesPassThrough) {
  httplib::Server server;
  server.Get("/moved",
             [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/target"); });
  server.Get("/target", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread thread([&] { server.listen_after_bind(); });
  for (int i = 0; i < 2000 && !server.is_running(); ++i) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  CurlTransport http;
  HttpRequest r;
  r.method = "GET";
  r.url = "http://127.0.0.1:" + std::to_string(port) + "/moved";
  auto response = http.Send(r);
  server.stop();
  thread.join();
  ASSERT_TRUE(response) << response.error().message;
  EXPECT_EQ(response->status, 302);
}

TEST(HttpTransportTest, UnsupportedSchemeIsALocalError) {
  CurlTransport http;
  HttpRequest r;
  r.method = "GET";
  r.url = "file:///etc/passwd";
  auto response = http.Send(r);
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().kind, ErrorKind::kInvalidInput);
}

}  // namespace
}  // namespace onehpc
