#include "roles/root_space.h"

#include <fmt/format.h>

#include <sstream>

#include "common/log.h"
#include "roles/role.h"

namespace onehpc {

std::optional<RootSpace> ParseRootSpace(const std::string& stat_output) {
  std::istringstream in(stat_output);
  long long block = 0, blocks = 0, avail = 0, inodes = 0, free_inodes = 0;
  std::string rest;
  if (!(in >> block >> blocks >> avail >> inodes >> free_inodes) || (in >> rest) || block <= 0 ||
      blocks <= 0 || avail < 0 || inodes < 0 || free_inodes < 0) {
    return std::nullopt;
  }
  constexpr long long kMiB = 1024 * 1024;
  return RootSpace{blocks * block / kMiB, avail * block / kMiB, inodes, free_inodes};
}

Status CheckRootSpace(RoleEnv& env) {
  Command c;
  // Block size, blocks, blocks available to unprivileged users, inodes, free inodes.
  c.argv = {"stat", "-f", "-c", "%S %b %a %c %d", env.files.HostPath("/")};
  c.timeout = Duration(10000);
  auto r = env.runner.Run(c);
  std::optional<RootSpace> space;
  if (r && r->ok()) space = ParseRootSpace(r->out);
  if (!space) {
    log::Warn("the room on the root file system is unknown ({}); configuring anyway",
              r ? (r->ok() ? "'" + r->out + "'" : ProcessText(*r)) : r.error().message);
    return Ok();
  }
  const bool few_inodes = space->total_inodes > 0 && space->free_inodes < kMinRootFreeInodes;
  if (space->avail_mib < kMinRootFreeMib || few_inodes) {
    return Fail(
        ErrorKind::kIo,
        fmt::format("the root file system is full: {} MiB of {} MiB and {} inodes are free "
                    "(expected at least {} MiB and {} inodes). Nothing was changed: Slurm's "
                    "state, MariaDB and the homes on the root disk would break. Give the VM a "
                    "larger disk (it grows at boot) or free space, then reconfigure",
                    space->avail_mib, space->total_mib, space->free_inodes, kMinRootFreeMib,
                    kMinRootFreeInodes));
  }
  log::Info("root file system: {} MiB of {} MiB free, {} inodes free", space->avail_mib,
            space->total_mib, space->free_inodes);
  return Ok();
}

}  // namespace onehpc
