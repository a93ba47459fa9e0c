// `one-hpc reconcile` (oneslurm-reconcile.service, every 60 s on the controller): removes
// Slurm nodes whose worker VM is gone. It acts on a node only when all three hold:
//   (1) the node is registered in Slurm;
//   (2) no VM of the service publishes its name (SLURM_NODENAME) in OneGate;
//   (3) Slurm sees it DOWN or NOT_RESPONDING.
// Then it deletes the node, or, while jobs still hold it, drains it with the reason
// "removed from OneFlow service" (deleted by a later cycle once idle). When OneGate fails in
// any way, or no VM has published a name yet, it changes nothing.
//
// Cost per cycle, whatever the number of workers: ONE OneGate request
// (GET /service?extended=true), `scontrol -o show nodes` and `squeue` once each, one scontrol
// call per node it changes, and — only if it changed something — one more
// `scontrol -o show nodes` to verify (exit codes lie). Every call has a timeout.
//
// On the Open OnDemand portal it also keeps the workers' names in /etc/hosts (a block of its
// own), from what it has already read: a node name published by a VM of the service, at the
// address Slurm has for it (NodeAddr), when that address is one of that VM's NICs in OneGate.
// The portal's /node and /rnode proxies then reach exactly the service's workers by name.
#ifndef ONEHPC_ROLES_TIMERS_RECONCILE_H_
#define ONEHPC_ROLES_TIMERS_RECONCILE_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "context/onegate.h"
#include "roles/host/hostname.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/slurm/nodes.h"

namespace onehpc {

struct ReconcileOptions {
  /// SLURM_CONF for scontrol/squeue; "" = Slurm's default (/etc/slurm/slurm.conf).
  std::string slurm_conf;
  Duration command_timeout{10000};  ///< per scontrol/squeue call
  /// No change starts after this much time, and the final check is skipped after
  /// budget + 10 s, so that a cycle ends within oneslurm-reconcile.service's TimeoutStartSec
  /// (50 s) when the OneGate client is bounded at about 15 s; what is left waits for the next
  /// cycle.
  Duration budget{25000};
  bool dry_run = false;  ///< decide and log, change nothing
  /// With a file system: the workers' block of `hosts_file` is kept current (the portal).
  Files* files = nullptr;
  std::string hosts_file = "/etc/hosts";
};

/// What the reconciler decided for one registered node.
struct ReconcileDecision {
  enum class Action {
    kKeepPublished,   ///< a VM of the service publishes the name: never touched
    kKeepResponding,  ///< unpublished but neither DOWN nor NOT_RESPONDING
    kKeepDrained,     ///< already drained by us and jobs still run: delete later
    kDelete,
    kDrain,
    kSkipped,  ///< a name we refuse to pass to scontrol, or the time budget ran out
  };
  std::string node;
  std::string state;
  Action action = Action::kKeepPublished;
  std::string reason;  ///< why (one log line)
  std::string vm;      ///< the VM that publishes the node's name ("VM 12 (worker_0)"), or ""
  bool ok = true;      ///< false when the change failed
  std::string error;
};

struct ReconcileReport {
  /// Non-empty when the cycle changed nothing on purpose (OneGate failed, nobody published).
  std::string skipped;
  std::vector<ReconcileDecision> decisions;
  int published_names = 0;
  int onegate_requests = 0;  ///< requests this cycle sent (attempts, including retries)
  int worker_hosts = -1;     ///< entries of the workers' hosts block (-1 = not written)
  bool hosts_changed = false;
  int slurm_calls = 0;  ///< scontrol/squeue processes this cycle started

  /// Decisions with this action (whether or not the change worked).
  int Count(ReconcileDecision::Action action) const;
  /// Decisions with this action whose change worked.
  int Done(ReconcileDecision::Action action) const;
  int failures() const;
};

/// "keep", "delete", "drain" or "skip": the verb of the log line and of `one-hpc status`.
const char* ReconcileVerb(ReconcileDecision::Action action);

/// The pure decision for one node (no I/O): conditions (2) and (3) and the jobs check.
ReconcileDecision DecideNode(const slurm::SlurmNode& node, const std::set<std::string>& published,
                             const std::vector<std::string>& jobs);

/// The node names published by the VMs of a service (extended document). kInvalidInput when
/// some node carries no VM details (compact view or a lookup failure on the front-end): the
/// cycle cannot know whether that VM publishes a name, so it must not act.
Result<std::set<std::string>> PublishedNodeNames(const ServiceInfo& service);
/// The same, with the VM that publishes each name ("VM 12 (worker_0)").
Result<std::map<std::string, std::string>> NodePublishers(const ServiceInfo& service);

/// Each published node name → the IPv4 addresses of the NICs of the VM that publishes it.
std::map<std::string, std::set<std::string>> NodeNicAddresses(const ServiceInfo& service);
/// The workers' hosts entries (address, name), by name: the Slurm nodes whose name a VM of the
/// service publishes, whose NodeAddr is one of that VM's addresses and whose name is a valid
/// host label. Anything else is left out (and logged by the caller).
host::HostEntries WorkerHostEntries(const std::vector<slurm::SlurmNode>& nodes,
                                    const std::map<std::string, std::set<std::string>>& nics);

/// One reconcile cycle; logs one line per decision with its reason and a summary line.
/// Returns an error only when Slurm's state cannot be read (slurmctld down, squeue failed);
/// OneGate trouble is a skipped (successful) cycle; failed changes are in the report.
Result<ReconcileReport> RunReconcile(const ReconcileOptions& options, OneGateClient& onegate,
                                     ProcessRunner& runner, Clock& clock);

/// Exit status for `one-hpc reconcile`: 0 for a cycle that ran (changes or not, including a
/// skipped cycle), 1 when Slurm could not be read or a change failed (the unit shows failed,
/// the next cycle retries).
int ReconcileExitCode(const Result<ReconcileReport>& result);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_TIMERS_RECONCILE_H_
