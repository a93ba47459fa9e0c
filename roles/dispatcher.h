// Picks the role module for this VM and lists the known ones.
#ifndef ONEHPC_ROLES_DISPATCHER_H_
#define ONEHPC_ROLES_DISPATCHER_H_

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "context/context_file.h"
#include "context/onegate.h"
#include "context/settings.h"
#include "roles/role.h"

namespace onehpc {

/// Every role module, in the operator guide's order. Each role's factory lives in its own .cc
/// file and is listed in dispatcher.cc.
std::vector<std::unique_ptr<Role>> AllRoles();

/// Settings every role reads (ONEAPP_ROLE and the generic context variables we interpret,
/// e.g. REPORT_READY).
std::vector<SettingSpec> CommonSettings();

/// The settings of one role: CommonSettings() followed by the role's own.
std::vector<SettingSpec> SettingsFor(const Role& role);

/// Every setting of every role, merged by name (roles listed), for the operator guide's table.
std::vector<SettingSpec> AllSettings();

/// Where the role name came from.
struct RoleChoice {
  std::string name;
  std::string source;  ///< "ONEAPP_ROLE", "ROLE_NAME (context)" or "ROLE_NAME (OneGate)"
};

/// ONEAPP_ROLE if non-empty; else ROLE_NAME from the context; else ROLE_NAME from the VM's
/// USER_TEMPLATE through OneGate (when `onegate` is not null). kInvalidInput when none is set
/// (the message lists the known roles). The name is not checked against the known roles.
Result<RoleChoice> ChooseRole(const ContextVars& vars, OneGateClient* onegate);

/// The error for a role name no module answers to (lists the known ones).
Error UnknownRoleError(const RoleChoice& choice);

/// A VM of one role must never hold another role's secret: for every secret setting
/// (AllSettings(): `secret` or kPassword) that some role of `role`'s service reads and `role`
/// does not, a non-blank value in `vars` is refused (kInvalidInput), e.g.
/// ONEAPP_AUTH_LOCAL_USERS, the portal's passwords, on the storage VM or a worker. The error
/// names the variable, the roles it belongs to and what to do, never the value (registered
/// with log::AddSecret). Configure, plan and follow run it before the settings are read.
Status RefuseSecretsOfOtherRoles(const Role& role, const ContextVars& vars);

/// The role module named `name`, or nullptr.
std::unique_ptr<Role> MakeRole(const std::string& name);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_DISPATCHER_H_
