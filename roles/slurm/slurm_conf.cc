#include "roles/slurm/slurm_conf.h"

#include <cctype>
#include <sstream>
#include <utility>
#include <vector>

#include "roles/slurm/key_delivery.h"

namespace onehpc::slurm {
namespace {

bool HasWord(std::string_view text, std::string_view word) {
  std::istringstream in{std::string(text)};
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// The cgroup mounts of /proc/mounts: mount point -> options, for fstype cgroup (v1) and
// cgroup2. nullopt when /proc/mounts cannot be read.
std::optional<std::vector<std::pair<std::string, std::vector<std::string>>>> CgroupMounts(
    const Files& files, const char* fstype) {
  auto mounts = files.ReadIfExists("/proc/mounts");
  if (!mounts || !mounts->has_value()) return std::nullopt;
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  std::istringstream in(**mounts);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string source, target, type, options;
    if (!(fields >> source >> target >> type >> options) || type != fstype) continue;
    std::vector<std::string> opts;
    std::istringstream o(options);
    std::string opt;
    while (std::getline(o, opt, ',')) opts.push_back(opt);
    out.emplace_back(target, std::move(opts));
  }
  return out;
}

bool Has(const std::vector<std::string>& v, std::string_view s) {
  for (const auto& x : v) {
    if (x == s) return true;
  }
  return false;
}

// "one-hpc-slot[1-N]" (hostlist syntax), or "one-hpc-slot1" for one.
std::string PlaceholderNames(int count) {
  if (count == 1) return std::string(kPlaceholderPrefix) + "1";
  return std::string(kPlaceholderPrefix) + "[1-" + std::to_string(count) + "]";
}

// A whole non-negative number, or nullopt.
std::optional<int> ParseCount(std::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

}  // namespace

CgroupChoice DetectCgroups(const Files& files) {
  auto v2 = files.ReadIfExists("/sys/fs/cgroup/cgroup.controllers");
  if (v2 && v2->has_value()) {
    if (!HasWord(**v2, "memory")) {
      return {false,
              "cgroup v2 without the memory controller: /sys/fs/cgroup/cgroup.controllers "
              "lists '" +
                  std::string(**v2).substr(0, (**v2).find('\n')) + "'"};
    }
    auto mounts = CgroupMounts(files, "cgroup2");
    if (!mounts) return {false, "cgroup v2, but /proc/mounts is unreadable"};
    for (const auto& [target, opts] : *mounts) {
      if (target != "/sys/fs/cgroup") continue;
      if (Has(opts, "ro")) {
        return {false,
                "cgroup v2 with the memory controller, but /sys/fs/cgroup is mounted "
                "read-only (a container): slurmd could not create its cgroups"};
      }
      return {true, "cgroup v2 with the memory controller (/sys/fs/cgroup/cgroup.controllers)"};
    }
    return {false,
            "cgroup v2 controllers listed, but no cgroup2 mount on /sys/fs/cgroup in "
            "/proc/mounts"};
  }
  bool v1 = files.Exists("/sys/fs/cgroup/memory/tasks") &&
            files.Exists("/sys/fs/cgroup/freezer/tasks") &&
            files.Exists("/sys/fs/cgroup/cpuset/tasks");
  if (!v1) return {false, "no usable cgroup controllers under /sys/fs/cgroup"};
  // Visible is not usable: a container (systemd-nspawn, LXC, docker) shows the host's v1
  // hierarchies read-only, and proctrack/cgroup then fails in slurmd at the first job step.
  auto mounts = CgroupMounts(files, "cgroup");
  if (!mounts) return {false, "cgroup v1 hierarchies visible, but /proc/mounts is unreadable"};
  for (const char* controller : {"memory", "freezer", "cpuset"}) {
    bool found = false;
    for (const auto& [target, opts] : *mounts) {
      if (!Has(opts, controller)) continue;
      found = true;
      if (Has(opts, "ro")) {
        return {false, std::string("cgroup v1 hierarchies visible, but the ") + controller +
                           " hierarchy (" + target +
                           ") is mounted read-only (a container): slurmd could not create its "
                           "cgroups"};
      }
    }
    if (!found) {
      return {false, std::string("cgroup v1: no mount of the ") + controller +
                         " controller in /proc/mounts"};
    }
  }
  return {true, "cgroup v1 with writable memory, freezer and cpuset hierarchies"};
}

std::string RenderSlurmConf(const SlurmConfParams& p) {
  std::ostringstream o;
  o << "# Written by one-hpc (OneSlurm controller role) at every configure; local edits are\n"
       "# overwritten. Configless: workers fetch this file from slurmctld on port "
    << kSlurmctldPort << ".\n"
    << "ClusterName=" << p.cluster_name << "\n"
    << "SlurmctldHost=" << p.controller_host << "(" << p.controller_addr << ")\n"
    << "SlurmctldParameters=enable_configless\n"
    << "SlurmctldPort=" << kSlurmctldPort << "\n"
    << "SlurmdPort=" << kSlurmdPort << "\n"
    << "# srun listens on these ports for its job steps (open them from the workers)\n"
    << "SrunPortRange=60001-63000\n"
    << "# Dynamic nodes (slurmd -Z) register under their own names. Slurm 24.11 refuses at\n"
    << "# submission a job asking more nodes than slurmctld has records for: these placeholders\n"
    << "# (never contacted, never shown but by sinfo --future, sized to refuse no job a worker\n"
    << "# might serve) let it wait for workers to join, as 22.05 does. MaxNodeCount counts them.\n"
    << "NodeName=" << PlaceholderNames(p.max_nodes) << " State=FUTURE CPUs=" << kPlaceholderCpus
    << " RealMemory=" << kPlaceholderMemoryMb << " Gres=gpu:" << kPlaceholderGpus << "\n"
    << "MaxNodeCount=" << 2 * p.max_nodes << "\n"
    << "# No slurmd-to-slurmd fan-out: workers never need to resolve each other.\n"
    << "TreeWidth=65533\n"
    << "AuthType=auth/munge\n"
    << "CredType=cred/munge\n"
    << "SlurmUser=" << p.slurm_user << "\n"
    << "SlurmdUser=root\n"
    << "StateSaveLocation=" << p.state_save_location << "\n"
    << "SlurmdSpoolDir=" << p.slurmd_spool_dir << "\n"
    << "SlurmctldPidFile=" << p.slurmctld_pid_file << "\n"
    << "SlurmdPidFile=" << p.slurmd_pid_file << "\n";
  if (!p.slurmctld_log_file.empty()) o << "SlurmctldLogFile=" << p.slurmctld_log_file << "\n";
  if (!p.slurmd_log_file.empty()) o << "SlurmdLogFile=" << p.slurmd_log_file << "\n";
  if (p.use_cgroup) {
    o << "ProctrackType=proctrack/cgroup\n"
      << "TaskPlugin=task/cgroup,task/affinity\n";
  } else {
    o << "# No usable cgroup controllers on the controller: plain process tracking.\n"
      << "ProctrackType=proctrack/linuxproc\n"
      << "TaskPlugin=task/none\n";
  }
  if (p.accounting) {
    // By name, not localhost: sacct and sreport on a worker read this file too.
    o << "# Job records go to slurmdbd on the controller (MariaDB, dumped every 30 minutes),\n"
      << "# with each job's memory and CPU use.\n"
      << "JobAcctGatherType=jobacct_gather/linux\n"
      << "AccountingStorageType=accounting_storage/slurmdbd\n"
      << "AccountingStorageHost=" << p.controller_host << "\n";
  } else {
    o << "JobAcctGatherType=jobacct_gather/none\n"
      << "AccountingStorageType=accounting_storage/none\n";
  }
  o << "JobCompType=jobcomp/none\n"
    << "MpiDefault=none\n"
    << "SwitchType=switch/none\n"
    << "SchedulerType=sched/backfill\n"
    << "SelectType=select/cons_tres\n"
    << "SelectTypeParameters=CR_Core\n"
    << "GresTypes=gpu\n"
    << "MailProg=/bin/true\n"
    << "# A node that registers again after being DOWN for not responding returns to service.\n"
    << "ReturnToService=2\n"
    << "SlurmctldTimeout=120\n"
    << "SlurmdTimeout=" << p.slurmd_timeout << "\n"
    << "MessageTimeout=10\n"
    << "InactiveLimit=0\n"
    << "KillWait=30\n"
    << "MinJobAge=300\n";
  if (!p.health_check_program.empty()) {
    o << "# The workers' health check (one-hpc): a failing check drains the node with its name.\n"
      << "HealthCheckProgram=" << p.health_check_program << "\n"
      << "HealthCheckInterval=" << p.health_check_interval << "\n"
      << "HealthCheckNodeState=ANY\n";
  }
  if (p.job_submit_lua) {
    o << "# job_submit.lua asks for an elastic cycle at each submission (one-hpc elastic).\n"
      << "JobSubmitPlugins=lua\n";
  }
  o << "Nodeset=" << kNodeFeature << " Feature=" << kNodeFeature << "\n"
    << "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  return o.str();
}

std::string RenderJobSubmitLua(const std::string& kick_file) {
  return std::string(kJobSubmitLuaFirstLine) +
         "\n"
         "-- slurmctld runs it (as its SlurmUser) for each job submitted or changed. In elastic\n"
         "-- mode it creates the file below, and oneslurm-elastic.path starts an elastic cycle\n"
         "-- at once instead of at the next 60 s tick; the cycle removes the file. Without "
         "elastic\n"
         "-- mode the directory is not there (or no longer watched) and nothing else happens.\n"
         "-- The job is never changed or refused.\n"
         "local kick = \"" +
         kick_file +
         "\"\n"
         "\n"
         "local function ask_for_an_elastic_cycle()\n"
         "  local f = io.open(kick, \"a\")\n"
         "  if f then f:close() end\n"
         "end\n"
         "\n"
         "function slurm_job_submit(job_desc, part_list, submit_uid)\n"
         "  ask_for_an_elastic_cycle()\n"
         "  return slurm.SUCCESS\n"
         "end\n"
         "\n"
         "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)\n"
         "  ask_for_an_elastic_cycle()\n"
         "  return slurm.SUCCESS\n"
         "end\n";
}

std::string RenderCgroupConf(bool use_cgroup) {
  std::string out =
      "# Written by one-hpc (OneSlurm controller role); served to workers configless.\n";
  if (use_cgroup) {
    out += "ConstrainCores=yes\n";
  } else {
    out += "# proctrack/linuxproc and task/none are in use: nothing to constrain.\n";
  }
  return out;
}

std::optional<std::string> SlurmConfValue(std::string_view conf, std::string_view key) {
  std::istringstream in{std::string(conf)};
  std::string line;
  while (std::getline(in, line)) {
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    size_t eq = line.find('=', start);
    if (eq == std::string::npos) continue;
    std::string_view k = std::string_view(line).substr(start, eq - start);
    while (!k.empty() && (k.back() == ' ' || k.back() == '\t')) k.remove_suffix(1);
    if (!IEquals(k, key)) continue;
    std::string value = line.substr(eq + 1);
    size_t vb = value.find_first_not_of(" \t");
    if (vb == std::string::npos) return std::string();
    size_t ve = value.find_first_of(" \t\r", vb);
    return value.substr(vb, ve == std::string::npos ? std::string::npos : ve - vb);
  }
  return std::nullopt;
}

std::optional<int> DynamicNodeRoom(std::string_view conf) {
  auto max_text = SlurmConfValue(conf, "MaxNodeCount");
  auto max = max_text ? ParseCount(*max_text) : std::nullopt;
  if (!max || *max <= 0) return std::nullopt;
  int placeholders = 0;
  if (auto names = SlurmConfValue(conf, "NodeName");
      names && names->starts_with(kPlaceholderPrefix)) {
    std::string_view rest =
        std::string_view(*names).substr(std::string_view(kPlaceholderPrefix).size());
    if (rest == "1") {
      placeholders = 1;
    } else if (rest.starts_with("[1-") && rest.ends_with("]")) {
      auto n = ParseCount(rest.substr(3, rest.size() - 4));
      if (!n) return std::nullopt;
      placeholders = *n;
    }
  }
  if (placeholders >= *max) return std::nullopt;
  return *max - placeholders;
}

std::string SlurmConfId(std::string_view slurm_conf) {
  return DomainHashHex(slurm_conf, "one-hpc slurm.conf id, v1");
}

}  // namespace onehpc::slurm
