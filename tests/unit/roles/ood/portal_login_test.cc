// The portal's login files and Apache modules on a fake machine; the real Apache, pwauth and
// PAM run in tests/integration/portal_apache_test.sh.
#include "roles/ood/portal_login.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "roles/ood/settings.h"
#include "roles/portal.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/role_run.h"

namespace onehpc::ood {
namespace {

using fakes::Exit;
using fakes::FakeMachine;
using fakes::RoleRun;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class PortalLoginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& mod : PortalApacheModules()) {
      m_.Write("/etc/apache2/mods-available/" + mod + ".load", "LoadModule x\n");
    }
    m_.Write("/etc/apache2/mods-enabled/headers.load", "LoadModule x\n");
    m_.Write("/usr/bin/fail2ban-server", "#!/usr/bin/python3\n");
    m_.Write("/usr/sbin/nft", "ELF\n");
    m_.runner.On({"a2enmod", "-q"}, [this](const Command& c) {
      for (size_t i = 2; i < c.argv.size(); ++i) {
        m_.Write("/etc/apache2/mods-enabled/" + c.argv[i] + ".load", "LoadModule x\n");
      }
      return Exit(0);
    });
    users_ = {LocalUser{"alice", "Wonderland-42"}, LocalUser{"bob", "Builder-4242"}};
  }
  Status Run() {
    RoleRun run(m_, *role_, {{"ETH0_IP", "10.0.1.23"}, {kNfsHost, "10.0.1.5"}}, nullptr);
    auto s = EnsurePortalLogin(*run.env, users_, login_);
    changes_ = run.Changes();
    jail_changed_ = s && *s;
    return s ? Ok() : Fail(s.error());
  }
  FakeMachine m_;
  std::unique_ptr<Role> role_ = MakePortalRole();
  std::vector<LocalUser> users_;
  PortalLogin login_;
  std::vector<std::string> changes_;
  bool jail_changed_ = false;
};

TEST_F(PortalLoginTest, ListedUsersPamStackAndModulesOnceThenNothing) {
  ASSERT_TRUE(Run());
  EXPECT_EQ(m_.Read(kPortalUsersFile), "alice\nbob\n");
  const std::string pam = m_.Read(kPwauthPamFile);
  EXPECT_THAT(pam, HasSubstr("pam_listfile.so item=user sense=allow file=/etc/one-hpc/portal-users "
                             "onerr=fail"));
  // Review N8: no per-user lockout (a stranger could keep a user out), every failure slowed.
  EXPECT_THAT(pam, Not(HasSubstr("pam_faillock")));
  EXPECT_THAT(pam, HasSubstr("auth     optional   pam_faildelay.so delay=2000000\n"));
  EXPECT_LT(pam.find("pam_faildelay"), pam.find("pam_listfile"));
  EXPECT_THAT(pam, HasSubstr("auth     required   pam_unix.so\n"));
  // Guessing is stopped per source address: fail2ban's jail on Apache's error logs.
  EXPECT_TRUE(jail_changed_);
  EXPECT_EQ(m_.Read(kLoginJailFile), RenderLoginJail(LoginKind::kForm));
  EXPECT_THAT(m_.Changes(),
              ::testing::Contains("a2enmod -q ssl socache_shmcb authnz_external rewrite lua proxy "
                                  "proxy_http proxy_wstunnel auth_form session session_cookie "
                                  "session_crypto request authn_socache"));
  // The form's keys: 64 hex digits each, made once, different, the session's root only.
  const std::string session_key = m_.Read(kSessionKeyFile);
  const std::string stamp_key = m_.Read(kStampKeyFile);
  EXPECT_THAT(session_key, ::testing::MatchesRegex("[0-9a-f]{64}\n"));
  EXPECT_THAT(stamp_key, ::testing::MatchesRegex("[0-9a-f]{64}\n"));
  EXPECT_NE(session_key, stamp_key);
  EXPECT_EQ(m_.Mode(kSessionKeyFile), 0600u);
  EXPECT_EQ(m_.Mode(kStampKeyFile), 0640u);
  EXPECT_THAT(m_.Read(kLoginLuaFile), HasSubstr("local LIFETIME = 36000\n"));
  ASSERT_TRUE(Run());
  EXPECT_TRUE(changes_.empty()) << ::testing::PrintToString(changes_);
  EXPECT_FALSE(jail_changed_);
  EXPECT_EQ(m_.Read(kSessionKeyFile), session_key) << "a new key would end every session";
  // A user removed from the list can no longer log in.
  users_.pop_back();
  ASSERT_TRUE(Run());
  EXPECT_THAT(changes_, ElementsAre("write /etc/one-hpc/portal-users"));
  EXPECT_EQ(m_.Read(kPortalUsersFile), "alice\n");
}

TEST_F(PortalLoginTest, BasicOptInNeedsNoSessionModulesAndMakesNoKeys) {
  login_.kind = LoginKind::kBasic;
  for (const char* m : {"auth_form", "session_crypto"}) {
    std::filesystem::remove(m_.root + "/etc/apache2/mods-available/" + m + ".load");
  }
  ASSERT_TRUE(Run());
  EXPECT_FALSE(m_.Exists(kSessionKeyFile));
  EXPECT_FALSE(m_.Exists(kLoginLuaFile));
  EXPECT_THAT(m_.Changes(), ::testing::Contains("a2enmod -q ssl socache_shmcb authnz_external "
                                                "rewrite lua proxy proxy_http proxy_wstunnel"));
}

TEST_F(PortalLoginTest, AHandEditedShortKeyIsReplaced) {
  // A key too short to be one-hpc's is replaced, as a missing one.
  m_.Write(kSessionKeyFile, "short\n");
  ASSERT_TRUE(Run());
  EXPECT_THAT(m_.Read(kSessionKeyFile), ::testing::MatchesRegex("[0-9a-f]{64}\n"));
}

TEST(LoginJailTest, RefusesASourceAddressNotAUser) {
  const std::string jail = RenderLoginJail(LoginKind::kForm);
  EXPECT_THAT(jail, HasSubstr("\n[one-hpc-portal]\nenabled   = true\nfilter    = apache-auth\n"
                              "port      = http,https\nlogpath   = /var/log/apache2/*error*.log\n"
                              "backend   = polling\nbanaction = nftables\nmaxretry  = 10\n"
                              "findtime  = 600\nbantime   = 600\n"));
  // Debian 12's sshd jail would keep fail2ban from starting on an image without syslog.
  EXPECT_THAT(jail, HasSubstr("\n[sshd]\nenabled = false\n"));
  EXPECT_THAT(RenderLoginJail(LoginKind::kBasic), HasSubstr("enabled   = true\n"));
  EXPECT_THAT(RenderLoginJail(LoginKind::kOidc), HasSubstr("enabled   = false\n"));
}

// An image without fail2ban would leave guessing unbounded (the PAM stack locks nobody out):
// the run stops before anything is written, naming what is missing.
TEST_F(PortalLoginTest, WithoutFail2banThePasswordLoginsStopBeforeAnyChange) {
  std::filesystem::remove(m_.root + "/usr/bin/fail2ban-server");
  for (LoginKind kind : {LoginKind::kForm, LoginKind::kBasic}) {
    login_.kind = kind;
    auto s = Run();
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().kind, ErrorKind::kNotFound);
    EXPECT_THAT(s.error().message,
                HasSubstr("/usr/bin/fail2ban-server is not installed: the image needs fail2ban "
                          "and nftables"));
    EXPECT_TRUE(m_.Changes().empty());
    EXPECT_FALSE(m_.Exists(kPwauthPamFile));
  }
}

TEST_F(PortalLoginTest, AMissingModuleNamesThePackages) {
  std::filesystem::remove(m_.root + "/etc/apache2/mods-available/authnz_external.load");
  auto s = Run();
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("the Apache module authnz_external is not installed"));
  EXPECT_THAT(s.error().message, HasSubstr("libapache2-mod-authnz-external"));
  EXPECT_FALSE(m_.Exists(kPwauthPamFile)) << "nothing is written before the check";
  EXPECT_TRUE(m_.Changes().empty());
}

// ---- the site's OpenID Connect provider (ONEAPP_PORTAL_LOGIN=oidc)

ContextVars OidcVars() {
  return {{kNfsHost, "10.0.1.5"},
          {kPortalLoginVar, "oidc"},
          {kOidcIssuerVar, "https://idp.example.org/realms/hpc"},
          {kOidcClientIdVar, "ood-portal"},
          {kOidcClientSecretVar, "s3cret-of-the-portal"}};
}

Result<PortalLogin> OidcLoginFrom(const ContextVars& vars) {
  auto settings = Settings::Resolve(PortalSettings(), vars);
  if (!settings) return Fail(settings.error());
  return PortalLoginFrom(*settings, "ood.example.org",
                         {LocalUser{"alice", "Wonderland-42"}, LocalUser{"bob", "Builder-4242"}});
}

TEST(PortalOidcTest, TheProviderTheClaimAndTheListedUsers) {
  auto login = OidcLoginFrom(OidcVars());
  ASSERT_TRUE(login) << login.error().message;
  EXPECT_EQ(login->kind, LoginKind::kOidc);
  EXPECT_EQ(login->oidc.issuer, "https://idp.example.org/realms/hpc");
  EXPECT_EQ(login->oidc.user_claim, "preferred_username");
  EXPECT_EQ(login->oidc.logout_url, "https://ood.example.org/");
  EXPECT_EQ(OidcMetadataUrl(login->oidc.issuer),
            "https://idp.example.org/realms/hpc/.well-known/openid-configuration");
  EXPECT_EQ(OidcMetadataUrl("https://idp.example.org/"),
            "https://idp.example.org/.well-known/openid-configuration");
  // Only the listed users: one Require line each (any of them admits).
  EXPECT_THAT(PortalAuthLines(*login),
              ElementsAre("AuthType openid-connect", "Require claim preferred_username:alice",
                          "Require claim preferred_username:bob"));
  EXPECT_TRUE(PortalVhostDirectives(*login).empty()) << "no pwauth behind an OIDC login";
  // The logout ends mod_auth_openidc's session (and the provider's), then lands on the portal.
  EXPECT_EQ(PortalLogoutRedirect(*login), "/oidc?logout=https%3A%2F%2Food.example.org%2F");
  login->admitted.clear();
  EXPECT_THAT(PortalAuthLines(*login),
              ElementsAre("AuthType openid-connect", "Require all denied"));

  auto vars = OidcVars();
  vars[kOidcUserClaimVar] = "sub";
  vars[kOidcLogoutUrlVar] = "https://ood.example.org/public/bye.html";
  login = OidcLoginFrom(vars);
  ASSERT_TRUE(login) << login.error().message;
  EXPECT_EQ(PortalAuthLines(*login)[1], "Require claim sub:alice");
  EXPECT_EQ(PortalLogoutRedirect(*login),
            "/oidc?logout=https%3A%2F%2Food.example.org%2Fpublic%2Fbye.html");
}

TEST(PortalOidcTest, BadInputNamesTheVariable) {
  struct Case {
    std::string var, value, expect;
  };
  for (const auto& c : std::vector<Case>{
           {kOidcIssuerVar, "http://idp.example.org", "an https URL"},
           {kOidcIssuerVar, "", "is empty but ONEAPP_PORTAL_LOGIN=oidc"},
           {kOidcClientIdVar, "", "is empty but ONEAPP_PORTAL_LOGIN=oidc"},
           {kOidcClientSecretVar, "", "is empty but ONEAPP_PORTAL_LOGIN=oidc"},
           {kOidcClientSecretVar, "has a space inside", "<secret, not shown>"},
           {kOidcUserClaimVar, "email", "preferred_username"},
           {kOidcLogoutUrlVar, "https://evil.example.net/", "is outside the portal"},
           {kOidcLogoutUrlVar, "https://ood.example.org.evil.net/", "is outside the portal"},
       }) {
    auto vars = OidcVars();
    vars[c.var] = c.value;
    auto login = OidcLoginFrom(vars);
    ASSERT_FALSE(login) << c.var << "=" << c.value;
    EXPECT_THAT(login.error().message, HasSubstr(c.var));
    EXPECT_THAT(login.error().message, HasSubstr(c.expect));
    if (c.var == kOidcClientSecretVar && !c.value.empty()) {
      EXPECT_THAT(login.error().message, Not(HasSubstr(c.value))) << "the secret is shown";
    }
  }
  // An OIDC setting with another login is a mistake, not something to ignore.
  auto vars = OidcVars();
  vars.erase(kPortalLoginVar);
  auto login = OidcLoginFrom(vars);
  ASSERT_FALSE(login);
  EXPECT_THAT(login.error().message,
              HasSubstr("ONEAPP_PORTAL_OIDC_ISSUER is set but ONEAPP_PORTAL_LOGIN=form"));
}

TEST_F(PortalLoginTest, OidcMakesItsPassphraseOnceAndEnablesOnlyItsModule) {
  login_.kind = LoginKind::kOidc;
  for (const char* m : {"auth_form", "session_crypto", "authnz_external"}) {
    std::filesystem::remove(m_.root + "/etc/apache2/mods-available/" + m + ".load");
  }
  m_.Write("/etc/apache2/mods-available/auth_openidc.load", "LoadModule x\n");
  ASSERT_TRUE(Run());
  EXPECT_THAT(m_.Changes(), ::testing::Contains("a2enmod -q ssl socache_shmcb auth_openidc "
                                                "rewrite lua proxy proxy_http proxy_wstunnel"));
  const std::string key = m_.Read(kOidcPassphraseFile);
  EXPECT_THAT(key, ::testing::MatchesRegex("[0-9a-f]{64}\n"));
  EXPECT_EQ(m_.Mode(kOidcPassphraseFile), 0600u);
  EXPECT_FALSE(m_.Exists(kSessionKeyFile));
  EXPECT_FALSE(m_.Exists(kLoginLuaFile));
  ASSERT_TRUE(Run());
  EXPECT_TRUE(changes_.empty()) << ::testing::PrintToString(changes_);
  EXPECT_EQ(m_.Read(kOidcPassphraseFile), key) << "a new passphrase would end every session";
  // Without Debian's module, the run stops before anything and names the package.
  std::filesystem::remove(m_.root + "/etc/apache2/mods-enabled/auth_openidc.load");
  std::filesystem::remove(m_.root + "/etc/apache2/mods-available/auth_openidc.load");
  auto s = Run();
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("libapache2-mod-auth-openidc"));
}

}  // namespace
}  // namespace onehpc::ood
