#include "roles/ood/interactive_apps.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "roles/ensure.h"
#include "roles/role.h"

namespace onehpc::ood {
namespace {

// A file Open OnDemand takes for a sub app: <name>.yml or <name>.yml.erb.
bool IsSubAppFile(const std::string& name) {
  return name[0] != '.' && (name.ends_with(".yml") || name.ends_with(".yml.erb"));
}

}  // namespace

std::string RenderSessionPin(const std::string& cluster_id) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "cluster" << YAML::Value << YAML::DoubleQuoted << cluster_id
      << YAML::EndMap;
  return std::string(kPinHeader) +
         ": every session of this app runs on the service's cluster (the site's cluster takes "
         "batch jobs only).\n# Changes are overwritten at the next configure.\n" +
         out.c_str() + "\n";
}

Status PinInteractiveApps(RoleEnv& env, const std::string& cluster_id) {
  auto apps = env.files.List(kOodSysAppsDir);
  if (!apps && apps.error().kind == ErrorKind::kNotFound) {
    log::Info("portal: no Open OnDemand apps under {} yet: no session to pin", kOodSysAppsDir);
    return Ok();
  }
  if (!apps) return Fail(apps.error());
  const std::string pin_name = cluster_id + ".yml";
  const std::string pin = RenderSessionPin(cluster_id);
  for (const auto& app : *apps) {
    if (app.empty() || app[0] == '.') continue;
    std::string root = std::string(kOodSysAppsDir) + "/" + app;
    if (!env.files.Exists(root + "/form.yml") && !env.files.Exists(root + "/form.yml.erb")) {
      continue;  // not an interactive app (the dashboard, the shell, the files app...)
    }
    std::string dir = std::string(kOodAppsConfigDir) + "/" + app;
    std::string path = dir + "/" + pin_name;
    auto present = env.files.List(dir);
    if (!present && present.error().kind != ErrorKind::kNotFound) return Fail(present.error());
    std::vector<std::string> theirs;
    if (present) {
      for (const auto& name : *present) {
        if (!IsSubAppFile(name)) continue;
        if (name == pin_name) {
          auto text = env.files.Read(dir + "/" + name);
          if (!text) return Fail(text.error());
          if (text->rfind(kPinHeader, 0) == 0) continue;  // ours
        }
        theirs.push_back(name);
      }
    }
    if (!theirs.empty()) {
      env.plan.Keep(dir, fmt::format("the site's own sub apps ({}) choose the clusters of {}",
                                     fmt::join(theirs, ", "), app));
      continue;
    }
    auto changed = EnsureFile(env, path, pin, 0644, std::nullopt,
                              "the sessions of " + app + " run on the service's cluster");
    if (!changed) return Fail(changed.error());
  }
  return Ok();
}

}  // namespace onehpc::ood
