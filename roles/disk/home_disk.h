// The ood-home data disk of the Open OnDemand storage role: which disk holds the homes, and
// the safe way to get it mounted. The decision is made only from what is on the disks
// (libblkid, libmount, an O_EXCL open), never from a stamp file: a persistent disk outlives
// the VM that formatted it.
//
// Decision:
//   1. A filesystem labelled ood-home anywhere (whole disk or partition) is reused as it is.
//   2. Otherwise every candidate whole disk (not the root filesystem's disk, not the context
//      CD, nor an iso9660 filesystem labelled CONTEXT attached as a disk) is classified. Any
//      candidate that is not positively blank (signature, partition table incl. a GPT backup
//      header, non-zero head/tail, ambivalent probe, mounted, held) stops the role with kUnsafe
//      naming the device and its content: we never guess which of the attached disks may be
//      formatted.
//   3. All candidates blank: with OpenNebula's disk list (OneGate), only a persistent image
//      may be formatted: the one named ood-home, else the only persistent one; a volatile
//      disk (deleted with the VM) only with ONEAPP_HOME_DISK_VOLATILE=YES; none or several
//      eligible → kUnsafe saying what to do. Without that list: the first by device name
//      (logged).
//   4. No candidate: the homes stay on the root disk.
#ifndef ONEHPC_ROLES_DISK_HOME_DISK_H_
#define ONEHPC_ROLES_DISK_HOME_DISK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "roles/names.h"
#include "roles/os/block_devices.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"
#include "roles/plan.h"

namespace onehpc::disk {

inline constexpr char kHomeLabel[] = "ood-home";

/// Ok when `device` can be opened with O_EXCL (nothing mounts, maps or swaps on it); else
/// kUnsafe saying why.
using ExclusiveCheck = std::function<Status(const std::string& device)>;
/// The real check: open(O_RDONLY | O_EXCL | O_CLOEXEC), closed at once.
Status OpenExclusive(const std::string& device);

/// The device holding a filesystem with `label`, nullopt if none (kUnsafe if several).
using LabelFinder = std::function<Result<std::optional<std::string>>(const std::string& label)>;
/// BlockDevices::FindByLabel with kNotFound turned into nullopt.
LabelFinder FindLabelWith(BlockDevices& devices);

/// The whole disk under the root filesystem ("/dev/vda"): from the device number of / through
/// /sys/dev/block (exact even when mountinfo says /dev/root), else from the source of / in
/// mountinfo; "" when it cannot be told (e.g. / on overlayfs in a container).
/// `sys_class_block` is /sys/class/block (tests).
std::string RootDisk(Mounts& mounts, const std::string& sys_class_block = "/sys/class/block");

enum class HomeSource {
  kRootDisk,       ///< no data disk: /export/home is a directory on the root disk
  kReuseLabelled,  ///< an ood-home filesystem exists: mount it as it is
  kFormatBlank,    ///< a positively blank disk: mkfs.ext4 -F -L ood-home, then mount
};
const char* ToString(HomeSource source);

/// What was found on one candidate disk and what that means.
struct DiskFinding {
  std::string device;
  std::string content;  ///< "blank", or what is on it ("ext4 label=data", "gpt partition table")
  bool blank = false;
};

struct HomeDiskDecision {
  HomeSource source = HomeSource::kRootDisk;
  std::string device;                 ///< the ood-home filesystem's device or the blank disk
  std::string fs_type;                ///< reuse: the probed type; format: "ext4"
  std::string uuid;                   ///< reuse: the probed UUID
  std::vector<DiskFinding> findings;  ///< every candidate, in device order
  std::string why;                    ///< one line for the plan and the log
  /// kFormatBlank of a disk this VM began to format and did not finish: not blank any more,
  /// but its last kMkfsMarkerBytes bytes are this marker (home_mount.cc).
  std::string resume_marker;
};

/// The filesystems a disk labelled for the homes may hold to be mounted as it is (one-hpc makes
/// ext4; a site may have prepared xfs or btrfs): owners, modes, no foreign semantics.
inline constexpr const char* kHomeFilesystems[] = {"ext4", "xfs", "btrfs"};
/// Size of the marker written at a disk's end right before mkfs.
inline constexpr std::size_t kMkfsMarkerBytes = 512;
/// The home filesystem leaves this much of the disk's end unformatted, where the marker lives.
inline constexpr std::uint64_t kMkfsTailReserve = 1024 * 1024;

/// What OpenNebula says one disk is (TEMPLATE.DISK of this VM in the extended service
/// document), by the guest device found to be that disk (disk_identity.h).
struct DiskFacts {
  std::string target;
  std::string image;        ///< the image's name; empty for a volatile disk
  bool persistent = false;  ///< PERSISTENT=YES: outlives the VM
  std::string type;         ///< TYPE ("fs"/"swap" for volatile disks)
  /// How the guest device was found to be this disk ("SCSI target 1", "its size, 2048 MiB");
  /// empty: by TARGET's name.
  std::string found_by = {};
  /// "persistent image 'ood-home' (TARGET vdc)", "volatile disk (TYPE=fs, TARGET vdb, ...)";
  /// with ", found by <found_by>" when found_by is set.
  std::string Describe() const;
};

struct HomeDiskInputs {
  std::vector<std::string> candidates;  ///< whole disks, already without root disk and CD
  /// OpenNebula's disk list by device path; nullopt when OneGate is missing or lists no disk
  /// (then the choice is made from the disks' content alone, as before).
  std::optional<std::map<std::string, DiskFacts>> facts;
  /// ONEAPP_HOME_DISK_VOLATILE: a volatile disk (or a non-persistent image) may hold the homes.
  bool allow_volatile = false;
  std::string label = kHomeLabel;
  /// Host path of the home mount point (root prefix applied), to recognise "already ours".
  std::string mount_point = ood::kHomeExport;
  /// Host paths where this VM bind-mounts a directory of the home filesystem (the Slurm
  /// state on /export/slurm): a mount of the labelled filesystem there is not "elsewhere".
  std::vector<std::string> own_bind_targets;
};

/// Probes and decides. Read-only: safe in `one-hpc plan`. kUnsafe (naming the device and its
/// content) when a candidate holds anything, is mounted or held, or when the labelled
/// filesystem is mounted somewhere else.
Result<HomeDiskDecision> DecideHomeDisk(const HomeDiskInputs& inputs, BlockDevices& devices,
                                        Mounts& mounts, const LabelFinder& find_label,
                                        const ExclusiveCheck& exclusive);

/// The tools and waits used to format and mount.
struct HomeDiskTools {
  ProcessRunner& runner;
  BlockDevices& devices;
  Mounts& mounts;
  Clock& clock;
  ExclusiveCheck exclusive;
  Duration mkfs_timeout{600000};  ///< mkfs.ext4 on a large datablock takes a while
  Duration udev_timeout{30000};   ///< bound for udevadm settle and for the re-probe loop
};

/// Formats the blank disk of `decision` (kFormatBlank only): re-probes it right before (must
/// still be blank, or for a resumed format still end with `decision.resume_marker`), checks
/// O_EXCL, writes `marker` (kMkfsMarkerBytes, "" = none) as the disk's last bytes, runs
/// `mkfs.ext4 -F -q -L <label> -E nodiscard -b 4096 <dev> <blocks>` with the filesystem
/// ending kMkfsTailReserve before the disk (we did the check; without a tty mkfs.ext4
/// overwrites silently anyway; nodiscard and the reserve keep the marker), waits for udev
/// (bounded) and re-probes until the label is visible. Returns the new filesystem's UUID.
Result<std::string> FormatBlankDisk(const HomeDiskDecision& decision, const std::string& label,
                                    HomeDiskTools& tools, const std::string& marker = "");

/// Mounts `device` (type `fs_type`) on `host_mount_point` unless it is already mounted there.
/// Something else mounted there → kUnsafe. Returns true when it mounted.
Result<bool> EnsureMounted(const std::string& device, const std::string& fs_type,
                           const std::string& host_mount_point, Mounts& mounts);

}  // namespace onehpc::disk

#endif  // ONEHPC_ROLES_DISK_HOME_DISK_H_
