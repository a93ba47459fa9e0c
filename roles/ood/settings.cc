#include "roles/ood/settings.h"

#include "roles/ood/users.h"

namespace onehpc::ood {

std::vector<SettingSpec> PortalSettings() {
  SettingSpec users;
  users.name = kLocalUsersVar;
  users.type = SettingType::kString;
  users.secret = true;  // holds passwords: masked by `one-hpc context`/`settings`, redacted
  users.description =
      "Portal users, space-separated name:password or name:password:uid (uid 1000-60000, "
      "default the next free from 10001); passwords of 8+ characters without ':' or spaces.";
  users.roles = {kPortalRole};

  SettingSpec host;
  host.name = kPortalHostName;
  host.type = SettingType::kString;
  host.description =
      "Public DNS name of the portal (certificate, ServerName); empty means its first "
      "IPv4 address.";
  host.roles = {kPortalRole};
  host.pattern =
      "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
      "(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*";
  host.expected = "a DNS name such as ood.example.org (letters, digits, '-' and '.')";

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
  site_host.pattern = host.pattern;
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

  return {users, host, site, site_host, title, cluster};
}

}  // namespace onehpc::ood
