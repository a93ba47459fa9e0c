// Tests of the OneGate/OneFlow simulator against the reference documents
// (shared/reference/onegate-api.md, oneflow.md): one test per documented behaviour, over
// real HTTP on 127.0.0.1 with httplib's client or raw sockets (never the project's client).
#include "tests/simulator/onegate_simulator.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/simulator/oned_template.h"

extern char** environ;

namespace onehpc::sim {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;
constexpr char kJsonType[] = "application/json;charset=utf-8";
constexpr char kForm[] = "application/x-www-form-urlencoded";
constexpr char kUnsupported[] = "OneGate server doesn't support this feature";

// ---- raw HTTP helpers (for what httplib's client cannot send or would hide)

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct RawResult {
  std::string data;
  int recv_errno = 0;  // errno of the failing recv, 0 on a clean EOF
};

// Sends `request` and reads until EOF, error or `timeout`.
RawResult RawExchange(int port, const std::string& request, milliseconds timeout) {
  RawResult r;
  const int fd = Connect(port);
  if (fd < 0) {
    r.recv_errno = errno;
    return r;
  }
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[8192];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0) {
      r.recv_errno = errno;
      break;
    }
    if (n == 0) break;
    r.data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return r;
}

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool complete = false;
};

// Parses consecutive responses (framed by Content-Length) out of `data`.
std::vector<RawResponse> ParseResponses(const std::string& data) {
  std::vector<RawResponse> out;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t head_end = data.find("\r\n\r\n", pos);
    if (head_end == std::string::npos) break;
    RawResponse r;
    std::string head = data.substr(pos, head_end - pos);
    r.status = std::atoi(head.substr(9, 3).c_str());
    size_t line = head.find("\r\n");
    while (line != std::string::npos) {
      const size_t next = head.find("\r\n", line + 2);
      const std::string h =
          head.substr(line + 2, next == std::string::npos ? std::string::npos : next - line - 2);
      const size_t colon = h.find(':');
      if (colon != std::string::npos) {
        std::string name = h.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        r.headers[name] = h.substr(h.find_first_not_of(' ', colon + 1));
      }
      line = next;
    }
    const size_t length = std::stoul(r.headers.count("content-length") ? r.headers["content-length"]
                                                                       : std::string("0"));
    const size_t body_start = head_end + 4;
    r.body = data.substr(body_start, length);
    r.complete = data.size() >= body_start + length;
    out.push_back(r);
    pos = body_start + length;
  }
  return out;
}

// ---- fixture: one service "hpc" (head + compute), plus a VM outside any service

class OneGateSimulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = sim_.Start("127.0.0.1", 0);
    ASSERT_GT(port_, 0);
    RoleSpec head;
    head.name = "head";
    head.cardinality = 1;
    head.max_vms = 3;
    head.cooldown_seconds = 60;
    RoleSpec compute;
    compute.name = "compute";
    compute.cardinality = 2;
    compute.min_vms = 1;
    compute.max_vms = 4;
    compute.cooldown_seconds = 60;
    service_ = sim_.CreateService("hpc", {head, compute});
    VmSpec hs;
    hs.nics = {{"172.16.4.10", "", "hpc-private", "3"}};
    hs.context = {{"TOKEN", "YES"}, {"ONEAPP_ADMIN_PASSWORD", "s3cret"}};
    head_ = sim_.AddVm(service_, "head", hs);
    VmSpec c1;
    c1.nics = {{"172.16.4.21", "", "hpc-private", "3"}, {"192.0.2.40", "", "public", "0"}};
    c1_ = sim_.AddVm(service_, "compute", c1);
    VmSpec c2;
    c2.nics = {{"172.16.4.22", "", "hpc-private", "3"}};
    c2_ = sim_.AddVm(service_, "compute", c2);
    loner_ = sim_.AddVm(-1, "", VmSpec{});
    ASSERT_GE(head_.id, 0);
    ASSERT_GE(loner_.id, 0);
  }

  httplib::Client Anonymous() {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_connection_timeout(2);
    cli.set_read_timeout(5);
    return cli;
  }
  httplib::Client As(const VmHandle& vm) {
    httplib::Client cli = Anonymous();
    cli.set_default_headers(
        {{"X-ONEGATE-TOKEN", vm.token}, {"X-ONEGATE-VMID", std::to_string(vm.id)}});
    return cli;
  }
  static Json Parse(const httplib::Result& r) { return Json::parse(r->body); }
  std::string Vms(int id) const { return "/vms/" + std::to_string(id); }

  // PUT /vm as the official CLI does: a form body.
  httplib::Result PutForm(const VmHandle& vm, const std::string& path, const std::string& body) {
    return As(vm).Put(path, body, kForm);
  }
  std::string Attr(const VmHandle& vm, const std::string& key) { return sim_.UserAttr(vm.id, key); }

  OneGateSimulator sim_;
  int port_ = -1;
  int service_ = -1;
  VmHandle head_, c1_, c2_, loner_;
};

// ===================================================================== §1 basics

TEST_F(OneGateSimulatorTest, EveryResponseHasJsonContentTypeAndErrorsArePlainText) {
  auto ok = As(head_).Get("/vm");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->get_header_value("Content-Type"), kJsonType);

  auto unauthorized = Anonymous().Get("/vm");
  ASSERT_TRUE(unauthorized);
  EXPECT_EQ(unauthorized->status, 401);
  EXPECT_EQ(unauthorized->get_header_value("Content-Type"), kJsonType);
  EXPECT_EQ(unauthorized->body, "Not authorized");

  auto unknown = As(head_).Get("/nothing");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 400);
  EXPECT_EQ(unknown->get_header_value("Content-Type"), kJsonType);
  EXPECT_EQ(unknown->body, kUnsupported);

  auto put = PutForm(head_, "/vm", "data=READY%3DYES&type=1");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 200);
  EXPECT_EQ(put->body, "");
  EXPECT_EQ(put->get_header_value("Content-Type"), kJsonType);

  auto erase_missing = PutForm(head_, "/vm", "data=NOPE&type=2");
  ASSERT_TRUE(erase_missing);
  EXPECT_EQ(erase_missing->status, 500);
  EXPECT_EQ(erase_missing->get_header_value("Content-Type"), kJsonType);
}

// ===================================================================== §2 authentication

TEST_F(OneGateSimulatorTest, AuthNeedsBothHeadersAndTheVmsToken) {
  httplib::Client cli = Anonymous();
  const httplib::Headers cases[] = {
      {},
      {{"X-ONEGATE-TOKEN", head_.token}},
      {{"X-ONEGATE-VMID", std::to_string(head_.id)}},
      {{"X-ONEGATE-TOKEN", "wrong"}, {"X-ONEGATE-VMID", std::to_string(head_.id)}},
      {{"X-ONEGATE-TOKEN", head_.token}, {"X-ONEGATE-VMID", std::to_string(c1_.id)}},
      {{"X-ONEGATE-TOKEN", head_.token}, {"X-ONEGATE-VMID", "99999"}},
      {{"X-ONEGATE-TOKEN", head_.token}, {"X-ONEGATE-VMID", "abc"}},
  };
  for (const auto& headers : cases) {
    auto r = cli.Get("/vm", headers);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(r->body, "Not authorized");
  }
}

TEST_F(OneGateSimulatorTest, AuthorizationHeaderIsIgnored) {
  auto r = As(head_).Get("/vm", {{"Authorization", "Basic Og=="}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto anon = Anonymous().Get("/vm", {{"Authorization", "Basic YWxpY2U6c2VjcmV0"}});
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
}

TEST_F(OneGateSimulatorTest, DisabledPermissionAnswers403BeforeAuthentication) {
  struct Case {
    const char* key;
    const char* method;
    std::string path;
    const char* body;
  };
  const std::vector<Case> cases = {
      {"vm.show", "GET", "/vm", "Action (show) on resource (vm) not supported"},
      {"vm.show_by_id", "GET", Vms(c1_.id), "Action (show_by_id) on resource (vm) not supported"},
      {"vm.update", "PUT", "/vm", "Action (update) on resource (vm) not supported"},
      {"vm.update_by_id", "PUT", Vms(c1_.id),
       "Action (update_by_id) on resource (vm) not supported"},
      {"vm.action_by_id", "POST", Vms(c1_.id) + "/action",
       "Action (action_by_id) on resource (vm) not supported"},
      {"service.show", "GET", "/service", "Action (show) on resource (service) not supported"},
      {"service.change_cardinality", "PUT", "/service/role/compute",
       "Action (change_cardinality) on resource (service) not supported"},
      {"vrouter.show", "GET", "/vrouter", "Action (show) on resource (vrouter) not supported"},
      {"vnet.show_by_id", "GET", "/vnet/0", "Action (show_by_id) on resource (vnet) not supported"},
  };
  for (const auto& c : cases) {
    sim_.SetPermission(c.key, false);
    httplib::Request req;
    req.method = c.method;
    req.path = c.path;
    auto r = Anonymous().send(req);  // no token at all
    ASSERT_TRUE(r) << c.key;
    EXPECT_EQ(r->status, 403) << c.key;
    EXPECT_EQ(r->body, c.body) << c.key;
    sim_.SetPermission(c.key, true);
  }
}

// ===================================================================== §3 routes

TEST_F(OneGateSimulatorTest, RootListsTheEndpointsAndNeedsAuth) {
  auto r = As(head_).Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const std::string base = "http://127.0.0.1:" + std::to_string(port_);
  EXPECT_EQ(Parse(r), (Json{{"vm_info", base + "/vm"}, {"service_info", base + "/service"}}));
  auto anon = Anonymous().Get("/");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
}

TEST_F(OneGateSimulatorTest, AnythingElseIs400Unsupported) {
  httplib::Client cli = As(head_);
  std::vector<httplib::Result> results;
  results.push_back(cli.Get("/vms"));
  results.push_back(cli.Get("/vm/"));
  results.push_back(cli.Post("/vm", "data=A%3D1", kForm));
  results.push_back(cli.Delete("/vm"));
  results.push_back(cli.Patch("/vm", "x", "text/plain"));
  results.push_back(cli.Options("/vm"));
  results.push_back(cli.Post("/service/" + std::to_string(service_) + "/scale",
                             R"({"role_name":"compute","cardinality":3})", "application/json"));
  results.push_back(cli.Get("/service/" + std::to_string(service_)));
  results.push_back(cli.Get("/_sim/health"));  // operator API is off by default
  results.push_back(Anonymous().Get("/vms"));  // no auth needed to be refused
  for (auto& r : results) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(r->body, kUnsupported);
  }
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 2);
}

TEST_F(OneGateSimulatorTest, VrouterAndVnetRoutesRefuseNonRouterVms) {
  auto vr = As(head_).Get("/vrouter");
  ASSERT_TRUE(vr);
  EXPECT_EQ(vr->status, 400);
  EXPECT_EQ(vr->body, "Empty or invalid VROUTER_ID");
  auto vnet = As(head_).Get("/vnet/3");
  ASSERT_TRUE(vnet);
  EXPECT_EQ(vnet->status, 400);
  EXPECT_EQ(vnet->body, "Virtual networks information can only be retrieved from Virtual Routers.");
}

// ===================================================================== §3.1 actions

TEST_F(OneGateSimulatorTest, ActionAnswers204) {
  auto r = As(c1_).Post(Vms(c1_.id) + "/action", R"({"action":{"perform":"poweroff"}})",
                        "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->body, "");
  EXPECT_EQ(r->get_header_value("Content-Type"), kJsonType);
  EXPECT_EQ(sim_.VmState(c1_.id), states::kVmPoweroff);
}

TEST_F(OneGateSimulatorTest, RebootIsRefusedByDefault) {
  for (const char* op : {"reboot", "Reboot"}) {
    auto r =
        As(c1_).Post(Vms(c1_.id) + "/action",
                     std::string(R"({"action":{"perform":")") + op + R"("}})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403);
    EXPECT_EQ(r->body, std::string("Action (") + op + ") is not allowed on this resource");
  }
  sim_.SetRestrictedActions({});
  auto allowed = As(c1_).Post(Vms(c1_.id) + "/action", R"({"action":{"perform":"reboot"}})",
                              "application/json");
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->status, 204);
}

TEST_F(OneGateSimulatorTest, ActionBodyErrors) {
  httplib::Client cli = As(c1_);
  const std::string path = Vms(c1_.id) + "/action";
  auto bad_json = cli.Post(path, "not json", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  auto wrong_type = cli.Post(path, R"({"perform":"stop"})", "application/json");
  ASSERT_TRUE(wrong_type);
  EXPECT_EQ(wrong_type->status, 400);
  EXPECT_EQ(wrong_type->body, "Error parsing JSON: Wrong resource type");
  auto unknown = cli.Post(path, R"({"action":{"perform":"explode"}})", "application/json");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 500);
  EXPECT_EQ(unknown->body, "explode action not available for this resource");
}

TEST_F(OneGateSimulatorTest, SelfTerminateRemovesTheNodeAndLowersCardinality) {
  auto r = As(c1_).Post(Vms(c1_.id) + "/action",
                        R"({"action":{"perform":"terminate","params":true}})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(sim_.VmState(c1_.id), states::kVmDone);
  EXPECT_EQ(sim_.Nodes(service_, "compute"), std::vector<int>{c2_.id});
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 1);
  const auto t = sim_.Terminations();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].vm_id, c1_.id);
  EXPECT_TRUE(t[0].hard);
  EXPECT_EQ(t[0].cause, "action");
}

// onegate-api.md 3.1 and 8: any VM of a service may act on a peer (POST /vms/<id>/action);
// oneflow.md 5: a VM that becomes DONE outside OneFlow leaves nodes[] and the watchdog lowers
// the role's cardinality by one, forced (below min_vms too). What elastic mode relies on when
// the controller terminates exactly an idle worker's VM.
TEST_F(OneGateSimulatorTest, APeersGracefulTerminateRemovesThatVmAndLowersItsRoleEvenBelowMin) {
  auto r = As(head_).Post(Vms(c2_.id) + "/action", R"({"action":{"perform":"terminate"}})",
                          "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(sim_.VmState(c2_.id), states::kVmDone);
  EXPECT_EQ(sim_.Nodes(service_, "compute"), std::vector<int>{c1_.id});
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 1);
  auto again = As(head_).Post(Vms(c1_.id) + "/action", R"({"action":{"perform":"terminate"}})",
                              "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 204);
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 0) << "forced: below min_vms (1)";
  const auto t = sim_.Terminations();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].vm_id, c2_.id);
  EXPECT_FALSE(t[0].hard) << "no params: a graceful terminate (ACPI), hooks run";
  EXPECT_EQ(t[0].cause, "action");
  // A VM outside the service cannot terminate its VMs.
  auto foreign = As(loner_).Post(Vms(head_.id) + "/action", R"({"action":{"perform":"terminate"}})",
                                 "application/json");
  ASSERT_TRUE(foreign);
  EXPECT_EQ(foreign->status, 400);
  EXPECT_EQ(sim_.VmState(head_.id), states::kVmActive);
}

TEST_F(OneGateSimulatorTest, PoweroffPutsRoleAndServiceInWarning) {
  ASSERT_TRUE(sim_.SetVmState(c2_.id, states::kVmPoweroff, 0));
  auto r = As(head_).Get("/service");
  ASSERT_TRUE(r);
  const Json j = Parse(r);
  EXPECT_EQ(j["SERVICE"]["state"], states::kWarning);
  EXPECT_EQ(j["SERVICE"]["roles"][1]["state"], states::kWarning);
  EXPECT_EQ(j["SERVICE"]["roles"][0]["state"], states::kRunning);
}

// ===================================================================== §4 PUT /vm

TEST_F(OneGateSimulatorTest, UpdateMergesAndUpperCasesKeys) {
  sim_.SetUserAttr(head_.id, "KEEP", "me");
  auto r = PutForm(head_, "/vm", "data=ready%3DYES&type=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Attr(head_, "READY"), "YES");
  EXPECT_EQ(Attr(head_, "ready"), "");
  EXPECT_EQ(Attr(head_, "KEEP"), "me");
  ASSERT_TRUE(PutForm(head_, "/vm", "data=READY%3DNO"));  // type defaults to 1
  EXPECT_EQ(Attr(head_, "READY"), "NO");
}

TEST_F(OneGateSimulatorTest, AnyOtherTypeDeletesOneKey) {
  for (const char* type : {"2", "7", "0", "abc", ""}) {
    sim_.SetUserAttr(head_.id, "GONE", "x");
    auto r = PutForm(head_, "/vm", std::string("data=GONE&type=") + type);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << type;
    EXPECT_EQ(Attr(head_, "GONE"), "") << type;
  }
}

TEST_F(OneGateSimulatorTest, DeletingAMissingKeyIs500AttributeNotFound) {
  auto r = PutForm(head_, "/vm", "data=NEVER_SET&type=2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->body, "attribute not found");
  sim_.SetUserAttr(head_.id, "A", "1");
  sim_.SetUserAttr(head_.id, "B", "2");
  auto two = PutForm(head_, "/vm", "data=A%0AB&type=2");  // one key per request
  ASSERT_TRUE(two);
  EXPECT_EQ(two->status, 500);
  EXPECT_EQ(Attr(head_, "A"), "1");
}

TEST_F(OneGateSimulatorTest, LinesSplitOnRealNewlinesAndOnLiteralBackslashN) {
  ASSERT_TRUE(PutForm(head_, "/vm", "data=A%3D1%0AB%3D2&type=1"));
  EXPECT_EQ(Attr(head_, "A"), "1");
  EXPECT_EQ(Attr(head_, "B"), "2");
  ASSERT_TRUE(PutForm(head_, "/vm", "data=C%3D3%5CnD%3D4&type=1"));
  EXPECT_EQ(Attr(head_, "C"), "3");
  EXPECT_EQ(Attr(head_, "D"), "4");
}

TEST_F(OneGateSimulatorTest, RawBodyIsUsedWhenDataIsAbsent) {
  // curl -d "APP_LOAD = 9.7": the form parser finds no `data`, so the raw body is used;
  // `K = v` keeps the space after `=` (section 4.1).
  auto r = As(head_).Put("/vm", "APP_LOAD = 9.7", kForm);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Attr(head_, "APP_LOAD"), " 9.7");
  // Without the form content type the body is not parsed as a form at all.
  auto plain = As(head_).Put("/vm", "X=1", "text/plain");
  ASSERT_TRUE(plain);
  EXPECT_EQ(Attr(head_, "X"), "1");
}

TEST_F(OneGateSimulatorTest, RawBodyContainingDataIsMisread) {
  auto r = As(head_).Put("/vm", "X=1&data=Y=2", kForm);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Attr(head_, "X"), "");
  EXPECT_EQ(Attr(head_, "Y"), "2");
  // Not a form: `data=READY=YES` is itself the text, so DATA is set.
  auto plain = As(head_).Put("/vm", "data=READY=YES", "text/plain");
  ASSERT_TRUE(plain);
  EXPECT_EQ(Attr(head_, "DATA"), "READY=YES");
}

TEST_F(OneGateSimulatorTest, ParametersMayComeFromTheQueryString) {
  auto r = As(head_).Put("/vm?data=Q%3D1&type=1", "", kForm);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Attr(head_, "Q"), "1");
}

TEST_F(OneGateSimulatorTest, RestrictedAttributesAre403CaseInsensitive) {
  struct Case {
    std::string body;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"data=SERVICE_ID%3D99&type=1", "Attribute (SERVICE_ID) cannot be modified"},
      {"data=role_name%3Dx&type=1", "Attribute (role_name) cannot be modified"},
      {"data=SCHED_REQUIREMENTS%3DID%3D1&type=1",
       "Attribute (SCHED_REQUIREMENTS) cannot be modified"},
      {"data=SERVICE_ID&type=2", "Attribute (SERVICE_ID) cannot be deleted"},
      {"data=OK%3D1%0AService_Id%3D5&type=1", "Attribute (Service_Id) cannot be modified"},
  };
  for (const auto& c : cases) {
    auto r = PutForm(head_, "/vm", c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << c.body;
    EXPECT_EQ(r->body, c.message) << c.body;
  }
  EXPECT_EQ(Attr(head_, "OK"), "");  // checked before any change
  EXPECT_EQ(Attr(head_, "SERVICE_ID"), std::to_string(service_));
  EXPECT_EQ(Attr(head_, "ROLE_NAME"), "head");
}

// §4.1 table, over HTTP: what is stored, or a 500 from oned.
TEST_F(OneGateSimulatorTest, EscapeAttrTableOverHttp) {
  struct Row {
    std::string line;
    std::string key;
    std::optional<std::string> stored;  // nullopt: 500
  };
  const std::vector<Row> rows = {
      {"READY=YES", "READY", "YES"},  {"URL=http://h:1/p?q=1", "URL", "http://h:1/p?q=1"},
      {"K=x=y", "K", "x=y"},          {R"(K="already quoted")", "K", "already quoted"},
      {"K=a,b,c", "K", std::nullopt}, {R"(K=path\with)", "K", std::nullopt},
      {"K=[x]", "K", std::nullopt},   {R"(K=say "hi")", "K", std::nullopt},
      {"K=", "K", std::nullopt},      {"K = v", "K", " v"},
  };
  for (const auto& row : rows) {
    sim_.EraseUserAttr(head_.id, row.key);
    auto r = As(head_).Put("/vm", httplib::Params{{"data", row.line}, {"type", "1"}});
    ASSERT_TRUE(r) << row.line;
    if (row.stored) {
      EXPECT_EQ(r->status, 200) << row.line << ": " << r->body;
      EXPECT_EQ(Attr(head_, row.key), *row.stored) << row.line;
    } else {
      EXPECT_EQ(r->status, 500) << row.line;
      EXPECT_NE(r->body.find("Parse error"), std::string::npos) << r->body;
      EXPECT_EQ(Attr(head_, row.key), "") << row.line;
    }
  }
  auto two = As(head_).Put("/vm", httplib::Params{{"data", "A=1\\nB=two words"}, {"type", "1"}});
  ASSERT_TRUE(two);
  EXPECT_EQ(Attr(head_, "A"), "1");
  EXPECT_EQ(Attr(head_, "B"), "two words");
}

TEST_F(OneGateSimulatorTest, ABadLineRejectsTheWholeUpdate) {
  auto r = PutForm(head_, "/vm", "data=GOOD%3D1%0ABAD%3Da%2Cb&type=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(Attr(head_, "GOOD"), "");
}

// §4.2 exact bytes sent by the official client.
TEST_F(OneGateSimulatorTest, OfficialClientBytes) {
  ASSERT_EQ(PutForm(head_, "/vm", "data=READY%3DYES&type=1")->status, 200);
  EXPECT_EQ(Attr(head_, "READY"), "YES");
  ASSERT_EQ(PutForm(head_, Vms(c1_.id), "data=A%3D1%5CnB%3D2&type=1")->status, 200);
  EXPECT_EQ(Attr(c1_, "A"), "1");
  EXPECT_EQ(Attr(c1_, "B"), "2");
  ASSERT_EQ(PutForm(head_, Vms(c1_.id), "data=A&type=2")->status, 200);
  EXPECT_EQ(Attr(c1_, "A"), "");
  ASSERT_EQ(PutForm(head_, "/vm", "data=NOTE%3Dtwo+words&type=1")->status, 200);
  EXPECT_EQ(Attr(head_, "NOTE"), "two words");
}

// ===================================================================== §5 VM JSON

TEST_F(OneGateSimulatorTest, VmJsonLeavesAreStrings) {
  auto r = As(c1_).Get("/vm");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const Json vm = Parse(r)["VM"];
  EXPECT_EQ(vm["ID"], std::to_string(c1_.id));
  EXPECT_EQ(vm["NAME"], "compute_0_(service_" + std::to_string(service_) + ")");
  EXPECT_EQ(vm["STATE"], "3");
  EXPECT_EQ(vm["LCM_STATE"], "3");
  EXPECT_EQ(vm["USER_TEMPLATE"]["SERVICE_ID"], std::to_string(service_));
  EXPECT_EQ(vm["USER_TEMPLATE"]["ROLE_NAME"], "compute");
  for (const auto& [k, v] : vm.items()) {
    if (k != "USER_TEMPLATE" && k != "TEMPLATE") {
      EXPECT_TRUE(v.is_string()) << k;
    }
  }
}

TEST_F(OneGateSimulatorTest, NicIsAlwaysAnArrayWithOnlyTheDocumentedKeys) {
  const Json one = Parse(As(c2_).Get("/vm"))["VM"]["TEMPLATE"];
  ASSERT_TRUE(one["NIC"].is_array());
  ASSERT_EQ(one["NIC"].size(), 1u);
  EXPECT_EQ(one["NIC"][0]["IP"], "172.16.4.22");
  EXPECT_EQ(one["NIC"][0]["NETWORK"], "hpc-private");
  const std::set<std::string> allowed = {"IP",       "IP6_LINK",   "IP6_SITE", "IP6_GLOBAL",
                                         "NETWORK",  "MAC",        "NAME",     "PARENT",
                                         "EXTERNAL", "EXTERNAL_IP"};
  for (const auto& [k, v] : one["NIC"][0].items()) EXPECT_TRUE(allowed.count(k)) << k;
  ASSERT_TRUE(one["NIC_ALIAS"].is_array());
  EXPECT_TRUE(one["NIC_ALIAS"].empty());

  const Json two = Parse(As(c1_).Get("/vm"))["VM"]["TEMPLATE"];
  ASSERT_EQ(two["NIC"].size(), 2u);
  EXPECT_EQ(two["NIC"][1]["IP"], "192.0.2.40");

  const Json none = Parse(As(loner_).Get("/vm"))["VM"]["TEMPLATE"];
  ASSERT_TRUE(none["NIC"].is_array());
  EXPECT_TRUE(none["NIC"].empty());
}

TEST_F(OneGateSimulatorTest, EmptyValuesAreEmptyObjectsAndVectorsAreObjects) {
  VmSpec spec;
  spec.user_template = {{"ONEAPP_NOTE", ""}, {"SCHED_MESSAGE", "no host"}};
  spec.user_vectors = {{"USER_INPUTS", {{"ONEAPP_NOTE", "O|text|Note||"}}}};
  VmHandle vm = sim_.AddVm(-1, "", spec);
  const Json ut = Parse(As(vm).Get("/vm"))["VM"]["USER_TEMPLATE"];
  EXPECT_EQ(ut["ONEAPP_NOTE"], Json::object());
  EXPECT_EQ(ut["USER_INPUTS"], (Json{{"ONEAPP_NOTE", "O|text|Note||"}}));
  EXPECT_FALSE(ut.contains("SCHED_MESSAGE"));  // filtered from GET /vm
  // `K=` followed by another line becomes K="" (escape_attr closes the quote at the
  // newline): an empty value, read back as {}.
  ASSERT_EQ(PutForm(head_, "/vm", "data=EMPTY%3D%0AB%3D1&type=1")->status, 200);
  EXPECT_EQ(Parse(As(head_).Get("/vm"))["VM"]["USER_TEMPLATE"]["EMPTY"], Json::object());
}

TEST_F(OneGateSimulatorTest, PeerVmIsReadableWithTheSameFilteredShape) {
  auto r = As(head_).Get(Vms(c1_.id));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const Json vm = Parse(r)["VM"];
  EXPECT_EQ(vm["ID"], std::to_string(c1_.id));
  EXPECT_FALSE(vm["TEMPLATE"].contains("CONTEXT"));
  EXPECT_EQ(vm.size(), 6u);  // NAME, ID, STATE, LCM_STATE, USER_TEMPLATE, TEMPLATE
}

// ===================================================================== §6 GET /service

TEST_F(OneGateSimulatorTest, CompactServiceTypes) {
  auto r = As(c2_).Get("/service");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const Json s = Parse(r)["SERVICE"];
  EXPECT_EQ(s["id"], std::to_string(service_));
  EXPECT_EQ(s["name"], "hpc");
  EXPECT_EQ(s["state"], 2);
  ASSERT_EQ(s["roles"].size(), 2u);
  EXPECT_EQ(s["roles"][0]["name"], "head");
  const Json compute = s["roles"][1];
  EXPECT_EQ(compute["cardinality"], 2);
  EXPECT_EQ(compute["state"], 2);
  ASSERT_EQ(compute["nodes"].size(), 2u);
  EXPECT_EQ(compute["nodes"][0]["deploy_id"], c1_.id);  // creation order
  EXPECT_EQ(compute["nodes"][1]["deploy_id"], c2_.id);
  const Json node = compute["nodes"][0];
  EXPECT_TRUE(node["running"].is_null());
  const Json info = node["vm_info"]["VM"];
  EXPECT_EQ(info.size(), 6u);
  for (const char* k : {"ID", "UID", "GID", "UNAME", "GNAME", "NAME"}) {
    ASSERT_TRUE(info.contains(k)) << k;
    EXPECT_TRUE(info[k].is_string()) << k;
  }
  EXPECT_EQ(info["ID"], std::to_string(c1_.id));
}

TEST_F(OneGateSimulatorTest, ServiceMembershipErrors) {
  auto outside = As(loner_).Get("/service");
  ASSERT_TRUE(outside);
  EXPECT_EQ(outside->status, 400);
  EXPECT_EQ(outside->body, "Empty or invalid SERVICE_ID");

  VmSpec bad;
  bad.user_template = {{"SERVICE_ID", "abc"}};
  auto invalid = As(sim_.AddVm(-1, "", bad)).Get("/service");
  EXPECT_EQ(invalid->status, 400);
  EXPECT_EQ(invalid->body, "Empty or invalid SERVICE_ID");

  VmSpec ghost;
  ghost.user_template = {{"SERVICE_ID", "999"}};
  auto missing = As(sim_.AddVm(-1, "", ghost)).Get("/service");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->body, "Service 999 not found");

  const int empty = sim_.CreateService("empty", {});
  VmSpec in_empty;
  in_empty.user_template = {{"SERVICE_ID", std::to_string(empty)}};
  auto none = As(sim_.AddVm(-1, "", in_empty)).Get("/service");
  EXPECT_EQ(none->status, 400);
  EXPECT_EQ(none->body, "Service " + std::to_string(empty) + " is empty.");

  VmSpec claimer;
  claimer.user_template = {{"SERVICE_ID", std::to_string(service_)}};
  VmHandle c = sim_.AddVm(-1, "", claimer);
  auto not_member = As(c).Get("/service");
  EXPECT_EQ(not_member->status, 400);
  EXPECT_EQ(not_member->body, "Service " + std::to_string(service_) + " does not contain VM " +
                                  std::to_string(c.id) + ".");
}

// §6.1 extended
TEST_F(OneGateSimulatorTest, ExtendedFromQueryStringGivesFullVmsWithNicObjectOrArray) {
  auto r = As(head_).Get("/service?extended=true");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const Json s = Parse(r)["SERVICE"];
  const Json head = s["roles"][0]["nodes"][0]["vm_info"]["VM"];
  EXPECT_EQ(head["STATE"], "3");
  EXPECT_EQ(head["LCM_STATE"], "3");
  EXPECT_TRUE(head["STIME"].is_string());
  EXPECT_TRUE(head.contains("PERMISSIONS"));
  EXPECT_EQ(head["USER_TEMPLATE"]["ROLE_NAME"], "head");
  EXPECT_EQ(head["TEMPLATE"]["CONTEXT"]["ONEAPP_ADMIN_PASSWORD"], "s3cret");  // secrets too
  ASSERT_TRUE(head["TEMPLATE"]["NIC"].is_object());                           // one NIC: an object
  EXPECT_EQ(head["TEMPLATE"]["NIC"]["IP"], "172.16.4.10");
  const Json c1 = s["roles"][1]["nodes"][0]["vm_info"]["VM"];
  ASSERT_TRUE(c1["TEMPLATE"]["NIC"].is_array());  // several NICs: an array
  EXPECT_EQ(c1["TEMPLATE"]["NIC"][1]["IP"], "192.0.2.40");
  EXPECT_EQ(s["roles"][1]["nodes"][0]["deploy_id"], c1_.id);
  EXPECT_TRUE(s["roles"][1]["nodes"][0]["running"].is_null());
}

// The VM hash's TEMPLATE.DISK (extended output only; GET /vm keeps NIC and NIC_ALIAS alone):
// like NIC there, an object for one disk and an array for several.
TEST_F(OneGateSimulatorTest, DisksAreInTheExtendedHashOnlyObjectOrArray) {
  ASSERT_TRUE(sim_.AddDisk(head_.id, {{"TARGET", "vda"}, {"IMAGE", "os"}, {"PERSISTENT", "NO"}}));
  ASSERT_TRUE(sim_.AddDisk(c1_.id, {{"TARGET", "vda"}, {"IMAGE", "os"}}));
  ASSERT_TRUE(
      sim_.AddDisk(c1_.id, {{"TARGET", "vdb"}, {"IMAGE", "ood-home"}, {"PERSISTENT", "YES"}}));
  auto r = As(head_).Get("/service?extended=true");
  ASSERT_TRUE(r);
  const Json s = Parse(r)["SERVICE"];
  const Json head = s["roles"][0]["nodes"][0]["vm_info"]["VM"]["TEMPLATE"];
  ASSERT_TRUE(head["DISK"].is_object());
  EXPECT_EQ(head["DISK"]["TARGET"], "vda");
  EXPECT_EQ(head["DISK"]["DISK_ID"], "0");
  const Json c1 = s["roles"][1]["nodes"][0]["vm_info"]["VM"]["TEMPLATE"];
  ASSERT_TRUE(c1["DISK"].is_array());
  EXPECT_EQ(c1["DISK"][1]["IMAGE"], "ood-home");
  EXPECT_EQ(c1["DISK"][1]["DISK_ID"], "1");
  auto own = As(c1_).Get("/vm");
  ASSERT_TRUE(own);
  EXPECT_FALSE(Parse(own)["VM"]["TEMPLATE"].contains("DISK"));
}

TEST_F(OneGateSimulatorTest, ExtendedAnyNonEmptyValueTurnsItOn) {
  auto is_extended = [&](const std::string& path) {
    const Json j = Parse(As(head_).Get(path));
    return j["SERVICE"]["roles"][0]["nodes"][0]["vm_info"]["VM"].contains("TEMPLATE");
  };
  EXPECT_TRUE(is_extended("/service?extended=true"));
  EXPECT_TRUE(is_extended("/service?extended=false"));
  EXPECT_TRUE(is_extended("/service?extended=0"));
  EXPECT_FALSE(is_extended("/service?extended="));
  EXPECT_FALSE(is_extended("/service"));
}

TEST_F(OneGateSimulatorTest, ExtendedFromAFormBodyOnAGet) {
  const std::string auth = "X-ONEGATE-TOKEN: " + head_.token +
                           "\r\nX-ONEGATE-VMID: " + std::to_string(head_.id) + "\r\n";
  // What the CLI sends for `service show --extended`, then a second request on the same
  // connection: the GET body must not be mistaken for the next request.
  const std::string req =
      "GET /service HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
      "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 13\r\n\r\n"
      "extended=true"
      "GET /vm HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
      auth + "Connection: close\r\n\r\n";
  const RawResult raw = RawExchange(port_, req, milliseconds(3000));
  const auto responses = ParseResponses(raw.data);
  ASSERT_EQ(responses.size(), 2u) << raw.data;
  EXPECT_EQ(responses[0].status, 200);
  const Json s = Json::parse(responses[0].body);
  EXPECT_TRUE(s["SERVICE"]["roles"][0]["nodes"][0]["vm_info"]["VM"].contains("TEMPLATE"));
  EXPECT_EQ(responses[1].status, 200);
  EXPECT_EQ(Json::parse(responses[1].body)["VM"]["ID"], std::to_string(head_.id));
  const auto recorded = sim_.Requests();
  ASSERT_GE(recorded.size(), 2u);
  EXPECT_EQ(recorded[0].body, "extended=true");
  // The length of each answer's body, for the benchmarks' bytes per join.
  EXPECT_EQ(recorded[0].response_bytes, responses[0].body.size());
  EXPECT_EQ(recorded[1].response_bytes, responses[1].body.size());
  EXPECT_GT(recorded[0].response_bytes, recorded[1].response_bytes);
}

// ===================================================================== §7 scaling

TEST_F(OneGateSimulatorTest, ScaleChangesCardinalityAtOnceBeforeNodesExist) {
  auto r = As(c1_).Put("/service/role/compute", R"({"cardinality":3})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "");
  const Json s = Parse(As(c2_).Get("/service"))["SERVICE"];
  EXPECT_EQ(s["state"], states::kScaling);
  EXPECT_EQ(s["roles"][1]["state"], states::kScaling);
  EXPECT_EQ(s["roles"][1]["cardinality"], 3);
  EXPECT_EQ(s["roles"][1]["nodes"].size(), 2u);
}

TEST_F(OneGateSimulatorTest, CardinalityMayBeANumericStringAndAnyMemberScalesAnyRole) {
  // What `onegate service scale` sends: N as a string, under the form content type.
  auto r = As(c1_).Put("/service/role/head", R"({"cardinality":"2"})", kForm);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(sim_.Cardinality(service_, "head"), 2);
}

TEST_F(OneGateSimulatorTest, ScalePreconditionsAnswerABare400) {
  const std::string prefix = "Error performing action on service " + std::to_string(service_);
  auto scale = [&](const std::string& role, const std::string& body) {
    return As(head_).Put("/service/role/" + role, body, "application/json");
  };
  struct Case {
    std::string role;
    std::string body;
  };
  const std::vector<Case> refused = {
      {"nosuch", R"({"cardinality":3})"},   // unknown role
      {"compute", R"({"cardinality":2})"},  // already at N
      {"compute", R"({"cardinality":0})"},  // below min_vms
      {"compute", R"({"cardinality":5})"},  // above max_vms
      {"compute", R"({"cardinality":"x"})"},
  };
  for (const auto& c : refused) {
    auto r = scale(c.role, c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << c.body;
    EXPECT_EQ(r->body, prefix + " role " + c.role) << c.body;
  }
  // Not RUNNING (here WARNING, forced): refused.
  sim_.SetServiceState(service_, states::kWarning);
  EXPECT_EQ(scale("compute", R"({"cardinality":3})")->status, 400);
  sim_.SetServiceState(service_, -1);
  // SCALING: refused, for every role.
  ASSERT_EQ(scale("compute", R"({"cardinality":3})")->status, 200);
  auto during = scale("head", R"({"cardinality":2})");
  EXPECT_EQ(during->status, 400);
  EXPECT_EQ(during->body, prefix + " role head");
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 3);
}

TEST_F(OneGateSimulatorTest, ScaleFromOutsideTheServiceIsRefused) {
  auto r = As(loner_).Put("/service/role/compute", R"({"cardinality":3})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->body, "Empty or invalid SERVICE_ID");
}

// oneflow.md §6.1: new nodes appear one by one, maybe without IPs; then COOLDOWN, RUNNING.
TEST_F(OneGateSimulatorTest, ScaleUpLifecycleSeenFromInside) {
  ASSERT_EQ(
      As(c1_).Put("/service/role/compute", R"({"cardinality":3})", "application/json")->status,
      200);
  VmSpec late;
  late.nics = {{"", "", "hpc-private", "3"}};  // no IP yet
  late.state = states::kVmPending;
  late.lcm_state = 0;
  VmHandle c3 = sim_.AddVm(service_, "compute", late);
  Json s = Parse(As(c1_).Get("/service"))["SERVICE"];
  ASSERT_EQ(s["roles"][1]["nodes"].size(), 3u);
  EXPECT_EQ(s["roles"][1]["nodes"][2]["deploy_id"], c3.id);
  EXPECT_EQ(s["roles"][1]["nodes"][2]["vm_info"]["VM"]["NAME"],
            "compute_2_(service_" + std::to_string(service_) + ")");
  EXPECT_EQ(s["state"], states::kScaling);
  const Json peer = Parse(As(c1_).Get(Vms(c3.id)))["VM"];
  EXPECT_EQ(peer["STATE"], "1");
  EXPECT_FALSE(peer["TEMPLATE"]["NIC"][0].contains("IP"));

  ASSERT_TRUE(sim_.SetNicIp(c3.id, 0, "172.16.4.23"));
  ASSERT_TRUE(sim_.SetVmState(c3.id, states::kVmActive, states::kLcmRunning));
  s = Parse(As(c1_).Get("/service"))["SERVICE"];
  EXPECT_EQ(s["state"], states::kCooldown);
  EXPECT_EQ(s["roles"][1]["state"], states::kCooldown);
  EXPECT_EQ(s["roles"][0]["state"], states::kRunning);
  // During the cooldown every scale request is refused.
  EXPECT_EQ(
      As(c1_).Put("/service/role/compute", R"({"cardinality":4})", "application/json")->status,
      400);
  sim_.AdvanceTime(std::chrono::seconds(61));
  s = Parse(As(c1_).Get("/service"))["SERVICE"];
  EXPECT_EQ(s["state"], states::kRunning);
  EXPECT_EQ(s["roles"][1]["state"], states::kRunning);
  EXPECT_EQ(
      As(c1_).Put("/service/role/compute", R"({"cardinality":4})", "application/json")->status,
      200);
}

// oneflow.md §6.2: the oldest nodes go; victims stay in nodes[] until DONE.
TEST_F(OneGateSimulatorTest, ScaleDownRemovesTheOldestNodesAfterTheirShutdown) {
  RoleSpec w;
  w.name = "worker";
  w.cardinality = 3;
  w.min_vms = 1;
  w.cooldown_ms = 60000;
  w.shutdown_delay = milliseconds(60000);
  const int sid = sim_.CreateService("s", {w});
  std::vector<VmHandle> vms;
  for (int i = 0; i < 3; ++i) vms.push_back(sim_.AddVm(sid, "worker"));
  std::vector<TerminationRecord> hooked;
  std::mutex hooked_mu;
  sim_.SetTerminationHook([&](const TerminationRecord& r) {
    std::lock_guard<std::mutex> lock(hooked_mu);
    hooked.push_back(r);
  });
  ASSERT_EQ(
      As(vms[2]).Put("/service/role/worker", R"({"cardinality":1})", "application/json")->status,
      200);
  Json s = Parse(As(vms[2]).Get("/service"))["SERVICE"];
  EXPECT_EQ(s["roles"][0]["cardinality"], 1);
  EXPECT_EQ(s["roles"][0]["state"], states::kScaling);
  EXPECT_EQ(s["roles"][0]["nodes"].size(), 3u);  // victims still listed
  EXPECT_EQ(Parse(As(vms[2]).Get(Vms(vms[0].id)))["VM"]["LCM_STATE"],
            std::to_string(states::kLcmShutdown));
  sim_.AdvanceTime(milliseconds(60001));
  EXPECT_EQ(sim_.Nodes(sid, "worker"), std::vector<int>{vms[2].id});
  EXPECT_EQ(sim_.VmState(vms[0].id), states::kVmDone);
  EXPECT_EQ(sim_.VmState(vms[1].id), states::kVmDone);
  EXPECT_EQ(sim_.RoleState(sid, "worker"), states::kCooldown);
  const auto t = sim_.Terminations();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].vm_id, vms[0].id);
  EXPECT_EQ(t[1].vm_id, vms[1].id);
  EXPECT_EQ(t[0].cause, "scale-down");
  EXPECT_FALSE(t[0].hard);
  sim_.SetTerminationHook(nullptr);
  std::lock_guard<std::mutex> lock(hooked_mu);
  EXPECT_EQ(hooked.size(), 2u);
}

TEST_F(OneGateSimulatorTest, AutoProvisionedNodesAppearLaterAndGetIpsLater) {
  RoleSpec w;
  w.name = "worker";
  w.cardinality = 1;
  w.max_vms = 5;
  w.cooldown_ms = 60000;
  w.auto_provision = true;
  w.vm_template.nics = {{"10.9.8.0", "", "cluster", "7"}};
  w.provision_delay = milliseconds(60000);
  w.ip_delay = milliseconds(60000);
  const int sid = sim_.CreateService("auto", {w});
  VmHandle first = sim_.AddVm(sid, "worker");
  ASSERT_EQ(
      As(first).Put("/service/role/worker", R"({"cardinality":2})", "application/json")->status,
      200);
  EXPECT_EQ(sim_.Nodes(sid, "worker").size(), 1u);  // not created yet
  sim_.AdvanceTime(milliseconds(60000));
  const auto nodes = sim_.Nodes(sid, "worker");
  ASSERT_EQ(nodes.size(), 2u);
  const Json pending = Parse(As(first).Get(Vms(nodes[1])))["VM"];
  EXPECT_EQ(pending["STATE"], "1");
  EXPECT_FALSE(pending["TEMPLATE"]["NIC"][0].contains("IP"));
  EXPECT_EQ(sim_.RoleState(sid, "worker"), states::kScaling);
  sim_.AdvanceTime(milliseconds(60000));
  const Json running = Parse(As(first).Get(Vms(nodes[1])))["VM"];
  EXPECT_EQ(running["STATE"], "3");
  EXPECT_EQ(running["TEMPLATE"]["NIC"][0]["IP"], "10.9.8.10");
  EXPECT_EQ(sim_.RoleState(sid, "worker"), states::kCooldown);
  EXPECT_FALSE(sim_.Token(nodes[1]).empty());
}

TEST_F(OneGateSimulatorTest, OperatorScaleAndTerminate) {
  ASSERT_TRUE(sim_.SetCardinality(service_, "compute", 9));  // forced: ignores max_vms
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 9);
  EXPECT_FALSE(sim_.SetCardinality(service_, "nosuch", 1));
  sim_.TerminateVm(c2_.id, /*hard=*/false);
  EXPECT_EQ(sim_.VmState(c2_.id), states::kVmDone);
  EXPECT_EQ(sim_.Cardinality(service_, "compute"), 8);
  const auto t = sim_.Terminations();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].cause, "operator");
  EXPECT_FALSE(t[0].hard);
  // The terminated VM is no longer a member.
  auto r = As(head_).Get(Vms(c2_.id));
  EXPECT_EQ(r->status, 400);
}

// ===================================================================== §8 membership

TEST_F(OneGateSimulatorTest, OwnVmByIdAlwaysWorks) {
  auto r = As(loner_).Get(Vms(loner_.id));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ASSERT_EQ(PutForm(loner_, Vms(loner_.id), "data=X%3D1&type=1")->status, 200);
  EXPECT_EQ(Attr(loner_, "X"), "1");
}

TEST_F(OneGateSimulatorTest, PeersOfTheSameServiceCanBeReadWrittenAndActedOn) {
  EXPECT_EQ(As(c2_).Get(Vms(head_.id))->status, 200);
  ASSERT_EQ(PutForm(c2_, Vms(head_.id), "data=FROM_PEER%3D1&type=1")->status, 200);
  EXPECT_EQ(Attr(head_, "FROM_PEER"), "1");
  auto act = As(c2_).Post(Vms(c1_.id) + "/action", R"({"action":{"perform":"terminate"}})",
                          "application/json");
  ASSERT_TRUE(act);
  EXPECT_EQ(act->status, 204);
  EXPECT_EQ(sim_.VmState(c1_.id), states::kVmDone);
}

TEST_F(OneGateSimulatorTest, OtherVmsOutsideTheServiceAreRefused) {
  auto r = As(head_).Get(Vms(loner_.id));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->body, "Service " + std::to_string(service_) + " does not contain VM " +
                         std::to_string(loner_.id) + ".");
  auto put = PutForm(head_, Vms(loner_.id), "data=X%3D1&type=1");
  EXPECT_EQ(put->status, 400);
  auto act = As(head_).Post(Vms(loner_.id) + "/action", R"({"action":{"perform":"stop"}})",
                            "application/json");
  EXPECT_EQ(act->status, 400);
  EXPECT_EQ(Attr(loner_, "X"), "");

  auto lone = As(loner_).Get(Vms(head_.id));
  ASSERT_TRUE(lone);
  EXPECT_EQ(lone->status, 400);
  EXPECT_EQ(lone->body,
            "This VM does not belong to any Virtual Router or Service, so it cannot retrieve "
            "information from other VMs");
}

// ===================================================================== §9 error catalogue

TEST_F(OneGateSimulatorTest, ErrorCatalogue) {
  struct Case {
    std::string what;
    httplib::Result result;
    int status;
    std::string body;
  };
  sim_.SetPermission("vrouter.show", false);
  std::vector<Case> cases;
  cases.push_back({"unknown route", As(head_).Get("/vms"), 400, kUnsupported});
  cases.push_back({"no service", As(loner_).Get("/service"), 400, "Empty or invalid SERVICE_ID"});
  cases.push_back({"not in service", As(head_).Get(Vms(loner_.id)), 400,
                   "Service " + std::to_string(service_) + " does not contain VM " +
                       std::to_string(loner_.id) + "."});
  cases.push_back({"no service for peers", As(loner_).Get(Vms(head_.id)), 400,
                   "This VM does not belong to any Virtual Router or Service, so it cannot "
                   "retrieve information from other VMs"});
  cases.push_back(
      {"scale refused", As(head_).Put("/service/role/compute", R"({"cardinality":99})", kForm), 400,
       "Error performing action on service " + std::to_string(service_) + " role compute"});
  cases.push_back({"wrong resource",
                   As(head_).Post(Vms(head_.id) + "/action", "{}", "application/json"), 400,
                   "Error parsing JSON: Wrong resource type"});
  cases.push_back({"auth", Anonymous().Get("/service"), 401, "Not authorized"});
  cases.push_back({"permission", Anonymous().Get("/vrouter"), 403,
                   "Action (show) on resource (vrouter) not supported"});
  cases.push_back({"restricted attr", PutForm(head_, "/vm", "data=ROLE_NAME%3Dx"), 403,
                   "Attribute (ROLE_NAME) cannot be modified"});
  cases.push_back({"restricted action",
                   As(head_).Post(Vms(head_.id) + "/action", R"({"action":{"perform":"reboot"}})",
                                  "application/json"),
                   403, "Action (reboot) is not allowed on this resource"});
  cases.push_back(
      {"erase missing", PutForm(head_, "/vm", "data=NOPE&type=2"), 500, "attribute not found"});
  cases.push_back({"action not available",
                   As(head_).Post(Vms(head_.id) + "/action", R"({"action":{"perform":"fly"}})",
                                  "application/json"),
                   500, "fly action not available for this resource"});
  for (auto& c : cases) {
    ASSERT_TRUE(c.result) << c.what;
    EXPECT_EQ(c.result->status, c.status) << c.what;
    EXPECT_EQ(c.result->body, c.body) << c.what;
    EXPECT_EQ(c.result->get_header_value("Content-Type"), kJsonType) << c.what;
  }
  VmSpec ghost;
  ghost.user_template = {{"SERVICE_ID", "424242"}};
  auto not_found = As(sim_.AddVm(-1, "", ghost)).Get("/service");
  EXPECT_EQ(not_found->status, 404);
  EXPECT_EQ(not_found->body, "Service 424242 not found");
}

// ===================================================================== faults

class OneGateSimulatorFaultTest : public OneGateSimulatorTest {};

TEST_F(OneGateSimulatorFaultTest, StatusFaultCountsTimesAndIsRecorded) {
  Fault f;
  f.kind = FaultKind::kStatus;
  f.status = 503;
  f.body = "Service Unavailable";
  f.times = 2;
  sim_.InjectFault(f);
  httplib::Client cli = As(head_);
  auto a = cli.Get("/vm");
  auto b = cli.Get("/vm");
  auto c = cli.Get("/vm");
  EXPECT_EQ(a->status, 503);
  EXPECT_EQ(a->body, "Service Unavailable");
  EXPECT_EQ(a->get_header_value("Content-Type"), kJsonType);
  EXPECT_EQ(b->status, 503);
  EXPECT_EQ(c->status, 200);
  const auto recorded = sim_.Requests();
  ASSERT_EQ(recorded.size(), 3u);
  EXPECT_EQ(recorded[0].status, 503);
  EXPECT_EQ(recorded[1].status, 503);
  EXPECT_EQ(recorded[2].status, 200);
}

TEST_F(OneGateSimulatorFaultTest, FaultsMatchMethodAndPathPrefixAndDoNotRunTheRequest) {
  Fault f;
  f.kind = FaultKind::kStatus;
  f.method = "PUT";
  f.path_prefix = "/vm";
  f.status = 502;
  sim_.InjectFault(f);
  EXPECT_EQ(As(head_).Get("/vm")->status, 200);
  EXPECT_EQ(As(head_).Get("/service")->status, 200);
  EXPECT_EQ(PutForm(head_, "/vm", "data=A%3D1")->status, 502);
  EXPECT_EQ(PutForm(head_, Vms(c1_.id), "data=A%3D1")->status, 502);  // "/vms" starts with "/vm"
  EXPECT_EQ(Attr(head_, "A"), "");
  sim_.ClearFaults();
  EXPECT_EQ(PutForm(head_, "/vm", "data=A%3D1")->status, 200);
}

TEST_F(OneGateSimulatorFaultTest, HangOutlastsTheClientTimeout) {
  Fault f;
  f.kind = FaultKind::kHang;
  f.delay = milliseconds(300);
  f.times = 1;
  sim_.InjectFault(f);
  httplib::Client cli = As(head_);
  cli.set_read_timeout(0, 100000);  // 100 ms
  const auto start = std::chrono::steady_clock::now();
  auto r = cli.Get("/vm");
  EXPECT_FALSE(r);
  EXPECT_EQ(r.error(), httplib::Error::Read);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(290));
  // A patient raw client sees the connection closed without an answer.
  sim_.InjectFault(f);
  const std::string req = "GET /vm HTTP/1.1\r\nHost: x\r\nX-ONEGATE-TOKEN: " + head_.token +
                          "\r\nX-ONEGATE-VMID: " + std::to_string(head_.id) + "\r\n\r\n";
  const RawResult raw = RawExchange(port_, req, milliseconds(2000));
  EXPECT_EQ(raw.data, "");
  EXPECT_EQ(raw.recv_errno, 0);  // clean EOF
  auto later = As(head_).Get("/vm");
  ASSERT_TRUE(later);
  EXPECT_EQ(later->status, 200);
  const auto recorded = sim_.Requests();
  ASSERT_EQ(recorded.size(), 3u);
  EXPECT_EQ(recorded[0].status, 0);
  EXPECT_EQ(recorded[1].status, 0);
}

TEST_F(OneGateSimulatorFaultTest, SlowAnswersAfterTheDelayAndRunsTheRequest) {
  Fault f;
  f.kind = FaultKind::kSlow;
  f.delay = milliseconds(150);
  f.times = 1;
  sim_.InjectFault(f);
  const auto start = std::chrono::steady_clock::now();
  auto r = PutForm(head_, "/vm", "data=SLOW%3D1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(150));
  EXPECT_EQ(Attr(head_, "SLOW"), "1");
}

TEST_F(OneGateSimulatorFaultTest, TruncatedAnnouncesTheFullLengthButSendsHalf) {
  Fault f;
  f.kind = FaultKind::kTruncated;
  sim_.InjectFault(f);
  const std::string req = "GET /vm HTTP/1.1\r\nHost: x\r\nX-ONEGATE-TOKEN: " + head_.token +
                          "\r\nX-ONEGATE-VMID: " + std::to_string(head_.id) + "\r\n\r\n";
  const RawResult raw = RawExchange(port_, req, milliseconds(2000));
  const auto responses = ParseResponses(raw.data);
  ASSERT_EQ(responses.size(), 1u) << raw.data;
  EXPECT_EQ(responses[0].status, 200);
  EXPECT_FALSE(responses[0].complete);
  const size_t announced = std::stoul(responses[0].headers.at("content-length"));
  EXPECT_GT(announced, 10u);
  EXPECT_EQ(responses[0].body.size(), announced / 2);
  EXPECT_FALSE(As(head_).Get("/vm"));  // httplib's client reports an error
}

TEST_F(OneGateSimulatorFaultTest, MalformedIs200WithABodyThatIsNotJson) {
  Fault f;
  f.kind = FaultKind::kMalformed;
  f.body = R"({"VM":{"ID":"1","NAME":)";
  f.times = 1;
  sim_.InjectFault(f);
  auto r = As(head_).Get("/vm");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(Json::accept(r->body));
  Fault plain;
  plain.kind = FaultKind::kMalformed;  // default body "Internal error"
  plain.times = 1;
  sim_.InjectFault(plain);
  auto d = As(head_).Get("/service");
  EXPECT_EQ(d->status, 200);
  EXPECT_FALSE(Json::accept(d->body));
}

TEST_F(OneGateSimulatorFaultTest, ResetClosesWithoutAnswering) {
  Fault f;
  f.kind = FaultKind::kReset;
  f.times = 1;
  sim_.InjectFault(f);
  const std::string req = "GET /vm HTTP/1.1\r\nHost: x\r\nX-ONEGATE-TOKEN: " + head_.token +
                          "\r\nX-ONEGATE-VMID: " + std::to_string(head_.id) + "\r\n\r\n";
  const RawResult raw = RawExchange(port_, req, milliseconds(2000));
  EXPECT_EQ(raw.data, "");
  EXPECT_EQ(raw.recv_errno, ECONNRESET);
  EXPECT_EQ(sim_.Requests().at(0).status, 0);
}

// ===================================================================== observation

TEST_F(OneGateSimulatorTest, RequestsAreRecordedWithTheStatusAnswered) {
  As(head_).Get("/service?extended=1");
  PutForm(head_, "/vm", "data=A%3D1&type=1");
  Anonymous().Get("/vm");
  const auto r = sim_.Requests();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].method, "GET");
  EXPECT_EQ(r[0].path, "/service");
  EXPECT_EQ(r[0].query, "extended=1");
  EXPECT_EQ(r[0].vm_id, head_.id);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_EQ(r[1].method, "PUT");
  EXPECT_EQ(r[1].body, "data=A%3D1&type=1");
  EXPECT_EQ(r[2].vm_id, -1);
  EXPECT_EQ(r[2].status, 401);
  sim_.ClearRequests();
  EXPECT_TRUE(sim_.Requests().empty());
}

// ===================================================================== operator API

TEST_F(OneGateSimulatorTest, OperatorApiDrivesTheModel) {
  sim_.EnableOperatorApi(true);
  httplib::Client op = Anonymous();
  auto created = op.Post(
      "/_sim/services", R"({"name":"lab","roles":[{"name":"worker","max_vms":3,"cooldown_ms":0}]})",
      "application/json");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200);
  const int sid = Json::parse(created->body)["id"];
  auto vm = op.Post("/_sim/vms",
                    Json{{"service_id", sid},
                         {"role", "worker"},
                         {"nics", {{{"ip", "10.1.1.5"}, {"network", "lab"}}}},
                         {"context", {{"TOKEN", "YES"}}}}
                        .dump(),
                    "application/json");
  ASSERT_TRUE(vm);
  ASSERT_EQ(vm->status, 200);
  const Json vm_json = Json::parse(vm->body);
  const VmHandle h{vm_json["id"].get<int>(), vm_json["token"].get<std::string>()};
  ASSERT_EQ(PutForm(h, "/vm", "data=READY%3DYES")->status, 200);
  const Json ut = Json::parse(op.Get("/_sim/vms/" + std::to_string(h.id) + "/user_template")->body);
  EXPECT_EQ(ut["READY"], "YES");
  EXPECT_EQ(ut["ROLE_NAME"], "worker");
  // onevm nic-attach and disk-attach, operator side: in the extended VM hash at once.
  ASSERT_EQ(op.Post("/_sim/vms/" + std::to_string(h.id) + "/nics",
                    R"({"ip":"10.1.2.5","network":"other","name":"hot"})", "application/json")
                ->status,
            200);
  ASSERT_EQ(op.Post("/_sim/vms/" + std::to_string(h.id) + "/disks",
                    R"({"TARGET":"vdb","IMAGE":"ood-home","PERSISTENT":"YES"})", "application/json")
                ->status,
            200);
  const Json full = Json::parse(op.Get("/_sim/vms/" + std::to_string(h.id))->body)["vm"];
  ASSERT_TRUE(full["TEMPLATE"]["NIC"].is_array());
  EXPECT_EQ(full["TEMPLATE"]["NIC"][1]["IP"], "10.1.2.5");
  EXPECT_EQ(full["TEMPLATE"]["DISK"]["IMAGE"], "ood-home");
  // Faults set through the API apply to OneGate routes but never to /_sim/.
  ASSERT_EQ(
      op.Post("/_sim/faults", R"({"kind":"status","status":504,"times":-1})", "application/json")
          ->status,
      200);
  EXPECT_EQ(As(h).Get("/vm")->status, 504);
  EXPECT_EQ(op.Get("/_sim/health")->status, 200);
  ASSERT_EQ(op.Delete("/_sim/faults")->status, 200);
  EXPECT_EQ(As(h).Get("/vm")->status, 200);
  // Scale (operator side), terminate, read back.
  ASSERT_EQ(op.Post("/_sim/services/" + std::to_string(sid) + "/scale",
                    R"({"role":"worker","cardinality":2})", "application/json")
                ->status,
            200);
  EXPECT_EQ(sim_.Cardinality(sid, "worker"), 2);
  ASSERT_EQ(op.Post("/_sim/vms/" + std::to_string(h.id) + "/terminate", R"({"hard":true})",
                    "application/json")
                ->status,
            200);
  const Json terms = Json::parse(op.Get("/_sim/terminations")->body);
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(terms[0]["vm_id"], h.id);
  EXPECT_EQ(terms[0]["hard"], true);
  const Json reqs = Json::parse(op.Get("/_sim/requests")->body);
  ASSERT_EQ(reqs.size(), 3u);  // only OneGate routes are recorded
  EXPECT_EQ(reqs[1]["status"], 504);
  const Json view = Json::parse(op.Get("/_sim/services/" + std::to_string(sid))->body);
  EXPECT_EQ(view["roles"][0]["cardinality"], 1);
  auto onegate = op.Get("/_sim/services/" + std::to_string(sid) + "/onegate?extended=1");
  EXPECT_EQ(onegate->status, 200);
  EXPECT_EQ(op.Get("/_sim/nothing")->status, 404);
}

// The standalone program: prints its endpoint, serves, exits 0 on SIGTERM.
TEST(OneGateSimulatorProgramTest, PrintsEndpointServesAndStopsOnSigterm) {
  char self[PATH_MAX] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  std::string dir(self, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  const std::string program = dir + "/onegate-sim";
  if (::access(program.c_str(), X_OK) != 0) GTEST_SKIP() << program << " not built";
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::vector<std::string> args = {program, "--listen", "127.0.0.1:0", "--operator-api"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  std::string line;
  char c;
  pollfd p{out[0], POLLIN, 0};
  while (line.find('\n') == std::string::npos && ::poll(&p, 1, 5000) > 0 &&
         ::read(out[0], &c, 1) == 1) {
    line += c;
  }
  ::close(out[0]);
  ASSERT_EQ(line.rfind("http://127.0.0.1:", 0), 0u) << line;
  const int port = std::stoi(line.substr(line.rfind(':') + 1));
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(2);
  auto health = cli.Get("/_sim/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// ===================================================================== escape_attr / parser

TEST(OneGateSimulatorEscapeTest, EscapeAttrTable) {
  // onegate-api.md §4.1, "Sent line" -> what the server hands to oned.
  EXPECT_EQ(EscapeAttr("READY=YES"), R"(READY="YES")");
  EXPECT_EQ(EscapeAttr(R"(A=1\nB=two words)"), "A=\"1\"\nB=\"two words\"");
  EXPECT_EQ(EscapeAttr("A=1\nB=2"), "A=\"1\"\nB=\"2\"");
  EXPECT_EQ(EscapeAttr("URL=http://h:1/p?q=1"), R"(URL="http://h:1/p?q=1")");
  EXPECT_EQ(EscapeAttr("K=x=y"), R"(K="x=y")");
  EXPECT_EQ(EscapeAttr(R"(K="already quoted")"), R"(K="already quoted")");
  EXPECT_EQ(EscapeAttr("K=a,b,c"), R"(K="a",b",c")");
  EXPECT_EQ(EscapeAttr(R"(K=path\with)"), R"(K="path"\with)");
  EXPECT_EQ(EscapeAttr(R"(K=say "hi")"), R"(K="say "hi")");
  EXPECT_EQ(EscapeAttr("K="), R"(K=")");
  EXPECT_EQ(EscapeAttr("K = v"), R"(K =" v")");
  EXPECT_EQ(EscapeAttr("READY"), "READY");
}

TEST(OneGateSimulatorEscapeTest, OnedParserOutcomesForTheTable) {
  auto single = [](const std::string& line) -> std::optional<std::string> {
    const ParsedTemplate t = ParseOnedTemplate(EscapeAttr(line));
    if (!t.ok || t.attributes.size() != 1 || !t.attributes[0].value) return std::nullopt;
    return t.attributes[0].value;
  };
  EXPECT_EQ(single("READY=YES"), "YES");
  EXPECT_EQ(single("K=x=y"), "x=y");
  EXPECT_EQ(single(R"(K="already quoted")"), "already quoted");
  EXPECT_EQ(single("K = v"), " v");
  for (const char* broken : {"K=a,b,c", R"(K=path\with)", "K=[x]", R"(K=say "hi")", "K="}) {
    const ParsedTemplate t = ParseOnedTemplate(EscapeAttr(broken));
    EXPECT_FALSE(t.ok) << broken;
    EXPECT_EQ(t.error.rfind("Parse error", 0), 0u) << t.error;
  }
}

TEST(OneGateSimulatorEscapeTest, OnedParserVectorsDuplicatesAndComments) {
  const ParsedTemplate t =
      ParseOnedTemplate("# comment\nA = \"1\"\nv=[x=\"1\", Y=\"two\"]\nA=\"2\"\nE=\n");
  ASSERT_TRUE(t.ok) << t.error;
  ASSERT_EQ(t.attributes.size(), 4u);
  EXPECT_EQ(t.attributes[0].name, "A");
  EXPECT_EQ(t.attributes[1].name, "V");
  EXPECT_FALSE(t.attributes[1].value);
  EXPECT_EQ(t.attributes[1].vector.at("X"), "1");
  EXPECT_EQ(t.attributes[1].vector.at("Y"), "two");
  EXPECT_EQ(t.attributes[2].value, "2");
  EXPECT_EQ(t.attributes[3].value, "");
  const ParsedTemplate err = ParseOnedTemplate(R"(K="a",b)");
  EXPECT_EQ(err.error,
            "Parse error: syntax error, unexpected COMMA, expecting $end or VARIABLE at line 1, "
            "columns 5:6");
}

TEST_F(OneGateSimulatorTest, RepeatedKeyInOneUpdateBecomesAnArray) {
  ASSERT_EQ(PutForm(head_, "/vm", "data=R%3D1%0AR%3D2")->status, 200);
  EXPECT_EQ(Parse(As(head_).Get("/vm"))["VM"]["USER_TEMPLATE"]["R"], (Json{"1", "2"}));
  ASSERT_EQ(PutForm(head_, "/vm", "data=R%3D3")->status, 200);
  EXPECT_EQ(Attr(head_, "R"), "3");
}

}  // namespace
}  // namespace onehpc::sim
