// systemd helpers shared by the Slurm roles (enable/start through the plan, never blocking on
// a job), and the slurmd unit a worker runs as a dynamic node.
#ifndef ONEHPC_ROLES_SLURM_UNITS_H_
#define ONEHPC_ROLES_SLURM_UNITS_H_

#include <string>

#include "common/error.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::slurm {

/// `systemctl enable UNIT` through the plan unless /etc/systemd/system/<wanted_by>.wants/UNIT
/// already exists.
Status EnsureUnitEnabled(RoleEnv& env, const std::string& unit, const std::string& wanted_by,
                         const std::string& why);

/// Starts UNIT (--no-block) when it is not active; restarts it (--no-block) when `restart`;
/// otherwise records a keep. Callers wait for the effect with their own health check.
Status EnsureUnitRunning(RoleEnv& env, const std::string& unit, bool restart,
                         const std::string& restart_why, const std::string& why);

/// Everything that goes into the slurmd unit of a dynamic node.
struct SlurmdUnitParams {
  std::string node_name;
  std::string controller_addr;
  int cpus = 1;
  long real_memory_mb = 1;
  int gpus = 0;
  std::string slurmd = "/usr/sbin/slurmd";
};

/// `--conf` value: "CPUs=2 RealMemory=1800 Feature=one[ Gres=gpu:N]".
std::string SlurmdNodeConf(const SlurmdUnitParams& params);

/// A complete /etc/systemd/system/slurmd.service replacing the packaged one (whose
/// ConditionPathExists=/etc/slurm/slurm.conf would skip a configless worker).
std::string RenderSlurmdUnit(const SlurmdUnitParams& params);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_UNITS_H_
