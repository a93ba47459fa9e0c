// The Open OnDemand service's Slurm state on the ood-home disk, next to the homes. What the
// portal keeps on the /export/slurm export (slurmctld's StateSaveLocation, the munge key, the
// accounting dumps, the uid register) lived on the storage VM's root disk: a storage VM
// replaced with the same datablock lost the queue, the key and every backup. Now:
//
//   <ood-home filesystem>/.one-hpc-state/        root 0700: no user of the homes export enters
//   <ood-home filesystem>/.one-hpc-state/slurm/  bind-mounted on /export/slurm (export-slurm.mount,
//                                                after export-home.mount, before nfs-server)
//
// The export path stays /export/slurm, so portals keep their mount. An existing /export/slurm
// on the root disk is copied once (nfs-server stopped, so that the portal's writes wait on
// its hard mount instead of landing half-way; `cp -a` into a temporary directory on the disk,
// then a rename), and the root-disk copy stays underneath the bind mount, unused. Once the
// disk has the state, the disk's copy is the state: the root disk's is never copied again.
#ifndef ONEHPC_ROLES_DISK_STATE_MOUNT_H_
#define ONEHPC_ROLES_DISK_STATE_MOUNT_H_

#include "common/clock.h"
#include "common/error.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::disk {

inline constexpr char kStateDirOnDisk[] = "/export/home/.one-hpc-state";
inline constexpr char kSlurmStateOnDisk[] = "/export/home/.one-hpc-state/slurm";
/// kSlurmStateOnDisk as the root of its bind mount in mountinfo.
inline constexpr char kSlurmStateRoot[] = "/.one-hpc-state/slurm";

struct StateMountOptions {
  Duration nfs_stop_timeout{120000};
  /// The dumps can be large; the whole configure has 20 minutes.
  Duration copy_timeout{600000};
};

/// Puts /export/slurm on the home disk (see above). Requires the ood-home filesystem mounted
/// on /export/home. Refuses (kUnsafe) when something else is mounted on /export/slurm.
Status EnsureSlurmStateOnHomeDisk(RoleEnv& env, const StateMountOptions& options = {});

}  // namespace onehpc::disk

#endif  // ONEHPC_ROLES_DISK_STATE_MOUNT_H_
