#include "roles/slurm/elastic_settings.h"

#include <fmt/format.h>

#include "roles/ensure.h"
#include "roles/names.h"
#include "roles/role.h"
#include "roles/slurm/controller_setup.h"

namespace onehpc {
namespace {

SettingSpec Int(const char* name, const std::string& role, const char* def, int64_t min,
                int64_t max, std::string description) {
  SettingSpec s;
  s.name = name;
  s.type = SettingType::kInt;
  s.default_value = def;
  s.roles = {role};
  s.min = min;
  s.max = max;
  s.expected = fmt::format("an integer from {} to {}", min, max);
  s.description = std::move(description);
  return s;
}

}  // namespace

std::vector<SettingSpec> ElasticSettings(const std::string& role) {
  SettingSpec on;
  on.name = kElasticSetting;
  on.type = SettingType::kBool;
  on.default_value = "NO";
  on.roles = {role};
  on.description =
      "Elastic mode: the worker role grows through OneGate when Slurm jobs wait for nodes, and "
      "nodes idle longer than ONEAPP_SLURM_ELASTIC_IDLE_SECONDS are drained, then their own VMs "
      "terminated (never one running a job); `one-hpc elastic --dry-run` shows one cycle.";
  return {
      on,
      Int(kElasticMinSetting, role, "1", 0, 65000,
          "Elastic mode: fewest workers; the service template sets it to the worker role's "
          "min_vms."),
      Int(kElasticMaxSetting, role, "100", 1, 65000,
          "Elastic mode: most workers, at most ONEAPP_SLURM_MAX_NODES; the service template sets "
          "it to the worker role's max_vms."),
      Int(kElasticIdleSetting, role, "600", 60, 604800,
          "Elastic mode: seconds a node stays idle before it is drained and its VM terminated."),
      Int(kElasticStepSetting, role, "4", 1, 1000,
          "Elastic mode: most workers asked for in one cycle (at each job submission, and every 60 "
          "s)."),
  };
}

Result<elastic::Limits> ElasticLimits(const Settings& settings) {
  elastic::Limits limits;
  limits.min_nodes = static_cast<int>(settings.GetInt(kElasticMinSetting));
  limits.max_nodes = static_cast<int>(settings.GetInt(kElasticMaxSetting));
  limits.idle_seconds = settings.GetInt(kElasticIdleSetting);
  limits.max_step = static_cast<int>(settings.GetInt(kElasticStepSetting));
  const int64_t slurm_max = settings.GetInt(kMaxNodesSetting);
  if (limits.min_nodes > limits.max_nodes) {
    return Fail(
        ErrorKind::kInvalidInput,
        fmt::format("{}={} is more than {}={}: expected a minimum no larger than the "
                    "maximum (the worker role's min_vms and max_vms)",
                    kElasticMinSetting, limits.min_nodes, kElasticMaxSetting, limits.max_nodes));
  }
  if (limits.max_nodes > slurm_max) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("{}={} is more than {}={}: slurmctld would refuse the workers beyond "
                            "{}; expected a maximum no larger than {} (or raise {})",
                            kElasticMaxSetting, limits.max_nodes, kMaxNodesSetting, slurm_max,
                            slurm_max, kMaxNodesSetting, kMaxNodesSetting));
  }
  return limits;
}

Status EnsureElasticUnits(RoleEnv& env) {
  if (!env.settings.GetBool(kElasticSetting)) return Ok();
  auto limits = ElasticLimits(env.settings);
  if (!limits) return Fail(limits.error());
  // slurmctld's job_submit.lua creates the kick file here as the Slurm user.
  if (auto s = EnsureDirectory(env, slurm::kElasticKickDir, 0755, FileOwner{"slurm", "slurm"},
                               "slurmctld asks for an elastic cycle there at each submission");
      !s) {
    return s;
  }
  if (auto s = EnsureUnitEnabled(
          env, slurm::kElasticTimer, "timers.target",
          fmt::format("elastic mode: {} to {} workers, idle limit {} s", limits->min_nodes,
                      limits->max_nodes, limits->idle_seconds));
      !s) {
    return s;
  }
  if (auto s = EnsureUnitRunning(env, slurm::kElasticTimer, false, "",
                                 "runs one-hpc elastic every 60 s");
      !s) {
    return s;
  }
  if (auto s = EnsureUnitEnabled(env, slurm::kElasticPath, "paths.target",
                                 "elastic mode: a cycle as soon as a job is submitted");
      !s) {
    return s;
  }
  return EnsureUnitRunning(
      env, slurm::kElasticPath, false, "",
      std::string("starts one-hpc elastic while ") + slurm::kElasticKickFile + " exists");
}

}  // namespace onehpc
