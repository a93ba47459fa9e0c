// Running programs: argv vectors only (never a shell), a timeout on every call, captured
// output, controlled environment, secrets kept out of logs.
#ifndef ONEHPC_ROLES_OS_PROCESS_H_
#define ONEHPC_ROLES_OS_PROCESS_H_

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/error.h"

namespace onehpc {

struct Command {
  std::vector<std::string> argv;  ///< argv[0] is a path or a name looked up in PATH
  Duration timeout{30000};        ///< SIGTERM at the timeout, SIGKILL 2 s later
  /// Variables added to (or replacing in) the inherited environment. A child inherits only
  /// PATH, HOME, LANG, LANGUAGE, LC_*, TZ, TERM and JOURNAL_STREAM (PATH set when missing):
  /// never a context variable (one-contextd runs us with the whole context in ours).
  std::vector<std::pair<std::string, std::string>> env;
  bool clear_env = false;  ///< inherit nothing but PATH
  std::string stdin_data;  ///< written to the child's stdin, then closed (secrets go here)
  /// A file the child reads as its stdin instead (opened by the parent, read-only, no symlink
  /// followed at its last component; kIo when it cannot be opened): for input too large to
  /// hold in memory, e.g. a database dump. Exclusive with stdin_data.
  std::string stdin_file;
  std::string cwd;  ///< "" = inherit
  /// Strings to redact from every log line about this command (argv and output).
  std::vector<std::string> secrets;
  /// Time between SIGTERM and SIGKILL after the timeout.
  Duration kill_grace{2000};
};

struct ProcessResult {
  int exit_code = -1;   ///< -1 when killed by a signal
  int term_signal = 0;  ///< the signal that ended it, 0 if it exited
  bool timed_out = false;
  std::string out;
  std::string err;
  bool out_truncated = false;  ///< stdout exceeded kMaxOutput; the rest was discarded
  bool err_truncated = false;  ///< stderr exceeded kMaxOutput; the rest was discarded
  bool ok() const { return exit_code == 0 && !timed_out; }
  /// Captured bytes kept per stream.
  static constexpr size_t kMaxOutput = 4 * 1024 * 1024;
};

/// Trimmed stderr (or stdout when stderr is empty) of a result on one line, for error
/// messages.
std::string ProcessText(const ProcessResult& result);

/// Starts a program and waits for it. An Error (kProcess) means it could not be started;
/// a non-zero exit or a timeout is a ProcessResult, not an Error.
class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  virtual Result<ProcessResult> Run(const Command& command) = 0;
};

/// fork/exec (posix_spawn-like) with pipes and poll(2); kills the whole process group at
/// the timeout. Logs "run: <argv>" at debug, and on failure the argv, exit status and stderr.
class RealProcessRunner : public ProcessRunner {
 public:
  Result<ProcessResult> Run(const Command& command) override;
};

/// Runs and turns a non-zero exit or timeout into an Error (kProcess) whose message holds
/// the quoted argv, the exit status or "timed out after N ms", and the trimmed stderr
/// (all redacted).
Result<ProcessResult> RunChecked(ProcessRunner& runner, const Command& command);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OS_PROCESS_H_
