// slurm.conf for a configless cluster of dynamic nodes, as the controller writes it.
#ifndef ONEHPC_ROLES_SLURM_SLURM_CONF_H_
#define ONEHPC_ROLES_SLURM_SLURM_CONF_H_

#include <optional>
#include <string>
#include <string_view>

#include "roles/names.h"
#include "roles/os/files.h"

namespace onehpc::slurm {

/// Which process tracking and task plugins the cluster uses.
struct CgroupChoice {
  bool use_cgroup = false;  ///< proctrack/cgroup + task/cgroup,task/affinity
  std::string why;          ///< for the log and the plan
};

/// proctrack/cgroup only when the memory controller is really there and writable: cgroup v2
/// with `memory` in /sys/fs/cgroup/cgroup.controllers and /sys/fs/cgroup mounted rw, or
/// cgroup v1 with memory, freezer and cpuset hierarchies mounted rw (per /proc/mounts).
/// Otherwise (e.g. booted containers, which see the host's hierarchies read-only)
/// proctrack/linuxproc.
CgroupChoice DetectCgroups(const Files& files);

/// The placeholder node records (State=FUTURE) of slurm.conf: one-hpc-slot1 ... one per node
/// MaxNodeCount leaves to dynamic nodes. Slurm 24.11 refuses at submission a job that asks for
/// more nodes than slurmctld's table holds (its first scheduling test runs on the records it
/// has, and a dynamic node has none before it registers); 22.05 lets the job pend. With the
/// placeholders the job pends on both until workers join (or the elastic cycle adds them).
/// slurmctld never contacts a FUTURE node, sinfo and scontrol do not show it, and no job runs
/// on it. Sized larger than any VM so that no job a worker could serve is refused.
inline constexpr char kPlaceholderPrefix[] = "one-hpc-slot";
inline constexpr int kPlaceholderCpus = 4096;
inline constexpr long kPlaceholderMemoryMb = 16L * 1024 * 1024;  ///< 16 TiB
inline constexpr int kPlaceholderGpus = 64;

struct SlurmConfParams {
  std::string cluster_name = "one";
  std::string controller_host;  ///< short hostname of the controller
  std::string controller_addr;  ///< its address on the service network
  /// Dynamic nodes slurmctld accepts: MaxNodeCount is twice that, half of it placeholders.
  int max_nodes = 100;
  bool use_cgroup = false;
  int slurmd_timeout = 60;  ///< seconds until an unresponsive node is marked DOWN
  /// Job accounting through slurmdbd on the controller's host (the Open OnDemand portal, and
  /// the OneSlurm controller with ONEAPP_SLURM_ACCOUNTING_ENABLED=YES).
  bool accounting = false;
  // Paths (overridable for tests and the lab; the defaults are Debian's package layout).
  std::string state_save_location = kStateSaveLocation;
  std::string slurmd_spool_dir = kSlurmdSpoolDir;
  std::string slurmctld_pid_file = "/run/slurmctld.pid";  ///< matches the packaged unit
  std::string slurmd_pid_file = "/run/slurmd.pid";
  std::string slurm_user = "slurm";
  std::string slurmctld_log_file;  ///< "" = syslog/journal
  std::string slurmd_log_file;
  /// HealthCheckProgram, run by every slurmd every 60 s in any state ("" = none).
  std::string health_check_program = kHealthCheckProgram;
  int health_check_interval = 60;  ///< seconds
  /// JobSubmitPlugins=lua: slurmctld runs kJobSubmitLuaPath at each submission (written
  /// before slurmctld starts: it cannot start without the script).
  bool job_submit_lua = false;
};

/// The complete slurm.conf (deterministic: same params → same bytes).
std::string RenderSlurmConf(const SlurmConfParams& params);
/// The first line of one-hpc's job_submit.lua: a script that starts otherwise is not ours.
inline constexpr char kJobSubmitLuaFirstLine[] =
    "-- Written by one-hpc (Slurm controller) at every configure; local edits are overwritten.";
/// job_submit.lua: at each job submission and change, creates `kick_file` if its directory
/// exists (elastic mode: oneslurm-elastic.path then starts a cycle) and lets the job through
/// unchanged. Nothing else: a failure to create the file never refuses a job.
std::string RenderJobSubmitLua(const std::string& kick_file);
/// cgroup.conf matching the choice (served to workers configless, like slurm.conf).
std::string RenderCgroupConf(bool use_cgroup);

/// SLURM_CONF_ID: 32 lower-case hex digits of a BLAKE2b hash of slurm.conf's bytes, the same
/// on the controller and in a configless worker's fetched copy (which slurmd writes as sent).
std::string SlurmConfId(std::string_view slurm_conf);

/// How many dynamic nodes a slurm.conf text leaves room for: its MaxNodeCount less its
/// placeholder records (all of MaxNodeCount in a slurm.conf without them); nullopt when
/// MaxNodeCount is absent or malformed, the placeholders' range is malformed, or they fill
/// MaxNodeCount.
std::optional<int> DynamicNodeRoom(std::string_view conf);

/// The value of `Key=` in a slurm.conf text (case-insensitive key, first match, comments
/// skipped), e.g. MaxNodeCount; nullopt when absent.
std::optional<std::string> SlurmConfValue(std::string_view conf, std::string_view key);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_SLURM_CONF_H_
