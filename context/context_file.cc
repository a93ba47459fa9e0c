#include "context/context_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/log.h"

extern char** environ;

namespace onehpc {
namespace {

// ---------------------------------------------------------------------------------------
// The parser. Grammar (one statement per line, outside values):
//
//   line       := blanks ( comment | assignment )? CR? LF
//   comment    := '#' anything-but-LF
//   assignment := ( 'export' blanks+ )? NAME '=' value blanks* ( blank+ comment )?
//   NAME       := [A-Za-z_][A-Za-z0-9_]*
//   value      := single | double | bare
//   single     := "'" chars-but-quote ( "'\''" chars-but-quote )* "'"   (may span lines)
//   double     := '"' ... '"'   bash double-quote escapes; unescaped $ or ` is an error
//   bare       := [A-Za-z0-9_./:,@%+=#^-] and bytes >= 0x80, possibly empty
//
// A CR directly before LF (or before the end of the text) outside a value is dropped, so
// CRLF files parse like LF files; bash would instead append the CR to the last value (a
// deliberate, documented difference). Inside a quoted value every byte is kept, CR included,
// exactly like bash.
// ---------------------------------------------------------------------------------------

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsNameChar(char c) { return IsAlpha(c) || IsDigit(c) || c == '_'; }

// Characters bash takes literally in an unquoted assignment value (no expansion, no word
// splitting, no globbing, no tilde expansion). Deliberately conservative.
bool IsBareChar(char ch) {
  auto c = static_cast<unsigned char>(ch);
  if (c >= 0x80) return true;  // UTF-8 and other non-ASCII bytes pass through
  if (IsAlpha(ch) || IsDigit(ch)) return true;
  return std::strchr("_./:,@%+=#^-", ch) != nullptr && ch != '\0';
}

// Shows one byte in an error message.
std::string DescribeChar(char ch) {
  auto c = static_cast<unsigned char>(ch);
  if (c == '\r') return "a carriage return (\\r)";
  if (c == '\t') return "a tab";
  if (c < 0x20 || c == 0x7f || c >= 0x80) return fmt::format("byte 0x{:02x}", c);
  if (c == '\'') return "\"'\"";
  return fmt::format("'{}'", ch);
}

class ContextParser {
 public:
  explicit ContextParser(std::string_view text) : text_(text) {}

  Result<ContextVars> Parse() {
    if (size_t nul = text_.find('\0'); nul != std::string_view::npos) {
      return Failure(LineOf(nul), "contains a NUL byte, which no shell variable can hold");
    }
    ContextVars vars;
    while (!AtEnd()) {
      SkipBlanks();
      if (AtEnd()) break;
      char c = Peek();
      if (c == '\n') {
        NewLine();
        continue;
      }
      if (c == '\r' && (Peek(1) == '\n' || pos_ + 1 == text_.size())) {
        ++pos_;
        continue;
      }
      if (c == '#') {
        SkipComment();
        continue;
      }
      auto assignment = ParseAssignment();
      if (!assignment) return Fail(assignment.error());
      vars.insert_or_assign(std::move(assignment->first), std::move(assignment->second));
    }
    return vars;
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  size_t Column() const { return pos_ - line_start_ + 1; }
  void NewLine() {  // consumes the '\n' at pos_
    ++pos_;
    ++line_;
    line_start_ = pos_;
  }
  bool SkipBlanks() {
    size_t start = pos_;
    while (!AtEnd() && IsBlank(Peek())) ++pos_;
    return pos_ != start;
  }
  void SkipComment() {  // up to, not including, the next '\n'
    size_t nl = text_.find('\n', pos_);
    pos_ = nl == std::string_view::npos ? text_.size() : nl;
  }
  int LineOf(size_t offset) const {
    int line = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) line += text_[i] == '\n';
    return line;
  }
  // Appends text_[pos_, end) to `out`, keeping the line count right.
  void Take(size_t end, std::string& out) {
    for (; pos_ < end; ++pos_) {
      char c = text_[pos_];
      out.push_back(c);
      if (c == '\n') {
        ++line_;
        line_start_ = pos_ + 1;
      }
    }
  }

  static tl::unexpected<Error> Failure(int line, const std::string& message) {
    return Fail(ErrorKind::kInvalidInput, fmt::format("context.sh line {}: {}", line, message));
  }
  tl::unexpected<Error> FailureHere(const std::string& message) const {
    return Failure(line_, fmt::format("column {}: {}", Column(), message));
  }

  Result<std::pair<std::string, std::string>> ParseAssignment() {
    auto name = ParseName();
    if (!name) return Fail(name.error());
    if (*name == "export" && IsBlank(Peek())) {
      SkipBlanks();
      if (AtEnd() || Peek() == '\n' || Peek() == '\r' || Peek() == '#') {
        return FailureHere("'export' without an assignment (expected export NAME='value')");
      }
      name = ParseName();
      if (!name) return Fail(name.error());
    }
    if (Peek() != '=') {
      if (AtEnd() || Peek() == '\n' || Peek() == '\r' || IsBlank(Peek())) {
        return FailureHere(fmt::format(
            "'{}' is not an assignment (expected NAME='value', a comment or a blank line)", *name));
      }
      return FailureHere(fmt::format("unexpected {} after the name {} (expected '=')",
                                     DescribeChar(Peek()), *name));
    }
    ++pos_;  // '='
    Result<std::string> value;
    switch (Peek()) {
      case '\'':
        value = ParseSingleQuoted(*name);
        break;
      case '"':
        value = ParseDoubleQuoted(*name);
        break;
      default:
        value = ParseBare(*name);
        break;
    }
    if (!value) return Fail(value.error());
    if (auto end = ExpectEndOfLine(*name); !end) return Fail(end.error());
    return std::make_pair(std::move(*name), std::move(*value));
  }

  Result<std::string> ParseName() {
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    std::string name(text_.substr(start, pos_ - start));
    if (name.empty()) {
      return FailureHere(
          fmt::format("unexpected {} (expected NAME='value', a comment or a blank line)",
                      DescribeChar(Peek())));
    }
    if (IsDigit(name[0])) {
      pos_ = start;
      return FailureHere(
          fmt::format("invalid variable name '{}': names must match [A-Za-z_][A-Za-z0-9_]*", name));
    }
    return name;
  }

  // 'value' with '\'' sequences; may span lines.
  Result<std::string> ParseSingleQuoted(const std::string& name) {
    const int start_line = line_;
    ++pos_;  // opening quote
    std::string value;
    while (true) {
      size_t close = text_.find('\'', pos_);
      if (close == std::string_view::npos) {
        return Failure(
            start_line,
            fmt::format("the single-quoted value of {} is never closed (missing ')", name));
      }
      Take(close, value);
      pos_ = close + 1;
      if (text_.substr(pos_, 3) == "\\''") {  // '\'' : an escaped quote inside the value
        value.push_back('\'');
        pos_ += 3;
        continue;
      }
      return value;
    }
  }

  // "value" with bash's double-quote escapes; refuses anything bash would expand.
  Result<std::string> ParseDoubleQuoted(const std::string& name) {
    const int start_line = line_;
    ++pos_;  // opening quote
    std::string value;
    while (true) {
      if (AtEnd()) {
        return Failure(
            start_line,
            fmt::format("the double-quoted value of {} is never closed (missing \")", name));
      }
      char c = Peek();
      if (c == '"') {
        ++pos_;
        return value;
      }
      if (c == '\\') {
        char next = Peek(1);
        if (next == '$' || next == '`' || next == '"' || next == '\\') {
          value.push_back(next);
          pos_ += 2;
        } else if (next == '\n') {  // line continuation: both characters disappear
          ++pos_;
          NewLine();
        } else {  // any other backslash is literal
          value.push_back('\\');
          ++pos_;
        }
        continue;
      }
      if (c == '$') {
        return FailureHere(
            fmt::format("the double-quoted value of {} contains '$', which bash would expand; "
                        "write it as \\$ or use single quotes",
                        name));
      }
      if (c == '`') {
        return FailureHere(
            fmt::format("the double-quoted value of {} contains a backtick (command substitution); "
                        "use single quotes",
                        name));
      }
      if (c == '\n') {
        value.push_back(c);
        NewLine();
        continue;
      }
      value.push_back(c);
      ++pos_;
    }
  }

  Result<std::string> ParseBare(const std::string& name) {
    std::string value;
    while (!AtEnd()) {
      char c = Peek();
      if (IsBlank(c) || c == '\n') break;
      if (c == '\r' && (Peek(1) == '\n' || pos_ + 1 == text_.size())) break;
      if (!IsBareChar(c)) {
        std::string why;
        switch (c) {
          case '$':
            why = "which bash would expand";
            break;
          case '`':
            why = "which bash would run as a command";
            break;
          case '\'':
          case '"':
            why = "(a quote must enclose the whole value)";
            break;
          case '~':
            why = "which bash would expand to a home directory";
            break;
          default:
            why = "which is not allowed in an unquoted value";
            break;
        }
        return FailureHere(
            fmt::format("the unquoted value of {} contains {}, {}; "
                        "quote the value with single quotes",
                        name, DescribeChar(c), why));
      }
      value.push_back(c);
      ++pos_;
    }
    return value;
  }

  // After a value: blanks, then optionally a comment (only after a blank, as in bash), then
  // an optional CR and the end of the line or of the text.
  Status ExpectEndOfLine(const std::string& name) {
    bool had_blank = SkipBlanks();
    if (AtEnd()) return Ok();
    char c = Peek();
    if (c == '#' && had_blank) {
      SkipComment();
      if (!AtEnd()) NewLine();
      return Ok();
    }
    if (c == '\n') {
      NewLine();
      return Ok();
    }
    if (c == '\r' && (Peek(1) == '\n' || pos_ + 1 == text_.size())) {
      ++pos_;
      if (!AtEnd()) NewLine();
      return Ok();
    }
    return FailureHere(
        fmt::format("unexpected {} after the value of {} (expected the end of the line; one "
                    "NAME='value' per line, nothing after the closing quote)",
                    DescribeChar(c), name));
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
};

// ---------------------------------------------------------------------------------------
// Loading.
// ---------------------------------------------------------------------------------------

constexpr size_t kMaxContextBytes = 16 << 20;  // far beyond any real context.sh

std::string Trim(std::string_view text) {
  const char* ws = " \t\r\n\v\f";
  size_t begin = text.find_first_not_of(ws);
  if (begin == std::string_view::npos) return "";
  size_t end = text.find_last_not_of(ws);
  return std::string(text.substr(begin, end - begin + 1));
}

// Reads a whole file; kNotFound if it does not exist, kIo for other failures.
Result<std::string> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return Fail(err == ENOENT || err == ENOTDIR ? ErrorKind::kNotFound : ErrorKind::kIo,
                fmt::format("cannot open {}: {}", path, std::strerror(err)));
  }
  std::string data;
  std::array<char, 65536> buffer;
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Fail(ErrorKind::kIo, fmt::format("cannot read {}: {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    data.append(buffer.data(), static_cast<size_t>(n));
    if (data.size() > kMaxContextBytes) {
      ::close(fd);
      return Fail(ErrorKind::kInvalidInput,
                  fmt::format("{} is larger than {} bytes", path, kMaxContextBytes));
    }
  }
  ::close(fd);
  return data;
}

bool FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view item(*entry);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return env;
}

// Names in a hook's environment that one-contextd, systemd or the shell put there, not the
// context. Context variable names are upper case (OpenNebula upper-cases them).
bool LooksLikeContextVariable(const std::string& name) {
  if (name.empty() || !(name[0] >= 'A' && name[0] <= 'Z')) return false;
  for (char c : name) {
    if (!((c >= 'A' && c <= 'Z') || IsDigit(c) || c == '_')) return false;
  }
  static const char* const kNotContext[] = {"PATH",
                                            "HOME",
                                            "PWD",
                                            "OLDPWD",
                                            "SHLVL",
                                            "LANG",
                                            "LANGUAGE",
                                            "TERM",
                                            "USER",
                                            "LOGNAME",
                                            "SHELL",
                                            "MAIL",
                                            "TMPDIR",
                                            "INVOCATION_ID",
                                            "JOURNAL_STREAM",
                                            "SYSTEMD_EXEC_PID",
                                            "NOTIFY_SOCKET",
                                            "MANAGERPID",
                                            "LISTEN_PID",
                                            "LISTEN_FDS",
                                            "LISTEN_FDNAMES",
                                            "WATCHDOG_PID",
                                            "WATCHDOG_USEC",
                                            "MOUNT_DIR",
                                            "RUNTIME_DIR",
                                            "CONTEXT_FILE",
                                            "CREDENTIALS_DIRECTORY",
                                            "RUNTIME_DIRECTORY",
                                            "STATE_DIRECTORY",
                                            "CACHE_DIRECTORY",
                                            "LOGS_DIRECTORY",
                                            "CONFIGURATION_DIRECTORY",
                                            "SERVICE_RESULT",
                                            "EXIT_CODE",
                                            "EXIT_STATUS",
                                            "DBUS_SESSION_BUS_ADDRESS",
                                            "SSH_AUTH_SOCK",
                                            "SSH_CONNECTION",
                                            "SSH_CLIENT",
                                            "SSH_TTY",
                                            "DEBIAN_FRONTEND",
                                            "SUDO_USER",
                                            "SUDO_UID",
                                            "SUDO_GID",
                                            "SUDO_COMMAND"};
  for (const char* other : kNotContext) {
    if (name == other) return false;
  }
  for (const char* prefix : {"LC_", "XDG_", "ONEHPC_", "MONITOR_"}) {
    if (name.rfind(prefix, 0) == 0) return false;
  }
  return true;
}

// A non-empty trimmed token from a file, if it can be read.
std::optional<std::string> ReadTokenFile(const std::string& path) {
  auto data = ReadWholeFile(path);
  if (!data) {
    if (data.error().kind != ErrorKind::kNotFound) {
      log::Warn("context: ignoring the token file: {}", data.error().message);
    }
    return std::nullopt;
  }
  std::string token = Trim(*data);
  if (token.empty()) return std::nullopt;
  return token;
}

std::string FindToken(const ContextVars& vars, const std::string& root,
                      const std::string& context_file, const std::string& mount_dir) {
  if (auto it = vars.find("ONEGATE_TOKEN"); it != vars.end()) {
    std::string token = Trim(it->second);
    if (!token.empty()) return token;
  }
  const std::string one_env = root + "/var/run/one-context/one_env";
  if (auto data = ReadWholeFile(one_env)) {
    if (auto token = ReadTokenFromOneEnv(*data)) return *token;
  } else if (data.error().kind != ErrorKind::kNotFound) {
    log::Warn("context: ignoring {}", data.error().message);
  }
  if (!context_file.empty()) {
    if (auto token = ReadTokenFile(DirName(context_file) + "/token.txt")) return *token;
  }
  if (!mount_dir.empty()) {
    if (auto token = ReadTokenFile(mount_dir + "/token.txt")) return *token;
  }
  return "";
}

Result<LoadedContext> LoadFile(const std::string& path, ContextSource source) {
  auto text = ReadWholeFile(path);
  if (!text) return Fail(text.error());
  auto vars = ParseContextFile(*text);
  if (!vars) return Fail(vars.error().WithContext(path));
  LoadedContext loaded;
  loaded.vars = std::move(*vars);
  loaded.source = source;
  loaded.origin = path;
  return loaded;
}

}  // namespace

Result<ContextVars> ParseContextFile(std::string_view text) { return ContextParser(text).Parse(); }

std::string FormatContextAssignment(const std::string& name, const std::string& value) {
  std::string out = name + "='";
  for (char c : value) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::optional<std::string> ReadTokenFromOneEnv(std::string_view one_env_text) {
  // Only the first TOKENTXT line counts: loc-16-gen-env writes it first; a later line would
  // come from a context variable of that name.
  size_t pos = 0;
  while (pos < one_env_text.size()) {
    size_t nl = one_env_text.find('\n', pos);
    std::string_view line =
        one_env_text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? one_env_text.size() : nl + 1;

    size_t i = line.find_first_not_of(" \t");
    if (i == std::string_view::npos) continue;
    line.remove_prefix(i);
    if (line.rfind("export", 0) == 0 && line.size() > 6 && IsBlank(line[6])) {
      line.remove_prefix(6);
      line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
    }
    constexpr std::string_view kKey = "TOKENTXT=";
    if (line.rfind(kKey, 0) != 0) continue;
    line.remove_prefix(kKey.size());
    std::string_view value;
    if (!line.empty() && (line[0] == '"' || line[0] == '\'')) {
      size_t close = line.find(line[0], 1);
      if (close == std::string_view::npos) return std::nullopt;  // malformed: no guess
      value = line.substr(1, close - 1);
    } else {
      value = line.substr(0, line.find_first_of(" \t\r"));
    }
    std::string token = Trim(value);
    if (token.empty()) return std::nullopt;
    return token;
  }
  return std::nullopt;
}

Result<LoadedContext> LoadContext(const ContextLoadOptions& options) {
  const std::map<std::string, std::string> env =
      options.environment ? *options.environment : ProcessEnvironment();
  auto env_value = [&env](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  const std::string mount_dir = options.allow_environment ? env_value("MOUNT_DIR") : "";

  Result<LoadedContext> loaded = Fail(ErrorKind::kNotFound, "no context");
  std::string token_context_file;  // token.txt is searched beside this file
  if (options.context_file) {
    loaded = LoadFile(*options.context_file, ContextSource::kFile);
    if (!loaded) return loaded;
    token_context_file = *options.context_file;
  } else if (options.allow_environment && !env_value("CONTEXT_FILE").empty()) {
    const std::string context_file = env_value("CONTEXT_FILE");
    loaded = LoadFile(context_file, ContextSource::kEnvironment);
    if (loaded) {
      token_context_file = context_file;
    } else if (loaded.error().kind == ErrorKind::kInvalidInput) {
      return loaded;  // a malformed file is an error, never a reason to guess
    } else {
      log::Warn("context: {}; taking the context variables from the environment instead",
                loaded.error().message);
      LoadedContext from_env;
      from_env.source = ContextSource::kEnvironment;
      from_env.origin = "environment";
      for (const auto& [name, value] : env) {
        if (LooksLikeContextVariable(name)) from_env.vars.emplace(name, value);
      }
      loaded = std::move(from_env);
    }
  } else {
    const std::string saved = options.root + "/var/run/one-context/context.sh.network";
    const std::string directory = options.root + "/context/context.sh";
    if (FileExists(saved)) {
      loaded = LoadFile(saved, ContextSource::kSavedNetworkContext);
      token_context_file = saved;
    } else if (FileExists(directory)) {
      loaded = LoadFile(directory, ContextSource::kContextDirectory);
      token_context_file = directory;
    } else {
      return Fail(ErrorKind::kNotFound,
                  fmt::format("no context found: neither {} nor {} exists, and one-contextd "
                              "did not start us (CONTEXT_FILE is not set); use --context FILE",
                              saved, directory));
    }
    if (!loaded) return loaded;
  }

  loaded->token = FindToken(loaded->vars, options.root, token_context_file, mount_dir);
  if (!loaded->token.empty()) log::AddSecret(loaded->token);
  log::Info("context: {} variable{} from {} ({}), OneGate token {}", loaded->vars.size(),
            loaded->vars.size() == 1 ? "" : "s", loaded->origin, ToString(loaded->source),
            loaded->token.empty() ? "not found" : "found");
  return loaded;
}

const char* ToString(ContextSource source) {
  switch (source) {
    case ContextSource::kFile:
      return "file";
    case ContextSource::kSavedNetworkContext:
      return "saved network context";
    case ContextSource::kEnvironment:
      return "one-contextd environment";
    case ContextSource::kContextDirectory:
      return "context directory";
    case ContextSource::kCdrom:
      return "context CD-ROM";
  }
  return "unknown";
}

}  // namespace onehpc
