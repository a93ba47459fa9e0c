// munged's restart after a key change: the check that munged answers runs against the new
// daemon, never the old one that a queued (--no-block) restart has not replaced yet.
#include "roles/slurm/munge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "roles/controller.h"
#include "roles/names.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/role_run.h"

namespace onehpc::slurm {
namespace {

using fakes::Exit;
using fakes::FakeMachine;
using fakes::RoleRun;
using ::testing::HasSubstr;

class MungeRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_.active.insert(kMungeUnit);
    m_.Write("/etc/systemd/system/multi-user.target.wants/" + std::string(kMungeUnit), "on\n");
    // munged's pid: 100 until the restart has run `polls_until_new` more polls, then 200.
    m_.runner.On({"systemctl", "--no-block", "restart"}, [this](const Command&) {
      restarted_ = true;
      return Exit(0);
    });
    m_.runner.On({"systemctl", "show", "-P", "MainPID"}, [this](const Command&) {
      if (restarted_ && polls_until_new_-- <= 0) return Exit(0, "200\n");
      return Exit(0, "100\n");
    });
  }
  Status Run(bool changed) {
    RoleRun run(m_, *role_, {{"ETH0_IP", "10.0.0.5"}}, nullptr);
    return EnsureMungeRunning(*run.env, changed);
  }
  // The index in the commands run of the first one starting with `prefix` (-1: none).
  int First(const std::string& prefix) const {
    auto argvs = m_.runner.Argvs();
    for (size_t i = 0; i < argvs.size(); ++i) {
      if (argvs[i].rfind(prefix, 0) == 0) return static_cast<int>(i);
    }
    return -1;
  }
  int Last(const std::string& prefix) const {
    auto argvs = m_.runner.Argvs();
    for (size_t i = argvs.size(); i > 0; --i) {
      if (argvs[i - 1].rfind(prefix, 0) == 0) return static_cast<int>(i - 1);
    }
    return -1;
  }
  FakeMachine m_;
  std::unique_ptr<Role> role_ = MakeControllerRole();
  bool restarted_ = false;
  int polls_until_new_ = 2;
};

TEST_F(MungeRestartTest, AfterAKeyChangeTheCheckWaitsForTheNewDaemon) {
  ASSERT_TRUE(Run(true));
  EXPECT_TRUE(restarted_);
  // The check ran after the pid changed, not against the old munged.
  EXPECT_GT(First("munge -n"), Last("systemctl show -P MainPID"));
  EXPECT_GE(m_.clock.sleeps(), 2);
}

TEST_F(MungeRestartTest, ADaemonThatIsNeverReplacedIsAnError) {
  polls_until_new_ = 1 << 30;
  auto s = Run(true);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("munged was not restarted with the new key"));
  EXPECT_THAT(s.error().message, HasSubstr("its pid is still 100"));
  EXPECT_EQ(First("munge -n"), -1);  // no check against the old daemon
}

TEST_F(MungeRestartTest, WithoutAKeyChangeNothingIsWaitedFor) {
  ASSERT_TRUE(Run(false));
  EXPECT_FALSE(restarted_);
  EXPECT_EQ(First("systemctl show"), -1);
  EXPECT_GE(First("munge -n"), 0);
}

}  // namespace
}  // namespace onehpc::slurm
