// Logging: spdlog underneath, journald-friendly, secrets redacted, operations logged as
// started / finished / failed (Ignition's LogOp habit).
#ifndef ONEHPC_COMMON_LOG_H_
#define ONEHPC_COMMON_LOG_H_

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace onehpc::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

struct Options {
  Level min_level = Level::kInfo;
  /// Print "<6>"-style priority prefixes and no timestamps (stderr is the journal).
  bool journald = false;
};

/// Options from the environment: journald style when JOURNAL_STREAM or INVOCATION_ID is set
/// (we run under systemd), debug level when ONEHPC_DEBUG is non-empty.
Options DetectOptions();

/// Configures the process-wide logger. Safe to call more than once.
void Init(const Options& options);

/// Registers a secret: from now on every occurrence in a log line reads "<redacted>".
/// Values shorter than 4 characters are ignored (they would redact ordinary words).
void AddSecret(std::string secret);
/// Forgets every registered secret (tests).
void ClearSecrets();
/// Replaces every registered secret in `text`.
std::string Redact(std::string_view text);

/// Logs one line (after redaction).
void Write(Level level, std::string_view message);

template <typename... Args>
void Debug(fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Info(fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Warn(fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Error(fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

/// Collects every line logged while it lives (already redacted), for tests.
class Capture {
 public:
  Capture();
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  const std::vector<std::string>& lines() const { return lines_; }
  /// All lines joined by newlines.
  std::string text() const;
  /// True if some line contains `needle`.
  bool Contains(std::string_view needle) const;

 private:
  friend void Write(Level, std::string_view);
  std::vector<std::string> lines_;
  Capture* previous_;
};

/// One numbered operation: logs "op(N): <what> [started]" now, and later
/// "[finished]" or "[failed] <error>". An Op destroyed without either logs "[abandoned]".
class Op {
 public:
  explicit Op(std::string what);
  ~Op();
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  void Finished(std::string_view detail = {});
  void Failed(const onehpc::Error& error);
  /// Logs finished or failed according to `result` and passes it through.
  template <typename T>
  Result<T> Finish(Result<T> result) {
    if (result) {
      Finished();
    } else {
      Failed(result.error());
    }
    return result;
  }

 private:
  std::string what_;
  int number_;
  bool done_ = false;
};

/// Renders argv as a shell-like quoted string, for log lines only (never executed).
std::string QuoteArgv(const std::vector<std::string>& argv);

}  // namespace onehpc::log

#endif  // ONEHPC_COMMON_LOG_H_
