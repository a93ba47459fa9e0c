// Open OnDemand configuration: rendered with yaml-cpp, parsed back, values checked, and
// hostile values (':', quotes, newlines, YAML syntax) never become keys.
#include "roles/ood/ood_yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/log.h"
#include "roles/ood/settings.h"

namespace onehpc::ood {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::set<std::string> Keys(const YAML::Node& map) {
  std::set<std::string> keys;
  for (const auto& kv : map) keys.insert(kv.first.as<std::string>());
  return keys;
}

TEST(OodYamlTest, PortalParsesBackWithTheExpectedValues) {
  PortalYamlInput in;
  in.servername = "ood.example.org";
  auto text = RenderPortalYaml(in);
  ASSERT_TRUE(text) << text.error().message;
  YAML::Node doc = YAML::Load(*text);
  EXPECT_EQ(doc["servername"].as<std::string>(), "ood.example.org");
  EXPECT_EQ(doc["port"].as<int>(), 443);
  ASSERT_EQ(doc["ssl"].size(), 2u);
  EXPECT_EQ(doc["ssl"][0].as<std::string>(),
            "SSLCertificateFile \"/etc/ood/ssl/ood.example.org.crt\"");
  EXPECT_EQ(doc["ssl"][1].as<std::string>(),
            "SSLCertificateKeyFile \"/etc/ood/ssl/ood.example.org.key\"");
  EXPECT_EQ(doc["pun_pre_hook_root_cmd"].as<std::string>(),
            "/usr/libexec/one-hpc/one-hpc-home-create");
  EXPECT_EQ(doc["node_uri"].as<std::string>(), "/node");
  EXPECT_EQ(doc["user_map_match"].as<std::string>(), "^([^@]+)$");
  EXPECT_EQ(Keys(doc),
            (std::set<std::string>{"servername", "port", "ssl", "host_regex", "node_uri",
                                   "rnode_uri", "user_map_match", "pun_pre_hook_root_cmd", "auth",
                                   "custom_vhost_directives", "logout_redirect"}));
  // The default login: the form, its session, the lifetime check in every protected location.
  ASSERT_GE(doc["auth"].size(), 2u);
  EXPECT_EQ(doc["auth"][0].as<std::string>(), "AuthType form");
  EXPECT_EQ(doc["auth"][1].as<std::string>(), "AuthName \"Open OnDemand\"");
  std::vector<std::string> auth;
  for (const auto& line : doc["auth"]) auth.push_back(line.as<std::string>());
  EXPECT_THAT(auth, ::testing::Contains("AuthFormLoginRequiredLocation \"/one-hpc/login\""));
  EXPECT_THAT(auth, ::testing::Contains("LuaHookFixups /etc/one-hpc/portal-login.lua check"));
  EXPECT_EQ(auth.back(), "LuaHookFixups /etc/one-hpc/portal-login.lua check");
  std::vector<std::string> vhost;
  for (const auto& line : doc["custom_vhost_directives"]) vhost.push_back(line.as<std::string>());
  EXPECT_EQ(vhost.front(), "DefineExternalAuth pwauth pipe /usr/sbin/pwauth");
  EXPECT_THAT(vhost, ::testing::Contains("Session On"));
  EXPECT_THAT(vhost, ::testing::Contains("SessionCookieName onehpc_session "
                                         "path=/;Secure;HttpOnly;SameSite=Lax"));
  EXPECT_THAT(vhost,
              ::testing::Contains("SessionCryptoPassphraseFile /etc/one-hpc/portal-session.key"));
  EXPECT_THAT(vhost, ::testing::Contains("SessionMaxAge 3600"));
  EXPECT_EQ(doc["logout_redirect"].as<std::string>(), "/one-hpc/logout");
}

TEST(OodYamlTest, BasicIsTheOptIn) {
  PortalYamlInput in;
  in.servername = "ood.example.org";
  in.login.kind = LoginKind::kBasic;
  auto text = RenderPortalYaml(in);
  ASSERT_TRUE(text) << text.error().message;
  YAML::Node doc = YAML::Load(*text);
  ASSERT_EQ(doc["auth"].size(), 5u);
  EXPECT_EQ(doc["auth"][0].as<std::string>(), "AuthType Basic");
  EXPECT_EQ(doc["auth"][1].as<std::string>(), "AuthName \"Open OnDemand\"");
  EXPECT_EQ(doc["auth"][2].as<std::string>(), "AuthBasicProvider external");
  EXPECT_EQ(doc["auth"][3].as<std::string>(), "AuthExternal pwauth");
  EXPECT_EQ(doc["auth"][4].as<std::string>(), "Require valid-user");
  ASSERT_EQ(doc["custom_vhost_directives"].size(), 1u);
  EXPECT_EQ(doc["custom_vhost_directives"][0].as<std::string>(),
            "DefineExternalAuth pwauth pipe /usr/sbin/pwauth");
  EXPECT_EQ(doc["logout_redirect"].as<std::string>(), "/pun/sys/dashboard/logout");
}

// OIDC: the keys Open OnDemand's generator turns into mod_auth_openidc's directives.
TEST(OodYamlTest, OidcGivesTheGeneratorItsKeys) {
  PortalYamlInput in;
  in.servername = "ood.example.org";
  in.login.kind = LoginKind::kOidc;
  in.login.admitted = {"alice"};
  in.login.oidc.issuer = "https://idp.example.org/realms/hpc";
  in.login.oidc.client_id = "ood-portal";
  in.login.oidc.client_secret = "s3cret-of-the-portal";
  in.login.oidc.logout_url = "https://ood.example.org/";
  in.login.oidc.crypto_passphrase = std::string(64, 'a');
  auto text = RenderPortalYaml(in);
  ASSERT_TRUE(text) << text.error().message;
  YAML::Node doc = YAML::Load(*text);
  EXPECT_EQ(doc["oidc_uri"].as<std::string>(), "/oidc");
  EXPECT_EQ(doc["oidc_provider_metadata_url"].as<std::string>(),
            "https://idp.example.org/realms/hpc/.well-known/openid-configuration");
  EXPECT_EQ(doc["oidc_client_id"].as<std::string>(), "ood-portal");
  EXPECT_EQ(doc["oidc_client_secret"].as<std::string>(), "s3cret-of-the-portal");
  EXPECT_EQ(doc["oidc_remote_user_claim"].as<std::string>(), "preferred_username");
  EXPECT_EQ(doc["oidc_scope"].as<std::string>(), "openid profile email");
  EXPECT_EQ(doc["oidc_crypto_passphrase"].as<std::string>(), std::string(64, 'a'));
  EXPECT_EQ(doc["oidc_session_inactivity_timeout"].as<int>(), 3600);
  EXPECT_EQ(doc["oidc_session_max_duration"].as<int>(), 36000);
  ASSERT_EQ(doc["auth"].size(), 2u);
  EXPECT_EQ(doc["auth"][1].as<std::string>(), "Require claim preferred_username:alice");
  EXPECT_EQ(doc["custom_vhost_directives"].size(), 0u);
  EXPECT_EQ(doc["logout_redirect"].as<std::string>(),
            "/oidc?logout=https%3A%2F%2Food.example.org%2F");
  // A value that would break the Apache line it becomes is refused.
  in.login.oidc.crypto_passphrase.clear();
  EXPECT_FALSE(RenderPortalYaml(in));
}

// Open OnDemand's Apache configuration embeds host_regex as
// <LocationMatch "^/node/(?<host>HOST_REGEX)/(?<port>\d+)"> (and the same for /rnode): only the
// workers' node names pass, no address of any network, no other name.
TEST(OodYamlTest, HostRegexAdmitsOnlyWorkerNames) {
  PortalYamlInput in;
  in.servername = "10.0.0.1";
  auto text = RenderPortalYaml(in);
  ASSERT_TRUE(text) << text.error().message;
  YAML::Node doc = YAML::Load(*text);
  const std::regex node("^/node/(" + doc["host_regex"].as<std::string>() + ")/([0-9]+)");
  for (const char* ok : {"/node/ood-worker-7/8080", "/node/ood-worker-1234/5901"}) {
    EXPECT_TRUE(std::regex_search(ok, node)) << ok;
  }
  for (const char* bad : {"/node/10.0.1.5/2049", "/node/192.168.1.10/6817", "/node/172.16.0.3/6819",
                          "/node/127.0.0.1/80", "/node/ood-portal/6817", "/node/ood-storage/3128",
                          "/node/ood-worker-7.evil.example/80", "/node/evil-ood-worker-7/80",
                          "/node/169.254.16.9/5030", "/node/localhost/22"}) {
    EXPECT_FALSE(std::regex_search(bad, node)) << bad;
  }
}

TEST(OodYamlTest, PortalRefusesHostileNamesAndPaths) {
  for (const char* name :
       {"", "ood.example.org\nport: 80", "a b", "x\"y", "-bad", "a:1", "ood.example.org/evil"}) {
    PortalYamlInput in;
    in.servername = name;
    EXPECT_FALSE(RenderPortalYaml(in)) << name;
  }
  PortalYamlInput in;
  in.servername = "ood";
  in.ssl_dir = "/etc/ood/ssl\" SSLEngine off";
  EXPECT_FALSE(RenderPortalYaml(in));
  in.ssl_dir = "/etc/../tmp";
  EXPECT_FALSE(RenderPortalYaml(in));
  in = PortalYamlInput{};
  in.servername = "ood";
  in.pun_pre_hook_root_cmd = "/bin/sh -c reboot";
  EXPECT_FALSE(RenderPortalYaml(in));
}

TEST(OodYamlTest, OwnClusterParsesBack) {
  ClusterYamlInput in;
  in.id = "ood";
  in.title = "Open OnDemand";
  in.login_host = "ood-portal";
  in.set_host = "host=$(hostname -s)";
  auto text = RenderClusterYaml(in);
  ASSERT_TRUE(text) << text.error().message;
  YAML::Node v2 = YAML::Load(*text)["v2"];
  EXPECT_EQ(v2["metadata"]["title"].as<std::string>(), "Open OnDemand");
  EXPECT_EQ(v2["login"]["host"].as<std::string>(), "ood-portal");
  EXPECT_EQ(v2["job"]["adapter"].as<std::string>(), "slurm");
  EXPECT_EQ(v2["job"]["bin"].as<std::string>(), "/usr/bin");
  EXPECT_EQ(v2["job"]["conf"].as<std::string>(), "/etc/slurm/slurm.conf");
  // Not a key ood_core reads from a cluster (a job's copy_environment is set per job).
  EXPECT_FALSE(v2["job"]["copy_environment"]);
  EXPECT_FALSE(v2["job"]["submit_host"]);
  EXPECT_EQ(v2["batch_connect"]["basic"]["script_wrapper"].as<std::string>(), "%s");
  EXPECT_EQ(v2["batch_connect"]["vnc"]["set_host"].as<std::string>(), "host=$(hostname -s)");
  EXPECT_THAT(v2["batch_connect"]["vnc"]["script_wrapper"].as<std::string>(),
              HasSubstr("WEBSOCKIFY_CMD"));
}

// A title full of YAML syntax stays one string; no key appears and none changes.
TEST(OodYamlTest, HostileTitlesCannotInjectKeys) {
  const std::vector<std::string> titles = {"x\"\n    adapter: pbs\n",
                                           "a: b",
                                           "'; adapter: pbs #",
                                           "yes",
                                           "~",
                                           "null",
                                           "1e3",
                                           "{adapter: pbs}",
                                           "[1, 2]",
                                           "&anchor *alias",
                                           "!!python/object x",
                                           "--- \n...",
                                           "tab\there",
                                           "back\\slash",
                                           "ünïcode ✓",
                                           std::string("nul\0byte", 8)};
  for (const std::string& title : titles) {
    ClusterYamlInput in;
    in.id = "site";
    in.title = title;
    in.login_host = "login.example.org";
    in.submit_host = "login.example.org";
    in.batch_only = true;
    auto text = RenderClusterYaml(in);
    ASSERT_TRUE(text) << title;
    YAML::Node doc = YAML::Load(*text);
    EXPECT_EQ(Keys(doc), std::set<std::string>{"v2"}) << *text;
    EXPECT_EQ(Keys(doc["v2"]), (std::set<std::string>{"metadata", "login", "job"})) << *text;
    EXPECT_EQ(Keys(doc["v2"]["metadata"]), std::set<std::string>{"title"}) << *text;
    EXPECT_EQ(doc["v2"]["metadata"]["title"].as<std::string>(), title) << *text;
    EXPECT_EQ(doc["v2"]["job"]["adapter"].as<std::string>(), "slurm") << *text;
  }
}

TEST(OodYamlTest, HostileHostsAndIdsAreRefused) {
  for (const char* host : {"a\nb", "login: x", "h\"", "a b", "-x", "x..y", "x/y"}) {
    ClusterYamlInput in;
    in.id = "site";
    in.login_host = host;
    EXPECT_FALSE(RenderClusterYaml(in)) << host;
    in.login_host = "";
    in.submit_host = host;
    EXPECT_FALSE(RenderClusterYaml(in)) << host;
  }
  for (const char* id : {"", "Site", "../x", "a b", "a:b", "a\nb"}) {
    ClusterYamlInput in;
    in.id = id;
    EXPECT_FALSE(RenderClusterYaml(in)) << id;
  }
  ClusterYamlInput in;
  in.id = "x";
  in.bin = "/usr/bin\nconf: /tmp";
  EXPECT_FALSE(RenderClusterYaml(in));
}

TEST(OodYamlTest, ClustersFromSettings) {
  ClusterYamlInput own;
  own.title = "Open OnDemand";
  auto off = Settings::Resolve(PortalSettings(), {{kNfsHost, "10.0.1.5"}});
  ASSERT_TRUE(off);
  auto clusters = ClustersFromSettings(*off, own);
  ASSERT_TRUE(clusters);
  ASSERT_EQ(clusters->size(), 1u);
  EXPECT_EQ((*clusters)[0].id, "ood");

  auto missing =
      Settings::Resolve(PortalSettings(), {{kSiteSlurmEnabled, "YES"}, {kNfsHost, "10.0.1.5"}});
  ASSERT_TRUE(missing);
  auto error = ClustersFromSettings(*missing, own);
  ASSERT_FALSE(error);
  EXPECT_THAT(error.error().message, HasSubstr("ONEAPP_SITE_SLURM_HOST is required"));

  auto clash = Settings::Resolve(PortalSettings(), {{kSiteSlurmEnabled, "YES"},
                                                    {kSiteSlurmHost, "login1"},
                                                    {kSiteSlurmCluster, "ood"},
                                                    {kNfsHost, "10.0.1.5"}});
  ASSERT_TRUE(clash);
  EXPECT_FALSE(ClustersFromSettings(*clash, own));

  auto on = Settings::Resolve(PortalSettings(), {{kSiteSlurmEnabled, "on"},
                                                 {kSiteSlurmHost, "login.hpc.example.org"},
                                                 {kSiteSlurmTitle, "HPC: \"big\" #1"},
                                                 {kNfsHost, "10.0.1.5"}});
  ASSERT_TRUE(on) << on.error().message;
  clusters = ClustersFromSettings(*on, own);
  ASSERT_TRUE(clusters);
  ASSERT_EQ(clusters->size(), 2u);
  auto text = RenderClusterYaml((*clusters)[1]);
  ASSERT_TRUE(text) << text.error().message;
  YAML::Node v2 = YAML::Load(*text)["v2"];
  EXPECT_EQ(v2["metadata"]["title"].as<std::string>(), "HPC: \"big\" #1");
  EXPECT_EQ(v2["job"]["submit_host"].as<std::string>(), "login.hpc.example.org");
  EXPECT_TRUE(v2["job"]["strict_host_checking"].as<bool>());
  EXPECT_FALSE(v2["job"]["conf"]);
  EXPECT_FALSE(v2["batch_connect"]) << "the site's cluster is batch only";
  EXPECT_EQ((*clusters)[1].id, "site");
}

}  // namespace
}  // namespace onehpc::ood
