#include "roles/disk/state_mount.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "common/log.h"
#include "roles/disk/mount_unit.h"
#include "roles/ensure.h"
#include "roles/names.h"
#include "roles/role.h"

namespace onehpc::disk {
namespace {

constexpr char kNfsServer[] = "nfs-server.service";
/// Where the copy is made before it is renamed into place; a leftover is an interrupted copy.
constexpr char kMigrating[] = "/export/home/.one-hpc-state/slurm.migrating";

Status Run(RoleEnv& env, std::vector<std::string> argv, Duration timeout) {
  Command c;
  c.argv = std::move(argv);
  c.timeout = timeout;
  auto r = RunChecked(env.runner, c);
  if (!r) return Fail(r.error());
  return Ok();
}

// The NFS server stops before the state under /export/slurm changes (a copy, a mount over
// it): the portal's writes wait on its hard mount, the copy is of a state nobody changes, and
// no export keeps pointing at the directory underneath. Configure starts it again.
Status StopNfsServer(RoleEnv& env, const StateMountOptions& options) {
  log::Info("storage: stopping {} while the Slurm state moves onto the disk (the portal waits)",
            kNfsServer);
  if (auto s = env.systemd.StopNoBlock(kNfsServer); !s) return s;
  return env.systemd.WaitInactive(kNfsServer, options.nfs_stop_timeout, env.clock);
}

// What stopped nfs-server for a change under /export/slurm that then failed: the state
// underneath is still whole (nothing was renamed or mounted over it), so the portal gets its
// export back now instead of waiting on its hard mount until the next configure.
Status StartNfsServerAfter(RoleEnv& env, Status failed) {
  if (failed) return failed;
  log::Warn(
      "storage: starting {} again: the Slurm state did not move ({}); the portal is served "
      "the state it had",
      kNfsServer, failed.error().message);
  if (auto s = env.systemd.StartNoBlock(kNfsServer); !s) {
    log::Error("storage: cannot start {} again: {}", kNfsServer, s.error().message);
  }
  return failed;
}

// nfs-server stopped around `change`, started again when the change fails.
Status WithNfsServerStopped(RoleEnv& env, const StateMountOptions& options,
                            const std::function<Status()>& change) {
  auto active = env.systemd.IsActive(kNfsServer);
  if (!active) return Fail(active.error());
  if (!*active) return change();
  if (auto s = StopNfsServer(env, options); !s) return StartNfsServerAfter(env, s);
  return StartNfsServerAfter(env, change());
}

// `path` must be a directory of root's, reached without a symbolic link at its last component:
// it lies in the homes export, where the portal's root (no_root_squash) could plant a link to
// this VM's / to have it bind-mounted on /export/slurm and served back to it.
Status RealRootDirectory(RoleEnv& env, const std::string& path) {
  const std::string host = env.files.HostPath(path);
  struct stat st {};
  if (::lstat(host.c_str(), &st) != 0) {
    return Fail(ErrorKind::kIo, "cannot look at " + host + ": " + std::strerror(errno));
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode) || st.st_uid != 0) {
    return Fail(
        ErrorKind::kUnsafe,
        host + (S_ISLNK(st.st_mode) ? " is a symbolic link" : " is not a directory of root's") +
            " (something changed it through the homes export); refusing to serve it as "
            "the Slurm state. Replace it with the real directory and reconfigure");
  }
  return Ok();
}

Status EnsureUnits(RoleEnv& env) {
  auto units = RenderBindMountUnits(kSlurmStateOnDisk, ood::kHomeExport, ood::kSlurmExport);
  bool changed = false;
  for (const auto& [path, content, why] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {units.mount_unit_path, units.mount_unit,
            "bind-mount the Slurm state of the ood-home disk on " + std::string(ood::kSlurmExport) +
                " at every boot, after the homes, before nfs-server"},
           {units.nfs_dropin_path, units.nfs_dropin,
            "nfs-server never starts without the Slurm state of the disk (never exports the "
            "directory underneath)"}}) {
    auto written = EnsureFile(env, path, content, 0644, std::nullopt, why);
    if (!written) return Fail(written.error());
    changed = changed || *written;
  }
  if (auto s = DaemonReloadIf(env, changed, "the state mount unit or its drop-in changed"); !s) {
    return s;
  }
  return EnsureUnitEnabled(env, MountUnitName(ood::kSlurmExport), "local-fs.target",
                           "the Slurm state is mounted at every boot");
}

// .one-hpc-state on the disk: made root's only (0700), whatever made it otherwise, since the
// homes export reaches it.
Status EnsureStateDirectory(RoleEnv& env) {
  if (auto s = EnsureDirectory(env, kStateDirOnDisk, 0700, FileOwner{"root", "root"},
                               "one-hpc's state on the ood-home disk; no user of the homes "
                               "export enters it");
      !s) {
    return s;
  }
  if (!env.plan.dry_run()) {
    // Root only, whatever made it otherwise: the homes export reaches this directory.
    const std::string dir = env.files.HostPath(kStateDirOnDisk);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Fail(ErrorKind::kUnsafe, dir +
                                          " is not a directory; refusing to keep the Slurm "
                                          "state there");
    }
    if ((st.st_mode & 07777) != 0700 || st.st_uid != 0 || st.st_gid != 0) {
      auto s = env.plan.Do("chown root:root, chmod 0700 " + std::string(kStateDirOnDisk),
                           "no user of the homes export may enter it", [&]() -> Status {
                             if (::chown(dir.c_str(), 0, 0) != 0 || ::chmod(dir.c_str(), 0700)) {
                               return Fail(ErrorKind::kIo, "cannot make " + dir + " root's only");
                             }
                             return Ok();
                           });
      if (!s) return s;
    }
  }
  return Ok();
}

// The root-disk /export/slurm copied onto the disk, into a temporary directory renamed into
// place once complete and synced.
Status CopyOntoDisk(RoleEnv& env, const StateMountOptions& options) {
  const std::string migrating = env.files.HostPath(kMigrating);
  if (env.files.Exists(kMigrating)) {
    // Ours: our name, inside our root-only directory. What an interrupted copy left.
    log::Warn("storage: removing {}, left by an interrupted copy", migrating);
    if (auto s = Run(env, {"rm", "-r", "--one-file-system", "--", migrating}, options.copy_timeout);
        !s) {
      return s;
    }
  }
  if (auto s = Run(env, {"cp", "-a", "--", env.files.HostPath(ood::kSlurmExport), migrating},
                   options.copy_timeout);
      !s) {
    return s;
  }
  if (auto s = Run(env, {"sync", "-f", migrating}, options.copy_timeout); !s) return s;
  // The units before the rename: a power loss once the copy is in place must not boot an
  // nfs-server that exports the root disk's copy underneath (writes there would vanish under
  // the bind mount). Before the rename the mount unit fails (no such directory), nfs-server
  // with it, and the next configure copies again.
  if (auto s = EnsureUnits(env); !s) return s;
  return env.files.Rename(kMigrating, kSlurmStateOnDisk);
}

}  // namespace

Status EnsureSlurmStateOnHomeDisk(RoleEnv& env, const StateMountOptions& options) {
  const std::string where = env.files.HostPath(ood::kSlurmExport);
  if (auto s = EnsureStateDirectory(env); !s) return s;
  auto current = env.mounts.FindByTarget(where);
  if (!current) return Fail(current.error());
  if (current->has_value()) {
    auto home = env.mounts.FindByTarget(env.files.HostPath(ood::kHomeExport));
    if (!home) return Fail(home.error());
    const MountEntry& at = **current;
    if (!home->has_value() || (*home)->source != at.source || at.root != kSlurmStateRoot) {
      return Fail(ErrorKind::kUnsafe,
                  std::string(ood::kSlurmExport) + " has " + at.source + " (" + at.fs_type +
                      (at.root.empty() || at.root == "/" ? "" : ", directory " + at.root) +
                      ") mounted on it, not the Slurm state of the ood-home disk (" +
                      kSlurmStateOnDisk +
                      "); refusing to serve it to the portal. Unmount it "
                      "and reconfigure");
    }
    env.plan.Keep(std::string(ood::kSlurmExport) + " is " + kSlurmStateOnDisk, "already mounted");
    return EnsureUnits(env);
  }

  auto underneath = env.files.List(ood::kSlurmExport);
  if (!underneath && underneath.error().kind != ErrorKind::kNotFound) {
    return Fail(underneath.error());
  }
  const size_t on_root_disk = underneath ? underneath->size() : 0;
  if (env.files.Exists(kSlurmStateOnDisk)) {
    if (on_root_disk > 0) {
      log::Warn(
          "storage: {} on the root disk holds {} entries; the ood-home disk's {} is the "
          "Slurm state (copied there before, or this VM replaces another): the root disk's "
          "stay underneath, unused",
          ood::kSlurmExport, on_root_disk, kSlurmStateOnDisk);
    }
    env.plan.Keep("the Slurm state in " + std::string(kSlurmStateOnDisk),
                  on_root_disk > 0 ? "on the disk already; the root disk's copy is not used"
                                   : "on the disk already");
  } else if (on_root_disk > 0) {
    auto s = env.plan.Do(
        "copy " + std::string(ood::kSlurmExport) + " (" + std::to_string(on_root_disk) +
            " entries) onto the ood-home disk, " + kSlurmStateOnDisk,
        "the Slurm state, the munge key and the accounting dumps belong with the homes: a "
        "replaced storage VM finds them (nfs-server is stopped during the copy; the root "
        "disk's copy stays underneath)",
        [&] {
          return WithNfsServerStopped(env, options, [&] { return CopyOntoDisk(env, options); });
        });
    if (!s) return s;
  } else {
    // The units first, for the same reason as before a copy's rename.
    if (auto s = EnsureUnits(env); !s) return s;
    if (auto s = EnsureDirectory(env, kSlurmStateOnDisk, 0755, FileOwner{"root", "root"},
                                 "the Slurm state, the munge key and the accounting dumps, "
                                 "next to the homes");
        !s) {
      return s;
    }
  }
  auto s = env.plan.Do("bind-mount " + std::string(kSlurmStateOnDisk) + " on " + ood::kSlurmExport,
                       "the portal's state export is the disk's copy", [&]() -> Status {
                         return WithNfsServerStopped(env, options, [&]() -> Status {
                           // Checked while nothing serves the homes: no one can swap it now.
                           for (const char* dir : {kStateDirOnDisk, kSlurmStateOnDisk}) {
                             if (auto real = RealRootDirectory(env, dir); !real) return real;
                           }
                           return env.mounts.Mount(MountEntry{env.files.HostPath(kSlurmStateOnDisk),
                                                              where, "", "bind", ""});
                         });
                       });
  if (!s) return s;
  return EnsureUnits(env);
}

}  // namespace onehpc::disk
