// The managed /etc/hosts block and host name rules.
#include "roles/host/hostname.h"

#include <gtest/gtest.h>

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
