#include "roles/timers/reconcile.h"

#include <map>

#include "common/log.h"
#include "roles/host/address.h"
#include "roles/names.h"
#include "roles/slurm/slurm_client.h"

namespace onehpc {
namespace {

using Action = ReconcileDecision::Action;

std::string JoinIds(const std::vector<std::string>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 10; ++i) out += (i ? "," : "") + ids[i];
  if (ids.size() > 10) out += ",...";
  return out;
}

}  // namespace

const char* ReconcileVerb(Action action) {
  switch (action) {
    case Action::kKeepPublished:
      return "keep";
    case Action::kKeepResponding:
      return "keep";
    case Action::kKeepDrained:
      return "keep";
    case Action::kDelete:
      return "delete";
    case Action::kDrain:
      return "drain";
    case Action::kSkipped:
      return "skip";
  }
  return "?";
}

namespace {

void LogDecision(const ReconcileDecision& d, bool dry_run) {
  std::string verb = ReconcileVerb(d.action);
  if (dry_run && (d.action == Action::kDelete || d.action == Action::kDrain)) {
    verb = "would " + verb;
  }
  std::string line = "reconcile: " + verb + " " + d.node + ": " + d.reason;
  if (!d.ok) {
    log::Error("{} -- FAILED: {}", line, d.error);
  } else if (d.action == Action::kKeepPublished) {
    log::Debug("{}", line);
  } else {
    log::Info("{}", line);
  }
}

}  // namespace

int ReconcileReport::Count(Action action) const {
  int n = 0;
  for (const auto& d : decisions) n += d.action == action ? 1 : 0;
  return n;
}

int ReconcileReport::Done(Action action) const {
  int n = 0;
  for (const auto& d : decisions) n += d.action == action && d.ok ? 1 : 0;
  return n;
}

int ReconcileReport::failures() const {
  int n = 0;
  for (const auto& d : decisions) n += d.ok ? 0 : 1;
  return n;
}

ReconcileDecision DecideNode(const slurm::SlurmNode& node, const std::set<std::string>& published,
                             const std::vector<std::string>& jobs) {
  ReconcileDecision d;
  d.node = node.name;
  d.state = node.state;
  if (published.count(node.name)) {
    d.action = Action::kKeepPublished;
    d.reason = "published by a VM of the service (State=" + node.state + ")";
    return d;
  }
  if (!node.IsDown() && !node.IsNotResponding()) {
    d.action = Action::kKeepResponding;
    d.reason =
        "no VM of the service publishes it, but Slurm sees it responding (State=" + node.state +
        ")";
    return d;
  }
  if (!slurm::IsValidNodeName(node.name)) {
    d.action = Action::kSkipped;
    d.reason = "refusing to pass this node name to scontrol";
    return d;
  }
  std::string why = "no VM of the service publishes it and State=" + node.state;
  if (!jobs.empty()) {
    if (node.IsDrain() && node.reason == slurm::kReconcileDrainReason) {
      d.action = Action::kKeepDrained;
      d.reason = why + "; already drained, jobs " + JoinIds(jobs) +
                 " still hold it: deleted once they end";
      return d;
    }
    d.action = Action::kDrain;
    d.reason = why + ", but jobs " + JoinIds(jobs) + " still hold it: drain with reason '" +
               slurm::kReconcileDrainReason + "'";
    return d;
  }
  d.action = Action::kDelete;
  d.reason = why + " and no job holds it";
  return d;
}

namespace {
std::set<std::string> NamesOf(const std::map<std::string, std::string>& publishers) {
  std::set<std::string> names;
  for (const auto& [name, vm] : publishers) names.insert(name);
  return names;
}
}  // namespace

Result<std::set<std::string>> PublishedNodeNames(const ServiceInfo& service) {
  auto publishers = NodePublishers(service);
  if (!publishers) return Fail(publishers.error());
  return NamesOf(*publishers);
}

Result<std::map<std::string, std::string>> NodePublishers(const ServiceInfo& service) {
  std::map<std::string, std::string> names;
  for (const auto& role : service.roles) {
    for (const auto& node : role.nodes) {
      if (!node.vm) {
        return Fail(ErrorKind::kInvalidInput,
                    "OneGate listed VM " + std::to_string(node.vm_id) + " of role '" + role.name +
                        "' without its details (not an extended view?): cannot tell whether it "
                        "publishes a node name");
      }
      // An answer not understood changes nothing: read as "not published", it would delete
      // that VM's node.
      if (!node.vm->has_user_template) {
        return Fail(ErrorKind::kInvalidInput,
                    "OneGate listed VM " + std::to_string(node.vm_id) + " of role '" + role.name +
                        "' without a USER_TEMPLATE: cannot tell whether it publishes a node name");
      }
      if (node.vm->non_text_attrs.count(slurm::kAttrNodeName)) {
        return Fail(ErrorKind::kInvalidInput,
                    "VM " + std::to_string(node.vm_id) + " of role '" + role.name + "' has a " +
                        slurm::kAttrNodeName +
                        " that is not text (an array or an object): cannot tell its node name");
      }
      std::string name = node.vm->Attr(slurm::kAttrNodeName);
      size_t b = name.find_first_not_of(" \t\r\n");
      if (b == std::string::npos) continue;
      name = name.substr(b, name.find_last_not_of(" \t\r\n") - b + 1);
      const std::string& vm_name = node.vm_name.empty() ? node.vm->name : node.vm_name;
      names.emplace(
          name, "VM " + std::to_string(node.vm_id) + (vm_name.empty() ? "" : " (" + vm_name + ")"));
    }
  }
  return names;
}

std::map<std::string, std::set<std::string>> NodeNicAddresses(const ServiceInfo& service) {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& role : service.roles) {
    for (const auto& node : role.nodes) {
      if (!node.vm) continue;
      std::string name = node.vm->Attr(slurm::kAttrNodeName);
      size_t b = name.find_first_not_of(" \t\r\n");
      if (b == std::string::npos) continue;
      name = name.substr(b, name.find_last_not_of(" \t\r\n") - b + 1);
      auto& ips = out[name];
      for (const auto& nic : node.vm->nics) {
        if (host::ParseIpv4(nic.ip)) ips.insert(nic.ip);
      }
    }
  }
  return out;
}

host::HostEntries WorkerHostEntries(const std::vector<slurm::SlurmNode>& nodes,
                                    const std::map<std::string, std::set<std::string>>& nics) {
  std::map<std::string, std::string> by_name;
  for (const auto& node : nodes) {
    auto vm = nics.find(node.name);
    if (vm == nics.end() || !host::IsValidHostLabel(node.name)) continue;
    if (!vm->second.count(node.addr)) {
      log::Warn(
          "reconcile: {} is not put in {}: Slurm's NodeAddr {} is no address of the VM that "
          "publishes the name",
          node.name, "/etc/hosts", node.addr.empty() ? "(none)" : node.addr);
      continue;
    }
    by_name[node.name] = node.addr;
  }
  host::HostEntries entries;
  for (const auto& [name, addr] : by_name) entries.emplace_back(addr, name);
  return entries;
}

namespace {

// The workers' block of the hosts file: every registered node's name at its address.
void UpdateWorkerHosts(const ReconcileOptions& options, const std::vector<slurm::SlurmNode>& nodes,
                       const ServiceInfo& service, ReconcileReport& report) {
  if (options.files == nullptr) return;
  host::HostEntries entries = WorkerHostEntries(nodes, NodeNicAddresses(service));
  report.worker_hosts = static_cast<int>(entries.size());
  if (options.dry_run) return;
  auto written =
      host::UpdateHostsBlock(*options.files, options.hosts_file, entries, host::kWorkersBlock);
  if (!written) {
    log::Warn("reconcile: cannot update the workers' names in {}: {}", options.hosts_file,
              written.error().message);
  } else if (*written) {
    report.hosts_changed = true;
    log::Info("reconcile: {} now names {} worker(s)", options.hosts_file, entries.size());
  }
}

// Exit codes lie (traps 2 and 6): the changes are read back once for all of them.
void VerifyChanges(slurm::SlurmClient& client, ReconcileReport& report) {
  auto after = client.ShowNodes();
  if (!after) {
    log::Warn("reconcile: cannot verify the changes: {}", after.error().message);
    return;
  }
  std::map<std::string, const slurm::SlurmNode*> by_name;
  for (const auto& n : *after) by_name[n.name] = &n;
  for (auto& d : report.decisions) {
    if (!d.ok) continue;
    auto found = by_name.find(d.node);
    if (d.action == Action::kDelete && found != by_name.end()) {
      d.ok = false;
      d.error = "scontrol reported success but the node is still registered (State=" +
                found->second->state + ")";
      log::Error("reconcile: delete {}: {}", d.node, d.error);
    } else if (d.action == Action::kDrain && found != by_name.end() && !found->second->IsDrain()) {
      d.ok = false;
      d.error =
          "scontrol reported success but the node is not draining (State=" + found->second->state +
          ")";
      log::Error("reconcile: drain {}: {}", d.node, d.error);
    }
  }
}

// Each node decided and, unless the time budget is used up or this is a dry run, deleted or
// drained; true when something changed.
bool DecideAndAct(const ReconcileOptions& options, slurm::SlurmClient& client, Clock& clock,
                  TimePoint start, const std::vector<slurm::SlurmNode>& nodes,
                  const std::map<std::string, std::vector<std::string>>& jobs,
                  const std::map<std::string, std::string>& publishers,
                  const std::set<std::string>& published, ReconcileReport& report) {
  static const std::vector<std::string> kNoJobs;
  bool changed = false;
  for (const auto& node : nodes) {
    auto it = jobs.find(node.name);
    ReconcileDecision d = DecideNode(node, published, it == jobs.end() ? kNoJobs : it->second);
    if (auto vm = publishers.find(node.name); vm != publishers.end()) d.vm = vm->second;
    bool acts = d.action == Action::kDelete || d.action == Action::kDrain;
    if (acts && clock.Now() - start > options.budget) {
      d.action = Action::kSkipped;
      d.reason += "; left for the next cycle: the time budget of " +
                  std::to_string(options.budget.count()) + " ms is used up";
      acts = false;
    }
    if (acts && !options.dry_run) {
      Result<slurm::NodeChange> r = d.action == Action::kDelete
                                        ? client.DeleteNode(node.name)
                                        : client.SetState(node.name, slurm::NodeStateChange::kDrain,
                                                          slurm::kReconcileDrainReason);
      if (!r) {
        d.ok = false;
        d.error = r.error().message;
      } else {
        changed = true;
        if (*r == slurm::NodeChange::kAlreadyGone) d.reason += " (it was already gone)";
      }
    }
    LogDecision(d, options.dry_run);
    report.decisions.push_back(std::move(d));
  }
  return changed;
}

}  // namespace

Result<ReconcileReport> RunReconcile(const ReconcileOptions& options, OneGateClient& onegate,
                                     ProcessRunner& runner, Clock& clock) {
  const TimePoint start = clock.Now();
  ReconcileReport report;
  auto skip = [&](std::string why) {
    report.skipped = std::move(why);
    log::Warn("reconcile: no change this cycle: {}", report.skipped);
    return report;
  };

  const int requests_before = onegate.requests_sent();
  auto service = onegate.GetService(true);
  report.onegate_requests = onegate.requests_sent() - requests_before;
  if (!service) {
    return skip("OneGate GET /service?extended=true failed: " + service.error().message);
  }
  auto publishers = NodePublishers(*service);
  if (!publishers) return skip(publishers.error().message);
  const std::set<std::string> published = NamesOf(*publishers);
  report.published_names = static_cast<int>(published.size());
  if (published.empty()) {
    return skip("no VM of the service has published " + std::string(slurm::kAttrNodeName) + " yet");
  }

  slurm::SlurmClientOptions client_options;
  client_options.slurm_conf = options.slurm_conf;
  client_options.timeout = options.command_timeout;
  slurm::SlurmClient client(runner, client_options);
  auto finish = [&]() { report.slurm_calls = client.calls(); };

  auto nodes = client.ShowNodes();
  if (!nodes) {
    finish();
    return Fail(nodes.error().WithContext("reconcile: reading the Slurm nodes"));
  }
  auto jobs = client.ActiveJobsByNode();
  if (!jobs) {
    finish();
    return Fail(jobs.error().WithContext("reconcile: reading the running jobs"));
  }
  UpdateWorkerHosts(options, *nodes, *service, report);

  const bool changed =
      DecideAndAct(options, client, clock, start, *nodes, *jobs, *publishers, published, report);
  if (changed && clock.Now() - start > options.budget + Duration(10000)) {
    log::Warn("reconcile: no time left to verify the changes; the next cycle reads them back");
  } else if (changed) {
    VerifyChanges(client, report);
  }
  finish();
  log::Info(
      "reconcile: {} Slurm nodes, {} names published in OneGate: {} deleted, {} drained, "
      "{} left alone, {} failed ({} OneGate request(s), {} Slurm calls)",
      nodes->size(), report.published_names, report.Done(Action::kDelete),
      report.Done(Action::kDrain),
      report.Count(Action::kKeepPublished) + report.Count(Action::kKeepResponding) +
          report.Count(Action::kKeepDrained) + report.Count(Action::kSkipped),
      report.failures(), report.onegate_requests, report.slurm_calls);
  return report;
}

int ReconcileExitCode(const Result<ReconcileReport>& result) {
  if (!result) return 1;
  return result->failures() > 0 ? 1 : 0;
}

}  // namespace onehpc
