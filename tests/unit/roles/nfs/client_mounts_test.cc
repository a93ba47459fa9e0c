// The NFS client mounts of the portal and worker roles on a fake machine: the rendered unit,
// its name, EnsureNfsMount's plan and idempotence (fake systemctl that mounts, fake mount
// table, fake clock), the lab's bind drop-in, `ip -j route get` parsing, and the root-write
// probe with its no_root_squash error text.
#include "roles/nfs/client_mounts.h"

#include <errno.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "common/log.h"
#include "roles/disk/mount_unit.h"
#include "roles/role.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/mounts.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"
#include "tests/fakes/write_probe.h"

namespace onehpc::nfs {
namespace {

using fakes::Exit;
using fakes::FakeMachine;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

namespace fs = std::filesystem;

// Real `ip -j route get` output captured on a Debian 12 host (default route through eth0) and
// in a network namespace with a veth on 10.81.0.23/24.
constexpr char kRouteViaGateway[] =
    R"([{"dst":"8.8.8.8","gateway":"192.0.2.1","dev":"eth0","prefsrc":"192.0.2.2","flags":[],"uid":0,"cache":[]}])"
    "\n";
constexpr char kRouteOnLink[] =
    R"([{"dst":"10.81.0.5","dev":"v0","prefsrc":"10.81.0.23","flags":[],"uid":0,"cache":[]}])"
    "\n";
constexpr char kRouteLocal[] =
    R"([{"type":"local","dst":"10.81.0.23","dev":"lo","prefsrc":"10.81.0.23","flags":[],"uid":0,"cache":["local"]}])"
    "\n";

NfsMount HomeMount() {
  NfsMount m;
  m.server = "10.0.1.5";
  m.export_path = "/export/home";
  m.where = "/home";
  m.why = "the users' homes on the site's NFS server";
  m.setting = "ONEAPP_HOME_NFS_SERVER";
  m.root_write_why = "the portal creates home directories as root";
  return m;
}

// A mount table whose entries the fake systemctl adds and removes.
using fakes::FakeMounts;

class NfsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // systemctl enable of a mount unit links it into remote-fs.target.wants (its WantedBy=).
    m_.runner.On({"systemctl", "enable"}, [this](const Command& c) {
      m_.Write("/etc/systemd/system/remote-fs.target.wants/" + c.argv.back(), "enabled\n");
      return Exit(0);
    });
    // start/restart of the mount unit: systemd runs mount.nfs (or the lab's bind) at once
    // unless the test says the server does not answer.
    for (const char* verb : {"start", "restart"}) {
      m_.runner.On({"systemctl", "--no-block", verb}, [this](const Command& c) {
        ++starts_[c.argv[2]];
        if (server_down_) return Exit(0);
        m_.active.insert(c.argv[3]);
        (void)mounts_.Unmount(Target());
        (void)mounts_.Mount({mounted_source_, Target(), "nfs4", "rw,hard"});
        return Exit(0);
      });
    }
  }

  std::string Target() const { return m_.root + mount_.where; }

  Status Ensure(PlanMode mode = PlanMode::kApply, Duration timeout = Duration(60000)) {
    plan_ = std::make_unique<Plan>(mode);
    env_ = std::make_unique<RoleEnv>(
        RoleEnv::From(context_, *settings_, nullptr,
                      SystemAdapters{m_.runner, *m_.files, m_.systemd, block_devices_, mounts_,
                                     m_.clock, m_.http},
                      *plan_, nullptr));
    return EnsureNfsMount(*env_, mount_, timeout);
  }
  Status CheckRoot(WriteProbe& probe, Duration deadline = Duration(180000),
                   PlanMode mode = PlanMode::kApply) {
    plan_ = std::make_unique<Plan>(mode);
    env_ = std::make_unique<RoleEnv>(
        RoleEnv::From(context_, *settings_, nullptr,
                      SystemAdapters{m_.runner, *m_.files, m_.systemd, block_devices_, mounts_,
                                     m_.clock, m_.http},
                      *plan_, nullptr));
    return CheckRootCanWrite(*env_, mount_, deadline, probe);
  }
  // Plan entries that are not keeps.
  std::vector<std::string> Changes() const {
    std::vector<std::string> out;
    for (const auto& a : plan_->actions()) {
      if (a.outcome != PlannedAction::Outcome::kKept) out.push_back(a.what);
    }
    return out;
  }
  std::string Why(const std::string& what) const {
    for (const auto& a : plan_->actions()) {
      if (a.what == what) return a.why;
    }
    return "<no action " + what + ">";
  }

  FakeMachine m_;
  fakes::FakeMounts mounts_;
  fakes::FakeBlockDevices block_devices_;
  LoadedContext context_;
  std::unique_ptr<Settings> settings_ =
      std::make_unique<Settings>(*Settings::Resolve({}, ContextVars{}));
  std::unique_ptr<Plan> plan_;
  std::unique_ptr<RoleEnv> env_;
  NfsMount mount_ = HomeMount();
  std::string mounted_source_ = "10.0.1.5:/export/home";
  bool server_down_ = false;
  std::map<std::string, int> starts_;  // "start"/"restart" -> count
};

// ---- names and text -------------------------------------------------------------------------

TEST(NfsMountUnitNameTest, EscapesLikeSystemdEscapePath) {
  EXPECT_EQ(NfsMountUnitName("/home"), "home.mount");
  EXPECT_EQ(NfsMountUnitName("/var/lib/one-hpc/portal-state"),
            "var-lib-one\\x2dhpc-portal\\x2dstate.mount");
  EXPECT_EQ(NfsMountUnitName("/export/software"), "export-software.mount");
  // One escaping for the storage role's and the client's units.
  EXPECT_EQ(disk::MountUnitPath("/var/lib/one-hpc/portal-state"),
            "/etc/systemd/system/" + NfsMountUnitName("/var/lib/one-hpc/portal-state"));
  EXPECT_EQ(disk::MountUnitName("/export/home"), "export-home.mount");
}

TEST(RenderNfsMountUnitTest, ExactText) {
  EXPECT_EQ(RenderNfsMountUnit(HomeMount()),
            "# Generated by one-hpc: the users' homes on the site's NFS server.\n"
            "# hard: a short pause of the server blocks I/O and resumes it instead of failing "
            "writes.\n"
            "# Replacing the transport (What=/Type=/Options=) belongs in a drop-in in "
            "home.mount.d/.\n"
            "[Unit]\n"
            "Description=one-hpc: the users' homes on the site's NFS server "
            "(10.0.1.5:/export/home)\n"
            "After=network-online.target\n"
            "Wants=network-online.target\n"
            "\n"
            "[Mount]\n"
            "What=10.0.1.5:/export/home\n"
            "Where=/home\n"
            "Type=nfs4\n"
            "Options=_netdev,hard,noatime,nosuid,nodev\n"
            "TimeoutSec=90s\n"
            "\n"
            "[Install]\n"
            "WantedBy=remote-fs.target\n");
}

TEST(RenderNfsMountUnitTest, DnsServerEscapedWhereAndNoSpecifiersInDescription) {
  NfsMount m;
  m.server = "nfs.example.org";
  m.export_path = "/srv/slurm-state";
  m.where = "/var/lib/one-hpc/portal-state";
  m.why = "slurmctld state at 100% durability";
  std::string unit = RenderNfsMountUnit(m);
  EXPECT_THAT(unit, HasSubstr("\nDescription=one-hpc: slurmctld state at 100%% durability "
                              "(nfs.example.org:/srv/slurm-state)\n"));
  EXPECT_THAT(unit, HasSubstr("\nWhat=nfs.example.org:/srv/slurm-state\n"));
  EXPECT_THAT(unit, HasSubstr("\nWhere=/var/lib/one-hpc/portal-state\n"));
  EXPECT_THAT(unit, HasSubstr("drop-in in var-lib-one\\x2dhpc-portal\\x2dstate.mount.d/.\n"));
}

TEST(ValidateNfsMountTest, AcceptsAddressesAndNames) {
  for (const char* server : {"10.0.1.5", "nfs", "nfs-1.example.org", "a1.b2.c3"}) {
    NfsMount m = HomeMount();
    m.server = server;
    EXPECT_TRUE(ValidateNfsMount(m)) << server;
  }
}

TEST(ValidateNfsMountTest, RefusesBadServersNamingTheSettingAndValue) {
  for (const char* server : {"", "10.0.1.256", "10.0.1", "01.2.3.4", "nfs host", "-nfs", "nfs..org",
                             "nfs.org.", "10.0.1.5:/x", "[::1]", "fe80::1"}) {
    NfsMount m = HomeMount();
    m.server = server;
    auto s = ValidateNfsMount(m);
    ASSERT_FALSE(s) << server;
    EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
    EXPECT_EQ(s.error().message,
              "ONEAPP_HOME_NFS_SERVER: the NFS server '" + std::string(server) +
                  "' is not usable: expected an IPv4 address (a.b.c.d) or a DNS name (letters, "
                  "digits, '-' and '.')");
  }
}

TEST(ValidateNfsMountTest, RefusesBadExportsAndMountPoints) {
  for (const char* path :
       {"", "export/home", "/export/home/", "/export//home", "/export/../etc", "/export/..",
        "/export/my home", "/export/a%b", "/export/a\\b", "/export/a\nb"}) {
    NfsMount m = HomeMount();
    m.export_path = path;
    auto s = ValidateNfsMount(m);
    ASSERT_FALSE(s) << path;
    EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
    EXPECT_THAT(s.error().message, HasSubstr("ONEAPP_HOME_NFS_SERVER: the export '" +
                                             std::string(path) + "' of 10.0.1.5"));
    EXPECT_THAT(s.error().message, HasSubstr("expected an absolute path on the server"));
  }
  for (const char* path : {"/", "home", "/home/", "/ho me"}) {
    NfsMount m = HomeMount();
    m.where = path;
    auto s = ValidateNfsMount(m);
    ASSERT_FALSE(s) << path;
    EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
    EXPECT_THAT(s.error().message, HasSubstr("the mount point '" + std::string(path) +
                                             "' for 10.0.1.5:/export/home is not usable"));
  }
  NfsMount m = HomeMount();
  m.why = "two\nlines";
  EXPECT_FALSE(ValidateNfsMount(m));
}

// ---- EnsureNfsMount -------------------------------------------------------------------------

TEST_F(NfsClientTest, FirstRunWritesEnablesStartsAndWaits) {
  ASSERT_TRUE(Ensure()) << plan_->Render();
  EXPECT_THAT(Changes(), ElementsAre("create /home (0755)", "write /etc/systemd/system/home.mount",
                                     "systemctl daemon-reload", "enable home.mount",
                                     "start home.mount (--no-block)"));
  EXPECT_EQ(m_.Read("/etc/systemd/system/home.mount"), RenderNfsMountUnit(mount_));
  struct stat st {};
  ASSERT_EQ(::stat((m_.root + "/etc/systemd/system/home.mount").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_TRUE(fs::is_directory(Target()));
  EXPECT_THAT(m_.Changes(),
              ElementsAre("systemctl daemon-reload", "systemctl enable --no-reload home.mount",
                          "systemctl --no-block start home.mount"));
  EXPECT_EQ(m_.clock.sleeps(), 0);  // mounted at the first look
}

TEST_F(NfsClientTest, SecondRunChangesNothing) {
  ASSERT_TRUE(Ensure());
  size_t commands = m_.runner.commands().size();
  ASSERT_TRUE(Ensure()) << plan_->Render();
  EXPECT_THAT(Changes(), ElementsAre());
  // Not even a systemctl is-active: the unit is unchanged and something is mounted.
  EXPECT_EQ(m_.runner.commands().size(), commands);
  EXPECT_EQ(starts_["start"] + starts_["restart"], 1);
  EXPECT_EQ(Why("mounted /home"), "mounted from 10.0.1.5:/export/home");
}

TEST_F(NfsClientTest, ExistingMountPointIsKept) {
  fs::create_directories(Target());
  std::ofstream(Target() + "/stale") << "x";
  ASSERT_TRUE(Ensure());
  EXPECT_EQ(Why("/home"), "the mount point exists");
  EXPECT_TRUE(fs::exists(Target() + "/stale"));
}

TEST_F(NfsClientTest, AcceptsTheLabBindSourceAndNeverTouchesDropIns) {
  // The lab's drop-in replaces the NFS transport by a bind mount of /lab/nfs/home.
  const std::string dropin = "/etc/systemd/system/home.mount.d/lab-bind.conf";
  const std::string dropin_text = "[Mount]\nWhat=/lab/nfs/home\nType=none\nOptions=bind\n";
  m_.Write(dropin, dropin_text);
  mounted_source_ = "/lab/nfs/home";
  ASSERT_TRUE(Ensure()) << plan_->Render();
  EXPECT_EQ(starts_["start"], 1);
  ASSERT_TRUE(Ensure()) << plan_->Render();
  EXPECT_THAT(Changes(), ElementsAre());
  EXPECT_EQ(starts_["start"] + starts_["restart"], 1);
  EXPECT_THAT(Why("mounted /home"), HasSubstr("mounted from /lab/nfs/home"));
  EXPECT_EQ(m_.Read(dropin), dropin_text);
  auto entries = fs::directory_iterator(m_.root + "/etc/systemd/system/home.mount.d");
  EXPECT_EQ(std::distance(fs::begin(entries), fs::end(entries)), 1);
}

TEST_F(NfsClientTest, ChangedUnitRestartsAMountFromAnotherSource) {
  ASSERT_TRUE(Ensure());
  // The site moved the homes to another server.
  mount_.server = "10.0.1.6";
  mounted_source_ = "10.0.1.6:/export/home";
  ASSERT_TRUE(Ensure()) << plan_->Render();
  EXPECT_THAT(Changes(), ElementsAre("write /etc/systemd/system/home.mount",
                                     "systemctl daemon-reload", "restart home.mount (--no-block)"));
  EXPECT_EQ(Why("restart home.mount (--no-block)"),
            "/home is mounted from 10.0.1.5:/export/home and home.mount changed to mount "
            "10.0.1.6:/export/home");
  EXPECT_THAT(m_.Read("/etc/systemd/system/home.mount"), HasSubstr("What=10.0.1.6:/export/home"));
  EXPECT_EQ(starts_["restart"], 1);
}

// After the restart only a mount from the new server counts: the old mount still there (the
// queued restart not run yet, or failing) is waited out, then an error that names it.
TEST_F(NfsClientTest, AfterARestartTheOldMountIsNotTakenForTheNewOne) {
  ASSERT_TRUE(Ensure());
  mount_.server = "10.0.1.6";  // the restart leaves 10.0.1.5's mount in place
  auto s = Ensure(PlanMode::kApply, Duration(5000));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kNetwork);
  EXPECT_THAT(s.error().message, HasSubstr("mounted from 10.0.1.5:/export/home"));
  EXPECT_EQ(starts_["restart"], 1);
  EXPECT_GT(m_.clock.sleeps(), 1);  // waited, not refused at the first look
}

// With someone else's drop-in (the lab's bind) the source says nothing: the unit active and
// a mount are enough, as at a start.
TEST_F(NfsClientTest, AfterARestartADropInsMountIsTaken) {
  ASSERT_TRUE(Ensure());
  m_.Write("/etc/systemd/system/home.mount.d/lab-bind.conf", "[Mount]\nWhat=/lab/nfs/home\n");
  mount_.server = "10.0.1.6";
  ASSERT_TRUE(Ensure()) << plan_->Render();
  EXPECT_EQ(starts_["restart"], 1);
}

TEST_F(NfsClientTest, ChangedUnitWithTheSameSourceKeepsTheMount) {
  ASSERT_TRUE(Ensure());
  mount_.why = "homes (reworded)";
  ASSERT_TRUE(Ensure()) << plan_->Render();
  EXPECT_THAT(Changes(),
              ElementsAre("write /etc/systemd/system/home.mount", "systemctl daemon-reload"));
  EXPECT_EQ(starts_["start"] + starts_["restart"], 1);
}

TEST_F(NfsClientTest, WaitsWithBackoffUntilMounted) {
  server_down_ = true;  // start returns at once, the mount comes later
  int polls = 0;
  m_.runner.On({"systemctl", "is-active", "--quiet"}, [&](const Command& c) {
    if (++polls == 4) {
      m_.active.insert(c.argv[3]);
      (void)mounts_.Mount({mounted_source_, Target(), "nfs4", ""});
    }
    return Exit(m_.active.count(c.argv[3]) ? 0 : 3);
  });
  ASSERT_TRUE(Ensure()) << plan_->Render();
  EXPECT_EQ(polls, 4);
  EXPECT_EQ(m_.clock.sleeps(), 3);
  EXPECT_GT(m_.clock.slept(), Duration(1000));  // 0.5 s, then growing
  EXPECT_LT(m_.clock.slept(), Duration(10000));
}

TEST_F(NfsClientTest, GivesUpAtTheDeadlineNamingShareUnitAndJournal) {
  server_down_ = true;
  auto s = Ensure(PlanMode::kApply, Duration(30000));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kNetwork);
  EXPECT_EQ(s.error().message,
            "10.0.1.5:/export/home (ONEAPP_HOME_NFS_SERVER) was not mounted on /home within 30 s "
            "(home.mount: not active, nothing mounted on /home); check that the NFS server "
            "answers and exports /export/home to this VM; see journalctl -u home.mount");
  EXPECT_LT(m_.clock.slept(), Duration(30000));  // bounded by the deadline
  EXPECT_GT(m_.clock.slept(), Duration(15000));  // and used most of it
  EXPECT_GT(m_.clock.sleeps(), 4);               // backoff, not one long sleep
  EXPECT_LT(m_.clock.sleeps(), 20);
}

// The storage role exports to the service's VMs, and adds a new one within its refresher's
// period: until then the server refuses the mount, the unit fails, and systemd does not try
// again. The wait starts it again every 10 s until the server lets it in.
TEST_F(NfsClientTest, ARefusedMountIsStartedAgainUntilTheServerExportsIt) {
  server_down_ = true;
  m_.runner.On({"systemctl", "--no-block", "start"}, [this](const Command& c) {
    if (++starts_[c.argv[2]] < 3) return Exit(0);  // access denied: the unit failed
    m_.active.insert(c.argv[3]);
    (void)mounts_.Mount({mounted_source_, Target(), "nfs4", "rw,hard"});
    return Exit(0);
  });
  log::Capture logs;
  ASSERT_TRUE(Ensure(PlanMode::kApply, Duration(60000))) << plan_->Render();
  EXPECT_EQ(starts_["start"], 3);
  // 10 s at least between the starts; the polls (up to 5 s, jittered by 20%) add at most 6 s
  // to each wait and one more to see the mount: well inside the 60 s limit.
  EXPECT_GE(m_.clock.slept(), Duration(20000));
  EXPECT_LT(m_.clock.slept(), Duration(40000));
  EXPECT_TRUE(
      logs.Contains("nfs: home.mount is not mounted yet (not active, nothing mounted on "
                    "/home); starting it again (the server may not export to this VM "
                    "yet)"))
      << logs.text();
}

TEST_F(NfsClientTest, TimeoutHintQuotesAnEscapedUnitName) {
  server_down_ = true;
  mount_.where = "/var/lib/one-hpc/portal-state";
  auto s = Ensure(PlanMode::kApply, Duration(5000));
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message,
              HasSubstr("see journalctl -u 'var-lib-one\\x2dhpc-portal\\x2dstate.mount'"));
  EXPECT_TRUE(m_.Exists("/etc/systemd/system/var-lib-one\\x2dhpc-portal\\x2dstate.mount"));
  EXPECT_TRUE(
      m_.Exists("/etc/systemd/system/remote-fs.target.wants/"
                "var-lib-one\\x2dhpc-portal\\x2dstate.mount"));
}

TEST_F(NfsClientTest, SystemctlFailureIsReturnedNotWaitedOn) {
  m_.runner.On({"systemctl", "--no-block", "start"},
               Exit(5, "", "Failed to start home.mount: Unit home.mount has a bad unit file\n"));
  auto s = Ensure();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kProcess);
  EXPECT_THAT(s.error().message, HasSubstr("bad unit file"));
  EXPECT_EQ(m_.clock.sleeps(), 0);
}

TEST_F(NfsClientTest, DryRunPlansWithoutTouchingAnything) {
  ASSERT_TRUE(Ensure(PlanMode::kDryRun)) << plan_->Render();
  EXPECT_THAT(Changes(), ElementsAre("create /home (0755)", "write /etc/systemd/system/home.mount",
                                     "systemctl daemon-reload", "enable home.mount",
                                     "start home.mount (--no-block)"));
  EXPECT_FALSE(m_.Exists("/etc/systemd/system/home.mount"));
  EXPECT_FALSE(m_.Exists("/home"));
  EXPECT_THAT(m_.Changes(), ElementsAre());
  EXPECT_EQ(m_.clock.sleeps(), 0);
}

TEST_F(NfsClientTest, InvalidInputChangesNothing) {
  mount_.server = "10.0.1.300";
  auto s = Ensure();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(s.error().message, HasSubstr("ONEAPP_HOME_NFS_SERVER: the NFS server '10.0.1.300'"));
  EXPECT_THAT(plan_->actions(), ElementsAre());
  EXPECT_TRUE(m_.runner.commands().empty());
}

// ---- SourceAddressFor ---------------------------------------------------------------------------

TEST(ParseRouteGetJsonTest, RealSamples) {
  EXPECT_EQ(*ParseRouteGetJson(kRouteViaGateway, "8.8.8.8"), "192.0.2.2");
  EXPECT_EQ(*ParseRouteGetJson(kRouteOnLink, "10.81.0.5"), "10.81.0.23");
  EXPECT_EQ(*ParseRouteGetJson(kRouteLocal, "10.81.0.23"), "10.81.0.23");
}

TEST(ParseRouteGetJsonTest, MalformedOutputIsAnErrorQuotingIt) {
  for (const auto& [json, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "not JSON"},
           {"RTNETLINK answers: Network is unreachable", "not JSON"},
           {R"([{"dst":"10.0.1.5","dev":"eth1")", "not JSON"},
           {"{}", "no route object"},
           {"[]", "no route object"},
           {"[1]", "no route object"},
           {R"([{"dst":"10.0.1.5","dev":"eth1"}])", "no \"prefsrc\""},
           {R"([{"dst":"10.0.1.5","prefsrc":17}])", "\"prefsrc\" is not an IPv4 address"},
           {R"([{"dst":"10.0.1.5","prefsrc":"fe80::1"}])", "\"prefsrc\" is not an IPv4 address"},
       }) {
    auto r = ParseRouteGetJson(json, "10.0.1.5");
    ASSERT_FALSE(r) << json;
    EXPECT_EQ(r.error().kind, ErrorKind::kProcess);
    EXPECT_THAT(r.error().message, HasSubstr("ip -j route get 10.0.1.5: " + why)) << json;
    EXPECT_THAT(r.error().message, HasSubstr("in its output '" + json.substr(0, 20))) << json;
  }
}

TEST(SourceAddressForTest, RunsIpRouteGetAsArgvWithATimeout) {
  fakes::FakeProcessRunner runner;
  runner.On({"ip", "-j", "route", "get"}, Exit(0, kRouteOnLink));
  auto r = SourceAddressFor(runner, "10.81.0.5");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, "10.81.0.23");
  ASSERT_EQ(runner.commands().size(), 1u);
  EXPECT_THAT(runner.commands()[0].argv, ElementsAre("ip", "-j", "route", "get", "10.81.0.5"));
  EXPECT_GT(runner.commands()[0].timeout, Duration(0));
  EXPECT_LE(runner.commands()[0].timeout, Duration(30000));
}

TEST(SourceAddressForTest, NoRouteIsAnErrorWithIpsStderr) {
  fakes::FakeProcessRunner runner;
  runner.On({"ip"}, Exit(2, "", "RTNETLINK answers: Network is unreachable\n"));
  auto r = SourceAddressFor(runner, "10.0.1.5");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kProcess);
  EXPECT_THAT(r.error().message, HasSubstr("Network is unreachable"));
  EXPECT_THAT(r.error().message, HasSubstr("10.0.1.5"));
}

TEST(SourceAddressForTest, ResolvesANameToIpv4First) {
  fakes::FakeProcessRunner runner;
  runner.On({"ip"},
            Exit(0, R"([{"type":"local","dst":"127.0.0.1","dev":"lo","prefsrc":"127.0.0.1"}])"));
  auto r = SourceAddressFor(runner, "localhost");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, "127.0.0.1");
  EXPECT_THAT(runner.Argvs(), ElementsAre("ip -j route get 127.0.0.1"));
}

TEST(SourceAddressForTest, RefusesWhatIsNeitherAddressNorName) {
  fakes::FakeProcessRunner runner;
  for (const char* bad : {"10.0.1.256", "-h", "a b", "fe80::1", ""}) {
    auto r = SourceAddressFor(runner, bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalidInput) << bad;
  }
  EXPECT_TRUE(runner.commands().empty());
}

// ---- CheckRootCanWrite
// ----------------------------------------------------------------------------

std::string ProbePath(const std::string& root, const std::string& where) {
  return root + where + "/.one-hpc-root-probe." + std::to_string(::getpid());
}

TEST_F(NfsClientTest, RootWriteSucceedsAtOnce) {
  fakes::FakeWriteProbe probe;
  ASSERT_TRUE(CheckRoot(probe));
  EXPECT_THAT(probe.paths(), ElementsAre(ProbePath(m_.root, "/home")));
  EXPECT_EQ(m_.clock.sleeps(), 0);
  EXPECT_THAT(Changes(), ElementsAre());  // a check, not a change
  EXPECT_THAT(Why("root can write to /home"), HasSubstr("created and removed /home/.one-hpc-root"));
  EXPECT_TRUE(m_.runner.commands().empty());
}

TEST_F(NfsClientTest, RootWriteRetriesTransientErrorsWithBackoff) {
  fakes::FakeWriteProbe probe;
  probe.FailNext({ESTALE, EIO, EACCES});
  ASSERT_TRUE(CheckRoot(probe));
  EXPECT_EQ(probe.paths().size(), 4u);
  EXPECT_EQ(m_.clock.sleeps(), 3);
}

TEST_F(NfsClientTest, NoRootSquashErrorTextNamesExportClientAddressAndSetting) {
  m_.runner.On(
      {"ip", "-j", "route", "get", "10.0.1.5"},
      Exit(
          0,
          R"([{"dst":"10.0.1.5","dev":"eth1","prefsrc":"10.0.1.23","flags":[],"uid":0,"cache":[]}])"));
  fakes::FakeWriteProbe probe;
  probe.FailAlways(EACCES);
  auto s = CheckRoot(probe, Duration(180000));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
  const std::string expected =
      "root cannot write to /home, mounted from 10.0.1.5:/export/home (ONEAPP_HOME_NFS_SERVER): "
      "the NFS server must export /export/home with no_root_squash to 10.0.1.23, the address "
      "this VM uses to reach 10.0.1.5 (ip route get 10.0.1.5); the portal creates home "
      "directories as root (create /home/.one-hpc-root-probe." +
      std::to_string(::getpid()) + ": Permission denied (EACCES); ";
  EXPECT_EQ(s.error().message.substr(0, expected.size()), expected) << s.error().message;
  EXPECT_THAT(s.error().message.substr(expected.size()),
              MatchesRegex("[0-9]+ attempts in [0-9.]+ s\\)"));
  // Retried until the deadline, not beyond it.
  EXPECT_GT(probe.paths().size(), 10u);
  EXPECT_LT(m_.clock.slept(), Duration(180000));
  EXPECT_GT(m_.clock.slept(), Duration(150000));
  EXPECT_THAT(m_.runner.Argvs(), ElementsAre("ip -j route get 10.0.1.5"));
}

TEST_F(NfsClientTest, EpermGivesTheSameActionAndErofsAsksForReadWrite) {
  m_.runner.On({"ip"}, Exit(0, R"([{"dst":"10.0.1.5","prefsrc":"10.0.1.23"}])"));
  fakes::FakeWriteProbe eperm;
  eperm.FailAlways(EPERM);
  auto s = CheckRoot(eperm, Duration(3000));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(s.error().message,
              HasSubstr("must export /export/home with no_root_squash to 10.0.1.23,"));
  EXPECT_THAT(s.error().message, HasSubstr("Operation not permitted (EPERM)"));

  fakes::FakeWriteProbe erofs;
  erofs.FailAlways(EROFS);
  s = CheckRoot(erofs, Duration(3000));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
  EXPECT_THAT(s.error().message,
              HasSubstr("must export /export/home read-write (rw) and with no_root_squash to "
                        "10.0.1.23, the address this VM uses to reach 10.0.1.5"));
  EXPECT_THAT(s.error().message, HasSubstr("(EROFS)"));
}

TEST_F(NfsClientTest, NoRootSquashErrorSaysWhenTheSourceAddressIsUnknown) {
  m_.runner.On({"ip"}, Exit(2, "", "RTNETLINK answers: Network is unreachable\n"));
  fakes::FakeWriteProbe probe;
  probe.FailAlways(EACCES);
  mount_.root_write_why.clear();
  auto s = CheckRoot(probe, Duration(2000));
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message,
              HasSubstr("the NFS server must export /export/home with no_root_squash to the "
                        "address this VM uses to reach 10.0.1.5 (could not tell which: "));
  EXPECT_THAT(s.error().message, HasSubstr("Network is unreachable"));
  EXPECT_THAT(s.error().message, Not(HasSubstr("portal")));
}

TEST_F(NfsClientTest, OtherErrorsAtTheDeadlineAreIoErrors) {
  fakes::FakeWriteProbe probe;
  probe.FailAlways(ENOSPC);
  auto s = CheckRoot(probe, Duration(4000));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kIo);
  EXPECT_THAT(s.error().message,
              HasSubstr("root cannot write to /home, mounted from 10.0.1.5:/export/home "
                        "(ONEAPP_HOME_NFS_SERVER): create /home/.one-hpc-root-probe."));
  EXPECT_THAT(s.error().message, HasSubstr("(ENOSPC)"));
  EXPECT_THAT(s.error().message, Not(HasSubstr("no_root_squash")));
  EXPECT_TRUE(m_.runner.commands().empty());
}

TEST_F(NfsClientTest, RootWriteDryRunProbesNothing) {
  fakes::FakeWriteProbe probe;
  ASSERT_TRUE(CheckRoot(probe, Duration(180000), PlanMode::kDryRun));
  EXPECT_TRUE(probe.paths().empty());
  EXPECT_THAT(Changes(), ElementsAre());
}

TEST(RealWriteProbeTest, CreatesAndRemovesAndClearsAStaleProbe) {
  char tmpl[] = "/tmp/onehpc-probe.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  RealWriteProbe probe;
  std::string path = dir + "/.one-hpc-root-probe.1";
  auto ok = probe.CreateAndRemove(path);
  EXPECT_EQ(ok.error, 0);
  EXPECT_FALSE(fs::exists(path));
  // A probe left by a killed run: EEXIST once, then clean.
  std::ofstream(path) << "";
  auto stale = probe.CreateAndRemove(path);
  EXPECT_EQ(stale.error, EEXIST);
  EXPECT_EQ(stale.step, "create");
  EXPECT_EQ(probe.CreateAndRemove(path).error, 0);
  // O_NOFOLLOW|O_EXCL: a symlink is never followed (EEXIST), its target is not created.
  fs::create_symlink(dir + "/elsewhere", path);
  EXPECT_NE(probe.CreateAndRemove(path).error, 0);
  EXPECT_FALSE(fs::exists(dir + "/elsewhere"));
  // A missing directory.
  EXPECT_EQ(probe.CreateAndRemove(dir + "/missing/p").error, ENOENT);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace onehpc::nfs
