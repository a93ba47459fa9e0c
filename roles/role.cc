#include "roles/role.h"

namespace onehpc {
Status Role::Follow(RoleEnv&) {
  return Fail(ErrorKind::kInvalidInput,
              "role " + Name() + " has nothing to follow (only ood-worker does)");
}

}  // namespace onehpc
