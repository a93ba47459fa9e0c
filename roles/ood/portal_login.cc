#include "roles/ood/portal_login.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <tuple>

#include "common/log.h"
#include "roles/ensure.h"
#include "roles/names.h"
#include "roles/role.h"
#include "roles/slurm/munge.h"

namespace onehpc::ood {
namespace {

constexpr char kPwauth[] = "/usr/sbin/pwauth";
constexpr char kFail2banServer[] = "/usr/bin/fail2ban-server";
constexpr char kNft[] = "/usr/sbin/nft";
constexpr char kModsAvailable[] = "/etc/apache2/mods-available";
constexpr char kModsEnabled[] = "/etc/apache2/mods-enabled";
constexpr Duration kA2Timeout{60000};
constexpr size_t kSessionKeyBytes = 32;

// The lines that authenticate a request: the form reads the user and password from the
// session (or, with none, sends the browser to the login page); the cache (mod_authn_socache)
// spares a pwauth run per request for 300 s after a successful check.
std::vector<std::string> FormAuth(const std::string& login_required) {
  return {"AuthType form",
          fmt::format("AuthName \"{}\"", kServiceName),
          "AuthFormProvider socache external",
          "AuthnCacheProvideFor external",
          "AuthExternalProvideCache On",
          "AuthExternal pwauth",
          fmt::format("AuthFormLoginRequiredLocation \"{}\"", login_required),
          "Require valid-user"};
}

// The session's Lua: the login page (with a message for ?failed, ?out, ?expired), the login
// stamp and the lifetime check of every protected location. The stamp runs once after the
// login (kLoginStamp): it puts the login time into the session (through that location's
// SessionHeader, only into a session that has none, so that calling it again extends
// nothing) and gives the browser a second cookie, `time.HMAC-SHA1(stamp key, user|time)`.
// The check (fixups of each protected location, where mod_session has not yet decoded the
// session) verifies that cookie against the authenticated user and the lifetime. HTTP_SESSION
// (which holds the password) is read in the stamp alone and taken out of the environment.
constexpr char kLoginLua[] =
    R"LUA(-- Written by one-hpc: the portal's session login (mod_auth_form, mod_session_crypto).
-- Changes are overwritten at the next configure.
local LIFETIME = @LIFETIME@
local KEY_FILE = '@KEYFILE@'
local COOKIE = '@COOKIE@'

local function stamp_key()
  local f = io.open(KEY_FILE, 'r')
  if not f then return nil end
  local k = f:read('l')
  f:close()
  if k == nil or #k < 32 then return nil end
  return k
end

local function unhex(h)
  return (h:gsub('..', function(x) return string.char(tonumber(x, 16)) end))
end

-- HMAC-SHA1 (RFC 2104) over r:sha1, which is binary-safe.
local function hmac(r, key, msg)
  if #key > 64 then key = unhex(r:sha1(key)) end
  key = key .. string.rep('\0', 64 - #key)
  local ipad = key:gsub('.', function(c) return string.char(c:byte() ~ 0x36) end)
  local opad = key:gsub('.', function(c) return string.char(c:byte() ~ 0x5c) end)
  return r:sha1(opad .. unhex(r:sha1(ipad .. msg)))
end

local function same(a, b)
  if type(a) ~= 'string' or type(b) ~= 'string' or #a ~= #b then return false end
  local d = 0
  for i = 1, #a do d = d | (a:byte(i) ~ b:byte(i)) end
  return d == 0
end

-- Fixups of every protected location: without a valid login cookie for this user, or past
-- the lifetime, the session is ended (the expired location logs out, then shows the login
-- page).
function check(r)
  local key = stamp_key()
  local t, mac = (r:getcookie(COOKIE) or ''):match('^(%d+)%.(%x+)$')
  t = tonumber(t)
  local now = os.time()
  if key and t and r.user and same(mac, hmac(r, key, r.user .. '|' .. t)) and
     t <= now + 60 and now - t < LIFETIME then
    return apache2.DECLINED
  end
  r:warn('one-hpc: the session of ' .. tostring(r.user) .. ' has no valid login time or is past its lifetime')
  r.err_headers_out['Location'] = '@EXPIRED@'
  r.err_headers_out['Cache-Control'] = 'no-store'
  return 302
end

-- After the login: the login time into the session (once) and the login cookie.
function stamp(r)
  local s = r.subprocess_env['HTTP_SESSION'] or ''
  r.subprocess_env['HTTP_SESSION'] = nil
  local t = tonumber(('&' .. s):match('&onehpc%-login=(%d+)'))
  if not t then
    t = os.time()
    r.headers_out['X-Onehpc-Session'] = 'onehpc-login=' .. t
  end
  local key = stamp_key()
  if not key or not r.user then
    r:err('one-hpc: the portal login stamp key ' .. KEY_FILE .. ' cannot be read')
    return 500
  end
  r.headers_out['Set-Cookie'] = COOKIE .. '=' .. t .. '.' .. hmac(r, key, r.user .. '|' .. t) ..
      '; Path=/; Secure; HttpOnly; SameSite=Lax'
  r.content_type = 'text/html; charset=utf-8'
  r.headers_out['Cache-Control'] = 'no-store'
  r:puts('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">' ..
         '<meta http-equiv="refresh" content="0;url=/"><title>@TITLE@</title></head>' ..
         '<body><p>Logged in. <a href="/">Continue to the dashboard</a>.</p></body></html>')
  return apache2.OK
end

local MESSAGES = {
  failed = 'The user name or the password is wrong, or the account is locked for a while.',
  out = 'You are logged out.',
  expired = 'Your session has ended. Please log in again.',
}

function login_page(r)
  local message = MESSAGES[r.args or ''] or ''
  r.content_type = 'text/html; charset=utf-8'
  r.headers_out['Cache-Control'] = 'no-store'
  r.headers_out['X-Frame-Options'] = 'DENY'
  r.headers_out['Content-Security-Policy'] = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
  r:puts([[<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@ - log in</title>
<style>
body{font-family:sans-serif;background:#f4f6f8;margin:0}
main{max-width:22rem;margin:4rem auto;background:#fff;padding:2rem;border-radius:6px;box-shadow:0 1px 4px #0003}
h1{font-size:1.4rem;margin-top:0}label{display:block;margin-top:1rem}
input{width:100%;box-sizing:border-box;padding:.5rem;font-size:1rem}
button{margin-top:1.5rem;padding:.6rem 1.2rem;font-size:1rem}
p.message{color:#8a1c1c}
</style></head>
<body><main><h1>@TITLE@</h1>
<p class="message" role="status">]] .. message .. [[</p>
<form method="post" action="@CHECK@">
<label for="user">User name</label>
<input id="user" name="httpd_username" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="httpd_password" type="password" autocomplete="current-password" required>
<button type="submit">Log in</button>
</form></main></body></html>
]])
  return apache2.OK
end
)LUA";

// The password logins need fail2ban and nftables (nothing else stops guessing: no user is
// locked out); OIDC does not.
Status RequireFail2ban(const RoleEnv& env, LoginKind kind) {
  for (const char* tool : {kFail2banServer, kNft}) {
    if (kind == LoginKind::kOidc || env.files.Exists(tool)) continue;
    return Fail(
        ErrorKind::kNotFound,
        fmt::format("{} is not installed: the image needs fail2ban and nftables, which "
                    "stop password guessing per source address ({}={})",
                    tool, kPortalLoginVar, kind == LoginKind::kBasic ? kLoginBasic : kLoginForm));
  }
  return Ok();
}

// The jail, written with OIDC too (off) when fail2ban is there: a portal switched to OIDC
// drops the jail of its earlier login. Returns whether it changed.
Result<bool> EnsureLoginJail(RoleEnv& env, LoginKind kind) {
  if (kind == LoginKind::kOidc && !env.files.Exists(kFail2banServer)) return false;
  return EnsureFile(env, kLoginJailFile, RenderLoginJail(kind), 0644, FileOwner{"root", "root"},
                    kind == LoginKind::kOidc
                        ? "no password reaches the portal: the guessing jail is off"
                        : "fail2ban refuses a source address that keeps guessing");
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace

// A key: made once (a new one would end every session), 64 hex digits and a newline.
Status EnsureKey(RoleEnv& env, const char* path, mode_t mode, const FileOwner& owner,
                 const std::string& why) {
  auto current = env.files.ReadIfExists(path);
  if (!current) return Fail(current.error());
  std::string key = current->has_value() ? current->value() : "";
  if (key.size() < 2 * kSessionKeyBytes) {
    key.clear();
    if (!env.plan.dry_run()) {
      auto bytes = slurm::RandomBytes(kSessionKeyBytes);
      if (!bytes) return Fail(bytes.error());
      static const char* kHex = "0123456789abcdef";
      for (unsigned char c : *bytes) {
        key += kHex[c >> 4];
        key += kHex[c & 15];
      }
      key += "\n";
    }
  }
  if (!key.empty()) log::AddSecret(key);
  auto s = EnsureFile(env, path, key, mode, owner, why);
  return s ? Ok() : Fail(s.error());
}

Status RunA2(RoleEnv& env, std::vector<std::string> argv) {
  Command c;
  c.argv = std::move(argv);
  c.timeout = kA2Timeout;
  auto r = RunChecked(env.runner, c);
  return r ? Ok() : Fail(r.error());
}

std::vector<SettingSpec> LoginSettings() {
  const std::vector<std::string> roles = {kPortalRole};
  SettingSpec login;
  login.name = kPortalLoginVar;
  login.type = SettingType::kEnum;
  login.choices = {kLoginForm, kLoginOidc, kLoginBasic};
  login.default_value = kLoginForm;
  login.description =
      "How the users log in: form (a login page and an encrypted session cookie with an idle "
      "limit, a lifetime and a logout), oidc (the site's OpenID Connect provider, "
      "ONEAPP_PORTAL_OIDC_*) or basic (HTTP Basic: the browser sends the password with every "
      "request and there is no logout; discouraged by Open OnDemand).";
  login.roles = roles;

  SettingSpec issuer;
  issuer.name = kOidcIssuerVar;
  issuer.description =
      "With ONEAPP_PORTAL_LOGIN=oidc: the issuer of the site's OpenID Connect provider (its "
      "discovery document is at <issuer>/.well-known/openid-configuration).";
  issuer.roles = roles;
  issuer.pattern = "https://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%/-]*)?";
  issuer.expected = "an https URL such as https://idp.example.org/realms/hpc";

  SettingSpec client;
  client.name = kOidcClientIdVar;
  client.description =
      "With ONEAPP_PORTAL_LOGIN=oidc: the portal's client id at the provider (its redirect URI "
      "is https://<portal>/oidc).";
  client.roles = roles;
  client.pattern = "[A-Za-z0-9._~:@/+=-]{1,255}";
  client.expected = "1 to 255 characters of letters, digits and . _ ~ : @ / + = -";

  SettingSpec secret;
  secret.name = kOidcClientSecretVar;
  secret.type = SettingType::kPassword;
  secret.description =
      "With ONEAPP_PORTAL_LOGIN=oidc: the portal's client secret at the provider. Portal only: "
      "the storage VM and the workers refuse to start with it in their context.";
  secret.roles = roles;
  secret.pattern = "[A-Za-z0-9._~+/=-]{8,512}";
  secret.expected = "8 to 512 characters of letters, digits and . _ ~ + / = -";

  SettingSpec claim;
  claim.name = kOidcUserClaimVar;
  claim.type = SettingType::kEnum;
  claim.choices = {kOidcClaimUsername, kOidcClaimSub};
  claim.default_value = kOidcClaimUsername;
  claim.description =
      "With ONEAPP_PORTAL_LOGIN=oidc: the claim whose value is the local user's name; only the "
      "users of ONEAPP_AUTH_LOCAL_USERS are admitted.";
  claim.roles = roles;

  SettingSpec logout;
  logout.name = kOidcLogoutUrlVar;
  logout.description =
      "With ONEAPP_PORTAL_LOGIN=oidc: the page of the portal a user lands on after logging out "
      "(the session at the provider is ended too when it offers that); empty means the "
      "portal's front page.";
  logout.roles = roles;
  logout.pattern = "https://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%/-]*)?";
  logout.expected = "an https URL of the portal such as https://ood.example.org/";
  return {login, issuer, client, secret, claim, logout};
}

std::string OidcMetadataUrl(const std::string& issuer) {
  std::string base = issuer;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + "/.well-known/openid-configuration";
}

std::string PercentEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

Result<PortalLogin> PortalLoginFrom(const Settings& settings, const std::string& servername,
                                    const std::vector<LocalUser>& users) {
  PortalLogin login;
  const std::string& kind = settings.GetString(kPortalLoginVar);
  login.kind = kind == kLoginBasic  ? LoginKind::kBasic
               : kind == kLoginOidc ? LoginKind::kOidc
                                    : LoginKind::kForm;
  for (const auto& u : users) login.admitted.push_back(u.name);
  if (login.kind != LoginKind::kOidc) {
    for (const char* var :
         {kOidcIssuerVar, kOidcClientIdVar, kOidcClientSecretVar, kOidcLogoutUrlVar}) {
      if (settings.GetString(var).empty()) continue;
      return Fail(ErrorKind::kInvalidInput,
                  fmt::format("{} is set but {}={}: set {}={} to log in through the OpenID "
                              "Connect provider, or leave it empty",
                              var, kPortalLoginVar, kind, kPortalLoginVar, kLoginOidc));
    }
    return login;
  }
  OidcLogin& oidc = login.oidc;
  oidc.issuer = settings.GetString(kOidcIssuerVar);
  oidc.client_id = settings.GetString(kOidcClientIdVar);
  oidc.client_secret = settings.GetString(kOidcClientSecretVar);
  oidc.user_claim = settings.GetString(kOidcUserClaimVar);
  for (const auto& [var, value, what] :
       {std::tuple{kOidcIssuerVar, &oidc.issuer, "the https URL of the provider's issuer"},
        std::tuple{kOidcClientIdVar, &oidc.client_id, "the portal's client id at the provider"},
        std::tuple{kOidcClientSecretVar, &oidc.client_secret,
                   "the portal's client secret at the provider"}}) {
    if (value->empty()) {
      return Fail(ErrorKind::kInvalidInput, fmt::format("{} is empty but {}={}: expected {}", var,
                                                        kPortalLoginVar, kLoginOidc, what));
    }
  }
  const std::string portal = fmt::format("https://{}/", servername);
  oidc.logout_url = settings.GetString(kOidcLogoutUrlVar);
  if (oidc.logout_url.empty()) oidc.logout_url = portal;
  if (oidc.logout_url != portal.substr(0, portal.size() - 1) &&
      oidc.logout_url.rfind(portal, 0) != 0) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("{}='{}' is outside the portal: expected a page of {} (after a "
                            "logout, mod_auth_openidc sends the browser to the portal only)",
                            kOidcLogoutUrlVar, oidc.logout_url, portal));
  }
  return login;
}

std::vector<std::string> PortalAuthLines(const PortalLogin& login) {
  if (login.kind == LoginKind::kOidc) {
    // Several Require lines in one location: any of them admits (only the listed users).
    std::vector<std::string> lines = {"AuthType openid-connect"};
    for (const auto& name : login.admitted) {
      lines.push_back(fmt::format("Require claim {}:{}", login.oidc.user_claim, name));
    }
    if (login.admitted.empty()) lines.push_back("Require all denied");
    return lines;
  }
  if (login.kind == LoginKind::kBasic) {
    return {"AuthType Basic", fmt::format("AuthName \"{}\"", kServiceName),
            "AuthBasicProvider external", "AuthExternal pwauth", "Require valid-user"};
  }
  std::vector<std::string> lines = FormAuth(kLoginPage);
  lines.push_back(fmt::format("LuaHookFixups {} check", kLoginLuaFile));
  return lines;
}

std::string PortalLogoutRedirect(const PortalLogin& login) {
  // mod_auth_openidc's logout: ends its session, the provider's (when the provider publishes
  // an end_session_endpoint), then sends the browser to the given page of the portal.
  if (login.kind == LoginKind::kOidc) {
    return fmt::format("{}?logout={}", kOidcRedirectPath, PercentEncode(login.oidc.logout_url));
  }
  return login.kind == LoginKind::kBasic ? "/pun/sys/dashboard/logout" : kLogoutLocation;
}

std::string RenderLoginLua(const PortalLogin& login) {
  std::string lua = Replace(kLoginLua, "@LIFETIME@", std::to_string(login.lifetime_seconds));
  lua = Replace(lua, "@TITLE@", kServiceName);
  lua = Replace(lua, "@EXPIRED@", kExpiredLocation);
  lua = Replace(lua, "@KEYFILE@", kStampKeyFile);
  lua = Replace(lua, "@COOKIE@", kLoginCookie);
  return Replace(lua, "@CHECK@", kLoginCheck);
}

std::string RenderPwauthPam() {
  return fmt::format(
      "# Written by one-hpc: the Open OnDemand portal's login (Apache, mod_authnz_external,\n"
      "# pwauth). Only the users of ONEAPP_AUTH_LOCAL_USERS ({0}). Every failure waits 2 s, a\n"
      "# name not listed too (no user enumeration by timing). No user is locked out: guessing\n"
      "# is stopped per source address by fail2ban ({1}).\n"
      "auth     optional   pam_faildelay.so delay=2000000\n"
      "auth     requisite  pam_nologin.so\n"
      "auth     requisite  pam_listfile.so item=user sense=allow file={0} onerr=fail\n"
      "auth     required   pam_unix.so\n"
      "account  required   pam_unix.so\n",
      kPortalUsersFile, kLoginJailFile);
}

std::string RenderLoginJail(LoginKind kind) {
  return fmt::format(
      "# Written by one-hpc: the Open OnDemand portal's login. A source address with {0}\n"
      "# failed logins within {1} s is refused on ports 80 and 443 for {2} s (Debian's\n"
      "# apache-auth filter, nftables); `fail2ban-client set {3} unbanip ADDRESS` lets it in.\n"
      "# No user is locked out. Off with ONEAPP_PORTAL_LOGIN=oidc (no password reaches the\n"
      "# portal). Changes are overwritten at the next configure; a later file in jail.d/\n"
      "# overrides.\n"
      "\n"
      "# Debian 12's sshd jail reads /var/log/auth.log, which this image does not write (no\n"
      "# syslog daemon), and keeps fail2ban from starting; sshd takes keys only.\n"
      "[sshd]\n"
      "enabled = false\n"
      "\n"
      "[{3}]\n"
      "enabled   = {4}\n"
      "filter    = apache-auth\n"
      "port      = http,https\n"
      "logpath   = {5}\n"
      "backend   = polling\n"
      "banaction = nftables\n"
      "maxretry  = {0}\n"
      "findtime  = {1}\n"
      "bantime   = {2}\n",
      kLoginMaxRetry, kLoginFindTime, kLoginBanTime, kLoginJail,
      kind == LoginKind::kOidc ? "false" : "true", kApacheErrorLogs);
}

std::vector<std::string> PortalVhostDirectives(const PortalLogin& login) {
  // OIDC: Open OnDemand's generator writes mod_auth_openidc's directives from ood_portal.yml's
  // oidc_* keys.
  if (login.kind == LoginKind::kOidc) return {};
  // mod_authnz_external keeps its authenticators per virtual host.
  std::vector<std::string> lines = {fmt::format("DefineExternalAuth pwauth pipe {}", kPwauth)};
  if (login.kind == LoginKind::kBasic) return lines;
  // The session: everywhere on the virtual host, a cookie only this portal can read or make,
  // sent over HTTPS only, out of scripts' reach; renewed at each request (the idle limit).
  for (std::string line : {
           std::string("Session On"),
           fmt::format("SessionCookieName {} path=/;Secure;HttpOnly;SameSite=Lax", kSessionCookie),
           fmt::format("SessionCryptoPassphraseFile {}", kSessionKeyFile),
           fmt::format("SessionMaxAge {}", login.idle_seconds),
           fmt::format("LuaMapHandler ^{}$ {} login_page", kLoginPage, kLoginLuaFile),
           fmt::format("LuaMapHandler ^{}$ {} stamp", kLoginStamp, kLoginLuaFile),
           fmt::format("<Location \"{}\">", kLoginPage),
           std::string("  Require all granted"),
           std::string("</Location>"),
           fmt::format("<Location \"{}\">", kLoginCheck),
           std::string("  SetHandler form-login-handler"),
       }) {
    lines.push_back(std::move(line));
  }
  std::string failed = fmt::format("{}?failed", kLoginPage);
  for (const auto& line : FormAuth(failed)) lines.push_back("  " + line);
  lines.push_back(fmt::format("  AuthFormLoginSuccessLocation \"{}\"", kLoginStamp));
  lines.push_back("</Location>");
  // The stamp is the only place where a response may change the session (SessionHeader).
  lines.push_back(fmt::format("<Location \"{}\">", kLoginStamp));
  for (const auto& line : FormAuth(kLoginPage)) lines.push_back("  " + line);
  lines.push_back("  SessionEnv On");
  lines.push_back("  SessionHeader X-Onehpc-Session");
  lines.push_back("</Location>");
  for (const auto& [where, then] :
       {std::pair{kLogoutLocation, "out"}, std::pair{kExpiredLocation, "expired"}}) {
    lines.push_back(fmt::format("<Location \"{}\">", where));
    lines.push_back("  SetHandler form-logout-handler");
    // The realm names the session's entries that the logout clears.
    lines.push_back("  AuthType form");
    lines.push_back(fmt::format("  AuthName \"{}\"", kServiceName));
    lines.push_back("  Require all granted");
    lines.push_back(fmt::format("  AuthFormLogoutLocation \"{}?{}\"", kLoginPage, then));
    lines.push_back("  SessionMaxAge 1");
    lines.push_back(fmt::format(
        "  Header always add Set-Cookie \"{}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Lax\"",
        kLoginCookie));
    lines.push_back("</Location>");
  }
  return lines;
}

std::vector<std::string> PortalApacheModules(LoginKind kind) {
  // OnDemand's package enables rewrite, lua, headers, proxy, proxy_http and proxy_wstunnel;
  // ssl (with its session cache) serves HTTPS; authnz_external asks pwauth, auth_openidc the
  // site's provider.
  std::vector<std::string> mods = {
      "ssl",     "socache_shmcb", kind == LoginKind::kOidc ? "auth_openidc" : "authnz_external",
      "rewrite", "lua",           "headers",
      "proxy",   "proxy_http",    "proxy_wstunnel"};
  if (kind == LoginKind::kForm) {
    // The form, its session (a cookie, encrypted), the kept request body of the login, and
    // the cache of successful checks.
    for (const char* m :
         {"auth_form", "session", "session_cookie", "session_crypto", "request", "authn_socache"}) {
      mods.emplace_back(m);
    }
  }
  return mods;
}

Result<bool> EnsurePortalLogin(RoleEnv& env, const std::vector<LocalUser>& users,
                               const PortalLogin& login) {
  // The modules and fail2ban first: a missing one stops the run before anything is written.
  if (auto s = RequireFail2ban(env, login.kind); !s) return Fail(s.error());
  std::vector<std::string> missing;
  const std::vector<std::string> modules = PortalApacheModules(login.kind);
  for (const auto& m : modules) {
    if (env.files.Exists(fmt::format("{}/{}.load", kModsEnabled, m))) continue;
    if (!env.files.Exists(fmt::format("{}/{}.load", kModsAvailable, m))) {
      return Fail(ErrorKind::kNotFound,
                  fmt::format("the Apache module {} is not installed ({}/{}.load): the image "
                              "needs apache2, libapache2-mod-authnz-external and "
                              "libapache2-mod-auth-openidc",
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
                          "the portal's login admits the listed users, each failure slowed");
      !s) {
    return Fail(s.error());
  }
  auto jail_changed = EnsureLoginJail(env, login.kind);
  if (!jail_changed) return Fail(jail_changed.error());
  if (login.kind == LoginKind::kOidc) {
    if (auto s = EnsureKey(env, kOidcPassphraseFile, 0600, root,
                           "the key that encrypts mod_auth_openidc's session cookies");
        !s) {
      return Fail(s.error());
    }
  }
  if (login.kind == LoginKind::kForm) {
    // Apache reads the session key as root when it starts; its workers (www-data) read the
    // stamp key at each request.
    if (auto s = EnsureKey(env, kSessionKeyFile, 0600, root,
                           "the key that encrypts the portal's session cookies");
        !s) {
      return Fail(s.error());
    }
    if (auto s = EnsureKey(env, kStampKeyFile, 0640, FileOwner{"root", "www-data"},
                           "the key that signs the portal's login times");
        !s) {
      return Fail(s.error());
    }
    if (auto s = EnsureFile(env, kLoginLuaFile, RenderLoginLua(login), 0644, root,
                            "the portal's login page, login stamp and session lifetime");
        !s) {
      return Fail(s.error());
    }
  }
  if (missing.empty()) {
    env.plan.Keep("Apache modules", fmt::format("enabled: {}", fmt::join(modules, " ")));
    return *jail_changed;
  }
  std::vector<std::string> argv = {"a2enmod", "-q"};
  argv.insert(argv.end(), missing.begin(), missing.end());
  if (auto s = env.plan.Do(fmt::format("a2enmod {}", fmt::join(missing, " ")),
                           "the portal's Apache configuration uses them",
                           [&] { return RunA2(env, argv); });
      !s) {
    return Fail(s.error());
  }
  return *jail_changed;
}

Status EnsureLoginGuard(RoleEnv& env, const PortalLogin& login, bool jail_changed) {
  if (login.kind == LoginKind::kOidc) {
    if (!jail_changed) return Ok();
    auto active = env.systemd.IsActive(kFail2banUnit);
    if (!active) return Fail(active.error());
    if (!*active) return Ok();
    return env.plan.Do(std::string("restart ") + kFail2banUnit,
                       "the guessing jail is off with the OIDC login",
                       [&] { return env.systemd.RestartNoBlock(kFail2banUnit); });
  }
  if (auto s = EnsureUnitEnabled(env, kFail2banUnit, "multi-user.target",
                                 "fail2ban stops password guessing at the portal per source "
                                 "address");
      !s) {
    return s;
  }
  return EnsureUnitRunning(env, kFail2banUnit, jail_changed, "the portal's jail changed",
                           "fail2ban reads Apache's failed logins");
}

}  // namespace onehpc::ood
