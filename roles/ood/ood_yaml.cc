#include "roles/ood/ood_yaml.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <regex>

#include "common/log.h"
#include "roles/ensure.h"
#include "roles/ood/portal_login.h"
#include "roles/ood/settings.h"
#include "roles/role.h"

namespace onehpc::ood {
namespace {

// Written by one-hpc before the portal logged in through pwauth (Apache as www-data could
// not read /etc/shadow through it): removed when found with our header.
constexpr char kOldPamService[] = "/etc/pam.d/ood";
constexpr char kOldPamHeader[] = "# Written by one-hpc";

tl::unexpected<Error> Invalid(const std::string& message) {
  return Fail(ErrorKind::kInvalidInput, message);
}

bool IsValidId(const std::string& id) {
  static const std::regex kId("[a-z][a-z0-9_-]{0,31}");
  return std::regex_match(id, kId);
}

// An absolute path of ordinary characters (no whitespace, quotes or control characters:
// Apache directives in ood_portal.yml carry them).
bool IsSafePath(const std::string& path) {
  static const std::regex kPath("/[A-Za-z0-9._/+@-]*");
  return std::regex_match(path, kPath) && path.find("..") == std::string::npos;
}

bool IsSingleLine(const std::string& text) {
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

// The first line of every file of /etc/ood/config one-hpc writes: how a cluster file of an
// earlier configure is known as ours.
constexpr char kWrittenHeader[] =
    "# Written by one-hpc; changes are overwritten at the next configure.\n";

// Emits a string value, always double-quoted (so "yes", "1", "~" or "a: b" stay strings).
void Str(YAML::Emitter& out, const std::string& key, const std::string& value) {
  out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}

Result<std::string> Finish(const YAML::Emitter& out) {
  if (!out.good()) {
    return Fail(ErrorKind::kInternal, "YAML emitter error: " + out.GetLastError());
  }
  return std::string(kWrittenHeader) + out.c_str() + "\n";
}

}  // namespace

bool IsValidHostName(const std::string& host) {
  static const std::regex kHost(
      "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
      "[A-Za-z0-9])?)*");
  return host.size() <= 253 && std::regex_match(host, kHost);
}

Result<std::string> RenderPortalYaml(const PortalYamlInput& in) {
  if (!IsValidHostName(in.servername)) {
    return Invalid("ood_portal.yml: the server name is not a DNS name or IPv4 address");
  }
  if (!IsSafePath(in.ssl_dir) || !IsSafePath(in.pun_pre_hook_root_cmd)) {
    return Invalid(
        "ood_portal.yml: the certificate directory and the pre-hook must be plain "
        "absolute paths");
  }
  if (!IsSingleLine(in.host_regex)) {
    return Invalid("ood_portal.yml: host_regex must be a single line");
  }
  const std::string cert = fmt::format("{}/{}.crt", in.ssl_dir, in.servername);
  const std::string key = fmt::format("{}/{}.key", in.ssl_dir, in.servername);

  YAML::Emitter out;
  out << YAML::BeginMap;
  Str(out, "servername", in.servername);
  out << YAML::Key << "port" << YAML::Value << 443;
  // Apache directives: the paths are validated above (no spaces or quotes to escape).
  out << YAML::Key << "ssl" << YAML::Value << YAML::BeginSeq << YAML::DoubleQuoted
      << fmt::format("SSLCertificateFile \"{}\"", cert) << YAML::DoubleQuoted
      << fmt::format("SSLCertificateKeyFile \"{}\"", key) << YAML::EndSeq;
  Str(out, "host_regex", in.host_regex);
  Str(out, "node_uri", "/node");
  Str(out, "rnode_uri", "/rnode");
  Str(out, "user_map_match", "^([^@]+)$");
  Str(out, "pun_pre_hook_root_cmd", in.pun_pre_hook_root_cmd);
  // Authentication: the login form or HTTP Basic, checked by pwauth (roles/ood/portal_login.h).
  out << YAML::Key << "auth" << YAML::Value << YAML::BeginSeq;
  for (const auto& line : PortalAuthLines(in.login)) out << YAML::DoubleQuoted << line;
  out << YAML::EndSeq;
  out << YAML::Key << "custom_vhost_directives" << YAML::Value << YAML::BeginSeq;
  for (const auto& line : PortalVhostDirectives(in.login)) out << YAML::DoubleQuoted << line;
  out << YAML::EndSeq;
  Str(out, "logout_redirect", PortalLogoutRedirect(in.login));
  if (in.login.kind == LoginKind::kOidc) {
    // Open OnDemand's generator writes mod_auth_openidc's directives from these keys.
    const OidcLogin& oidc = in.login.oidc;
    for (const auto* value : {&oidc.issuer, &oidc.client_id, &oidc.client_secret, &oidc.user_claim,
                              &oidc.crypto_passphrase}) {
      if (value->empty() || !IsSingleLine(*value) ||
          value->find_first_of(" \t\"\\") != std::string::npos) {
        return Invalid("ood_portal.yml: an OIDC value is empty or holds a space or a quote");
      }
    }
    Str(out, "oidc_uri", kOidcRedirectPath);
    Str(out, "oidc_provider_metadata_url", OidcMetadataUrl(oidc.issuer));
    Str(out, "oidc_client_id", oidc.client_id);
    Str(out, "oidc_client_secret", oidc.client_secret);
    Str(out, "oidc_remote_user_claim", oidc.user_claim);
    Str(out, "oidc_scope", "openid profile email");
    Str(out, "oidc_crypto_passphrase", oidc.crypto_passphrase);
    out << YAML::Key << "oidc_session_inactivity_timeout" << YAML::Value << in.login.idle_seconds;
    out << YAML::Key << "oidc_session_max_duration" << YAML::Value << in.login.lifetime_seconds;
  }
  out << YAML::EndMap;
  return Finish(out);
}

Result<std::string> RenderClusterYaml(const ClusterYamlInput& in) {
  if (!IsValidId(in.id)) {
    return Invalid("clusters.d: the cluster id must be a lower-case identifier");
  }
  if (!in.login_host.empty() && !IsValidHostName(in.login_host)) {
    return Invalid(fmt::format("clusters.d/{}.yml: the login host is not a host name", in.id));
  }
  if (!in.submit_host.empty() && !IsValidHostName(in.submit_host)) {
    return Invalid(fmt::format("clusters.d/{}.yml: the submit host is not a host name", in.id));
  }
  if (!IsSafePath(in.bin) || (!in.conf.empty() && !IsSafePath(in.conf))) {
    return Invalid(
        fmt::format("clusters.d/{}.yml: bin and conf must be plain absolute paths", in.id));
  }
  if (!in.slurm_cluster.empty() && !IsValidId(in.slurm_cluster)) {
    return Invalid(fmt::format("clusters.d/{}.yml: the Slurm cluster name is not valid", in.id));
  }
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "v2" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  Str(out, "title", in.title.empty() ? in.id : in.title);
  out << YAML::EndMap;
  if (!in.login_host.empty()) {
    out << YAML::Key << "login" << YAML::Value << YAML::BeginMap;
    Str(out, "host", in.login_host);
    out << YAML::EndMap;
  }
  out << YAML::Key << "job" << YAML::Value << YAML::BeginMap;
  Str(out, "adapter", "slurm");
  if (!in.slurm_cluster.empty()) Str(out, "cluster", in.slurm_cluster);
  Str(out, "bin", in.bin);
  if (!in.conf.empty()) Str(out, "conf", in.conf);
  if (!in.submit_host.empty()) {
    Str(out, "submit_host", in.submit_host);
    out << YAML::Key << "strict_host_checking" << YAML::Value << true;
  }
  out << YAML::EndMap;  // job
  if (!in.batch_only) {
    out << YAML::Key << "batch_connect" << YAML::Value << YAML::BeginMap;
    for (const char* kind : {"basic", "vnc"}) {
      out << YAML::Key << kind << YAML::Value << YAML::BeginMap;
      Str(out, "script_wrapper",
          std::string(kind) == "vnc" ? "export WEBSOCKIFY_CMD=\"/usr/bin/websockify\"\n%s" : "%s");
      if (!in.set_host.empty()) Str(out, "set_host", in.set_host);
      out << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap << YAML::EndMap;
  return Finish(out);
}

Result<std::vector<ClusterYamlInput>> ClustersFromSettings(const Settings& settings,
                                                           ClusterYamlInput own) {
  own.id = kOwnClusterId;
  std::vector<ClusterYamlInput> clusters = {own};
  if (!settings.GetBool(kSiteSlurmEnabled)) return clusters;
  const std::string& host = settings.GetString(kSiteSlurmHost);
  if (host.empty()) {
    return Invalid(
        fmt::format("{} is required when {} is on: the login host of the site's "
                    "Slurm cluster",
                    kSiteSlurmHost, kSiteSlurmEnabled));
  }
  ClusterYamlInput site;
  site.id = settings.GetString(kSiteSlurmCluster);
  if (site.id == own.id) {
    return Invalid(
        fmt::format("{}='{}': the identifier is the service's own cluster's; choose "
                    "another",
                    kSiteSlurmCluster, site.id));
  }
  site.title = settings.GetString(kSiteSlurmTitle);
  site.login_host = host;
  site.submit_host = host;
  site.conf = "";  // the site's configuration lives on its login host
  site.batch_only = true;
  clusters.push_back(std::move(site));
  return clusters;
}

namespace {

// A cluster no longer configured (the site cluster switched off or renamed): its file goes
// when it is ours, that is when it begins with our header, or when it is the site cluster's
// file as the setting names it (an earlier one-hpc wrote no header). Any other file stays.
Status RemoveStaleClusters(RoleEnv& env, const std::string& dir,
                           const std::vector<ClusterYamlInput>& clusters) {
  auto names = env.files.List(dir);
  if (!names) return names.error().kind == ErrorKind::kNotFound ? Ok() : Fail(names.error());
  const std::string site = env.settings.GetString(kSiteSlurmCluster) + ".yml";
  for (const auto& name : *names) {
    if (name.size() < 5 || name.compare(name.size() - 4, 4, ".yml") != 0) continue;
    if (std::any_of(clusters.begin(), clusters.end(),
                    [&](const auto& c) { return c.id + ".yml" == name; })) {
      continue;
    }
    const std::string path = dir + "/" + name;
    auto text = env.files.ReadIfExists(path);
    if (!text) return Fail(text.error());
    const bool ours = *text && (*text)->rfind(kWrittenHeader, 0) == 0;
    if (!ours && name != site) continue;
    if (auto s = env.plan.Do("remove " + path,
                             "one-hpc wrote it for a cluster no longer configured (" +
                                 std::string(kSiteSlurmEnabled) + ", " + kSiteSlurmCluster + ")",
                             [&] { return env.files.Remove(path); });
        !s) {
      return s;
    }
  }
  return Ok();
}

}  // namespace

Status WriteOodConfig(RoleEnv& env, const std::string& servername, const PortalLogin& login,
                      const std::vector<ClusterYamlInput>& clusters) {
  PortalYamlInput portal;
  portal.servername = servername;
  portal.login = login;
  if (login.kind == LoginKind::kOidc) {
    // Made by EnsurePortalLogin (in a dry run, perhaps not yet).
    auto key = env.files.ReadIfExists(kOidcPassphraseFile);
    if (!key) return Fail(key.error());
    std::string& passphrase = portal.login.oidc.crypto_passphrase;
    passphrase = key->value_or("");
    while (!passphrase.empty() && passphrase.back() == '\n') passphrase.pop_back();
    if (!passphrase.empty()) log::AddSecret(passphrase);
    if (passphrase.empty()) {
      if (!env.plan.dry_run()) {
        return Fail(ErrorKind::kNotFound, std::string(kOidcPassphraseFile) + " is missing");
      }
      passphrase = "made-at-the-first-run";
    }
  }
  auto yaml = RenderPortalYaml(portal);
  if (!yaml) return Fail(yaml.error());
  if (auto s = EnsureFile(env, std::string(kOodConfigDir) + "/ood_portal.yml", *yaml, 0600,
                          std::nullopt, "Open OnDemand's portal (Apache) configuration");
      !s) {
    return Fail(s.error());
  }
  auto old_pam = env.files.ReadIfExists(kOldPamService);
  if (!old_pam) return Fail(old_pam.error());
  if (*old_pam && old_pam->value().rfind(kOldPamHeader, 0) == 0) {
    if (auto s = env.plan.Do(std::string("remove ") + kOldPamService,
                             "the portal's login goes through pwauth's PAM service now",
                             [&] { return env.files.Remove(kOldPamService); });
        !s) {
      return s;
    }
  }
  std::string dir = std::string(kOodConfigDir) + "/clusters.d";
  for (const auto& c : clusters) {
    auto text = RenderClusterYaml(c);
    if (!text) return Fail(text.error());
    if (auto s = EnsureFile(env, dir + "/" + c.id + ".yml", *text, 0644, std::nullopt,
                            "Open OnDemand cluster '" + c.id + "'");
        !s) {
      return Fail(s.error());
    }
  }
  return RemoveStaleClusters(env, dir, clusters);
}

}  // namespace onehpc::ood
