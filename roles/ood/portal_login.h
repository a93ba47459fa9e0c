// How the portal's users log in: HTTP Basic over TLS, checked by Debian's pwauth (a setuid
// helper that only the web server's group may run) through mod_authnz_external, with a PAM
// stack that admits only the users of ONEAPP_AUTH_LOCAL_USERS and locks a user out for a
// while after repeated failures. Apache never reads /etc/shadow.
#ifndef ONEHPC_ROLES_OOD_PORTAL_LOGIN_H_
#define ONEHPC_ROLES_OOD_PORTAL_LOGIN_H_

#include <string>
#include <vector>

#include "common/error.h"
#include "roles/ood/users.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::ood {

/// The users pwauth's PAM stack admits (one name a line).
inline constexpr const char* kPortalUsersFile = "/etc/one-hpc/portal-users";
/// pwauth's PAM service (compiled into pwauth).
inline constexpr const char* kPwauthPamFile = "/etc/pam.d/pwauth";
/// Failures within kFailInterval seconds that lock a user for kUnlockTime seconds.
inline constexpr int kLoginDeny = 5;
inline constexpr int kLoginFailInterval = 900;
inline constexpr int kLoginUnlockTime = 600;

/// The `auth` lines of ood_portal.yml (copied by Open OnDemand into each protected Location).
std::vector<std::string> PortalAuthLines();
/// The `custom_vhost_directives` of ood_portal.yml (copied into the <VirtualHost>): the
/// definition of the external authenticator `pwauth`.
std::vector<std::string> PortalVhostDirectives();
/// /etc/pam.d/pwauth as one-hpc writes it.
std::string RenderPwauthPam();
/// The Apache modules the generated configuration uses (OnDemand's own and ours).
std::vector<std::string> PortalApacheModules();

/// Runs one of Debian's a2enmod, a2ensite, a2dissite (argv, bounded): they only make links under
/// /etc/apache2 (and note it in /var/lib/apache2); they never start Apache.
Status RunA2(RoleEnv& env, std::vector<std::string> argv);

/// The users file, pwauth's PAM stack and the Apache modules (a2enmod, only those not
/// enabled yet).
Status EnsurePortalLogin(RoleEnv& env, const std::vector<LocalUser>& users);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_PORTAL_LOGIN_H_
