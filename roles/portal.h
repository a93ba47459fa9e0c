// The Open OnDemand portal role: the homes and the Slurm state from NFS (the storage VM or
// the site's server), the local users, slurmctld with its state and munge key on the state
// export, accounting (MariaDB + slurmdbd, dumped to the export, restored by a replaced
// portal), the node reconciler, and Open OnDemand's configuration files.
//
// On the state export (mounted at ood::kPortalStateDir):
//   state/          slurmctld's StateSaveLocation (slurm, 0700): the queue and the nodes
//   munge.key       the cluster's key (root, 0400): created once, reused by a new portal
//   accounting/     dumps of slurm_acct_db (root, 0700), one-hpc-accounting-dump.timer
#ifndef ONEHPC_ROLES_PORTAL_H_
#define ONEHPC_ROLES_PORTAL_H_

#include <memory>
#include <string>

#include "roles/names.h"
#include "roles/role.h"

namespace onehpc {

inline constexpr char kPortalDefaultHostname[] = "ood-portal";
inline constexpr char kOodClusterName[] = "ood";

/// Role "portal" of service "Open OnDemand".
std::unique_ptr<Role> MakePortalRole();

}  // namespace onehpc

#endif  // ONEHPC_ROLES_PORTAL_H_
