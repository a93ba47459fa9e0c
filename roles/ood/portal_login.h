// How the portal's users log in. By default a session login built from Debian's Apache modules:
// a login form (mod_auth_form) checked by Debian's pwauth (a setuid helper that only the web
// server's group may run) through mod_authnz_external, with a PAM stack that admits only the
// users of ONEAPP_AUTH_LOCAL_USERS and locks a user out for a while after repeated failures;
// the session is a cookie encrypted and authenticated with a key only the portal holds
// (mod_session_crypto), with an idle limit (SessionMaxAge, renewed at each request), a
// lifetime counted from the login (a signed login time, checked by a Lua hook) and a logout
// that ends it. HTTP Basic over TLS (ONEAPP_PORTAL_LOGIN=basic) stays as a discouraged
// opt-in. Apache never reads /etc/shadow.
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

/// ONEAPP_PORTAL_LOGIN: the login form (default) or HTTP Basic (opt-in, discouraged).
inline constexpr const char* kPortalLoginVar = "ONEAPP_PORTAL_LOGIN";
inline constexpr const char* kLoginForm = "form";
inline constexpr const char* kLoginBasic = "basic";

/// The session key (mod_session_crypto): random, made once, root only (Apache reads it as
/// root when it starts).
inline constexpr const char* kSessionKeyFile = "/etc/one-hpc/portal-session.key";
/// The key of the login cookie's HMAC: root:www-data 0640 (Apache's workers read it).
inline constexpr const char* kStampKeyFile = "/etc/one-hpc/portal-stamp.key";
/// The login page, the lifetime check and the login stamp (mod_lua).
inline constexpr const char* kLoginLuaFile = "/etc/one-hpc/portal-login.lua";
/// The portal's own locations (Open OnDemand uses /pun, /nginx, /node, /rnode, /oidc,
/// /public, /logout, /register, /dex).
inline constexpr const char* kLoginPage = "/one-hpc/login";
inline constexpr const char* kLoginCheck = "/one-hpc/login-check";
inline constexpr const char* kLoginStamp = "/one-hpc/session";
inline constexpr const char* kLogoutLocation = "/one-hpc/logout";
inline constexpr const char* kExpiredLocation = "/one-hpc/expired";
/// The session cookie, and the login cookie (login time, signed).
inline constexpr const char* kSessionCookie = "onehpc_session";
inline constexpr const char* kLoginCookie = "onehpc_login";
/// Session limits: idle (no request for that long ends it) and lifetime (from the login).
inline constexpr int kSessionIdleSeconds = 3600;
inline constexpr int kSessionLifetimeSeconds = 36000;

enum class LoginKind { kForm, kBasic };

struct PortalLogin {
  LoginKind kind = LoginKind::kForm;
  int idle_seconds = kSessionIdleSeconds;
  int lifetime_seconds = kSessionLifetimeSeconds;
};

/// The login of ONEAPP_PORTAL_LOGIN (validated by the settings: "form" or "basic").
PortalLogin PortalLoginFrom(const std::string& value);

/// The `auth` lines of ood_portal.yml (copied by Open OnDemand into each protected Location).
std::vector<std::string> PortalAuthLines(const PortalLogin& login);
/// The `custom_vhost_directives` of ood_portal.yml (copied into the <VirtualHost>): the
/// external authenticator `pwauth`; for the form, the session, the login page, the login and
/// logout handlers.
std::vector<std::string> PortalVhostDirectives(const PortalLogin& login);
/// ood_portal.yml's `logout_redirect`: where Open OnDemand's /logout (the dashboard's "Log
/// Out") sends the user. The form's ends the session; Basic has no logout (a browser keeps
/// Basic credentials until it closes): the dashboard's page says so.
std::string PortalLogoutRedirect(const PortalLogin& login);
/// /etc/pam.d/pwauth as one-hpc writes it.
std::string RenderPwauthPam();
/// kLoginLuaFile: the login page, the stamp of the login time and the lifetime check.
std::string RenderLoginLua(const PortalLogin& login);
/// The Apache modules the generated configuration uses (OnDemand's own and ours).
std::vector<std::string> PortalApacheModules(LoginKind kind = LoginKind::kForm);

/// Runs one of Debian's a2enmod, a2ensite, a2dissite (argv, bounded): they only make links under
/// /etc/apache2 (and note it in /var/lib/apache2); they never start Apache.
Status RunA2(RoleEnv& env, std::vector<std::string> argv);

/// The users file, pwauth's PAM stack, the Apache modules (a2enmod, only those not enabled
/// yet) and, for the form, the session key (made once) and the Lua file.
Status EnsurePortalLogin(RoleEnv& env, const std::vector<LocalUser>& users,
                         const PortalLogin& login);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_PORTAL_LOGIN_H_
