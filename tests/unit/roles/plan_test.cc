#include "roles/plan.h"

#include <gtest/gtest.h>

#include "common/log.h"

namespace onehpc {
namespace {

TEST(PlanTest, DryRunRecordsWithoutRunning) {
  Plan plan(PlanMode::kDryRun);
  bool ran = false;
  ASSERT_TRUE(plan.Do("write /etc/x", "missing", [&]() -> Status {
    ran = true;
    return Ok();
  }));
  plan.Keep("/etc/y", "already up to date");
  EXPECT_FALSE(ran);
  ASSERT_EQ(plan.actions().size(), 2u);
  EXPECT_EQ(plan.Render(),
            "1. write /etc/x\n   because: missing\n"
            "2. /etc/y [keep]\n   because: already up to date\n");
}

TEST(PlanTest, ApplyRunsAndLogsStartedFinished) {
  log::Capture capture;
  Plan plan(PlanMode::kApply);
  bool ran = false;
  ASSERT_TRUE(plan.Do("start munge", "key changed", [&]() -> Status {
    ran = true;
    return Ok();
  }));
  EXPECT_TRUE(ran);
  EXPECT_TRUE(capture.Contains("start munge (key changed) [started]"));
  EXPECT_TRUE(capture.Contains("start munge (key changed) [finished]"));
  EXPECT_EQ(plan.actions()[0].outcome, PlannedAction::Outcome::kDone);
}

TEST(PlanTest, ApplyFailureAddsContextAndLogsFailed) {
  log::Capture capture;
  Plan plan(PlanMode::kApply);
  Status s = plan.Do("start munge", "key changed",
                     []() -> Status { return Fail(ErrorKind::kProcess, "exit 1"); });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "start munge: exit 1");
  EXPECT_EQ(s.error().kind, ErrorKind::kProcess);
  EXPECT_TRUE(capture.Contains("[failed] exit 1"));
  EXPECT_NE(plan.Render().find("[FAILED]"), std::string::npos);
}

TEST(PlanTest, EmptyPlanSaysSo) {
  Plan plan(PlanMode::kDryRun);
  EXPECT_EQ(plan.Render(), "(nothing to do)\n");
}

}  // namespace
}  // namespace onehpc
