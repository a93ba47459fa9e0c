// The portal's web front on a fake machine: Open OnDemand's generator answered with its
// documented exit codes (0 unchanged, 3 changed, 4 edited by hand), Apache enabled and started
// or restarted only on change, and the image without Open OnDemand.
#include "roles/ood/portal_web.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "roles/names.h"
#include "roles/ood/portal_login.h"
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
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

class PortalWebTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_.runner.On({"a2ensite", "-q"}, [this](const Command& c) {
      m_.Write("/etc/apache2/sites-enabled/" + c.argv[2] + ".conf", "site\n");
      return Exit(0);
    });
    m_.runner.On({"a2dissite", "-q"}, [this](const Command& c) {
      std::filesystem::remove(m_.root + "/etc/apache2/sites-enabled/" + c.argv[2] + ".conf");
      return Exit(0);
    });
    // fail2ban already guards the login (Fail2banGuardsThePasswordLogins starts it).
    m_.Write(FakeMachine::WantsLink(kFail2banUnit), "enabled\n");
    m_.active.insert(kFail2banUnit);
  }
  // An image with Open OnDemand whose generator answers `code` (and writes the site on 3);
  // its portal answers with the login form.
  void Installed(int code, std::string output = "") {
    m_.http.Then(200, "<form><input name=\"httpd_password\" type=\"password\"></form>");
    m_.Write(kUpdateOodPortal, "#!/bin/sh\n");
    m_.Write(kImageInfoFile, R"({"open_ondemand": true, "variant": "appliance"})");
    m_.runner.On({kUpdateOodPortal}, [this, code, output](const Command&) {
      if (code == 3) m_.Write(kPortalSite, "<VirtualHost *:443>\n");
      return Exit(code, output);
    });
  }
  Status Run(bool served_changed = false, PlanMode mode = PlanMode::kApply,
             bool jail_changed = false) {
    RoleRun run(m_, *role_, {{"ETH0_IP", "10.0.1.23"}, {kNfsHost, "10.0.1.5"}}, nullptr, mode);
    auto s =
        ServeOpenOnDemand(*run.env, "portal.example.org", login_, served_changed, jail_changed);
    changes_ = run.Changes();
    publish_ = run.publish;
    return s;
  }
  FakeMachine m_;
  std::unique_ptr<Role> role_ = MakePortalRole();
  std::vector<std::string> changes_;
  std::vector<std::pair<std::string, std::string>> publish_;
  PortalLogin login_;
};

TEST(GeneratorExitTest, DocumentedCodes) {
  EXPECT_EQ(*InterpretGenerator(0, ""), GeneratorResult::kUnchanged);
  EXPECT_EQ(*InterpretGenerator(3, "Generating new Apache config"), GeneratorResult::kChanged);
  auto edited = InterpretGenerator(4, "WARNING: Checksum of ... does not match");
  ASSERT_FALSE(edited);
  EXPECT_EQ(edited.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(edited.error().message, HasSubstr("edited by hand"));
  EXPECT_THAT(edited.error().message, HasSubstr(std::string(kPortalSite) + ".new"));
  EXPECT_THAT(edited.error().message, HasSubstr("--force"));
  auto broken = InterpretGenerator(1, "undefined method `fetch'\nRun 'update_ood_portal --help'\n");
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().kind, ErrorKind::kProcess);
  EXPECT_THAT(broken.error().message, HasSubstr("exited 1: undefined method"));
}

TEST_F(PortalWebTest, WithoutOpenOnDemandNothingOfApacheAndTheFactIsPublished) {
  m_.Write(kImageInfoFile,
           R"({"open_ondemand": false, "variant": "VM lab, without Open OnDemand"})");
  ASSERT_TRUE(Run(/*served_changed=*/true));
  EXPECT_THAT(m_.Changes(), IsEmpty()) << "no generator, no a2ensite, no Apache";
  EXPECT_FALSE(m_.Exists(FakeMachine::WantsLink(kApacheUnit)));
  ASSERT_EQ(publish_.size(), 1u);
  EXPECT_EQ(publish_[0].first, kAttrOpenOnDemand);
  EXPECT_THAT(publish_[0].second, HasSubstr("absent: no Open OnDemand in this image (VM lab"));
  EXPECT_THAT(publish_[0].second, HasSubstr("not the web portal"));
  // OneGate refuses a value with a comma (the lab's portal failed on one).
  EXPECT_THAT(publish_[0].second, Not(HasSubstr(",")));
  m_.Write(kImageInfoFile, R"({"open_ondemand": false, "variant": "lab, no OSC"})");
  ASSERT_TRUE(Run());
  EXPECT_THAT(publish_.at(0).second, HasSubstr("(lab; no OSC)"));
}

TEST_F(PortalWebTest, AnImageWithoutItsRecordIsTakenAsWithout) {
  ASSERT_TRUE(Run());
  EXPECT_THAT(m_.Changes(), IsEmpty());
  ASSERT_EQ(publish_.size(), 1u);
  EXPECT_THAT(publish_[0].second, HasSubstr("absent: no Open OnDemand in this image;"));
}

TEST_F(PortalWebTest, AnImageThatClaimsOpenOnDemandButLacksItIsAnError) {
  m_.Write(kImageInfoFile, R"({"open_ondemand": true, "variant": "appliance"})");
  auto s = Run();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kNotFound);
  EXPECT_THAT(s.error().message, HasSubstr(kImageInfoFile));
  EXPECT_THAT(s.error().message, HasSubstr(kUpdateOodPortal));
  EXPECT_THAT(m_.Changes(), IsEmpty());
  EXPECT_THAT(publish_, IsEmpty());
}

TEST_F(PortalWebTest, AMalformedImageRecordIsNamed) {
  m_.Write(kImageInfoFile, R"({"open_ondemand": "yes"})");
  auto s = Run();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(s.error().message, HasSubstr(kImageInfoFile));
}

TEST_F(PortalWebTest, FirstRunGeneratesEnablesAndStartsThenNothingChanges) {
  Installed(3);
  m_.Write("/etc/apache2/sites-enabled/000-default.conf", "It works\n");
  ASSERT_TRUE(Run());
  EXPECT_THAT(m_.Changes(), ElementsAre(std::string(kUpdateOodPortal) + " --detailed-exitcodes",
                                        "a2ensite -q ood-portal", "a2dissite -q 000-default",
                                        "systemctl enable --no-reload apache2.service",
                                        "systemctl --no-block start apache2.service"));
  EXPECT_THAT(publish_, ElementsAre(Pair(kAttrOpenOnDemand, "installed"),
                                    Pair(kAttrPortalUrl, "https://portal.example.org/")));
  // The next boot: the generator finds its file up to date, Apache runs, nothing changed.
  Installed(0);
  ASSERT_TRUE(Run());
  EXPECT_THAT(changes_, ElementsAre(std::string(kUpdateOodPortal) + " --detailed-exitcodes"))
      << "the generator runs at every configure; nothing else is done";
  EXPECT_TRUE(m_.active.count(kApacheUnit));
}

TEST_F(PortalWebTest, ApacheRestartsOnlyWhenWhatItServesChanged) {
  Installed(0);
  m_.Write("/etc/apache2/sites-enabled/ood-portal.conf", "site\n");
  m_.Write(FakeMachine::WantsLink(kApacheUnit), "enabled\n");
  m_.active.insert(kApacheUnit);
  ASSERT_TRUE(Run(/*served_changed=*/false));
  EXPECT_THAT(m_.Changes(), ElementsAre(std::string(kUpdateOodPortal) + " --detailed-exitcodes"));
  // The certificate or the login changed in this run.
  ASSERT_TRUE(Run(/*served_changed=*/true));
  EXPECT_THAT(changes_, ElementsAre(std::string(kUpdateOodPortal) + " --detailed-exitcodes",
                                    "restart apache2.service (--no-block)"));
  // ood_portal.yml changed: the generator says so with 3.
  Installed(3);
  ASSERT_TRUE(Run(/*served_changed=*/false));
  EXPECT_THAT(changes_, ElementsAre(std::string(kUpdateOodPortal) + " --detailed-exitcodes",
                                    "restart apache2.service (--no-block)"));
}

// Review N8: once Apache serves the portal, fail2ban reads its failed logins (enabled and
// started, restarted when the jail changed); with OIDC it is started by nobody and only
// restarted, when it runs, to drop a jail turned off.
TEST_F(PortalWebTest, Fail2banGuardsThePasswordLoginsOnceApacheServes) {
  std::filesystem::remove(m_.root + FakeMachine::WantsLink(kFail2banUnit));
  m_.active.erase(kFail2banUnit);
  Installed(3);
  ASSERT_TRUE(Run());
  EXPECT_THAT(changes_, ::testing::IsSupersetOf(
                            {"enable fail2ban.service", "start fail2ban.service (--no-block)"}));
  EXPECT_LT(std::find(changes_.begin(), changes_.end(), "start apache2.service (--no-block)"),
            std::find(changes_.begin(), changes_.end(), "start fail2ban.service (--no-block)"))
      << "the jail reads Apache's logs: Apache first";
  Installed(0);
  ASSERT_TRUE(Run(false, PlanMode::kApply, /*jail_changed=*/true));
  EXPECT_THAT(changes_, ElementsAre(std::string(kUpdateOodPortal) + " --detailed-exitcodes",
                                    "restart fail2ban.service (--no-block)"));
  PortalLogin oidc;
  oidc.kind = LoginKind::kOidc;
  auto guard = [&] {
    RoleRun run(m_, *role_, {{"ETH0_IP", "10.0.1.23"}, {kNfsHost, "10.0.1.5"}}, nullptr);
    EXPECT_TRUE(EnsureLoginGuard(*run.env, oidc, /*jail_changed=*/true));
    return run.Changes();
  };
  m_.active.erase(kFail2banUnit);
  EXPECT_THAT(guard(), IsEmpty());
  m_.active.insert(kFail2banUnit);
  EXPECT_THAT(guard(), ElementsAre("restart fail2ban.service"));
}

TEST_F(PortalWebTest, AHandEditedVirtualHostIsNeverOverwrittenNorServed) {
  Installed(4, "WARNING: Checksum of /etc/apache2/sites-available/ood-portal.conf does not match");
  m_.Write(kPortalSite, "hand edited\n");
  auto s = Run(/*served_changed=*/true);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(s.error().message, HasSubstr("was edited by hand"));
  EXPECT_EQ(m_.Read(kPortalSite), "hand edited\n");
  EXPECT_THAT(m_.Changes(), ElementsAre(std::string(kUpdateOodPortal) + " --detailed-exitcodes"))
      << "no site, no Apache start or restart after a refused generation";
  EXPECT_THAT(publish_, IsEmpty());
}

TEST_F(PortalWebTest, AFailingGeneratorStopsTheRunWithItsMessage) {
  Installed(1, "ood_portal.yml: (<unknown>): did not find expected key\n");
  auto s = Run();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kProcess);
  EXPECT_THAT(s.error().message, HasSubstr("did not find expected key"));
  EXPECT_FALSE(m_.active.count(kApacheUnit));
}

TEST_F(PortalWebTest, APlanRunsNothing) {
  Installed(3);
  ASSERT_TRUE(Run(/*served_changed=*/false, PlanMode::kDryRun));
  EXPECT_THAT(m_.Changes(), IsEmpty());
  EXPECT_THAT(changes_, ElementsAre(std::string(kUpdateOodPortal) + " --detailed-exitcodes",
                                    "a2ensite ood-portal", "enable apache2.service",
                                    "start apache2.service (--no-block)"));
}

// READY waits for the portal as a user meets it: HTTPS on this VM under the portal's name,
// the role's certificate as the only anchor, the login form (Basic: 401).
TEST_F(PortalWebTest, ThePortalMustAnswerWithItsLoginBeforeTheRunSucceeds) {
  Installed(3);
  ASSERT_TRUE(Run());
  ASSERT_FALSE(m_.http.requests.empty());
  const HttpRequest& probe = m_.http.requests.back();
  EXPECT_EQ(probe.url, "https://portal.example.org/one-hpc/login");
  EXPECT_EQ(probe.ca_file, "/etc/ood/ssl/portal.example.org.crt");
  EXPECT_EQ(probe.resolve, "portal.example.org:443:127.0.0.1");
}

TEST_F(PortalWebTest, ApacheStillStartingIsWaitedForWithinTheDeadline) {
  Installed(3);
  fakes::ScriptedTransport& http = m_.http;
  http = fakes::ScriptedTransport();
  http.ThenError(ErrorKind::kNetwork, "Failed to connect to portal.example.org port 443");
  http.Then(503, "starting");
  http.Then(200, "<input name=\"httpd_password\">");
  ASSERT_TRUE(Run());
  EXPECT_EQ(http.requests.size(), 3u);
}

TEST_F(PortalWebTest, APortalThatNeverShowsItsLoginIsAnErrorAndPublishesNoUrl) {
  Installed(3);
  m_.http = fakes::ScriptedTransport();
  m_.http.Then(200, "<h1>It works!</h1>");  // Debian's default page, say
  auto s = Run();
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("does not answer as it should"));
  EXPECT_THAT(s.error().message, HasSubstr("not the login form"));
  for (const auto& [key, value] : publish_) EXPECT_NE(key, kAttrPortalUrl);
  EXPECT_LE(m_.clock.Now() - TimePoint{}, std::chrono::seconds(200)) << "bounded";
}

TEST_F(PortalWebTest, WithBasicThePortalMustRefuseWithoutCredentials) {
  Installed(3);
  login_.kind = LoginKind::kBasic;
  m_.http = fakes::ScriptedTransport();
  m_.http.Then(401, "");
  ASSERT_TRUE(Run());
  EXPECT_EQ(m_.http.requests.back().url, "https://portal.example.org/pun/sys/dashboard/");
}

// OIDC: the dashboard sends the browser to the provider with the portal's client id and
// redirect URI (Apache's 302 page repeats the Location); anything else is not the portal.
TEST_F(PortalWebTest, WithOidcThePortalMustRedirectToTheProvider) {
  Installed(3);
  login_.kind = LoginKind::kOidc;
  login_.oidc.issuer = "https://idp.example.org/realms/hpc";
  login_.oidc.client_id = "ood portal";
  const std::string found =
      "<p>The document has moved <a href=\"https://idp.example.org/auth?response_type=code&amp;"
      "scope=openid&amp;client_id=ood%20portal&amp;state=x&amp;redirect_uri=https%3A%2F%2F"
      "portal.example.org%2Foidc\">here</a>.</p>";
  m_.http = fakes::ScriptedTransport();
  m_.http.Then(302, found);
  ASSERT_TRUE(Run());
  EXPECT_EQ(m_.http.requests.back().url, "https://portal.example.org/pun/sys/dashboard/");
  // The generated virtual host holds the client secret: root only, its bytes unchanged.
  EXPECT_EQ(m_.Mode(kPortalSite), 0600u);
  EXPECT_EQ(m_.Read(kPortalSite), "<VirtualHost *:443>\n");

  // Another client's redirect, or the provider unreachable (mod_auth_openidc answers 500).
  m_.http = fakes::ScriptedTransport();
  std::string other = found;
  other.replace(other.find("ood%20portal"), 12, "someone-else");
  m_.http.Then(302, other);
  auto s = ProbePortal(m_.http, "portal.example.org", login_);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("not the redirect to the OpenID Connect provider"));
  m_.http = fakes::ScriptedTransport();
  m_.http.Then(500, "Internal Server Error");
  s = ProbePortal(m_.http, "portal.example.org", login_);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message,
              HasSubstr("https://idp.example.org/realms/hpc/.well-known/openid-configuration"));
}

}  // namespace
}  // namespace onehpc::ood
