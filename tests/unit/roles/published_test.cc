// What this VM may have left in OneGate: the record behind configure's erases.
#include "roles/published.h"

#include <gtest/gtest.h>

#include "roles/role_change.h"
#include "tests/fakes/machine.h"

namespace onehpc {
namespace {

TEST(PublishedTest, AFirstBootHasPublishedNothing) {
  fakes::FakeMachine m;
  EXPECT_FALSE(MayBePublished(*m.files, "READY"));
  EXPECT_FALSE(MayBePublished(*m.files, "ERROR"));
  ASSERT_TRUE(RecordPublished(*m.files, "READY"));
  EXPECT_TRUE(MayBePublished(*m.files, "READY"));
  EXPECT_FALSE(MayBePublished(*m.files, "ERROR"));
  ASSERT_TRUE(RecordPublished(*m.files, "ERROR"));
  ASSERT_TRUE(RecordPublished(*m.files, "READY"));  // once
  EXPECT_EQ(m.Read(kPublishedFile), "ERROR\nREADY\n");
  ASSERT_TRUE(RecordErased(*m.files, "READY"));
  ASSERT_TRUE(RecordErased(*m.files, "READY"));
  EXPECT_EQ(m.Read(kPublishedFile), "ERROR\n");
  EXPECT_FALSE(MayBePublished(*m.files, "READY"));
}

// An older one-hpc configured this VM (its role record) and kept no record of what it
// published: both may be there until each is erased once.
TEST(PublishedTest, AVmAnOlderOneHpcConfiguredMayHaveBoth) {
  fakes::FakeMachine m;
  m.Write(kRoleRecordFile, "{\"role\": \"worker\", \"units\": []}\n");
  EXPECT_TRUE(MayBePublished(*m.files, "READY"));
  EXPECT_TRUE(MayBePublished(*m.files, "ERROR"));
  ASSERT_TRUE(RecordErased(*m.files, "READY"));
  EXPECT_EQ(m.Read(kPublishedFile), "ERROR\n") << "ERROR is still unknown, so kept";
  EXPECT_FALSE(MayBePublished(*m.files, "READY"));
  EXPECT_TRUE(MayBePublished(*m.files, "ERROR"));
}

// A record that cannot be read (here: a directory in its place) counts as "may be there".
TEST(PublishedTest, AnUnreadableRecordMeansMayBeThere) {
  fakes::FakeMachine m;
  m.Write(std::string(kPublishedFile) + "/x", "");
  EXPECT_TRUE(MayBePublished(*m.files, "READY"));
  EXPECT_TRUE(MayBePublished(*m.files, "ERROR"));
  EXPECT_FALSE(RecordPublished(*m.files, "READY"));
  EXPECT_FALSE(RecordErased(*m.files, "READY"));
}

}  // namespace
}  // namespace onehpc
