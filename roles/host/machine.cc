#include "roles/host/machine.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <sstream>

#include "common/log.h"
#include "roles/os/process.h"

namespace onehpc::host {

Result<int> CountCpus(const Files& files) {
  auto text = files.Read("/proc/cpuinfo");
  if (!text) return Fail(text.error());
  std::istringstream in(*text);
  std::string line;
  int count = 0;
  while (std::getline(in, line)) {
    if (line.rfind("processor", 0) == 0) {
      auto colon = line.find(':');
      std::string key = line.substr(0, colon);
      key.erase(key.find_last_not_of(" \t") + 1);
      if (key == "processor") ++count;
    }
  }
  if (count == 0) return Fail(ErrorKind::kIo, "/proc/cpuinfo lists no processor");
  return count;
}

Result<long> MemTotalMb(const Files& files) {
  auto text = files.Read("/proc/meminfo");
  if (!text) return Fail(text.error());
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    long kb = 0;
    std::string unit;
    if (fields >> kb >> unit && kb > 0 && unit == "kB") return kb / 1024;
    break;
  }
  return Fail(ErrorKind::kIo, "/proc/meminfo has no usable 'MemTotal: <n> kB' line");
}

long OsMemoryReserveMb(long mem_total_mb) { return std::clamp(mem_total_mb / 10, 256L, 4096L); }

long RealMemoryMb(long mem_total_mb) {
  return std::max(1L, mem_total_mb - OsMemoryReserveMb(mem_total_mb));
}

std::string GresTypeFromModel(const std::string& model) {
  std::string out;
  for (unsigned char c : model) {
    if (std::isalnum(c)) {
      out += static_cast<char>(std::tolower(c));
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

GpuInventory DetectGpus(const Files& files, ProcessRunner& runner) {
  GpuInventory none;
  const std::string smi = "/usr/bin/nvidia-smi";
  auto device_nodes = [&] {
    std::vector<int> minors;
    static const std::regex kNvidia("nvidia([0-9]{1,4})");
    std::smatch m;
    if (auto entries = files.List("/dev")) {
      for (const auto& name : *entries) {
        if (std::regex_match(name, m, kNvidia)) minors.push_back(std::stoi(m[1]));
      }
    }
    std::sort(minors.begin(), minors.end());
    return minors;
  };
  if (!files.Exists(smi)) {
    auto minors = device_nodes();
    none.why = minors.empty()
                   ? "no NVIDIA GPU (no " + smi + ", no /dev/nvidia<N>)"
                   : std::to_string(minors.size()) + " /dev/nvidia<N> device nodes but no " + smi +
                         " to confirm the driver: no GPU registered";
    if (!minors.empty()) log::Warn("GPUs: {}", none.why);
    return none;
  }
  Command c;
  c.argv = {files.HostPath(smi), "--query-gpu=index,name", "--format=csv,noheader"};
  c.timeout = Duration(15000);
  auto r = runner.Run(c);
  if (!r || !r->ok()) {
    none.why = "nvidia-smi failed (" + (r ? ProcessText(*r) : r.error().message) +
               "): the driver does not answer, no GPU registered";
    log::Warn("GPUs: {}", none.why);
    return none;
  }
  std::vector<std::string> models;
  std::istringstream in(r->out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto comma = line.find(',');
    std::string index = line.substr(0, comma);
    if (comma == std::string::npos || index.empty() ||
        index.find_first_not_of("0123456789") != std::string::npos) {
      none.why = "unexpected nvidia-smi output '" + line.substr(0, 80) + "': no GPU registered";
      log::Warn("GPUs: {}", none.why);
      return none;
    }
    std::string model = line.substr(comma + 1);
    model.erase(0, model.find_first_not_of(" \t"));
    model.erase(model.find_last_not_of(" \t\r") + 1);
    models.push_back(model);
  }
  const auto minors = device_nodes();
  if (models.empty() || models.size() != minors.size()) {
    none.why = "nvidia-smi lists " + std::to_string(models.size()) + " GPUs and /dev has " +
               std::to_string(minors.size()) + " nvidia<N> device nodes: no GPU registered";
    if (!models.empty() || !minors.empty()) log::Warn("GPUs: {}", none.why);
    return none;
  }
  GpuInventory gpus;
  for (int minor : minors) gpus.devices.push_back("/dev/nvidia" + std::to_string(minor));
  const bool one_model = std::all_of(models.begin(), models.end(),
                                     [&](const std::string& m) { return m == models.front(); });
  if (one_model) gpus.type = GresTypeFromModel(models.front());
  gpus.why = std::to_string(models.size()) + " x " + models.front() +
             (one_model ? ""
                        : " and other models (no type: nvidia-smi's order need not be the "
                          "device nodes')");
  return gpus;
}

}  // namespace onehpc::host
