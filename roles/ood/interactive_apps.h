// Where Open OnDemand's interactive apps start their sessions: on the service's own cluster,
// never on the site's.
//
// Open OnDemand's dashboard takes an interactive app's clusters from the app's form.yml
// `cluster:` (an id, a list or a glob such as "*") and keeps those the user may submit to; it
// never looks at a cluster's `batch_connect` section. What a site administrator can change
// without editing the app is its configuration directory /etc/ood/config/apps/<app>/: each
// `<name>.yml` there is a "sub app" whose keys are merged over form.yml (the way OnDemand's
// own Desktop app is configured). one-hpc writes one, `ood.yml` with `cluster: "ood"`, for
// every interactive app installed under /var/www/ood/apps/sys, so that every session runs on
// the service's cluster while the Job Composer and Active Jobs still offer the site's cluster
// for batch jobs. A directory that already holds the site's own sub apps is left alone: the
// administrator chose those clusters.
#ifndef ONEHPC_ROLES_OOD_INTERACTIVE_APPS_H_
#define ONEHPC_ROLES_OOD_INTERACTIVE_APPS_H_

#include <string>

#include "common/error.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::ood {

/// System apps (each a directory; an interactive one has form.yml or form.yml.erb).
inline constexpr const char* kOodSysAppsDir = "/var/www/ood/apps/sys";
/// Open OnDemand's configuration of batch connect apps: <dir>/<app>/<sub app>.yml.
inline constexpr const char* kOodAppsConfigDir = "/etc/ood/config/apps";
/// The first line of the sub app files one-hpc writes (how it knows them as its own).
inline constexpr const char* kPinHeader = "# Written by one-hpc";

/// The sub app file that pins an app's sessions to `cluster_id`.
std::string RenderSessionPin(const std::string& cluster_id);

/// For every interactive system app: /etc/ood/config/apps/<app>/<cluster_id>.yml pinning its
/// sessions to `cluster_id`, unless the directory holds sub apps of the site's. Without
/// installed apps (Open OnDemand's packages not installed yet) nothing is written.
Status PinInteractiveApps(RoleEnv& env, const std::string& cluster_id);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_INTERACTIVE_APPS_H_
