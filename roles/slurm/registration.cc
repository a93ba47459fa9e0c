#include "roles/slurm/registration.h"

#include "common/retry.h"
#include "roles/slurm/slurm_conf.h"

namespace onehpc::slurm {

Result<SlurmNode> WaitForRegistration(const Files& files, SlurmClient& client, Clock& clock,
                                      const RegistrationCheck& check) {
  RetryPolicy policy = RetryPolicy::Until(check.timeout, Duration(300), Duration(5000), 0.3);
  const std::string& name = check.node_name;
  const std::string& ctl = check.controller_addr;
  bool have_conf = false;
  auto node = Retry<SlurmNode>(
      policy, clock, "waiting for Slurm node " + name + " to register",
      [](const Error&) { return true; },
      [&]() -> Result<SlurmNode> {
        if (!files.Exists(check.fetched_conf)) {
          return Fail(ErrorKind::kNotFound,
                      "slurmd has not fetched its configuration from " + ctl + " yet");
        }
        have_conf = true;
        auto shown = client.ShowNode(name);
        if (!shown) return Fail(shown.error());
        if (!shown->has_value()) {
          return Fail(ErrorKind::kNotFound, "node " + name + " is not registered yet");
        }
        return std::move(**shown);
      });
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
  std::string max_nodes = "?";
  if (auto conf = files.ReadIfExists(check.fetched_conf); conf && conf->has_value()) {
    max_nodes = SlurmConfValue(**conf, "MaxNodeCount").value_or("?");
  }
  return Fail(ErrorKind::kProcess, "Slurm node " + name + " did not register with " + ctl +
                                       " within " + seconds +
                                       "s: the node table may be full (MaxNodeCount=" + max_nodes +
                                       ") (last: " + node.error().message + ")");
}

}  // namespace onehpc::slurm
