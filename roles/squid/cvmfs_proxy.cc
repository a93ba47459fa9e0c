#include "roles/squid/cvmfs_proxy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <regex>
#include <sstream>

#include "common/log.h"
#include "roles/ensure.h"
#include "roles/role.h"

namespace onehpc::squid {

const char kIpv4CidrPattern[] =
    "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}"
    "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(3[0-2]|[12]?[0-9])";

namespace {

constexpr char kWantsLink[] = "/etc/systemd/system/multi-user.target.wants/squid.service";

// squid's own complaints from `squid -k parse` output (it logs everything on stderr).
std::string Complaints(const std::string& err) {
  std::istringstream in(err);
  std::vector<std::string> picked, tail;
  for (std::string line; std::getline(in, line);) {
    if (line.find("FATAL") != std::string::npos || line.find("ERROR") != std::string::npos ||
        line.find("Bungled") != std::string::npos) {
      picked.push_back(line);
    }
    tail.push_back(line);
    if (tail.size() > 5) tail.erase(tail.begin());
  }
  return fmt::format("{}", fmt::join(picked.empty() ? tail : picked, "\n"));
}

Status DisableSquid(RoleEnv& env, const std::string& url) {
  env.plan.Keep("Squid", std::string(kProxyEnabled) + "=YES: the site's proxy " + url +
                             " serves CernVM-FS; this VM runs no Squid");
  if (env.files.Exists(kWantsLink)) {
    auto s = env.plan.Do("disable " + std::string(kSquidUnit),
                         "a Squid of an earlier configure is replaced by the site's proxy",
                         [&] { return env.systemd.Disable(kSquidUnit); });
    if (!s) return s;
  }
  auto active = env.systemd.IsActive(kSquidUnit);
  if (!active) {
    if (!env.plan.dry_run()) return Fail(active.error());
    env.plan.Keep(kSquidUnit, "its state is unknown here (" + active.error().message + ")");
    return Ok();
  }
  if (*active) {
    return env.plan.Do("stop " + std::string(kSquidUnit) + " (--no-block)",
                       "the site's proxy replaces this VM's Squid",
                       [&] { return env.systemd.StopNoBlock(kSquidUnit); });
  }
  return Ok();
}

}  // namespace

std::vector<SettingSpec> SoftwareProxySettings(const std::vector<std::string>& roles) {
  SettingSpec enabled;
  enabled.name = kProxyEnabled;
  enabled.type = SettingType::kBool;
  enabled.default_value = "NO";
  enabled.description =
      "Use the site's CernVM-FS proxy (ONEAPP_SOFTWARE_PROXY_URL): the storage role then runs "
      "no Squid.";
  enabled.roles = roles;

  SettingSpec url;
  url.name = kProxyUrl;
  url.type = SettingType::kString;
  url.description =
      "The site's CernVM-FS proxy, http(s)://host[:port]; required with "
      "ONEAPP_SOFTWARE_PROXY_ENABLED, ignored without it.";
  url.roles = roles;

  SettingSpec nets;
  nets.name = kSquidNets;
  nets.type = SettingType::kList;
  nets.description =
      "Networks allowed to use the storage role's Squid (IPv4 CIDRs); empty means the compute "
      "network (the CIDR of the compute NIC, see ONEAPP_COMPUTE_NETWORK).";
  nets.roles = roles;
  nets.pattern = kIpv4CidrPattern;
  nets.expected = "an IPv4 network in CIDR notation such as 10.1.0.0/24";

  SettingSpec destinations;
  destinations.name = kSquidDestinations;
  destinations.type = SettingType::kList;
  destinations.default_value = kDefaultDestinations;
  destinations.description =
      "The only servers the storage role's Squid fetches from: host names, or domains with a "
      "leading dot (their subdomains too), over HTTP on ports 80 and 8000 (CernVM-FS stratum-1 "
      "servers); never this VM, link-local addresses or any other destination.";
  destinations.roles = roles;
  destinations.pattern =
      "\\.?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
      "[A-Za-z0-9])?)+";
  destinations.expected = "a host name such as cvmfs.example.org or a domain such as .example.org";
  return {enabled, url, nets, destinations};
}

Result<std::string> SiteProxyUrl(const Settings& settings) {
  if (!settings.GetBool(kProxyEnabled)) return std::string();
  const std::string& url = settings.GetString(kProxyUrl);
  const char* expected =
      "expected an http(s) URL without whitespace such as http://squid.example.org:3128";
  if (url.find_first_not_of(" \t") == std::string::npos) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("{} is empty but {}=YES: give the site's CernVM-FS proxy; {}",
                            kProxyUrl, kProxyEnabled, expected));
  }
  static const std::regex kUrl(
      "https?://([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\\[[0-9A-Fa-f:.]+\\])"
      "(:([0-9]{1,5}))?(/[^\\s]*)?",
      std::regex::ECMAScript | std::regex::icase);
  std::smatch m;
  bool ok = std::regex_match(url, m, kUrl);
  if (ok && m[4].matched && std::stol(m[4].str()) > 65535) ok = false;  // at most 5 digits
  if (!ok) {
    return Fail(ErrorKind::kInvalidInput, fmt::format("{}='{}' is not valid ({}=YES): {}",
                                                      kProxyUrl, url, kProxyEnabled, expected));
  }
  return url;
}

int CacheMbFor(std::optional<long long> fs_mb) {
  if (!fs_mb || *fs_mb <= 0) return kCacheMb;
  return static_cast<int>(
      std::clamp<long long>(*fs_mb * kCachePercent / 100, kCacheMinMb, kCacheMb));
}

namespace {

// The size in MB of the file system that holds the cache directory (`stat -f`: its block
// size and blocks), nullopt when it cannot be read (logged).
std::optional<long long> CacheFileSystemMb(RoleEnv& env) {
  Command c;
  c.argv = {"stat", "-f", "-c", "%S %b", env.files.HostPath(kCacheDir)};
  c.timeout = Duration(10000);
  auto r = env.runner.Run(c);
  long long block = 0, blocks = 0;
  if (r && r->ok()) {
    std::istringstream in(r->out);
    if (in >> block >> blocks && block > 0 && blocks > 0) return block * blocks / (1024 * 1024);
  }
  log::Warn("storage: the size of the file system of {} is unknown ({}): Squid's cache gets {} MB",
            kCacheDir, r ? (r->ok() ? "'" + r->out + "'" : ProcessText(*r)) : r.error().message,
            kCacheMb);
  return std::nullopt;
}

}  // namespace

std::string RenderSquidConf(const SquidConfig& config) {
  std::string nets = fmt::format("{}", fmt::join(config.nets, " "));
  std::string out = std::string(kHeader) + ": the CernVM-FS proxy of the\n";
  out +=
      "# compute network. Rewritten by every configure; the packaged file is kept as\n"
      "# squid.conf.one-hpc-orig. Change ONEAPP_SQUID_NETS, or use a site proxy with\n"
      "# ONEAPP_SOFTWARE_PROXY_ENABLED, rather than this file.\n"
      "http_port " +
      std::to_string(kSquidPort) +
      "\n"
      "\n"
      "# Who may use it: the compute network (ONEAPP_SQUID_NETS) and this VM; nothing else.\n"
      "acl localnet src " +
      nets +
      "\n"
      "# What it fetches: CernVM-FS over HTTP from ONEAPP_SQUID_DESTINATIONS, nothing else (no\n"
      "# open proxy for jobs: never this VM, a link-local address, or any other server).\n"
      "# -n: an address in a URL is never looked up backwards (its owner chooses that name).\n"
      "acl cvmfs_servers dstdomain -n " +
      fmt::format("{}", fmt::join(config.destinations, " ")) +
      "\n"
      "acl cvmfs_ports port " +
      kStratumPorts +
      "\n"
      "acl link_local dst 169.254.0.0/16 fe80::/10\n"
      "http_access allow localhost manager\n"
      "http_access deny manager\n"
      "http_access deny CONNECT\n"
      "http_access deny !cvmfs_ports\n"
      "http_access deny to_localhost\n"
      "http_access deny link_local\n"
      "http_access deny !cvmfs_servers\n"
      "http_access allow localnet\n"
      "http_access allow localhost\n"
      "http_access deny all\n"
      "\n"
      "# CernVM-FS (its documentation's local proxy settings): large objects on disk, small\n"
      "# ones in memory, one upstream fetch for many clients asking at once.\n"
      "cache_mem 256 MB\n"
      "maximum_object_size_in_memory 128 KB\n"
      "maximum_object_size 1024 MB\n"
      "cache_dir ufs " +
      std::string(kCacheDir) + " " + std::to_string(config.cache_mb) +
      " 16 256\n"
      "collapsed_forwarding on\n"
      "minimum_expiry_time 0\n"
      "max_filedescriptors 8192\n"
      "coredump_dir /var/spool/squid\n"
      "# Debian rotates the logs with logrotate.\n"
      "logfile_rotate 0\n"
      "refresh_pattern . 0 20% 4320\n";
  return out;
}

Status ParseCheck(ProcessRunner& runner, const std::string& host_path) {
  Command c;
  c.argv = {"squid", "-k", "parse", "-f", host_path};
  c.timeout = Duration(30000);
  auto r = runner.Run(c);
  if (!r) {
    return Fail(
        ErrorKind::kProcess,
        "cannot run squid -k parse (Debian package squid installed?): " + r.error().message);
  }
  if (r->timed_out) {
    return Fail(ErrorKind::kProcess, "squid -k parse -f " + host_path + " timed out after 30 s");
  }
  if (!r->ok()) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("squid -k parse rejected the generated CernVM-FS proxy configuration "
                            "(exit {}); {} is left as it was:\n{}",
                            r->exit_code, kSquidConf, Complaints(r->err + r->out)));
  }
  return Ok();
}

Status EnsureCvmfsProxy(RoleEnv& env, const std::string& compute_net) {
  auto url = SiteProxyUrl(env.settings);
  if (!url) return Fail(url.error());
  if (!url->empty()) return DisableSquid(env, *url);

  SquidConfig config;
  config.nets = env.settings.GetList(kSquidNets);
  if (config.nets.empty()) config.nets = {compute_net};
  config.destinations = env.settings.GetList(kSquidDestinations);
  if (config.destinations.empty()) {  // a blank input: the default servers
    std::istringstream defaults(kDefaultDestinations);
    for (std::string d; defaults >> d;) config.destinations.push_back(d);
  }
  config.cache_mb = CacheMbFor(CacheFileSystemMb(env));
  log::Info("storage: CernVM-FS proxy (Squid) on :{} for {}, {} MB of cache on disk", kSquidPort,
            fmt::join(config.nets, " "), config.cache_mb);
  std::string content = RenderSquidConf(config);

  auto old = env.files.ReadIfExists(kSquidConf);
  if (!old) return Fail(old.error());
  bool changed = !old->has_value() || **old != content;
  if (old->has_value() && (*old)->rfind(kHeader, 0) != 0 && !env.files.Exists(kSquidConfOriginal)) {
    auto s =
        env.plan.Do(std::string("keep the packaged ") + kSquidConf + " as " + kSquidConfOriginal,
                    "one-hpc replaces it; the original stays for reference",
                    [&] { return env.files.WriteAtomic(kSquidConfOriginal, **old, 0644); });
    if (!s) return s;
  }
  if (!changed) {
    env.plan.Keep(kSquidConf, "already up to date");
  } else {
    std::string why = old->has_value() ? "the CernVM-FS proxy configuration differs"
                                       : "the CernVM-FS proxy configuration is missing";
    auto s = env.plan.Do(
        std::string("write ") + kSquidConf + " (checked with squid -k parse first)",
        why + " (localnet " + fmt::format("{}", fmt::join(config.nets, " ")) + ")",
        [&]() -> Status {
          if (auto w = env.files.WriteAtomic(kSquidConfCandidate, content, 0644); !w) return w;
          auto checked = ParseCheck(env.runner, env.files.HostPath(kSquidConfCandidate));
          auto removed = env.files.Remove(kSquidConfCandidate);
          if (!checked) return checked;
          if (!removed) return removed;
          return env.files.WriteAtomic(kSquidConf, content, 0644);
        });
    if (!s) return s;
  }
  if (auto s = EnsureUnitEnabled(env, kSquidUnit, "multi-user.target",
                                 "the CernVM-FS proxy must come back after a reboot");
      !s) {
    return s;
  }
  return EnsureUnitRunning(env, kSquidUnit, changed, "its configuration changed",
                           "serves CernVM-FS to the compute network on :3128");
}

}  // namespace onehpc::squid
