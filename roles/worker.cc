#include "roles/worker.h"

#include "roles/ensure.h"
#include "roles/names.h"
#include "roles/slurm/join.h"

namespace onehpc {
namespace {

constexpr char kJoinTimeout[] = "ONEAPP_SLURM_JOIN_TIMEOUT";
/// A follow pass waits less for the registration: the timer comes back in 30 s.
constexpr Duration kFollowRegistrationTimeout{30000};

class WorkerRole : public Role {
 public:
  std::string Name() const override { return slurm::kWorkerRole; }
  std::string Service() const override { return slurm::kServiceName; }
  std::string Summary() const override {
    return "Slurm worker: joins the controller as a dynamic node found through OneGate";
  }
  std::vector<SettingSpec> Settings() const override { return WorkerSettings(); }

  Status Configure(RoleEnv& env) override {
    auto name = WorkerNodeName(env.context.vars);
    if (!name) return Fail(name.error());
    JoinSetup setup;
    setup.node_name = *name;
    setup.timeout = Duration(env.settings.GetInt(kJoinTimeout) * 1000);
    auto joined = JoinSlurmCluster(env, setup);
    if (!joined) return Fail(joined.error());
    if (auto s = EnsureUnitEnabled(env, slurm::kFollowControllerTimer, "timers.target",
                                   "follows a rotated munge key or a replaced controller");
        !s) {
      return s;
    }
    return EnsureUnitRunning(env, slurm::kFollowControllerTimer, false, "",
                             "runs one-hpc follow every 30 s");
  }

  // One look at OneGate: a new munge key id (a rotation) or a new controller address.
  Status Follow(RoleEnv& env) override {
    auto name = WorkerNodeName(env.context.vars);
    if (!name) return Fail(name.error());
    JoinSetup setup;
    setup.node_name = *name;
    setup.timeout = kFollowRegistrationTimeout;
    setup.once = true;
    auto joined = JoinSlurmCluster(env, setup);
    if (!joined) return Fail(joined.error());
    return Ok();
  }
};

}  // namespace

std::vector<SettingSpec> WorkerSettings() {
  SettingSpec timeout;
  timeout.name = kJoinTimeout;
  timeout.type = SettingType::kInt;
  timeout.default_value = "300";
  timeout.description =
      "Seconds a worker waits for the controller to be ready in OneGate, and again for its "
      "node to register with slurmctld, before configure fails.";
  timeout.roles = {slurm::kWorkerRole};
  timeout.min = 10;
  timeout.max = 3600;
  timeout.expected = "seconds from 10 to 3600";
  return {timeout, ControllerVmIdSetting()};
}

std::unique_ptr<Role> MakeWorkerRole() { return std::make_unique<WorkerRole>(); }

}  // namespace onehpc
