#include "roles/os/systemd.h"

#include <algorithm>
#include <cctype>

#include "common/log.h"

namespace onehpc {
namespace {

constexpr Duration kIsActiveTimeout{10000};
constexpr Duration kPollInterval{500};

/// A unit name that systemctl cannot mistake for an option or a path.
Status CheckUnit(const std::string& unit) {
  bool bad = unit.empty() || unit[0] == '-' || unit.find('/') != std::string::npos ||
             std::any_of(unit.begin(), unit.end(),
                         [](unsigned char c) { return std::iscntrl(c) || std::isspace(c); });
  if (bad) {
    return Fail(ErrorKind::kInvalidInput, "invalid systemd unit name '" + unit + "'");
  }
  return Ok();
}

}  // namespace

namespace {

Status WaitFor(Systemd& systemd, const std::string& unit, bool want_active, Duration timeout,
               Clock& clock) {
  const TimePoint deadline = clock.Now() + timeout;
  for (;;) {
    auto active = systemd.IsActive(unit);
    if (!active) return Fail(active.error());
    if (*active == want_active) return Ok();
    TimePoint now = clock.Now();
    if (now >= deadline) {
      std::string why = want_active ? systemd.RecentLog(unit, 3) : "";
      return Fail(ErrorKind::kProcess, "unit " + unit + " did not become " +
                                           (want_active ? "active" : "inactive") + " within " +
                                           std::to_string(timeout.count()) + " ms" +
                                           (why.empty() ? "" : "; its last log lines: " + why));
    }
    clock.SleepFor(std::min(kPollInterval, std::chrono::duration_cast<Duration>(deadline - now)));
  }
}

}  // namespace

Status Systemd::WaitActive(const std::string& unit, Duration timeout, Clock& clock) {
  return WaitFor(*this, unit, true, timeout, clock);
}

Status Systemd::WaitInactive(const std::string& unit, Duration timeout, Clock& clock) {
  return WaitFor(*this, unit, false, timeout, clock);
}

std::string Systemd::RecentLog(const std::string&, int) { return ""; }

Result<std::string> Systemd::MainPid(const std::string& unit) {
  return Fail(ErrorKind::kNotFound, "this systemd adapter cannot read " + unit + "'s MainPID");
}

Result<std::string> SystemctlSystemd::MainPid(const std::string& unit) {
  if (auto s = CheckUnit(unit); !s) return Fail(s.error());
  if (offline()) return Fail(ErrorKind::kNotFound, "no running system under --root=" + root_);
  Command c;
  c.argv = {"systemctl", "show", "-P", "MainPID", unit};
  c.timeout = kIsActiveTimeout;
  auto r = RunChecked(runner_, c);
  if (!r) return Fail(r.error());
  std::string pid = r->out;
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid;
}

std::string SystemctlSystemd::RecentLog(const std::string& unit, int lines) {
  if (offline() || !CheckUnit(unit)) return "";
  Command c;
  c.argv = {"journalctl", "--no-pager", "-q", "-o", "cat", "-n", std::to_string(lines), "-u", unit};
  c.timeout = Duration(10000);
  auto r = runner_.Run(c);
  if (!r || !r->ok()) return "";
  std::string joined;
  size_t b = 0;
  while (b < r->out.size()) {
    size_t e = r->out.find('\n', b);
    if (e == std::string::npos) e = r->out.size();
    std::string line = r->out.substr(b, e - b);
    b = e + 1;
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    joined += (joined.empty() ? "" : " | ") + line;
  }
  constexpr size_t kMax = 400;
  if (joined.size() > kMax) joined = "..." + joined.substr(joined.size() - kMax);
  return log::Redact(joined);
}

SystemctlSystemd::SystemctlSystemd(ProcessRunner& runner, std::string root)
    : runner_(runner), root_(std::move(root)) {}

bool SystemctlSystemd::offline() const { return !root_.empty() && root_ != "/"; }

Status SystemctlSystemd::Systemctl(std::vector<std::string> args, bool links_only) {
  Command command;
  command.argv = {"systemctl"};
  if (offline()) command.argv.push_back("--root=" + root_);
  command.argv.insert(command.argv.end(), args.begin(), args.end());
  command.timeout = kSystemctlTimeout;
  if (links_only) {
    // Only the native unit's links: no systemd-sysv-install (update-rc.d) for a unit that also
    // has a SysV script (systemd ignores /etc/rc?.d when the native unit exists).
    command.env.emplace_back("SYSTEMCTL_SKIP_SYSV", "1");
  }
  auto result = RunChecked(runner_, command);
  if (!result) return Fail(result.error());
  return Ok();
}

Status SystemctlSystemd::DaemonReload() {
  if (offline()) {
    return Fail(ErrorKind::kInvalidInput,
                "systemctl daemon-reload is a runtime operation, refused with --root=" + root_);
  }
  return Systemctl({"daemon-reload"});
}

Status SystemctlSystemd::Enable(const std::string& unit) {
  if (auto s = CheckUnit(unit); !s) return s;
  return Systemctl({"enable", "--no-reload", unit}, /*links_only=*/true);
}

Status SystemctlSystemd::Disable(const std::string& unit) {
  if (auto s = CheckUnit(unit); !s) return s;
  return Systemctl({"disable", "--no-reload", unit}, /*links_only=*/true);
}

Status SystemctlSystemd::StartNoBlock(const std::string& unit) {
  if (auto s = CheckUnit(unit); !s) return s;
  if (offline()) {
    return Fail(ErrorKind::kInvalidInput,
                "cannot start " + unit + ": runtime operations are refused with --root=" + root_);
  }
  return Systemctl({"--no-block", "start", unit});
}

Status SystemctlSystemd::RestartNoBlock(const std::string& unit) {
  if (auto s = CheckUnit(unit); !s) return s;
  if (offline()) {
    return Fail(ErrorKind::kInvalidInput,
                "cannot restart " + unit + ": runtime operations are refused with --root=" + root_);
  }
  return Systemctl({"--no-block", "restart", unit});
}

Status SystemctlSystemd::StopNoBlock(const std::string& unit) {
  if (auto s = CheckUnit(unit); !s) return s;
  if (offline()) {
    return Fail(ErrorKind::kInvalidInput,
                "cannot stop " + unit + ": runtime operations are refused with --root=" + root_);
  }
  return Systemctl({"--no-block", "stop", unit});
}

Result<bool> SystemctlSystemd::IsActive(const std::string& unit) {
  if (auto s = CheckUnit(unit); !s) return Fail(s.error());
  if (offline()) {
    return Fail(ErrorKind::kInvalidInput,
                "cannot query " + unit + ": runtime operations are refused with --root=" + root_);
  }
  Command command;
  command.argv = {"systemctl", "is-active", "--quiet", unit};
  command.timeout = kIsActiveTimeout;
  auto result = runner_.Run(command);
  if (!result) return Fail(result.error());
  if (result->timed_out) {
    return Fail(ErrorKind::kProcess, "systemctl is-active " + unit + " timed out after " +
                                         std::to_string(kIsActiveTimeout.count()) + " ms");
  }
  if (result->term_signal != 0) {
    return Fail(ErrorKind::kProcess, "systemctl is-active " + unit + " was killed by signal " +
                                         std::to_string(result->term_signal));
  }
  // 0 = active; 3 = inactive/failed/unknown; other codes also mean "not active".
  return result->exit_code == 0;
}

}  // namespace onehpc
