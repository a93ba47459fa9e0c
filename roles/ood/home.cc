#include "roles/ood/home.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "common/log.h"

namespace onehpc::ood {
namespace {

// Limits on what is copied from skel (a safety net against a huge or looping skel).
constexpr int kMaxSkelDepth = 8;
constexpr size_t kMaxSkelEntries = 10000;
constexpr off_t kMaxSkelBytes = 64 * 1024 * 1024;

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::string Errno(int err) { return std::strerror(err); }

tl::unexpected<Error> IoError(const std::string& what, int err) {
  return Fail(ErrorKind::kIo, fmt::format("{}: {}", what, Errno(err)));
}

// Opens an absolute directory path without following a symlink in any component:
// openat2(RESOLVE_NO_SYMLINKS) where the kernel has it, otherwise one O_NOFOLLOW openat per
// component from "/".
Result<UniqueFd> OpenDirNoSymlinks(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return Fail(ErrorKind::kInvalidInput, fmt::format("{} is not an absolute path", path));
  }
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = ::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how);
  if (fd >= 0) return UniqueFd(static_cast<int>(fd));
  int err = errno;
  if (err == ELOOP || err == ENOTDIR) {  // O_DIRECTORY|O_NOFOLLOW on a link gives ENOTDIR
    return Fail(ErrorKind::kUnsafe,
                fmt::format("{} is or goes through a symbolic link, or is not a directory; "
                            "refusing to use it",
                            path));
  }
  if (err == ENOENT) return Fail(ErrorKind::kNotFound, fmt::format("{} does not exist", path));
  if (err != ENOSYS && err != EPERM) return IoError("cannot open " + path, err);

  // No openat2 (old kernel, seccomp): walk the components.
  UniqueFd dir(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return IoError("cannot open /", errno);
  size_t pos = 1;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    std::string part = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      return Fail(ErrorKind::kInvalidInput, fmt::format("{} contains '..'", path));
    }
    UniqueFd next(
        ::openat(dir.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      int e = errno;
      if (e == ENOENT) {
        return Fail(ErrorKind::kNotFound, fmt::format("{} does not exist", path));
      }
      if (e == ELOOP || e == ENOTDIR) {
        return Fail(ErrorKind::kUnsafe,
                    fmt::format("{}: component {} is a symbolic link or not a directory; "
                                "refusing to use it",
                                path, part));
      }
      return IoError("cannot open " + path, e);
    }
    dir = std::move(next);
  }
  return dir;
}

std::string RandomSuffix() {
  unsigned char bytes[8];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t r = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    got += static_cast<size_t>(r);
  }
  std::string out;
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

// Removes `name` in `parent` and everything below it, never following a link (unlinkat
// does not follow; directories are opened with O_NOFOLLOW). Only used on the temporary
// directory this program created.
void RemoveTreeAt(int parent, const std::string& name, int depth = 0) {
  if (depth > kMaxSkelDepth + 2) return;
  UniqueFd dir(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.valid()) {
    int dup_fd = ::dup(dir.get());
    DIR* stream = dup_fd >= 0 ? ::fdopendir(dup_fd) : nullptr;
    std::vector<std::string> names;
    if (stream) {
      while (struct dirent* entry = ::readdir(stream)) {
        std::string_view n = entry->d_name;
        if (n != "." && n != "..") names.emplace_back(n);
      }
      ::closedir(stream);
    } else if (dup_fd >= 0) {
      ::close(dup_fd);
    }
    for (const auto& n : names) {
      struct stat st;
      if (::fstatat(dir.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        RemoveTreeAt(dir.get(), n, depth + 1);
      } else {
        ::unlinkat(dir.get(), n.c_str(), 0);
      }
    }
  }
  if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    log::Warn("home-create: could not remove the temporary directory {}: {}", name, Errno(errno));
  }
}

struct CopyBudget {
  size_t entries = 0;
  off_t bytes = 0;
};

Status CopyFileAt(int src_dir, int dst_dir, const std::string& name, uid_t uid, gid_t gid,
                  CopyBudget& budget) {
  // O_NOFOLLOW: a file swapped for a symlink since the fstatat fails with ELOOP;
  // O_NONBLOCK: one swapped for a FIFO does not block the open. fstat on the fd decides.
  UniqueFd in(
      ::openat(src_dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!in.valid()) {
    log::Warn("home-create: skel entry {} skipped: {}", name, Errno(errno));
    return Ok();
  }
  struct stat st;
  if (::fstat(in.get(), &st) != 0) return IoError("fstat skel " + name, errno);
  if (!S_ISREG(st.st_mode)) {
    log::Warn("home-create: skel entry {} skipped: not a regular file", name);
    return Ok();
  }
  if (budget.bytes + st.st_size > kMaxSkelBytes) {
    return Fail(ErrorKind::kIo, fmt::format("skel is larger than {} bytes", kMaxSkelBytes));
  }
  UniqueFd out(
      ::openat(dst_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) return IoError("create " + name + " in the new home", errno);
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(in.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("read skel " + name, errno);
    }
    if (n == 0) break;
    budget.bytes += n;
    if (budget.bytes > kMaxSkelBytes) {
      return Fail(ErrorKind::kIo, fmt::format("skel is larger than {} bytes", kMaxSkelBytes));
    }
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(out.get(), buffer + done, static_cast<size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        return IoError("write " + name + " in the new home", errno);
      }
      done += w;
    }
  }
  if (::fchown(out.get(), uid, gid) != 0) return IoError("chown " + name, errno);
  if (::fchmod(out.get(), st.st_mode & 0777) != 0) return IoError("chmod " + name, errno);
  return Ok();
}

// Copies the regular files and directories of src_dir into dst_dir (a directory only this
// process can write), owned by uid:gid with the permission bits of the source (set-id and
// sticky bits dropped). Everything else (symlinks, devices, FIFOs, sockets) is skipped.
Status CopyTree(int src_dir, int dst_dir, uid_t uid, gid_t gid, int depth, CopyBudget& budget) {
  int dup_fd = ::dup(src_dir);
  if (dup_fd < 0) return IoError("dup", errno);
  DIR* stream = ::fdopendir(dup_fd);
  if (!stream) {
    int err = errno;
    ::close(dup_fd);
    return IoError("read skel directory", err);
  }
  std::vector<std::string> names;
  while (struct dirent* entry = ::readdir(stream)) {
    std::string_view n = entry->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(stream);

  for (const auto& name : names) {
    if (++budget.entries > kMaxSkelEntries) {
      return Fail(ErrorKind::kIo, fmt::format("skel has more than {} entries", kMaxSkelEntries));
    }
    struct stat st;
    if (::fstatat(src_dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      log::Warn("home-create: skel entry {} skipped: {}", name, Errno(errno));
      continue;
    }
    if (S_ISREG(st.st_mode)) {
      if (auto copied = CopyFileAt(src_dir, dst_dir, name, uid, gid, budget); !copied) {
        return copied;
      }
    } else if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxSkelDepth) {
        log::Warn("home-create: skel directory {} skipped: deeper than {} levels", name,
                  kMaxSkelDepth);
        continue;
      }
      UniqueFd sub_src(
          ::openat(src_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub_src.valid()) {
        log::Warn("home-create: skel directory {} skipped: {}", name, Errno(errno));
        continue;
      }
      struct stat sub_st;
      if (::fstat(sub_src.get(), &sub_st) != 0) return IoError("fstat skel " + name, errno);
      if (::mkdirat(dst_dir, name.c_str(), 0700) != 0) {
        return IoError("create directory " + name + " in the new home", errno);
      }
      UniqueFd sub_dst(
          ::openat(dst_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub_dst.valid()) return IoError("open " + name + " in the new home", errno);
      if (auto copied = CopyTree(sub_src.get(), sub_dst.get(), uid, gid, depth + 1, budget);
          !copied) {
        return copied;
      }
      if (::fchown(sub_dst.get(), uid, gid) != 0) return IoError("chown " + name, errno);
      if (::fchmod(sub_dst.get(), (sub_st.st_mode & 0777) | 0700) != 0) {
        return IoError("chmod " + name, errno);
      }
    } else {
      log::Warn("home-create: skel entry {} skipped: not a regular file or directory", name);
    }
  }
  return Ok();
}

// An existing <base>/<name>: must be a real directory owned by the user; never changed.
Result<HomeOutcome> VerifyExistingHome(int base, const HomeRequest& request,
                                       const std::string& path) {
  struct stat lst;
  if (::fstatat(base, request.user.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(lst.st_mode)) {
    return Fail(
        ErrorKind::kUnsafe,
        fmt::format("{} is a symbolic link; refusing to use it as {}'s home", path, request.user));
  }
  UniqueFd home(::openat(base, request.user.c_str(),
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!home.valid()) {
    int err = errno;
    if (err == ELOOP) {
      return Fail(ErrorKind::kUnsafe,
                  fmt::format("{} is a symbolic link; refusing to use it as {}'s home", path,
                              request.user));
    }
    if (err == ENOTDIR) {
      return Fail(ErrorKind::kUnsafe,
                  fmt::format("{} exists and is not a directory; refusing to use it as {}'s "
                              "home",
                              path, request.user));
    }
    return IoError("cannot open " + path, err);
  }
  struct stat st;
  if (::fstat(home.get(), &st) != 0) return IoError("fstat " + path, errno);
  if (!S_ISDIR(st.st_mode)) {
    return Fail(ErrorKind::kUnsafe, fmt::format("{} is not a directory", path));
  }
  if (st.st_uid != request.uid) {
    return Fail(ErrorKind::kUnsafe,
                fmt::format("{} exists but belongs to uid {}, not to {} (uid {}); refusing to "
                            "use or change it",
                            path, st.st_uid, request.user, request.uid));
  }
  if ((st.st_mode & 077) != 0) {
    log::Info("home-create: {} is mode {:04o} (not 0700); left as the user set it", path,
              st.st_mode & 07777);
  }
  log::Debug("home-create: {} exists and belongs to {}; nothing to do", path, request.user);
  return HomeOutcome::kExisted;
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

Status ValidateHomeRequest(const HomeRequest& request) {
  auto invalid = [&](const std::string& why) {
    return Fail(ErrorKind::kInvalidInput, fmt::format("home-create {}: {}", request.user, why));
  };
  const std::string& name = request.user;
  // Any name the directory may hold (also site users such as john.doe), but never one that
  // is not a single, ordinary path component.
  bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' && name[0] != '-';
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '.' || c == '-');
  }
  if (!ok) {
    return Fail(ErrorKind::kInvalidInput,
                "home-create: the user name is not a valid login name (letters, digits, '_', "
                "'.', '-'; not starting with '.' or '-'; at most 64 characters)");
  }
  if (request.uid < kMinHomeUid || request.uid == 65534 || request.uid == static_cast<uid_t>(-1)) {
    return invalid(
        fmt::format("uid {} is a system account (homes are created for uid >= {} "
                    "only, never for nobody)",
                    request.uid, kMinHomeUid));
  }
  if (request.gid == 0) return invalid("the primary group is root (gid 0)");
  const std::string base = StripTrailingSlashes(request.home_base);
  if (base.empty() || base[0] != '/') {
    return invalid(fmt::format("the home base {} is not an absolute path", request.home_base));
  }
  if (request.home != base + "/" + name) {
    return invalid(
        fmt::format("the home directory in the user's entry is {}, not {}/{}; "
                    "refusing to create it",
                    request.home, base, name));
  }
  return Ok();
}

Status CheckHomesMounted(Mounts& mounts, const std::string& base, bool in_container) {
  auto mount = mounts.FindByTarget(base);
  if (!mount) return Fail(mount.error());
  const std::string refuse =
      "; refusing to create a home on this VM's root disk, where the "
      "workers would not see it and the mount would later hide it";
  if (!mount->has_value()) {
    return Fail(ErrorKind::kUnsafe, base +
                                        " is not mounted (home.mount is not active: is the "
                                        "storage VM or the site's NFS server reachable?)" +
                                        refuse);
  }
  const std::string& type = (*mount)->fs_type;
  if (type != "nfs" && type != "nfs4" && !in_container) {
    return Fail(ErrorKind::kUnsafe, base + " is a " + type + " mount of " + (*mount)->source +
                                        ", not the homes' NFS export" + refuse);
  }
  return Ok();
}

Result<HomeRequest> LookUpHomeUser(const std::string& user, const std::string& home_base,
                                   const std::string& skel) {
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  struct passwd entry;
  struct passwd* found = nullptr;
  for (;;) {
    int rc = ::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (rc == ERANGE && buffer.size() < (1u << 20)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (rc != 0) return IoError("getpwnam " + user, rc);
    break;
  }
  if (!found) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("home-create: no such user {} (getpwnam)", user));
  }
  HomeRequest request;
  request.user = user;
  request.uid = found->pw_uid;
  request.gid = found->pw_gid;
  request.home = found->pw_dir ? found->pw_dir : "";
  request.home_base = home_base;
  request.skel = skel;
  return request;
}

namespace {

// A directory the homes are made from or in: owned by root and writable by root alone.
bool RootOwnedNotWritable(const struct stat& st) {
  return st.st_uid == 0 && (st.st_mode & 022) == 0;
}

// The skeleton, opened like the base (no symlink on the way) and refused unless root's alone; an
// invalid fd (and a warning) when there is none.
Result<UniqueFd> OpenSkeleton(const HomeRequest& request) {
  if (request.skel.empty()) return UniqueFd();
  auto opened = OpenDirNoSymlinks(StripTrailingSlashes(request.skel));
  if (!opened) {
    if (opened.error().kind != ErrorKind::kNotFound) {
      return Fail(opened.error().WithContext("home-create: skeleton"));
    }
    log::Warn("home-create: no skeleton directory {}; {}'s home starts empty", request.skel,
              request.user);
    return UniqueFd();
  }
  struct stat skel_st;
  if (::fstat(opened->get(), &skel_st) != 0) return IoError("fstat " + request.skel, errno);
  if (!RootOwnedNotWritable(skel_st)) {
    return Fail(ErrorKind::kUnsafe,
                fmt::format("home-create: the skeleton {} must be owned by root and "
                            "writable only by root",
                            request.skel));
  }
  return std::move(*opened);
}

// The private directory `temp` (made by root in the base, 0700) filled from the skeleton and
// handed to the user; the caller removes it on failure.
Status FillNewHome(int base, const std::string& temp, int skel, const HomeRequest& request) {
  UniqueFd home(::openat(base, temp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!home.valid()) return Fail(ErrorKind::kIo, "open the new home: " + Errno(errno));
  struct stat home_st;
  if (::fstat(home.get(), &home_st) != 0 || home_st.st_uid != 0 || !S_ISDIR(home_st.st_mode)) {
    return Fail(ErrorKind::kUnsafe, "the new home directory is not the one just made");
  }
  if (skel >= 0) {
    CopyBudget budget;
    if (auto copied = CopyTree(skel, home.get(), request.uid, request.gid, 0, budget); !copied) {
      return Fail(copied.error().WithContext("home-create: copy " + request.skel));
    }
  }
  if (::fchown(home.get(), request.uid, request.gid) != 0) {
    return Fail(ErrorKind::kIo, "chown the new home: " + Errno(errno));
  }
  if (::fchmod(home.get(), 0700) != 0) {
    return Fail(ErrorKind::kIo, "chmod the new home: " + Errno(errno));
  }
  ::fsync(home.get());
  return Ok();
}

// renameat2(RENAME_NOREPLACE) of `temp` to the user's name; -1 with errno as rename's.
int RenameNoReplace(int base, const std::string& temp, const std::string& user) {
  int rc = ::renameat2(base, temp.c_str(), base, user.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
    // No RENAME_NOREPLACE (e.g. NFS). rename(2) of a directory never follows a symlink at
    // the target and only replaces an empty directory; only root can create one in base.
    struct stat st;
    if (::fstatat(base, user.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      errno = EEXIST;
    } else {
      rc = ::renameat(base, temp.c_str(), base, user.c_str());
    }
  }
  return rc;
}

}  // namespace

Result<HomeOutcome> CreateHome(const HomeRequest& request) {
  if (auto valid = ValidateHomeRequest(request); !valid) return Fail(valid.error());
  const std::string base_path = StripTrailingSlashes(request.home_base);
  const std::string path = base_path + "/" + request.user;

  auto base = OpenDirNoSymlinks(base_path);
  if (!base) return Fail(base.error().WithContext("home-create"));
  struct stat base_st;
  if (::fstat(base->get(), &base_st) != 0) return IoError("fstat " + base_path, errno);
  if (!RootOwnedNotWritable(base_st)) {
    return Fail(ErrorKind::kUnsafe,
                fmt::format("home-create: {} must be owned by root and writable only by root "
                            "(it is uid {}, mode {:04o}); refusing to create homes in it",
                            base_path, base_st.st_uid, base_st.st_mode & 07777));
  }

  struct stat st;
  if (::fstatat(base->get(), request.user.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    return VerifyExistingHome(base->get(), request, path);
  }
  if (errno != ENOENT) return IoError("stat " + path, errno);
  auto skel = OpenSkeleton(request);
  if (!skel) return Fail(skel.error());

  // Build in a private directory, then hand over and rename into place.
  std::string temp;
  for (int attempt = 0;; ++attempt) {
    temp = ".one-hpc-home-" + request.user + "." + RandomSuffix();
    if (::mkdirat(base->get(), temp.c_str(), 0700) == 0) break;
    if (errno != EEXIST || attempt >= 5) {
      return IoError("create a directory in " + base_path, errno);
    }
  }
  if (auto filled = FillNewHome(base->get(), temp, skel->valid() ? skel->get() : -1, request);
      !filled) {
    RemoveTreeAt(base->get(), temp);
    return Fail(filled.error());
  }
  if (RenameNoReplace(base->get(), temp, request.user) != 0) {
    int err = errno;
    RemoveTreeAt(base->get(), temp);
    if (err == EEXIST || err == ENOTEMPTY || err == ENOTDIR) {
      // Something appeared meanwhile (another login, an attacker): judge it like any
      // existing home.
      return VerifyExistingHome(base->get(), request, path);
    }
    return IoError("rename the new home to " + path, err);
  }
  ::fsync(base->get());
  log::Info("home-create: created {} (0700, owner {} uid {} gid {}) from {}", path, request.user,
            request.uid, request.gid, skel->valid() ? request.skel : "nothing");
  return HomeOutcome::kCreated;
}

}  // namespace onehpc::ood
