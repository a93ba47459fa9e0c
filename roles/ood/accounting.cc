#include "roles/ood/accounting.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <regex>

#include <fmt/format.h>

#include "common/log.h"

namespace onehpc::ood {
namespace {

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

}  // namespace

std::string DumpFileName(const std::string& database,
                         std::chrono::system_clock::time_point when) {
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
  std::vector<std::string> removed;
  for (size_t i = static_cast<size_t>(options.keep); i < dumps->size(); ++i) {
    if (::unlink((*dumps)[i].c_str()) != 0 && errno != ENOENT) {
      return Fail(ErrorKind::kIo, fmt::format("remove {}: {}", (*dumps)[i], Errno()));
    }
    removed.push_back((*dumps)[i]);
  }
  return removed;
}

Result<std::string> DumpAccounting(const AccountingOptions& options, ProcessRunner& runner,
                                   std::chrono::system_clock::time_point now) {
  if (auto ok = CheckOptions(options); !ok) return Fail(ok.error());
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
                                     "with '{}'; discarded", options.dump_program,
                                     kDumpCompleted)});
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
  log::Info("accounting: dumped {} to {} ({} old dump(s) removed)", options.database,
            final_path, removed->size());
  return final_path;
}

Result<std::optional<std::string>> RestoreNewestComplete(const AccountingOptions& options,
                                                         ProcessRunner& runner) {
  if (auto ok = CheckOptions(options); !ok) return Fail(ok.error());
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
  for (const auto& path : *dumps) {
    auto tail = ReadTail(path);
    if (!tail || !HasCompletionTrailer(*tail)) {
      log::Warn("accounting: {} is incomplete (no '{}' at its end); trying an older dump", path,
                kDumpCompleted);
      continue;
    }
    Command load;
    load.argv = ClientArgs(options, options.client_program);
    load.argv.push_back(fmt::format(
        // SOURCE is a client command: it must start a line.
        "--execute=CREATE DATABASE IF NOT EXISTS `{0}`;\nUSE `{0}`;\nSOURCE {1}\n",
        options.database, path));
    load.timeout = options.restore_timeout;
    auto loaded = RunChecked(runner, load);
    if (!loaded) return Fail(loaded.error().WithContext("accounting restore of " + path));
    log::Info("accounting: restored {} from {}", options.database, path);
    return std::optional<std::string>(path);
  }
  log::Warn("accounting: {} is empty and no complete dump is in {}; starting empty",
            options.database, options.backup_dir);
  return std::optional<std::string>();
}

}  // namespace onehpc::ood
