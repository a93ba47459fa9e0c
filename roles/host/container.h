// Is this system a container? Kernel NFS cannot be served there, and the block devices in
// view are the host's.
#ifndef ONEHPC_ROLES_HOST_CONTAINER_H_
#define ONEHPC_ROLES_HOST_CONTAINER_H_

#include "roles/os/files.h"

namespace onehpc::host {

/// True when host::kContainerMarker exists, read through `files` so that --root runs see the
/// tree's marker.
bool InContainer(const Files& files);

}  // namespace onehpc::host

#endif  // ONEHPC_ROLES_HOST_CONTAINER_H_
