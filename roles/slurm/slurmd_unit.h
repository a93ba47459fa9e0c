// The slurmd unit a worker runs as a dynamic node of a configless cluster.
#ifndef ONEHPC_ROLES_SLURM_SLURMD_UNIT_H_
#define ONEHPC_ROLES_SLURM_SLURMD_UNIT_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace onehpc::slurm {

/// Everything that goes into the slurmd unit of a dynamic node.
struct SlurmdUnitParams {
  std::string node_name;
  std::string controller_addr;
  int cpus = 1;
  long real_memory_mb = 1;
  /// The GRES the node registers with (slurm::NodeGres: "gpu:tesla_t4:2"), "" for none.
  std::string gres;
  std::string slurmd = "/usr/sbin/slurmd";
  /// Mount points jobs need (Open OnDemand: /home, /opt/software): RequiresMountsFor=, so
  /// that slurmd never starts without them and no job runs with its output lost.
  std::vector<std::string> requires_mounts;
};

/// `--conf` value: "CPUs=2 RealMemory=1800 Feature=one[ Gres=gpu[:type]:N]".
std::string SlurmdNodeConf(const SlurmdUnitParams& params);

/// A complete /etc/systemd/system/slurmd.service replacing the packaged one (whose
/// ConditionPathExists=/etc/slurm/slurm.conf would skip a configless worker).
std::string RenderSlurmdUnit(const SlurmdUnitParams& params);

/// The node name slurmd runs with (`-N NAME` of the unit's ExecStart=), as RenderSlurmdUnit
/// wrote it; nullopt when the text has no such line (not one-hpc's unit).
std::optional<std::string> SlurmdUnitNodeName(std::string_view unit_text);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_SLURMD_UNIT_H_
