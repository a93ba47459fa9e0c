#include "context/onegate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/version.h"

namespace onehpc {
namespace {

using nlohmann::json;

// ---- Client helpers

bool ContainsNoCase(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) {
                          return std::tolower(static_cast<unsigned char>(a)) ==
                                 std::tolower(static_cast<unsigned char>(b));
                        });
  return it != haystack.end();
}

/// A 500 that will not change on retry: oned refused the data or the action.
bool IsDeterministic500(std::string_view body) {
  static constexpr std::string_view kMarkers[] = {
      "attribute not found", "syntax error",         "parse error",
      "error parsing",       "action not available", "not available for this resource",
  };
  return std::any_of(std::begin(kMarkers), std::end(kMarkers),
                     [&](std::string_view m) { return ContainsNoCase(body, m); });
}

/// The server's body for an error message: one line, at most 200 characters, redacted.
std::string ShortBody(std::string_view body) {
  std::string out;
  for (char c : body) {
    unsigned char u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
    if (out.size() >= 200) {
      out += "...";
      break;
    }
  }
  auto first = out.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  out = out.substr(first, out.find_last_not_of(' ') - first + 1);
  return log::Redact(out);
}

/// For messages: printable, at most `max` characters.
std::string Printable(std::string_view text, std::size_t max) {
  std::string out;
  for (char c : text.substr(0, max)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      out += '?';
    } else {
      out += c;
    }
  }
  if (text.size() > max) out += "...";
  return out;
}

bool LooksSecret(std::string_view key) {
  static constexpr std::string_view kWords[] = {"PASSWORD", "PASS", "TOKEN",
                                                "SECRET",   "KEY",  "CREDENTIAL"};
  return std::any_of(std::begin(kWords), std::end(kWords),
                     [&](std::string_view w) { return key.find(w) != std::string_view::npos; });
}

std::string Trim(std::string_view s) {
  auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  auto last = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(first, last - first + 1));
}

constexpr char kFormType[] = "application/x-www-form-urlencoded";

}  // namespace

// ---- Config

Result<OneGateConfig> OneGateConfig::FromContext(const LoadedContext& context) {
  OneGateConfig config;
  auto var = [&](const char* name) -> std::string {
    auto it = context.vars.find(name);
    return it == context.vars.end() ? std::string() : Trim(it->second);
  };
  config.endpoint = var("ONEGATE_ENDPOINT");
  if (config.endpoint.empty()) {
    return Fail(ErrorKind::kInvalidInput,
                "ONEGATE_ENDPOINT is not set: the VM template needs CONTEXT/TOKEN=YES");
  }
  const bool http = config.endpoint.rfind("http://", 0) == 0;
  const bool https = config.endpoint.rfind("https://", 0) == 0;
  const bool clean = std::none_of(config.endpoint.begin(), config.endpoint.end(), [](char c) {
    unsigned char u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
  if (!(http || https) || !clean) {
    return Fail(ErrorKind::kInvalidInput,
                "ONEGATE_ENDPOINT must be an http:// or https:// URL without spaces, got '" +
                    Printable(config.endpoint, 100) + "'");
  }
  config.vmid = var("VMID");
  if (config.vmid.empty()) {
    return Fail(ErrorKind::kInvalidInput, "VMID is not set in the context");
  }
  if (config.vmid.size() > 9 || !std::all_of(config.vmid.begin(), config.vmid.end(),
                                             [](unsigned char c) { return std::isdigit(c); })) {
    return Fail(ErrorKind::kInvalidInput,
                "VMID must be a number, got '" + Printable(config.vmid, 20) + "'");
  }
  config.token = Trim(context.token);
  if (config.token.empty()) {
    return Fail(ErrorKind::kInvalidInput,
                "the OneGate token was not found (ONEGATE_TOKEN, TOKENTXT or token.txt): set "
                "TOKEN=YES in CONTEXT");
  }
  if (config.token.find_first_of("\r\n") != std::string::npos) {
    return Fail(ErrorKind::kInvalidInput, "the OneGate token contains a line break");
  }
  log::AddSecret(config.token);
  return config;
}

// ---- Client

std::string OneGateValueProblem(std::string_view value) {
  if (value.empty()) return "is empty (erase the attribute instead)";
  for (char c : value) {
    switch (c) {
      case ',':
        return "contains ','";
      case '"':
        return "contains '\"'";
      case '\\':
        return "contains '\\'";
      case '[':
        return "contains '['";
      case ']':
        return "contains ']'";
      case '\n':
        return "contains a newline";
      default:
        break;
    }
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return "contains a control character";
  }
  return {};
}

std::string OneGateKeyProblem(std::string_view key) {
  if (key.empty()) return "is empty";
  for (char c : key) {
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
      return "must match [A-Z0-9_]+";
    }
  }
  return {};
}

OneGateClient::OneGateClient(OneGateConfig config, HttpTransport& http, Clock& clock)
    : config_(std::move(config)), http_(http), clock_(clock) {
  while (!config_.endpoint.empty() && config_.endpoint.back() == '/') config_.endpoint.pop_back();
  log::AddSecret(config_.token);
}

Result<HttpResponse> OneGateClient::Call(const std::string& method, const std::string& path,
                                         const std::string& body, const std::string& content_type) {
  return Call(method, path, body, content_type, nullptr);
}

// Classification (onegate-api.md section 9):
// - no HTTP status (kNetwork from the transport: refused, reset, timeout, truncated) → retry;
//   other transport errors (bad URL, out of memory) → fail;
// - 2xx whose body fails `check` → retried `malformed_retries` times: a proxy that cuts an
//   answer short makes this transient; a server that always answers garbage is not;
// - 401 → retried within the unauthorized budget (oned may be unreachable at boot), then fatal;
// - 429 and 5xx → retry, except the deterministic 500s (attribute not found, template syntax
//   or parse errors, action not available);
// - every other status (3xx: redirects are not followed; 4xx) → fail at once.
Result<HttpResponse> OneGateClient::Call(const std::string& method, const std::string& path,
                                         const std::string& body, const std::string& content_type,
                                         const BodyCheck& check, Duration total_timeout) {
  const std::string what = method + " " + path;
  last_failure_ = {};
  HttpRequest request;
  request.method = method;
  request.url = config_.endpoint + path;
  request.headers = {
      {"X-ONEGATE-TOKEN", config_.token},
      {"X-ONEGATE-VMID", config_.vmid},
      {"User-Agent", std::string("one-hpc/") + ONEHPC_VERSION},
      {"Accept", "application/json"},
  };
  if (!content_type.empty()) request.headers.emplace_back("Content-Type", content_type);
  request.body = body;
  request.connect_timeout = config_.connect_timeout;
  request.total_timeout = total_timeout > Duration(0) ? total_timeout : config_.request_timeout;

  const TimePoint start = clock_.Now();
  int attempt_number = 0;
  int unauthorized = 0;
  int malformed = 0;
  bool retry = false;
  std::function<Result<HttpResponse>()> attempt = [&]() -> Result<HttpResponse> {
    retry = false;
    ++attempt_number;
    ++requests_sent_;
    log::Debug("OneGate {} (attempt {})", what, attempt_number);
    Result<HttpResponse> sent = http_.Send(request);
    if (!sent) {
      last_failure_ = {};
      retry = sent.error().kind == ErrorKind::kNetwork;
      log::Debug("OneGate {}: {}", what, sent.error().message);
      return Fail(sent.error());
    }
    const long status = sent->status;
    // Sizes only: bodies may carry secrets (extended /service has every peer's CONTEXT).
    log::Debug("OneGate {}: HTTP {}, {} bytes", what, status, sent->body.size());
    if (status >= 200 && status < 300) {
      if (check) {
        Status checked = check(*sent);
        if (!checked) {
          ++malformed;
          last_failure_ = {status, ""};  // the body is not kept: it may carry secrets
          retry = malformed <= config_.malformed_retries;
          return Fail(checked.error().kind, "malformed response (HTTP " + std::to_string(status) +
                                                "): " + checked.error().message);
        }
      }
      return sent;
    }
    last_failure_ = {status, sent->body.substr(0, 4096)};
    std::string message = "HTTP " + std::to_string(status);
    std::string short_body = ShortBody(sent->body);
    if (!short_body.empty()) message += " " + short_body;
    ErrorKind kind = status == 404 ? ErrorKind::kNotFound : ErrorKind::kNetwork;
    if (status == 401) {
      ++unauthorized;
      retry = unauthorized < config_.unauthorized_attempts &&
              clock_.Now() - start < config_.unauthorized_window;
      if (!retry) message += " (OneGate refused the token of VM " + config_.vmid + ")";
    } else if (status == 429) {
      retry = true;
    } else if (status >= 500) {
      retry = !(status == 500 && IsDeterministic500(sent->body));
    } else if (status >= 300 && status < 400) {
      message += " (redirects are not followed)";
    }
    return Fail(kind, message);
  };
  Result<HttpResponse> result = Retry<HttpResponse>(
      config_.retry, clock_, what, [&](const Error&) { return retry; }, attempt);
  if (!result && result.error().message.rfind(what + ":", 0) != 0) {
    return Fail(result.error().WithContext(what));
  }
  return result;
}

Result<VmInfo> OneGateClient::GetVmAt(const std::string& path) {
  VmInfo vm;
  auto result = Call("GET", path, "", "", [&](const HttpResponse& response) -> Status {
    auto parsed = ParseVmJson(response.body);
    if (!parsed) return Fail(parsed.error());
    vm = std::move(*parsed);
    return Ok();
  });
  if (!result) return Fail(result.error());
  return vm;
}

Result<VmInfo> OneGateClient::GetVm() { return GetVmAt("/vm"); }

Result<VmInfo> OneGateClient::GetVmById(int vm_id) {
  if (vm_id < 0) {
    return Fail(ErrorKind::kInvalidInput, "GetVmById: bad VM id " + std::to_string(vm_id));
  }
  return GetVmAt("/vms/" + std::to_string(vm_id));
}

Status OneGateClient::Update(const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& attributes) {
  const std::string what = "PUT " + path;
  if (attributes.empty()) {
    return Fail(ErrorKind::kInvalidInput, what + ": no attributes to update");
  }
  std::string data;
  std::string keys;
  for (const auto& [key, value] : attributes) {
    if (std::string problem = OneGateKeyProblem(key); !problem.empty()) {
      return Fail(ErrorKind::kInvalidInput,
                  what + ": refusing attribute name '" + Printable(key, 40) + "': it " + problem);
    }
    if (std::string problem = OneGateValueProblem(value); !problem.empty()) {
      std::string shown;
      if (!value.empty() && value.size() <= 40 && !LooksSecret(key)) {
        shown = " ('" + Printable(value, 40) + "')";
      }
      return Fail(ErrorKind::kInvalidInput,
                  what + ": refusing the value of " + key + shown + ": it " + problem +
                      "; OneGate would corrupt it: base64-encode it into " + key + "_BASE64");
    }
    if (!data.empty()) data += '\n';
    data += key + "=" + value;
    if (!keys.empty()) keys += ", ";
    keys += key;
  }
  log::Debug("OneGate {}: setting {}", what, keys);
  auto result = Call("PUT", path, "data=" + FormEncode(data) + "&type=1", kFormType);
  if (!result) return Fail(result.error());
  return Ok();
}

Status OneGateClient::UpdateVm(const std::vector<std::pair<std::string, std::string>>& attributes) {
  return Update("/vm", attributes);
}

Status OneGateClient::UpdateVmById(
    int vm_id, const std::vector<std::pair<std::string, std::string>>& attributes) {
  if (vm_id < 0) {
    return Fail(ErrorKind::kInvalidInput, "UpdateVmById: bad VM id " + std::to_string(vm_id));
  }
  return Update("/vms/" + std::to_string(vm_id), attributes);
}

Status OneGateClient::EraseVmAttribute(const std::string& key) {
  if (std::string problem = OneGateKeyProblem(key); !problem.empty()) {
    return Fail(ErrorKind::kInvalidInput,
                "PUT /vm: refusing to erase '" + Printable(key, 40) + "': the name " + problem);
  }
  auto result = Call("PUT", "/vm", "data=" + FormEncode(key) + "&type=2", kFormType);
  if (!result) {
    if (last_failure_.status == 500 && ContainsNoCase(last_failure_.body, "attribute not found")) {
      log::Debug("OneGate PUT /vm: {} was already absent", key);
      return Ok();
    }
    return Fail(result.error());
  }
  return Ok();
}

Result<ServiceInfo> OneGateClient::GetService(bool extended) {
  if (extended && remember_extended_) {
    if (!extended_) {
      remember_extended_ = false;
      extended_ = GetService(true);
      remember_extended_ = true;
    }
    return *extended_;
  }
  ServiceInfo service;
  auto parse = [&](const HttpResponse& response) -> Status {
    auto parsed = ParseServiceJson(response.body);
    if (!parsed) return Fail(parsed.error());
    service = std::move(*parsed);
    return Ok();
  };
  auto result = extended ? Call("GET", "/service?extended=true", "", "", parse,
                                std::max(config_.request_timeout, config_.extended_service_timeout))
                         : Call("GET", "/service", "", "", parse);
  if (!result) return Fail(result.error());
  return service;
}

Status OneGateClient::TerminateVm(int vm_id) {
  if (vm_id < 0) {
    return Fail(ErrorKind::kInvalidInput, "TerminateVm: bad VM id " + std::to_string(vm_id));
  }
  auto result = Call("POST", "/vms/" + std::to_string(vm_id) + "/action",
                     R"({"action":{"perform":"terminate"}})", "application/json");
  if (!result) return Fail(result.error());
  return Ok();
}

Status OneGateClient::ScaleRole(const std::string& role, int cardinality) {
  if (role.empty()) return Fail(ErrorKind::kInvalidInput, "ScaleRole: empty role name");
  if (cardinality < 0) {
    return Fail(ErrorKind::kInvalidInput,
                "ScaleRole " + role + ": negative cardinality " + std::to_string(cardinality));
  }
  const std::string body = "{\"cardinality\":" + std::to_string(cardinality) + "}";
  auto result = Call("PUT", "/service/role/" + PathEncode(role), body, "application/json");
  if (!result) return Fail(result.error());
  return Ok();
}

}  // namespace onehpc
