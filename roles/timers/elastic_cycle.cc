#include "roles/timers/elastic_cycle.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "roles/names.h"
#include "roles/published.h"
#include "roles/slurm/slurm_client.h"

namespace onehpc {
namespace {

using elastic::Action;
using Kind = elastic::Action::Kind;

// OpenNebula VM states (STATE / LCM_STATE) of a VM that is not running and not on its way to
// run: on its way out of the role (DONE, shutting down), or parked by the operator (POWEROFF,
// STOPPED, SUSPENDED, UNDEPLOYED). Such a VM is neither a worker nor a failed boot: the cycle
// never terminates it (an operator's powered-off worker is the operator's).
constexpr int kLcmRunning = 3;
bool Running(const VmInfo& vm) { return vm.state == kVmStateActive && vm.lcm_state == kLcmRunning; }
bool Leaving(const VmInfo& vm) {
  switch (vm.state) {
    case 4:  // STOPPED
    case 5:  // SUSPENDED
    case 6:  // DONE
    case 8:  // POWEROFF
    case 9:  // UNDEPLOYED
      return true;
    default:
      break;
  }
  if (vm.state != kVmStateActive) return false;
  switch (vm.lcm_state) {
    case 11:  // EPILOG
    case 12:  // SHUTDOWN
    case 15:  // CLEANUP_RESUBMIT
    case 18:  // SHUTDOWN_POWEROFF
    case 23:  // SHUTDOWN_UNDEPLOY
    case 24:  // EPILOG_UNDEPLOY
    case 16:  // UNKNOWN: its host does not answer (crashed, cut off); the operator's to recover
      return true;
    default:
      return false;
  }
}

// The state of a VM the operator parked or lost (POWEROFF, STOPPED, SUSPENDED, UNDEPLOYED,
// UNKNOWN); "" for any other (running, booting, or on its way out after a terminate).
std::string ParkedState(const VmInfo& vm) {
  switch (vm.state) {
    case 4:
      return "STOPPED";
    case 5:
      return "SUSPENDED";
    case 8:
      return "POWEROFF";
    case 9:
      return "UNDEPLOYED";
    default:
      break;
  }
  return vm.state == kVmStateActive && vm.lcm_state == 16 ? "UNKNOWN" : "";
}

// Why OneFlow does not scale a service in `state` (oneflow.md section 5; OneFlow's
// ServiceLCM#scale_action accepts RUNNING only). In WARNING, which VMs keep it there: one VM of
// any role powered off or lost stops every scale-up until the operator resumes or terminates
// it; the cycle does neither (the VM and what it holds are the operator's).
std::string NotRunningWhy(const ServiceInfo& service) {
  constexpr int kWarning = 4, kScaling = 8, kCooldown = 10;
  if (service.state == kScaling || service.state == kCooldown) {
    return "the service is scaling or cooling down, asked again next cycle";
  }
  if (service.state != kWarning) {
    return "the service is in state " + std::to_string(service.state) +
           ", not RUNNING: OneFlow scales it only when it runs, asked again next cycle";
  }
  std::vector<std::string> stuck;
  for (const auto& role : service.roles) {
    for (const auto& node : role.nodes) {
      if (!node.vm) continue;
      const VmInfo& vm = *node.vm;
      if (vm.state == 8) {
        stuck.push_back("VM " + std::to_string(node.vm_id) + " (" + role.name + ") is POWEROFF");
      } else if (vm.state == kVmStateActive && (vm.lcm_state == 16 || vm.lcm_state >= 36)) {
        stuck.push_back("VM " + std::to_string(node.vm_id) + " (" + role.name +
                        ") is in LCM state " + std::to_string(vm.lcm_state) +
                        (vm.lcm_state == 16 ? " (UNKNOWN)" : " (a failure)"));
      }
    }
  }
  std::string list;
  for (const auto& s : stuck) list += (list.empty() ? "" : ", ") + s;
  return "the service is in WARNING, and OneFlow scales it only when it is RUNNING" +
         (list.empty() ? std::string() : ": " + list) +
         "; the operator resumes (onevm resume) or terminates (onevm terminate) such a VM, "
         "one-hpc does neither; asked again next cycle";
}

// A worker that registered since the last cycle ends a run of failed boots. When each VM of the
// role was first seen running and last seen registered; VMs that left the role are forgotten.
void RememberVms(const ServiceRole& role, const std::set<int>& registered_now, long long now,
                 const std::string& pfx, ElasticState& state) {
  for (int vm : registered_now) {
    if (!state.registered_vms.count(vm) && state.consecutive_boot_failures > 0) {
      log::Info("{}VM {} registered in Slurm: the count of failed boots in a row ({}) starts again",
                pfx, vm, state.consecutive_boot_failures);
      state.consecutive_boot_failures = 0;
      break;
    }
  }
  std::set<int> in_role;
  for (const auto& node : role.nodes) {
    in_role.insert(node.vm_id);
    if (node.vm && Running(*node.vm)) state.running_since.emplace(node.vm_id, now);
  }
  for (int vm : registered_now) state.last_registered[vm] = now;
  for (auto* times : {&state.running_since, &state.last_registered}) {
    std::erase_if(*times, [&](const auto& entry) { return !in_role.count(entry.first); });
  }
}

std::string Trimmed(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

long long Since(long long now, std::optional<long long> then) {
  if (!then || *then <= 0 || *then > now) return 0;
  return now - *then;
}

bool HasJobs(const slurm::SlurmNode& n) {
  const std::string base = n.BaseState();
  return base == "ALLOCATED" || base == "MIXED" || base == "COMPLETING" || n.HasFlag("COMPLETING");
}

std::string Describe(const Action& a, const std::string& role) {
  switch (a.kind) {
    case Kind::kGrow:
      return fmt::format("grow role {} to {} VMs: {}", role, a.target, a.reason);
    case Kind::kResume:
    case Kind::kDrain:
      return fmt::format("{} {}: {}", elastic::ActionVerb(a.kind), a.node, a.reason);
    case Kind::kTerminate:
      return fmt::format("terminate VM {}{}: {}", a.vm_id,
                         a.node.empty() ? "" : " (" + a.node + ")", a.reason);
    case Kind::kJobTooLarge:
      return fmt::format("job {} too large: {}", a.job, a.reason);
    case Kind::kWait:
    case Kind::kStopReplacing:
      return fmt::format("{}: {}", elastic::ActionVerb(a.kind), a.reason);
  }
  return a.reason;
}

// The lines `one-hpc status` shows for a cycle that decided: each action as it went (or that
// nothing changes), then the role's parked or lost VMs, which the cycle leaves alone.
std::vector<std::string> DecisionLines(const ElasticReport& report, const ServiceRole& role,
                                       size_t registered) {
  std::vector<std::string> lines;
  for (const auto& o : report.outcomes) {
    std::string line = Describe(o.action, role.name);
    if (o.failed) {
      line += " -- FAILED: " + o.note;
    } else if (!o.note.empty()) {
      line += " (" + o.note + ")";
    }
    lines.push_back(std::move(line));
  }
  if (lines.empty()) {
    lines.push_back(fmt::format("no change: {} worker VM(s), {} registered, {} pending job(s)",
                                report.snapshot.workers.size(), registered,
                                report.snapshot.pending.size()));
  }
  std::vector<std::string> parked;
  for (const auto& node : role.nodes) {
    const std::string state = node.vm ? ParkedState(*node.vm) : "";
    if (!state.empty()) parked.push_back(fmt::format("VM {} is {}", node.vm_id, state));
  }
  if (!parked.empty()) {
    lines.push_back(fmt::format(
        "not counted as capacity and never terminated by the cycle: {}; the operator resumes "
        "(onevm resume) or terminates (onevm terminate) it",
        fmt::join(parked, ", ")));
  }
  return lines;
}

// The ERROR of this VM, as the service document shows it (no extra request).
std::optional<std::string> OwnError(const ServiceInfo& service, const std::string& vmid) {
  for (const auto& r : service.roles) {
    for (const auto& n : r.nodes) {
      if (!n.vm || std::to_string(n.vm_id) != vmid) continue;
      if (auto it = n.vm->user_template.find("ERROR"); it != n.vm->user_template.end()) {
        return it->second;
      }
    }
  }
  return std::nullopt;
}

// Our ERROR goes once replacing is allowed again (a worker registered, or the count was
// reset); an ERROR that is not ours (a failed configure) is left alone.
void EraseOwnError(OneGateClient& onegate, Files& files, const std::optional<std::string>& error,
                   const std::string& pfx) {
  if (!error || !error->starts_with(kElasticErrorPrefix)) return;
  if (auto e = EraseRecorded(onegate, files, "ERROR"); !e) {
    log::Warn("{}could not erase its ERROR: {}", pfx, e.error().message);
  } else {
    log::Info("{}ERROR erased: workers register again", pfx);
  }
}

void RecordDecision(ElasticState& state, std::vector<std::string> lines, long long now) {
  if (lines == state.last_decision.lines && state.last_decision.since > 0) return;
  state.last_decision.lines = std::move(lines);
  state.last_decision.since = now;
}

}  // namespace

int ElasticReport::failures() const {
  int n = 0;
  for (const auto& o : outcomes) n += o.failed ? 1 : 0;
  return n;
}

Result<ElasticState> LoadElasticState(const Files& files, const std::string& path) {
  auto text = files.ReadIfExists(path);
  if (!text) return Fail(text.error());
  ElasticState state;
  if (!*text) return state;
  auto j = nlohmann::json::parse(**text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    // A state file we cannot read starts the counts again: it only holds counters.
    log::Warn("elastic: {} is not valid JSON: starting with empty counters", path);
    return state;
  }
  if (auto it = j.find("consecutive_boot_failures"); it != j.end() && it->is_number_integer()) {
    state.consecutive_boot_failures = std::max(0, it->get<int>());
  }
  if (auto it = j.find("registered_vms"); it != j.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_number_integer()) state.registered_vms.insert(v.get<int>());
    }
  }
  for (auto [key, times] : {std::pair{"running_since", &state.running_since},
                            std::pair{"last_registered", &state.last_registered}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_object()) continue;
    for (const auto& [vm, when] : it->items()) {
      char* end = nullptr;
      const long id = std::strtol(vm.c_str(), &end, 10);
      if (end != vm.c_str() && *end == '\0' && id >= 0 && when.is_number_integer()) {
        (*times)[static_cast<int>(id)] = when.get<long long>();
      }
    }
  }
  if (auto it = j.find("told_jobs"); it != j.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_string()) state.told_jobs.insert(v.get<std::string>());
    }
  }
  if (auto it = j.find("ready_since"); it != j.end() && it->is_object()) {
    for (const auto& [job, when] : it->items()) {
      if (when.is_number_integer()) state.ready_since[job] = when.get<long long>();
    }
  }
  if (auto it = j.find("last_decision"); it != j.end() && it->is_object()) {
    if (auto since = it->find("since"); since != it->end() && since->is_number_integer()) {
      state.last_decision.since = since->get<long long>();
    }
    if (auto lines = it->find("lines"); lines != it->end() && lines->is_array()) {
      for (const auto& l : *lines) {
        if (l.is_string()) state.last_decision.lines.push_back(l.get<std::string>());
      }
    }
  }
  return state;
}

Status SaveElasticState(Files& files, const std::string& path, const ElasticState& state) {
  auto by_vm = [](const std::map<int, long long>& times) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [vm, when] : times) o[std::to_string(vm)] = when;
    return o;
  };
  nlohmann::json j = {
      {"consecutive_boot_failures", state.consecutive_boot_failures},
      {"registered_vms", state.registered_vms},
      {"running_since", by_vm(state.running_since)},
      {"last_registered", by_vm(state.last_registered)},
      {"told_jobs", state.told_jobs},
      {"ready_since", state.ready_since},
      {"last_decision",
       {{"lines", state.last_decision.lines}, {"since", state.last_decision.since}}}};
  std::string text = j.dump(2) + "\n";
  auto same = files.ReadIfExists(path);
  if (same && *same && **same == text) return Ok();
  return files.WriteAtomic(path, text, 0600);
}

bool ConsumeTheKick(const ElasticOptions& options, Clock& clock, Files& files,
                    const std::function<long long()>& now) {
  const bool kicked = files.Exists(options.kick_file);
  auto last = kicked ? files.ReadIfExists(options.last_cycle_file)
                     : Result<std::optional<std::string>>(std::nullopt);
  if (last && *last) {
    const long long then = std::strtoll((*last)->c_str(), nullptr, 10);
    const long long since = now() - then;
    const long long spacing_s = (options.spacing.count() + 999) / 1000;
    if (then > 0 && since >= 0 && since < spacing_s) {
      log::Info("elastic: the last cycle began {} s ago; starting in {} s", since,
                spacing_s - since);
      clock.SleepFor(Duration((spacing_s - since) * 1000));
    }
  }
  if (kicked) {
    if (auto s = files.Remove(options.kick_file); !s) {
      log::Warn("elastic: cannot remove {}: {}", options.kick_file, s.error().message);
    }
  }
  if (auto s = files.WriteAtomic(options.last_cycle_file, std::to_string(now()) + "\n", 0644); !s) {
    log::Warn("elastic: cannot record this cycle's start: {}", s.error().message);
  }
  return kicked;
}

namespace {

// The snapshot with how long enough usable idle nodes have stood ready for each pending job
// (state.ready_since keeps when that began, for the pending jobs only).
elastic::Snapshot WithReadyJobs(elastic::Snapshot s, long long now, ElasticState& state) {
  const int idle = elastic::UsableIdleNodes(s);
  std::map<std::string, long long> ready;
  for (const auto& job : s.pending) {
    if (job.nodes > idle) continue;
    auto it = state.ready_since.find(job.id);
    ready[job.id] = it == state.ready_since.end() ? now : it->second;
    s.ready_seconds[job.id] = std::max(0LL, now - ready[job.id]);
  }
  state.ready_since = std::move(ready);
  return s;
}

// The caller's answer (it ran ConsumeTheKick), else the kick consumed here; never in a dry run.
bool IsKicked(const ElasticOptions& options, Clock& clock, Files& files,
              const std::function<long long()>& now) {
  if (options.kicked) return *options.kicked;
  return !options.dry_run && ConsumeTheKick(options, clock, files, now);
}

// A job just submitted pends with reason None until slurmctld's scheduler looks at it (about a
// second, up to its batch_sched_delay): polls squeue each second, up to `settle`, until no
// pending job has reason None, so that the cycle counts what the new jobs wait for. Logs the
// first pending jobs as it last saw them (what the submission's cycle decides on).
void WaitForNewJobsEvaluated(slurm::SlurmClient& client, Clock& clock, Duration settle) {
  const TimePoint begin = clock.Now();
  for (;;) {
    auto pending = client.PendingJobs();
    if (!pending) return;  // the cycle reads them again and reports the failure
    const auto unevaluated =
        std::count_if(pending->begin(), pending->end(),
                      [](const slurm::PendingJob& j) { return j.reason == "None"; });
    if (unevaluated == 0) {
      std::vector<std::string> seen;
      for (const auto& j : *pending) {
        if (seen.size() == 5) break;
        seen.push_back(fmt::format("{} ({} node(s), {})", j.id, j.nodes, j.reason));
      }
      log::Info("elastic: {} pending job(s){}{}", pending->size(), seen.empty() ? "" : ": ",
                fmt::join(seen, ", "));
      return;
    }
    if (clock.Now() - begin + Duration(1000) > settle) {
      log::Info("elastic: {} pending job(s) still without a reason after {} ms; counted next cycle",
                unevaluated, settle.count());
      return;
    }
    clock.SleepFor(Duration(1000));
  }
}

// Exit codes lie: reads the drains and resumes of this cycle back once; one that did not take
// becomes a failure.
void VerifyNodeChanges(slurm::SlurmClient& client, ElasticReport& report, const std::string& pfx) {
  auto after = client.ShowNodes();
  if (!after) {
    log::Warn("{}cannot verify the changes: {}", pfx, after.error().message);
    return;
  }
  std::map<std::string, const slurm::SlurmNode*> by_name;
  for (const auto& n : *after) by_name[n.name] = &n;
  for (auto& o : report.outcomes) {
    if (!o.done) continue;
    auto found = by_name.find(o.action.node);
    if (found == by_name.end()) continue;
    const bool drained = found->second->IsDrain();
    if ((o.action.kind == Kind::kDrain && !drained) ||
        (o.action.kind == Kind::kResume && drained)) {
      o.done = false;
      o.failed = true;
      o.note = "scontrol reported success but the node is " + found->second->state;
      log::Error("{}{} {}: {}", pfx, elastic::ActionVerb(o.action.kind), o.action.node, o.note);
    }
  }
}

// The job id of a job array's task (`123_4` -> `123`); any other id as it is. A job array's
// tasks are told (AdminComment) once, through the array: jobid=<array id> updates every task,
// and one task's id would split it off the array.
std::string ArrayJobId(const std::string& id) { return id.substr(0, id.find('_')); }

// The Slurm node whose NodeAddr is one of the VM's NIC addresses, if any.
const slurm::SlurmNode* NodeAtAnAddressOf(const VmInfo& vm,
                                          const std::vector<slurm::SlurmNode>& nodes) {
  for (const auto& n : nodes) {
    if (n.addr.empty()) continue;
    for (const auto& nic : vm.nics) {
      if (nic.ip == n.addr) return &n;
    }
  }
  return nullptr;
}

// Read as "not published", a malformed name would make a busy worker a failed boot; a name
// published twice would tie two VMs to one node. `vm_of_name` collects the names seen.
Status CheckPublishedName(int vm_id, const VmInfo& vm, std::map<std::string, int>& vm_of_name) {
  if (vm.non_text_attrs.count(slurm::kAttrNodeName)) {
    return Fail(ErrorKind::kInvalidInput,
                "VM " + std::to_string(vm_id) + " has a " + slurm::kAttrNodeName +
                    " that is not text (an array or an object): the cycle cannot tell its node");
  }
  std::string name = Trimmed(vm.Attr(slurm::kAttrNodeName));
  if (name.empty()) return Ok();
  auto [it, fresh] = vm_of_name.emplace(name, vm_id);
  if (fresh) return Ok();
  return Fail(ErrorKind::kInvalidInput, "VMs " + std::to_string(it->second) + " and " +
                                            std::to_string(vm_id) + " both publish " +
                                            slurm::kAttrNodeName + "=" + name +
                                            ": the cycle cannot tell which VM is that node");
}

}  // namespace

Result<elastic::Snapshot> BuildElasticSnapshot(const ServiceInfo& service, const std::string& role,
                                               const std::vector<slurm::SlurmNode>& nodes,
                                               const std::vector<slurm::PendingJob>& pending,
                                               long long now, const ElasticState& state) {
  const ServiceRole* r = service.FindRole(role);
  if (r == nullptr) {
    return Fail(ErrorKind::kInvalidInput, "the service has no role '" + role + "'");
  }
  std::map<std::string, const slurm::SlurmNode*> by_name;
  for (const auto& n : nodes) by_name[n.name] = &n;

  elastic::Snapshot s;
  s.cardinality = r->cardinality;
  s.service_running = service.state == 2;  // RUNNING: OneFlow accepts a scale request
  if (!s.service_running) s.not_running_why = NotRunningWhy(service);
  s.consecutive_boot_failures = state.consecutive_boot_failures;
  s.pending = pending;
  std::map<std::string, int> vm_of_name;
  for (const auto& node : r->nodes) {
    if (!node.vm || !node.vm->has_user_template) {
      return Fail(ErrorKind::kInvalidInput,
                  "OneGate listed VM " + std::to_string(node.vm_id) + " of role '" + role +
                      "' without its details: the cycle cannot tell its state");
    }
    const VmInfo& vm = *node.vm;
    if (auto s = CheckPublishedName(node.vm_id, vm, vm_of_name); !s) return Fail(s.error());
    if (Leaving(vm)) {
      ++s.leaving_vms;
      continue;
    }
    elastic::Worker w;
    w.vm_id = node.vm_id;
    // A boot's age counts from the cycle's first sight of the VM running, not from its
    // creation (STIME): a VM pending, held or being deployed is not late.
    auto since = state.running_since.find(node.vm_id);
    w.vm_age_seconds = since == state.running_since.end() ? 0 : Since(now, since->second);
    std::string name = Trimmed(vm.Attr(slurm::kAttrNodeName));
    auto found = name.empty() ? by_name.end() : by_name.find(name);
    if (found != by_name.end()) {
      const slurm::SlurmNode& n = *found->second;
      w.node = n.name;
      w.base_state = n.BaseState();
      w.drain = n.IsDrain();
      w.not_responding = n.IsNotResponding();
      w.jobs = HasJobs(n) ? 1 : 0;
      w.reason = n.reason;
      w.reason_age_seconds = Since(now, n.reason_since);
      if (w.base_state == "IDLE") w.idle_for_seconds = Since(now, n.last_busy);
    } else if (auto last = state.last_registered.find(node.vm_id);
               last != state.last_registered.end()) {
      w.registered_before = true;
      w.unregistered_seconds = Since(now, last->second);
    } else if (const slurm::SlurmNode* at = NodeAtAnAddressOf(vm, nodes)) {
      // Unpublished (or published under another name) but in Slurm: never a failed boot.
      return Fail(ErrorKind::kInvalidInput,
                  "VM " + std::to_string(node.vm_id) + " publishes " +
                      (name.empty() ? "no " + std::string(slurm::kAttrNodeName)
                                    : std::string(slurm::kAttrNodeName) + "=" + name) +
                      " but Slurm node " + at->name + " has its address " + at->addr +
                      ": the cycle cannot tell whether that VM is booting");
    }
    s.workers.push_back(std::move(w));
  }
  return s;
}

namespace {

// What one cycle acts with: its options and adapters, its state and its report.
struct Cycle {
  const ElasticOptions& options;
  OneGateClient& onegate;
  slurm::SlurmClient& client;
  Clock& clock;
  Files& files;
  ElasticState& state;
  ElasticReport& report;
  const std::string& pfx;
  TimePoint start;
  std::optional<std::string> own_error;
  bool stop_replacing = false;
  bool node_changes = false;
};

// The VMs of the role registered in Slurm now (a worker that registered since the last cycle
// ends a run of failed boots); an error message when the document cannot be trusted.
Result<std::set<int>> RegisteredNow(const ServiceInfo& service, const std::string& role,
                                    const std::vector<slurm::SlurmNode>& nodes,
                                    const std::vector<slurm::PendingJob>& pending, long long now) {
  auto probe = BuildElasticSnapshot(service, role, nodes, pending, now, ElasticState{});
  if (!probe) return Fail(probe.error());
  std::set<int> registered;
  for (const auto& w : probe->workers) {
    if (!w.node.empty()) registered.insert(w.vm_id);
  }
  return registered;
}

// An action that is not carried out this cycle (a wait, a job already told, a dry run, the time
// budget used up): its outcome is complete and true is returned.
bool NotCarriedOut(Cycle& c, const Action& a, const std::string& what, ElasticOutcome& o) {
  if (a.kind == Kind::kWait) {
    log::Info("{}{}", c.pfx, what);
  } else if (a.kind == Kind::kJobTooLarge && c.state.told_jobs.count(ArrayJobId(a.job))) {
    o.note = "its AdminComment already says so";
    log::Info("{}{} ({})", c.pfx, what, o.note);
  } else if (c.options.dry_run) {
    log::Info("{}would {}", c.pfx, what);
  } else if (c.clock.Now() - c.start > c.options.budget) {
    o.note = fmt::format("left for the next cycle: the time budget of {} ms is used up",
                         c.options.budget.count());
    log::Warn("{}{}: {}", c.pfx, what, o.note);
  } else {
    return false;
  }
  return true;
}

Status Grow(Cycle& c, const Action& a, ElasticOutcome& o) {
  Status result = c.onegate.ScaleRole(c.options.role, a.target);
  if (!result && c.onegate.last_failure().status == 400) {
    // OneFlow refuses during SCALING and COOLDOWN, outside min_vms/max_vms, or when the
    // cardinality is already N: not a failure of this cycle.
    o.note =
        "OneFlow refused (400: scaling, cooldown, or outside the role's min_vms/"
        "max_vms): asked again next cycle";
    log::Warn("{}grow role {} to {}: {}", c.pfx, c.options.role, a.target, o.note);
    return Ok();
  }
  return result;
}

Status Terminate(Cycle& c, const Action& a, ElasticOutcome& o) {
  if (!a.node.empty()) {
    // Read the node again: a job may have landed between the drain and now.
    auto n = c.client.ShowNode(a.node);
    if (!n) return Fail(n.error().WithContext("reading " + a.node + " before its terminate"));
    if (*n && (HasJobs(**n) || !(*n)->IsDrain())) {
      o.note = fmt::format("not terminated: {} is {} now (a job got onto it, or it was resumed)",
                           a.node, (*n)->state);
      log::Info("{}terminate VM {}: {}", c.pfx, a.vm_id, o.note);
      return Ok();
    }
  }
  Status result = c.onegate.TerminateVm(a.vm_id);
  if (result && a.node.empty()) ++c.state.consecutive_boot_failures;
  return result;
}

Status StopReplacing(Cycle& c, const Action& a, ElasticOutcome& o) {
  std::string error = std::string(kElasticErrorPrefix) + " " + a.reason;
  if (!OneGateValueProblem(error).empty()) {
    error = std::string(kElasticErrorPrefix) +
            " worker boots keep failing: growing and replacing stopped";
  }
  if (c.own_error && *c.own_error == error) {
    o.note = "ERROR already published";
    return Ok();
  }
  return PublishRecorded(c.onegate, c.files, "ERROR", error);  // configure erases it too
}

// Carries out one action; a note in `o` says why it did nothing (then it is not done).
Status Perform(Cycle& c, const Action& a, ElasticOutcome& o) {
  switch (a.kind) {
    case Kind::kGrow:
      return Grow(c, a, o);
    case Kind::kResume:
    case Kind::kDrain: {
      c.node_changes = true;
      auto r = c.client.SetState(
          a.node,
          a.kind == Kind::kDrain ? slurm::NodeStateChange::kDrain : slurm::NodeStateChange::kResume,
          elastic::kElasticIdleReason);
      if (!r) return Fail(r.error());
      return Ok();
    }
    case Kind::kTerminate:
      return Terminate(c, a, o);
    case Kind::kJobTooLarge: {
      Status result =
          c.client.SetJobAdminComment(ArrayJobId(a.job), "one-hpc elastic: " + a.reason);
      if (result) c.state.told_jobs.insert(ArrayJobId(a.job));
      return result;
    }
    case Kind::kStopReplacing:
      return StopReplacing(c, a, o);
    case Kind::kWait:
      break;
  }
  return Ok();
}

void ApplyActions(Cycle& c, const std::vector<Action>& actions) {
  for (const Action& a : actions) {
    ElasticOutcome o;
    o.action = a;
    const std::string what = Describe(a, c.options.role);
    if (a.kind == Kind::kStopReplacing) c.stop_replacing = true;
    if (!NotCarriedOut(c, a, what, o)) {
      log::Info("{}{}", c.pfx, what);
      Status result = Perform(c, a, o);
      if (!result) {
        o.failed = true;
        o.note = result.error().message;
        log::Error("{}{} -- FAILED: {}", c.pfx, what, o.note);
      } else {
        o.done = o.note.empty();
      }
    }
    c.report.outcomes.push_back(std::move(o));
  }
}

// After the actions of a cycle that is not a dry run: the ERROR of a former stop erased, the
// node changes read back, what the state remembers brought up to date.
void WrapUp(Cycle& c, const ServiceInfo& service, const std::set<int>& registered_now,
            const std::vector<slurm::PendingJob>& pending, long long now) {
  if (!c.stop_replacing) EraseOwnError(c.onegate, c.files, c.own_error, c.pfx);
  if (c.node_changes && c.clock.Now() - c.start <= c.options.budget + Duration(10000)) {
    VerifyNodeChanges(c.client, c.report, c.pfx);
  }
  c.state.registered_vms = registered_now;
  std::set<std::string> pending_ids;
  for (const auto& j : pending) pending_ids.insert(ArrayJobId(j.id));
  std::set<std::string> still;
  for (const auto& id : c.state.told_jobs) {
    if (pending_ids.count(id)) still.insert(id);
  }
  c.state.told_jobs = std::move(still);
  RecordDecision(c.state,
                 DecisionLines(c.report, *service.FindRole(c.options.role), registered_now.size()),
                 now);
}

}  // namespace

Result<ElasticReport> RunElastic(const ElasticOptions& options, OneGateClient& onegate,
                                 ProcessRunner& runner, Clock& clock, Files& files) {
  const std::function<long long()> epoch =
      options.now ? options.now : [] { return static_cast<long long>(std::time(nullptr)); };
  const bool kicked = IsKicked(options, clock, files, epoch);
  const TimePoint start = clock.Now();
  const long long now = epoch();
  ElasticReport report;
  const std::string pfx = options.dry_run ? "elastic (dry run): " : "elastic: ";
  auto state = LoadElasticState(files, options.state_file);
  if (!state) return Fail(state.error().WithContext("elastic: reading its state"));
  auto save = [&]() {
    if (auto s = SaveElasticState(files, options.state_file, *state); !s) {
      log::Warn("{}could not save its state: {}", pfx, s.error().message);
    }
  };
  auto skip = [&](std::string why) {
    report.skipped = std::move(why);
    log::Warn("{}no change this cycle: {}", pfx, report.skipped);
    if (!options.dry_run) {
      RecordDecision(*state, {"no change this cycle: " + report.skipped}, now);
      save();
    }
    return report;
  };

  slurm::SlurmClientOptions client_options;
  client_options.slurm_conf = options.slurm_conf;
  client_options.timeout = options.command_timeout;
  slurm::SlurmClient client(runner, client_options);
  if (kicked) WaitForNewJobsEvaluated(client, clock, options.settle);

  const int requests_before = onegate.requests_sent();
  auto service = onegate.GetService(true);
  report.onegate_requests = onegate.requests_sent() - requests_before;
  if (!service) {
    return skip("OneGate GET /service?extended=true failed: " + service.error().message);
  }
  auto finish = [&]() {
    report.slurm_calls = client.calls();
    report.onegate_requests = onegate.requests_sent() - requests_before;
  };
  auto nodes = client.ShowNodes();
  auto pending = nodes ? client.PendingJobs() : Result<std::vector<slurm::PendingJob>>{};
  if (!nodes || !pending) {
    finish();
    if (!nodes) return Fail(nodes.error().WithContext("elastic: reading the Slurm nodes"));
    return Fail(pending.error().WithContext("elastic: reading the pending jobs"));
  }
  auto registered_now = RegisteredNow(*service, options.role, *nodes, *pending, now);
  if (registered_now) {
    RememberVms(*service->FindRole(options.role), *registered_now, now, pfx, *state);
  }
  auto snapshot = registered_now
                      ? BuildElasticSnapshot(*service, options.role, *nodes, *pending, now, *state)
                      : Result<elastic::Snapshot>(Fail(registered_now.error()));
  if (!snapshot) {
    finish();
    return skip(snapshot.error().message);
  }
  report.snapshot = WithReadyJobs(*snapshot, now, *state);

  Cycle cycle{options, onegate, client, clock, files,
              *state,  report,  pfx,    start, OwnError(*service, onegate.vmid())};
  ApplyActions(cycle, elastic::Decide(options.limits, report.snapshot));
  if (!options.dry_run) {
    WrapUp(cycle, *service, *registered_now, *pending, now);
    save();
  }
  finish();
  int done = 0;
  for (const auto& o : report.outcomes) done += o.done ? 1 : 0;
  log::Info(
      "{}{} worker VMs ({} registered, cardinality {}), {} pending job(s): {} action(s), {} "
      "done, {} failed ({} OneGate request(s), {} Slurm calls)",
      pfx, report.snapshot.workers.size(), registered_now->size(), report.snapshot.cardinality,
      pending->size(), report.outcomes.size(), done, report.failures(), report.onegate_requests,
      report.slurm_calls);
  return report;
}

int ElasticExitCode(const Result<ElasticReport>& result) {
  if (!result) return 1;
  return result->failures() > 0 ? 1 : 0;
}

}  // namespace onehpc
