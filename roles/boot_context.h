// Finding this VM's context, the same way for configure and for every command a timer runs:
// the CONTEXT CD-ROM (by its label), then one-context's saved copy or a /context/ directory.
#ifndef ONEHPC_ROLES_BOOT_CONTEXT_H_
#define ONEHPC_ROLES_BOOT_CONTEXT_H_

#include <map>
#include <optional>
#include <string>

#include "common/error.h"
#include "context/context_file.h"
#include "roles/os/block_devices.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"

namespace onehpc {

/// The CD is mounted (read-only) on a new private directory in here, `context-cd.XXXXXX`
/// (mkdtemp, mode 0700), for each invocation: two commands running at once (configure and a
/// timer) never share or unmount each other's mount point. The directory is removed after
/// the unmount. Nothing from the CD is copied: the token stays on the CD.
inline constexpr const char* kContextCdMountParent = "/run/one-hpc";
inline constexpr const char* kContextCdMountPrefix = "context-cd.";

/// The search of configure and of the timers' commands: a block device labelled CONTEXT
/// (mounted read-only, context.sh and token.txt read, unmounted; read at every call, so a
/// reconfigure's new CD is seen at once), then LoadContext's own sources (saved
/// context.sh.network, /context/). With a `root` other than "/" only the latter, under root.
/// `files` resolves the mount point (its root prefix is used for the mount point only).
Result<LoadedContext> LoadBootContext(const std::string& root, BlockDevices& block_devices,
                                      Mounts& mounts, Files& files);

/// What a command was told about its context.
struct CommandContextOptions {
  std::string context_file;  ///< `--context FILE`; empty = search
  std::string root;          ///< `--root`
  /// Started by one-contextd (the hook): its environment (CONTEXT_FILE, MOUNT_DIR) wins.
  bool from_one_context = false;
  /// Tests: use these variables instead of the process environment.
  std::optional<std::map<std::string, std::string>> environment;
};

/// The context of any command (configure, reconcile, follow, storage-refresh, settings,
/// context): `--context FILE` if given; one-contextd's environment when it started us and set
/// CONTEXT_FILE; otherwise LoadBootContext, so every command finds the context that
/// configure used on every boot path (CD only, one-context, /context/).
Result<LoadedContext> LoadCommandContext(const CommandContextOptions& options,
                                         BlockDevices& block_devices, Mounts& mounts, Files& files);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_BOOT_CONTEXT_H_
