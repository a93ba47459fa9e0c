// The adapters of a command run with `--root DIR` (other than "/"): everything that would act
// on the machine the command runs on instead of on DIR is refused, so that an image build or
// a test under a temporary root never formats this machine's disks, mounts on it, renames it
// or signals its daemons. Files are already under DIR (Files) and systemctl already works
// offline (SystemctlSystemd); these cover the rest:
//  - a program runs only when it is DIR's own (its path is under DIR) or one of its arguments
//    names DIR ("--root=DIR", "--prefix DIR", a path under DIR): `hostname x`, `exportfs -r`
//    or `scontrol reconfigure` are refused;
//  - no block device is listed, probed or found by label (they are this machine's);
//  - mount tables may be read (read-only), nothing is mounted or unmounted.
#ifndef ONEHPC_ROLES_OS_ROOTED_H_
#define ONEHPC_ROLES_OS_ROOTED_H_

#include <string>
#include <vector>

#include "roles/os/block_devices.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"

namespace onehpc {

/// True when `root` is a prefix other than the machine's own "/" (or "").
bool IsOtherRoot(const std::string& root);

/// True when one argument of `argv` (after argv[0]) is `root`, lies under it, or is an
/// option whose value ("--opt=VALUE") does.
bool CommandNamesRoot(const std::vector<std::string>& argv, const std::string& root);

class RootedProcessRunner : public ProcessRunner {
 public:
  RootedProcessRunner(ProcessRunner& inner, std::string root);
  /// kInvalidInput, naming the program and the root, unless the program lies under the root
  /// or CommandNamesRoot.
  Result<ProcessResult> Run(const Command& command) override;

 private:
  ProcessRunner& inner_;
  std::string root_;
};

class RootedBlockDevices : public BlockDevices {
 public:
  explicit RootedBlockDevices(std::string root);
  /// No disk: the ones in /sys/block belong to this machine.
  Result<std::vector<std::string>> ListDisks(bool include_loop) override;
  /// kInvalidInput.
  Result<DeviceProbe> Probe(const std::string& device) override;
  /// kNotFound: no filesystem of this machine is offered to the root.
  Result<std::string> FindByLabel(const std::string& label) override;

 private:
  std::string root_;
};

class RootedMounts : public Mounts {
 public:
  RootedMounts(Mounts& inner, std::string root);
  Result<std::optional<MountEntry>> FindByTarget(const std::string& target) override;
  Result<std::vector<MountEntry>> FindBySource(const std::string& source) override;
  /// kInvalidInput.
  Status Mount(const MountEntry& entry) override;
  /// kInvalidInput.
  Status Unmount(const std::string& target) override;

 private:
  Mounts& inner_;
  std::string root_;
};

}  // namespace onehpc

#endif  // ONEHPC_ROLES_OS_ROOTED_H_
