// One configure (or plan) run: choose the role, validate its settings, run it, and tell
// OpenNebula the outcome through OneGate (ERROR on failure; READY=YES after success when
// REPORT_READY=YES). `one-hpc configure` and `one-hpc plan` are thin wrappers around this.
#ifndef ONEHPC_ROLES_CONFIGURE_H_
#define ONEHPC_ROLES_CONFIGURE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "context/context_file.h"
#include "context/http.h"
#include "roles/os/block_devices.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"
#include "roles/os/systemd.h"
#include "roles/plan.h"
#include "roles/role.h"

namespace onehpc {

/// Process exit codes of one-hpc (documented in the man page, one-hpc(8)).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,        ///< configure failed (a command, a file, a daemon...)
  kExitUsage = 2,         ///< bad command line
  kExitInvalidInput = 3,  ///< bad or missing context / ONEAPP_* value
  kExitUnsafe = 4,        ///< refused to touch data it could not positively identify
  kExitNetwork = 5,       ///< OneGate or a peer unreachable until the deadline
};

/// The exit code for an error of this kind.
int ExitCodeFor(ErrorKind kind);

struct ConfigureRequest {
  LoadedContext context;
  PlanMode mode = PlanMode::kApply;
  /// Which entry point runs it: "one-context" (the net-90 hook), "service"
  /// (one-hpc-configure.service), "reconfigure" (one-hpc-reconfigure.service, started by udev
  /// when the CONTEXT CD is replaced on an image without one-context) or "cli".
  std::string entry = "cli";
  /// Finds a role module by name (tests inject their own).
  std::function<std::unique_ptr<Role>(const std::string&)> make_role;
};

struct ConfigureOutcome {
  int exit_code = kExitOk;
  std::string role;
  std::string error;  ///< the full error message when the run failed
  /// ONEAPP_* variables no role reads (UnknownSettingWarnings), also logged as warnings.
  std::vector<std::string> warnings;
  Plan plan{PlanMode::kApply};
};

/// Runs configure or plan. Never throws; every failure becomes an exit code and a message.
ConfigureOutcome RunConfigure(const ConfigureRequest& request, SystemAdapters& sys);

/// One `one-hpc follow` pass: the same role choice and settings as configure, then
/// Role::Follow. Publishes nothing (neither READY nor ERROR) and writes no status file: a
/// failed pass is logged and the next timer tick tries again.
int RunFollow(const LoadedContext& context, SystemAdapters& sys);

/// `one-hpc rotate-munge-key`: Role::RotateMungeKey of this VM's role (controller or portal).
int RunRotateMungeKey(const LoadedContext& context, SystemAdapters& sys);

/// The one-line, OneGate-safe form of an error message for the ERROR attribute:
/// , " \ [ ] and newlines replaced, at most 240 characters.
std::string OneGateSafeMessage(const std::string& message);

/// Where each run records its result (read by the service entry and by operators).
inline constexpr const char* kStatusFile = "/run/one-hpc/status.json";

}  // namespace onehpc

#endif  // ONEHPC_ROLES_CONFIGURE_H_
