// Block devices through libblkid (no shelling out to blkid or lsblk).
#ifndef ONEHPC_ROLES_OS_BLOCK_DEVICES_H_
#define ONEHPC_ROLES_OS_BLOCK_DEVICES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace onehpc {

/// Everything libblkid finds on a device, from one low-level probe with superblocks and
/// partition tables enabled.
struct DeviceProbe {
  std::string device;        ///< /dev/... path
  std::uint64_t size = 0;    ///< bytes
  bool ambivalent = false;   ///< more than one filesystem signature (never "blank")
  std::string fs_type;       ///< TYPE: ext4, xfs, vfat, swap, crypto_LUKS, LVM2_member, ...
  std::string fs_usage;      ///< USAGE: filesystem, raid, crypto, other
  std::string label;
  std::string uuid;
  std::string pt_type;       ///< PTTYPE: dos, gpt, or "" when no partition table
  /// Human-readable description of every signature found ("ext4 label=x", "gpt", ...).
  std::vector<std::string> signatures;
  /// True when libblkid found nothing at all: no superblock, no partition table (primary or
  /// backup GPT), no other signature, and not ambivalent.
  bool blank() const { return !ambivalent && signatures.empty(); }
};

class BlockDevices {
 public:
  virtual ~BlockDevices() = default;
  /// Whole disks from /sys/block (not partitions, not loop/ram/rom/zram devices unless
  /// include_loop), as /dev paths, sorted.
  virtual Result<std::vector<std::string>> ListDisks(bool include_loop) = 0;
  virtual Result<DeviceProbe> Probe(const std::string& device) = 0;
  /// The device holding a filesystem with this label (libblkid cache evaluation), or
  /// kNotFound.
  virtual Result<std::string> FindByLabel(const std::string& label) = 0;
};

class BlkidBlockDevices : public BlockDevices {
 public:
  Result<std::vector<std::string>> ListDisks(bool include_loop) override;
  Result<DeviceProbe> Probe(const std::string& device) override;
  Result<std::string> FindByLabel(const std::string& label) override;
};

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OS_BLOCK_DEVICES_H_
