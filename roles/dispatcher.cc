#include "roles/dispatcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "common/log.h"
#include "roles/controller.h"
#include "roles/ood_worker.h"
#include "roles/portal.h"
#include "roles/storage.h"
#include "roles/worker.h"

namespace onehpc {

// Role factories, one per role module (declared in each module's header).
namespace {

using Factory = std::unique_ptr<Role> (*)();

const std::vector<Factory>& Factories() {
  static const std::vector<Factory> factories = {
      MakeControllerRole,  // OneSlurm
      MakeWorkerRole,      // OneSlurm
      MakeStorageRole,     // Open OnDemand
      MakePortalRole,      // Open OnDemand
      MakeOodWorkerRole,   // Open OnDemand (OneFlow role "worker")
  };
  return factories;
}

std::string Join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

std::vector<std::string> KnownRoleNames() {
  std::vector<std::string> names;
  for (const auto& role : AllRoles()) names.push_back(role->Name());
  return names;
}

}  // namespace

std::vector<std::unique_ptr<Role>> AllRoles() {
  std::vector<std::unique_ptr<Role>> roles;
  for (Factory f : Factories()) roles.push_back(f());
  return roles;
}

std::vector<SettingSpec> CommonSettings() {
  std::vector<std::string> all_roles = KnownRoleNames();
  SettingSpec role;
  role.name = "ONEAPP_ROLE";
  role.type = SettingType::kString;
  role.description = "Role of this VM (" + Join(all_roles, ", ") +
                     "); empty means the OneFlow role name (ROLE_NAME) of the VM.";
  role.roles = all_roles;
  role.pattern = "[a-z][a-z0-9-]*";
  role.expected = "a role name such as controller or worker";

  SettingSpec ready;
  ready.name = "REPORT_READY";
  ready.type = SettingType::kBool;
  ready.default_value = "NO";
  ready.description =
      "Publish READY=YES through OneGate after a successful configure (OneFlow's ready gate).";
  ready.roles = all_roles;
  return {role, ready};
}

std::vector<SettingSpec> SettingsFor(const Role& role) {
  std::vector<SettingSpec> specs = CommonSettings();
  for (auto& spec : role.Settings()) {
    auto same = [&](const SettingSpec& s) { return s.name == spec.name; };
    if (std::none_of(specs.begin(), specs.end(), same)) specs.push_back(spec);
  }
  return specs;
}

std::vector<SettingSpec> AllSettings() {
  std::vector<SettingSpec> merged = CommonSettings();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < merged.size(); ++i) index[merged[i].name] = i;
  for (const auto& role : AllRoles()) {
    for (const auto& spec : role->Settings()) {
      auto it = index.find(spec.name);
      if (it == index.end()) {
        index[spec.name] = merged.size();
        merged.push_back(spec);
        if (merged.back().roles.empty()) merged.back().roles = {role->Name()};
        continue;
      }
      SettingSpec& existing = merged[it->second];
      std::vector<std::string> add =
          spec.roles.empty() ? std::vector<std::string>{role->Name()} : spec.roles;
      for (const auto& r : add) {
        if (std::find(existing.roles.begin(), existing.roles.end(), r) == existing.roles.end()) {
          existing.roles.push_back(r);
        }
      }
    }
  }
  return merged;
}

Status RefuseSecretsOfOtherRoles(const Role& role, const ContextVars& vars) {
  std::vector<std::string> same_service;
  for (const auto& r : AllRoles()) {
    if (r->Service() == role.Service()) same_service.push_back(r->Name());
  }
  auto has = [](const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  };
  std::vector<std::string> problems;
  for (const auto& spec : AllSettings()) {
    if (!spec.secret && spec.type != SettingType::kPassword) continue;
    if (has(spec.roles, role.Name())) continue;
    std::vector<std::string> owners;
    for (const auto& r : spec.roles) {
      if (has(same_service, r)) owners.push_back(r);
    }
    if (owners.empty()) continue;  // another service's secret: not ours to judge
    auto it = vars.find(spec.name);
    if (it == vars.end()) continue;
    const std::string& value = it->second;
    if (std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isspace(c); })) {
      continue;  // blank: what OpenNebula sends for an input nobody filled in
    }
    log::AddSecret(value);
    const std::string to = Join(owners, " and ") + (owners.size() > 1 ? " roles" : " role");
    // Short enough for the one-line ERROR published through OneGate (240 characters).
    problems.push_back(fmt::format(
        "{0} is set in this {1} VM's context but belongs to the {2} only (value not shown): "
        "remove it from the {1} role's context (an input of the {2} alone, not of the service) "
        "and reconfigure",
        spec.name, role.Name(), to));
  }
  if (problems.empty()) return Ok();
  return Fail(ErrorKind::kInvalidInput, Join(problems, "\n"));
}

std::unique_ptr<Role> MakeRole(const std::string& name) {
  for (Factory f : Factories()) {
    auto role = f();
    if (role->Name() == name) return role;
  }
  return nullptr;
}

Result<RoleChoice> ChooseRole(const ContextVars& vars, OneGateClient* onegate) {
  RoleChoice choice;
  auto get = [&](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
  if (!get("ONEAPP_ROLE").empty()) {
    choice = {get("ONEAPP_ROLE"), "ONEAPP_ROLE"};
  } else if (!get("ROLE_NAME").empty()) {
    choice = {get("ROLE_NAME"), "ROLE_NAME (context)"};
  } else if (onegate != nullptr) {
    auto vm = onegate->GetVm();
    if (!vm) {
      return Fail(vm.error().WithContext(
          "ONEAPP_ROLE is empty and the OneFlow role name could not be read from OneGate"));
    }
    choice = {vm->Attr("ROLE_NAME"), "ROLE_NAME (OneGate)"};
    if (choice.name.empty()) {
      return Fail(ErrorKind::kInvalidInput,
                  "ONEAPP_ROLE is empty and this VM is not part of a OneFlow service (no "
                  "ROLE_NAME in its user template); set ONEAPP_ROLE to one of: " +
                      Join(KnownRoleNames(), ", "));
    }
  } else {
    return Fail(ErrorKind::kInvalidInput,
                "ONEAPP_ROLE is empty and OneGate is not available to read the OneFlow role "
                "name; set ONEAPP_ROLE to one of: " +
                    Join(KnownRoleNames(), ", "));
  }
  return choice;
}

Error UnknownRoleError(const RoleChoice& choice) {
  return Error{ErrorKind::kInvalidInput, "unknown role '" + choice.name + "' (from " +
                                             choice.source +
                                             "); known roles: " + Join(KnownRoleNames(), ", ")};
}

}  // namespace onehpc
