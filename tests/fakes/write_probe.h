// A WriteProbe that answers from a script of errnos (then success).
#ifndef ONEHPC_TESTS_FAKES_WRITE_PROBE_H_
#define ONEHPC_TESTS_FAKES_WRITE_PROBE_H_

#include <deque>
#include <string>
#include <vector>

#include "roles/nfs/client_mounts.h"

namespace onehpc::fakes {

/// Answers from a script of errnos (then success), recording every path, for unit tests.
class FakeWriteProbe : public nfs::WriteProbe {
 public:
  /// The next attempts fail with these errnos in order (the step is "create").
  void FailNext(std::vector<int> errors) {
    script_.insert(script_.end(), errors.begin(), errors.end());
  }
  /// Every attempt fails with `error` (0: every attempt succeeds).
  void FailAlways(int error) { always_ = error; }
  nfs::WriteProbe::Outcome CreateAndRemove(const std::string& path) override {
    paths_.push_back(path);
    if (!script_.empty()) {
      int error = script_.front();
      script_.pop_front();
      if (error != 0) return {error, "create"};
      return {};
    }
    if (always_ != 0) return {always_, "create"};
    return {};
  }
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::deque<int> script_;
  int always_ = 0;
  std::vector<std::string> paths_;
};

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_WRITE_PROBE_H_
