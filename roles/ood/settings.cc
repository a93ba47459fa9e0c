#include "roles/ood/settings.h"

#include "roles/host/address.h"
#include "roles/ood/portal_login.h"
#include "roles/ood/users.h"
#include "roles/slurm/controller_setup.h"
#include "roles/slurm/elastic_settings.h"
#include "roles/slurm/join.h"

namespace onehpc::ood {
namespace {
constexpr char kHostPattern[] =
    "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    "(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*";
}  // namespace

namespace {

SettingSpec LocalUsersSetting() {
  SettingSpec users;
  users.name = kLocalUsersVar;
  users.type = SettingType::kString;
  users.secret = true;  // holds passwords: masked by `one-hpc context`/`settings`, redacted
  // No '$' in the text: the templates generator refuses it (a template variable reference).
  users.description =
      "Portal users, space-separated name:password or name:password:uid (uid 1000-60000, "
      "default the next free from 10001); a password is 8+ characters without ':' or spaces, "
      "or a yescrypt or SHA-512 crypt hash (mkpasswd -m yescrypt, openssl passwd -6) installed "
      "as it is, so that no clear text travels (a password starting with a dollar sign must be "
      "such a hash). Portal only: the storage VM and the workers refuse to start with it in "
      "their context.";
  // The portal only: a VM of another role of the service that finds it refuses to start
  // (RefuseSecretsOfOtherRoles), so that the passwords never sit in the workers' context.
  users.roles = {kPortalRole};

  return users;
}

// The site's own Slurm cluster, a second, batch-only target of the portal.
std::vector<SettingSpec> SiteSlurmSettings() {
  SettingSpec site;
  site.name = kSiteSlurmEnabled;
  site.type = SettingType::kBool;
  site.default_value = "NO";
  site.description =
      "Offer a Slurm cluster of the site as a second, batch-only target in Open OnDemand.";
  site.roles = {kPortalRole};

  SettingSpec site_host;
  site_host.name = kSiteSlurmHost;
  site_host.type = SettingType::kString;
  site_host.description =
      "Login host of the site's Slurm cluster, where the portal submits its batch jobs over "
      "SSH as the user; required with ONEAPP_SITE_SLURM_ENABLED.";
  site_host.roles = {kPortalRole};
  site_host.pattern = kHostPattern;
  site_host.expected = "a host name or IPv4 address (letters, digits, '-' and '.')";

  SettingSpec title;
  title.name = kSiteSlurmTitle;
  title.type = SettingType::kString;
  title.default_value = "Site Slurm";
  title.description = "Title of the site's cluster in the Job Composer and Active Jobs.";
  title.roles = {kPortalRole};
  title.pattern = "[^\\x00-\\x1f\\x7f]{1,64}";
  title.expected = "up to 64 printable characters";

  SettingSpec cluster;
  cluster.name = kSiteSlurmCluster;
  cluster.type = SettingType::kString;
  cluster.default_value = "site";
  cluster.description =
      "Identifier of the site's cluster in Open OnDemand (file clusters.d/<id>.yml).";
  cluster.roles = {kPortalRole};
  cluster.pattern = "[a-z][a-z0-9_-]{0,31}";
  cluster.expected = "a lower-case identifier such as site or hpc2";

  return {site, site_host, title, cluster};
}

// The portal's certificate and key (a self-signed pair when empty).
std::vector<SettingSpec> CertificateSettings() {
  SettingSpec chain;
  chain.name = kPortalCertChain;
  chain.type = SettingType::kText64;
  chain.description =
      "Base64 of the portal's PEM certificate, then its intermediates; it must cover "
      "ONEAPP_PORTAL_HOST_NAME. Empty: a self-signed certificate, made once and kept with the "
      "Slurm state, so that a replaced portal presents the same one.";
  chain.roles = {kPortalRole};

  SettingSpec key;
  key.name = kPortalCertKey;
  key.type = SettingType::kText64;
  key.secret = true;
  key.description =
      "Base64 of the unencrypted PEM private key of ONEAPP_PORTAL_CERTIFICATE_CHAIN. Portal "
      "only: the storage VM and the workers refuse to start with it in their context, but they "
      "can read the portal's context through OneGate; to keep the key off it, put the pair in "
      "the portal's /var/lib/one-hpc/portal-state/ssl/site.crt and site.key (root, 0600) "
      "instead.";
  key.roles = {kPortalRole};

  return {chain, key};
}

}  // namespace

std::vector<SettingSpec> PortalSettings() {
  SettingSpec host;
  host.name = kPortalHostName;
  host.type = SettingType::kString;
  host.description =
      "Public DNS name of the portal (certificate, ServerName); empty means its first "
      "IPv4 address.";
  host.roles = {kPortalRole};
  host.pattern = kHostPattern;
  host.expected = "a DNS name such as ood.example.org (letters, digits, '-' and '.')";

  std::vector<SettingSpec> specs = {LocalUsersSetting(), host};
  for (auto& spec : CertificateSettings()) specs.push_back(spec);
  for (auto& spec : SiteSlurmSettings()) specs.push_back(spec);
  specs.push_back(ComputeNetworkSetting());
  for (auto& spec : LoginSettings()) specs.push_back(spec);
  for (auto& spec : SharedNfsSettings()) specs.push_back(spec);
  // The service template sets it to the workers' max_vms.
  specs.push_back(MaxNodesSetting(kPortalRole));
  for (auto& s : ElasticSettings(kPortalRole)) specs.push_back(std::move(s));
  return specs;
}

SettingSpec ComputeNetworkSetting() {
  SettingSpec net;
  net.name = host::kComputeNetworkSetting;
  net.type = SettingType::kString;
  net.description =
      "The OpenNebula virtual network (name or numeric id) of this VM's compute NIC, whose "
      "addresses the exports and the Squid proxy trust; empty means the NIC the service "
      "template names 'compute', or the VM's only NIC. Never the last NIC: a NIC added later "
      "moves nothing.";
  net.roles = {kStorageRole, kPortalRole};
  net.pattern = "[^\\x00-\\x1f\\x7f]{1,128}";
  net.expected = "a virtual network's name or id, up to 128 printable characters";
  return net;
}

std::vector<SettingSpec> OodWorkerSettings() {
  std::vector<SettingSpec> specs = SharedNfsSettings();
  specs.push_back(ControllerVmIdSetting());
  return specs;
}

std::vector<SettingSpec> SharedNfsSettings() {
  const std::vector<std::string> roles = {kPortalRole, kWorkerRole};
  SettingSpec nfs_host;
  nfs_host.name = kNfsHost;
  nfs_host.type = SettingType::kString;
  nfs_host.required = true;
  nfs_host.description =
      "Compute address of the storage VM (wiring set by the service template): the Slurm "
      "state, the software tree and, unless ONEAPP_HOME_NFS_ENABLED, the homes.";
  nfs_host.roles = roles;
  nfs_host.pattern = kHostPattern;
  nfs_host.expected = "the storage VM's IPv4 address or host name";

  SettingSpec enabled;
  enabled.name = kHomeNfsEnabled;
  enabled.type = SettingType::kBool;
  enabled.default_value = "NO";
  enabled.description =
      "The homes live on the site's NFS server (ONEAPP_HOME_NFS_SERVER), which must export them "
      "with no_root_squash to the portal.";
  enabled.roles = roles;

  SettingSpec server;
  server.name = kHomeNfsServer;
  server.type = SettingType::kString;
  server.description =
      "The site's NFS server of the homes (required with ONEAPP_HOME_NFS_ENABLED); it must "
      "grant no_root_squash to the address the portal reaches it from.";
  server.roles = roles;
  server.pattern = kHostPattern;
  server.expected = "an IPv4 address or host name";

  SettingSpec path;
  path.name = kHomeNfsExport;
  path.type = SettingType::kString;
  path.default_value = "/export/home";
  path.description = "Path of the homes on the site's NFS server.";
  path.roles = roles;
  path.pattern = "/[A-Za-z0-9._/+-]*";
  path.expected = "an absolute path without spaces, such as /export/home";
  return {nfs_host, enabled, server, path};
}

Result<HomeSource> HomeSourceFrom(const Settings& settings) {
  HomeSource src;
  if (settings.GetBool(kHomeNfsEnabled)) {
    src.server = settings.GetString(kHomeNfsServer);
    if (src.server.empty()) {
      return Fail(ErrorKind::kInvalidInput,
                  std::string(kHomeNfsServer) + " is empty but " + kHomeNfsEnabled +
                      "=YES: expected the site's NFS server of the homes (or set " +
                      kHomeNfsEnabled + "=NO to use the storage VM)");
    }
    src.export_path = settings.GetString(kHomeNfsExport);
    src.setting = kHomeNfsServer;
    src.external = true;
    return src;
  }
  src.server = settings.GetString(kNfsHost);
  src.export_path = "/export/home";
  src.setting = kNfsHost;
  return src;
}

}  // namespace onehpc::ood
