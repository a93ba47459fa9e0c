// The portal's web front: Open OnDemand's own generator turns ood_portal.yml into Apache's
// virtual host, and apache2.service is enabled and (re)started only when something it serves
// changed. An image without Open OnDemand (the VM lab's: OSC's repository cannot be reached
// there) configures everything else, starts no Apache, and says so in the journal, in
// `one-hpc status` and in OneGate; an image that claims Open OnDemand but lacks it is an error.
#ifndef ONEHPC_ROLES_OOD_PORTAL_WEB_H_
#define ONEHPC_ROLES_OOD_PORTAL_WEB_H_

#include <string>

#include "common/error.h"
#include "context/http.h"
#include "roles/ood/portal_login.h"
#include "roles/os/files.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::ood {

/// Where the generator writes the virtual host on Debian, and its record of what it wrote.
inline constexpr const char* kPortalSite = "/etc/apache2/sites-available/ood-portal.conf";
inline constexpr const char* kPortalSiteSum = "/etc/ood/config/ood_portal.sha256sum";
inline constexpr const char* kApacheUnit = "apache2.service";

/// Whether this image has Open OnDemand, and what it says of itself.
struct OpenOnDemandPresence {
  bool installed = false;  ///< the generator is there
  bool claimed = false;    ///< kImageInfoFile says the image has Open OnDemand
  std::string variant;     ///< kImageInfoFile's "variant" ("" when absent)
  /// One line for the journal, `status` and OneGate: "installed", or why there is none.
  std::string Describe() const;
};
/// Reads kImageInfoFile (missing: no claim) and looks for kUpdateOodPortal. A malformed file
/// is an error (kInvalidInput) naming it.
Result<OpenOnDemandPresence> FindOpenOnDemand(const Files& files);

/// What update_ood_portal --detailed-exitcodes said.
enum class GeneratorResult { kUnchanged, kChanged };
/// 0 unchanged, 3 changed; 4 (the virtual host was edited by hand, the generator left it and
/// wrote kPortalSite.new beside it) is an error (kUnsafe) that says how to resolve it;
/// anything else is an error (kProcess) with the generator's own message.
Result<GeneratorResult> InterpretGenerator(int exit_code, const std::string& output);

/// The web front, after ood_portal.yml, the certificate and the login are in place:
/// `served_changed` says whether one of those changed in this run. With Open OnDemand: runs
/// the generator, enables the site (and disables Debian's default site, so that plain HTTP on
/// any name reaches the portal's redirect), enables apache2.service and starts it, or restarts
/// it when what it serves changed, then waits (up to 90 s) until the portal answers as a user
/// meets it (ProbePortal); then fail2ban for the login's jail (EnsureLoginGuard, restarted when
/// `jail_changed`); publishes OOD_URL. Without: changes nothing of Apache and
/// publishes why in OOD_PORTAL.
Status ServeOpenOnDemand(RoleEnv& env, const std::string& servername, const PortalLogin& login,
                         bool served_changed, bool jail_changed = false);

/// One look at the portal as a user meets it: HTTPS on this VM's port 443 under the portal's
/// name, trusting only the certificate the role installed (kOodSslDir/<name>.crt), and the
/// login: the form's page (200 with the password field); with Basic, 401 on the dashboard; with
/// OIDC, the dashboard's 302 to the provider with the portal's client id and redirect URI.
/// kNetwork while it does not answer so.
Status ProbePortal(HttpTransport& http, const std::string& servername, const PortalLogin& login);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_PORTAL_WEB_H_
