// Elastic mode, the decision of one cycle: from what Slurm and OneFlow show at one
// moment, what the controller does. Pure: no I/O, no clock; the cycle that reads the state
// (one GET /service, `scontrol -o show nodes`, `squeue` for the pending jobs) and carries the
// actions out (PUT /service/role/<role>, `scontrol update`, POST /vms/<id>/action) is built on
// it. Every action carries the reason that goes into its log line.
//
// The rules (their actions come out in this order: boot-failure terminations, jobs too large,
// resumes, the grow or a wait, health replacements, then the shrink's terminations and drains):
//  1. Boot failures: a VM of the worker role that has not registered in Slurm `boot_seconds`
//     after it started running (the cycle's first sight of it ACTIVE/RUNNING: a VM pending,
//     held or being deployed is not late) is terminated (it counts as one failed boot). A VM
//     whose node registered before and left (a reboot: self-drain deletes the node at every
//     shutdown) is never a failed boot: it is waited for `reregister_seconds`, then replaced
//     without counting. Once
//     `boot_failure_limit` boots in a row failed, the cycle stops replacing and growing and
//     says so (the ERROR the operator sees); a node that registers resets the count (the
//     caller keeps it).
//  2. Grow: jobs that pend for a reason more nodes would cure (Resources, Priority, Nodes...,
//     ReqNodeNotAvail, NodeDown, not Dependency, holds or limits; and PartitionConfig or
//     PartitionNodeLimit, what Slurm 22.05 says of a job asking more nodes than are
//     registered, only then) need their node counts;
//     what the idle nodes, the booting VMs and our own idle-drained nodes (resumed first) do
//     not cover is asked of OneFlow, at most `max_step` nodes a cycle and never beyond
//     `max_nodes`. A job that asks for more than `max_nodes` could never run: it is reported,
//     not counted. When the service is not RUNNING (SCALING, COOLDOWN) the cycle waits. A job
//     that pends for Resources while enough usable idle nodes have stood ready for it for
//     `unservable_seconds` asks something no new node of this kind has (memory, a feature, a
//     GPU): it is no longer counted, so it neither grows the role nor keeps it from shrinking.
//     A job array counts each pending task (squeue -r).
//  3. Shrink, never while jobs wait for nodes: a node idle for `idle_seconds` is drained with
//     the reason kElasticIdleReason, the longest idle first, never below `min_nodes`; a node
//     so drained that is idle (no job got onto it between the drain and now) is terminated,
//     exactly that VM; one that got a job waits for it.
//  4. Health: a node drained by its health check (reason kHealthReasonPrefix...) for
//     `unhealthy_seconds` and without jobs is terminated; the grow rule brings a new one when
//     jobs need it or the role is below its minimum.
#ifndef ONEHPC_ROLES_SLURM_ELASTIC_H_
#define ONEHPC_ROLES_SLURM_ELASTIC_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "roles/slurm/nodes.h"

namespace onehpc::elastic {

/// The drain reason of an idle node (how the controller knows its own drains).
inline constexpr const char* kElasticIdleReason = "one-hpc elastic: idle";
/// The drain reasons of the workers' health check start with this.
inline constexpr const char* kHealthReasonPrefix = "one-hpc health:";

struct Limits {
  int min_nodes = 0;  ///< the role's min_vms
  int max_nodes = 1;  ///< the role's max_vms (at most ONEAPP_SLURM_MAX_NODES)
  int max_step = 4;   ///< nodes asked for in one cycle at most
  int64_t idle_seconds = 600;
  int64_t unhealthy_seconds = 300;
  int64_t boot_seconds = 900;
  int boot_failure_limit = 3;
  int64_t reregister_seconds = 3600;  ///< a node that left Slurm (a reboot) may take this long
  /// A job that pends for Resources while enough usable idle nodes have stood ready for it
  /// this long asks something no new node of this kind has: it is no longer counted.
  int64_t unservable_seconds = 600;
};

/// A job of `squeue -t PENDING` (id, reason, nodes).
using PendingJob = slurm::PendingJob;

/// A VM of the worker role (from OneFlow's nodes[]) with its Slurm node, if registered.
struct Worker {
  int vm_id = -1;
  int64_t vm_age_seconds = 0;        ///< since a cycle first saw the VM running (0 before)
  bool registered_before = false;    ///< unregistered now, but its node registered earlier
  int64_t unregistered_seconds = 0;  ///< registered_before: since it was last seen registered
  std::string node;                  ///< its Slurm node name; "" while not registered
  std::string base_state;            ///< IDLE, ALLOCATED, MIXED, DOWN... ("" when not registered)
  bool drain = false;                ///< State has DRAIN
  bool not_responding = false;
  int jobs = 0;                    ///< jobs running on it
  std::string reason;              ///< Slurm's reason, without the [user@time] suffix
  int64_t reason_age_seconds = 0;  ///< since the reason was set
  int64_t idle_for_seconds = 0;    ///< since its last job ended (IDLE only)
};

struct Snapshot {
  int cardinality = 0;  ///< the role's cardinality (OneFlow's target)
  /// VMs in the role's nodes[] that do not run: on their way out (shutting down, DONE),
  /// parked (POWEROFF, STOPPED, SUSPENDED, UNDEPLOYED) or lost (UNKNOWN: its host does not
  /// answer). Not workers (no capacity), not failed boots (never terminated: the operator's),
  /// and not VMs still to be created either.
  int leaving_vms = 0;
  bool service_running = true;  ///< service state RUNNING: a scale request can be accepted
  /// When it is not: why OneFlow refuses to scale now and what, if anything, the operator must
  /// do (WARNING: which VMs keep the service there).
  std::string not_running_why = "the service is scaling or cooling down, asked again next cycle";
  int consecutive_boot_failures = 0;
  std::vector<Worker> workers;
  std::vector<PendingJob> pending;
  /// Job id -> seconds that enough usable idle nodes have stood ready for it (the cycle keeps
  /// the time); a job absent has not had them.
  std::map<std::string, int64_t> ready_seconds;
};

struct Action {
  enum class Kind {
    kGrow,           ///< PUT /service/role/<role> {"cardinality": target}
    kResume,         ///< scontrol update nodename=<node> state=resume (our idle drain)
    kDrain,          ///< scontrol update nodename=<node> state=drain reason=<reason>
    kTerminate,      ///< POST /vms/<vm_id>/action terminate
    kJobTooLarge,    ///< a job asks for more nodes than the maximum: reported
    kWait,           ///< something is wanted but cannot be asked now (cooldown)
    kStopReplacing,  ///< too many failed boots in a row: no more replacing, ERROR
  };
  Kind kind = Kind::kWait;
  int target = 0;  ///< kGrow: the new cardinality
  int vm_id = -1;  ///< kTerminate
  std::string node;
  std::string job;  ///< kJobTooLarge
  std::string reason;
};

/// "grow", "resume", "drain", "terminate", "job-too-large", "wait", "stop-replacing".
const char* ActionVerb(Action::Kind kind);

/// True for a pending reason that more nodes would cure.
bool MoreNodesWouldHelp(const std::string& pending_reason);

/// Registered nodes that could take a job now: IDLE, not drained, responding, no job.
int UsableIdleNodes(const Snapshot& snapshot);

/// The actions of one cycle, in the order they are to be carried out.
std::vector<Action> Decide(const Limits& limits, const Snapshot& snapshot);

}  // namespace onehpc::elastic

#endif  // ONEHPC_ROLES_SLURM_ELASTIC_H_
