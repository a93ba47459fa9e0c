// Proof that a dynamic node really joined: slurmd exits 0 and keeps running even when
// slurmctld rejects its registration because the node table is full, so the only
// evidence is the node record itself.
#ifndef ONEHPC_ROLES_SLURM_REGISTRATION_H_
#define ONEHPC_ROLES_SLURM_REGISTRATION_H_

#include <string>

#include "common/clock.h"
#include "common/error.h"
#include "roles/names.h"
#include "roles/os/files.h"
#include "roles/slurm/nodes.h"
#include "roles/slurm/slurm_client.h"

namespace onehpc::slurm {

struct RegistrationCheck {
  std::string node_name;
  std::string controller_addr;  ///< for the error message
  /// The configless config slurmd fetched (a path under `files`); its existence tells
  /// "slurmd reached the controller" apart from "the controller rejected the node".
  std::string fetched_conf = kConfiglessSlurmConf;
  Duration timeout{300000};
};

/// Polls `scontrol -o show node NAME` (through `client`, with backoff) until the node is
/// registered or `timeout` passes. While it is not, `sinfo` counts slurmctld's nodes: a table
/// holding as many as the fetched configuration accepts (its MaxNodeCount less the placeholder
/// records, see DynamicNodeRoom; the node still absent when looked at again) fails at once,
/// "Slurm node N was refused: slurmctld on C holds K nodes, as many as it accepts (M, ...":
/// slurmctld drops such a node silently and slurmd never tries again. On timeout: "Slurm node N
/// did not register with C within Ss: the node table may be full (it accepts M nodes, ...)"
/// when slurmd had fetched the configuration (M read from it), else "slurmd did not fetch its
/// configuration from C:6817 within Ss: ...".
Result<SlurmNode> WaitForRegistration(const Files& files, SlurmClient& client, Clock& clock,
                                      const RegistrationCheck& check);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_REGISTRATION_H_
