// The settings of elastic mode (ONEAPP_SLURM_ELASTIC*), read by the Slurm controller (OneSlurm
// controller, Open OnDemand portal), and the configure step that turns the cycle's timer on or
// off. The service templates set the minimum and maximum from the worker role's min_vms and
// max_vms (templates/generate.py), so OneFlow and the cycle agree on them.
#ifndef ONEHPC_ROLES_SLURM_ELASTIC_SETTINGS_H_
#define ONEHPC_ROLES_SLURM_ELASTIC_SETTINGS_H_

#include <string>
#include <vector>

#include "common/error.h"
#include "context/settings.h"
#include "roles/slurm/elastic.h"

namespace onehpc {

struct RoleEnv;

inline constexpr char kElasticSetting[] = "ONEAPP_SLURM_ELASTIC";
inline constexpr char kElasticMinSetting[] = "ONEAPP_SLURM_ELASTIC_MIN_NODES";
inline constexpr char kElasticMaxSetting[] = "ONEAPP_SLURM_ELASTIC_MAX_NODES";
inline constexpr char kElasticIdleSetting[] = "ONEAPP_SLURM_ELASTIC_IDLE_SECONDS";
inline constexpr char kElasticStepSetting[] = "ONEAPP_SLURM_ELASTIC_STEP";

/// The specs, read by `role` (the controller or the portal).
std::vector<SettingSpec> ElasticSettings(const std::string& role);

/// The limits of the cycle from resolved settings (which must hold ElasticSettings and
/// ONEAPP_SLURM_MAX_NODES). kInvalidInput naming the variables and their values when the
/// minimum exceeds the maximum or the maximum exceeds ONEAPP_SLURM_MAX_NODES (slurmctld
/// would refuse the nodes beyond it).
Result<elastic::Limits> ElasticLimits(const Settings& settings);

/// Configure: with ONEAPP_SLURM_ELASTIC=YES, checks the limits, makes the kick directory
/// (owned by the Slurm user) and enables and starts oneslurm-elastic.timer and
/// oneslurm-elastic.path; otherwise does nothing (the role record turns units that an earlier
/// configure enabled off again).
Status EnsureElasticUnits(RoleEnv& env);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_SLURM_ELASTIC_SETTINGS_H_
