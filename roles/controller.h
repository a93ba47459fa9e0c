// The OneSlurm controller role: slurmctld for a configless cluster of dynamic nodes, the munge
// key, and the cluster data workers read from OneGate.
#ifndef ONEHPC_ROLES_CONTROLLER_H_
#define ONEHPC_ROLES_CONTROLLER_H_

#include <memory>
#include <string>
#include <vector>

#include "context/settings.h"
#include "roles/role.h"

namespace onehpc {

/// Role "controller" of service "OneSlurm".
std::unique_ptr<Role> MakeControllerRole();

/// The controller's own settings (ONEAPP_SLURM_MAX_NODES).
std::vector<SettingSpec> ControllerSettings();

/// The controller's host name: the short SET_HOSTNAME when set, else "slurm-one-controller".
Result<std::string> ControllerHostname(const ContextVars& vars);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_CONTROLLER_H_
