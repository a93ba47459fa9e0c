// How the portal's users log in. By default a session login built from Debian's Apache modules:
// a login form (mod_auth_form) checked by Debian's pwauth (a setuid helper that only the web
// server's group may run) through mod_authnz_external, with a PAM stack that admits only the
// users of ONEAPP_AUTH_LOCAL_USERS and makes every failure wait; guessing is stopped per
// source address, not per user (fail2ban reads Apache's failed logins and refuses the address
// for a while), so that nobody can lock a user out; the session is a cookie encrypted and
// authenticated with a key only the portal holds (mod_session_crypto), with an idle limit
// (SessionMaxAge, renewed at each request), a lifetime counted from the login (a signed login time,
// checked by a Lua hook) and a logout that ends it. With ONEAPP_PORTAL_LOGIN=oidc the users log in
// with the site's OpenID Connect provider through Debian's mod_auth_openidc, configured by Open
// OnDemand's own generator keys (oidc_*): a claim names the local user, and only the listed users
// are admitted. HTTP Basic over TLS (ONEAPP_PORTAL_LOGIN=basic) stays as a discouraged opt-in.
// Apache never reads /etc/shadow.
#ifndef ONEHPC_ROLES_OOD_PORTAL_LOGIN_H_
#define ONEHPC_ROLES_OOD_PORTAL_LOGIN_H_

#include <string>
#include <vector>

#include "common/error.h"
#include "context/settings.h"
#include "roles/ood/users.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::ood {

/// The users pwauth's PAM stack admits (one name a line).
inline constexpr const char* kPortalUsersFile = "/etc/one-hpc/portal-users";
/// pwauth's PAM service (compiled into pwauth).
inline constexpr const char* kPwauthPamFile = "/etc/pam.d/pwauth";
/// Guessing, per source address: kLoginMaxRetry failed logins within kLoginFindTime seconds
/// refuse the address on ports 80 and 443 for kLoginBanTime seconds (fail2ban's jail
/// kLoginJail, Debian's apache-auth filter on Apache's error logs, nftables). No user is ever
/// locked out: a stranger cannot keep anyone from logging in.
inline constexpr int kLoginMaxRetry = 10;
inline constexpr int kLoginFindTime = 600;
inline constexpr int kLoginBanTime = 600;
inline constexpr const char* kLoginJail = "one-hpc-portal";
inline constexpr const char* kLoginJailFile = "/etc/fail2ban/jail.d/one-hpc-portal.conf";
inline constexpr const char* kFail2banUnit = "fail2ban.service";
/// The Apache error logs the jail reads (the server's and the virtual hosts').
inline constexpr const char* kApacheErrorLogs = "/var/log/apache2/*error*.log";

/// ONEAPP_PORTAL_LOGIN: the login form (default) or HTTP Basic (opt-in, discouraged).
inline constexpr const char* kPortalLoginVar = "ONEAPP_PORTAL_LOGIN";
inline constexpr const char* kLoginForm = "form";
inline constexpr const char* kLoginBasic = "basic";
inline constexpr const char* kLoginOidc = "oidc";

/// The site's OpenID Connect provider (ONEAPP_PORTAL_LOGIN=oidc).
inline constexpr const char* kOidcIssuerVar = "ONEAPP_PORTAL_OIDC_ISSUER";
inline constexpr const char* kOidcClientIdVar = "ONEAPP_PORTAL_OIDC_CLIENT_ID";
inline constexpr const char* kOidcClientSecretVar = "ONEAPP_PORTAL_OIDC_CLIENT_SECRET";
inline constexpr const char* kOidcUserClaimVar = "ONEAPP_PORTAL_OIDC_USER_CLAIM";
inline constexpr const char* kOidcLogoutUrlVar = "ONEAPP_PORTAL_OIDC_LOGOUT_URL";
/// The claims that can name a local user (their value must be the user's name).
inline constexpr const char* kOidcClaimUsername = "preferred_username";
inline constexpr const char* kOidcClaimSub = "sub";
/// mod_auth_openidc's redirect URI on the portal (Open OnDemand's oidc_uri).
inline constexpr const char* kOidcRedirectPath = "/oidc";
/// The key mod_auth_openidc encrypts its session and state cookies with: random, made once,
/// root only (the generator copies it into the root-only virtual host).
inline constexpr const char* kOidcPassphraseFile = "/etc/one-hpc/portal-oidc.key";

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

enum class LoginKind { kForm, kBasic, kOidc };

struct OidcLogin {
  std::string issuer;  ///< https URL; its discovery document is under it
  std::string client_id;
  std::string client_secret;  ///< secret
  std::string user_claim = kOidcClaimUsername;
  std::string logout_url;         ///< where a user lands after logging out (on the portal)
  std::string crypto_passphrase;  ///< kOidcPassphraseFile's key (secret)
};

struct PortalLogin {
  LoginKind kind = LoginKind::kForm;
  int idle_seconds = kSessionIdleSeconds;
  int lifetime_seconds = kSessionLifetimeSeconds;
  OidcLogin oidc;
  std::vector<std::string> admitted;  ///< the listed users (OIDC: the claim values admitted)
};

/// The login of ONEAPP_PORTAL_LOGIN and, for oidc, ONEAPP_PORTAL_OIDC_* (each checked by the
/// settings' patterns first). Errors name the variable: oidc without an issuer, a client id
/// or a secret; an OIDC setting given with another login; a logout URL outside
/// https://<servername>/.
Result<PortalLogin> PortalLoginFrom(const Settings& settings, const std::string& servername,
                                    const std::vector<LocalUser>& users);
/// ONEAPP_PORTAL_LOGIN and the OIDC login's settings (the portal's).
std::vector<SettingSpec> LoginSettings();
/// OpenID Connect Discovery: the provider's metadata URL for its issuer.
std::string OidcMetadataUrl(const std::string& issuer);

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
/// kLoginJailFile: the jail kLoginJail on for the form and Basic, off for OIDC (no password
/// reaches the portal); Debian 12's sshd jail off (it reads /var/log/auth.log, which an image
/// without a syslog daemon does not write, and keeps fail2ban from starting; sshd takes keys).
std::string RenderLoginJail(LoginKind kind);
/// kLoginLuaFile: the login page, the stamp of the login time and the lifetime check.
std::string RenderLoginLua(const PortalLogin& login);
/// The Apache modules the generated configuration uses (OnDemand's own and ours).
std::vector<std::string> PortalApacheModules(LoginKind kind = LoginKind::kForm);

/// Percent-encodes everything but RFC 3986's unreserved characters (a URL as a query value).
std::string PercentEncode(const std::string& text);

/// Runs one of Debian's a2enmod, a2ensite, a2dissite (argv, bounded): they only make links under
/// /etc/apache2 (and note it in /var/lib/apache2); they never start Apache.
Status RunA2(RoleEnv& env, std::vector<std::string> argv);

/// The users file, pwauth's PAM stack, the fail2ban jail, the Apache modules (a2enmod, only
/// those not enabled yet) and, for the form, the session key (made once) and the Lua file; for
/// OIDC, the passphrase of mod_auth_openidc's cookies (made once). A missing module or a
/// missing fail2ban stops it before anything is written. Returns whether the jail changed.
Result<bool> EnsurePortalLogin(RoleEnv& env, const std::vector<LocalUser>& users,
                               const PortalLogin& login);

/// fail2ban enabled and running (restarted when `jail_changed`) for the form and Basic, once
/// Apache serves the portal (the jail reads its error logs); with OIDC only restarted when it
/// runs and the jail changed (to drop it).
Status EnsureLoginGuard(RoleEnv& env, const PortalLogin& login, bool jail_changed);

}  // namespace onehpc::ood

#endif  // ONEHPC_ROLES_OOD_PORTAL_LOGIN_H_
