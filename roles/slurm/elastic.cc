#include "roles/slurm/elastic.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <string_view>

namespace onehpc::elastic {
namespace {

bool IsUsableIdle(const Worker& w) {
  return !w.node.empty() && w.base_state == "IDLE" && !w.drain && !w.not_responding && w.jobs == 0;
}

bool IsOurIdleDrain(const Worker& w) {
  return !w.node.empty() && w.drain && w.reason == kElasticIdleReason;
}

Action Make(Action::Kind kind, std::string reason) {
  Action a;
  a.kind = kind;
  a.reason = std::move(reason);
  return a;
}

// Rule 1: a VM that never registered within boot_seconds of running is a failed boot; one
// whose node left Slurm (a reboot) is waited for reregister_seconds, then replaced without
// counting. Returns how many VMs are still booting (or rebooting).
int BootFailures(const Limits& limits, const Snapshot& s, int& failures, bool& stopped,
                 int& leaving, std::vector<Action>& out) {
  int booting = 0;
  for (const auto& w : s.workers) {
    if (!w.node.empty()) continue;
    const bool rebooting = w.registered_before;
    const int64_t waited = rebooting ? w.unregistered_seconds : w.vm_age_seconds;
    if (waited < (rebooting ? limits.reregister_seconds : limits.boot_seconds)) {
      ++booting;
      continue;
    }
    if (stopped) continue;  // left for the operator to look at
    Action a = Make(Action::Kind::kTerminate, "");
    if (rebooting) {
      a.reason = fmt::format(
          "VM {} left Slurm {} s ago and has not registered again (a node before: not a failed "
          "boot)",
          w.vm_id, waited);
    } else {
      ++failures;
      a.reason = fmt::format(
          "VM {} has not registered in Slurm {} s after it started running (failed boot {} in a "
          "row, limit {})",
          w.vm_id, waited, failures, limits.boot_failure_limit);
    }
    a.vm_id = w.vm_id;
    out.push_back(std::move(a));
    ++leaving;
    if (failures >= limits.boot_failure_limit) stopped = true;
  }
  return booting;
}

// The nodes the pending jobs need that more nodes of this kind would give them; their ids in
// `waiting`; a job too large reported in `out`, one that idle nodes could not serve logged.
int Demand(const Limits& limits, const Snapshot& s, std::vector<std::string>& waiting,
           std::vector<Action>& out) {
  int demand = 0;
  std::vector<std::string> unservable;
  const int registered = static_cast<int>(std::count_if(
      s.workers.begin(), s.workers.end(), [](const Worker& w) { return !w.node.empty(); }));
  for (const auto& job : s.pending) {
    if (!MoreNodesWouldHelp(job.reason)) {
      // Slurm 22.05 says PartitionConfig, or PartitionNodeLimit (seen by the scale test, and
      // kept), when a job asks for more nodes than the partition has (dynamic nodes do not
      // exist before they register); with no more nodes than that, the job asks something of
      // each node that no worker has, or more than a partition's MaxNodes: more of them would
      // not help.
      const bool partition_too_small =
          job.reason.starts_with("PartitionConfig") || job.reason.starts_with("PartitionNodeLimit");
      if (!partition_too_small || job.nodes <= registered) continue;
    }
    if (job.nodes > limits.max_nodes) {
      Action a = Make(Action::Kind::kJobTooLarge,
                      fmt::format("job {} asks for {} nodes; the service has at most {} "
                                  "(max_vms): it can never run here",
                                  job.id, job.nodes, limits.max_nodes));
      a.job = job.id;
      out.push_back(std::move(a));
      continue;
    }
    auto ready = s.ready_seconds.find(job.id);
    if (job.reason.starts_with("Resources") && ready != s.ready_seconds.end() &&
        ready->second >= limits.unservable_seconds) {
      unservable.push_back(job.id);
      continue;
    }
    demand += job.nodes;
    waiting.push_back(job.id);
  }
  if (!unservable.empty()) {
    out.push_back(Make(Action::Kind::kWait,
                       fmt::format("job(s) {} pend for Resources although enough idle nodes have "
                                   "stood ready for them for {} s or more: they ask something "
                                   "no new node of this kind has, and are not counted",
                                   fmt::join(unservable, ","), limits.unservable_seconds)));
  }
  return demand;
}

}  // namespace

int UsableIdleNodes(const Snapshot& s) {
  return static_cast<int>(std::count_if(s.workers.begin(), s.workers.end(), IsUsableIdle));
}

const char* ActionVerb(Action::Kind kind) {
  switch (kind) {
    case Action::Kind::kGrow:
      return "grow";
    case Action::Kind::kResume:
      return "resume";
    case Action::Kind::kDrain:
      return "drain";
    case Action::Kind::kTerminate:
      return "terminate";
    case Action::Kind::kJobTooLarge:
      return "job-too-large";
    case Action::Kind::kWait:
      return "wait";
    case Action::Kind::kStopReplacing:
      return "stop-replacing";
  }
  return "?";
}

bool MoreNodesWouldHelp(const std::string& reason) {
  // Slurm's reasons for a job that waits for nodes (job_reason_string): not enough free
  // nodes, nodes it asked for busy or down, or a higher-priority job waiting for them. squeue
  // of 22.05 joins a reason's words with '_', 24.11's with spaces ("Nodes required for job are
  // DOWN, DRAINED or reserved for jobs in higher priority partitions", seen): both are read.
  static constexpr std::array<std::string_view, 5> kHelped = {
      "Resources", "Priority", "Nodes_required_for_job_are_DOWN", "ReqNodeNotAvail", "NodeDown"};
  std::string words = reason;
  std::replace(words.begin(), words.end(), ' ', '_');
  for (auto r : kHelped) {
    if (words.starts_with(r)) return true;
  }
  return false;
}

namespace {

// 4. health: a node that stays unhealthy is replaced (decided before the grow, which counts it
// gone; carried out after it). Returns how many go.
int ReplaceUnhealthy(const Limits& limits, const Snapshot& s, bool stopped,
                     std::vector<Action>& later) {
  int leaving = 0;
  for (const auto& w : s.workers) {
    if (stopped || w.node.empty() || !w.drain || w.jobs > 0) continue;
    if (!w.reason.starts_with(kHealthReasonPrefix)) continue;
    if (w.reason_age_seconds < limits.unhealthy_seconds) continue;
    Action a = Make(Action::Kind::kTerminate, fmt::format("{} unhealthy for {} s ({}): replaced",
                                                          w.node, w.reason_age_seconds, w.reason));
    a.vm_id = w.vm_id;
    a.node = w.node;
    later.push_back(std::move(a));
    ++leaving;
  }
  return leaving;
}

// What the grow works from: the demand and what already meets it.
struct GrowInputs {
  int demand = 0;
  std::vector<std::string> waiting;  // the jobs that wait for nodes
  int booting = 0;
  int leaving = 0;  // VMs this cycle terminates
  bool stopped = false;
};

// 2. grow: our idle-drained nodes taken back first, then the role's cardinality raised for the
// jobs that wait, or back to the minimum.
void Grow(const Limits& limits, const Snapshot& s, const GrowInputs& in, std::vector<Action>& out) {
  const int total = static_cast<int>(s.workers.size());
  const int idle = UsableIdleNodes(s);
  int to_come = std::max(0, s.cardinality - total - s.leaving_vms);  // OneFlow still creates these
  int shortfall = in.demand - idle - in.booting - to_come;
  // Below the minimum (an unhealthy node replaced, a failed boot terminated): grow back to it.
  const int present = total - in.leaving + to_come;
  const int below_min = std::max(0, limits.min_nodes - present);
  for (const auto& w : s.workers) {
    if (shortfall <= 0) break;
    if (!IsOurIdleDrain(w) || w.not_responding) continue;
    Action a = Make(Action::Kind::kResume,
                    fmt::format("{} job(s) wait for nodes: {} is taken back instead of a new VM",
                                in.waiting.size(), w.node));
    a.node = w.node;
    out.push_back(std::move(a));
    --shortfall;
  }
  const bool for_jobs = shortfall > 0;
  shortfall = std::max(shortfall, below_min);
  if (shortfall <= 0 || in.stopped) return;
  // Not minus this cycle's terminations: OneFlow's watchdog lowers the cardinality by one
  // for each terminated VM once it is DONE, so the new cardinality counts them still.
  int current = std::max(s.cardinality, total);
  int target = std::min(limits.max_nodes, current + std::min(limits.max_step, shortfall));
  std::string why =
      for_jobs
          ? fmt::format(
                "{} job(s) ({}) wait for {} node(s); {} idle, {} booting, {} to be "
                "created",
                in.waiting.size(), fmt::join(in.waiting, ","), in.demand, idle, in.booting, to_come)
          : fmt::format("{} worker VM(s) stay, below the minimum of {}", present, limits.min_nodes);
  if (target <= current) {
    out.push_back(
        Make(Action::Kind::kWait,
             why + fmt::format(": the role is at its maximum ({} VMs)", limits.max_nodes)));
  } else if (!s.service_running) {
    out.push_back(Make(Action::Kind::kWait, why + ": " + s.not_running_why));
  } else {
    Action a = Make(Action::Kind::kGrow, why);
    a.target = target;
    out.push_back(std::move(a));
  }
}

// 3. shrink (never while jobs wait for nodes): our drained nodes that stayed idle go, and
// nodes idle for too long are drained, down to the minimum.
void Shrink(const Limits& limits, const Snapshot& s, int leaving, std::vector<Action>& later) {
  int staying = static_cast<int>(s.workers.size()) - leaving;
  for (const auto& w : s.workers) {
    if (!IsOurIdleDrain(w)) continue;
    if (w.jobs > 0 || w.base_state != "IDLE" || w.not_responding) continue;  // wait for it
    if (staying <= limits.min_nodes) break;
    Action a = Make(Action::Kind::kTerminate,
                    fmt::format("{} drained for idleness and still idle: its VM goes", w.node));
    a.vm_id = w.vm_id;
    a.node = w.node;
    later.push_back(std::move(a));
    --staying;
  }
  // Nodes already drained by us that keep a job still count as staying until they go.
  std::vector<const Worker*> idle_long;
  for (const auto& w : s.workers) {
    if (IsUsableIdle(w) && w.idle_for_seconds >= limits.idle_seconds) idle_long.push_back(&w);
  }
  std::stable_sort(idle_long.begin(), idle_long.end(), [](const Worker* a, const Worker* b) {
    return a->idle_for_seconds > b->idle_for_seconds;
  });
  int draining =
      static_cast<int>(std::count_if(s.workers.begin(), s.workers.end(), [](const Worker& w) {
        return IsOurIdleDrain(w) && (w.jobs > 0 || w.base_state != "IDLE");
      }));
  int may_drain = staying - draining - limits.min_nodes;
  for (const Worker* w : idle_long) {
    if (may_drain <= 0) break;
    Action a = Make(Action::Kind::kDrain, fmt::format("{} idle for {} s (limit {} s)", w->node,
                                                      w->idle_for_seconds, limits.idle_seconds));
    a.node = w->node;
    later.push_back(std::move(a));
    --may_drain;
  }
}

}  // namespace

std::vector<Action> Decide(const Limits& limits, const Snapshot& s) {
  std::vector<Action> out;
  std::vector<Action> later;  // terminations and drains of the shrink, after the grow
  int failures = s.consecutive_boot_failures;
  GrowInputs in;
  in.stopped = failures >= limits.boot_failure_limit;

  // ---- 1. boot failures
  in.booting = BootFailures(limits, s, failures, in.stopped, in.leaving, out);
  if (in.stopped) {
    out.push_back(Make(Action::Kind::kStopReplacing,
                       fmt::format("{} worker boots in a row never registered in Slurm: no more "
                                   "growing or replacing until a worker registers (see a "
                                   "worker's journal: journalctl -u one-hpc-configure)",
                                   failures)));
  }
  in.leaving += ReplaceUnhealthy(limits, s, in.stopped, later);
  in.demand = Demand(limits, s, in.waiting, out);
  Grow(limits, s, in, out);
  if (in.demand == 0) Shrink(limits, s, in.leaving, later);
  out.insert(out.end(), later.begin(), later.end());
  return out;
}

}  // namespace onehpc::elastic
