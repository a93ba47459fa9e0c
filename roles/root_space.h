// The root file system's room, checked before a configure changes anything: a root disk
// without room breaks what one-hpc runs on it (slurmctld's state save, MariaDB, munge's socket,
// the homes kept on the root disk when no datablock is attached) in ways that show up later
// and elsewhere. A configure refuses it at once, saying how much room there is and what to do.
#ifndef ONEHPC_ROLES_ROOT_SPACE_H_
#define ONEHPC_ROLES_ROOT_SPACE_H_

#include <optional>
#include <string>

#include "common/error.h"

namespace onehpc {

struct RoleEnv;

/// Less free room than this for unprivileged writers (slurm, mysql: `stat -f`'s available
/// blocks) is refused.
inline constexpr long long kMinRootFreeMib = 512;
/// Fewer free inodes than this is refused (a root full of small files).
inline constexpr long long kMinRootFreeInodes = 10000;

struct RootSpace {
  long long total_mib = 0;
  long long avail_mib = 0;
  /// 0 for a file system without a fixed count of inodes (btrfs): no inode floor then.
  long long total_inodes = 0;
  long long free_inodes = 0;
};

/// `stat -f -c "%S %b %a %c %d"` output -> RootSpace; nullopt when it is not five numbers.
std::optional<RootSpace> ParseRootSpace(const std::string& stat_output);

/// kIo naming the room there is when the root file system has less than kMinRootFreeMib
/// available or fewer than kMinRootFreeInodes free inodes. Ok (with a warning) when the room
/// cannot be read: an unknown is not a full disk. In a plan too (it changes nothing).
Status CheckRootSpace(RoleEnv& env);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_ROOT_SPACE_H_
