// Finding this VM's context at boot when one-context did not hand it to us: the CONTEXT
// CD-ROM (by its label), a /context/ directory, or one-context's saved copy.
#ifndef ONEHPC_ROLES_BOOT_CONTEXT_H_
#define ONEHPC_ROLES_BOOT_CONTEXT_H_

#include <string>

#include "common/error.h"
#include "context/context_file.h"
#include "roles/os/block_devices.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"

namespace onehpc {

/// Where the CD is mounted (read-only) while context.sh and token.txt are read.
inline constexpr const char* kContextCdMountPoint = "/run/one-hpc/context-cd";

/// The service entry's search: a block device labelled CONTEXT (mounted read-only, read,
/// unmounted), then LoadContext's own sources (saved context.sh.network, /context/).
Result<LoadedContext> LoadBootContext(const std::string& root, BlockDevices& block_devices,
                                      Mounts& mounts, Files& files);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_BOOT_CONTEXT_H_
