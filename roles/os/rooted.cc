#include "roles/os/rooted.h"

#include "common/log.h"

namespace onehpc {
namespace {

std::string Trimmed(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

bool UnderRoot(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

Error Refused(const std::string& what, const std::string& root) {
  return Error{ErrorKind::kInvalidInput, what + " would act on this machine, not on --root " +
                                             root + ": refused (run it on the booted VM)"};
}

}  // namespace

bool IsOtherRoot(const std::string& root) { return !root.empty() && Trimmed(root) != "/"; }

bool CommandNamesRoot(const std::vector<std::string>& argv, const std::string& root) {
  const std::string r = Trimmed(root);
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (UnderRoot(a, r)) return true;
    auto eq = a.find('=');
    if (a.rfind("-", 0) == 0 && eq != std::string::npos && UnderRoot(a.substr(eq + 1), r)) {
      return true;
    }
  }
  return false;
}

RootedProcessRunner::RootedProcessRunner(ProcessRunner& inner, std::string root)
    : inner_(inner), root_(Trimmed(std::move(root))) {}

Result<ProcessResult> RootedProcessRunner::Run(const Command& command) {
  // A program of the tree itself (its path under DIR: a stand-in such as a test's
  // nvidia-smi) is DIR's, as is any program an argument points at DIR.
  const bool own_program = !command.argv.empty() && UnderRoot(command.argv[0], root_);
  if (command.argv.empty() || (!own_program && !CommandNamesRoot(command.argv, root_))) {
    // Only the program's name: its arguments may carry secrets.
    return Fail(Refused(
        "running " + (command.argv.empty() ? std::string("nothing") : "`" + command.argv[0] + "`"),
        root_));
  }
  return inner_.Run(command);
}

RootedBlockDevices::RootedBlockDevices(std::string root) : root_(Trimmed(std::move(root))) {}

Result<std::vector<std::string>> RootedBlockDevices::ListDisks(bool) {
  log::Info("under --root {}: no block device is looked at (they are this machine's)", root_);
  return std::vector<std::string>{};
}

Result<DeviceProbe> RootedBlockDevices::Probe(const std::string& device) {
  return Fail(Refused("probing " + device, root_));
}

Result<std::string> RootedBlockDevices::FindByLabel(const std::string& label) {
  return Fail(ErrorKind::kNotFound, "under --root " + root_ + " no filesystem labelled " + label +
                                        " is looked for (the disks are this machine's)");
}

RootedMounts::RootedMounts(Mounts& inner, std::string root)
    : inner_(inner), root_(Trimmed(std::move(root))) {}

Result<std::optional<MountEntry>> RootedMounts::FindByTarget(const std::string& target) {
  return inner_.FindByTarget(target);
}

Result<std::vector<MountEntry>> RootedMounts::FindBySource(const std::string& source) {
  return inner_.FindBySource(source);
}

Status RootedMounts::Mount(const MountEntry& entry) {
  return Fail(Refused("mounting " + entry.source + " on " + entry.target, root_));
}

Status RootedMounts::Unmount(const std::string& target) {
  return Fail(Refused("unmounting " + target, root_));
}

}  // namespace onehpc
