#include "roles/ood_worker.h"

#include "common/log.h"
#include "roles/ensure.h"
#include "roles/names.h"
#include "roles/nfs/client_mounts.h"
#include "roles/ood/accounts.h"
#include "roles/ood/settings.h"
#include "roles/ood/users.h"
#include "roles/slurm/join.h"

namespace onehpc {
namespace {

constexpr Duration kMountTimeout{180000};
constexpr Duration kJoinTimeout{300000};
constexpr Duration kFollowRegistrationTimeout{30000};

class OodWorkerRole : public Role {
 public:
  std::string Name() const override { return ood::kWorkerRole; }
  std::string Service() const override { return ood::kServiceName; }
  std::string Summary() const override {
    return "Open OnDemand worker: homes and software from NFS, the portal's users, a dynamic "
           "Slurm node of the portal that follows it when it is replaced";
  }
  std::vector<SettingSpec> Settings() const override { return ood::OodWorkerSettings(); }

  Status Configure(RoleEnv& env) override {
    auto home = ood::HomeSourceFrom(env.settings);
    if (!home) return Fail(home.error());
    auto name = OodWorkerNodeName(env.context.vars);
    if (!name) return Fail(name.error());
    const std::string nfs_host = env.settings.GetString(ood::kNfsHost);
    log::Info("ood-worker: node {}; homes from {}:{}; software from {}:{}", *name, home->server,
              home->export_path, nfs_host, ood::kSoftwareExport);

    nfs::NfsMount homes{home->server,       home->export_path, ood::kHomesDir,
                        "the users' homes", home->setting,     ""};
    nfs::NfsMount software{
        nfs_host, ood::kSoftwareExport, ood::kSoftwareDir, "the software tree", ood::kNfsHost, ""};
    for (const auto* m : {&homes, &software}) {
      if (auto s = nfs::EnsureNfsMount(env, *m, kMountTimeout); !s) return s;
    }

    if (auto s = Join(env, *name, /*once=*/false); !s) return s;

    if (auto s = EnsureUnitEnabled(env, ood::kFollowPortalTimer, "timers.target",
                                   "follows a replaced portal and the users it publishes");
        !s) {
      return s;
    }
    return EnsureUnitRunning(env, ood::kFollowPortalTimer, false, "",
                             "runs one-hpc follow every 30 s");
  }

  Status Follow(RoleEnv& env) override {
    auto name = OodWorkerNodeName(env.context.vars);
    if (!name) return Fail(name.error());
    return Join(env, *name, /*once=*/true);
  }

 private:
  static Status Join(RoleEnv& env, const std::string& name, bool once) {
    JoinSetup setup;
    setup.controller_role = ood::kPortalRole;
    setup.node_name = name;
    // A follow pass waits less for the registration: the timer comes back in 30 s.
    setup.timeout = once ? kFollowRegistrationTimeout : kJoinTimeout;
    setup.once = once;
    // No job may run without the homes and the software tree (its output would be lost).
    setup.requires_mounts = {ood::kHomesDir, ood::kSoftwareDir};
    setup.before_slurmd = [&env](const ControllerInfo& portal) -> Status {
      auto it = portal.published.find(ood::kAttrUserTable);
      if (it == portal.published.end() || it->second.empty()) {
        // Never read as "no user": that would disable every account on this worker.
        return Fail(ErrorKind::kNotFound, "portal VM " + std::to_string(portal.vm_id) +
                                              " publishes no " + ood::kAttrUserTable +
                                              " (a portal of an older one-hpc?)");
      }
      auto users = it->second == ood::kNoUsers
                       ? Result<std::vector<ood::LocalUser>>(std::vector<ood::LocalUser>{})
                       : ood::ParseUserTable(it->second);
      if (!users) {
        return Fail(users.error().WithContext("the users published by portal VM " +
                                              std::to_string(portal.vm_id)));
      }
      return ood::EnsureLocalAccounts(env, *users, ood::AccountMode::kWorker);
    };
    auto joined = JoinSlurmCluster(env, setup);
    if (!joined) return Fail(joined.error());
    return Ok();
  }
};

}  // namespace

Result<std::string> OodWorkerNodeName(const ContextVars& vars) {
  return WorkerNodeName(vars, "ood-worker-");
}

std::unique_ptr<Role> MakeOodWorkerRole() { return std::make_unique<OodWorkerRole>(); }

}  // namespace onehpc
