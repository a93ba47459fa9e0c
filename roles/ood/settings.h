// Settings of the Open OnDemand portal and worker roles (issue #5), declared ahead of the
// role modules so that `one-hpc context` / `settings --all` / the logs already treat them
// right (the local users list is a secret).
#ifndef ONEHPC_ROLES_OOD_SETTINGS_H_
#define ONEHPC_ROLES_OOD_SETTINGS_H_

#include <vector>

#include "context/settings.h"

namespace onehpc::ood {

inline constexpr const char* kPortalRole = "portal";
inline constexpr const char* kPortalHostName = "ONEAPP_PORTAL_HOST_NAME";
inline constexpr const char* kSiteSlurmEnabled = "ONEAPP_SITE_SLURM_ENABLED";
inline constexpr const char* kSiteSlurmHost = "ONEAPP_SITE_SLURM_HOST";
inline constexpr const char* kSiteSlurmTitle = "ONEAPP_SITE_SLURM_TITLE";
inline constexpr const char* kSiteSlurmCluster = "ONEAPP_SITE_SLURM_CLUSTER";

/// The portal's settings: local users, public name, the site's Slurm cluster.
std::vector<SettingSpec> PortalSettings();

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_SETTINGS_H_
