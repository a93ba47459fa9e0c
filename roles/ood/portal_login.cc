#include "roles/ood/portal_login.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "roles/ensure.h"
#include "roles/role.h"

namespace onehpc::ood {
namespace {

constexpr char kPwauth[] = "/usr/sbin/pwauth";
constexpr char kModsAvailable[] = "/etc/apache2/mods-available";
constexpr char kModsEnabled[] = "/etc/apache2/mods-enabled";
constexpr Duration kA2Timeout{60000};

}  // namespace

Status RunA2(RoleEnv& env, std::vector<std::string> argv) {
  Command c;
  c.argv = std::move(argv);
  c.timeout = kA2Timeout;
  auto r = RunChecked(env.runner, c);
  return r ? Ok() : Fail(r.error());
}

std::vector<std::string> PortalAuthLines() {
  return {"AuthType Basic", "AuthName \"Open OnDemand\"", "AuthBasicProvider external",
          "AuthExternal pwauth", "Require valid-user"};
}

std::string RenderPwauthPam() {
  const std::string opts = fmt::format("deny={} fail_interval={} unlock_time={}", kLoginDeny,
                                       kLoginFailInterval, kLoginUnlockTime);
  return fmt::format(
      "# Written by one-hpc: the Open OnDemand portal's login (Apache, mod_authnz_external,\n"
      "# pwauth). Only the users of ONEAPP_AUTH_LOCAL_USERS ({0}); {1} failures within {2} s\n"
      "# lock a user out for {3} s (faillock --user NAME --reset unlocks).\n"
      "auth     requisite  pam_nologin.so\n"
      "auth     requisite  pam_listfile.so item=user sense=allow file={0} onerr=fail\n"
      "auth     required   pam_faillock.so preauth silent {4}\n"
      "auth     [success=1 default=bad] pam_unix.so\n"
      "auth     [default=die] pam_faillock.so authfail {4}\n"
      "auth     sufficient pam_faillock.so authsucc {4}\n"
      "auth     required   pam_deny.so\n"
      "account  required   pam_faillock.so\n"
      "account  required   pam_unix.so\n",
      kPortalUsersFile, kLoginDeny, kLoginFailInterval, kLoginUnlockTime, opts);
}

std::vector<std::string> PortalVhostDirectives() {
  // mod_authnz_external keeps its authenticators per virtual host.
  return {fmt::format("DefineExternalAuth pwauth pipe {}", kPwauth)};
}

std::vector<std::string> PortalApacheModules() {
  // OnDemand's package enables rewrite, lua, headers, proxy, proxy_http and proxy_wstunnel;
  // ssl (with its session cache) serves HTTPS, authnz_external asks pwauth.
  return {"ssl",     "socache_shmcb", "authnz_external", "rewrite",       "lua",
          "headers", "proxy",         "proxy_http",      "proxy_wstunnel"};
}

Status EnsurePortalLogin(RoleEnv& env, const std::vector<LocalUser>& users) {
  // The modules first: a missing one stops the run before anything is written.
  std::vector<std::string> missing;
  for (const auto& m : PortalApacheModules()) {
    if (env.files.Exists(fmt::format("{}/{}.load", kModsEnabled, m))) continue;
    if (!env.files.Exists(fmt::format("{}/{}.load", kModsAvailable, m))) {
      return Fail(ErrorKind::kNotFound,
                  fmt::format("the Apache module {} is not installed ({}/{}.load): the image "
                              "needs apache2 and libapache2-mod-authnz-external",
                              m, kModsAvailable, m));
    }
    missing.push_back(m);
  }
  const FileOwner root{"root", "root"};
  std::string names;
  for (const auto& u : users) names += u.name + "\n";
  if (auto s = EnsureFile(env, kPortalUsersFile, names, 0644, root,
                          "the users who may log in to the portal");
      !s) {
    return Fail(s.error());
  }
  if (auto s = EnsureFile(env, kPwauthPamFile, RenderPwauthPam(), 0644, root,
                          "the portal's login admits the listed users and locks out guessing");
      !s) {
    return Fail(s.error());
  }
  if (missing.empty()) {
    env.plan.Keep("Apache modules",
                  fmt::format("enabled: {}", fmt::join(PortalApacheModules(), " ")));
    return Ok();
  }
  std::vector<std::string> argv = {"a2enmod", "-q"};
  argv.insert(argv.end(), missing.begin(), missing.end());
  return env.plan.Do(fmt::format("a2enmod {}", fmt::join(missing, " ")),
                     "the portal's Apache configuration uses them",
                     [&] { return RunA2(env, argv); });
}

}  // namespace onehpc::ood
