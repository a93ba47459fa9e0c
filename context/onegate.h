// The OneGate client and typed views over what OneGate returns.
#ifndef ONEHPC_CONTEXT_ONEGATE_H_
#define ONEHPC_CONTEXT_ONEGATE_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/retry.h"
#include "context/context_file.h"
#include "context/http.h"
#include "context/onegate_json.h"

namespace onehpc {

// ---- The client

struct OneGateConfig {
  std::string endpoint;  ///< ONEGATE_ENDPOINT, e.g. http://169.254.16.9:5030
  std::string vmid;      ///< VMID
  std::string token;     ///< secret
  Duration connect_timeout{3000};
  Duration request_timeout{10000};
  /// GET /service?extended=true carries every VM of the service with its whole template, and
  /// OneGate asks oned for each VM: a service of hundreds of workers answers far more slowly
  /// than one VM's document. Its own limit, never taken below `request_timeout`.
  Duration extended_service_timeout{30000};
  RetryPolicy retry;  ///< applied to connection errors, timeouts, 5xx (but the
                      ///< deterministic 500s) and 429; never to other 4xx
  /// 401 may come from oned being unreachable just after boot: a call retries 401 (within
  /// `retry`) at most this many attempts in total and only within `unauthorized_window` of
  /// its first attempt; after that 401 is fatal.
  int unauthorized_attempts = 3;
  Duration unauthorized_window{15000};
  /// A 2xx whose body does not parse (e.g. cut short by a proxy) is retried this many times
  /// (within `retry`), then the parse error is returned.
  int malformed_retries = 2;
  /// Builds the config from context variables and the loaded token; kInvalidInput naming
  /// the missing variable (ONEGATE_ENDPOINT / VMID / token: "set TOKEN=YES in CONTEXT").
  /// Registers the token with log::AddSecret.
  static Result<OneGateConfig> FromContext(const LoadedContext& context);
};

/// A failed OneGate call: the HTTP status (0 = none received) and the server's body.
struct OneGateFailure {
  long status = 0;
  std::string body;
};

class OneGateClient {
 public:
  OneGateClient(OneGateConfig config, HttpTransport& http, Clock& clock);

  Result<VmInfo> GetVm();
  Result<VmInfo> GetVmById(int vm_id);
  /// PUT /vm type=1 with several KEY=VALUE lines in one request. Refuses (kInvalidInput,
  /// nothing sent) keys not matching [A-Z0-9_]+ and values that are empty or contain
  /// , " \ [ ] or a newline (or another control character): base64 such values and name
  /// them *_BASE64.
  Status UpdateVm(const std::vector<std::pair<std::string, std::string>>& attributes);
  Status UpdateVmById(int vm_id,
                      const std::vector<std::pair<std::string, std::string>>& attributes);
  /// PUT /vm type=2; "500 attribute not found" counts as success.
  Status EraseVmAttribute(const std::string& key);
  Result<ServiceInfo> GetService(bool extended);
  /// While one lives, GetService(true) answers with the result of its first call, success
  /// or failure: one configure reads the extended service document once however many of
  /// its parts ask (and waits out a OneGate outage once, not once per part).
  class OneServiceRead {
   public:
    explicit OneServiceRead(OneGateClient& client) : client_(client) {
      client_.remember_extended_ = true;
    }
    ~OneServiceRead() {
      client_.remember_extended_ = false;
      client_.extended_.reset();
    }
    OneServiceRead(const OneServiceRead&) = delete;
    OneServiceRead& operator=(const OneServiceRead&) = delete;

   private:
    OneGateClient& client_;
  };
  /// PUT /service/role/:role {"cardinality":N}.
  Status ScaleRole(const std::string& role, int cardinality);
  /// POST /vms/:id/action {"action":{"perform":"terminate"}}: a graceful terminate (the
  /// guest gets an ACPI power-off, its shutdown hooks run); OneFlow's watchdog then removes
  /// the VM from its role and lowers the cardinality.
  Status TerminateVm(int vm_id);

  /// This VM's id (VMID), as the client sends it.
  const std::string& vmid() const { return config_.vmid; }
  /// Where and as whom it talks (the token is a secret): for the key server's context file.
  const OneGateConfig& config() const { return config_; }
  /// Requests sent so far (attempts, including retries): for benchmarks and tests.
  int requests_sent() const { return requests_sent_; }
  /// The status and body of the last failed response (status 0 if none was received).
  const OneGateFailure& last_failure() const { return last_failure_; }

 private:
  /// Checks (and usually parses) a 2xx body; a failure counts as a malformed response.
  using BodyCheck = std::function<Status(const HttpResponse&)>;
  Result<HttpResponse> Call(const std::string& method, const std::string& path,
                            const std::string& body, const std::string& content_type);
  /// One request with the retry policy; `check` runs on each 2xx response; each attempt
  /// within `total_timeout` (0: the config's request_timeout).
  Result<HttpResponse> Call(const std::string& method, const std::string& path,
                            const std::string& body, const std::string& content_type,
                            const BodyCheck& check, Duration total_timeout = Duration(0));
  Status Update(const std::string& path,
                const std::vector<std::pair<std::string, std::string>>& attributes);
  /// GET `path` and parse the body as a VM document (/vm, /vms/<id>).
  Result<VmInfo> GetVmAt(const std::string& path);
  OneGateConfig config_;
  HttpTransport& http_;
  Clock& clock_;
  int requests_sent_ = 0;
  OneGateFailure last_failure_;
  bool remember_extended_ = false;
  std::optional<Result<ServiceInfo>> extended_;
};

/// Checks a value for PUT /vm: "" if fine, else why not.
std::string OneGateValueProblem(std::string_view value);
/// Checks a key for PUT /vm ([A-Z0-9_]+): "" if fine, else why not.
std::string OneGateKeyProblem(std::string_view key);

}  // namespace onehpc

#endif  // ONEHPC_CONTEXT_ONEGATE_H_
