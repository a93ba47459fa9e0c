// A stand-in for Open OnDemand's ood-portal-generator (which comes from OSC's repository,
// unreachable here), reduced to what the portal's login needs: the virtual host on the port
// of ood_portal.yml with its `ssl` lines and `custom_vhost_directives`, `/` redirected to the
// dashboard, `/logout` redirected to `logout_redirect`, and the `auth` lines copied into the
// protected <Location "/pun">, which serves a static page from `docroot` standing for the
// dashboard, with the cookie-path rewrite OSC's template puts there, and, when ood_portal.yml has
// the oidc_* keys, mod_auth_openidc's directives and the <Location> of its redirect URI as OSC's
// template writes them (checked against
// ood-portal-generator/templates/ood-portal.conf.erb in OSC/ondemand). Used by PortalApacheTest (in
// a private namespace) and, through ood-portal-generator-standin, on the real portal VM.
#ifndef ONEHPC_TESTS_FAKES_OOD_PORTAL_GENERATOR_H_
#define ONEHPC_TESTS_FAKES_OOD_PORTAL_GENERATOR_H_

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <string>

namespace onehpc::fakes {

/// `address` = what the <VirtualHost> binds ("*" or an address).
inline std::string OodLoginVirtualHost(const YAML::Node& portal, const std::string& address,
                                       const std::string& docroot) {
  std::string vhost;
  if (portal["ssl"]) {  // OSC's template: plain HTTP, any name, to the portal's HTTPS name
    vhost += fmt::format(
        "<VirtualHost {}:80>\n  ServerName {}\n  RewriteEngine On\n"
        "  RewriteRule ^(.*) https://{}:{}$1 [R=301,NE,L]\n</VirtualHost>\n",
        address, portal["servername"].as<std::string>(), portal["servername"].as<std::string>(),
        portal["port"].as<int>());
  }
  vhost += fmt::format("<VirtualHost {}:{}>\n  ServerName {}\n  SSLEngine On\n", address,
                       portal["port"].as<int>(), portal["servername"].as<std::string>());
  for (const auto& line : portal["ssl"]) vhost += "  " + line.as<std::string>() + "\n";
  if (portal["oidc_uri"] && portal["oidc_provider_metadata_url"] && portal["oidc_client_id"]) {
    // OSC's template: these lines in this order, with its defaults for the keys not given.
    auto get = [&](const char* key, const std::string& fallback) {
      return portal[key] ? portal[key].as<std::string>() : fallback;
    };
    vhost += fmt::format("  OIDCProviderMetadataURL {}\n  OIDCClientID {}\n",
                         get("oidc_provider_metadata_url", ""), get("oidc_client_id", ""));
    if (portal["oidc_client_secret"])
      vhost += "  OIDCClientSecret " + get("oidc_client_secret", "") + "\n";
    vhost += fmt::format(
        "  OIDCRedirectURI {}\n  OIDCRemoteUserClaim {}\n  OIDCScope \"{}\"\n"
        "  OIDCCryptoPassphrase {}\n  OIDCSessionInactivityTimeout {}\n"
        "  OIDCSessionMaxDuration {}\n  OIDCStateMaxNumberOfCookies 10 true\n"
        "  OIDCCookieSameSite Off\n",
        get("oidc_uri", ""), get("oidc_remote_user_claim", "preferred_username"),
        get("oidc_scope", "openid profile email"), get("oidc_crypto_passphrase", ""),
        get("oidc_session_inactivity_timeout", "28800"), get("oidc_session_max_duration", "28800"));
  }
  for (const auto& line : portal["custom_vhost_directives"]) {
    vhost += "  " + line.as<std::string>() + "\n";
  }
  vhost += "  RedirectMatch ^/$ /pun/sys/dashboard\n";
  if (portal["logout_redirect"]) {
    vhost +=
        fmt::format("  Redirect \"/logout\" \"{}\"\n", portal["logout_redirect"].as<std::string>());
  }
  vhost += fmt::format("  Alias /pun {}/pun\n", docroot);
  vhost += fmt::format("  <Directory {}>\n    Require all granted\n  </Directory>\n", docroot);
  vhost += "  <Location \"/pun\">\n";
  for (const auto& line : portal["auth"]) vhost += "    " + line.as<std::string>() + "\n";
  // OSC's ProxyPassReverseCookiePath for the PUNs: a cookie path outside /pun becomes /pun.
  vhost +=
      "    Header edit* Set-Cookie \";\\s*(?i)Path\\s*=(?-i)(?!\\s*/pun)[^;]*\" \"; Path=/pun\"\n";
  vhost += "  </Location>\n";
  if (portal["oidc_uri"]) {
    vhost += fmt::format("  <Location \"{}\">\n", portal["oidc_uri"].as<std::string>());
    for (const auto& line : portal["auth"]) vhost += "    " + line.as<std::string>() + "\n";
    vhost += "  </Location>\n";
  }
  vhost += "</VirtualHost>\n";
  return vhost;
}

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_OOD_PORTAL_GENERATOR_H_
