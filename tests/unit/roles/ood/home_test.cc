// home-create request checks (no root needed; the file-system behaviour is tested as root
// in tests/integration/ood_home_test.cc).
#include "roles/ood/home.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/mounts.h"

namespace onehpc::ood {
namespace {

HomeRequest Good() {
  HomeRequest r;
  r.user = "alice";
  r.uid = 10001;
  r.gid = 10001;
  r.home = "/home/alice";
  return r;
}

TEST(HomesMountedTest, OnlyTheNfsMountOfTheHomesIsAccepted) {
  fakes::FakeMounts mounts;
  auto none = CheckHomesMounted(mounts, "/home", false);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(none.error().message, ::testing::HasSubstr("/home is not mounted"));
  mounts.table.push_back({"/dev/vda1", "/home", "ext4", "rw"});
  auto local = CheckHomesMounted(mounts, "/home", false);
  ASSERT_FALSE(local);
  EXPECT_THAT(local.error().message, ::testing::HasSubstr("is a ext4 mount of /dev/vda1"));
  EXPECT_TRUE(CheckHomesMounted(mounts, "/home", true));  // the lab's bind mount
  mounts.table = {{"10.0.0.3:/export/home", "/home", "nfs4", "rw"}};
  EXPECT_TRUE(CheckHomesMounted(mounts, "/home", false));
}

TEST(HomeRequestTest, AcceptsAnOrdinaryUser) {
  EXPECT_TRUE(ValidateHomeRequest(Good()));
  HomeRequest r = Good();
  r.user = "john.doe";
  r.home = "/home/john.doe";
  EXPECT_TRUE(ValidateHomeRequest(r));
  r = Good();
  r.home_base = "/home/";  // trailing slash tolerated
  EXPECT_TRUE(ValidateHomeRequest(r));
}

TEST(HomeRequestTest, RefusesSystemAccountsAndForeignHomes) {
  HomeRequest r = Good();
  r.uid = 0;
  EXPECT_THAT(ValidateHomeRequest(r).error().message, ::testing::HasSubstr("system account"));
  r.uid = 999;
  EXPECT_FALSE(ValidateHomeRequest(r));
  r.uid = 65534;
  EXPECT_FALSE(ValidateHomeRequest(r));
  r = Good();
  r.gid = 0;
  EXPECT_FALSE(ValidateHomeRequest(r));
  for (const char* home :
       {"/etc", "/home/alice/", "/home/bob", "/home//alice", "/home/alice/../bob", "/root", ""}) {
    r = Good();
    r.home = home;
    auto status = ValidateHomeRequest(r);
    ASSERT_FALSE(status) << home;
    EXPECT_EQ(status.error().kind, ErrorKind::kInvalidInput);
  }
  r = Good();
  r.home_base = "home";
  EXPECT_FALSE(ValidateHomeRequest(r));
}

TEST(HomeRequestTest, RefusesNamesThatAreNotOnePathComponent) {
  for (const char* name :
       {"", ".", "..", "../etc", "a/b", "/abs", ".hidden", "-rf", "a b", "a\nb", "ali$ce"}) {
    HomeRequest r = Good();
    r.user = name;
    r.home = std::string("/home/") + name;
    EXPECT_FALSE(ValidateHomeRequest(r)) << name;
  }
  HomeRequest r = Good();
  r.user = std::string(65, 'a');
  r.home = "/home/" + r.user;
  EXPECT_FALSE(ValidateHomeRequest(r));
}

}  // namespace
}  // namespace onehpc::ood
