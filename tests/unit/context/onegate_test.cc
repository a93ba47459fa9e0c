// OneGateClient over a scripted fake HttpTransport: exact request bytes (onegate-api.md
// section 4.2), retry classification per status, attempts and time slept on a fakes::FakeClock.
#include "context/onegate.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/version.h"
#include "context/http.h"
#include "tests/fakes/clock.h"
#include "tests/fakes/http.h"

namespace onehpc {
namespace {

constexpr char kToken[] = "tok-3f9a0c1d2e";
constexpr char kVmJson[] = R"({"VM":{"NAME":"w","ID":"42","STATE":"3","LCM_STATE":"3"}})";
constexpr char kServiceJson[] =
    R"({"SERVICE":{"id":"19","name":"hpc","state":2,"roles":[{"name":"compute","cardinality":1,
        "state":2,"nodes":[{"deploy_id":42,"running":null}]}]}})";

std::string Header(const HttpRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "<absent>";
}

OneGateConfig TestConfig() {
  OneGateConfig c;
  c.endpoint = "http://169.254.16.9:5030";
  c.vmid = "42";
  c.token = kToken;
  c.connect_timeout = Duration(200);
  c.request_timeout = Duration(300);
  c.retry.initial_delay = Duration(100);
  c.retry.multiplier = 2.0;
  c.retry.max_delay = Duration(1000);
  c.retry.max_attempts = 5;
  c.retry.deadline = Duration(60000);
  c.retry.jitter = 0.0;  // deterministic sleeps
  return c;
}

class OneGateClientTest : public ::testing::Test {
 protected:
  OneGateClient Client(OneGateConfig config = TestConfig()) {
    return OneGateClient(std::move(config), http_, clock_);
  }
  const HttpRequest& Only() {
    EXPECT_EQ(http_.requests.size(), 1u);
    return http_.requests.at(0);
  }
  fakes::ScriptedTransport http_;
  fakes::FakeClock clock_;
};

// ---- Exact requests

TEST_F(OneGateClientTest, GetVmRequestAndHeaders) {
  http_.Then(200, kVmJson);
  auto client = Client();
  auto vm = client.GetVm();
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(vm->id, 42);
  const HttpRequest& r = Only();
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.url, "http://169.254.16.9:5030/vm");
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(Header(r, "X-ONEGATE-TOKEN"), kToken);
  EXPECT_EQ(Header(r, "X-ONEGATE-VMID"), "42");
  EXPECT_EQ(Header(r, "User-Agent"), std::string("one-hpc/") + ONEHPC_VERSION);
  EXPECT_EQ(Header(r, "Accept"), "application/json");
  EXPECT_EQ(Header(r, "Content-Type"), "<absent>");
  EXPECT_EQ(r.connect_timeout, Duration(200));
  EXPECT_EQ(r.total_timeout, Duration(300));
  EXPECT_EQ(client.requests_sent(), 1);
  EXPECT_EQ(clock_.sleeps(), 0);
}

TEST_F(OneGateClientTest, EndpointWithTrailingSlash) {
  http_.Then(200, kVmJson);
  OneGateConfig c = TestConfig();
  c.endpoint = "http://169.254.16.9:5030//";
  auto client = Client(c);
  ASSERT_TRUE(client.GetVmById(311));
  EXPECT_EQ(Only().url, "http://169.254.16.9:5030/vms/311");
  EXPECT_EQ(Only().method, "GET");
}

TEST_F(OneGateClientTest, UpdateVmBodyMatchesTheOfficialClient) {
  http_.Then(200);
  auto client = Client();
  ASSERT_TRUE(client.UpdateVm({{"READY", "YES"}}));
  const HttpRequest& r = Only();
  EXPECT_EQ(r.method, "PUT");
  EXPECT_EQ(r.url, "http://169.254.16.9:5030/vm");
  EXPECT_EQ(r.body, "data=READY%3DYES&type=1");
  EXPECT_EQ(Header(r, "Content-Type"), "application/x-www-form-urlencoded");
  EXPECT_EQ(Header(r, "X-ONEGATE-TOKEN"), kToken);
}

TEST_F(OneGateClientTest, UpdateVmByIdSeveralLinesJoinedByRealNewlines) {
  http_.Then(200);
  auto client = Client();
  ASSERT_TRUE(
      client.UpdateVmById(43, {{"A", "1"}, {"B", "two words"}, {"URL", "http://h:1/p?q=1&r=x=y"}}));
  const HttpRequest& r = Only();
  EXPECT_EQ(r.method, "PUT");
  EXPECT_EQ(r.url, "http://169.254.16.9:5030/vms/43");
  EXPECT_EQ(r.body,
            "data=A%3D1%0AB%3Dtwo+words%0AURL%3Dhttp%3A%2F%2Fh%3A1%2Fp%3Fq%3D1%26r%3Dx%3Dy"
            "&type=1");
}

TEST_F(OneGateClientTest, EraseBody) {
  http_.Then(200);
  auto client = Client();
  ASSERT_TRUE(client.EraseVmAttribute("READY"));
  EXPECT_EQ(Only().method, "PUT");
  EXPECT_EQ(Only().url, "http://169.254.16.9:5030/vm");
  EXPECT_EQ(Only().body, "data=READY&type=2");
  EXPECT_EQ(Header(Only(), "Content-Type"), "application/x-www-form-urlencoded");
}

TEST_F(OneGateClientTest, EraseToleratesAttributeNotFound) {
  http_.Then(500, "attribute not found");
  auto client = Client();
  EXPECT_TRUE(client.EraseVmAttribute("READY"));
  EXPECT_EQ(client.requests_sent(), 1);  // deterministic: not retried
  EXPECT_EQ(clock_.sleeps(), 0);
}

TEST_F(OneGateClientTest, EraseOtherFailuresAreErrors) {
  http_.Then(403, "Attribute (ROLE_NAME) cannot be deleted");
  auto client = Client();
  auto st = client.EraseVmAttribute("ROLE_NAME");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "PUT /vm: HTTP 403 Attribute (ROLE_NAME) cannot be deleted");
}

TEST_F(OneGateClientTest, ServiceCompactAndExtended) {
  http_.Then(200, kServiceJson);
  auto client = Client();
  auto compact = client.GetService(false);
  ASSERT_TRUE(compact) << compact.error().message;
  EXPECT_EQ(compact->roles.at(0).nodes.at(0).vm_id, 42);
  auto extended = client.GetService(true);
  ASSERT_TRUE(extended);
  ASSERT_EQ(http_.requests.size(), 2u);
  EXPECT_EQ(http_.requests[0].url, "http://169.254.16.9:5030/service");
  EXPECT_EQ(http_.requests[0].method, "GET");
  EXPECT_EQ(http_.requests[0].body, "");
  EXPECT_EQ(http_.requests[1].url, "http://169.254.16.9:5030/service?extended=true");
  EXPECT_EQ(http_.requests[1].body, "");
  // The extended document (every VM of the service) has its own, longer limit.
  EXPECT_EQ(http_.requests[0].total_timeout, Duration(300));
  EXPECT_EQ(http_.requests[1].total_timeout, Duration(30000));
  // Never shorter than the request limit.
  OneGateConfig slow = TestConfig();
  slow.request_timeout = Duration(40000);
  http_.Then(200, kServiceJson);
  ASSERT_TRUE(Client(slow).GetService(true));
  EXPECT_EQ(http_.requests.at(2).total_timeout, Duration(40000));
}

TEST_F(OneGateClientTest, ScaleRoleRawJson) {
  http_.Then(200);
  auto client = Client();
  ASSERT_TRUE(client.ScaleRole("compute", 3));
  const HttpRequest& r = Only();
  EXPECT_EQ(r.method, "PUT");
  EXPECT_EQ(r.url, "http://169.254.16.9:5030/service/role/compute");
  EXPECT_EQ(r.body, R"({"cardinality":3})");
  EXPECT_EQ(Header(r, "Content-Type"), "application/json");
}

TEST_F(OneGateClientTest, TerminateVmPostsTheActionAsTheCliDoes) {
  http_.Then(204);
  auto client = Client();
  ASSERT_TRUE(client.TerminateVm(305));
  const HttpRequest& r = Only();
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.url, "http://169.254.16.9:5030/vms/305/action");
  EXPECT_EQ(r.body, R"({"action":{"perform":"terminate"}})");
  EXPECT_EQ(Header(r, "Content-Type"), "application/json");
}

TEST_F(OneGateClientTest, ScaleRoleNameIsPathEncoded) {
  http_.Then(200);
  auto client = Client();
  ASSERT_TRUE(client.ScaleRole("a b/c", 0));
  EXPECT_EQ(Only().url, "http://169.254.16.9:5030/service/role/a%20b%2Fc");
}

TEST_F(OneGateClientTest, ScaleRoleRefusalIsNotRetried) {
  http_.Then(400, "Error performing action on service 19 role compute");
  auto client = Client();
  auto st = client.ScaleRole("compute", 3);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, ErrorKind::kNetwork);
  EXPECT_EQ(st.error().message,
            "PUT /service/role/compute: HTTP 400 Error performing action on service 19 role "
            "compute");
  EXPECT_EQ(client.requests_sent(), 1);
  EXPECT_EQ(client.last_failure().status, 400);
  EXPECT_EQ(client.last_failure().body, "Error performing action on service 19 role compute");
}

TEST_F(OneGateClientTest, BadScaleArgumentsSendNothing) {
  auto client = Client();
  EXPECT_FALSE(client.ScaleRole("", 1));
  EXPECT_FALSE(client.ScaleRole("compute", -1));
  EXPECT_FALSE(client.GetVmById(-1));
  EXPECT_TRUE(http_.requests.empty());
}

// ---- Refusals before sending

TEST_F(OneGateClientTest, UpdateRefusesBadKeysAndValuesNamingThem) {
  auto client = Client();
  struct Case {
    std::string key, value, expected;
  };
  const std::vector<Case> cases = {
      {"ready", "YES", "'ready'"},
      {"A B", "1", "'A B'"},
      {"A=B", "1", "must match [A-Z0-9_]+"},
      {"", "1", "is empty"},
      {"LIST", "a,b,c", "LIST ('a,b,c'): it contains ','"},
      {"Q", "say \"hi\"", "contains '\"'"},
      {"P", "path\\with", "contains '\\'"},
      {"V", "[x]", "contains '['"},
      {"V", "x]", "contains ']'"},
      {"M", "two\nlines", "contains a newline"},
      {"C", "tab\there", "control character"},
      {"E", "", "E: it is empty"},
      {"LONG", std::string(100, 'x') + ",", "LONG: it contains ','"},
      {"DB_PASSWORD", "a,b", "DB_PASSWORD: it contains ','"},
  };
  for (const auto& c : cases) {
    auto st = client.UpdateVm({{"OK", "fine"}, {c.key, c.value}});
    ASSERT_FALSE(st) << c.key;
    EXPECT_EQ(st.error().kind, ErrorKind::kInvalidInput);
    EXPECT_NE(st.error().message.find(c.expected), std::string::npos) << st.error().message;
    EXPECT_NE(st.error().message.find("PUT /vm"), std::string::npos);
    if (c.key == "LONG") {
      EXPECT_EQ(st.error().message.find("xxxx"), std::string::npos);
    }
    if (c.key == "DB_PASSWORD") {
      EXPECT_EQ(st.error().message.find("a,b"), std::string::npos);
    }
  }
  EXPECT_FALSE(client.UpdateVm({}));
  EXPECT_FALSE(client.UpdateVmById(43, {{"X", "a,b"}}));
  EXPECT_FALSE(client.EraseVmAttribute("lower"));
  EXPECT_FALSE(client.EraseVmAttribute(""));
  EXPECT_TRUE(http_.requests.empty());
  EXPECT_EQ(client.requests_sent(), 0);
}

TEST(OneGateValueProblemTest, Rules) {
  EXPECT_EQ(OneGateValueProblem("YES"), "");
  EXPECT_EQ(OneGateValueProblem("http://h:1/p?q=1"), "");
  EXPECT_EQ(OneGateValueProblem("x=y"), "");
  EXPECT_EQ(OneGateValueProblem("two words"), "");
  EXPECT_EQ(OneGateValueProblem("aGVsbG8gd29ybGQ="), "");
  EXPECT_NE(OneGateValueProblem(""), "");
  EXPECT_NE(OneGateValueProblem("a,b"), "");
  EXPECT_NE(OneGateValueProblem("a\r"), "");
  EXPECT_EQ(OneGateKeyProblem("SLURM_NODENAME_2"), "");
  EXPECT_NE(OneGateKeyProblem("Slurm"), "");
}

TEST(FormEncodeTest, LikeRubyWwwFormComponent) {
  EXPECT_EQ(FormEncode("READY=YES"), "READY%3DYES");
  EXPECT_EQ(FormEncode("a b\nc"), "a+b%0Ac");
  EXPECT_EQ(FormEncode("AZaz09-._*"), "AZaz09-._*");
  EXPECT_EQ(FormEncode("~+&%/\\"), "%7E%2B%26%25%2F%5C");
  EXPECT_EQ(FormEncode("\xc3\xa9"), "%C3%A9");
  EXPECT_EQ(FormEncode(std::string_view("\0", 1)), "%00");
  EXPECT_EQ(PathEncode("a b+~"), "a%20b%2B~");
}

// ---- Retry classification

struct StatusCase {
  long status;
  const char* body;
  bool retried;
};

class OneGateStatusTest : public OneGateClientTest,
                          public ::testing::WithParamInterface<StatusCase> {};

TEST_P(OneGateStatusTest, Classification) {
  const StatusCase& c = GetParam();
  http_.Then(c.status, c.body);
  http_.Then(200);
  auto client = Client();
  auto st = client.UpdateVm({{"READY", "YES"}});
  if (c.retried) {
    EXPECT_TRUE(st) << st.error().message;
    EXPECT_EQ(client.requests_sent(), 2);
    EXPECT_EQ(clock_.slept(), Duration(100));
  } else {
    ASSERT_FALSE(st);
    EXPECT_EQ(client.requests_sent(), 1);
    EXPECT_EQ(clock_.sleeps(), 0);
    std::string expected = "PUT /vm: HTTP " + std::to_string(c.status);
    EXPECT_EQ(st.error().message.rfind(expected, 0), 0u) << st.error().message;
    if (*c.body) {
      EXPECT_NE(st.error().message.find(c.body), std::string::npos);
    }
    EXPECT_EQ(client.last_failure().status, c.status);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Statuses, OneGateStatusTest,
    ::testing::Values(
        StatusCase{500, "Internal error", true}, StatusCase{502, "Bad Gateway", true},
        StatusCase{503, "", true}, StatusCase{504, "Gateway Timeout", true},
        StatusCase{429, "Too Many Requests", true},
        StatusCase{401, "Not authorized", true},  // within the boot budget
        StatusCase{500, "attribute not found", false},
        StatusCase{500, "[VirtualMachineUpdateTemplate] syntax error, unexpected $end", false},
        StatusCase{500, "Error parsing template", false},
        StatusCase{500, "parse error at line 1", false},
        StatusCase{500, "terminate action not available for this resource", false},
        StatusCase{502, "syntax error", true},  // only 500 carries oned's verdict
        StatusCase{400, "OneGate server doesn't support this feature", false},
        StatusCase{403, "Attribute (SERVICE_ID) cannot be modified", false},
        StatusCase{404, "Service 19 not found", false}, StatusCase{405, "", false},
        StatusCase{408, "", false}, StatusCase{302, "", false}));

TEST_F(OneGateClientTest, NotFoundHasKindNotFound) {
  http_.Then(404, "Service 19 not found");
  auto client = Client();
  auto s = client.GetService(false);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(s.error().message, "GET /service: HTTP 404 Service 19 not found");
}

TEST_F(OneGateClientTest, ErrorMessageExample) {
  http_.Then(400, "Empty or invalid SERVICE_ID\n");
  auto client = Client();
  auto s = client.GetService(true);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "GET /service?extended=true: HTTP 400 Empty or invalid SERVICE_ID");
}

TEST_F(OneGateClientTest, LongErrorBodiesAreShortened) {
  http_.Then(403, std::string(1000, 'x'));
  auto client = Client();
  auto s = client.GetVm();
  ASSERT_FALSE(s);
  EXPECT_LT(s.error().message.size(), 260u);
}

TEST_F(OneGateClientTest, BackoffSleepsOnTheClockUntilSuccess) {
  http_.Then(503, "Service Unavailable");
  http_.Then(503, "Service Unavailable");
  http_.Then(503, "Service Unavailable");
  http_.Then(200, kVmJson);
  auto client = Client();
  auto vm = client.GetVm();
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(client.requests_sent(), 4);
  EXPECT_EQ(clock_.sleeps(), 3);
  EXPECT_EQ(clock_.slept(), Duration(100 + 200 + 400));
}

TEST_F(OneGateClientTest, GivesUpAfterMaxAttempts) {
  http_.Then(503, "Service Unavailable");
  auto client = Client();
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_EQ(client.requests_sent(), 5);
  EXPECT_EQ(clock_.slept(), Duration(100 + 200 + 400 + 800));
  EXPECT_EQ(vm.error().message, "GET /vm: gave up after 5 attempts: HTTP 503 Service Unavailable");
  EXPECT_EQ(vm.error().kind, ErrorKind::kNetwork);
}

TEST_F(OneGateClientTest, GivesUpAtTheDeadline) {
  http_.Then(500, "Internal error");
  OneGateConfig c = TestConfig();
  c.retry.max_attempts = 0;  // unlimited
  c.retry.deadline = Duration(1000);
  auto client = Client(c);
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  // Sleeps 100, 200, 400 (total 700); the next 800 would pass 1000.
  EXPECT_EQ(client.requests_sent(), 4);
  EXPECT_EQ(clock_.slept(), Duration(700));
  EXPECT_NE(vm.error().message.find("gave up at the deadline"), std::string::npos);
}

TEST_F(OneGateClientTest, TransportErrorsAreRetried) {
  http_.ThenError(ErrorKind::kNetwork, "GET http://169.254.16.9:5030/vm: Connection refused");
  http_.ThenError(ErrorKind::kNetwork, "timeout: GET http://169.254.16.9:5030/vm: timed out");
  http_.ThenError(ErrorKind::kNetwork, "GET http://x/vm: truncated response");
  http_.Then(200, kVmJson);
  auto client = Client();
  auto vm = client.GetVm();
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(client.requests_sent(), 4);
  EXPECT_EQ(clock_.slept(), Duration(700));
}

TEST_F(OneGateClientTest, LocalTransportErrorsAreNot) {
  http_.ThenError(ErrorKind::kInvalidInput, "GET htp://x/vm: Unsupported protocol");
  auto client = Client();
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_EQ(client.requests_sent(), 1);
  EXPECT_EQ(vm.error().kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(vm.error().message, "GET /vm: GET htp://x/vm: Unsupported protocol");
  EXPECT_EQ(client.last_failure().status, 0);
}

TEST_F(OneGateClientTest, UnauthorizedRetriedOnlyWithinItsAttemptBudget) {
  http_.Then(401, "Not authorized");
  auto client = Client();  // unauthorized_attempts = 3 by default
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.slept(), Duration(100 + 200));
  EXPECT_EQ(vm.error().message.rfind("GET /vm: HTTP 401 Not authorized", 0), 0u)
      << vm.error().message;
  EXPECT_EQ(vm.error().message.find(kToken), std::string::npos);
}

TEST_F(OneGateClientTest, UnauthorizedRetriedOnlyWithinItsWindow) {
  http_.Then(401, "Not authorized");
  OneGateConfig c = TestConfig();
  c.unauthorized_attempts = 100;
  c.unauthorized_window = Duration(250);
  c.retry.max_attempts = 0;
  auto client = Client(c);
  ASSERT_FALSE(client.GetVm());
  // t=0 401 → sleep 100; t=100 401 → sleep 200; t=300 401: past the window → fatal.
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.slept(), Duration(300));
}

TEST_F(OneGateClientTest, UnauthorizedRecoversAtBoot) {
  http_.Then(401, "Not authorized");
  http_.Then(200, kServiceJson);
  auto client = Client();
  ASSERT_TRUE(client.GetService(false));
  EXPECT_EQ(client.requests_sent(), 2);
}

TEST_F(OneGateClientTest, UnauthorizedBudgetZeroMeansFatalAtOnce) {
  http_.Then(401, "Not authorized");
  OneGateConfig c = TestConfig();
  c.unauthorized_attempts = 1;
  auto client = Client(c);
  ASSERT_FALSE(client.GetVm());
  EXPECT_EQ(client.requests_sent(), 1);
}

TEST_F(OneGateClientTest, MalformedJsonRetriedTwiceThenSucceeds) {
  http_.Then(200, R"({"VM":{"ID":"4)");
  http_.Then(200, "<html>proxy</html>");
  http_.Then(200, kVmJson);
  auto client = Client();
  auto vm = client.GetVm();
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(client.requests_sent(), 3);
  EXPECT_EQ(clock_.slept(), Duration(300));
}

TEST_F(OneGateClientTest, MalformedJsonFailsAfterItsRetries) {
  http_.Then(200, "not json at all");
  auto client = Client();
  auto s = client.GetService(true);
  ASSERT_FALSE(s);
  EXPECT_EQ(client.requests_sent(), 3);  // 1 + malformed_retries (2)
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(s.error().message.rfind("GET /service?extended=true: malformed response (HTTP 200)", 0),
            0u)
      << s.error().message;
  EXPECT_EQ(client.last_failure().status, 200);
  EXPECT_EQ(client.last_failure().body, "");
}

TEST_F(OneGateClientTest, ValidJsonMissingFieldsCountsAsMalformed) {
  http_.Then(200, R"({"SERVICE":{"id":"19"}})");
  OneGateConfig c = TestConfig();
  c.malformed_retries = 0;
  auto client = Client(c);
  auto s = client.GetService(false);
  ASSERT_FALSE(s);
  EXPECT_EQ(client.requests_sent(), 1);
  EXPECT_NE(s.error().message.find("SERVICE.roles is missing"), std::string::npos);
}

TEST_F(OneGateClientTest, PutIgnoresTheBodyOfA2xx) {
  http_.Then(204, "whatever");
  auto client = Client();
  EXPECT_TRUE(client.UpdateVm({{"READY", "YES"}}));
}

TEST_F(OneGateClientTest, RequestsSentAccumulatesAcrossCalls) {
  http_.Then(503);
  http_.Then(200, kVmJson);
  auto client = Client();
  ASSERT_TRUE(client.GetVm());
  ASSERT_TRUE(client.GetVm());
  EXPECT_EQ(client.requests_sent(), 3);
}

// ---- Secrets

TEST_F(OneGateClientTest, TokenAndExtendedBodiesNeverLogged) {
  log::ClearSecrets();
  const std::string extended =
      R"({"SERVICE":{"id":"19","roles":[{"name":"c","cardinality":1,"nodes":[{"deploy_id":42,)"
      R"("vm_info":{"VM":{"ID":"42","STATE":"3","TEMPLATE":{"CONTEXT":)"
      R"({"ONEAPP_ADMIN_PASSWORD":"peer-secret-pw-991"}}}}}]}]}})";
  http_.Then(503, "busy");
  http_.Then(200, extended);
  log::Capture capture;
  auto client = Client();
  auto s = client.GetService(true);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->roles[0].nodes[0].vm->context.at("ONEAPP_ADMIN_PASSWORD"), "peer-secret-pw-991");
  EXPECT_TRUE(capture.Contains("GET /service?extended=true")) << capture.text();  // debug lines
  EXPECT_FALSE(capture.Contains("peer-secret-pw-991")) << capture.text();
  EXPECT_FALSE(capture.Contains(kToken)) << capture.text();
  // The token was registered: anything that would log it reads <redacted>.
  log::Info("x {}", kToken);
  EXPECT_FALSE(capture.Contains(kToken));
  log::ClearSecrets();
}

TEST_F(OneGateClientTest, UpdateLogsKeysNotValues) {
  http_.Then(200);
  log::Capture capture;
  auto client = Client();
  ASSERT_TRUE(client.UpdateVm({{"MUNGE_KEY_BASE64", "c2VjcmV0LW11bmdlLWtleQ=="}}));
  EXPECT_TRUE(capture.Contains("MUNGE_KEY_BASE64"));
  EXPECT_FALSE(capture.Contains("c2VjcmV0LW11bmdlLWtleQ"));
}

TEST_F(OneGateClientTest, ServerBodyEchoingTheTokenIsRedacted) {
  http_.Then(403, std::string("bad token ") + kToken);
  auto client = Client();
  auto vm = client.GetVm();
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().message.find(kToken), std::string::npos) << vm.error().message;
  log::ClearSecrets();
}

// ---- Config from the context

TEST(OneGateConfigTest, FromContext) {
  LoadedContext ctx;
  ctx.vars = {{"ONEGATE_ENDPOINT", "http://169.254.16.9:5030"}, {"VMID", "42"}};
  ctx.token = "  tokentoken\n";
  auto c = OneGateConfig::FromContext(ctx);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->endpoint, "http://169.254.16.9:5030");
  EXPECT_EQ(c->vmid, "42");
  EXPECT_EQ(c->token, "tokentoken");
  EXPECT_EQ(log::Redact("x tokentoken"), "x <redacted>");
  log::ClearSecrets();
}

TEST(OneGateConfigTest, FromContextErrors) {
  LoadedContext ctx;
  ctx.token = "tokentoken";
  auto missing = OneGateConfig::FromContext(ctx);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(missing.error().message,
            "ONEGATE_ENDPOINT is not set: the VM template needs CONTEXT/TOKEN=YES");

  ctx.vars = {{"ONEGATE_ENDPOINT", "169.254.16.9:5030"}, {"VMID", "42"}};
  auto scheme = OneGateConfig::FromContext(ctx);
  ASSERT_FALSE(scheme);
  EXPECT_NE(scheme.error().message.find("ONEGATE_ENDPOINT must be an http:// or https://"),
            std::string::npos);

  ctx.vars = {{"ONEGATE_ENDPOINT", "http://a b"}, {"VMID", "42"}};
  EXPECT_FALSE(OneGateConfig::FromContext(ctx));

  ctx.vars = {{"ONEGATE_ENDPOINT", "http://169.254.16.9:5030"}};
  auto novmid = OneGateConfig::FromContext(ctx);
  ASSERT_FALSE(novmid);
  EXPECT_NE(novmid.error().message.find("VMID"), std::string::npos);

  ctx.vars["VMID"] = "4x";
  auto badvmid = OneGateConfig::FromContext(ctx);
  ASSERT_FALSE(badvmid);
  EXPECT_NE(badvmid.error().message.find("VMID must be a number, got '4x'"), std::string::npos);

  ctx.vars["VMID"] = "42";
  ctx.token = " \n";
  auto notoken = OneGateConfig::FromContext(ctx);
  ASSERT_FALSE(notoken);
  EXPECT_NE(notoken.error().message.find("TOKEN=YES"), std::string::npos);
  log::ClearSecrets();
}

}  // namespace
}  // namespace onehpc
