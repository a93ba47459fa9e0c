#include "roles/slurm/units.h"

#include <sstream>

#include "roles/role.h"
#include "roles/slurm/protocol.h"

namespace onehpc::slurm {

Status EnsureUnitEnabled(RoleEnv& env, const std::string& unit, const std::string& wanted_by,
                         const std::string& why) {
  std::string link = "/etc/systemd/system/" + wanted_by + ".wants/" + unit;
  if (env.files.Exists(link)) {
    env.plan.Keep("enabled " + unit, "it is enabled (" + link + ")");
    return Ok();
  }
  return env.plan.Do("enable " + unit, why, [&] { return env.systemd.Enable(unit); });
}

Status EnsureUnitRunning(RoleEnv& env, const std::string& unit, bool restart,
                         const std::string& restart_why, const std::string& why) {
  auto active = env.systemd.IsActive(unit);
  if (!active) {
    if (!env.plan.dry_run()) return Fail(active.error());
    return env.plan.Do("start " + unit + " (--no-block)",
                       why + "; its state is unknown here (" + active.error().message + ")",
                       [] { return Ok(); });
  }
  if (!*active) {
    return env.plan.Do("start " + unit + " (--no-block)", why + "; it is not running",
                       [&] { return env.systemd.StartNoBlock(unit); });
  }
  if (restart) {
    return env.plan.Do("restart " + unit + " (--no-block)", restart_why,
                       [&] { return env.systemd.RestartNoBlock(unit); });
  }
  env.plan.Keep(unit + " running", "it is active and nothing it reads changed");
  return Ok();
}

std::string SlurmdNodeConf(const SlurmdUnitParams& p) {
  std::string conf = "CPUs=" + std::to_string(p.cpus) +
                     " RealMemory=" + std::to_string(p.real_memory_mb) +
                     " Feature=" + kNodeFeature;
  if (p.gpus > 0) conf += " Gres=gpu:" + std::to_string(p.gpus);
  return conf;
}

std::string RenderSlurmdUnit(const SlurmdUnitParams& p) {
  std::ostringstream o;
  o << "# Written by one-hpc (OneSlurm worker role); replaces the packaged slurmd.service.\n"
    << "[Unit]\n"
    << "Description=Slurm node daemon (dynamic node " << p.node_name << ", configless)\n"
    << "Documentation=man:slurmd(8)\n"
    << "After=munge.service network-online.target remote-fs.target\n"
    << "Wants=network-online.target\n"
    << "# Keep retrying until the controller answers (Restart= below).\n"
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

}  // namespace onehpc::slurm
