#include "roles/boot_context.h"

#include <cstdlib>

#include "common/log.h"

namespace onehpc {

Result<LoadedContext> LoadBootContext(const std::string& root, BlockDevices& block_devices,
                                      Mounts& mounts, Files& files) {
  const bool real_root = root.empty() || root == "/";
  if (real_root) {
    auto device = block_devices.FindContextCd("CONTEXT");
    if (device) {
      log::Info("context CD-ROM found at {}", *device);
      auto dir = files.MakeTempDir(kContextCdMountParent, kContextCdMountPrefix);
      if (!dir) return Fail(dir.error().WithContext("a mount point for the context CD-ROM"));
      const std::string mount_point = files.HostPath(*dir);
      Status mounted = mounts.Mount({*device, mount_point, "iso9660", "ro,nosuid,nodev,noexec"});
      if (!mounted) {
        if (Status removed = files.RemoveDir(*dir); !removed) {
          log::Warn("{}", removed.error().message);
        }
        return Fail(mounted.error().WithContext("mounting the context CD-ROM " + *device));
      }
      ContextLoadOptions options;
      options.context_file = mount_point + "/context.sh";
      options.allow_environment = false;
      auto loaded = LoadContext(options);
      Status unmounted = mounts.Unmount(mount_point);
      if (!unmounted) {
        // Still mounted: the directory stays (mode 0700, root only).
        log::Warn("could not unmount the context CD-ROM from {}: {}", mount_point,
                  unmounted.error().message);
      } else if (Status removed = files.RemoveDir(*dir); !removed) {
        log::Warn("{}", removed.error().message);
      }
      if (loaded) {
        loaded->source = ContextSource::kCdrom;
        log::Info("context: loaded from the context CD-ROM {} (OneGate token {})", *device,
                  loaded->token.empty() ? "not found" : "found");
      }
      return loaded;
    }
    if (device.error().kind != ErrorKind::kNotFound) {
      log::Warn("looking for the context CD-ROM: {}", device.error().message);
    }
  }
  ContextLoadOptions options;
  options.root = real_root ? "" : root;
  options.allow_environment = false;
  return LoadContext(options);
}

Result<LoadedContext> LoadCommandContext(const CommandContextOptions& options,
                                         BlockDevices& block_devices, Mounts& mounts,
                                         Files& files) {
  ContextLoadOptions load;
  load.root = options.root;
  load.environment = options.environment;
  if (!options.context_file.empty()) {
    load.context_file = options.context_file;
    load.allow_environment = options.from_one_context;
    return LoadContext(load);
  }
  if (options.from_one_context) {
    std::string context_file;
    if (options.environment) {
      auto it = options.environment->find("CONTEXT_FILE");
      if (it != options.environment->end()) context_file = it->second;
    } else if (const char* value = std::getenv("CONTEXT_FILE")) {
      context_file = value;
    }
    if (!context_file.empty()) {
      load.allow_environment = true;
      return LoadContext(load);
    }
  }
  return LoadBootContext(options.root, block_devices, mounts, files);
}

}  // namespace onehpc
