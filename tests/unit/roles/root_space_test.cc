// The root file system's room as `stat -f` prints it. CheckRootSpace in a configure:
// tests/integration/configure_flow_test.cc.
#include "roles/root_space.h"

#include <gtest/gtest.h>

namespace onehpc {
namespace {

TEST(ParseRootSpaceTest, ReadsStatFOutput) {
  auto space = ParseRootSpace("4096 2097152 76800 524288 400000\n");
  ASSERT_TRUE(space);
  EXPECT_EQ(space->total_mib, 8192);
  EXPECT_EQ(space->avail_mib, 300);
  EXPECT_EQ(space->total_inodes, 524288);
  EXPECT_EQ(space->free_inodes, 400000);
  EXPECT_EQ(ParseRootSpace("1024 8388608 0 9 5")->avail_mib, 0);
  // btrfs counts no inodes: 0 and 0.
  EXPECT_EQ(ParseRootSpace("4096 2097152 76800 0 0")->total_inodes, 0);
  for (const char* bad : {"", "4096 2097152 76800 1", "4096 2097152 76800 4 4 extra", "0 1 1 1 1",
                          "4096 -1 1 1 1", "a b c d e"}) {
    EXPECT_FALSE(ParseRootSpace(bad)) << bad;
  }
}

}  // namespace
}  // namespace onehpc
