// The Open OnDemand portal role: the homes and the Slurm state from NFS (the storage VM or
// the site's server), the local users, slurmctld with its state and munge key on the state
// export, accounting (MariaDB + slurmdbd, dumped to the export, restored by a replaced
// portal), the node reconciler, and Open OnDemand's configuration files.
//
// On the state export (mounted at kPortalStateDir):
//   state/          slurmctld's StateSaveLocation (slurm, 0700): the queue and the nodes
//   munge.key       the cluster's key (root, 0400): created once, reused by a new portal
//   accounting/     dumps of slurm_acct_db (root, 0700), one-hpc-accounting-dump.timer
#ifndef ONEHPC_ROLES_PORTAL_H_
#define ONEHPC_ROLES_PORTAL_H_

#include <memory>
#include <string>

#include "roles/role.h"

namespace onehpc {

inline constexpr char kPortalStateDir[] = "/var/lib/one-hpc/portal-state";
inline constexpr char kPortalStateExport[] = "/export/slurm";
inline constexpr char kSoftwareDir[] = "/opt/software";
inline constexpr char kSoftwareExport[] = "/export/software";
inline constexpr char kHomesDir[] = "/home";
inline constexpr char kAccountingDumpTimer[] = "one-hpc-accounting-dump.timer";
inline constexpr char kPortalDefaultHostname[] = "ood-portal";
inline constexpr char kOodClusterName[] = "ood";

/// Role "portal" of service "Open OnDemand".
std::unique_ptr<Role> MakePortalRole();

/// The compute address of an Open OnDemand VM: the last NIC of the context (NIC 0 is the
/// management network, NIC 1 the compute network; with one NIC it is that one).
Result<std::string> ComputeAddress(const ContextVars& vars);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_PORTAL_H_
