#include "roles/ood/portal_web.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/retry.h"
#include "roles/ensure.h"
#include "roles/names.h"
#include "roles/ood/ood_yaml.h"
#include "roles/ood/portal_login.h"
#include "roles/role.h"

namespace onehpc::ood {
namespace {

constexpr Duration kGeneratorTimeout{120000};
// Apache is started --no-block; a portal that does not answer by then is an ERROR.
constexpr Duration kProbeDeadline{90000};
constexpr char kSitesEnabled[] = "/etc/apache2/sites-enabled";
constexpr char kDefaultSite[] = "000-default";
constexpr char kPortalSiteName[] = "ood-portal";

// The generator's virtual host enabled, Debian's "It works" site not: the first virtual host
// on port 80 is then the portal's redirect to its HTTPS name, whatever name a user typed.
Status EnsureSites(RoleEnv& env) {
  const std::string portal = fmt::format("{}/{}.conf", kSitesEnabled, kPortalSiteName);
  if (env.files.Exists(portal)) {
    env.plan.Keep("site " + std::string(kPortalSiteName), "enabled (" + portal + ")");
  } else if (auto s = env.plan.Do(fmt::format("a2ensite {}", kPortalSiteName),
                                  "Apache serves the virtual host Open OnDemand generated",
                                  [&] {
                                    return RunA2(env, {"a2ensite", "-q", kPortalSiteName});
                                  });
             !s) {
    return s;
  }
  const std::string def = fmt::format("{}/{}.conf", kSitesEnabled, kDefaultSite);
  if (!env.files.Exists(def)) return Ok();
  return env.plan.Do(fmt::format("a2dissite {}", kDefaultSite),
                     "plain HTTP on any name must reach the portal's redirect, never Debian's "
                     "default page",
                     [&] {
                       return RunA2(env, {"a2dissite", "-q", kDefaultSite});
                     });
}

// Runs the generator (in a dry run: says it would); `changed` tells whether it rewrote the
// virtual host.
Status RunGenerator(RoleEnv& env, bool& changed) {
  return env.plan.Do(
      fmt::format("{} --detailed-exitcodes", kUpdateOodPortal),
      "Open OnDemand's generator renders the virtual host from ood_portal.yml", [&]() -> Status {
        Command c;
        c.argv = {kUpdateOodPortal, "--detailed-exitcodes"};
        c.timeout = kGeneratorTimeout;
        auto r = env.runner.Run(c);
        if (!r) return Fail(r.error());
        if (r->timed_out) {
          return Fail(ErrorKind::kProcess, fmt::format("{} timed out after {} s", kUpdateOodPortal,
                                                       kGeneratorTimeout.count() / 1000));
        }
        auto result = InterpretGenerator(r->exit_code, r->out + r->err);
        if (!result) return Fail(result.error());
        changed = *result == GeneratorResult::kChanged;
        log::Info("portal: {} {}", kUpdateOodPortal,
                  changed ? "wrote a new virtual host" : "found the virtual host up to date");
        return Ok();
      });
}

// OneGate refuses a value with a comma (it would cut the attribute there): the image's own
// variant text may hold one.
std::string ForOneGate(std::string text) {
  for (char& c : text) {
    if (c == ',') c = ';';
  }
  return text;
}

}  // namespace

std::string OpenOnDemandPresence::Describe() const {
  if (installed) return "installed";
  if (claimed) {
    return fmt::format("missing: {} says the image has Open OnDemand, but {} is not there",
                       kImageInfoFile, kUpdateOodPortal);
  }
  std::string what = "absent: no Open OnDemand in this image";
  if (!variant.empty()) what += " (" + variant + ")";
  return what + "; the portal serves Slurm and accounting and the users but not the web portal";
}

Result<OpenOnDemandPresence> FindOpenOnDemand(const Files& files) {
  OpenOnDemandPresence p;
  p.installed = files.Exists(kUpdateOodPortal);
  auto text = files.ReadIfExists(kImageInfoFile);
  if (!text) return Fail(text.error());
  if (!text->has_value()) return p;
  auto j = nlohmann::json::parse(**text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || (j.contains("open_ondemand") && !j["open_ondemand"].is_boolean()) ||
      (j.contains("variant") && !j["variant"].is_string())) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("{} is not what the image build writes (a JSON object with a "
                            "boolean \"open_ondemand\" and a string \"variant\")",
                            kImageInfoFile));
  }
  p.claimed = j.value("open_ondemand", false);
  p.variant = j.value("variant", "");
  return p;
}

Result<GeneratorResult> InterpretGenerator(int exit_code, const std::string& output) {
  switch (exit_code) {
    case 0:
      return GeneratorResult::kUnchanged;
    case 3:
      return GeneratorResult::kChanged;
    case 4:
      return Fail(
          ErrorKind::kUnsafe,
          fmt::format("{} was edited by hand (it no longer matches {}), so Open "
                      "OnDemand's generator left it as it is and wrote the new one to "
                      "{}.new; one-hpc never overwrites it. Move the change into "
                      "ood_portal.yml's custom directives or drop it, then remove {} "
                      "(or run {} --force) and reconfigure",
                      kPortalSite, kPortalSiteSum, kPortalSite, kPortalSite, kUpdateOodPortal));
    default: {
      // Its last words: the generator prints the reason last (then a line about --help).
      std::string text = output;
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      if (text.size() > 400) text = "..." + text.substr(text.size() - 400);
      return Fail(ErrorKind::kProcess, fmt::format("{} --detailed-exitcodes exited {}: {}",
                                                   kUpdateOodPortal, exit_code, text));
    }
  }
}

Status ProbePortal(HttpTransport& http, const std::string& servername, const PortalLogin& login) {
  const bool form = login.kind == LoginKind::kForm;
  HttpRequest request;
  request.method = "GET";
  request.url = fmt::format("https://{}{}", servername, form ? kLoginPage : "/pun/sys/dashboard/");
  request.ca_file = fmt::format("{}/{}.crt", kOodSslDir, servername);
  request.resolve = fmt::format("{}:443:127.0.0.1", servername);
  request.connect_timeout = Duration(3000);
  request.total_timeout = Duration(10000);
  request.max_response_bytes = std::size_t{1} << 20;
  auto r = http.Send(request);
  if (!r) return Fail(r.error());
  std::string expected;
  bool answers = false;
  switch (login.kind) {
    case LoginKind::kForm:
      expected = "login form";
      answers = r->status == 200 && r->body.find("name=\"httpd_password\"") != std::string::npos;
      break;
    case LoginKind::kBasic:
      expected = "Basic login (401)";
      answers = r->status == 401;
      break;
    case LoginKind::kOidc: {
      // mod_auth_openidc sends the browser to the provider's authorization endpoint, with
      // the portal's client id and redirect URI (Apache's 302 page repeats the Location).
      expected = "redirect to the OpenID Connect provider";
      const std::string redirect = fmt::format("https://{}{}", servername, kOidcRedirectPath);
      answers =
          r->status == 302 &&
          r->body.find("client_id=" + PercentEncode(login.oidc.client_id)) != std::string::npos &&
          r->body.find("redirect_uri=" + PercentEncode(redirect)) != std::string::npos;
      if (!answers && r->status >= 500) {
        expected += fmt::format(" (can the portal read {}? see /var/log/apache2/error.log)",
                                OidcMetadataUrl(login.oidc.issuer));
      }
      break;
    }
  }
  if (answers) return Ok();
  return Fail(ErrorKind::kNetwork,
              fmt::format("GET {} answered HTTP {}, not the {}", request.url, r->status, expected));
}

Status ServeOpenOnDemand(RoleEnv& env, const std::string& servername, const PortalLogin& login,
                         bool served_changed, bool jail_changed) {
  auto presence = FindOpenOnDemand(env.files);
  if (!presence) return Fail(presence.error());
  if (!presence->installed) {
    if (presence->claimed)
      return Fail(ErrorKind::kNotFound, "Open OnDemand " + presence->Describe());
    log::Warn("portal: Open OnDemand {}", presence->Describe());
    env.plan.Keep("the web portal", presence->Describe());
    if (env.publish != nullptr)
      env.publish->emplace_back(kAttrOpenOnDemand, ForOneGate(presence->Describe()));
    return Ok();
  }
  bool generated = false;
  if (auto s = RunGenerator(env, generated); !s) return s;
  // The generator writes the virtual host with the default mode (0644): with OIDC it holds the
  // client secret and the cookie passphrase, so it is made root-only (same bytes: its checksum
  // still matches). Not a change of what Apache serves.
  if (login.kind == LoginKind::kOidc && env.files.Exists(kPortalSite)) {
    auto text = env.files.Read(kPortalSite);
    if (!text) return Fail(text.error());
    if (auto s = EnsureFile(env, kPortalSite, *text, 0600, FileOwner{"root", "root"},
                            "the virtual host holds the OIDC client secret: root only");
        !s) {
      return Fail(s.error());
    }
  }
  const size_t mark = env.plan.Mark();
  if (auto s = EnsureSites(env); !s) return s;
  const bool restart = served_changed || generated || env.plan.ChangedSince(mark);
  if (auto s = EnsureUnitEnabled(env, kApacheUnit, "multi-user.target",
                                 "Apache serves Open OnDemand (the image keeps it disabled)");
      !s) {
    return s;
  }
  if (auto s = EnsureUnitRunning(env, kApacheUnit, restart,
                                 "what Apache serves changed (virtual host, certificate, login "
                                 "or modules)",
                                 "Apache serves Open OnDemand");
      !s) {
    return s;
  }
  // READY only once the portal answers as a user meets it (a check, not a change: a plan
  // and a second run record nothing).
  if (!env.plan.dry_run()) {
    const std::string what = fmt::format("the portal answers on https://{}/", servername);
    log::Info("portal: waiting until {} [started]", what);
    auto answered = Retry<bool>(
        RetryPolicy::Until(kProbeDeadline), env.clock, what,
        [](const Error& e) { return e.kind == ErrorKind::kNetwork; },
        [&]() -> Result<bool> {
          if (auto s = ProbePortal(env.http, servername, login); !s) return Fail(s.error());
          return true;
        });
    if (!answered) {
      log::Error("portal: {} [failed]: {}", what, answered.error().message);
      return Fail(answered.error().WithContext(
          "Apache runs but the portal does not answer as it should (journalctl -u apache2, "
          "/var/log/apache2/error.log)"));
    }
    log::Info("portal: {} [finished]", what);
  }
  // The jail reads Apache's error logs: fail2ban starts once they exist.
  if (auto s = EnsureLoginGuard(env, login, jail_changed); !s) return s;
  if (env.publish != nullptr) {
    env.publish->emplace_back(kAttrOpenOnDemand, ForOneGate(presence->Describe()));
    env.publish->emplace_back(kAttrPortalUrl, "https://" + servername + "/");
  }
  return Ok();
}

}  // namespace onehpc::ood
