// The NFS exports of the Open OnDemand storage role (/etc/exports.d/one-hpc.exports) and the
// refresher that keeps their clients current from OneGate's service document.
//
//   /export/home      portal IPs  rw,sync,no_subtree_check,no_root_squash,fsid=1[,mountpoint]
//                     each VM     rw,sync,no_subtree_check,root_squash,fsid=1[,mountpoint]
//   /export/slurm     portal IPs  rw,sync,no_subtree_check,no_root_squash,fsid=2[,mountpoint]
//                     (with the homes on the disk, the Slurm state is bind-mounted from it)
//   /export/software  each VM     rw,sync,no_subtree_check,root_squash,fsid=3
//
// "Each VM": the compute-network address of every VM of the service (the storage VM, the
// workers, the portals), one line per client, never the whole compute network: a VM on that
// network outside the service cannot mount the homes (NFS trusts the client's word for its
// uids, so an export is as wide as the addresses it names). A VM is a client from the moment
// the service document lists it (OpenNebula leases its address when it creates the VM) until
// it is DONE; one shown without a compute address keeps the addresses it had. An export with
// no client is left out (a line without one would export to the world).
//
// The management network is never granted; only the portal gets root and the Slurm state.
// When OneGate fails, the last good lists (saved in the state file) are kept: a OneGate
// hiccup never cuts the portal or a worker off its homes. The portal's list not for ever:
// after kLastGoodLimitSeconds of failures in a row it expires (the address of a portal that
// is gone may have been given to another VM meanwhile) and nobody has root on the exports
// until OneGate answers again. The clients' list does not expire: it grants what any user
// of the service has, and taking it away would stop every running job's I/O.
#ifndef ONEHPC_ROLES_NFS_EXPORTS_H_
#define ONEHPC_ROLES_NFS_EXPORTS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "context/context_file.h"
#include "context/onegate.h"
#include "roles/host/address.h"
#include "roles/names.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/plan.h"

namespace onehpc::nfs {

inline constexpr char kExportsFile[] = "/etc/exports.d/one-hpc.exports";
/// What configure decided (network, home export, disk) and the last good portal list.
inline constexpr char kStateFile[] = "/var/lib/one-hpc/storage-exports.json";
/// How long the last good portal list outlives OneGate's failures: longer than an upgrade of
/// the OpenNebula front-end, shorter than a weekend nobody watches.
inline constexpr std::int64_t kLastGoodLimitSeconds = 6 * 3600;
/// Why nothing is served in a container (logged and recorded in the plan).
inline constexpr char kContainerTransport[] =
    "in a container the NFS transport is stood in by bind mounts";

/// "10.1.0.0/24" from an address and a mask ("255.255.255.0" or "24"); nullopt if invalid.
std::optional<std::string> NetworkCidr(const std::string& ip, const std::string& mask);
/// True when `ip` lies inside `cidr`.
bool CidrContains(const std::string& cidr, const std::string& ip);

/// The compute network of this VM: the CIDR of its compute NIC (host::FindComputeNic) with
/// its ETHn_MASK (/24 when absent). kInvalidInput naming the variable when the mask is bad.
Result<std::string> ComputeNetwork(const host::ContextNic& nic);

/// A VM of the service that mounts the homes and the software without root: its id (to keep
/// its address while a document shows it without one) and its address on the compute network.
struct ExportClient {
  int vm_id = 0;
  std::string ip;
  bool operator==(const ExportClient&) const = default;
};

struct ExportsConfig {
  std::string compute_net;              ///< CIDR: the clients' addresses are taken inside it
  std::vector<std::string> portal_ips;  ///< no_root_squash clients, sorted, unique
  std::vector<ExportClient> clients;    ///< root_squash clients, sorted by address
  bool export_home = true;              ///< false with ONEAPP_HOME_NFS_ENABLED
  bool home_on_disk = false;            ///< adds `mountpoint` to the home and Slurm state exports
  /// Unix time of the first of the OneGate failures that kept portal_ips; 0 = the last read
  /// succeeded.
  std::int64_t onegate_failing_since = 0;
};

/// The exports file for `config` (stable text: same config, same bytes).
std::string RenderExports(const ExportsConfig& config);
std::string StateJson(const ExportsConfig& config);
Result<ExportsConfig> ParseStateJson(const std::string& text);

/// Every NIC address of the VMs of role `portal_role` that lies inside `compute_net`, sorted.
/// An empty role (portal not deployed yet) gives an empty list. Errors (the refresher then
/// keeps the last good list): no such role, or a node without VM data (not an extended
/// document).
Result<std::vector<std::string>> PortalAddresses(const ServiceInfo& service,
                                                 const std::string& compute_net,
                                                 const std::string& portal_role = ood::kPortalRole);

/// The compute-network addresses of every VM of the service outside `portal_role` (the
/// portals are in PortalAddresses), sorted by address. A VM that is DONE or FAILED, or gone
/// from the document, is dropped (its lease may be another VM's now); one powered off or
/// stopped keeps its lease and stays; one shown without a compute address keeps its entries
/// of `previous`. Error (the refresher then keeps the last good list): a node without VM data
/// (not an extended document).
Result<std::vector<ExportClient>> ServiceClients(const ServiceInfo& service,
                                                 const std::string& compute_net,
                                                 const std::vector<ExportClient>& previous,
                                                 const std::string& portal_role = ood::kPortalRole);

/// Writes the state file and the exports file when they differ (atomically, through the
/// plan), and runs `exportfs -ra` when the exports changed (or `force_exportfs`). `live` =
/// false (files under a --root that is not the running system) records a keep instead of
/// running exportfs, which always acts on the running system; so does a container
/// (host::InContainer), where there is no kernel NFS server. Returns whether the exports file
/// changed.
Result<bool> EnsureExports(Plan& plan, Files& files, ProcessRunner& runner,
                           const ExportsConfig& config, bool force_exportfs = false,
                           bool live = true);

struct RefreshOutcome {
  bool changed = false;
  bool onegate_failed = false;  ///< the last good portal list was kept (or expired)
  bool expired = false;         ///< OneGate failed for kLastGoodLimitSeconds: the list dropped
  std::vector<std::string> old_portals;
  std::vector<std::string> new_portals;
  std::vector<ExportClient> old_clients;
  std::vector<ExportClient> new_clients;
  std::string onegate_error;
};

/// Unix time now (the wall clock: the failures are counted across runs and reboots).
std::int64_t UnixNow();

/// One refresher pass: reads the state file, asks `get_service` for the extended service
/// document, and rewrites the exports when the portal list or the clients changed (logging
/// old and new lists). On a OneGate failure the saved lists are kept (the portal's until it
/// expires), and the exports are only repaired if the file differs from them. kNotFound when the
/// state file is missing (not a storage VM). `now`: UnixNow().
Result<RefreshOutcome> RefreshExports(Files& files, ProcessRunner& runner,
                                      const std::function<Result<ServiceInfo>()>& get_service,
                                      bool live = true, std::int64_t now = UnixNow());

/// The portal's compute address(es) and the clients from OneGate's service document into
/// `config`; when OneGate is missing or fails, the last good lists saved in kStateFile (a
/// OneGate hiccup never cuts the portal or a worker off its homes), the portal's with the time
/// of the first failure, and none for the portal once that is kLastGoodLimitSeconds ago.
void ExportClientsOrLastGood(ExportsConfig& config, const Files& files, OneGateClient* onegate,
                             std::int64_t now = UnixNow());

}  // namespace onehpc::nfs

#endif  // ONEHPC_ROLES_NFS_EXPORTS_H_
