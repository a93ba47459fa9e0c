#include "roles/slurm/slurm_conf.h"

#include <cctype>
#include <sstream>

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

}  // namespace

CgroupChoice DetectCgroups(const Files& files) {
  auto v2 = files.ReadIfExists("/sys/fs/cgroup/cgroup.controllers");
  if (v2 && v2->has_value()) {
    if (HasWord(**v2, "memory")) {
      return {true, "cgroup v2 with the memory controller (/sys/fs/cgroup/cgroup.controllers)"};
    }
    return {false, "cgroup v2 without the memory controller: /sys/fs/cgroup/cgroup.controllers "
                   "lists '" + std::string(**v2).substr(0, (**v2).find('\n')) + "'"};
  }
  bool v1 = files.Exists("/sys/fs/cgroup/memory/tasks") &&
            files.Exists("/sys/fs/cgroup/freezer/tasks") &&
            files.Exists("/sys/fs/cgroup/cpuset/tasks");
  if (v1) return {true, "cgroup v1 with memory, freezer and cpuset hierarchies"};
  return {false, "no usable cgroup controllers under /sys/fs/cgroup"};
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
    << "# Dynamic nodes (slurmd -Z) register themselves; no NodeName= lines.\n"
    << "MaxNodeCount=" << p.max_nodes << "\n"
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
  o << "JobAcctGatherType=jobacct_gather/none\n"
    << "AccountingStorageType=accounting_storage/none\n"
    << "JobCompType=jobcomp/none\n"
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
    << "MinJobAge=300\n"
    << "Nodeset=" << kNodeFeature << " Feature=" << kNodeFeature << "\n"
    << "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  return o.str();
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

}  // namespace onehpc::slurm
