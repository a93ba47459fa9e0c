#include "roles/boot_context.h"

#include "common/log.h"

namespace onehpc {

Result<LoadedContext> LoadBootContext(const std::string& root, BlockDevices& block_devices,
                                      Mounts& mounts, Files& files) {
  const bool real_root = root.empty() || root == "/";
  if (real_root) {
    auto device = block_devices.FindByLabel("CONTEXT");
    if (device) {
      log::Info("context CD-ROM found at {}", *device);
      if (Status made = files.MakeDirs(kContextCdMountPoint, 0700); !made) return Fail(made.error());
      auto existing = mounts.FindByTarget(kContextCdMountPoint);
      bool mounted_here = false;
      if (existing && !existing->has_value()) {
        Status mounted = mounts.Mount({*device, kContextCdMountPoint, "iso9660", "ro,nosuid,nodev,noexec"});
        if (!mounted) return Fail(mounted.error().WithContext("mounting the context CD-ROM " + *device));
        mounted_here = true;
      }
      ContextLoadOptions options;
      options.context_file = std::string(kContextCdMountPoint) + "/context.sh";
      options.allow_environment = false;
      auto loaded = LoadContext(options);
      if (mounted_here) {
        Status unmounted = mounts.Unmount(kContextCdMountPoint);
        if (!unmounted) log::Warn("could not unmount the context CD-ROM: {}", unmounted.error().message);
      }
      if (loaded) loaded->source = ContextSource::kCdrom;
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

}  // namespace onehpc
