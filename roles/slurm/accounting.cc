#include "roles/slurm/accounting.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>

#include "common/log.h"
#include "common/retry.h"
#include "roles/ensure.h"
#include "roles/names.h"
#include "roles/role.h"
#include "roles/slurm/munge.h"
#include "roles/slurm/slurm_conf.h"

namespace onehpc::slurm {
namespace {

constexpr char kMariaDbUnit[] = "mariadb.service";
constexpr char kSlurmdbdUnit[] = "slurmdbd.service";
constexpr char kSlurmdbdConf[] = "/etc/slurm/slurmdbd.conf";
constexpr char kAccountingDb[] = "slurm_acct_db";
constexpr Duration kDaemonTimeout{90000};
constexpr int kSlurmdbdPort = 6819;
const FileOwner kSlurmOwner{"slurm", "slurm"};

// Runs SQL through the mariadb client as root (unix socket); the text goes on stdin, so a
// password in it never reaches a command line.
Result<std::string> RunSql(RoleEnv& env, const std::string& sql,
                           const std::vector<std::string>& secrets = {}) {
  Command c;
  c.argv = {"mariadb", "--batch", "--skip-column-names"};
  c.stdin_data = sql;
  c.secrets = secrets;
  c.timeout = Duration(60000);
  auto r = RunChecked(env.runner, c);
  if (!r) return Fail(r.error());
  return r->out;
}

// The StoragePass= of an existing slurmdbd.conf ("" when none).
std::string ExistingDbPassword(const std::string& conf) {
  auto v = slurm::SlurmConfValue(conf, "StoragePass");
  return v ? *v : std::string();
}

std::string RenderSlurmdbdConf(const std::string& password, const std::string& backup_dir) {
  return "# Written by one-hpc at every configure; local edits are overwritten. The database\n"
         "# is dumped to " +
         backup_dir +
         " every 30 minutes.\n"
         "AuthType=auth/munge\n"
         "DbdHost=localhost\n"
         "DbdPort=" +
         std::to_string(kSlurmdbdPort) +
         "\n"
         "SlurmUser=slurm\n"
         "PidFile=/run/slurmdbd.pid\n"
         "StorageType=accounting_storage/mysql\n"
         "StorageHost=localhost\n"
         "StorageLoc=" +
         std::string(kAccountingDb) +
         "\n"
         "StorageUser=slurm\n"
         "StoragePass=" +
         password + "\n";
}

constexpr size_t kTailBytes = 4096;

bool IsValidDatabaseName(const std::string& name) {
  static const std::regex kName("[A-Za-z0-9_]{1,64}");
  return std::regex_match(name, kName);
}

Status CheckOptions(const AccountingOptions& options) {
  if (!IsValidDatabaseName(options.database)) {
    return Fail(ErrorKind::kInvalidInput, "accounting: the database name must be [A-Za-z0-9_]+");
  }
  if (options.backup_dir.empty() || options.backup_dir[0] != '/') {
    return Fail(ErrorKind::kInvalidInput, "accounting: the backup directory must be absolute");
  }
  for (char c : options.backup_dir) {
    if (static_cast<unsigned char>(c) < 0x20 || c == '\'' || c == '"' || c == '\\' || c == ';') {
      return Fail(ErrorKind::kInvalidInput,
                  "accounting: the backup directory has characters the client cannot take");
    }
  }
  if (options.keep < 1) return Fail(ErrorKind::kInvalidInput, "accounting: keep must be >= 1");
  return Ok();
}

std::string Errno() { return std::strerror(errno); }

// The last bytes of a file (read through a fresh descriptor, never following a link).
Result<std::string> ReadTail(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Fail(ErrorKind::kIo, fmt::format("open {}: {}", path, Errno()));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Fail(ErrorKind::kIo, fmt::format("{} is not a regular file", path));
  }
  off_t start = st.st_size > static_cast<off_t>(kTailBytes) ? st.st_size - kTailBytes : 0;
  std::string tail(static_cast<size_t>(st.st_size - start), '\0');
  size_t got = 0;
  while (got < tail.size()) {
    ssize_t n = ::pread(fd, tail.data() + got, tail.size() - got, start + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  tail.resize(got);
  return tail;
}

Status FsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Fail(ErrorKind::kIo, fmt::format("open {}: {}", path, Errno()));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Fail(ErrorKind::kIo, fmt::format("fsync {}: {}", path, std::strerror(err)));
  return Ok();
}

std::vector<std::string> ClientArgs(const AccountingOptions& options, const std::string& program) {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), options.connection.begin(), options.connection.end());
  return argv;
}

// Loads one dump into the (new) database. The dump is the client's input in sandbox mode: it
// may hold SQL only, never a client command (`\! cmd` would run a shell command as root, SOURCE
// another file); the dumps lie on the state export, which the storage VM's root can write.
Status LoadDump(const AccountingOptions& options, ProcessRunner& runner, const std::string& path) {
  Command create;
  create.argv = ClientArgs(options, options.client_program);
  create.argv.push_back(
      fmt::format("--execute=CREATE DATABASE IF NOT EXISTS `{}`", options.database));
  if (auto created = RunChecked(runner, create); !created) {
    return Fail(created.error().WithContext("creating the database"));
  }
  Command load;
  load.argv = ClientArgs(options, options.client_program);
  load.argv.push_back("--sandbox");
  load.argv.push_back("--database=" + options.database);
  load.stdin_file = path;
  load.timeout = options.restore_timeout;
  auto loaded = RunChecked(runner, load);
  if (!loaded) return Fail(loaded.error());
  return Ok();
}

}  // namespace

std::string DumpFileName(const std::string& database, std::chrono::system_clock::time_point when) {
  std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  return fmt::format("{}-{}.sql", database, stamp);
}

bool HasCompletionTrailer(const std::string& tail) {
  std::string text = tail;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  size_t line_start = text.rfind('\n');
  std::string last = line_start == std::string::npos ? text : text.substr(line_start + 1);
  return last.rfind(kDumpCompleted, 0) == 0;
}

Result<std::vector<std::string>> ListDumps(const AccountingOptions& options) {
  if (auto ok = CheckOptions(options); !ok) return Fail(ok.error());
  const std::regex pattern(options.database + "-[0-9]{8}T[0-9]{6}Z\\.sql");
  DIR* dir = ::opendir(options.backup_dir.c_str());
  if (!dir) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return Fail(ErrorKind::kIo, fmt::format("list {}: {}", options.backup_dir, Errno()));
  }
  std::vector<std::string> names;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (std::regex_match(name, pattern)) names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.rbegin(), names.rend());  // the timestamp sorts as text
  std::vector<std::string> paths;
  for (const auto& n : names) paths.push_back(options.backup_dir + "/" + n);
  return paths;
}

Result<std::vector<std::string>> PruneDumps(const AccountingOptions& options) {
  auto dumps = ListDumps(options);
  if (!dumps) return Fail(dumps.error());
  // The newest dump with the completion trailer survives whatever `keep` says: after a run of
  // cut-short dumps it is the only one a restore can use.
  std::string newest_complete;
  for (const auto& path : *dumps) {
    if (auto tail = ReadTail(path); tail && HasCompletionTrailer(*tail)) {
      newest_complete = path;
      break;
    }
  }
  std::vector<std::string> removed;
  for (size_t i = static_cast<size_t>(options.keep); i < dumps->size(); ++i) {
    if ((*dumps)[i] == newest_complete) continue;
    if (::unlink((*dumps)[i].c_str()) != 0 && errno != ENOENT) {
      return Fail(ErrorKind::kIo, fmt::format("remove {}: {}", (*dumps)[i], Errno()));
    }
    removed.push_back((*dumps)[i]);
  }
  return removed;
}

namespace {

// The marker's content (a dump path), nullopt when there is none.
Result<std::optional<std::string>> ReadRestoreMarker(const AccountingOptions& options) {
  if (options.restore_marker.empty()) return std::optional<std::string>();
  std::ifstream in(options.restore_marker);
  if (!in) {
    if (errno == ENOENT || !std::filesystem::exists(options.restore_marker)) {
      return std::optional<std::string>();
    }
    return Fail(ErrorKind::kIo, fmt::format("read {}: {}", options.restore_marker, Errno()));
  }
  std::string line;
  std::getline(in, line);
  return std::optional<std::string>(line);
}

Status WriteRestoreMarker(const AccountingOptions& options, const std::string& dump) {
  if (options.restore_marker.empty()) return Ok();
  const std::string dir = std::filesystem::path(options.restore_marker).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string temp = options.restore_marker + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << dump << "\n";
    if (!out.flush()) return Fail(ErrorKind::kIo, fmt::format("write {}", temp));
  }
  if (auto s = FsyncPath(temp, O_RDONLY); !s) return s;
  if (::rename(temp.c_str(), options.restore_marker.c_str()) != 0) {
    return Fail(ErrorKind::kIo, fmt::format("rename to {}: {}", options.restore_marker, Errno()));
  }
  return FsyncPath(dir, O_RDONLY | O_DIRECTORY);
}

Status RemoveRestoreMarker(const AccountingOptions& options) {
  if (options.restore_marker.empty()) return Ok();
  if (::unlink(options.restore_marker.c_str()) != 0 && errno != ENOENT) {
    return Fail(ErrorKind::kIo, fmt::format("remove {}: {}", options.restore_marker, Errno()));
  }
  return FsyncPath(std::filesystem::path(options.restore_marker).parent_path().string(),
                   O_RDONLY | O_DIRECTORY);
}

}  // namespace

Result<std::string> DumpAccounting(const AccountingOptions& options, ProcessRunner& runner,
                                   std::chrono::system_clock::time_point now) {
  if (auto ok = CheckOptions(options); !ok) return Fail(ok.error());
  auto marker = ReadRestoreMarker(options);
  if (!marker) return Fail(marker.error());
  if (marker->has_value()) {
    return Fail(ErrorKind::kUnsafe,
                fmt::format("accounting dump: a restore of {} from {} is unfinished ({}); a dump "
                            "now would save a partial database as the newest one. The next "
                            "configure finishes the restore",
                            options.database, **marker, options.restore_marker));
  }
  const std::string name = DumpFileName(options.database, now);
  const std::string final_path = options.backup_dir + "/" + name;
  const std::string temp_path = options.backup_dir + "/." + name + ".tmp";
  ::unlink(temp_path.c_str());  // a leftover of a run killed at the same second

  Command dump;
  dump.argv = ClientArgs(options, options.dump_program);
  for (const char* arg : {"--single-transaction", "--quick", "--routines", "--triggers",
                          "--comments", "--dump-date"}) {
    dump.argv.push_back(arg);
  }
  dump.argv.push_back("--result-file=" + temp_path);
  dump.argv.push_back(options.database);
  dump.timeout = options.dump_timeout;
  auto cleanup = [&](Error error) -> Result<std::string> {
    ::unlink(temp_path.c_str());
    return Fail(std::move(error));
  };
  auto ran = RunChecked(runner, dump);
  if (!ran) return cleanup(ran.error().WithContext("accounting dump"));
  auto tail = ReadTail(temp_path);
  if (!tail) return cleanup(tail.error().WithContext("accounting dump"));
  if (!HasCompletionTrailer(*tail)) {
    return cleanup(Error{ErrorKind::kProcess,
                         fmt::format("accounting dump: {} exited 0 but the dump does not end "
                                     "with '{}'; discarded",
                                     options.dump_program, kDumpCompleted)});
  }
  if (::chmod(temp_path.c_str(), 0600) != 0) {
    return cleanup(Error{ErrorKind::kIo, fmt::format("chmod {}: {}", temp_path, Errno())});
  }
  if (auto synced = FsyncPath(temp_path, O_RDONLY); !synced) return cleanup(synced.error());
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    return cleanup(Error{ErrorKind::kIo, fmt::format("rename to {}: {}", final_path, Errno())});
  }
  if (auto synced = FsyncPath(options.backup_dir, O_RDONLY | O_DIRECTORY); !synced) {
    return Fail(synced.error());
  }
  auto removed = PruneDumps(options);
  if (!removed) return Fail(removed.error().WithContext("accounting dump written, pruning"));
  log::Info("accounting: dumped {} to {} ({} old dump(s) removed)", options.database, final_path,
            removed->size());
  return final_path;
}

Result<std::optional<std::string>> RestoreNewestComplete(const AccountingOptions& options,
                                                         ProcessRunner& runner) {
  if (auto ok = CheckOptions(options); !ok) return Fail(ok.error());
  auto marker = ReadRestoreMarker(options);
  if (!marker) return Fail(marker.error());
  if (marker->has_value()) {
    // Ours and partial: the marker is written only right before loading into an empty database.
    log::Warn(
        "accounting: the restore of {} from {} was interrupted ({}); dropping the partial "
        "database and loading that dump again",
        options.database, **marker, options.restore_marker);
    Command drop;
    drop.argv = ClientArgs(options, options.client_program);
    drop.argv.push_back(fmt::format("--execute=DROP DATABASE IF EXISTS `{}`", options.database));
    auto dropped = RunChecked(runner, drop);
    if (!dropped) {
      return Fail(dropped.error().WithContext("accounting restore: dropping the partial database"));
    }
  }
  Command count;
  count.argv = ClientArgs(options, options.client_program);
  count.argv.push_back("--batch");
  count.argv.push_back("--skip-column-names");
  count.argv.push_back(fmt::format(
      "--execute=SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='{}'",
      options.database));
  auto counted = RunChecked(runner, count);
  if (!counted) return Fail(counted.error().WithContext("accounting restore: count tables"));
  std::string n = counted->out;
  while (!n.empty() && (n.back() == '\n' || n.back() == '\r' || n.back() == ' ')) n.pop_back();
  if (n.empty() || !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Fail(ErrorKind::kProcess,
                fmt::format("accounting restore: unexpected table count '{}'", n));
  }
  if (n != "0") {
    log::Info("accounting: {} has {} table(s); nothing to restore", options.database, n);
    return std::optional<std::string>();
  }
  auto dumps = ListDumps(options);
  if (!dumps) return Fail(dumps.error());
  // The interrupted restore's dump first: a newer one may hold the partial database.
  if (marker->has_value()) {
    auto it = std::find(dumps->begin(), dumps->end(), **marker);
    if (it != dumps->end()) std::rotate(dumps->begin(), it, it + 1);
  }
  for (const auto& path : *dumps) {
    auto tail = ReadTail(path);
    if (!tail || !HasCompletionTrailer(*tail)) {
      log::Warn("accounting: {} is incomplete (no '{}' at its end); trying an older dump", path,
                kDumpCompleted);
      continue;
    }
    if (auto s = WriteRestoreMarker(options, path); !s) {
      return Fail(s.error().WithContext("accounting restore"));
    }
    // A failed load keeps the marker: the next start drops what was loaded and tries again.
    if (auto loaded = LoadDump(options, runner, path); !loaded) {
      return Fail(loaded.error().WithContext("accounting restore of " + path));
    }
    if (auto s = RemoveRestoreMarker(options); !s) {
      return Fail(s.error().WithContext("accounting restore"));
    }
    log::Info("accounting: restored {} from {}", options.database, path);
    return std::optional<std::string>(path);
  }
  if (marker->has_value()) {
    if (auto s = RemoveRestoreMarker(options); !s) return Fail(s.error());
  }
  log::Warn("accounting: {} is empty and no complete dump is in {}; starting empty",
            options.database, options.backup_dir);
  return std::optional<std::string>();
}

std::string AccountingDumpDir(const std::string& role) {
  if (role == ood::kPortalRole) return kPortalDumpDir;
  if (role == kControllerRole) return kControllerDumpDir;
  return "";
}

Status EnsureAccountingDumps(RoleEnv& env) {
  if (auto s = EnsureUnitEnabled(env, kAccountingDumpTimer, "timers.target",
                                 "dumps the accounting database every 30 minutes");
      !s) {
    return s;
  }
  return EnsureUnitRunning(env, kAccountingDumpTimer, false, "",
                           "a database lost or emptied is restored from the newest dump");
}

// slurmdbd opens its port once its database is ready (at its first start it makes the
// tables first). slurmctld must not start before: without its state files and without an
// answering slurmdbd it exits at once ("fatal: You are running with a database but for some
// reason we have no TRES from it", seen on a VM under TCG when slurmctld started 1 s after
// slurmdbd). "active" is not enough: slurmdbd's unit is active as soon as it runs.
Status WaitSlurmdbdListening(RoleEnv& env) {
  if (env.exchange == nullptr) return Ok();
  const std::string where = "127.0.0.1:" + std::to_string(kSlurmdbdPort);
  auto open = Retry<bool>(
      RetryPolicy::Until(kDaemonTimeout), env.clock, "waiting for slurmdbd to listen on " + where,
      [](const Error&) { return true; },
      [&]() -> Result<bool> {
        if (auto s = env.exchange->Listening("127.0.0.1", kSlurmdbdPort, Duration(2000)); !s) {
          return Fail(s.error());
        }
        return true;
      });
  if (!open) return Fail(open.error().WithContext("slurmdbd does not listen on " + where));
  return Ok();
}

namespace {

Status StartMariaDb(RoleEnv& env) {
  if (auto s = EnsureUnitEnabled(env, kMariaDbUnit, "multi-user.target",
                                 "the Slurm accounting database");
      !s) {
    return s;
  }
  if (auto s = EnsureUnitRunning(env, kMariaDbUnit, false, "", "slurmdbd stores there"); !s) {
    return s;
  }
  if (env.plan.dry_run()) return Ok();
  return env.systemd.WaitActive(kMariaDbUnit, kDaemonTimeout, env.clock);
}

// The database user's password: the one slurmdbd.conf has, or a new random one (hex).
Result<std::string> DbPassword(const std::optional<std::string>& slurmdbd_conf) {
  std::string password = slurmdbd_conf ? ExistingDbPassword(*slurmdbd_conf) : "";
  if (!password.empty()) return password;
  auto bytes = slurm::RandomBytes(24);
  if (!bytes) return Fail(bytes.error());
  static const char* kHex = "0123456789abcdef";
  for (unsigned char c : *bytes) {
    password += kHex[c >> 4];
    password += kHex[c & 15];
  }
  return password;
}

// The accounting database and its user slurm@localhost, with `password`; left alone when both
// exist and the password is the one slurmdbd.conf already has.
Status EnsureAccountingDb(RoleEnv& env, const std::string& password, bool new_password) {
  bool ready = false;
  if (!env.plan.dry_run()) {
    auto probe = RunSql(env,
                        "SELECT (SELECT COUNT(*) FROM information_schema.schemata WHERE "
                        "schema_name='" +
                            std::string(kAccountingDb) +
                            "'), (SELECT COUNT(*) FROM "
                            "mysql.global_priv WHERE User='slurm' AND Host='localhost');\n");
    if (!probe) return Fail(probe.error().WithContext("MariaDB does not answer"));
    std::string p = *probe;
    p.erase(std::remove_if(p.begin(), p.end(), [](char c) { return c == '\n' || c == '\r'; }),
            p.end());
    ready = p == "1\t1" && !new_password;
  }
  if (ready) {
    env.plan.Keep("database " + std::string(kAccountingDb) + " and user slurm@localhost",
                  "exist; the password in " + std::string(kSlurmdbdConf) + " is kept");
    return Ok();
  }
  return env.plan.Do(
      "create database " + std::string(kAccountingDb) + " and user slurm@localhost",
      "slurmdbd stores the job accounting there (SQL on the client's stdin)", [&]() -> Status {
        std::string sql = "CREATE DATABASE IF NOT EXISTS " + std::string(kAccountingDb) +
                          ";\nCREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '" +
                          password + "';\nALTER USER 'slurm'@'localhost' IDENTIFIED BY '" +
                          password + "';\nGRANT ALL ON " + kAccountingDb +
                          ".* TO 'slurm'@'localhost';\n";
        auto r = RunSql(env, sql, {password});
        if (!r) return Fail(r.error());
        return Ok();
      });
}

// Before slurmdbd ever starts on this VM: it would create empty tables, and an empty database
// is what tells a replaced portal to restore the newest complete dump.
Status RestoreIntoEmptyDb(RoleEnv& env, const std::string& backup_dir) {
  AccountingOptions options;
  options.database = kAccountingDb;
  options.backup_dir = env.files.HostPath(backup_dir);
  options.restore_marker = env.files.HostPath(kRestoreMarker);
  if (env.plan.dry_run()) {
    env.plan.Keep("restore of " + std::string(kAccountingDb),
                  "checked at configure: the newest complete dump is loaded when the "
                  "database has no table");
    return Ok();
  }
  auto restored = RestoreNewestComplete(options, env.runner);
  if (!restored) return Fail(restored.error().WithContext("restoring the accounting database"));
  if (restored->has_value()) {
    env.plan.Do("restored " + std::string(kAccountingDb) + " from " + **restored,
                "the database was empty (a new portal) and the state export holds a dump",
                [] { return Ok(); });
  } else {
    env.plan.Keep(kAccountingDb, "not empty, or no complete dump to restore");
  }
  return Ok();
}

}  // namespace

// MariaDB, the accounting database and its user, the restore of the newest complete dump
// into an empty database (a replaced portal), then slurmdbd.
Status SetUpAccounting(RoleEnv& env, const std::string& backup_dir) {
  if (auto s = StartMariaDb(env); !s) return s;
  auto current = env.files.ReadIfExists(kSlurmdbdConf);
  if (!current) return Fail(current.error());
  auto password = DbPassword(*current);
  if (!password) return Fail(password.error());
  log::AddSecret(*password);
  const bool new_password = !current->has_value() || ExistingDbPassword(**current).empty();
  if (auto s = EnsureAccountingDb(env, *password, new_password); !s) return s;
  if (auto s = RestoreIntoEmptyDb(env, backup_dir); !s) return s;

  auto conf_changed =
      EnsureFile(env, kSlurmdbdConf, RenderSlurmdbdConf(*password, backup_dir), 0600, kSlurmOwner,
                 "slurmdbd: the accounting database on this host");
  if (!conf_changed) return Fail(conf_changed.error());
  if (auto s =
          EnsureUnitEnabled(env, kSlurmdbdUnit, "multi-user.target", "Slurm's accounting daemon");
      !s) {
    return s;
  }
  if (auto s = EnsureUnitRunning(env, kSlurmdbdUnit, *conf_changed && current->has_value(),
                                 "slurmdbd.conf changed", "slurmctld sends job records");
      !s) {
    return s;
  }
  if (env.plan.dry_run()) return Ok();
  if (auto w = env.systemd.WaitActive(kSlurmdbdUnit, kDaemonTimeout, env.clock); !w) return w;
  return WaitSlurmdbdListening(env);
}

// The service's cluster in the accounting database (sacctmgr reads slurm.conf to find
// slurmdbd, so this runs after the controller is set up).
Status EnsureClusterRegistered(RoleEnv& env, const std::string& cluster) {
  if (env.plan.dry_run()) {
    env.plan.Keep("cluster " + cluster + " in the accounting database", "checked at configure");
    return Ok();
  }
  auto listed = Retry<std::string>(
      RetryPolicy::Until(kDaemonTimeout), env.clock, "waiting for slurmdbd to answer sacctmgr",
      [](const Error&) { return true; },
      [&]() -> Result<std::string> {
        Command c;
        c.argv = {"sacctmgr", "--noheader", "--parsable2", "list", "cluster", "format=cluster"};
        c.timeout = Duration(20000);
        auto r = RunChecked(env.runner, c);
        if (!r) return Fail(r.error());
        return r->out;
      });
  if (!listed) return Fail(listed.error().WithContext("slurmdbd does not answer"));
  bool registered = false;
  for (size_t b = 0; b < listed->size();) {
    size_t e = listed->find('\n', b);
    if (e == std::string::npos) e = listed->size();
    registered = registered || listed->compare(b, e - b, cluster) == 0;
    b = e + 1;
  }
  if (registered) {
    env.plan.Keep("cluster " + cluster, "registered in the accounting database");
    return Ok();
  }
  return env.plan.Do("sacctmgr add cluster " + cluster,
                     "job records of this cluster go to the accounting database", [&]() -> Status {
                       Command c;
                       c.argv = {"sacctmgr", "--immediate", "add", "cluster", cluster};
                       c.timeout = Duration(30000);
                       auto r = RunChecked(env.runner, c);
                       if (!r) return Fail(r.error());
                       return Ok();
                     });
}

}  // namespace onehpc::slurm
