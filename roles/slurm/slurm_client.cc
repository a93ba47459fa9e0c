#include "roles/slurm/slurm_client.h"

#include <cstdlib>
#include <sstream>

#include "common/log.h"

namespace onehpc::slurm {
namespace {

const char* StateWord(NodeStateChange change) {
  switch (change) {
    case NodeStateChange::kDown:
      return "DOWN";
    case NodeStateChange::kDrain:
      return "DRAIN";
    case NodeStateChange::kResume:
      return "RESUME";
  }
  return "?";
}

bool Mentions(const ProcessResult& r, const std::string& needle) {
  return r.err.find(needle) != std::string::npos || r.out.find(needle) != std::string::npos;
}

}  // namespace

SlurmClient::SlurmClient(ProcessRunner& runner, SlurmClientOptions options)
    : runner_(runner), options_(std::move(options)) {}

Result<ProcessResult> SlurmClient::Run(std::vector<std::string> argv) {
  Command command;
  command.argv = std::move(argv);
  command.timeout = options_.timeout;
  if (!options_.slurm_conf.empty()) command.env.emplace_back("SLURM_CONF", options_.slurm_conf);
  ++calls_;
  auto result = runner_.Run(command);
  if (!result) return result;
  if (result->timed_out) {
    return Fail(ErrorKind::kProcess, log::QuoteArgv(command.argv) + ": timed out after " +
                                         std::to_string(options_.timeout.count()) + " ms");
  }
  return result;
}

Result<bool> SlurmClient::Ping() {
  auto r = Run({options_.scontrol, "ping"});
  if (!r) return Fail(r.error());
  // "Slurmctld(primary) at NAME is UP" / "... is DOWN"
  return r->exit_code == 0 && r->out.find(" is UP") != std::string::npos;
}

Result<std::optional<std::vector<SlurmNode>>> SlurmClient::ShowJson(
    const std::vector<std::string>& what, const std::string& name) {
  using Maybe = std::optional<std::vector<SlurmNode>>;
  if (!options_.json || json_ == false) return Maybe();
  std::vector<std::string> argv = {options_.scontrol, "--json", "show"};
  argv.insert(argv.end(), what.begin(), what.end());
  auto r = Run(argv);
  if (!r) return Fail(r.error());
  if (r->exit_code != 0) {
    if (!json_ && Mentions(*r, "unrecognized option")) {
      // Every client of a 22.05 host (the reconciler's every minute): not worth a log line.
      log::Debug("scontrol has no --json (Slurm before 23.02): reading its text output");
      json_ = false;
      return Maybe();
    }
    if (!json_ && Mentions(*r, "data_parser")) {
      log::Warn(
          "scontrol --json needs a data_parser plugin that is not there ({}): reading its "
          "text output",
          ProcessText(*r));
      json_ = false;
      return Maybe();
    }
    if (!name.empty() && Mentions(*r, "Node " + name + " not found")) {
      return Maybe(std::vector<SlurmNode>());
    }
    // slurmctld down and the like (24.11 prints no document then, only the error): asking
    // again for text would only wait as long a second time.
    return Fail(ErrorKind::kProcess, log::QuoteArgv(argv) + " failed (exit " +
                                         std::to_string(r->exit_code) + "): " + ProcessText(*r));
  }
  auto nodes = ParseShowNodesJson(r->out);
  if (!nodes) {
    if (json_) return Fail(nodes.error());
    log::Warn("{}: {}; reading scontrol's text output", log::QuoteArgv(argv),
              nodes.error().message);
    json_ = false;
    return Maybe();
  }
  json_ = true;
  return Maybe(std::move(*nodes));
}

Result<std::vector<SlurmNode>> SlurmClient::ShowNodes() {
  auto json = ShowJson({"nodes"}, "");
  if (!json) return Fail(json.error());
  if (*json) return std::move(**json);
  auto r = Run({options_.scontrol, "-o", "show", "nodes"});
  if (!r) return Fail(r.error());
  if (r->exit_code != 0) {
    return Fail(ErrorKind::kProcess, "scontrol -o show nodes failed (exit " +
                                         std::to_string(r->exit_code) + "): " + ProcessText(*r));
  }
  return ParseShowNodes(r->out);
}

Result<std::optional<SlurmNode>> SlurmClient::ShowNode(const std::string& name) {
  if (!IsValidNodeName(name)) {
    return Fail(ErrorKind::kInvalidInput, "refusing Slurm node name '" + name + "'");
  }
  auto json = ShowJson({"node", name}, name);
  if (!json) return Fail(json.error());
  if (*json) {
    for (auto& n : **json) {
      if (n.name == name) return std::optional<SlurmNode>(std::move(n));
    }
    return std::optional<SlurmNode>();
  }
  auto r = Run({options_.scontrol, "-o", "show", "node", name});
  if (!r) return Fail(r.error());
  if (r->exit_code != 0) {
    if (Mentions(*r, "Node " + name + " not found")) return std::optional<SlurmNode>();
    return Fail(ErrorKind::kProcess, "scontrol -o show node " + name + " failed (exit " +
                                         std::to_string(r->exit_code) + "): " + ProcessText(*r));
  }
  auto nodes = ParseShowNodes(r->out);
  if (!nodes) return Fail(nodes.error());
  for (auto& n : *nodes) {
    if (n.name == name) return std::optional<SlurmNode>(std::move(n));
  }
  return std::optional<SlurmNode>();
}

Result<std::map<std::string, std::vector<std::string>>> SlurmClient::ActiveJobsByNode() {
  auto r = Run({options_.squeue, "-h", "-a", "-t", "RUNNING,SUSPENDED,COMPLETING", "-o", "%i %N"});
  if (!r) return Fail(r.error());
  if (r->exit_code != 0) {
    return Fail(ErrorKind::kProcess,
                "squeue failed (exit " + std::to_string(r->exit_code) + "): " + ProcessText(*r));
  }
  return ParseSqueueJobNodes(r->out);
}

Result<int> SlurmClient::NodeCount() {
  auto r = Run({options_.sinfo, "-h", "-a", "-o", "%D"});
  if (!r) return Fail(r.error());
  if (r->exit_code != 0) {
    return Fail(ErrorKind::kProcess,
                "sinfo failed (exit " + std::to_string(r->exit_code) + "): " + ProcessText(*r));
  }
  int total = 0;
  std::istringstream in(r->out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    char* end = nullptr;
    const long n = std::strtol(line.c_str(), &end, 10);
    if (end == line.c_str() || *end != '\0' || n < 0 || n > 1000000) {
      return Fail(ErrorKind::kProcess, "sinfo printed '" + line + "' where a node count was due");
    }
    total += static_cast<int>(n);
  }
  return total;
}

Result<std::vector<PendingJob>> SlurmClient::PendingJobs() {
  // -r: a job array's pending tasks one per line (`123_4`), each asking for its nodes; without
  // it squeue prints the array as one job (`123_[1-10]`).
  auto r = Run({options_.squeue, "-h", "-a", "-t", "PENDING", "-o", "%i|%r|%D", "-r"});
  if (!r) return Fail(r.error());
  if (r->exit_code != 0) {
    return Fail(ErrorKind::kProcess,
                "squeue failed (exit " + std::to_string(r->exit_code) + "): " + ProcessText(*r));
  }
  return ParsePendingJobs(r->out);
}

Status SlurmClient::SetJobAdminComment(const std::string& job_id, const std::string& text) {
  const bool id_ok = !job_id.empty() && job_id.size() <= 32 &&
                     job_id.find_first_not_of("0123456789_") == std::string::npos;
  if (!id_ok) return Fail(ErrorKind::kInvalidInput, "refusing Slurm job id '" + job_id + "'");
  if (text.find('\n') != std::string::npos) {
    return Fail(ErrorKind::kInvalidInput, "an admin comment must be one line");
  }
  auto r = Run({options_.scontrol, "update", "jobid=" + job_id, "admincomment=" + text});
  if (!r) return Fail(r.error());
  if (r->exit_code != 0) {
    return Fail(ErrorKind::kProcess, "scontrol update jobid=" + job_id +
                                         " admincomment failed (exit " +
                                         std::to_string(r->exit_code) + "): " + ProcessText(*r));
  }
  return Ok();
}

Result<NodeChange> SlurmClient::Change(const std::string& name, std::vector<std::string> argv,
                                       const std::string& what) {
  if (!IsValidNodeName(name)) {
    return Fail(ErrorKind::kInvalidInput, "refusing Slurm node name '" + name + "'");
  }
  auto r = Run(argv);
  if (!r) return Fail(r.error());
  if (r->exit_code == 0) return NodeChange::kDone;
  if (Mentions(*r, "Invalid node name specified")) return NodeChange::kAlreadyGone;
  return Fail(ErrorKind::kProcess, what + " " + name + " failed (exit " +
                                       std::to_string(r->exit_code) + "): " + ProcessText(*r));
}

Result<NodeChange> SlurmClient::DeleteNode(const std::string& name) {
  return Change(name, {options_.scontrol, "delete", "nodename=" + name}, "scontrol delete");
}

Result<NodeChange> SlurmClient::SetState(const std::string& name, NodeStateChange change,
                                         const std::string& reason) {
  std::vector<std::string> argv = {options_.scontrol, "update", "nodename=" + name,
                                   std::string("state=") + StateWord(change)};
  if (change != NodeStateChange::kResume) {
    if (reason.empty() || reason.find('\n') != std::string::npos) {
      return Fail(ErrorKind::kInvalidInput, "a DOWN/DRAIN needs a one-line reason");
    }
    argv.push_back("reason=" + reason);  // one argv element: spaces need no quoting
  }
  return Change(name, std::move(argv),
                std::string("scontrol update state=") + StateWord(change) + " of");
}

Result<NodeChange> SlurmClient::SetNodeAddr(const std::string& name, const std::string& addr) {
  return Change(name, {options_.scontrol, "update", "nodename=" + name, "nodeaddr=" + addr},
                "scontrol update nodeaddr of");
}

Result<NodeChange> SlurmClient::DeleteNodeVerified(const std::string& name) {
  auto deleted = DeleteNode(name);
  if (!deleted) return deleted;
  auto shown = ShowNode(name);
  if (!shown) return Fail(shown.error().WithContext("checking that " + name + " is gone"));
  if (shown->has_value()) {
    return Fail(ErrorKind::kProcess, "scontrol delete nodename=" + name +
                                         " reported success but the node is still registered "
                                         "(State=" +
                                         (*shown)->state + ")");
  }
  return deleted;
}

}  // namespace onehpc::slurm
