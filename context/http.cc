#include "context/http.h"

#include <curl/curl.h>

#include <cstring>
#include <memory>
#include <mutex>

namespace onehpc {
namespace {

void GlobalInitOnce() {
  static std::once_flag once;
  // Not thread-safe in old libcurl versions, hence once, before any handle exists.
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One easy handle with what it owns: the header list and the error buffer. Not copyable.
class CurlHandle {
 public:
  CurlHandle() : curl_(curl_easy_init()) { error_[0] = '\0'; }
  ~CurlHandle() {
    if (headers_) curl_slist_free_all(headers_);
    if (resolve_) curl_slist_free_all(resolve_);
    if (curl_) curl_easy_cleanup(curl_);
  }
  CurlHandle(const CurlHandle&) = delete;
  CurlHandle& operator=(const CurlHandle&) = delete;

  bool ok() const { return curl_ != nullptr; }
  CURL* get() { return curl_; }
  const char* error_buffer() const { return error_; }
  char* error_buffer_for_curl() { return error_; }

  /// Appends a header line; false when out of memory.
  bool AddHeader(const std::string& line) { return Append(headers_, line); }
  curl_slist* headers() { return headers_; }
  /// One CURLOPT_RESOLVE entry; false when out of memory.
  bool AddResolve(const std::string& entry) { return Append(resolve_, entry); }
  curl_slist* resolve() { return resolve_; }

  template <typename T>
  CURLcode Set(CURLoption option, T value) {
    return curl_easy_setopt(curl_, option, value);
  }

 private:
  static bool Append(curl_slist*& list, const std::string& line) {
    curl_slist* next = curl_slist_append(list, line.c_str());
    if (!next) return false;
    list = next;
    return true;
  }

  CURL* curl_;
  curl_slist* headers_ = nullptr;
  curl_slist* resolve_ = nullptr;
  char error_[CURL_ERROR_SIZE];
};

struct Sink {
  std::string* body;
  std::size_t limit;
  bool overflow = false;
};

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->body->size() + n > sink->limit) {
    sink->overflow = true;
    return 0;  // makes curl stop with CURLE_WRITE_ERROR
  }
  sink->body->append(data, n);
  return n;
}

bool HasLineBreak(const std::string& s) {
  return s.find_first_of("\r\n") != std::string::npos || s.find('\0') != std::string::npos;
}

// The handle's options for `request` (the first failure, or CURLE_OK); false in `resolve_ok`
// when the resolve entry is refused.
CURLcode SetUpHandle(CurlHandle& h, const HttpRequest& request, Sink& sink, bool& resolve_ok) {
  CURLcode setup = CURLE_OK;
  auto set = [&](CURLcode rc) {
    if (setup == CURLE_OK) setup = rc;
  };
  set(h.Set(CURLOPT_ERRORBUFFER, h.error_buffer_for_curl()));
  set(h.Set(CURLOPT_URL, request.url.c_str()));
  set(h.Set(CURLOPT_PROTOCOLS_STR, "http,https"));
  set(h.Set(CURLOPT_NOSIGNAL, 1L));
  set(h.Set(CURLOPT_NOPROXY, "*"));  // also ignores http_proxy & co. from the environment
  set(h.Set(CURLOPT_PROXY, ""));
  set(h.Set(CURLOPT_FOLLOWLOCATION, 0L));
  set(h.Set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request.connect_timeout.count())));
  set(h.Set(CURLOPT_TIMEOUT_MS, static_cast<long>(request.total_timeout.count())));
  set(h.Set(CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(request.max_response_bytes)));
  set(h.Set(CURLOPT_HTTPHEADER, h.headers()));
  set(h.Set(CURLOPT_WRITEFUNCTION, &WriteBody));
  set(h.Set(CURLOPT_WRITEDATA, static_cast<void*>(&sink)));
  if (request.method == "GET" && request.body.empty()) {
    set(h.Set(CURLOPT_HTTPGET, 1L));
  } else if (request.method == "HEAD") {
    set(h.Set(CURLOPT_NOBODY, 1L));
  } else {
    // PUT/POST, and GET with a body (OneGate's CLI sends `extended=true` that way): the
    // body goes as is; Content-Type comes from the caller's headers.
    set(h.Set(CURLOPT_POSTFIELDS, request.body.data()));
    set(h.Set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size())));
    if (request.method != "POST") set(h.Set(CURLOPT_CUSTOMREQUEST, request.method.c_str()));
  }
  if (!request.ca_file.empty()) {
    // That file alone: no CA directory besides it.
    set(h.Set(CURLOPT_CAINFO, request.ca_file.c_str()));
    set(h.Set(CURLOPT_CAPATH, static_cast<const char*>(nullptr)));
  }
  if (!request.resolve.empty()) {
    if (HasLineBreak(request.resolve) || !h.AddResolve(request.resolve)) {
      resolve_ok = false;
      return setup;
    }
    set(h.Set(CURLOPT_RESOLVE, h.resolve()));
  }
  return setup;
}

// A failed transfer as an error of its kind: a timeout, a truncated or too large response, a
// bad URL, or the network.
Error TransferError(CURLcode rc, const std::string& what, const std::string& detail,
                    const Sink& sink, std::size_t max_response_bytes) {
  switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
      return Error{ErrorKind::kNetwork, "timeout: " + what + ": " + detail};
    case CURLE_PARTIAL_FILE:
      return Error{ErrorKind::kNetwork, what + ": truncated response: " + detail};
    case CURLE_WRITE_ERROR:
    case CURLE_FILESIZE_EXCEEDED:
      if (sink.overflow || rc == CURLE_FILESIZE_EXCEEDED) {
        return Error{ErrorKind::kNetwork, what + ": response larger than " +
                                              std::to_string(max_response_bytes) + " bytes"};
      }
      return Error{ErrorKind::kNetwork, what + ": " + detail};
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return Error{ErrorKind::kInvalidInput, what + ": " + detail};
    case CURLE_OUT_OF_MEMORY:
    case CURLE_BAD_FUNCTION_ARGUMENT:
      return Error{ErrorKind::kInternal, what + ": " + detail};
    default:
      return Error{ErrorKind::kNetwork, what + ": " + detail};
  }
}

}  // namespace

CurlTransport::CurlTransport() { GlobalInitOnce(); }
CurlTransport::~CurlTransport() = default;

Result<HttpResponse> CurlTransport::Send(const HttpRequest& request) {
  const std::string what = request.method + " " + request.url;
  for (const auto& [name, value] : request.headers) {
    // A line break would let a value inject further headers.
    if (HasLineBreak(name) || HasLineBreak(value) || name.find(':') != std::string::npos) {
      return Fail(ErrorKind::kInvalidInput,
                  what + ": refusing a header with a line break, or a colon in its name");
    }
  }
  if (request.method.empty() || HasLineBreak(request.method)) {
    return Fail(ErrorKind::kInvalidInput, "bad HTTP method for " + request.url);
  }

  // A fresh handle per request: no state carried between requests (OneGate calls are few).
  CurlHandle h;
  if (!h.ok()) return Fail(ErrorKind::kInternal, what + ": curl_easy_init failed");

  HttpResponse response;
  Sink sink{&response.body, request.max_response_bytes};

  for (const auto& [name, value] : request.headers) {
    if (!h.AddHeader(name + ": " + value)) {
      return Fail(ErrorKind::kInternal, what + ": out of memory building headers");
    }
  }
  // No "Expect: 100-continue" round trip for larger bodies.
  if (!h.AddHeader("Expect:")) return Fail(ErrorKind::kInternal, what + ": out of memory");

  bool resolve_ok = true;
  const CURLcode setup = SetUpHandle(h, request, sink, resolve_ok);
  if (!resolve_ok) return Fail(ErrorKind::kInvalidInput, what + ": bad resolve entry");
  if (setup != CURLE_OK) {
    return Fail(ErrorKind::kInternal, what + ": setting up curl: " + curl_easy_strerror(setup));
  }

  const CURLcode rc = curl_easy_perform(h.get());
  if (rc != CURLE_OK) {
    std::string detail = h.error_buffer()[0] ? h.error_buffer() : curl_easy_strerror(rc);
    return Fail(TransferError(rc, what, detail, sink, request.max_response_bytes));
  }
  long status = 0;
  curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status == 0) {
    return Fail(ErrorKind::kNetwork, what + ": no HTTP status received");
  }
  response.status = status;
  return response;
}

std::string FormEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() * 3);
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '*') {
      out += static_cast<char>(c);
    } else if (c == ' ') {
      out += '+';
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0x0F];
    }
  }
  return out;
}

std::string PathEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() * 3);
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0x0F];
    }
  }
  return out;
}

}  // namespace onehpc
