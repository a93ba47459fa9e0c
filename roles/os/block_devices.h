// Block devices through libblkid (no shelling out to blkid or lsblk).
#ifndef ONEHPC_ROLES_OS_BLOCK_DEVICES_H_
#define ONEHPC_ROLES_OS_BLOCK_DEVICES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace onehpc {

/// Everything libblkid finds on a device, from one low-level probe with superblocks and
/// partition tables enabled.
struct DeviceProbe {
  std::string device;       ///< /dev/... path
  std::uint64_t size = 0;   ///< bytes
  bool ambivalent = false;  ///< more than one filesystem signature (never "blank")
  std::string fs_type;      ///< TYPE: ext4, xfs, vfat, swap, crypto_LUKS, LVM2_member, ...
  std::string fs_usage;     ///< USAGE: filesystem, raid, crypto, other
  std::string label;
  std::string uuid;
  std::string pt_type;  ///< PTTYPE: dos, gpt, or "" when no partition table
  /// Human-readable description of every signature found ("ext4 label=x", "gpt", ...).
  std::vector<std::string> signatures;
  /// True when libblkid found nothing at all: no superblock, no partition table (primary or
  /// backup GPT), no other signature, and not ambivalent (BlkidBlockDevices also requires
  /// the first and last MiB to be zeros).
  bool blank() const { return !ambivalent && signatures.empty(); }
};

/// What the hypervisor set of a whole disk that the guest can read back whatever name it gave
/// the disk (sysfs): its size, and on a SCSI bus (virtio-scsi, not ATA or USB) its address.
struct DiskIdentity {
  std::string device;      ///< /dev/... path
  std::uint64_t size = 0;  ///< bytes
  int scsi_target = -1;    ///< T of the SCSI address H:C:T:L when C and L are 0; -1 otherwise
};

class BlockDevices {
 public:
  virtual ~BlockDevices() = default;
  /// Whole disks from /sys/block (not partitions, not loop/ram/rom/zram devices unless
  /// include_loop), as /dev paths, sorted.
  virtual Result<std::vector<std::string>> ListDisks(bool include_loop) = 0;
  virtual Result<DeviceProbe> Probe(const std::string& device) = 0;
  /// The device holding a filesystem with this label (found by probing, not from the
  /// possibly stale libblkid cache), or kNotFound.
  virtual Result<std::string> FindByLabel(const std::string& label) = 0;
  /// OpenNebula's context CD (its filesystem labelled `label`). The base class is FindByLabel;
  /// BlkidBlockDevices probes the CD-ROM drives alone first.
  virtual Result<std::string> FindContextCd(const std::string& label);
  /// The last `bytes` bytes of the device (a marker this program wrote there). The base
  /// class refuses (kInvalidInput): only adapters that really reach the disk implement it.
  virtual Result<std::string> ReadTail(const std::string& device, std::size_t bytes);
  /// Writes `data` as the device's last bytes (opened O_EXCL: nothing may hold it), then
  /// fsyncs. The base class refuses (kInvalidInput).
  virtual Status WriteTail(const std::string& device, const std::string& data);
  /// The size and the bus address of a whole disk. The base class refuses (kInvalidInput).
  virtual Result<DiskIdentity> Identify(const std::string& device);
};

/// Probe() also reads the device itself: a GPT backup header ("EFI PART") in the last
/// sector (512 or 4096 bytes) is listed even when libblkid does not recognise it (no
/// protective MBR, bad CRC); and when nothing else is found, non-zero bytes in the first or
/// last MiB are listed as "unknown data" (a headerless encrypted volume or a wiped-but-used
/// disk is not blank).
class BlkidBlockDevices : public BlockDevices {
 public:
  /// `find_on_loop`: FindByLabel also probes loop devices (tests). `sys_block` is the
  /// directory listing whole disks (tests may point it at a fake tree).
  explicit BlkidBlockDevices(bool find_on_loop = false, std::string sys_block = "/sys/block");
  Result<std::vector<std::string>> ListDisks(bool include_loop) override;
  Result<DeviceProbe> Probe(const std::string& device) override;
  /// Probes every disk (and each of its partitions) and returns the one device whose
  /// filesystem has exactly this label; kNotFound if none, kUnsafe if several.
  Result<std::string> FindByLabel(const std::string& label) override;
  /// The CD-ROM drives (OpenNebula attaches the context CD as one) alone, then, when none
  /// holds the label, every device as FindByLabel: the commands that read the context every
  /// minute probe one drive, and a disk whose I/O hangs cannot stall them (review L8).
  Result<std::string> FindContextCd(const std::string& label) override;
  /// The CD-ROM drives of <sys_block> (sr*) as /dev paths, sorted.
  std::vector<std::string> CdromDrives() const;
  Result<std::string> ReadTail(const std::string& device, std::size_t bytes) override;
  Status WriteTail(const std::string& device, const std::string& data) override;
  /// From <sys_block>/<name>/size and the link <sys_block>/<name>/device (its last component
  /// is the SCSI address "2:0:1:0" on a SCSI bus; ATA and USB disks are given no target: their
  /// address is the port's, not one OpenNebula set).
  Result<DiskIdentity> Identify(const std::string& device) override;

 private:
  bool find_on_loop_;
  std::string sys_block_;
};

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OS_BLOCK_DEVICES_H_
