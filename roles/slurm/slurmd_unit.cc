#include "roles/slurm/slurmd_unit.h"

#include <sstream>

#include "roles/names.h"

namespace onehpc::slurm {

std::string SlurmdNodeConf(const SlurmdUnitParams& p) {
  std::string conf = "CPUs=" + std::to_string(p.cpus) +
                     " RealMemory=" + std::to_string(p.real_memory_mb) + " Feature=" + kNodeFeature;
  if (!p.gres.empty()) conf += " Gres=" + p.gres;
  return conf;
}

std::string RenderSlurmdUnit(const SlurmdUnitParams& p) {
  std::ostringstream o;
  o << "# Written by one-hpc (OneSlurm worker role); replaces the packaged slurmd.service.\n"
    << "[Unit]\n"
    << "Description=Slurm node daemon (dynamic node " << p.node_name << ", configless)\n"
    << "Documentation=man:slurmd(8)\n"
    << "After=munge.service network-online.target remote-fs.target\n"
    << "Wants=network-online.target\n";
  if (!p.requires_mounts.empty()) {
    o << "# Jobs run in these: slurmd never starts without them (nor before them at boot).\n";
    for (const auto& m : p.requires_mounts) o << "RequiresMountsFor=" << m << "\n";
  }
  o << "# Keep retrying until the controller answers (Restart= below).\n"
    << "StartLimitIntervalSec=0\n"
    << "\n"
    << "[Service]\n"
    << "Type=simple\n"
    << "ExecStart=" << p.slurmd << " -D -Z --conf-server " << p.controller_addr << ":"
    << kSlurmctldPort << " -N " << p.node_name << " --conf \"" << SlurmdNodeConf(p) << "\"\n"
    << "ExecReload=/bin/kill -HUP $MAINPID\n"
    << "KillMode=process\n"
    << "Delegate=yes\n"
    << "LimitNOFILE=131072\n"
    << "LimitMEMLOCK=infinity\n"
    << "LimitSTACK=infinity\n"
    << "TasksMax=infinity\n"
    << "Restart=on-failure\n"
    << "RestartSec=10s\n"
    << "# /run/slurm/conf links to the configless cache that scontrol uses on this worker; it is\n"
    << "# gone once slurmd stops, so oneslurm-self-drain.service is ordered After=slurmd.\n"
    << "RuntimeDirectory=slurm\n"
    << "RuntimeDirectoryMode=0755\n"
    << "\n"
    << "[Install]\n"
    << "WantedBy=multi-user.target\n";
  return o.str();
}

std::optional<std::string> SlurmdUnitNodeName(std::string_view unit_text) {
  std::istringstream in{std::string(unit_text)};
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("ExecStart=")) continue;
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      if (word == "-N" && words >> word) return word;
    }
  }
  return std::nullopt;
}

}  // namespace onehpc::slurm
