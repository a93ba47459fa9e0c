#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace onehpc::log {
namespace {

struct State {
  std::mutex mu;
  Options options;
  std::vector<std::string> secrets;
  std::shared_ptr<spdlog::logger> logger;
  Capture* capture = nullptr;
  int next_op = 1;
};

State& S() {
  static State* state = new State();  // never destroyed: usable from static destructors
  return *state;
}

std::shared_ptr<spdlog::logger> MakeLogger(const Options& options) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("one-hpc", sink);
  // Under systemd the journal adds timestamps; the "<N>" prefix is written by Write().
  logger->set_pattern(options.journald ? "%v" : "%Y-%m-%d %H:%M:%S.%e %-5l %v");
  logger->set_level(spdlog::level::trace);
  logger->flush_on(spdlog::level::trace);
  return logger;
}

spdlog::level::level_enum ToSpd(Level level) {
  switch (level) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

// sd-daemon(3) priority prefixes.
const char* JournalPrefix(Level level) {
  switch (level) {
    case Level::kDebug:
      return "<7>";
    case Level::kInfo:
      return "<6>";
    case Level::kWarn:
      return "<4>";
    case Level::kError:
      return "<3>";
  }
  return "<6>";
}

std::string RedactLocked(std::string_view text, const std::vector<std::string>& secrets) {
  std::string out(text);
  for (const auto& secret : secrets) {
    for (size_t pos = out.find(secret); pos != std::string::npos;
         pos = out.find(secret, pos + 10)) {
      out.replace(pos, secret.size(), "<redacted>");
    }
  }
  return out;
}

}  // namespace

Options DetectOptions() {
  Options options;
  const char* journal = std::getenv("JOURNAL_STREAM");
  const char* invocation = std::getenv("INVOCATION_ID");
  options.journald = (journal && *journal) || (invocation && *invocation);
  const char* debug = std::getenv("ONEHPC_DEBUG");
  if (debug && *debug) options.min_level = Level::kDebug;
  return options;
}

void Init(const Options& options) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.options = options;
  s.logger = MakeLogger(options);
}

void AddSecret(std::string secret) {
  if (secret.size() < 4) return;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (std::find(s.secrets.begin(), s.secrets.end(), secret) != s.secrets.end()) return;
  s.secrets.push_back(std::move(secret));
  // Longest first, so that a secret containing another is replaced whole.
  std::sort(s.secrets.begin(), s.secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

void ClearSecrets() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.secrets.clear();
}

std::string Redact(std::string_view text) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return RedactLocked(text, s.secrets);
}

void Write(Level level, std::string_view message) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  std::string line = RedactLocked(message, s.secrets);
  if (s.capture) s.capture->lines_.push_back(line);
  if (level < s.options.min_level) return;
  if (!s.logger) s.logger = MakeLogger(s.options);
  if (s.options.journald) {
    // One journal entry per line: prefix every line of a multi-line message.
    std::string prefixed;
    size_t start = 0;
    while (start <= line.size()) {
      size_t end = line.find('\n', start);
      if (end == std::string::npos) end = line.size();
      if (!prefixed.empty()) prefixed += '\n';
      prefixed += JournalPrefix(level);
      prefixed.append(line, start, end - start);
      start = end + 1;
    }
    s.logger->log(ToSpd(level), "{}", prefixed);
  } else {
    s.logger->log(ToSpd(level), "{}", line);
  }
}

Capture::Capture() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  previous_ = s.capture;
  s.capture = this;
}

Capture::~Capture() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.capture = previous_;
}

std::string Capture::text() const {
  std::string out;
  for (const auto& line : lines_) {
    out += line;
    out += '\n';
  }
  return out;
}

bool Capture::Contains(std::string_view needle) const {
  return std::any_of(lines_.begin(), lines_.end(),
                     [&](const std::string& l) { return l.find(needle) != std::string::npos; });
}

Op::Op(std::string what) : what_(std::move(what)) {
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    number_ = s.next_op++;
  }
  Info("op({}): {} [started]", number_, what_);
}

Op::~Op() {
  if (!done_) Warn("op({}): {} [abandoned]", number_, what_);
}

void Op::Finished(std::string_view detail) {
  done_ = true;
  if (detail.empty()) {
    Info("op({}): {} [finished]", number_, what_);
  } else {
    Info("op({}): {} [finished] {}", number_, what_, detail);
  }
}

void Op::Failed(const onehpc::Error& error) {
  done_ = true;
  Error("op({}): {} [failed] {}", number_, what_, error.message);
}

std::string QuoteArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](unsigned char c) {
      return std::isalnum(c) || std::string_view("-_./=:,@%+").find(c) != std::string_view::npos;
    });
    if (plain) {
      out += arg;
    } else {
      out += '\'';
      for (char c : arg) {
        if (c == '\'') {
          out += "'\\''";
        } else {
          out += c;
        }
      }
      out += '\'';
    }
  }
  return out;
}

}  // namespace onehpc::log
