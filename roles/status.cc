#include "roles/status.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "common/log.h"
#include "roles/configure.h"
#include "roles/dispatcher.h"
#include "roles/names.h"
#include "roles/ood/portal_web.h"
#include "roles/role_change.h"

namespace onehpc {
namespace {

constexpr char kConfigureUnit[] = "one-hpc-configure.service";
constexpr char kShownProperties[] =
    "--property=Id,ActiveState,SubState,Result,ExecMainStatus,LastTriggerUSec,"
    "NextElapseUSecRealtime";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What systemctl prints for "never" or "not scheduled".
std::string Timestamp(const std::string& value) {
  if (value.empty() || value == "n/a" || value == "0") return "";
  return value;
}

// `systemctl show` prints one block of KEY=VALUE lines per unit, blocks separated by a blank
// line, in the order asked.
std::vector<UnitStatus> ParseShow(const std::string& out) {
  std::vector<UnitStatus> units;
  UnitStatus current;
  bool any = false;
  auto flush = [&] {
    if (any && !current.unit.empty()) units.push_back(current);
    current = UnitStatus{};
    any = false;
  };
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) {
      flush();
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    any = true;
    if (key == "Id") current.unit = value;
    if (key == "ActiveState") current.active = value;
    if (key == "SubState") current.sub = value;
    if (key == "Result") current.result = value;
    if (key == "ExecMainStatus") current.exit_status = value;
    if (key == "LastTriggerUSec") current.last_run = Timestamp(value);
    if (key == "NextElapseUSecRealtime") current.next_run = Timestamp(value);
  }
  flush();
  return units;
}

// The last run, from kStatusFile (and the role, when no configure recorded one).
void ReadLastRun(const Files& files, StatusReport& report) {
  auto text = files.ReadIfExists(kStatusFile);
  if (!text) {
    report.last_run_problem = text.error().message;
    return;
  }
  if (!text->has_value()) return;
  auto j = nlohmann::json::parse(**text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    report.last_run_problem = std::string(kStatusFile) + " is not a JSON object";
    return;
  }
  StatusReport::LastRun last;
  last.result = j.value("result", "");
  last.exit_code = j.value("exit_code", 0);
  last.entry = j.value("entry", "");
  last.error = j.value("error", "");
  last.finished = j.value("finished", "");
  if (report.role.empty()) report.role = j.value("role", "");
  report.last_run = last;
}

// Elastic mode on (the configure enabled its timer): the last cycle's decision, from the
// cycle's state file (no request, no Slurm call: the cycle already made them).
void ReadElasticDecision(const std::vector<std::string>& enabled, const Files& files,
                         StatusReport& report) {
  if (std::find(enabled.begin(), enabled.end(), slurm::kElasticTimer) == enabled.end()) return;
  auto state = LoadElasticState(files, kElasticStateFile);
  if (!state) {
    report.elastic_problem = state.error().message;
  } else {
    report.elastic = state->last_decision;
  }
}

// one-hpc-configure.service, then what the last configure enabled; a timer brings its
// service (the result of the last run is the service's).
std::vector<std::string> ManagedUnits(const std::vector<std::string>& enabled) {
  std::vector<std::string> units{kConfigureUnit};
  auto add = [&](const std::string& unit) {
    if (std::find(units.begin(), units.end(), unit) == units.end()) units.push_back(unit);
  };
  for (const auto& unit : enabled) {
    add(unit);
    if (EndsWith(unit, ".timer")) add(unit.substr(0, unit.size() - 6) + ".service");
  }
  return units;
}

// READY and ERROR as OneGate has them for this VM: from the service document on a controller
// or a portal (the reconciler's cycle reads the same one), from the VM's own elsewhere.
void ReadOwnAttributes(const StatusInputs& inputs, OneGateClient& onegate, bool reconciles,
                       StatusReport& report) {
  auto take = [&](const VmInfo& vm) {
    report.onegate_read = true;
    if (auto it = vm.user_template.find(kAttrReady); it != vm.user_template.end()) {
      report.ready = it->second;
    }
    if (auto it = vm.user_template.find("ERROR"); it != vm.user_template.end()) {
      report.error = it->second;
    }
  };
  if (!reconciles) {
    auto vm = onegate.GetVm();
    if (!vm) {
      report.onegate_problem = vm.error().message;
    } else {
      take(*vm);
    }
    return;
  }
  auto service = onegate.GetService(true);
  if (!service) {
    report.onegate_problem = service.error().message;
    return;
  }
  bool found = false;
  for (const auto& role : service->roles) {
    for (const auto& node : role.nodes) {
      if (node.vm_id == inputs.own_vm_id && node.vm) {
        take(*node.vm);
        found = true;
      }
    }
  }
  if (!found) {
    report.onegate_problem =
        "this VM (" + std::to_string(inputs.own_vm_id) + ") is not in the service document";
  }
}

// One OneGate request: the VM's attributes and, on a controller or a portal, a dry run of the
// reconciler's cycle on the same document.
void ReadOneGate(const StatusInputs& inputs, ProcessRunner& runner, Clock& clock, bool reconciles,
                 StatusReport& report) {
  if (inputs.onegate == nullptr) {
    report.onegate_problem = inputs.onegate_why;
    if (reconciles && inputs.query_machine) {
      report.reconcile_problem = "no OneGate: " + inputs.onegate_why;
    }
    return;
  }
  OneGateClient& onegate = *inputs.onegate;
  OneGateClient::OneServiceRead one_read(onegate);
  const int before = onegate.requests_sent();
  ReadOwnAttributes(inputs, onegate, reconciles, report);
  if (reconciles && inputs.query_machine) {
    ReconcileOptions options = inputs.reconcile;
    options.dry_run = true;
    auto cycle = RunReconcile(options, onegate, runner, clock);
    if (!cycle) {
      report.reconcile_problem = cycle.error().message;
    } else {
      report.slurm_calls += cycle->slurm_calls;
      report.reconcile = std::move(*cycle);
    }
  }
  report.onegate_requests = onegate.requests_sent() - before;
}

void ReadUnits(const StatusInputs& inputs, const std::vector<std::string>& enabled,
               ProcessRunner& runner, StatusReport& report) {
  if (!inputs.query_machine) {
    report.units_problem = "not asked under --root (systemd is this machine's)";
    return;
  }
  Command show;
  show.argv = {"systemctl", "show", kShownProperties, "--"};
  for (const auto& unit : ManagedUnits(enabled)) show.argv.push_back(unit);
  show.timeout = Duration(10000);
  auto shown = RunChecked(runner, show);
  if (!shown) {
    report.units_problem = shown.error().message;
  } else {
    report.units = ParseShow(shown->out);
  }
}

}  // namespace

StatusReport CollectStatus(const StatusInputs& inputs, const Files& files, ProcessRunner& runner,
                           Clock& clock) {
  StatusReport report;
  std::vector<std::string> enabled;
  if (auto record = ReadRoleRecord(files); !record) {
    report.last_run_problem = record.error().message;
  } else if (record->has_value()) {
    report.role = (*record)->role;
    enabled = (*record)->units;
  }

  ReadLastRun(files, report);
  if (!report.role.empty()) {
    if (auto role = MakeRole(report.role)) report.service = role->Service();
  }
  ReadElasticDecision(enabled, files, report);
  if (report.role == ood::kPortalRole) {
    auto presence = ood::FindOpenOnDemand(files);
    report.open_ondemand = presence ? presence->Describe() : presence.error().message;
  }

  // Workers and storage VMs run no reconciler.
  const bool reconciles = report.role == slurm::kControllerRole || report.role == ood::kPortalRole;
  report.machine_queried = inputs.query_machine;
  ReadOneGate(inputs, runner, clock, reconciles, report);
  if (reconciles && !inputs.query_machine) {
    report.reconcile_problem = "not asked under --root (Slurm is this machine's)";
  }
  ReadUnits(inputs, enabled, runner, report);
  return report;
}

std::string ConfigureLogCommand(const std::string& entry) {
  // one-contextd collects a hook's output and writes it to the journal when the hook ends.
  if (entry == "one-context") return "journalctl -t one-contextd (written when the hook ends)";
  if (entry == "reconfigure") return "journalctl -u one-hpc-reconfigure.service";
  if (entry == "service") return "journalctl -u one-hpc-configure.service";
  return "the terminal it ran in (one-hpc configure by hand)";
}

namespace {

// Elastic mode's section of the status ("" when elastic mode is off).
std::string RenderElastic(const StatusReport& r) {
  if (!r.elastic && r.elastic_problem.empty()) return "";
  if (!r.elastic_problem.empty()) {
    return "\nelastic mode: the last cycle's decision not read: " + r.elastic_problem + "\n";
  }
  if (r.elastic->lines.empty()) return "\nelastic mode: no cycle has recorded a decision yet\n";
  std::string out = "\nelastic mode: the last cycle's decision, the same since " +
                    UtcTimestamp(static_cast<std::time_t>(r.elastic->since)) + ":\n";
  for (const auto& l : r.elastic->lines) out += "  " + l + "\n";
  return out;
}

}  // namespace

std::string RenderStatus(const StatusReport& r) {
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  line(fmt::format("role:            {}",
                   r.role.empty() ? "unknown (no configure has recorded one)"
                                  : r.role + (r.service.empty() ? "" : " (" + r.service + ")")));
  if (r.last_run) {
    const auto& l = *r.last_run;
    line(fmt::format("last configure:  {} (exit {}, entry {}){}", l.result, l.exit_code, l.entry,
                     l.finished.empty() ? "" : ", finished " + l.finished));
    if (!l.error.empty()) line("  error:         " + l.error);
    line("  its log:       " + ConfigureLogCommand(l.entry));
  } else {
    line("last configure:  none since boot" +
         (r.last_run_problem.empty() ? std::string() : " (" + r.last_run_problem + ")"));
  }
  if (r.onegate_read) {
    line(fmt::format("OneGate:         READY={} ERROR={}", r.ready.value_or("(not set)"),
                     r.error ? "'" + *r.error + "'" : std::string("(not set)")));
  } else {
    line("OneGate:         not read: " + r.onegate_problem);
  }
  if (!r.open_ondemand.empty()) line("Open OnDemand:   " + r.open_ondemand);
  for (const auto& w : r.warnings) line("warning:         " + w);
  line("");
  line("units:");
  if (!r.units_problem.empty()) line("  not read: " + r.units_problem);
  size_t width = 0;
  for (const auto& u : r.units) width = std::max(width, u.unit.size());
  for (const auto& u : r.units) {
    std::string text = fmt::format("  {:<{}}  {}", u.unit, width,
                                   u.active + (u.sub.empty() ? "" : " (" + u.sub + ")"));
    if (!u.result.empty()) text += ", last result " + u.result;
    if (EndsWith(u.unit, ".service") && !u.exit_status.empty() && u.exit_status != "0") {
      text += " (exit " + u.exit_status + ")";
    }
    if (!u.last_run.empty()) text += ", last run " + u.last_run;
    if (!u.next_run.empty()) text += ", next run " + u.next_run;
    if (u.Failed()) text += "   <- FAILED";
    line(text);
  }
  if (r.reconcile || !r.reconcile_problem.empty()) {
    line("");
    line("Slurm nodes, as the reconciler sees them (dry run):");
    if (!r.reconcile_problem.empty()) line("  not read: " + r.reconcile_problem);
    if (r.reconcile) {
      const auto& c = *r.reconcile;
      if (!c.skipped.empty()) line("  the reconciler would change nothing: " + c.skipped);
      size_t node_w = 4, state_w = 5, vm_w = 2;
      for (const auto& d : c.decisions) {
        node_w = std::max(node_w, d.node.size());
        state_w = std::max(state_w, d.state.size());
        vm_w = std::max(vm_w, d.vm.size());
      }
      if (!c.decisions.empty()) {
        line(fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}", "NODE", node_w, "STATE", state_w, "VM",
                         vm_w, "RECONCILER"));
      }
      for (const auto& d : c.decisions) {
        line(fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}: {}", d.node, node_w, d.state, state_w,
                         d.vm.empty() ? "-" : d.vm, vm_w, ReconcileVerb(d.action), d.reason));
      }
    }
  }
  out += RenderElastic(r);
  line("");
  line(fmt::format("cost: {} OneGate request{}, {} Slurm call{}", r.onegate_requests,
                   r.onegate_requests == 1 ? "" : "s", r.slurm_calls,
                   r.slurm_calls == 1 ? "" : "s"));
  return out;
}

nlohmann::json StatusJson(const StatusReport& r) {
  nlohmann::json j;
  j["role"] = r.role;
  j["service"] = r.service;
  if (r.last_run) {
    j["last_configure"] = {
        {"result", r.last_run->result},     {"exit_code", r.last_run->exit_code},
        {"entry", r.last_run->entry},       {"error", r.last_run->error},
        {"finished", r.last_run->finished}, {"log", ConfigureLogCommand(r.last_run->entry)}};
  } else {
    j["last_configure"] = nullptr;
  }
  j["onegate"] = {{"read", r.onegate_read},
                  {"problem", r.onegate_problem},
                  {kAttrReady, r.ready ? nlohmann::json(*r.ready) : nlohmann::json(nullptr)},
                  {"ERROR", r.error ? nlohmann::json(*r.error) : nlohmann::json(nullptr)}};
  j["units"] = nlohmann::json::array();
  for (const auto& u : r.units) {
    j["units"].push_back({{"unit", u.unit},
                          {"active", u.active},
                          {"sub", u.sub},
                          {"result", u.result},
                          {"exit_status", u.exit_status},
                          {"last_run", u.last_run},
                          {"next_run", u.next_run},
                          {"failed", u.Failed()}});
  }
  j["units_problem"] = r.units_problem;
  if (!r.open_ondemand.empty()) j["open_ondemand"] = r.open_ondemand;
  j["warnings"] = r.warnings;
  if (r.reconcile) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& d : r.reconcile->decisions) {
      nodes.push_back({{"node", d.node},
                       {"state", d.state},
                       {"vm", d.vm},
                       {"action", ReconcileVerb(d.action)},
                       {"reason", d.reason}});
    }
    j["reconciler"] = {{"skipped", r.reconcile->skipped}, {"nodes", nodes}};
  } else {
    j["reconciler"] = nullptr;
  }
  j["reconciler_problem"] = r.reconcile_problem;
  if (r.elastic) {
    j["elastic"] = {
        {"decision", r.elastic->lines},
        {"since", r.elastic->lines.empty() ? nlohmann::json(nullptr)
                                           : nlohmann::json(UtcTimestamp(r.elastic->since))}};
  } else {
    j["elastic"] = nullptr;
  }
  j["elastic_problem"] = r.elastic_problem;
  j["cost"] = {{"onegate_requests", r.onegate_requests}, {"slurm_calls", r.slurm_calls}};
  j["exit_code"] = StatusExitCode(r);
  return j;
}

int StatusExitCode(const StatusReport& r) {
  if (!r.last_run || r.last_run->exit_code != 0) return 1;
  for (const auto& u : r.units) {
    if (u.Failed()) return 1;
  }
  // Under --root nothing of the machine is asked: that is not a problem of the VM.
  if (r.machine_queried && (!r.units_problem.empty() || !r.reconcile_problem.empty())) return 1;
  return 0;
}

}  // namespace onehpc
