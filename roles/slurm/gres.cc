#include "roles/slurm/gres.h"

namespace onehpc::slurm {

std::string RenderGresConf(const std::string& node_conf) {
  return "# Written by one-hpc; served to every node configless. Each node describes its own\n"
         "# GPUs in " +
         node_conf +
         " (written by one-hpc on that node, from nvidia-smi and\n"
         "# the /dev/nvidia<N> device nodes). Automatic detection is off: Debian's slurmd has\n"
         "# no NVML plugin.\n"
         "AutoDetect=off\n"
         "Include " +
         node_conf + "\n";
}

std::string GresFileList(const std::vector<std::string>& devices) {
  if (devices.size() == 1) return devices.front();
  // Every device is <prefix><minor> with the same prefix (host::DetectGpus).
  const std::string& first = devices.front();
  const std::string prefix = first.substr(0, first.find_last_not_of("0123456789") + 1);
  std::string list;
  for (const auto& d : devices) {
    list += (list.empty() ? "" : ",") + d.substr(prefix.size());
  }
  return prefix + "[" + list + "]";
}

std::string RenderNodeGresConf(const host::GpuInventory& gpus) {
  std::string why = gpus.why;  // one comment line, whatever nvidia-smi printed
  for (char& c : why) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::string out =
      "# Written by one-hpc at every configure: this node's GPUs, included by the gres.conf\n"
      "# that slurmctld serves. " +
      why + "\n";
  if (gpus.devices.empty()) return out;
  out += "Name=gpu";
  if (!gpus.type.empty()) out += " Type=" + gpus.type;
  out += " File=" + GresFileList(gpus.devices) + "\n";
  return out;
}

std::string NodeGres(const host::GpuInventory& gpus) {
  if (gpus.devices.empty()) return "";
  return "gpu:" + (gpus.type.empty() ? "" : gpus.type + ":") + std::to_string(gpus.devices.size());
}

}  // namespace onehpc::slurm
