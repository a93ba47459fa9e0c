#include "roles/controller.h"

#include "common/log.h"
#include "roles/host/address.h"
#include "roles/host/hostname.h"
#include "roles/names.h"
#include "roles/slurm/accounting.h"
#include "roles/slurm/controller_setup.h"
#include "roles/slurm/elastic_settings.h"

namespace onehpc {
namespace {

constexpr char kDefaultHostname[] = "slurm-one-controller";
constexpr char kAccountingSetting[] = "ONEAPP_SLURM_ACCOUNTING_ENABLED";

class ControllerRole : public Role {
 public:
  std::string Name() const override { return slurm::kControllerRole; }
  std::string Service() const override { return slurm::kServiceName; }
  std::string Summary() const override {
    return "Slurm controller: slurmctld for dynamic worker nodes, munge key, node reconciler";
  }
  std::vector<SettingSpec> Settings() const override { return ControllerSettings(); }

  Status Configure(RoleEnv& env) override {
    auto host = ControllerHostname(env.context.vars);
    if (!host) return Fail(host.error());
    auto addr = host::ControllerAddress(env.context.vars);
    if (!addr) return Fail(addr.error());
    log::Info("controller: host name {}, address {} (first NIC of the context)", *host, *addr);
    ControllerSetup setup;
    setup.host = *host;
    setup.addr = *addr;
    setup.max_nodes = static_cast<int>(env.settings.GetInt(kMaxNodesSetting));
    if (env.settings.GetBool(kAccountingSetting))
      setup.accounting_dumps = slurm::kControllerDumpDir;
    auto key = SetUpSlurmController(env, setup);
    if (!key) return Fail(key.error());
    return PublishController(env, *host, *addr, *key);
  }

  Status RotateMungeKey(RoleEnv& env) override {
    auto host = ControllerHostname(env.context.vars);
    if (!host) return Fail(host.error());
    return RotateControllerMungeKey(env, *host, "");
  }
};

}  // namespace

std::vector<SettingSpec> ControllerSettings() {
  SettingSpec accounting;
  accounting.name = kAccountingSetting;
  accounting.type = SettingType::kBool;
  accounting.default_value = "NO";
  accounting.description =
      "Job accounting (sacct, sacctmgr, sreport): MariaDB and slurmdbd on the controller, the "
      "database dumped to " +
      std::string(slurm::kControllerDumpDir) +
      " every 30 minutes. Turned off again, slurmdbd, MariaDB and the dumps stop; the database "
      "and the dumps are kept.";
  accounting.roles = {slurm::kControllerRole};
  std::vector<SettingSpec> specs = {MaxNodesSetting(slurm::kControllerRole), accounting};
  for (auto& s : ElasticSettings(slurm::kControllerRole)) specs.push_back(std::move(s));
  return specs;
}

Result<std::string> ControllerHostname(const ContextVars& vars) {
  auto it = vars.find("SET_HOSTNAME");
  if (it != vars.end() && !it->second.empty()) return host::ShortNameFromSetHostname(it->second);
  return std::string(kDefaultHostname);
}

std::unique_ptr<Role> MakeControllerRole() { return std::make_unique<ControllerRole>(); }

}  // namespace onehpc
