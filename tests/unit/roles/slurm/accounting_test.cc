// Accounting dumps and restore, with a fake mariadb-dump / mariadb (the real round trip is
// tests/integration/ood_accounting_test.cc).
#include "roles/slurm/accounting.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fakes/process_runner.h"

namespace onehpc::slurm {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::chrono::system_clock::time_point At(std::time_t seconds) {
  return std::chrono::system_clock::from_time_t(seconds);
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class AccountingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/one-hpc-acct-unit.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    options_.backup_dir = dir_;
    options_.connection = {"--socket=/run/mysqld/mysqld.sock"};
    options_.keep = 3;
    options_.restore_marker = dir_ + ".restore-marker";
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove(options_.restore_marker);
  }
  // mariadb-dump writes `content` to its --result-file and exits with `code`.
  void FakeDump(const std::string& content, int code = 0) {
    runner_.On({"mariadb-dump"}, [content, code](const Command& c) {
      for (const auto& a : c.argv) {
        if (a.rfind("--result-file=", 0) == 0) Write(a.substr(14), content);
      }
      ProcessResult r;
      r.exit_code = code;
      return r;
    });
  }
  std::vector<std::string> Names() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir_;
  AccountingOptions options_;
  fakes::FakeProcessRunner runner_;
};

// After a run of cut-short dumps, `keep` would prune the only dump a restore can use.
TEST_F(AccountingTest, PruningNeverRemovesTheNewestCompleteDump) {
  const std::string complete = "CREATE TABLE t (i INT);\n-- Dump completed on 2026-11-29\n";
  Write(dir_ + "/" + DumpFileName("slurm_acct_db", At(1700000000)), complete);
  Write(dir_ + "/" + DumpFileName("slurm_acct_db", At(1700001000)), complete);
  for (int i = 2; i < 6; ++i) {
    Write(dir_ + "/" + DumpFileName("slurm_acct_db", At(1700000000 + i * 1000)), "INSERT (1");
  }
  auto removed = PruneDumps(options_);
  ASSERT_TRUE(removed) << removed.error().message;
  EXPECT_EQ(removed->size(), 2u);  // 6 dumps, keep 3, the newest complete one stays
  EXPECT_THAT(Names(), Contains(DumpFileName("slurm_acct_db", At(1700001000))));
  EXPECT_THAT(Names(), ::testing::Not(Contains(DumpFileName("slurm_acct_db", At(1700000000)))));
}

TEST_F(AccountingTest, NoDumpWhileARestoreIsUnfinished) {
  FakeDump("-- Dump completed on 2026-11-29\n");
  Write(options_.restore_marker, dir_ + "/slurm_acct_db-20231114T221320Z.sql\n");
  auto dumped = DumpAccounting(options_, runner_, At(1700000000));
  ASSERT_FALSE(dumped);
  EXPECT_EQ(dumped.error().kind, ErrorKind::kUnsafe);
  EXPECT_THAT(dumped.error().message, HasSubstr("is unfinished"));
  EXPECT_TRUE(Names().empty());
  EXPECT_TRUE(runner_.commands().empty());
}

TEST(AccountingNamesTest, FileNameAndTrailer) {
  EXPECT_EQ(DumpFileName("slurm_acct_db", At(1700000000)), "slurm_acct_db-20231114T221320Z.sql");
  EXPECT_TRUE(HasCompletionTrailer("INSERT ...;\n-- Dump completed on 2026-11-29 20:00:00\n"));
  EXPECT_TRUE(HasCompletionTrailer("-- Dump completed on 2026-11-29 20:00:00"));
  EXPECT_FALSE(HasCompletionTrailer("-- Dump completed on 2026\nINSERT INTO t VALUES (1"));
  EXPECT_FALSE(HasCompletionTrailer("INSERT INTO t VALUES (1,2"));
  EXPECT_FALSE(HasCompletionTrailer(""));
}

TEST_F(AccountingTest, CompleteDumpIsRenamedPrivateAndPruned) {
  FakeDump("CREATE TABLE t (i int);\n-- Dump completed on 2026-11-29 20:00:00\n");
  for (int i = 0; i < 5; ++i) {
    auto path = DumpAccounting(options_, runner_, At(1700000000 + i * 1800));
    ASSERT_TRUE(path) << path.error().message;
    struct stat st;
    ASSERT_EQ(::stat(path->c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  EXPECT_THAT(Names(), ElementsAre("slurm_acct_db-20231114T231320Z.sql",
                                   "slurm_acct_db-20231114T234320Z.sql",
                                   "slurm_acct_db-20231115T001320Z.sql"));
  const Command& c = runner_.commands().front();
  EXPECT_THAT(c.argv, Contains("--single-transaction"));
  EXPECT_THAT(c.argv, Contains("--socket=/run/mysqld/mysqld.sock"));
  EXPECT_EQ(c.argv.back(), "slurm_acct_db");
  for (const auto& a : c.argv) EXPECT_EQ(a.find("password"), std::string::npos) << a;
  EXPECT_EQ(c.timeout, options_.dump_timeout);
}

TEST_F(AccountingTest, TruncatedOrFailedDumpsAreDiscarded) {
  FakeDump("CREATE TABLE t (i int);\nINSERT INTO t VALUES (1");
  auto path = DumpAccounting(options_, runner_, At(1700000000));
  ASSERT_FALSE(path);
  EXPECT_THAT(path.error().message, HasSubstr("-- Dump completed"));
  EXPECT_TRUE(Names().empty());
  FakeDump("-- Dump completed on x\n", 2);
  path = DumpAccounting(options_, runner_, At(1700000000));
  ASSERT_FALSE(path);
  EXPECT_EQ(path.error().kind, ErrorKind::kProcess);
  EXPECT_TRUE(Names().empty());
}

TEST_F(AccountingTest, RestoreSkipsTheTruncatedNewestDump) {
  Write(dir_ + "/slurm_acct_db-20260101T000000Z.sql", "old\n-- Dump completed on a\n");
  Write(dir_ + "/slurm_acct_db-20260102T000000Z.sql", "good\n-- Dump completed on b\n");
  Write(dir_ + "/slurm_acct_db-20260103T000000Z.sql", "truncated\nINSERT INTO x VALUES (");
  Write(dir_ + "/.slurm_acct_db-20260104T000000Z.sql.tmp", "temp\n-- Dump completed on c\n");
  runner_.On({"mariadb", "--socket=/run/mysqld/mysqld.sock", "--batch"},
             ProcessResult{0, 0, false, "0\n", ""});
  auto restored = RestoreNewestComplete(options_, runner_);
  ASSERT_TRUE(restored) << restored.error().message;
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, dir_ + "/slurm_acct_db-20260102T000000Z.sql");
  // The count, the database made, then the dump fed on stdin to the client in sandbox mode
  // (never SOURCE: a client command in a dump would run).
  ASSERT_EQ(runner_.commands().size(), 3u);
  EXPECT_THAT(runner_.commands()[1].argv.back(),
              HasSubstr("CREATE DATABASE IF NOT EXISTS `slurm_acct_db`"));
  const Command& load = runner_.commands()[2];
  EXPECT_EQ(load.stdin_file, dir_ + "/slurm_acct_db-20260102T000000Z.sql");
  EXPECT_THAT(load.argv, Contains("--sandbox"));
  EXPECT_THAT(load.argv, Contains("--database=slurm_acct_db"));
  for (const auto& arg : load.argv) EXPECT_THAT(arg, ::testing::Not(HasSubstr("SOURCE")));
}

TEST_F(AccountingTest, RestoreLeavesANonEmptyDatabaseAlone) {
  Write(dir_ + "/slurm_acct_db-20260102T000000Z.sql", "good\n-- Dump completed on b\n");
  runner_.On({"mariadb"}, ProcessResult{0, 0, false, "17\n", ""});
  auto restored = RestoreNewestComplete(options_, runner_);
  ASSERT_TRUE(restored);
  EXPECT_FALSE(restored->has_value());
  EXPECT_EQ(runner_.commands().size(), 1u);
}

TEST_F(AccountingTest, AFailedLoadIsAnError) {
  Write(dir_ + "/slurm_acct_db-20260102T000000Z.sql", "good\n-- Dump completed on b\n");
  runner_.On({"mariadb"}, [](const Command& c) {
    bool count = std::find(c.argv.begin(), c.argv.end(), "--batch") != c.argv.end();
    return count ? ProcessResult{0, 0, false, "0\n", ""}
                 : ProcessResult{1, 0, false, "", "ERROR 1064"};
  });
  auto restored = RestoreNewestComplete(options_, runner_);
  ASSERT_FALSE(restored);
  EXPECT_THAT(restored.error().message, HasSubstr("restore"));
}

TEST_F(AccountingTest, BadOptionsAreRefused) {
  options_.database = "x; DROP DATABASE y";
  EXPECT_FALSE(DumpAccounting(options_, runner_, At(0)));
  options_.database = "slurm_acct_db";
  options_.backup_dir = "relative";
  EXPECT_FALSE(ListDumps(options_));
  options_.backup_dir = dir_ + "'; SYSTEM reboot";
  EXPECT_FALSE(RestoreNewestComplete(options_, runner_));
  EXPECT_TRUE(runner_.commands().empty());
}

}  // namespace
}  // namespace onehpc::slurm
