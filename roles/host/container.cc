#include "roles/host/container.h"

#include "roles/names.h"

namespace onehpc::host {

bool InContainer(const Files& files) { return files.Exists(kContainerMarker); }

}  // namespace onehpc::host
