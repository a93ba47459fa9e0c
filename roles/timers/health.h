// The workers' health check: slurmd runs it as HealthCheckProgram (slurm.conf, every 60 s, in
// any node state) through the program name `slurm-health-check` (a link to one-hpc), and an
// operator can run `one-hpc health-check`. Checks, each named in the drain reason:
//   munge   a credential made by `munge -n` decodes with `unmunge` (munged answers, the key
//           is the cluster's);
//   slurmd  the controller knows this node (`scontrol -o show node NAME`);
//   mounts  on an Open OnDemand worker, /home and /opt/software are mount points;
//   disk    / and slurmd's spool directory are less than 95 % full (`stat -f`, in a child
//           process with a timeout, so a hung NFS server cannot hang the check);
//   gpus    when the node has GPUs in Slurm (Gres=gpu...), `nvidia-smi -L` answers.
// A failing check drains the node with the reason "one-hpc health: <check>: <detail>" (running
// jobs finish; elastic mode replaces a node that stays so); once every check passes again, a
// node drained by the health check (and only such a node) is resumed.
#ifndef ONEHPC_ROLES_TIMERS_HEALTH_H_
#define ONEHPC_ROLES_TIMERS_HEALTH_H_

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "roles/names.h"
#include "roles/os/files.h"
#include "roles/os/process.h"

namespace onehpc {

/// The program name under which one-hpc runs the health check (slurm::kHealthCheckProgram).
inline constexpr char kHealthCheckProgramName[] = "slurm-health-check";

struct HealthOptions {
  std::string node_name;  ///< "" = SLURMD_NODENAME (set by slurmd), else the short host name
  std::string slurm_conf = slurm::kConfiglessSlurmConf;
  std::vector<std::string> required_mounts;  ///< mount points that must be mounted
  std::vector<std::string> disk_paths = {"/", slurm::kSlurmdSpoolDir};
  int max_used_percent = 95;
  /// Per command: at most 6 commands, so a run ends within slurmd's own 60 s limit.
  Duration command_timeout{5000};
  bool dry_run = false;  ///< check and say, change nothing
};

struct HealthCheck {
  std::string name;  ///< munge, slurmd, mounts, disk, gpus
  bool ok = true;
  std::string detail;
};

struct HealthReport {
  std::string node;
  std::vector<HealthCheck> checks;
  std::string action;  ///< "drain", "resume" or "" (nothing to change)
  bool action_failed = false;
  bool healthy() const;
  /// "one-hpc health: <check>: <detail>" of the first failed check ("" when healthy).
  std::string DrainReason() const;
};

/// The options for this VM: the mounts of its role (from the role record of the last
/// configure), the node name from the environment slurmd gives.
HealthOptions HealthOptionsForThisVm(const Files& files);

/// Runs the checks and drains or resumes the node. Returns an error only for a node name that
/// cannot be passed to scontrol.
Result<HealthReport> RunHealthCheck(const HealthOptions& options, ProcessRunner& runner,
                                    const Files& files);

/// 0 healthy, 1 unhealthy or the change failed.
int HealthExitCode(const Result<HealthReport>& result);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_TIMERS_HEALTH_H_
