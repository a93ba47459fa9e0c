#include "roles/timers/health.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "common/log.h"
#include "roles/role_change.h"
#include "roles/slurm/slurm_client.h"
#include "roles/timers/self_drain.h"

namespace onehpc {
namespace {

constexpr char kHealthPrefix[] = "one-hpc health:";

std::string OneLine(std::string text, size_t max = 120) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  if (text.size() > max) text = text.substr(0, max - 3) + "...";
  return text;
}

Result<ProcessResult> Run(ProcessRunner& runner, std::vector<std::string> argv, Duration timeout,
                          std::string stdin_data = "") {
  Command c;
  c.argv = std::move(argv);
  c.timeout = timeout;
  c.stdin_data = std::move(stdin_data);
  return runner.Run(c);
}

std::string Failure(const Result<ProcessResult>& r) {
  if (!r) return r.error().message;
  if (r->timed_out) return "no answer within the timeout";
  std::string err = r->err.empty() ? r->out : r->err;
  return fmt::format("exit {}: {}", r->exit_code, OneLine(err));
}

HealthCheck Munge(const HealthOptions& o, ProcessRunner& runner) {
  HealthCheck c{"munge", true, ""};
  auto cred = Run(runner, {"munge", "-n"}, o.command_timeout);
  if (!cred || cred->exit_code != 0) {
    c.ok = false;
    c.detail = "munge -n failed (" + Failure(cred) + ")";
    return c;
  }
  auto decoded = Run(runner, {"unmunge"}, o.command_timeout, cred->out);
  if (!decoded || decoded->exit_code != 0) {
    c.ok = false;
    c.detail = "unmunge refused a fresh credential (" + Failure(decoded) + ")";
  }
  return c;
}

// The mount points of /proc/self/mountinfo (field 5), octal escapes decoded.
std::vector<std::string> MountPoints(const Files& files) {
  std::vector<std::string> out;
  auto text = files.ReadIfExists("/proc/self/mountinfo");
  if (!text || !*text) return out;
  std::istringstream in(**text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string w;
    int n = 0;
    while (n < 5 && words >> w) ++n;
    if (n < 5) continue;
    std::string decoded;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == '\\' && i + 3 < w.size()) {  // \040 is a space
        decoded += static_cast<char>(std::strtol(w.substr(i + 1, 3).c_str(), nullptr, 8));
        i += 3;
      } else {
        decoded += w[i];
      }
    }
    out.push_back(decoded);
  }
  return out;
}

HealthCheck Mounts(const HealthOptions& o, const Files& files) {
  HealthCheck c{"mounts", true, ""};
  if (o.required_mounts.empty()) return c;
  auto points = MountPoints(files);
  for (const auto& m : o.required_mounts) {
    if (std::find(points.begin(), points.end(), m) == points.end()) {
      c.ok = false;
      c.detail = m + " is not mounted";
      return c;
    }
  }
  return c;
}

HealthCheck Disk(const HealthOptions& o, ProcessRunner& runner) {
  HealthCheck c{"disk", true, ""};
  for (const auto& path : o.disk_paths) {
    // Blocks, free blocks for root ("%b %f"): what df's Use% is made of.
    auto r = Run(runner, {"stat", "-f", "-c", "%b %f", path}, o.command_timeout);
    if (!r || r->exit_code != 0) {
      if (r && !r->timed_out && r->err.find("No such file") != std::string::npos) continue;
      c.ok = false;
      c.detail = "stat -f " + path + " failed (" + Failure(r) + ")";
      return c;
    }
    std::istringstream in(r->out);
    long long blocks = 0, free_blocks = 0;
    if (!(in >> blocks >> free_blocks) || blocks <= 0) continue;
    const long long used = (blocks - free_blocks) * 100 / blocks;
    if (used >= o.max_used_percent) {
      c.ok = false;
      c.detail = fmt::format("{} is {}% full (limit {}%)", path, used, o.max_used_percent);
      return c;
    }
  }
  return c;
}

HealthCheck Gpus(const HealthOptions& o, ProcessRunner& runner, const std::string& gres) {
  HealthCheck c{"gpus", true, ""};
  if (gres.rfind("gpu", 0) != 0 && gres.find(",gpu") == std::string::npos) return c;
  auto r = Run(runner, {"nvidia-smi", "-L"}, o.command_timeout);
  if (!r || r->exit_code != 0) {
    c.ok = false;
    c.detail = "the node has " + gres + " but nvidia-smi -L fails (" + Failure(r) + ")";
  }
  return c;
}

}  // namespace

bool HealthReport::healthy() const {
  for (const auto& c : checks) {
    if (!c.ok) return false;
  }
  return true;
}

std::string HealthReport::DrainReason() const {
  for (const auto& c : checks) {
    if (!c.ok) return OneLine(fmt::format("{} {}: {}", kHealthPrefix, c.name, c.detail), 200);
  }
  return "";
}

HealthOptions HealthOptionsForThisVm(const Files& files) {
  HealthOptions o;
  if (const char* name = std::getenv("SLURMD_NODENAME"); name != nullptr) o.node_name = name;
  auto record = ReadRoleRecord(files);
  if (record && *record && (*record)->role == ood::kWorkerRole) {
    o.required_mounts = {ood::kHomesDir, ood::kSoftwareDir};
  }
  return o;
}

Result<HealthReport> RunHealthCheck(const HealthOptions& options, ProcessRunner& runner,
                                    const Files& files) {
  HealthReport report;
  report.node = options.node_name.empty() ? ShortHostname() : options.node_name;
  if (!slurm::IsValidNodeName(report.node)) {
    return Fail(ErrorKind::kInvalidInput,
                "health-check: '" + report.node + "' is not a usable Slurm node name");
  }
  slurm::SlurmClientOptions client_options;
  client_options.slurm_conf = options.slurm_conf;
  client_options.timeout = options.command_timeout;
  slurm::SlurmClient client(runner, client_options);

  report.checks.push_back(Munge(options, runner));
  auto node = client.ShowNode(report.node);
  HealthCheck slurmd{"slurmd", true, ""};
  if (!node) {
    slurmd.ok = false;
    slurmd.detail = "the controller does not answer (" + OneLine(node.error().message) + ")";
  }
  report.checks.push_back(slurmd);
  report.checks.push_back(Mounts(options, files));
  report.checks.push_back(Disk(options, runner));
  std::string gres;
  if (node && *node) gres = (*node)->gres;
  report.checks.push_back(Gpus(options, runner, gres));

  for (const auto& c : report.checks) {
    if (c.ok) {
      log::Debug("health-check {}: {} ok", report.node, c.name);
    } else {
      log::Warn("health-check {}: {} FAILED: {}", report.node, c.name, c.detail);
    }
  }
  // Without an answer from the controller (or before the node registered) there is nothing
  // to drain or resume.
  if (!node || !*node) return report;
  const slurm::SlurmNode& n = **node;
  const bool ours = n.IsDrain() && n.reason.rfind(kHealthPrefix, 0) == 0;
  const std::string reason = report.DrainReason();
  Result<slurm::NodeChange> change = slurm::NodeChange::kDone;
  if (!report.healthy() && !(ours && n.reason == reason)) {
    // A node drained by someone else (the operator, the elastic cycle, the reconciler) keeps
    // that reason: draining it again would overwrite it.
    if (n.IsDrain() && !ours) return report;
    report.action = "drain";
    log::Warn("health-check: drain {} with reason '{}'", report.node, reason);
    if (!options.dry_run)
      change = client.SetState(report.node, slurm::NodeStateChange::kDrain, reason);
  } else if (report.healthy() && ours) {
    report.action = "resume";
    log::Info("health-check: every check passes again: resume {} (was '{}')", report.node,
              n.reason);
    if (!options.dry_run)
      change = client.SetState(report.node, slurm::NodeStateChange::kResume, "");
  }
  if (!change) {
    report.action_failed = true;
    log::Error("health-check: {} {} failed: {}", report.action, report.node,
               change.error().message);
  }
  return report;
}

int HealthExitCode(const Result<HealthReport>& result) {
  if (!result) return 1;
  return result->healthy() && !result->action_failed ? 0 : 1;
}

}  // namespace onehpc
