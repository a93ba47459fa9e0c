// Mounts through libmount (no shelling out to mount/findmnt).
#ifndef ONEHPC_ROLES_OS_MOUNTS_H_
#define ONEHPC_ROLES_OS_MOUNTS_H_

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace onehpc {

struct MountEntry {
  std::string source;  ///< device or host:/export
  std::string target;
  std::string fs_type;
  std::string options;
  /// The directory of the filesystem that is mounted: "/" for a whole filesystem, the
  /// subdirectory for a bind mount ("/.one-hpc-state/slurm"); empty when unknown.
  std::string root{};
};

class Mounts {
 public:
  virtual ~Mounts() = default;
  /// The mount at exactly `target` in /proc/self/mountinfo, if any.
  virtual Result<std::optional<MountEntry>> FindByTarget(const std::string& target) = 0;
  /// Every mount of `source` (a device path; symlinks and /dev/disk/by-* are resolved).
  virtual Result<std::vector<MountEntry>> FindBySource(const std::string& source) = 0;
  /// Mounts as given (fs_type and options may be empty). Does not look at what is already
  /// mounted on the target: check with FindByTarget first (mounts would stack).
  virtual Status Mount(const MountEntry& entry) = 0;
  /// Unmounts the top mount at `target`; nothing mounted there is success.
  virtual Status Unmount(const std::string& target) = 0;
};

class LibmountMounts : public Mounts {
 public:
  /// `mountinfo` = "" reads /proc/self/mountinfo; a path reads that file (tests).
  explicit LibmountMounts(std::string mountinfo = "");
  Result<std::optional<MountEntry>> FindByTarget(const std::string& target) override;
  Result<std::vector<MountEntry>> FindBySource(const std::string& source) override;
  Status Mount(const MountEntry& entry) override;
  Status Unmount(const std::string& target) override;

 private:
  std::string mountinfo_;
};

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OS_MOUNTS_H_
