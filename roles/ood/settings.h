// Settings of the Open OnDemand portal and worker roles (the portal's local users list is a
// secret).
#ifndef ONEHPC_ROLES_OOD_SETTINGS_H_
#define ONEHPC_ROLES_OOD_SETTINGS_H_

#include <string>
#include <vector>

#include "common/error.h"
#include "context/settings.h"
#include "roles/names.h"

namespace onehpc::ood {

inline constexpr const char* kNfsHost = "ONEAPP_NFS_HOST";
inline constexpr const char* kHomeNfsEnabled = "ONEAPP_HOME_NFS_ENABLED";
inline constexpr const char* kHomeNfsServer = "ONEAPP_HOME_NFS_SERVER";
inline constexpr const char* kHomeNfsExport = "ONEAPP_HOME_NFS_EXPORT";
inline constexpr const char* kPortalHostName = "ONEAPP_PORTAL_HOST_NAME";
inline constexpr const char* kPortalCertChain = "ONEAPP_PORTAL_CERTIFICATE_CHAIN";
inline constexpr const char* kPortalCertKey = "ONEAPP_PORTAL_CERTIFICATE_KEY";
inline constexpr const char* kSiteSlurmEnabled = "ONEAPP_SITE_SLURM_ENABLED";
inline constexpr const char* kSiteSlurmHost = "ONEAPP_SITE_SLURM_HOST";
inline constexpr const char* kSiteSlurmTitle = "ONEAPP_SITE_SLURM_TITLE";
inline constexpr const char* kSiteSlurmCluster = "ONEAPP_SITE_SLURM_CLUSTER";

/// The portal's settings: local users, public name, the site's Slurm cluster, the NFS
/// sources (SharedNfsSettings) and MaxNodeCount.
std::vector<SettingSpec> PortalSettings();
/// ONEAPP_COMPUTE_NETWORK, read by the storage and the portal (host::FindComputeNic).
SettingSpec ComputeNetworkSetting();

/// The ood-worker's settings: the NFS sources. Not the local users: the worker takes names
/// and uids from the portal (OOD_USERS) and refuses to start with ONEAPP_AUTH_LOCAL_USERS in
/// its context (a portal-only secret, see RefuseSecretsOfOtherRoles in roles/dispatcher.h).
std::vector<SettingSpec> OodWorkerSettings();

/// Read by the portal and the workers: ONEAPP_NFS_HOST (the storage VM), and the site's NFS
/// server of the homes (ONEAPP_HOME_NFS_ENABLED / _SERVER / _EXPORT).
std::vector<SettingSpec> SharedNfsSettings();

/// Where the homes come from: the storage VM's /export/home, or the site's server.
struct HomeSource {
  std::string server;
  std::string export_path;
  std::string setting;  ///< the variable that named the server (for error messages)
  bool external = false;
};
/// kInvalidInput when ONEAPP_HOME_NFS_ENABLED=YES without ONEAPP_HOME_NFS_SERVER.
Result<HomeSource> HomeSourceFrom(const Settings& settings);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_SETTINGS_H_
