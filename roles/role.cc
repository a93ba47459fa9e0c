#include "roles/role.h"

namespace onehpc {
Status Role::Follow(RoleEnv&) {
  return Fail(ErrorKind::kInvalidInput,
              "role " + Name() + " has nothing to follow (only the workers do)");
}

Status Role::RotateMungeKey(RoleEnv&) {
  return Fail(ErrorKind::kInvalidInput,
              "role " + Name() +
                  " holds no munge key of its own: rotate it on the controller (OneSlurm) or "
                  "the portal (Open OnDemand)");
}

}  // namespace onehpc
