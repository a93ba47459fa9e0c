// HttpTransports for tests: scripted answers, a hook in front of a real one, none.
#ifndef ONEHPC_TESTS_FAKES_HTTP_H_
#define ONEHPC_TESTS_FAKES_HTTP_H_

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "context/http.h"

namespace onehpc::fakes {

/// Answers each Send with the next scripted result and records the requests; when the
/// script runs out it repeats the last entry.
class ScriptedTransport : public HttpTransport {
 public:
  void Then(long status, std::string body = "") {
    script_.push_back(HttpResponse{status, std::move(body)});
  }
  void ThenError(ErrorKind kind, std::string message) {
    script_.push_back(tl::unexpected<Error>(Error{kind, std::move(message)}));
  }
  Result<HttpResponse> Send(const HttpRequest& request) override {
    requests.push_back(request);
    if (script_.empty()) return Fail(ErrorKind::kInternal, "script exhausted");
    Result<HttpResponse> next = script_.front();
    if (script_.size() > 1) script_.pop_front();
    return next;
  }
  std::vector<HttpRequest> requests;

 private:
  std::deque<Result<HttpResponse>> script_;
};

/// Forwards to a real transport and runs a hook before each request (to change the simulated
/// world between discovery attempts).
class HookTransport : public HttpTransport {
 public:
  explicit HookTransport(HttpTransport& inner) : inner_(inner) {}
  Result<HttpResponse> Send(const HttpRequest& request) override {
    if (hook) hook(sent++);
    return inner_.Send(request);
  }
  std::function<void(int)> hook;
  int sent = 0;

 private:
  HttpTransport& inner_;
};

/// For runs that never reach the network: every Send fails.
class NoHttp : public HttpTransport {
 public:
  Result<HttpResponse> Send(const HttpRequest&) override {
    return Fail(ErrorKind::kInternal, "no HTTP in this test");
  }
};

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_HTTP_H_
