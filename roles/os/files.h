// Files under a root prefix (`--root DIR`), written atomically.
#ifndef ONEHPC_ROLES_OS_FILES_H_
#define ONEHPC_ROLES_OS_FILES_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace onehpc {

struct FileOwner {
  std::string user;   ///< name, looked up in <root>/etc/passwd (then the host's)
  std::string group;  ///< name, looked up in <root>/etc/group (then the host's)
};

/// An exclusive flock(2) on a file, held until the object is destroyed (the kernel releases it
/// when the process ends, even killed). Made by Files::Lock.
class FileLock {
 public:
  FileLock() = default;
  explicit FileLock(int fd) : fd_(fd) {}
  ~FileLock();
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

/// All paths given to Files are absolute paths of the target system; they are resolved
/// under the root prefix. A path containing ".." components is refused (kInvalidInput).
class Files {
 public:
  /// `root` = "" or "/" for the real system, otherwise a directory that stands for "/".
  explicit Files(std::string root = "");

  const std::string& root() const { return root_; }
  /// The host path for a target path: root + path.
  std::string HostPath(const std::string& path) const;

  Result<std::string> Read(const std::string& path) const;
  /// nullopt when the file does not exist (other failures are errors).
  Result<std::optional<std::string>> ReadIfExists(const std::string& path) const;
  bool Exists(const std::string& path) const;

  /// temp file in the same directory + write + fsync + chmod/chown + rename + fsync of the
  /// directory. Parent directories are created (0755). The temp file is removed on failure.
  /// Without `owner` the file belongs to the caller (root). An empty user or group is left
  /// unchanged; a numeric one is used as the id. A symlink at `path` is replaced, not
  /// followed.
  Status WriteAtomic(const std::string& path, const std::string& content, mode_t mode,
                     const std::optional<FileOwner>& owner = std::nullopt);
  /// True when `path` is a regular file with exactly this content, mode and owner (what
  /// WriteAtomic would leave); false when it differs or does not exist.
  Result<bool> Matches(const std::string& path, const std::string& content, mode_t mode,
                       const std::optional<FileOwner>& owner = std::nullopt) const;
  /// Creates the missing directories of `path` with `mode`. With `owner`, the last one gets
  /// that owner and `mode` even when it exists (as `install -d -o -g -m`).
  Status MakeDirs(const std::string& path, mode_t mode = 0755,
                  const std::optional<FileOwner>& owner = std::nullopt);
  /// Removes a file; a missing file is fine.
  Status Remove(const std::string& path);
  /// A new empty directory `<parent>/<prefix>XXXXXX` (mkdtemp: unique name, mode 0700,
  /// owned by the caller); `parent` is created first (0755) if missing. Returns its path.
  Result<std::string> MakeTempDir(const std::string& parent, const std::string& prefix);
  /// Removes an empty directory; a missing one is fine.
  Status RemoveDir(const std::string& path);
  /// rename(2) (replaces a file or an empty directory at `to`), then fsync of the
  /// directory of `to`.
  Status Rename(const std::string& from, const std::string& to);
  Result<std::vector<std::string>> List(const std::string& dir) const;
  /// An exclusive lock on `path` (created 0600, its directory 0755, when missing; a symlink is
  /// refused). `wait`: until it is free; otherwise nullopt when another process holds it.
  /// For short sections and for one-hpc's own runs: the holder decides how long.
  Result<std::optional<FileLock>> Lock(const std::string& path, bool wait) const;

 private:
  std::string root_;
};

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OS_FILES_H_
