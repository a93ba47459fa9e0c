#include "roles/os/process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "common/log.h"

extern char** environ;

namespace onehpc {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr int kStderrTailLines = 20;
#ifndef CLOSE_RANGE_CLOEXEC
constexpr unsigned kCloseRangeCloexec = 1U << 2;
#else
constexpr unsigned kCloseRangeCloexec = CLOSE_RANGE_CLOEXEC;
#endif

/// A file descriptor closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

/// What the child reports through the status pipe when it cannot exec.
struct ChildFailure {
  int stage;  // 1 = chdir, 2 = exec, 3 = dup2
  int error;
};

/// Moves `fd` to a number >= 3 (so that dup2 onto 0..2 in the child never clobbers
/// another pipe end), keeping O_CLOEXEC.
Status Above2(Fd& fd) {
  if (fd.get() > 2) return Ok();
  int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return Fail(ErrorKind::kInternal, std::string("fcntl: ") + strerror(errno));
  fd.Reset(moved);
  return Ok();
}

Status MakePipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return Fail(ErrorKind::kInternal, std::string("pipe2: ") + strerror(errno));
  }
  read_end.Reset(fds[0]);
  write_end.Reset(fds[1]);
  if (auto s = Above2(read_end); !s) return s;
  return Above2(write_end);
}

void SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

std::string Replace(std::string text, const std::vector<std::string>& secrets) {
  for (const auto& secret : secrets) {
    if (secret.empty()) continue;
    for (size_t pos = text.find(secret); pos != std::string::npos;
         pos = text.find(secret, pos + 10)) {
      text.replace(pos, secret.size(), "<redacted>");
    }
  }
  return text;
}

/// Redacts the command's own secrets and every registered one.
std::string RedactFor(const Command& command, std::string_view text) {
  return log::Redact(Replace(std::string(text), command.secrets));
}

std::string ArgvText(const Command& command) {
  return RedactFor(command, log::QuoteArgv(command.argv));
}

/// The last `max_lines` lines of `text`, trailing whitespace removed.
std::string Tail(std::string_view text, int max_lines) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  size_t pos = text.size();
  int lines = 0;
  while (pos > 0) {
    size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string_view::npos) {
      pos = 0;
      break;
    }
    if (++lines == max_lines) {
      pos = nl + 1;
      break;
    }
    pos = nl;
  }
  std::string out;
  if (pos > 0) out = "...\n";
  out.append(text.substr(pos));
  return out;
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

/// "exited with code 3", "was killed by signal 9 (SIGKILL)" or "timed out after 200 ms".
std::string StatusText(const Command& command, const ProcessResult& result) {
  if (result.timed_out) {
    return "timed out after " + std::to_string(command.timeout.count()) + " ms";
  }
  if (result.term_signal != 0) {
    return "was killed by signal " + std::to_string(result.term_signal) + " (" +
           SignalName(result.term_signal) + ")";
  }
  return "exited with code " + std::to_string(result.exit_code);
}

/// The value of `name` in a "NAME=value" list, or nullptr.
const std::string* FindEnv(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& entry : env) {
    if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
        entry[name.size()] == '=') {
      return &entry;
    }
  }
  return nullptr;
}

/// Whether a child inherits the variable `entry` ("NAME=value"): only the system's own
/// (search path, locale, time zone, terminal, home, the journal's stream), never a context
/// variable that one-contextd put into our environment (ONEAPP_* passwords, the token...).
bool Inherited(const char* entry) {
  static constexpr const char* kNames[] = {"PATH", "HOME", "LANG",          "LANGUAGE",
                                           "TZ",   "TERM", "JOURNAL_STREAM"};
  const char* eq = std::strchr(entry, '=');
  if (eq == nullptr) return false;
  const std::string_view name(entry, static_cast<size_t>(eq - entry));
  for (const char* allowed : kNames) {
    if (name == allowed) return true;
  }
  return name.rfind("LC_", 0) == 0 && name.size() > 3;
}

Result<std::vector<std::string>> BuildEnv(const Command& command) {
  std::vector<std::string> env;
  if (command.clear_env) {
    const char* path = std::getenv("PATH");
    env.push_back(std::string("PATH=") + (path && *path ? path : kDefaultPath));
  } else {
    for (char** e = environ; e && *e; ++e) {
      if (Inherited(*e)) env.emplace_back(*e);
    }
    if (FindEnv(env, "PATH") == nullptr) env.push_back(std::string("PATH=") + kDefaultPath);
  }
  for (const auto& [name, value] : command.env) {
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos || value.find('\0') != std::string::npos) {
      return Fail(ErrorKind::kInvalidInput, "invalid environment variable name for " +
                                                ArgvText(command) + ": '" + name + "'");
    }
    std::string prefix = name + "=";
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& e) { return e.rfind(prefix, 0) == 0; }),
              env.end());
    env.push_back(prefix + value);
  }
  return env;
}

/// argv[0] as execve wants it: unchanged when it contains a slash, otherwise looked up in
/// the absolute directories of the child's PATH (like execvp, but never through a shell).
Result<std::string> ResolveProgram(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  const std::string* path_entry = FindEnv(env, "PATH");
  std::string path = path_entry ? path_entry->substr(5) : kDefaultPath;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    start = end + 1;
    if (dir.empty() || dir[0] != '/') continue;  // relative PATH entries are not trusted
    std::string candidate = dir + "/" + name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return Fail(ErrorKind::kProcess, "program not found: " + name);
}

[[noreturn]] void ChildFail(int status_fd, int stage) {
  ChildFailure failure{stage, errno};
  ssize_t ignored = ::write(status_fd, &failure, sizeof failure);
  (void)ignored;
  ::_exit(127);
}

/// An argv that can be executed: a program, no NUL byte.
Status CheckArgv(const Command& command) {
  if (command.argv.empty() || command.argv[0].empty()) {
    return Fail(ErrorKind::kInvalidInput, "cannot run an empty command");
  }
  for (const auto& arg : command.argv) {
    if (arg.find('\0') != std::string::npos) {
      return Fail(ErrorKind::kInvalidInput, "argument with a NUL byte in " + ArgvText(command));
    }
  }
  return Ok();
}

/// Command::stdin_file: the file replaces the stdin pipe (nothing is written to the child).
Status UseStdinFile(const Command& command, const std::string& argv_text, Fd& in_r, Fd& in_w) {
  if (command.stdin_file.empty()) return Ok();
  if (!command.stdin_data.empty()) {
    return Fail(ErrorKind::kInvalidInput, "both stdin_data and stdin_file for " + argv_text);
  }
  Fd file(::open(command.stdin_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY));
  if (!file.valid()) {
    return Fail(ErrorKind::kIo, "cannot open " + command.stdin_file + " as the input of " +
                                    argv_text + ": " + strerror(errno));
  }
  if (auto s = Above2(file); !s) return s;
  in_r = std::move(file);
  in_w.Reset();
  return Ok();
}

/// Runs in the forked child: only async-signal-safe calls, nothing allocated.
[[noreturn]] void ChildExec(const char* path, char* const* argv, char* const* envp, const char* cwd,
                            int in_fd, int out_fd, int err_fd, int status_fd) {
  ::setpgid(0, 0);
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  // All pipe ends are >= 3, so dup2 never clobbers one and always clears FD_CLOEXEC.
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) {
    ChildFail(status_fd, 3);
  }
  if (cwd && ::chdir(cwd) != 0) ChildFail(status_fd, 1);
  // Every other descriptor is closed at exec (the status pipe already is O_CLOEXEC).
  if (::syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec) != 0) {
    struct rlimit rl;
    int max_fd = 65536;
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < 65536) {
      max_fd = static_cast<int>(rl.rlim_cur);
    }
    for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  ::execve(path, argv, envp);
  ChildFail(status_fd, 2);
}

/// write(2) that turns SIGPIPE into EPIPE without touching the process-wide disposition.
ssize_t WriteNoSigpipe(int fd, const char* data, size_t size) {
  sigset_t pipe_set, old_set, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  sigemptyset(&pending);
  ::sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE);
  ssize_t written = ::write(fd, data, size);
  int saved = errno;
  if (written < 0 && saved == EPIPE && !was_pending) {
    struct timespec zero = {0, 0};
    while (::sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved;
  return written;
}

/// One captured output stream.
struct Output {
  Fd fd;
  std::string* data;
  bool* truncated;
};

/// Reads what is available; closes the fd at EOF or on error.
void ReadAvailable(Output& o) {
  char buf[65536];
  while (o.fd.valid()) {
    ssize_t n = ::read(o.fd.get(), buf, sizeof buf);
    if (n > 0) {
      size_t room = ProcessResult::kMaxOutput - std::min(o.data->size(), ProcessResult::kMaxOutput);
      size_t keep = std::min(room, static_cast<size_t>(n));
      o.data->append(buf, keep);
      if (keep < static_cast<size_t>(n)) *o.truncated = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    o.fd.Reset();  // EOF or a read error
  }
}

/// Reaps `pid`; false if its status is lost (e.g. SIGCHLD set to SIG_IGN by someone).
bool WaitForPid(pid_t pid, int* status) {
  for (;;) {
    if (::waitpid(pid, status, 0) == pid) return true;
    if (errno != EINTR) return false;
  }
}

bool HasExited(pid_t pid) {
  siginfo_t info;
  memset(&info, 0, sizeof info);
  if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return true;
  return info.si_pid == pid;
}

// The status pipe closes at a successful exec, or carries the reason it failed: then the child
// is reaped and the reason returned, redacted.
std::optional<std::string> ExecFailure(Fd& status_r, pid_t pid, const Command& command,
                                       const std::string& argv_text, const std::string& program) {
  ChildFailure failure{0, 0};
  size_t got = 0;
  while (got < sizeof failure) {
    ssize_t n =
        ::read(status_r.get(), reinterpret_cast<char*>(&failure) + got, sizeof failure - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  status_r.Reset();
  if (got != sizeof failure) return std::nullopt;
  int status = 0;
  WaitForPid(pid, &status);
  std::string message;
  if (failure.stage == 1) {
    message = "cannot change directory to " + command.cwd + " for " + argv_text + ": " +
              strerror(failure.error);
  } else if (failure.stage == 2 && failure.error == ENOENT) {
    message = "program not found: " + command.argv[0];
  } else {
    message = "cannot execute " + program + ": " + strerror(failure.error);
  }
  return RedactFor(command, message);
}

// As much of `data` from `offset` as the pipe takes now; the pipe is closed once all is written
// or when the program does not read its input (EPIPE).
void WriteStdin(Fd& in_w, const std::string& data, size_t& offset) {
  while (in_w.valid() && offset < data.size()) {
    size_t chunk = std::min<size_t>(65536, data.size() - offset);
    ssize_t n = WriteNoSigpipe(in_w.get(), data.data() + offset, chunk);
    if (n > 0) {
      offset += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      in_w.Reset();  // EPIPE: the program does not read its input
    }
  }
  if (offset >= data.size()) in_w.Reset();
}

// Feeds the program its input and collects its output until it exits; at the timeout its group
// gets SIGTERM, then SIGKILL after the grace. `result.timed_out` says whether it came to that.
void Supervise(pid_t pid, const Command& command, Fd& in_w, Output (&outputs)[2],
               ProcessResult& result) {
  size_t in_offset = 0;
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  using SteadyClock = std::chrono::steady_clock;
  const auto deadline = SteadyClock::now() + command.timeout;
  SteadyClock::time_point kill_at{};
  bool killed = false;
  for (bool exited = false; !exited;) {
    auto now = SteadyClock::now();
    if (!result.timed_out && now >= deadline) {
      result.timed_out = true;
      ::kill(-pid, SIGTERM);
      kill_at = now + command.kill_grace;
    }
    if (result.timed_out && !killed && now >= kill_at) {
      ::kill(-pid, SIGKILL);
      killed = true;
    }
    pollfd fds[4];
    nfds_t nfds = 0;
    int in_index = -1, pid_index = -1, out_index[2] = {-1, -1};
    if (in_w.valid()) {
      in_index = static_cast<int>(nfds);
      fds[nfds++] = {in_w.get(), POLLOUT, 0};
    }
    for (int i = 0; i < 2; ++i) {
      if (outputs[i].fd.valid()) {
        out_index[i] = static_cast<int>(nfds);
        fds[nfds++] = {outputs[i].fd.get(), POLLIN, 0};
      }
    }
    if (pidfd.valid()) {
      pid_index = static_cast<int>(nfds);
      fds[nfds++] = {pidfd.get(), POLLIN, 0};
    }
    // Wake up for the next deadline; without a pidfd, also to check for the exit.
    auto next = !result.timed_out ? deadline : (killed ? now + Duration(100) : kill_at);
    long wait_ms = std::max<long>(0, std::chrono::duration_cast<Duration>(next - now).count() + 1);
    if (!pidfd.valid()) wait_ms = std::min<long>(wait_ms, 20);
    int ready = ::poll(fds, nfds, static_cast<int>(std::min<long>(wait_ms, 1000000)));
    if (ready < 0 && errno != EINTR) {
      log::Warn("run: poll failed: {}", strerror(errno));
      ::usleep(10000);
    }
    if (ready > 0) {
      if (in_index >= 0 && fds[in_index].revents != 0) {
        WriteStdin(in_w, command.stdin_data, in_offset);
      }
      for (int i = 0; i < 2; ++i) {
        if (out_index[i] >= 0 && fds[out_index[i]].revents != 0) ReadAvailable(outputs[i]);
      }
    }
    exited = pidfd.valid() ? (pid_index >= 0 && ready > 0 && fds[pid_index].revents != 0)
                           : HasExited(pid);
  }
}

// What the program wrote and its exit status, once it has exited; logged.
Result<ProcessResult> Collect(pid_t pid, const Command& command, const std::string& argv_text,
                              Fd& in_w, Output (&outputs)[2], ProcessResult& result) {
  // Everything the program wrote is in the pipes now; descendants that still hold them
  // open are not waited for.
  for (auto& o : outputs) {
    ReadAvailable(o);
    o.fd.Reset();
  }
  in_w.Reset();
  // After a timeout, nothing of the group may survive (the pid is not reaped yet, so the
  // group id cannot have been reused).
  if (result.timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  if (!WaitForPid(pid, &status)) {
    return Fail(ErrorKind::kInternal,
                "cannot get the exit status of " + argv_text + ": " + strerror(errno));
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = -1;
    result.term_signal = WTERMSIG(status);
  }
  if (result.timed_out) {
    log::Warn("run: {} timed out after {} ms", argv_text, command.timeout.count());
  } else if (!result.ok()) {
    std::string err = Tail(RedactFor(command, result.err), kStderrTailLines);
    log::Debug("run: {} {}{}{}", argv_text, StatusText(command, result), err.empty() ? "" : ": ",
               err);
  }
  if (result.out_truncated || result.err_truncated) {
    log::Warn("run: {}: output truncated to {} bytes per stream", argv_text,
              ProcessResult::kMaxOutput);
  }
  return result;
}

}  // namespace

Result<ProcessResult> RealProcessRunner::Run(const Command& command) {
  if (auto s = CheckArgv(command); !s) return Fail(s.error());
  const std::string argv_text = ArgvText(command);
  log::Debug("run: {}{}", argv_text,
             command.cwd.empty() ? std::string() : " (in " + command.cwd + ")");

  // Everything the child needs is prepared before fork: it must not allocate.
  auto env = BuildEnv(command);
  if (!env) return Fail(env.error());
  auto program = ResolveProgram(command.argv[0], *env);
  if (!program) return Fail(program.error());
  std::vector<char*> argv_ptrs;
  for (const auto& arg : command.argv) argv_ptrs.push_back(const_cast<char*>(arg.c_str()));
  argv_ptrs.push_back(nullptr);
  std::vector<char*> env_ptrs;
  for (const auto& entry : *env) env_ptrs.push_back(const_cast<char*>(entry.c_str()));
  env_ptrs.push_back(nullptr);

  Fd in_r, in_w, out_r, out_w, err_r, err_w, status_r, status_w;
  for (auto [r, w] : {std::pair{&in_r, &in_w}, std::pair{&out_r, &out_w}, std::pair{&err_r, &err_w},
                      std::pair{&status_r, &status_w}}) {
    if (auto s = MakePipe(*r, *w); !s) return Fail(s.error());
  }
  if (auto s = UseStdinFile(command, argv_text, in_r, in_w); !s) return Fail(s.error());

  pid_t pid = ::fork();
  if (pid < 0) {
    return Fail(ErrorKind::kProcess, "cannot start " + argv_text + ": fork: " + strerror(errno));
  }
  if (pid == 0) {
    ChildExec(program->c_str(), argv_ptrs.data(), env_ptrs.data(),
              command.cwd.empty() ? nullptr : command.cwd.c_str(), in_r.get(), out_w.get(),
              err_w.get(), status_w.get());
  }
  // Parent. Also set the group here, so that a kill at the timeout cannot miss it.
  ::setpgid(pid, pid);
  in_r.Reset();
  out_w.Reset();
  err_w.Reset();
  status_w.Reset();
  if (auto failed = ExecFailure(status_r, pid, command, argv_text, *program)) {
    log::Debug("run: {}", *failed);
    return Fail(ErrorKind::kProcess, *failed);
  }

  ProcessResult result;
  Output outputs[2] = {{std::move(out_r), &result.out, &result.out_truncated},
                       {std::move(err_r), &result.err, &result.err_truncated}};
  for (auto& o : outputs) SetNonBlocking(o.fd.get());
  SetNonBlocking(in_w.get());
  if (command.stdin_data.empty()) in_w.Reset();
  Supervise(pid, command, in_w, outputs, result);
  // `outputs` write into `result`: it stays where it is until the end.
  return Collect(pid, command, argv_text, in_w, outputs, result);
}

Result<ProcessResult> RunChecked(ProcessRunner& runner, const Command& command) {
  auto result = runner.Run(command);
  if (!result) return result;
  if (result->ok()) return result;
  std::string message = ArgvText(command) + " " + StatusText(command, *result);
  std::string err = Tail(RedactFor(command, result->err), kStderrTailLines);
  if (!err.empty()) {
    message += ": " + err;
  } else {
    std::string out = Tail(RedactFor(command, result->out), kStderrTailLines);
    if (!out.empty()) message += " (stdout: " + out + ")";
  }
  return Fail(ErrorKind::kProcess, message);
}

std::string ProcessText(const ProcessResult& result) {
  auto trimmed = [](const std::string& s) {
    const char* ws = " \t\r\n";
    size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos) return std::string();
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
  };
  std::string text = trimmed(result.err);
  if (text.empty()) text = trimmed(result.out);
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  if (text.size() > 400) text = text.substr(0, 400) + "...";
  return text;
}

}  // namespace onehpc
