// The managed /etc/hosts block and host name rules.
#include "roles/host/hostname.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "roles/ood/settings.h"
#include "roles/portal.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/role_run.h"

namespace onehpc::host {
namespace {

constexpr char kBegin[] = "# BEGIN one-hpc managed block (do not edit)\n";
constexpr char kEnd[] = "# END one-hpc managed block\n";

TEST(HostsBlockTest, NewBlockGoesFirstAndKeepsTheRest) {
  auto out = ReplaceHostsBlock("127.0.0.1\tlocalhost\n127.0.1.1\tslurm-one-controller\n",
                               {{"10.0.0.5", "slurm-one-controller"}});
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, std::string(kBegin) + "10.0.0.5\tslurm-one-controller\n" + kEnd +
                      "127.0.0.1\tlocalhost\n127.0.1.1\tslurm-one-controller\n");
}

TEST(HostsBlockTest, ReplacedInPlaceNeverAppended) {
  std::string current = std::string("127.0.0.1 localhost\n") + kBegin + "10.0.0.4\told\n" + kEnd +
                        "192.0.2.1 other\n";
  auto out = ReplaceHostsBlock(current, {{"10.0.0.9", "w1"}, {"10.0.0.5", "ctl"}});
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, std::string("127.0.0.1 localhost\n") + kBegin + "10.0.0.9\tw1\n10.0.0.5\tctl\n" +
                      kEnd + "192.0.2.1 other\n");
  auto again = ReplaceHostsBlock(*out, {{"10.0.0.9", "w1"}, {"10.0.0.5", "ctl"}});
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *out);  // idempotent
}

TEST(HostsBlockTest, DuplicateBlocksCollapseAndMissingNewlineIsFine) {
  std::string current = std::string(kBegin) + "1.1.1.1\ta\n" + kEnd + "x y\n" + kBegin +
                        "2.2.2.2\tb\n" + kEnd + "last line";
  auto out = ReplaceHostsBlock(current, {{"3.3.3.3", "c"}});
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, std::string(kBegin) + "3.3.3.3\tc\n" + kEnd + "x y\nlast line\n");
}

TEST(HostsBlockTest, BrokenMarkersAreErrors) {
  EXPECT_FALSE(ReplaceHostsBlock(std::string("a b\n") + kBegin + "1.1.1.1 x\n", {}));
  EXPECT_FALSE(ReplaceHostsBlock(std::string("a b\n") + kEnd, {}));
  EXPECT_FALSE(ReplaceHostsBlock(std::string(kBegin) + kBegin + kEnd, {}));
}

TEST(HostsBlockTest, TheWorkersBlockAndTheRoleBlockKeepEachOther) {
  auto role = ReplaceHostsBlock("127.0.0.1\tlocalhost\n", {{"10.0.0.5", "ood-portal"}});
  ASSERT_TRUE(role);
  auto both = ReplaceHostsBlock(*role, {{"10.0.0.7", "ood-worker-7"}}, kWorkersBlock);
  ASSERT_TRUE(both);
  // The role's block rewritten by configure keeps the workers' block, and back.
  auto role_again = ReplaceHostsBlock(*both, {{"10.0.0.6", "ood-portal"}});
  ASSERT_TRUE(role_again);
  EXPECT_NE(role_again->find("10.0.0.7\tood-worker-7\n"), std::string::npos) << *role_again;
  EXPECT_NE(role_again->find("10.0.0.6\tood-portal\n"), std::string::npos);
  EXPECT_EQ(role_again->find("10.0.0.5"), std::string::npos);
  auto workers_gone = ReplaceHostsBlock(*role_again, {}, kWorkersBlock);
  ASSERT_TRUE(workers_gone);
  EXPECT_EQ(workers_gone->find("ood-worker-7"), std::string::npos);
  EXPECT_NE(workers_gone->find("10.0.0.6\tood-portal\n"), std::string::npos);
  EXPECT_NE(workers_gone->find("127.0.0.1\tlocalhost\n"), std::string::npos);
}

// LLMNR and mDNS off: the drop-in once, systemd-resolved restarted only when it runs and the
// drop-in changed.
TEST(NoMulticastNamesTest, DropInOnceRestartOnlyARunningResolvedOnlyOnChange) {
  fakes::FakeMachine m;
  auto role = MakePortalRole();
  m.active.insert("systemd-resolved.service");
  {
    fakes::RoleRun run(m, *role, {{ood::kNfsHost, "10.0.1.5"}}, nullptr);
    ASSERT_TRUE(EnsureNoMulticastNames(*run.env, "test"));
  }
  const std::string dropin = m.Read(kResolvedNoMulticast);
  EXPECT_THAT(dropin, ::testing::HasSubstr("[Resolve]\nLLMNR=no\nMulticastDNS=no\n"));
  EXPECT_THAT(m.Changes(),
              ::testing::Contains("systemctl --no-block restart systemd-resolved.service"));
  const size_t before = m.Changes().size();
  {
    fakes::RoleRun run(m, *role, {{ood::kNfsHost, "10.0.1.5"}}, nullptr);
    ASSERT_TRUE(EnsureNoMulticastNames(*run.env, "test"));
  }
  EXPECT_EQ(m.Changes().size(), before) << "unchanged: no restart";
  // Not running: the drop-in alone (resolved reads it when it starts).
  fakes::FakeMachine idle;
  {
    fakes::RoleRun run(idle, *role, {{ood::kNfsHost, "10.0.1.5"}}, nullptr);
    ASSERT_TRUE(EnsureNoMulticastNames(*run.env, "test"));
  }
  EXPECT_EQ(idle.Read(kResolvedNoMulticast), dropin);
  EXPECT_THAT(idle.Changes(), ::testing::Not(::testing::Contains(::testing::HasSubstr("restart"))));
}

TEST(HostNameTest, Rules) {
  EXPECT_TRUE(IsValidHostLabel("slurm-one-worker-12"));
  EXPECT_FALSE(IsValidHostLabel("-x"));
  EXPECT_FALSE(IsValidHostLabel("x-"));
  EXPECT_FALSE(IsValidHostLabel("a_b"));
  EXPECT_FALSE(IsValidHostLabel(""));
  EXPECT_EQ(ShortNameFromSetHostname("w1.example.com").value_or("?"), "w1");
  EXPECT_EQ(ShortNameFromSetHostname(" node7 ").value_or("?"), "node7");
  auto bad = ShortNameFromSetHostname("bad name;rm");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("SET_HOSTNAME"), std::string::npos);
}

}  // namespace
}  // namespace onehpc::host
