// The Open OnDemand storage role: the users' homes (on the ood-home disk when one is
// attached), the Slurm controller state (on the same disk, next to the homes) and the
// software tree, served over NFS to the portal and the compute network, and the CernVM-FS
// proxy (Squid). See roles/disk/home_disk.h, roles/disk/state_mount.h, roles/nfs/exports.h
// and roles/squid/cvmfs_proxy.h.
#ifndef ONEHPC_ROLES_STORAGE_H_
#define ONEHPC_ROLES_STORAGE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "context/settings.h"
#include "roles/disk/home_mount.h"
#include "roles/disk/state_mount.h"
#include "roles/names.h"
#include "roles/role.h"

namespace onehpc {

/// What tests replace (the home disk's seams, disk::HomeMountOptions, and exportfs); the
/// defaults are the real machine.
struct StorageOptions : disk::HomeMountOptions {
  /// Run exportfs even when the files are under a --root (tests with a fake runner);
  /// otherwise exportfs runs only on the real root, as it acts on the running system.
  bool exportfs_under_root = false;
  disk::StateMountOptions state;
};

/// Role "storage" of service "Open OnDemand".
std::unique_ptr<Role> MakeStorageRole();
std::unique_ptr<Role> MakeStorageRole(StorageOptions options);

/// The storage role's settings (ONEAPP_HOME_NFS_ENABLED, the software cache's).
std::vector<SettingSpec> StorageSettings();

}  // namespace onehpc

#endif  // ONEHPC_ROLES_STORAGE_H_
