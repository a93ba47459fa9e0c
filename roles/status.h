// `one-hpc status`: what an operator looks at first on any VM of either service. It reads and
// changes nothing: the role of the last successful configure (kRoleRecordFile) and the result
// of the last run (kStatusFile); READY and ERROR as OneGate shows them; the units and timers
// one-hpc manages, with their last result and next run (one `systemctl show`); on a controller
// or a portal the table the reconciler sees, each Slurm node with its state, the VM that
// publishes it and what the reconciler would do (a dry-run cycle); and, with elastic mode on,
// the last elastic cycle's decision and since when it stands (from the cycle's state file).
//
// Cost, whatever the number of workers: one OneGate request (GET /vm on a worker or a storage
// VM; GET /service?extended=true on a controller or a portal, which the dry-run cycle reuses),
// one systemctl call, and the reconciler's two Slurm reads.
#ifndef ONEHPC_ROLES_STATUS_H_
#define ONEHPC_ROLES_STATUS_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "context/onegate.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/timers/elastic_cycle.h"
#include "roles/timers/reconcile.h"

namespace onehpc {

struct StatusInputs {
  /// Null when there is no OneGate (no context, no token): `onegate_why` says why.
  OneGateClient* onegate = nullptr;
  std::string onegate_why;
  int own_vm_id = -1;  ///< VMID of the context, -1 if unknown
  /// False under --root: systemctl and Slurm are this machine's, not the root's.
  bool query_machine = true;
  ReconcileOptions reconcile;  ///< dry_run is forced
};

struct UnitStatus {
  std::string unit;
  std::string active;       ///< ActiveState (active, inactive, failed...); "" when unknown
  std::string sub;          ///< SubState
  std::string result;       ///< Result of the last run (success, exit-code, timeout...)
  std::string exit_status;  ///< ExecMainStatus of a service
  std::string last_run;     ///< timers: LastTriggerUSec
  std::string next_run;     ///< timers: NextElapseUSecRealtime
  bool Failed() const { return active == "failed" || (!result.empty() && result != "success"); }
};

struct StatusReport {
  std::string role;     ///< "" when no configure recorded one
  std::string service;  ///< OneSlurm / Open OnDemand, when the role is known
  /// The last run (kStatusFile): nullopt when none since boot.
  struct LastRun {
    std::string result;  ///< success / failure
    int exit_code = 0;
    std::string entry;
    std::string error;
    std::string finished;  ///< UTC, ISO 8601; "" for a file of an older one-hpc
  };
  std::optional<LastRun> last_run;
  std::string last_run_problem;  ///< the status file exists but cannot be read

  /// READY and ERROR of this VM as OneGate shows them (nullopt: not published).
  bool onegate_read = false;
  std::string onegate_problem;
  std::optional<std::string> ready;
  std::optional<std::string> error;

  std::vector<UnitStatus> units;
  std::string units_problem;

  /// Portal: whether the image has Open OnDemand ("installed", or why not; "" elsewhere).
  std::string open_ondemand;
  /// What the VM's context gives that the operator should change (clear-text passwords): the
  /// command fills it from the context, which CollectStatus does not read.
  std::vector<std::string> warnings;

  /// Controller and portal: the reconciler's dry-run cycle.
  std::optional<ReconcileReport> reconcile;
  std::string reconcile_problem;

  /// Elastic mode on (its timer among the units the configure enabled): what the last cycle
  /// decided (no lines: no cycle has run yet).
  std::optional<ElasticDecisionRecord> elastic;
  std::string elastic_problem;  ///< the cycle's state file cannot be read

  int onegate_requests = 0;
  int slurm_calls = 0;
  bool machine_queried = true;  ///< false under --root
};

StatusReport CollectStatus(const StatusInputs& inputs, const Files& files, ProcessRunner& runner,
                           Clock& clock);
/// Where the log of a configure run through `entry` is (service, reconfigure, one-context,
/// cli): the command to read it.
std::string ConfigureLogCommand(const std::string& entry);

std::string RenderStatus(const StatusReport& report);
nlohmann::json StatusJson(const StatusReport& report);
/// 0 when the last configure succeeded and no managed unit failed; 1 otherwise (the report
/// says what): a script can test it, as it tests `systemctl is-failed`.
int StatusExitCode(const StatusReport& report);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_STATUS_H_
