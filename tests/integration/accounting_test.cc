// Accounting dump and restore round trip on a real MariaDB: a private mariadbd on a unix
// socket in a temporary directory (no TCP), skipped when it cannot start.
#include "roles/slurm/accounting.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/integration/helpers.h"

namespace onehpc::slurm {
namespace {

namespace fs = std::filesystem;

class MariaDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/sbin/mariadbd") || !fs::exists("/usr/bin/mariadb-install-db") ||
        !fs::exists("/usr/bin/mariadb-dump")) {
      GTEST_SKIP() << "mariadb-server is not installed";
    }
    char tmpl[] = "/tmp/one-hpc-mariadb.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    socket_ = dir_ + "/mysqld.sock";
    fs::create_directories(dir_ + "/backup");
    const bool root = ::geteuid() == 0;
    Command install;
    install.argv = {"mariadb-install-db", "--no-defaults", "--datadir=" + dir_ + "/data",
                    "--skip-test-db", "--auth-root-authentication-method=socket"};
    if (root) install.argv.push_back("--user=root");
    install.timeout = Duration(120000);
    auto installed = runner_.Run(install);
    if (!installed || !installed->ok()) {
      GTEST_SKIP() << "mariadb-install-db failed: "
                   << (installed ? installed->err : installed.error().message);
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      std::vector<std::string> args = {"/usr/sbin/mariadbd",
                                       "--no-defaults",
                                       "--datadir=" + dir_ + "/data",
                                       "--socket=" + socket_,
                                       "--skip-networking",
                                       "--pid-file=" + dir_ + "/pid",
                                       "--log-error=" + dir_ + "/error.log",
                                       "--innodb-buffer-pool-size=16M"};
      if (root) args.push_back("--user=root");
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 120; ++i) {
      if (Sql("SELECT 1").has_value()) {
        options_.connection = {"--no-defaults", "--socket=" + socket_, "--user=root"};
        options_.backup_dir = dir_ + "/backup";
        options_.keep = 5;
        options_.restore_marker = dir_ + "/restore-marker";
        return;
      }
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    GTEST_SKIP() << "mariadbd did not start; see " << dir_ << "/error.log";
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      for (int i = 0; i < 100; ++i) {
        int status;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
    }
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }
  // Runs SQL; stdout, or nullopt on failure.
  std::optional<std::string> Sql(const std::string& sql) {
    Command c;
    c.argv = {"mariadb", "--no-defaults",       "--socket=" + socket_, "--user=root",
              "--batch", "--skip-column-names", "--execute=" + sql};
    c.timeout = Duration(30000);
    auto r = runner_.Run(c);
    if (!r || !r->ok()) return std::nullopt;
    std::string out = r->out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  RealProcessRunner runner_;
  std::string dir_, socket_;
  pid_t pid_ = -1;
  AccountingOptions options_;
};

TEST_F(MariaDbTest, DumpAndRestoreSkipATruncatedNewestDump) {
  ASSERT_TRUE(
      Sql("CREATE DATABASE slurm_acct_db; CREATE TABLE slurm_acct_db.job_table "
          "(id INT PRIMARY KEY, name VARCHAR(64)) ENGINE=InnoDB; INSERT INTO "
          "slurm_acct_db.job_table VALUES (1, 'one'), (2, 'two')"));
  auto t0 = std::chrono::system_clock::from_time_t(1790000000);
  auto first = DumpAccounting(options_, runner_, t0);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE(Sql("INSERT INTO slurm_acct_db.job_table VALUES (3, 'it''s \"three\"')"));
  auto second = DumpAccounting(options_, runner_, t0 + std::chrono::minutes(30));
  ASSERT_TRUE(second) << second.error().message;
  ASSERT_TRUE(Sql("INSERT INTO slurm_acct_db.job_table VALUES (4, 'four')"));

  // The newest dump was cut short (the portal died mid-dump, the export filled up).
  const std::string full = testing::ReadAll(*second);
  const std::string truncated_path =
      options_.backup_dir + "/" + DumpFileName("slurm_acct_db", t0 + std::chrono::minutes(60));
  std::ofstream(truncated_path) << full.substr(0, full.size() / 2);

  // A replaced portal: empty database.
  ASSERT_TRUE(Sql("DROP DATABASE slurm_acct_db"));
  auto restored = RestoreNewestComplete(options_, runner_);
  ASSERT_TRUE(restored) << restored.error().message;
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, *second);
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM slurm_acct_db.job_table"), "3");
  EXPECT_EQ(Sql("SELECT name FROM slurm_acct_db.job_table WHERE id = 3"), "it's \"three\"");

  // Not empty any more: a second restore does nothing.
  auto again = RestoreNewestComplete(options_, runner_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(again->has_value());
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM slurm_acct_db.job_table"), "3");
}

// A restore killed half-way (the portal lost power while loading): the next start finds the
// marker, drops the partial database and loads the same dump again, even when a newer dump
// exists; no dump is taken in between.
TEST_F(MariaDbTest, AnInterruptedRestoreIsRedoneFromTheSameDump) {
  ASSERT_TRUE(
      Sql("CREATE DATABASE slurm_acct_db; CREATE TABLE slurm_acct_db.job_table "
          "(id INT PRIMARY KEY, name VARCHAR(64)) ENGINE=InnoDB; CREATE TABLE "
          "slurm_acct_db.assoc_table (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO "
          "slurm_acct_db.job_table VALUES (1, 'one'), (2, 'two'), (3, 'three'); INSERT INTO "
          "slurm_acct_db.assoc_table VALUES (7)"));
  auto t0 = std::chrono::system_clock::from_time_t(1790000000);
  auto dump = DumpAccounting(options_, runner_, t0);
  ASSERT_TRUE(dump) << dump.error().message;
  // The new portal began to load it: the marker names it, one table of two is there.
  ASSERT_TRUE(
      Sql("DROP DATABASE slurm_acct_db; CREATE DATABASE slurm_acct_db; CREATE TABLE "
          "slurm_acct_db.job_table (id INT PRIMARY KEY, name VARCHAR(64)) "
          "ENGINE=InnoDB; INSERT INTO slurm_acct_db.job_table VALUES (1, 'one')"));
  std::ofstream(options_.restore_marker) << *dump << "\n";
  auto refused = DumpAccounting(options_, runner_, t0 + std::chrono::minutes(30));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kUnsafe);
  // A newer complete dump of something else must not be the one restored.
  {
    std::string other = testing::ReadAll(*dump);
    auto pos = other.find("(3,'three')");
    ASSERT_NE(pos, std::string::npos);
    other.replace(pos, 11, "(3,'newer')");
    std::ofstream(options_.backup_dir + "/" +
                  DumpFileName("slurm_acct_db", t0 + std::chrono::minutes(60)))
        << other;
  }
  auto restored = RestoreNewestComplete(options_, runner_);
  ASSERT_TRUE(restored) << restored.error().message;
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, *dump);
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM slurm_acct_db.job_table"), "3");
  EXPECT_EQ(Sql("SELECT name FROM slurm_acct_db.job_table WHERE id = 3"), "three");
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM slurm_acct_db.assoc_table"), "1");
  EXPECT_FALSE(fs::exists(options_.restore_marker));
  // Done: dumps run again.
  EXPECT_TRUE(DumpAccounting(options_, runner_, t0 + std::chrono::minutes(90)));
}

// A dump is data: one that carries a client command (`\! cmd`, a shell command the mariadb
// client would run as root) is refused by the client's sandbox and nothing runs (review N7).
TEST_F(MariaDbTest, ARestoreNeverRunsTheClientCommandsOfADump) {
  ASSERT_TRUE(
      Sql("CREATE DATABASE slurm_acct_db; CREATE TABLE slurm_acct_db.job_table "
          "(id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO slurm_acct_db.job_table VALUES (1)"));
  auto t0 = std::chrono::system_clock::from_time_t(1790000000);
  auto dump = DumpAccounting(options_, runner_, t0);
  ASSERT_TRUE(dump) << dump.error().message;
  const std::string planted = dir_ + "/planted-by-the-dump";
  {
    std::string text = testing::ReadAll(*dump);
    auto pos = text.find("CREATE TABLE");
    ASSERT_NE(pos, std::string::npos);
    text.insert(pos, "\\! touch " + planted + "\n");
    std::ofstream(*dump) << text;
  }
  ASSERT_TRUE(Sql("DROP DATABASE slurm_acct_db"));
  auto restored = RestoreNewestComplete(options_, runner_);
  EXPECT_FALSE(fs::exists(planted));
  ASSERT_FALSE(restored);
  EXPECT_NE(restored.error().message.find("accounting restore of " + *dump), std::string::npos)
      << restored.error().message;
  EXPECT_NE(restored.error().message.find("sandbox"), std::string::npos)
      << restored.error().message;
}

TEST_F(MariaDbTest, DumpOfAMissingDatabaseFailsAndLeavesNothing) {
  options_.database = "no_such_db";
  auto dumped = DumpAccounting(options_, runner_, std::chrono::system_clock::now());
  ASSERT_FALSE(dumped);
  EXPECT_TRUE(fs::is_empty(options_.backup_dir));
}

}  // namespace
}  // namespace onehpc::slurm
