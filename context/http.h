// HTTP behind an interface: libcurl in production, scripted fakes in unit tests.
#ifndef ONEHPC_CONTEXT_HTTP_H_
#define ONEHPC_CONTEXT_HTTP_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/error.h"

namespace onehpc {

struct HttpRequest {
  std::string method;  ///< GET, PUT, POST
  std::string url;     ///< absolute URL
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  ///< sent as is (also on GET when non-empty)
  Duration connect_timeout{3000};
  Duration total_timeout{10000};
  /// Larger responses fail (kNetwork) instead of filling memory.
  std::size_t max_response_bytes = std::size_t{32} << 20;
  /// HTTPS: the only certificates trusted (a PEM file, a leaf or a chain may be the anchor);
  /// "" = the system's store.
  std::string ca_file;
  /// "HOST:PORT:ADDRESS": connect to ADDRESS for HOST:PORT, the name still checked and sent
  /// (SNI, Host); "" = the system's resolver.
  std::string resolve;
};

struct HttpResponse {
  long status = 0;
  std::string body;
};

/// Sends one request. An error (kind kNetwork) means no HTTP status was received:
/// connection refused, DNS failure, timeout, truncated transfer. Its message starts with
/// "timeout:" for timeouts so callers can tell them apart.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual Result<HttpResponse> Send(const HttpRequest& request) = 0;
};

/// libcurl easy interface; no proxy (OneGate is link-local or on the service network), no
/// signals (CURLOPT_NOSIGNAL), redirects not followed, only http/https. A response cut short
/// (fewer bytes than its Content-Length) is an error. Thread-safe: one handle per request.
class CurlTransport : public HttpTransport {
 public:
  CurlTransport();
  ~CurlTransport() override;
  Result<HttpResponse> Send(const HttpRequest& request) override;
};

/// Percent-encodes for application/x-www-form-urlencoded (space as '+').
std::string FormEncode(std::string_view text);
/// Percent-encodes one URL path segment (everything but A-Z a-z 0-9 - . _ ~).
std::string PathEncode(std::string_view text);

}  // namespace onehpc

#endif  // ONEHPC_CONTEXT_HTTP_H_
