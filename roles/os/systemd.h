// systemd behind an interface. Boot code never waits for a job: starts use --no-block and
// are followed by polling with a deadline (a start job can wait behind the boot itself).
#ifndef ONEHPC_ROLES_OS_SYSTEMD_H_
#define ONEHPC_ROLES_OS_SYSTEMD_H_

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "roles/os/process.h"

namespace onehpc {

class Systemd {
 public:
  virtual ~Systemd() = default;
  virtual Status DaemonReload() = 0;
  /// Enable and Disable change the unit's links only: no implicit daemon-reload (a unit file
  /// one-hpc writes is followed by its own DaemonReload; a link matters at the next boot, and
  /// every unit is started or stopped explicitly) and no SysV script's rc.d links.
  virtual Status Enable(const std::string& unit) = 0;
  virtual Status Disable(const std::string& unit) = 0;
  /// systemctl --no-block start
  virtual Status StartNoBlock(const std::string& unit) = 0;
  /// systemctl --no-block restart
  virtual Status RestartNoBlock(const std::string& unit) = 0;
  /// systemctl --no-block stop
  virtual Status StopNoBlock(const std::string& unit) = 0;
  /// systemctl is-active --quiet: true when active.
  virtual Result<bool> IsActive(const std::string& unit) = 0;
  /// The unit's last `lines` journal lines joined by " | " (at most 400 characters, the end
  /// kept, secrets redacted), for an error that must say why a daemon did not come up; ""
  /// when they cannot be read.
  virtual std::string RecentLog(const std::string& unit, int lines);
  /// The unit's MainPID ("0" when no process runs); kNotFound where it cannot be asked (under
  /// --root, or an adapter that does not know it).
  virtual Result<std::string> MainPid(const std::string& unit);
  /// Polls IsActive until true or the timeout passes (kProcess error naming the unit and,
  /// when it did not become active, its RecentLog).
  Status WaitActive(const std::string& unit, Duration timeout, Clock& clock);
  /// Polls IsActive until false or the timeout passes (kProcess error naming the unit).
  Status WaitInactive(const std::string& unit, Duration timeout, Clock& clock);
};

/// How long one systemctl call (daemon-reload, enable, disable, --no-block start/stop) may
/// take. Not a network wait: long enough for a busy host: a daemon-reload took 3.6 s on an
/// idle worker VM under TCG, and three workers booting together on 2 cores take several times
/// that. (A plain `systemctl enable munge.service` runs systemd-sysv-install, perl's
/// update-rc.d, and a daemon-reload: 14 s there; Enable skips both: 0.12 s.)
inline constexpr Duration kSystemctlTimeout{120000};

/// Runs systemctl through a ProcessRunner. With a root prefix other than "/", enable and
/// disable use `systemctl --root=<root>` and runtime operations are refused (kInvalidInput).
class SystemctlSystemd : public Systemd {
 public:
  SystemctlSystemd(ProcessRunner& runner, std::string root = "");
  Status DaemonReload() override;
  Status Enable(const std::string& unit) override;
  Status Disable(const std::string& unit) override;
  Status StartNoBlock(const std::string& unit) override;
  Status RestartNoBlock(const std::string& unit) override;
  Status StopNoBlock(const std::string& unit) override;
  Result<bool> IsActive(const std::string& unit) override;
  /// `journalctl --no-pager -q -o cat -n LINES -u UNIT` (10 s timeout); "" under --root.
  std::string RecentLog(const std::string& unit, int lines) override;
  /// `systemctl show -P MainPID UNIT` (10 s timeout).
  Result<std::string> MainPid(const std::string& unit) override;

 private:
  /// links_only: SYSTEMCTL_SKIP_SYSV=1 in systemctl's environment (enable, disable).
  Status Systemctl(std::vector<std::string> args, bool links_only = false);
  bool offline() const;
  ProcessRunner& runner_;
  std::string root_;
};

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OS_SYSTEMD_H_
