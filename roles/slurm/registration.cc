#include "roles/slurm/registration.h"

#include <optional>

#include "common/retry.h"
#include "roles/slurm/slurm_conf.h"

namespace onehpc::slurm {

namespace {

// The dynamic nodes the configuration slurmd fetched leaves room for (its MaxNodeCount less
// the placeholder records, which sinfo does not count); nullopt when it cannot be read.
std::optional<int> DynamicRoom(const Files& files, const std::string& fetched_conf) {
  auto conf = files.ReadIfExists(fetched_conf);
  if (!conf || !conf->has_value()) return std::nullopt;
  return DynamicNodeRoom(**conf);
}

}  // namespace

Result<SlurmNode> WaitForRegistration(const Files& files, SlurmClient& client, Clock& clock,
                                      const RegistrationCheck& check) {
  RetryPolicy policy = RetryPolicy::Until(check.timeout, Duration(300), Duration(5000), 0.3);
  const std::string& name = check.node_name;
  const std::string& ctl = check.controller_addr;
  bool have_conf = false;
  std::optional<Error> full;  // slurmctld's table is full without this node: no retry helps
  std::optional<int> max;     // the dynamic nodes the fetched configuration allows, read once
  auto node = Retry<SlurmNode>(
      policy, clock, "waiting for Slurm node " + name + " to register",
      [&](const Error&) { return !full; },
      [&]() -> Result<SlurmNode> {
        if (!files.Exists(check.fetched_conf)) {
          return Fail(ErrorKind::kNotFound,
                      "slurmd has not fetched its configuration from " + ctl + " yet");
        }
        have_conf = true;
        auto shown = client.ShowNode(name);
        if (!shown) return Fail(shown.error());
        if (shown->has_value()) return std::move(**shown);
        // slurmctld refuses a dynamic node beyond MaxNodeCount without a word to slurmd, which
        // never tries again: a full table is final for this slurmd.
        if (!max) max = DynamicRoom(files, check.fetched_conf);
        auto count = max ? client.NodeCount() : Result<int>(0);
        if (max && count && *count >= *max) {
          auto again = client.ShowNode(name);  // it may have taken the last place meanwhile
          if (again && again->has_value()) return std::move(**again);
          full = Error{ErrorKind::kProcess,
                       "Slurm node " + name + " was refused: slurmctld on " + ctl + " holds " +
                           std::to_string(*count) + " nodes, as many as it accepts (" +
                           std::to_string(*max) +
                           ", ONEAPP_SLURM_MAX_NODES on the controller): raise it or keep the "
                           "worker role's max_vms at most that"};
          return Fail(*full);
        }
        return Fail(ErrorKind::kNotFound, "node " + name + " is not registered yet");
      });
  if (!node && full) return Fail(*full);
  if (node) return node;
  std::string seconds = std::to_string(check.timeout.count() / 1000);
  std::string port = std::to_string(kSlurmctldPort);
  if (!have_conf) {
    return Fail(ErrorKind::kProcess,
                "slurmd did not fetch its configuration from " + ctl + ":" + port + " within " +
                    seconds + "s: check journalctl -u slurmd, that TCP " + port +
                    " of the controller is reachable and that the munge keys match (last: " +
                    node.error().message + ")");
  }
  auto room = DynamicRoom(files, check.fetched_conf);
  const std::string max_nodes = room ? std::to_string(*room) : "?";
  return Fail(ErrorKind::kProcess,
              "Slurm node " + name + " did not register with " + ctl + " within " + seconds +
                  "s: the node table may be full (it accepts " + max_nodes +
                  " nodes, ONEAPP_SLURM_MAX_NODES) (last: " + node.error().message + ")");
}

}  // namespace onehpc::slurm
