#include "roles/os/mounts.h"

#include <errno.h>
#include <libmount/libmount.h>
#include <string.h>

#include <memory>

#include "common/log.h"

namespace onehpc {
namespace {

struct TableDeleter {
  void operator()(libmnt_table* table) const { mnt_unref_table(table); }
};
struct CacheDeleter {
  void operator()(libmnt_cache* cache) const { mnt_unref_cache(cache); }
};
struct IterDeleter {
  void operator()(libmnt_iter* iter) const { mnt_free_iter(iter); }
};
struct ContextDeleter {
  void operator()(libmnt_context* context) const { mnt_free_context(context); }
};
using TablePtr = std::unique_ptr<libmnt_table, TableDeleter>;
using CachePtr = std::unique_ptr<libmnt_cache, CacheDeleter>;
using IterPtr = std::unique_ptr<libmnt_iter, IterDeleter>;
using ContextPtr = std::unique_ptr<libmnt_context, ContextDeleter>;

constexpr const char* kProcMountinfo = "/proc/self/mountinfo";

std::string Str(const char* s) { return s ? s : ""; }

MountEntry ToEntry(libmnt_fs* fs) {
  MountEntry entry;
  entry.source = Str(mnt_fs_get_source(fs));
  entry.target = Str(mnt_fs_get_target(fs));
  entry.fs_type = Str(mnt_fs_get_fstype(fs));
  entry.options = Str(mnt_fs_get_options(fs));
  entry.root = Str(mnt_fs_get_root(fs));
  return entry;
}

Result<TablePtr> ParseTable(const std::string& mountinfo) {
  const std::string file = mountinfo.empty() ? kProcMountinfo : mountinfo;
  TablePtr table(mnt_new_table());
  if (!table) return Fail(ErrorKind::kInternal, "mnt_new_table failed");
  int rc = mnt_table_parse_file(table.get(), file.c_str());
  if (rc != 0) {
    return Fail(ErrorKind::kIo, "cannot parse " + file + ": " + strerror(rc < 0 ? -rc : rc));
  }
  return table;
}

/// Ok, or a readable message for a failed libmount context operation (what mount(8) and
/// umount(8) would print).
Status CheckContext(libmnt_context* context, int rc, const std::string& what) {
  char buf[1024] = {0};
  int code = mnt_context_get_excode(context, rc, buf, sizeof buf);
  if (code == MNT_EX_SUCCESS) return Ok();
  std::string reason = buf;
  if (reason.empty()) {
    reason = rc < 0 ? strerror(-rc) : "libmount error " + std::to_string(rc);
  }
  return Fail(ErrorKind::kIo, what + " failed: " + reason);
}

}  // namespace

LibmountMounts::LibmountMounts(std::string mountinfo) : mountinfo_(std::move(mountinfo)) {}

Result<std::optional<MountEntry>> LibmountMounts::FindByTarget(const std::string& target) {
  if (target.empty()) return Fail(ErrorKind::kInvalidInput, "empty mount target");
  auto table = ParseTable(mountinfo_);
  if (!table) return Fail(table.error());
  // Backward: the mount on top when several are stacked on the same target.
  libmnt_fs* fs = mnt_table_find_target(table->get(), target.c_str(), MNT_ITER_BACKWARD);
  if (!fs) return std::optional<MountEntry>();
  return std::optional<MountEntry>(ToEntry(fs));
}

Result<std::vector<MountEntry>> LibmountMounts::FindBySource(const std::string& source) {
  if (source.empty()) return Fail(ErrorKind::kInvalidInput, "empty mount source");
  auto table = ParseTable(mountinfo_);
  if (!table) return Fail(table.error());
  // The cache canonicalises paths (/dev/disk/by-label/x -> /dev/vdb) on both sides.
  CachePtr cache(mnt_new_cache());
  if (!cache) return Fail(ErrorKind::kInternal, "mnt_new_cache failed");
  mnt_table_set_cache(table->get(), cache.get());
  IterPtr iter(mnt_new_iter(MNT_ITER_FORWARD));
  if (!iter) return Fail(ErrorKind::kInternal, "mnt_new_iter failed");
  std::vector<MountEntry> entries;
  libmnt_fs* fs = nullptr;
  while (mnt_table_next_fs(table->get(), iter.get(), &fs) == 0) {
    if (mnt_fs_match_source(fs, source.c_str(), cache.get())) entries.push_back(ToEntry(fs));
  }
  return entries;
}

Status LibmountMounts::Mount(const MountEntry& entry) {
  if (entry.source.empty() || entry.target.empty()) {
    return Fail(ErrorKind::kInvalidInput, "mount needs a source and a target (got '" +
                                              entry.source + "' on '" + entry.target + "')");
  }
  std::string what = entry.source + " on " + entry.target +
                     (entry.fs_type.empty() ? "" : " type " + entry.fs_type) +
                     (entry.options.empty() ? "" : " (" + entry.options + ")");
  log::Debug("mount {}", what);
  ContextPtr context(mnt_new_context());
  if (!context) return Fail(ErrorKind::kInternal, "mnt_new_context failed");
  if (mnt_context_set_source(context.get(), entry.source.c_str()) != 0 ||
      mnt_context_set_target(context.get(), entry.target.c_str()) != 0 ||
      (!entry.fs_type.empty() &&
       mnt_context_set_fstype(context.get(), entry.fs_type.c_str()) != 0) ||
      (!entry.options.empty() &&
       mnt_context_set_options(context.get(), entry.options.c_str()) != 0)) {
    return Fail(ErrorKind::kInternal, "cannot set up libmount for " + what);
  }
  int rc = mnt_context_mount(context.get());
  return CheckContext(context.get(), rc, "mount " + what);
}

Status LibmountMounts::Unmount(const std::string& target) {
  if (target.empty()) return Fail(ErrorKind::kInvalidInput, "empty unmount target");
  // Idempotent: nothing mounted there is success.
  auto current = FindByTarget(target);
  if (!current) return Fail(current.error());
  if (!*current) {
    log::Debug("umount {}: not mounted", target);
    return Ok();
  }
  log::Debug("umount {}", target);
  ContextPtr context(mnt_new_context());
  if (!context) return Fail(ErrorKind::kInternal, "mnt_new_context failed");
  if (mnt_context_set_target(context.get(), target.c_str()) != 0) {
    return Fail(ErrorKind::kInternal, "cannot set up libmount for " + target);
  }
  int rc = mnt_context_umount(context.get());
  return CheckContext(context.get(), rc, "umount " + target);
}

}  // namespace onehpc
