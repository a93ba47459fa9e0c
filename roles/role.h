// A role module: what a VM of one OneFlow role becomes. The dispatcher (roles/dispatcher.h)
// picks one from ONEAPP_ROLE or the OneFlow ROLE_NAME and runs its Configure.
#ifndef ONEHPC_ROLES_ROLE_H_
#define ONEHPC_ROLES_ROLE_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "context/context_file.h"
#include "context/http.h"
#include "context/onegate.h"
#include "context/settings.h"
#include "roles/ensure.h"
#include "roles/os/block_devices.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"
#include "roles/os/systemd.h"
#include "roles/os/tcp.h"
#include "roles/plan.h"

namespace onehpc {

/// The adapters a run uses (real ones in the program, fakes in tests).
struct SystemAdapters {
  ProcessRunner& runner;
  Files& files;
  Systemd& systemd;
  BlockDevices& block_devices;
  Mounts& mounts;
  Clock& clock;
  HttpTransport& http;
  /// The munge key's delivery (nullptr: a worker cannot fetch the key).
  LineExchange* exchange = nullptr;
};

/// Everything a role may use. All side effects go through these members, and every change
/// goes through `plan.Do`, so configure and plan share one code path.
struct RoleEnv {
  const LoadedContext& context;
  const Settings& settings;
  OneGateClient* onegate;  ///< nullptr when the VM has no OneGate (no TOKEN=YES)
  ProcessRunner& runner;
  Files& files;
  Systemd& systemd;
  BlockDevices& block_devices;
  Mounts& mounts;
  Clock& clock;
  HttpTransport& http;  ///< besides OneGate's own client: the portal's look at itself
  Plan& plan;
  /// Attributes to publish through OneGate in the same PUT as READY=YES, after a successful
  /// configure (nullptr: nothing is published, e.g. in tests).
  std::vector<std::pair<std::string, std::string>>* publish = nullptr;
  /// One-line TCP exchanges: a worker asks the controller's key server (nullptr: it cannot).
  LineExchange* exchange = nullptr;
  /// Every unit EnsureUnitEnabled saw (enabled now or already), for the role record
  /// (roles/role_change.h); nullptr: not collected.
  std::vector<std::string>* enabled_units = nullptr;

  /// The one way to build it: from the run's adapters.
  static RoleEnv From(const LoadedContext& context, const Settings& settings,
                      OneGateClient* onegate, const SystemAdapters& sys, Plan& plan,
                      std::vector<std::pair<std::string, std::string>>* publish = nullptr) {
    return RoleEnv{context,     settings,          onegate,     sys.runner, sys.files,
                   sys.systemd, sys.block_devices, sys.mounts,  sys.clock,  sys.http,
                   plan,        publish,           sys.exchange};
  }

  /// A context variable, or "" when absent.
  std::string Var(const std::string& name) const {
    auto it = context.vars.find(name);
    return it == context.vars.end() ? std::string() : it->second;
  }
};

class Role {
 public:
  virtual ~Role() = default;
  /// The ONEAPP_ROLE value, e.g. "controller".
  virtual std::string Name() const = 0;
  /// The OneFlow service it belongs to, e.g. "OneSlurm".
  virtual std::string Service() const = 0;
  /// One line for --help and the operator guide.
  virtual std::string Summary() const = 0;
  /// The ONEAPP_* settings this role reads (validated before Configure runs).
  virtual std::vector<SettingSpec> Settings() const = 0;
  /// Makes the VM what the role says; idempotent; every change through env.plan.Do.
  virtual Status Configure(RoleEnv& env) = 0;
  /// One pass of `one-hpc follow` (a timer): re-reads what peers publish and converges to
  /// it, looking once and never waiting. Roles with nothing to follow refuse.
  virtual Status Follow(RoleEnv& env);
  /// `one-hpc rotate-munge-key`: a new munge key for the whole cluster. Only the roles that
  /// run slurmctld have one to rotate; the others refuse.
  virtual Status RotateMungeKey(RoleEnv& env);
};

}  // namespace onehpc

#endif  // ONEHPC_ROLES_ROLE_H_
