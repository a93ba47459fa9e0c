#include "roles/os/systemd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/log.h"
#include "tests/fakes/clock.h"
#include "tests/fakes/process_runner.h"

namespace onehpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ProcessResult Exit(int code, std::string err = "") {
  ProcessResult r;
  r.exit_code = code;
  r.err = std::move(err);
  return r;
}

TEST(SystemdTest, RuntimeOperationsUseTheExactArgv) {
  fakes::FakeProcessRunner runner;
  SystemctlSystemd systemd(runner);
  ASSERT_TRUE(systemd.DaemonReload());
  ASSERT_TRUE(systemd.Enable("munge.service"));
  ASSERT_TRUE(systemd.Disable("slurmd.service"));
  ASSERT_TRUE(systemd.StartNoBlock("slurmctld.service"));
  ASSERT_TRUE(systemd.RestartNoBlock("nfs-server.service"));
  ASSERT_TRUE(systemd.StopNoBlock("export-home.mount"));
  EXPECT_THAT(runner.Argvs(),
              ElementsAre("systemctl daemon-reload", "systemctl enable --no-reload munge.service",
                          "systemctl disable --no-reload slurmd.service",
                          "systemctl --no-block start slurmctld.service",
                          "systemctl --no-block restart nfs-server.service",
                          "systemctl --no-block stop export-home.mount"));
  for (const auto& c : runner.commands()) {
    EXPECT_EQ(c.timeout, kSystemctlTimeout) << c.argv.back();
    // enable and disable change links only: no systemd-sysv-install (perl's update-rc.d).
    bool links = c.argv[1] == "enable" || c.argv[1] == "disable";
    std::vector<std::pair<std::string, std::string>> skip_sysv = {{"SYSTEMCTL_SKIP_SYSV", "1"}};
    EXPECT_EQ(c.env, links ? skip_sysv : decltype(c.env){}) << c.argv[1];
  }
}

TEST(SystemdTest, RootSlashIsTheRunningSystem) {
  fakes::FakeProcessRunner runner;
  SystemctlSystemd systemd(runner, "/");
  ASSERT_TRUE(systemd.Enable("munge.service"));
  ASSERT_TRUE(systemd.StartNoBlock("munge.service"));
  EXPECT_THAT(runner.Argvs(), ElementsAre("systemctl enable --no-reload munge.service",
                                          "systemctl --no-block start munge.service"));
}

TEST(SystemdTest, EscapedUnitNamesArePassedUnchanged) {
  fakes::FakeProcessRunner runner;
  SystemctlSystemd systemd(runner);
  ASSERT_TRUE(systemd.Enable("dev-disk-by\\x2dlabel-ood\\x2dhome.device"));
  ASSERT_EQ(runner.commands().size(), 1u);
  EXPECT_EQ(runner.commands()[0].argv.back(), "dev-disk-by\\x2dlabel-ood\\x2dhome.device");
}

TEST(SystemdTest, FailureCarriesArgvAndStderr) {
  fakes::FakeProcessRunner runner;
  runner.On({"systemctl", "enable"},
            Exit(1, "Failed to enable unit: Unit file x.service does not exist.\n"));
  SystemctlSystemd systemd(runner);
  auto s = systemd.Enable("x.service");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kProcess);
  EXPECT_EQ(
      s.error().message,
      "systemctl enable --no-reload x.service exited with code 1: Failed to enable unit: Unit file "
      "x.service does not exist.");
}

TEST(SystemdTest, StartFailureAndTimeoutAreErrors) {
  fakes::FakeProcessRunner runner;
  ProcessResult timed_out;
  timed_out.timed_out = true;
  timed_out.term_signal = 15;
  runner.On({"systemctl", "--no-block", "start"}, timed_out);
  SystemctlSystemd systemd(runner);
  auto s = systemd.StartNoBlock("slurmd.service");
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("timed out after 120000 ms"));
}

TEST(SystemdTest, BadUnitNamesAreRefusedWithoutRunningAnything) {
  fakes::FakeProcessRunner runner;
  SystemctlSystemd systemd(runner);
  for (const std::string unit :
       {"", "--now", "-x.service", "a b.service", "../x.service", "x.service\n"}) {
    auto s = systemd.StartNoBlock(unit);
    ASSERT_FALSE(s) << unit;
    EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
    EXPECT_FALSE(systemd.Enable(unit));
    EXPECT_FALSE(systemd.IsActive(unit));
  }
  EXPECT_TRUE(runner.commands().empty());
}

TEST(SystemdTest, IsActiveMapsExitCodes) {
  fakes::FakeProcessRunner runner;
  runner.On({"systemctl", "is-active", "--quiet", "a.service"}, Exit(0));
  runner.On({"systemctl", "is-active", "--quiet", "b.service"}, Exit(3));
  runner.On({"systemctl", "is-active", "--quiet", "c.service"}, Exit(4));
  SystemctlSystemd systemd(runner);
  auto a = systemd.IsActive("a.service");
  ASSERT_TRUE(a);
  EXPECT_TRUE(*a);
  auto b = systemd.IsActive("b.service");
  ASSERT_TRUE(b);
  EXPECT_FALSE(*b);
  auto c = systemd.IsActive("c.service");
  ASSERT_TRUE(c);
  EXPECT_FALSE(*c);
  ASSERT_EQ(runner.commands().size(), 3u);
  EXPECT_EQ(runner.Argvs()[0], "systemctl is-active --quiet a.service");
  EXPECT_EQ(runner.commands()[0].timeout, Duration(10000));
}

TEST(SystemdTest, IsActiveFailureToRunIsAnError) {
  ProcessResult timed_out;
  timed_out.timed_out = true;
  fakes::FakeProcessRunner runner;
  runner.On({"systemctl", "is-active"}, timed_out);
  SystemctlSystemd systemd(runner);
  auto r = systemd.IsActive("a.service");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kProcess);

  // A real runner and no such program: the start error comes through.
  class MissingRunner : public ProcessRunner {
   public:
    Result<ProcessResult> Run(const Command&) override {
      return Fail(ErrorKind::kProcess, "program not found: systemctl");
    }
  } missing;
  SystemctlSystemd no_systemctl(missing);
  auto m = no_systemctl.IsActive("a.service");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message, "program not found: systemctl");
}

TEST(SystemdTest, OfflineRootEnablesWithRootAndRefusesRuntimeOperations) {
  fakes::FakeProcessRunner runner;
  SystemctlSystemd systemd(runner, "/srv/image");
  ASSERT_TRUE(systemd.Enable("munge.service"));
  ASSERT_TRUE(systemd.Disable("slurmd.service"));
  EXPECT_THAT(runner.Argvs(),
              ElementsAre("systemctl --root=/srv/image enable --no-reload munge.service",
                          "systemctl --root=/srv/image disable --no-reload slurmd.service"));
  auto reload = systemd.DaemonReload();
  ASSERT_FALSE(reload);
  EXPECT_EQ(reload.error().kind, ErrorKind::kInvalidInput);
  for (auto s : {systemd.StartNoBlock("a.service"), systemd.RestartNoBlock("a.service"),
                 systemd.StopNoBlock("a.service")}) {
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().kind, ErrorKind::kInvalidInput);
    EXPECT_THAT(s.error().message, HasSubstr("--root=/srv/image"));
  }
  EXPECT_FALSE(systemd.IsActive("a.service"));
  EXPECT_EQ(runner.commands().size(), 2u);
}

TEST(SystemdTest, WaitActivePollsOnTheClockUntilActive) {
  fakes::FakeProcessRunner runner;
  int calls = 0;
  runner.On({"systemctl", "is-active"}, [&](const Command&) { return Exit(++calls < 4 ? 3 : 0); });
  SystemctlSystemd systemd(runner);
  fakes::FakeClock clock;
  ASSERT_TRUE(systemd.WaitActive("slurmd.service", Duration(10000), clock));
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(clock.sleeps(), 3);
  EXPECT_EQ(clock.slept(), Duration(1500));
}

TEST(SystemdTest, WaitActiveGivesUpAtTheDeadline) {
  fakes::FakeProcessRunner runner;
  runner.On({"systemctl", "is-active"}, Exit(3));
  SystemctlSystemd systemd(runner);
  fakes::FakeClock clock;
  auto s = systemd.WaitActive("slurmd.service", Duration(1200), clock);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, ErrorKind::kProcess);
  EXPECT_EQ(s.error().message, "unit slurmd.service did not become active within 1200 ms");
  // Checks at 0, 500, 1000 and at the deadline (1200): never sleeps past it. Then one read
  // of the unit's journal, which here has nothing to say.
  EXPECT_EQ(clock.slept(), Duration(1200));
  ASSERT_EQ(runner.commands().size(), 5u);
  EXPECT_EQ(runner.commands()[4].argv,
            (std::vector<std::string>{"journalctl", "--no-pager", "-q", "-o", "cat", "-n", "3",
                                      "-u", "slurmd.service"}));
  EXPECT_EQ(runner.commands()[4].timeout, Duration(10000));
}

// Why a daemon did not come up: its last log lines, one line, the end kept, secrets redacted.
TEST(SystemdTest, WaitActiveCarriesTheUnitsLastLogLines) {
  fakes::FakeProcessRunner runner;
  runner.On({"systemctl", "is-active"}, Exit(3));
  runner.On({"journalctl"},
            fakes::Exit(0,
                        "starting\n  mysqld: Can't create/write to file (s3cret)\n\n"
                        "mysqld: Aborting\n"));
  log::AddSecret("s3cret");
  SystemctlSystemd systemd(runner);
  fakes::FakeClock clock;
  auto s = systemd.WaitActive("mariadb.service", Duration(0), clock);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message,
            "unit mariadb.service did not become active within 0 ms; its last log lines: "
            "starting | mysqld: Can't create/write to file (<redacted>) | mysqld: Aborting");
  runner.On({"journalctl"}, fakes::Exit(0, std::string(1000, 'x') + "\n"));
  std::string tail = systemd.RecentLog("mariadb.service", 3);
  EXPECT_EQ(tail, "..." + std::string(400, 'x'));
  // Under --root nothing is read (the journal is this machine's).
  SystemctlSystemd offline(runner, "/tmp/r");
  EXPECT_EQ(offline.RecentLog("mariadb.service", 3), "");
}

TEST(SystemdTest, WaitActiveActiveAtOnceDoesNotSleep) {
  fakes::FakeProcessRunner runner;
  SystemctlSystemd systemd(runner);  // default: exit 0
  fakes::FakeClock clock;
  ASSERT_TRUE(systemd.WaitActive("munge.service", Duration(0), clock));
  EXPECT_EQ(clock.sleeps(), 0);
}

TEST(SystemdTest, WaitActivePassesErrorsThrough) {
  ProcessResult killed;
  killed.exit_code = -1;
  killed.term_signal = 9;
  fakes::FakeProcessRunner runner;
  runner.On({"systemctl"}, killed);
  SystemctlSystemd systemd(runner);
  fakes::FakeClock clock;
  auto s = systemd.WaitActive("munge.service", Duration(5000), clock);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("killed by signal 9"));
}

}  // namespace
}  // namespace onehpc
