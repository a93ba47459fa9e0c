// Open OnDemand configuration files, emitted with yaml-cpp (never pasted together as text):
// /etc/ood/config/ood_portal.yml and /etc/ood/config/clusters.d/<id>.yml.
//
// Every string is emitted double-quoted and escaped by the library, so a title such as
// `x"\n  adapter: pbs` stays one string value. Identifiers, host names and paths are also
// validated here (defence in depth: the settings layer checks them first).
#ifndef ONEHPC_ROLES_OOD_OOD_YAML_H_
#define ONEHPC_ROLES_OOD_OOD_YAML_H_

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "context/settings.h"
#include "roles/ood/portal_login.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::ood {

inline constexpr const char* kOodConfigDir = "/etc/ood/config";
inline constexpr const char* kOwnClusterId = "ood";
/// Apache's certificate and key: <dir>/<servername>.crt and .key.
inline constexpr const char* kOodSslDir = "/etc/ood/ssl";

struct PortalYamlInput {
  std::string servername;            ///< DNS name or IPv4 address
  std::string ssl_dir = kOodSslDir;  ///< certificate <dir>/<servername>.crt and .key
  /// Executable run as root with `--user <name>` before each PUN starts (home creation).
  std::string pun_pre_hook_root_cmd = "/usr/libexec/one-hpc/one-hpc-home-create";
  /// Hosts the portal may proxy to (/node, /rnode): the service's workers by their node names
  /// (ood-worker-<VMID>), never an address, so that no portal user reaches the storage VM,
  /// slurmctld, slurmdbd, the front-end or anything else on a private network through them.
  std::string host_regex = "ood-worker-[0-9]+";
  PortalLogin login;  ///< the `auth` lines, the vhost's login directives, `logout_redirect`
};

struct ClusterYamlInput {
  std::string id;          ///< file name and OOD cluster id: [a-z][a-z0-9_-]*
  std::string title;       ///< any text
  std::string login_host;  ///< "" = no login section
  std::string bin = "/usr/bin";
  std::string conf = "/etc/slurm/slurm.conf";  ///< "" = the adapter's default
  std::string slurm_cluster;  ///< "" = none; else the adapter's `cluster` (sbatch -M)
  std::string submit_host;    ///< "" = submit locally; else over SSH as the user
  /// Only batch jobs (Job Composer, Active Jobs): no batch_connect section. This alone does
  /// not keep sessions off it (OnDemand never reads batch_connect to pick an app's clusters):
  /// PinInteractiveApps (interactive_apps.h) does that.
  bool batch_only = false;
  std::string set_host;  ///< batch_connect set_host; "" = OOD's default
};

/// ood_portal.yml (written 0600, as the reference does).
Result<std::string> RenderPortalYaml(const PortalYamlInput& input);
/// clusters.d/<id>.yml.
Result<std::string> RenderClusterYaml(const ClusterYamlInput& input);

/// The clusters the portal offers: its own (id "ood") and, with ONEAPP_SITE_SLURM_ENABLED,
/// the site's (batch only, submitted over SSH to ONEAPP_SITE_SLURM_HOST, which is then
/// required). `own` carries the service's own values (title, login host...).
Result<std::vector<ClusterYamlInput>> ClustersFromSettings(const Settings& settings,
                                                           ClusterYamlInput own);

/// True for a DNS name or dotted IPv4 address (letters, digits, '-', '.').
bool IsValidHostName(const std::string& host);

/// ood_portal.yml (0600), one clusters.d file per cluster, and the removal of the site
/// cluster's file when the site cluster is switched off (and of the PAM service an earlier
/// one-hpc wrote for the portal's login).
Status WriteOodConfig(RoleEnv& env, const std::string& servername, const PortalLogin& login,
                      const std::vector<ClusterYamlInput>& clusters);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_OOD_YAML_H_
