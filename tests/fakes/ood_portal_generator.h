// A stand-in for Open OnDemand's ood-portal-generator (which comes from OSC's repository,
// unreachable here), reduced to what the portal's login needs: the virtual host on the port
// of ood_portal.yml with its `ssl` lines and `custom_vhost_directives`, `/` redirected to the
// dashboard, and the `auth` lines copied into the protected <Location "/pun">, which serves a
// static page from `docroot` standing for the dashboard. Used by PortalApacheTest (in a
// private namespace) and, through ood-portal-generator-standin, on the real portal VM.
#ifndef ONEHPC_TESTS_FAKES_OOD_PORTAL_GENERATOR_H_
#define ONEHPC_TESTS_FAKES_OOD_PORTAL_GENERATOR_H_

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <string>

namespace onehpc::fakes {

/// `address` = what the <VirtualHost> binds ("*" or an address).
inline std::string OodLoginVirtualHost(const YAML::Node& portal, const std::string& address,
                                       const std::string& docroot) {
  std::string vhost = fmt::format("<VirtualHost {}:{}>\n  ServerName {}\n  SSLEngine On\n", address,
                                  portal["port"].as<int>(), portal["servername"].as<std::string>());
  for (const auto& line : portal["ssl"]) vhost += "  " + line.as<std::string>() + "\n";
  for (const auto& line : portal["custom_vhost_directives"]) {
    vhost += "  " + line.as<std::string>() + "\n";
  }
  vhost += "  RedirectMatch ^/$ /pun/sys/dashboard\n";
  vhost += fmt::format("  Alias /pun {}/pun\n", docroot);
  vhost += fmt::format("  <Directory {}>\n    Require all granted\n  </Directory>\n", docroot);
  vhost += "  <Location \"/pun\">\n";
  for (const auto& line : portal["auth"]) vhost += "    " + line.as<std::string>() + "\n";
  vhost += "  </Location>\n</VirtualHost>\n";
  return vhost;
}

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_OOD_PORTAL_GENERATOR_H_
