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

int CountGpus(const Files& files, ProcessRunner& runner) {
  auto entries = files.List("/dev");
  int devices = 0;
  if (entries) {
    static const std::regex kNvidia("nvidia[0-9]+");
    for (const auto& name : *entries) {
      if (std::regex_match(name, kNvidia)) ++devices;
    }
  }
  if (devices > 0) return devices;
  if (!files.Exists("/usr/bin/nvidia-smi")) return 0;
  Command c;
  c.argv = {"/usr/bin/nvidia-smi", "--query-gpu=count", "--format=csv,noheader"};
  c.timeout = Duration(15000);
  auto r = runner.Run(c);
  if (!r || !r->ok()) {
    log::Warn("GPU count: nvidia-smi failed ({}); advertising no GPU",
              r ? ProcessText(*r) : r.error().message);
    return 0;
  }
  std::istringstream in(r->out);
  int n = 0;
  if (in >> n && n > 0 && n < 1024) return n;
  log::Warn("GPU count: unexpected nvidia-smi output; advertising no GPU");
  return 0;
}

}  // namespace onehpc::host
