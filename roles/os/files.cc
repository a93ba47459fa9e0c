#include "roles/os/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/log.h"

namespace onehpc {
namespace {

std::string Errno(int error) { return strerror(error); }

/// Closes a file descriptor on destruction.
struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

/// Checks a target path: absolute, no "..", no NUL.
Status CheckPath(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return Fail(ErrorKind::kInvalidInput, "path '" + path + "' is not absolute");
  }
  if (path.find('\0') != std::string::npos) {
    return Fail(ErrorKind::kInvalidInput, "path contains a NUL byte");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (path.compare(start, end - start, "..") == 0 && end - start == 2) {
      return Fail(ErrorKind::kInvalidInput,
                  "path '" + path + "' contains '..' (refused under a root prefix)");
    }
    start = end + 1;
  }
  return Ok();
}

/// The directory part of a host path ("/a/b" -> "/a", "/a" -> "/").
std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool AllDigits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

/// Field 3 (the id) of the line whose first field is `name` in a passwd/group style file.
std::optional<unsigned long> LookupIdInFile(const std::string& file, const std::string& name) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, ':')) fields.push_back(field);
    if (fields.size() >= 3 && fields[0] == name && AllDigits(fields[2])) {
      return std::stoul(fields[2]);
    }
  }
  return std::nullopt;
}

Result<uid_t> LookupUser(const std::string& root, const std::string& user) {
  if (AllDigits(user)) return static_cast<uid_t>(std::stoul(user));
  if (auto id = LookupIdInFile(root + "/etc/passwd", user)) return static_cast<uid_t>(*id);
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc == 0 && found) return found->pw_uid;
  return Fail(ErrorKind::kNotFound, "user '" + user + "' not found in " + root +
                                        "/etc/passwd nor in the host's user database");
}

Result<gid_t> LookupGroup(const std::string& root, const std::string& group) {
  if (AllDigits(group)) return static_cast<gid_t>(std::stoul(group));
  if (auto id = LookupIdInFile(root + "/etc/group", group)) return static_cast<gid_t>(*id);
  struct group gr;
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &found);
  if (rc == 0 && found) return found->gr_gid;
  return Fail(ErrorKind::kNotFound, "group '" + group + "' not found in " + root +
                                        "/etc/group nor in the host's group database");
}

/// uid and gid for an owner; -1 for a part left empty (unchanged).
struct Ids {
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
};

Result<Ids> ResolveOwner(const std::string& root, const std::optional<FileOwner>& owner) {
  Ids ids;
  if (!owner) return ids;
  if (!owner->user.empty()) {
    auto uid = LookupUser(root, owner->user);
    if (!uid) return Fail(uid.error());
    ids.uid = *uid;
  }
  if (!owner->group.empty()) {
    auto gid = LookupGroup(root, owner->group);
    if (!gid) return Fail(gid.error());
    ids.gid = *gid;
  }
  return ids;
}

Result<std::string> ReadFd(int fd, const std::string& what) {
  std::string content;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      content.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      return content;
    } else if (errno != EINTR) {
      return Fail(ErrorKind::kIo, "cannot read " + what + ": " + Errno(errno));
    }
  }
}

Status WriteAll(int fd, const std::string& content, const std::string& what) {
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(ErrorKind::kIo, "cannot write " + what + ": " + Errno(errno));
    done += static_cast<size_t>(n);
  }
  return Ok();
}

Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Fail(ErrorKind::kIo, "cannot open directory " + dir + ": " + Errno(errno));
  FdCloser closer{fd};
  if (::fsync(fd) != 0 && errno != EINVAL) {
    return Fail(ErrorKind::kIo, "cannot fsync directory " + dir + ": " + Errno(errno));
  }
  return Ok();
}

}  // namespace

Files::Files(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string Files::HostPath(const std::string& path) const {
  if (root_.empty()) return path;
  if (path.empty() || path[0] != '/') return root_ + "/" + path;
  return root_ + path;
}

Result<std::string> Files::Read(const std::string& path) const {
  auto content = ReadIfExists(path);
  if (!content) return Fail(content.error());
  if (!*content) return Fail(ErrorKind::kNotFound, "file " + HostPath(path) + " does not exist");
  return std::move(**content);
}

Result<std::optional<std::string>> Files::ReadIfExists(const std::string& path) const {
  if (auto s = CheckPath(path); !s) return Fail(s.error());
  std::string host = HostPath(path);
  int fd = ::open(host.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Fail(ErrorKind::kIo, "cannot open " + host + ": " + Errno(errno));
  }
  FdCloser closer{fd};
  auto content = ReadFd(fd, host);
  if (!content) return Fail(content.error());
  return std::optional<std::string>(std::move(*content));
}

bool Files::Exists(const std::string& path) const {
  if (!CheckPath(path)) return false;
  struct stat st;
  return ::stat(HostPath(path).c_str(), &st) == 0;
}

Status Files::WriteAtomic(const std::string& path, const std::string& content, mode_t mode,
                          const std::optional<FileOwner>& owner) {
  if (auto s = CheckPath(path); !s) return s;
  if (path.back() == '/') {
    return Fail(ErrorKind::kInvalidInput, "path '" + path + "' names a directory");
  }
  auto ids = ResolveOwner(root_, owner);
  if (!ids) return Fail(ids.error().WithContext("cannot write " + HostPath(path)));
  std::string host = HostPath(path);
  std::string dir = DirName(host);
  if (auto s = MakeDirs(DirName(path)); !s) return s;

  std::string temp = dir + "/." + BaseName(host) + ".XXXXXX";
  int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) {
    return Fail(ErrorKind::kIo, "cannot create a temporary file in " + dir + ": " + Errno(errno));
  }
  // From here on, any failure removes the temporary file.
  auto fail = [&](const std::string& step, int error) -> Status {
    ::close(fd);
    ::unlink(temp.c_str());
    return Fail(ErrorKind::kIo, "cannot write " + host + ": " + step + ": " + Errno(error));
  };
  if (auto s = WriteAll(fd, content, temp); !s) {
    ::close(fd);
    ::unlink(temp.c_str());
    return s;
  }
  // chown before chmod: chown clears set-id bits.
  if ((ids->uid != static_cast<uid_t>(-1) || ids->gid != static_cast<gid_t>(-1)) &&
      ::fchown(fd, ids->uid, ids->gid) != 0) {
    return fail("chown", errno);
  }
  if (::fchmod(fd, mode & 07777) != 0) return fail("chmod", errno);
  if (::fsync(fd) != 0) return fail("fsync", errno);
  if (::close(fd) != 0) {
    int error = errno;
    ::unlink(temp.c_str());
    return Fail(ErrorKind::kIo, "cannot write " + host + ": close: " + Errno(error));
  }
  if (::rename(temp.c_str(), host.c_str()) != 0) {
    int error = errno;
    ::unlink(temp.c_str());
    return Fail(ErrorKind::kIo, "cannot write " + host + ": rename: " + Errno(error));
  }
  if (auto s = FsyncDir(dir); !s) return s;
  log::Debug("wrote {} ({} bytes, mode {:04o}{})", host, content.size(), mode & 07777,
             owner ? ", owner " + owner->user + ":" + owner->group : std::string());
  return Ok();
}

Result<bool> Files::Matches(const std::string& path, const std::string& content, mode_t mode,
                            const std::optional<FileOwner>& owner) const {
  if (auto s = CheckPath(path); !s) return Fail(s.error());
  auto ids = ResolveOwner(root_, owner);
  if (!ids) return Fail(ids.error().WithContext("cannot write " + HostPath(path)));
  std::string host = HostPath(path);
  struct stat st;
  bool same = false;
  if (::lstat(host.c_str(), &st) == 0) {
    if (S_ISREG(st.st_mode) && (st.st_mode & 07777) == (mode & 07777) &&
        (ids->uid == static_cast<uid_t>(-1) || st.st_uid == ids->uid) &&
        (ids->gid == static_cast<gid_t>(-1) || st.st_gid == ids->gid)) {
      auto current = ReadIfExists(path);
      if (!current) return Fail(current.error());
      same = current->has_value() && **current == content;
    }
  } else if (errno != ENOENT) {
    return Fail(ErrorKind::kIo, "cannot stat " + host + ": " + Errno(errno));
  }
  return same;
}

Status Files::MakeDirs(const std::string& path, mode_t mode,
                       const std::optional<FileOwner>& owner) {
  if (auto s = CheckPath(path); !s) return s;
  auto ids = ResolveOwner(root_, owner);
  if (!ids) return Fail(ids.error().WithContext("cannot create directory " + HostPath(path)));
  if (!root_.empty()) {
    struct stat st;
    if (::stat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Fail(ErrorKind::kNotFound, "root directory " + root_ + " does not exist");
    }
  }
  std::string current = root_;
  size_t start = 1;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string component = path.substr(start, end - start);
    start = end + 1;
    if (component.empty() || component == ".") continue;
    current += "/" + component;
    // With an owner (as install -d -o -g -m) the parents are 0755 and only the last one gets
    // `mode`; without, every directory made gets `mode`.
    const mode_t made_mode = (owner && start < path.size()) ? 0755 : (mode & 07777);
    if (::mkdir(current.c_str(), made_mode) == 0) {
      // mkdir applies the umask; the mode asked for is what we want.
      if (::chmod(current.c_str(), made_mode) != 0) {
        return Fail(ErrorKind::kIo, "cannot chmod " + current + ": " + Errno(errno));
      }
      continue;
    }
    if (errno != EEXIST) {
      return Fail(ErrorKind::kIo, "cannot create directory " + current + ": " + Errno(errno));
    }
    struct stat st;
    if (::stat(current.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Fail(ErrorKind::kIo,
                  "cannot create directory " + current + ": it exists and is not a directory");
    }
  }
  if (owner) {
    const std::string host = HostPath(path);
    if (::chown(host.c_str(), ids->uid, ids->gid) != 0) {
      return Fail(ErrorKind::kIo, "cannot chown " + host + ": " + Errno(errno));
    }
    if (::chmod(host.c_str(), mode & 07777) != 0) {
      return Fail(ErrorKind::kIo, "cannot chmod " + host + ": " + Errno(errno));
    }
  }
  return Ok();
}

Status Files::Remove(const std::string& path) {
  if (auto s = CheckPath(path); !s) return s;
  std::string host = HostPath(path);
  if (::unlink(host.c_str()) != 0 && errno != ENOENT) {
    return Fail(ErrorKind::kIo, "cannot remove " + host + ": " + Errno(errno));
  }
  return Ok();
}

Result<std::string> Files::MakeTempDir(const std::string& parent, const std::string& prefix) {
  if (prefix.find('/') != std::string::npos) {
    return Fail(ErrorKind::kInvalidInput, "temporary directory prefix '" + prefix + "' has a /");
  }
  if (Status made = MakeDirs(parent, 0755); !made) return Fail(made.error());
  std::string path = (parent == "/" ? "" : parent) + "/" + prefix + "XXXXXX";
  std::string host = HostPath(path);
  if (::mkdtemp(host.data()) == nullptr) {
    return Fail(ErrorKind::kIo, "cannot create a directory " + host + ": " + Errno(errno));
  }
  return path.substr(0, path.size() - 6) + host.substr(host.size() - 6);
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

Result<std::optional<FileLock>> Files::Lock(const std::string& path, bool wait) const {
  if (auto s = CheckPath(path); !s) return Fail(s.error());
  const std::string host = HostPath(path);
  const std::string dir = host.substr(0, host.rfind('/'));
  std::error_code ec;  // an existing directory is fine; a failure shows at open()
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  const int fd = ::open(host.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Fail(ErrorKind::kIo, "cannot open " + host + ": " + Errno(errno));
  FileLock lock(fd);
  int r;
  do {
    r = ::flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB));
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    if (errno == EWOULDBLOCK) return std::optional<FileLock>();
    return Fail(ErrorKind::kIo, "flock " + host + ": " + Errno(errno));
  }
  return std::optional<FileLock>(std::move(lock));
}

Status Files::RemoveDir(const std::string& path) {
  if (auto s = CheckPath(path); !s) return s;
  std::string host = HostPath(path);
  if (::rmdir(host.c_str()) != 0 && errno != ENOENT) {
    return Fail(ErrorKind::kIo, "cannot remove the directory " + host + ": " + Errno(errno));
  }
  return Ok();
}

Status Files::Rename(const std::string& from, const std::string& to) {
  if (auto s = CheckPath(from); !s) return s;
  if (auto s = CheckPath(to); !s) return s;
  std::string a = HostPath(from), b = HostPath(to);
  if (::rename(a.c_str(), b.c_str()) != 0) {
    return Fail(ErrorKind::kIo, "cannot rename " + a + " to " + b + ": " + Errno(errno));
  }
  return FsyncDir(b.substr(0, b.rfind('/')));
}

Result<std::vector<std::string>> Files::List(const std::string& dir) const {
  if (auto s = CheckPath(dir); !s) return Fail(s.error());
  std::string host = HostPath(dir);
  DIR* d = ::opendir(host.c_str());
  if (!d) {
    if (errno == ENOENT) {
      return Fail(ErrorKind::kNotFound, "directory " + host + " does not exist");
    }
    return Fail(ErrorKind::kIo, "cannot list " + host + ": " + Errno(errno));
  }
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  int error = errno;
  ::closedir(d);
  if (error != 0) return Fail(ErrorKind::kIo, "cannot list " + host + ": " + Errno(error));
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace onehpc
