// Where Open OnDemand starts sessions and batch jobs, read back from the files the portal role
// writes the way Open OnDemand 4 reads them:
// - an interactive app's clusters (dashboard, BatchConnect::App#clusters): form.yml (or
//   form.yml.erb) `cluster:` (an id, a list or a glob) merged under each sub app of
//   /etc/ood/config/apps/<app>/ (<name>.yml or <name>.yml.erb; the app itself when there is
//   none), every entry matched against the ids of clusters.d as an exact id or a glob;
// - the Job Composer's and Active Jobs' clusters: every clusters.d file whose
//   v2.metadata.hidden is not true.
// The ERB of a form.yml.erb is not evaluated (the forms here have none); a glob is matched
// with fnmatch(3), which lacks Ruby's {a,b} alternatives (none is used here).
#include "roles/ood/interactive_apps.h"

#include <fnmatch.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "roles/ood/ood_yaml.h"
#include "roles/ood/settings.h"
#include "roles/portal.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/role_run.h"

namespace onehpc::ood {
namespace {

using fakes::FakeMachine;
using fakes::RoleRun;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What Open OnDemand makes of the configuration on `m`.
struct OodView {
  std::vector<std::string> job_clusters;  ///< Job Composer / Active Jobs
  /// app (or app/sub app) → the clusters its sessions may start on
  std::map<std::string, std::vector<std::string>> sessions;
};

std::optional<YAML::Node> ReadForm(const FakeMachine& m, const std::string& dir,
                                   const std::string& name) {
  for (const char* ext : {".yml.erb", ".yml"}) {
    if (m.Exists(dir + "/" + name + ext)) return YAML::Load(m.Read(dir + "/" + name + ext));
  }
  return std::nullopt;
}

OodView ReadAsOpenOnDemand(const FakeMachine& m) {
  OodView view;
  std::vector<std::string> ids;
  auto cluster_files = m.files->List("/etc/ood/config/clusters.d");
  for (const auto& name : *cluster_files) {
    if (!name.ends_with(".yml")) continue;
    std::string id = name.substr(0, name.size() - 4);
    ids.push_back(id);
    YAML::Node hidden =
        YAML::Load(m.Read("/etc/ood/config/clusters.d/" + name))["v2"]["metadata"]["hidden"];
    if (!(hidden && hidden.as<bool>())) view.job_clusters.push_back(id);
  }
  auto clusters_of = [&](const YAML::Node& cfg) {
    std::vector<std::string> configured;
    if (cfg && cfg.IsSequence()) {
      for (const auto& c : cfg) configured.push_back(c.as<std::string>());
    } else if (cfg && cfg.IsScalar() && !cfg.as<std::string>().empty()) {
      configured.push_back(cfg.as<std::string>());
    }
    std::vector<std::string> out;
    for (const auto& c : configured) {
      for (const auto& id : ids) {
        if (id == c || fnmatch(c.c_str(), id.c_str(), 0) == 0) out.push_back(id);
      }
    }
    return out;
  };
  auto apps = m.files->List(kOodSysAppsDir);
  for (const auto& app : *apps) {
    std::string root = std::string(kOodSysAppsDir) + "/" + app;
    auto found = ReadForm(m, root, "form");
    if (!found) continue;  // not an interactive app
    YAML::Node form = *found;
    std::string sub_root = std::string(kOodAppsConfigDir) + "/" + app;
    std::vector<std::string> subs;
    if (auto names = m.files->List(sub_root)) {
      for (const auto& f : *names) {
        std::string stem = f.substr(0, f.find('.'));
        bool form_file = m.Exists(sub_root + "/" + stem + ".yml.erb") ? f == stem + ".yml.erb"
                                                                      : f == stem + ".yml";
        if (form_file) subs.push_back(stem);
      }
    }
    if (subs.empty()) {
      view.sessions[app] = clusters_of(form["cluster"]);
      continue;
    }
    for (const auto& sub : subs) {
      YAML::Node merged = (*ReadForm(m, sub_root, sub))["cluster"];
      view.sessions[app + "/" + sub] = clusters_of(merged ? merged : form["cluster"]);
    }
  }
  return view;
}

class InteractiveAppsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_.Write("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n");
    // The service's cluster and the site's, as the portal role writes them.
    auto settings = Settings::Resolve(PortalSettings(), {{kNfsHost, "10.0.1.5"},
                                                         {kSiteSlurmEnabled, "YES"},
                                                         {kSiteSlurmHost, "login.hpc.example"}});
    ASSERT_TRUE(settings) << settings.error().message;
    ClusterYamlInput own;
    auto clusters = ClustersFromSettings(*settings, own);
    ASSERT_TRUE(clusters);
    for (const auto& c : *clusters) {
      m_.Write("/etc/ood/config/clusters.d/" + c.id + ".yml", *RenderClusterYaml(c));
    }
    // Open OnDemand's apps: three interactive ones, two passenger apps without a form.
    m_.Write(Sys("bc_desktop/form.yml"), "title: Desktop\nform: [desktop, bc_num_hours]\n");
    m_.Write(Sys("jupyter/form.yml.erb"), "cluster: \"*\"\nform: [bc_num_hours]\n");
    m_.Write(Sys("rstudio/form.yml"), "cluster: [ood, site]\nform: [bc_num_hours]\n");
    m_.Write(Sys("dashboard/manifest.yml"), "name: Dashboard\n");
    m_.Write(Sys("shell/manifest.yml"), "name: Shell\n");
  }
  static std::string Sys(const std::string& rest) {
    return std::string(kOodSysAppsDir) + "/" + rest;
  }
  Status Run(std::unique_ptr<RoleRun>* out = nullptr) {
    auto role = MakePortalRole();
    auto run = std::make_unique<RoleRun>(m_, *role, ContextVars{{kNfsHost, "10.0.1.5"}}, nullptr);
    Status s = PinInteractiveApps(*run->env, kOwnClusterId);
    if (out) *out = std::move(run);
    return s;
  }
  FakeMachine m_;
};

TEST_F(InteractiveAppsTest, WithoutThePinAGlobOrAListStartsSessionsOnTheSiteCluster) {
  // What the issue found: leaving batch_connect out of the site's file changes nothing.
  OodView before = ReadAsOpenOnDemand(m_);
  EXPECT_THAT(before.sessions["jupyter"], ElementsAre("ood", "site"));
  EXPECT_THAT(before.sessions["rstudio"], ElementsAre("ood", "site"));
  EXPECT_THAT(before.job_clusters, ElementsAre("ood", "site"));
}

TEST_F(InteractiveAppsTest, EverySessionRunsOnTheServicesClusterAndBatchJobsMayGoToTheSite) {
  ASSERT_TRUE(Run());
  OodView after = ReadAsOpenOnDemand(m_);
  std::map<std::string, std::vector<std::string>> want = {
      {"bc_desktop/ood", {"ood"}}, {"jupyter/ood", {"ood"}}, {"rstudio/ood", {"ood"}}};
  EXPECT_EQ(after.sessions, want);
  EXPECT_THAT(after.job_clusters, ElementsAre("ood", "site"));
  EXPECT_THAT(m_.Read(std::string(kOodAppsConfigDir) + "/jupyter/ood.yml"),
              HasSubstr("cluster: \"ood\""));
  EXPECT_EQ(m_.Mode(std::string(kOodAppsConfigDir) + "/jupyter/ood.yml"), 0644u);
  // Apps without a form get no configuration directory.
  EXPECT_FALSE(m_.Exists(std::string(kOodAppsConfigDir) + "/dashboard"));
  EXPECT_FALSE(m_.Exists(std::string(kOodAppsConfigDir) + "/shell"));
}

TEST_F(InteractiveAppsTest, ASecondRunChangesNothingAndAnEditedPinIsPutBack) {
  ASSERT_TRUE(Run());
  std::unique_ptr<RoleRun> again;
  ASSERT_TRUE(Run(&again));
  EXPECT_TRUE(again->Changes().empty()) << again->plan.Render();
  std::string pin = std::string(kOodAppsConfigDir) + "/jupyter/ood.yml";
  m_.Write(pin, std::string(kPinHeader) + "\ncluster: \"*\"\n");
  ASSERT_TRUE(Run());
  EXPECT_THAT(ReadAsOpenOnDemand(m_).sessions["jupyter/ood"], ElementsAre("ood"));
}

TEST_F(InteractiveAppsTest, TheSitesOwnSubAppsAreLeftAsTheyAre) {
  // The administrator configured the desktop per cluster (Open OnDemand's documented way),
  // and wrote an ood.yml of their own for RStudio: both directories are theirs.
  std::string desktop = std::string(kOodAppsConfigDir) + "/bc_desktop/site.yml";
  std::string rstudio = std::string(kOodAppsConfigDir) + "/rstudio/ood.yml";
  m_.Write(desktop, "cluster: \"site\"\n");
  m_.Write(rstudio, "cluster: \"*\"\n");
  std::unique_ptr<RoleRun> run;
  ASSERT_TRUE(Run(&run));
  EXPECT_EQ(m_.Read(desktop), "cluster: \"site\"\n");
  EXPECT_EQ(m_.Read(rstudio), "cluster: \"*\"\n");
  EXPECT_FALSE(m_.Exists(std::string(kOodAppsConfigDir) + "/bc_desktop/ood.yml"));
  EXPECT_THAT(run->plan.Render(), HasSubstr("the site's own sub apps (site.yml)"));
  OodView view = ReadAsOpenOnDemand(m_);
  EXPECT_THAT(view.sessions["bc_desktop/site"], ElementsAre("site"));
  EXPECT_THAT(view.sessions["jupyter/ood"], ElementsAre("ood"));
}

TEST_F(InteractiveAppsTest, WithoutOpenOnDemandsAppsNothingIsWritten) {
  std::error_code ec;
  std::filesystem::remove_all(m_.root + kOodSysAppsDir, ec);
  ASSERT_TRUE(Run());
  EXPECT_FALSE(m_.Exists(kOodAppsConfigDir));
}

}  // namespace
}  // namespace onehpc::ood
