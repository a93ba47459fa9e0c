// `one-hpc elastic` (on the controller when ONEAPP_SLURM_ELASTIC=YES: oneslurm-elastic.timer
// every 60 s, and oneslurm-elastic.path as soon as slurmctld's job_submit.lua creates the kick
// file for a submitted job): one elastic cycle. A cycle the kick started begins at least 5 s
// after the last one began, removes the kick file and polls `squeue -t PENDING` (each second,
// up to 4 s) until no pending job still has reason None. It then reads the state once — ONE
// OneGate request (GET /service?extended=true), `scontrol -o show nodes` and `squeue -t
// PENDING` — builds the Snapshot of roles/slurm/elastic.h, asks elastic::Decide, and carries
// the actions out:
//   grow       PUT /service/role/<role> {"cardinality": N}; a 400 (OneFlow refuses during
//              SCALING/COOLDOWN, or outside min_vms/max_vms) is "asked again next cycle";
//   drain      scontrol update nodename=<node> state=drain reason="one-hpc elastic: idle";
//   resume     scontrol update nodename=<node> state=resume (only our own idle drains);
//   terminate  after `scontrol -o show node <node>` shows it still IDLE+DRAIN (no job got onto
//              it since), POST /vms/<id>/action terminate: exactly that VM; OneFlow's watchdog
//              then lowers the role's cardinality;
//   job-too-large  the job's AdminComment says so (once per job);
//   stop-replacing the ERROR attribute of the controller's VM says so (`onevm show`); erased
//              by the cycle once a worker registers again.
// Every decision is one log line with its reason; --dry-run logs them as "would ..." and
// changes nothing. Cost per cycle, whatever the number of workers: 1 OneGate request and 2
// Slurm calls to read, then one call per change (and one read of the node before each
// terminate), and one `scontrol -o show nodes` to verify drains and resumes.
// The count of failed boots in a row, the jobs already told and the last cycle's decision (what
// `one-hpc status` shows) are kept in a small state file between cycles (written atomically,
// and only when something in it changed).
#ifndef ONEHPC_ROLES_TIMERS_ELASTIC_CYCLE_H_
#define ONEHPC_ROLES_TIMERS_ELASTIC_CYCLE_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "context/onegate.h"
#include "roles/names.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/slurm/elastic.h"
#include "roles/slurm/nodes.h"

namespace onehpc {

inline constexpr char kElasticStateFile[] = "/var/lib/one-hpc/elastic.json";
/// The ERROR the cycle publishes starts with this (and only such an ERROR is erased by it).
inline constexpr char kElasticErrorPrefix[] = "elastic:";

struct ElasticOptions {
  std::string role = slurm::kWorkerRole;  ///< the service's role whose VMs are the Slurm nodes
  elastic::Limits limits;
  std::string slurm_conf;  ///< SLURM_CONF for scontrol/squeue; "" = Slurm's default
  Duration command_timeout{10000};
  /// No change starts after this much time (the unit's TimeoutStartSec is 50 s).
  Duration budget{25000};
  bool dry_run = false;
  std::string state_file = kElasticStateFile;
  /// Seconds since the epoch (STIME, Slurm's times); default: time(nullptr).
  std::function<long long()> now;
  /// Created by job_submit.lua at each submission (oneslurm-elastic.path starts a cycle while
  /// it exists); a cycle removes it as it starts, after the spacing.
  std::string kick_file = slurm::kElasticKickFile;
  /// A kicked cycle starts at least `spacing` after the last one (whose start time this file
  /// keeps): a burst of submissions costs one cycle per spacing, not one per job.
  std::string last_cycle_file = slurm::kElasticLastCycleFile;
  Duration spacing{5000};
  /// A kicked cycle waits up to this long (polling squeue each second) for the jobs Slurm has
  /// not evaluated yet (reason None) to get their reason: the new job is usually one of them.
  Duration settle{4000};
  /// Set by a caller that already ran ConsumeTheKick (`one-hpc elastic` does, before anything
  /// that can fail); unset: RunElastic runs it (unless dry_run).
  std::optional<bool> kicked;
};

/// A cycle a submission started (the kick file is there) waits until `spacing` has passed
/// since the last cycle began, then removes the kick: true for such a cycle. Every call records
/// its start in last_cycle_file. Trouble with either file is logged, never fatal. The command
/// runs it first: a kick left by a cycle that failed early would start the unit again at once,
/// over and over, until systemd's start limit stopped oneslurm-elastic.path for good.
bool ConsumeTheKick(const ElasticOptions& options, Clock& clock, Files& files,
                    const std::function<long long()>& now);

/// The last cycle's decision as `one-hpc status` shows it: one line per action, or why nothing
/// was decided, and the VMs of the role the cycle leaves to the operator. `since`: when the
/// first cycle that decided exactly these lines ran (seconds since the epoch).
struct ElasticDecisionRecord {
  std::vector<std::string> lines;
  long long since = 0;
};

/// What the cycle keeps between runs.
struct ElasticState {
  int consecutive_boot_failures = 0;
  std::set<int> registered_vms;  ///< VMs whose node was registered at the last cycle
  /// VM id -> when a cycle first saw it ACTIVE/RUNNING (its boot's age counts from there).
  std::map<int, long long> running_since;
  /// VM id -> when a cycle last saw its node registered (a node that left is no failed boot).
  std::map<int, long long> last_registered;
  std::set<std::string> told_jobs;  ///< jobs too large whose AdminComment says so
  /// Pending job id -> since when enough usable idle nodes have stood ready for it.
  std::map<std::string, long long> ready_since;
  ElasticDecisionRecord last_decision;
};
Result<ElasticState> LoadElasticState(const Files& files, const std::string& path);
Status SaveElasticState(Files& files, const std::string& path, const ElasticState& state);

/// One action as it went.
struct ElasticOutcome {
  elastic::Action action;
  bool done = false;  ///< carried out (false in a dry run, or when skipped or failed)
  std::string note;   ///< why it was not carried out, or what happened ("refused: ...")
  bool failed = false;
};

struct ElasticReport {
  std::string skipped;  ///< non-empty: nothing decided on purpose (OneGate failed, no role)
  elastic::Snapshot snapshot;
  std::vector<ElasticOutcome> outcomes;
  int onegate_requests = 0;
  int slurm_calls = 0;
  int failures() const;
};

/// The snapshot of one moment: the worker role of the service document (extended), the
/// registered Slurm nodes and the pending jobs. kInvalidInput when the document does not
/// carry the VMs' details (a compact view): the cycle must not act on a guess. `state` gives
/// the count of failed boots, when each VM was first seen running and last seen registered.
Result<elastic::Snapshot> BuildElasticSnapshot(const ServiceInfo& service, const std::string& role,
                                               const std::vector<slurm::SlurmNode>& nodes,
                                               const std::vector<slurm::PendingJob>& pending,
                                               long long now, const ElasticState& state);

/// One cycle. Returns an error only when Slurm's state cannot be read; OneGate trouble is a
/// skipped cycle; failed changes are in the report.
Result<ElasticReport> RunElastic(const ElasticOptions& options, OneGateClient& onegate,
                                 ProcessRunner& runner, Clock& clock, Files& files);

/// 0 for a cycle that ran (even skipped), 1 when Slurm could not be read or a change failed.
int ElasticExitCode(const Result<ElasticReport>& result);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_TIMERS_ELASTIC_CYCLE_H_
