// A ProcessRunner that records every command and answers from a script.
#ifndef ONEHPC_TESTS_FAKES_PROCESS_RUNNER_H_
#define ONEHPC_TESTS_FAKES_PROCESS_RUNNER_H_

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "roles/os/process.h"

namespace onehpc::fakes {

/// Records every command and answers from a script, for unit tests of role logic.
class FakeProcessRunner : public ProcessRunner {
 public:
  using Responder = std::function<ProcessResult(const Command&)>;
  /// Commands whose argv starts with `argv_prefix` get `result` (last match added wins).
  void On(std::vector<std::string> argv_prefix, ProcessResult result) {
    rules_.emplace_back(std::move(argv_prefix),
                        [result = std::move(result)](const Command&) { return result; });
  }
  void On(std::vector<std::string> argv_prefix, Responder responder) {
    rules_.emplace_back(std::move(argv_prefix), std::move(responder));
  }
  /// Result for commands no rule matches (default: exit 0, no output).
  void SetDefault(ProcessResult result) { default_ = std::move(result); }
  Result<ProcessResult> Run(const Command& command) override {
    commands_.push_back(command);
    for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
      const auto& prefix = it->first;
      if (prefix.size() <= command.argv.size() &&
          std::equal(prefix.begin(), prefix.end(), command.argv.begin())) {
        return it->second(command);
      }
    }
    return default_;
  }

  const std::vector<Command>& commands() const { return commands_; }
  /// The argv of every command run, each rendered with log::QuoteArgv.
  std::vector<std::string> Argvs() const {
    std::vector<std::string> out;
    out.reserve(commands_.size());
    for (const auto& command : commands_) out.push_back(log::QuoteArgv(command.argv));
    return out;
  }

 private:
  std::vector<std::pair<std::vector<std::string>, Responder>> rules_;
  ProcessResult default_{0, 0, false, "", ""};
  std::vector<Command> commands_;
};

inline ProcessResult Exit(int code, std::string out = "", std::string err = "") {
  ProcessResult r;
  r.exit_code = code;
  r.out = std::move(out);
  r.err = std::move(err);
  return r;
}

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_PROCESS_RUNNER_H_
