// Persisting the ood-home mount as generated systemd units (systemd.mount(5): for tooling,
// mount units are preferred over editing /etc/fstab). What they guarantee at boot:
//  - the disk is mounted before nfs-server starts (Before= in the mount unit, and
//    RequiresMountsFor= in an nfs-server drop-in);
//  - a missing disk never lets nfs-server export the empty directory underneath: the drop-in
//    makes nfs-server require the mount (it does not start without it), and the exports carry
//    the `mountpoint` option as a second fence;
//  - a missing disk does not hang the boot: the mount is only wanted by local-fs.target and
//    its device job times out after 30 s (x-systemd.device-timeout is not honoured in units).
#ifndef ONEHPC_ROLES_DISK_MOUNT_UNIT_H_
#define ONEHPC_ROLES_DISK_MOUNT_UNIT_H_

#include <string>

namespace onehpc::disk {

/// The options of the ood-home disk's mount: the storage VM runs nothing from the homes, and a
/// setuid-root program or a device file that a portal's root planted there (the portal writes the
/// homes with no_root_squash) must not work on it.
inline constexpr char kHomeDiskMountOptions[] = "defaults,noatime,nosuid,nodev,noexec";

/// systemd-escape --path: "/export/home" -> "export-home", "/dev/disk/by-uuid/a-b" ->
/// "dev-disk-by\x2duuid-a\x2db".
std::string EscapePath(const std::string& path);

struct MountUnitFiles {
  std::string mount_unit_path;  ///< /etc/systemd/system/export-home.mount
  std::string mount_unit;
  std::string device_dropin_path;  ///< .../dev-disk-by\x2duuid-<uuid>.device.d/50-one-hpc.conf
  std::string device_dropin;
  std::string nfs_dropin_path;  ///< /etc/systemd/system/nfs-server.service.d/50-one-hpc-home.conf
  std::string nfs_dropin;
};

/// The mount unit for `where`: "/home" -> "home.mount" (systemd requires this name).
std::string MountUnitName(const std::string& where);

/// /etc/systemd/system/<escaped where>.mount
std::string MountUnitPath(const std::string& where);

/// The units mounting the filesystem `uuid` (type `fs_type`) on `where`.
MountUnitFiles RenderMountUnits(const std::string& uuid, const std::string& fs_type,
                                const std::string& where);

/// A bind mount of `what` (a directory on the filesystem mounted on `under`) on `where`,
/// mounted after `under` and before nfs-server, and the nfs-server drop-in that requires it.
struct BindMountUnitFiles {
  std::string mount_unit_path;  ///< /etc/systemd/system/export-slurm.mount
  std::string mount_unit;
  std::string nfs_dropin_path;  ///< .../nfs-server.service.d/50-one-hpc-state.conf
  std::string nfs_dropin;
};
BindMountUnitFiles RenderBindMountUnits(const std::string& what, const std::string& under,
                                        const std::string& where);

}  // namespace onehpc::disk

#endif  // ONEHPC_ROLES_DISK_MOUNT_UNIT_H_
