// The storage role's home disk, end to end: the candidates (every whole disk but the root
// filesystem's), the decision (home_disk.h), the format of a blank disk, the mount on
// /export/home and the units that mount it at every boot before nfs-server.
#ifndef ONEHPC_ROLES_DISK_HOME_MOUNT_H_
#define ONEHPC_ROLES_DISK_HOME_MOUNT_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "roles/disk/home_disk.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::disk {

/// What tests replace; the defaults are the real machine.
struct HomeMountOptions {
  ExclusiveCheck exclusive = OpenExclusive;
  /// Finds the ood-home filesystem; empty = env.block_devices.FindByLabel.
  LabelFinder find_label;
  /// Candidate whole disks; empty = env.block_devices.ListDisks minus the root disk.
  std::function<Result<std::vector<std::string>>(RoleEnv&)> candidates;
  std::string sys_class_block = "/sys/class/block";
  /// OpenNebula's disk list by device path; empty = this VM's TEMPLATE.DISK from the
  /// extended OneGate service document (nullopt when OneGate is missing or lists none).
  std::function<std::optional<std::map<std::string, DiskFacts>>(RoleEnv&, std::string* note)>
      disk_facts;
};

/// The setting that lets a volatile disk hold the homes.
inline constexpr char kHomeDiskVolatileSetting[] = "ONEAPP_HOME_DISK_VOLATILE";

/// Decides, formats (a positively blank disk only), mounts and persists the home disk.
/// Returns whether the homes are on a mounted data disk (false: on the root disk). Refuses
/// (kUnsafe), before anything is formatted or mounted, when
///  - this VM's homes were on an ood-home filesystem (export-home.mount) that is not attached
///    now, or an ood-home filesystem with another UUID is attached instead;
///  - /export/home on the root disk is not empty and a disk would be mounted over it (a disk
///    that appeared after homes were made on the root disk would hide them).
Result<bool> EnsureHomeDisk(RoleEnv& env, const HomeMountOptions& options);

}  // namespace onehpc::disk

#endif  // ONEHPC_ROLES_DISK_HOME_MOUNT_H_
