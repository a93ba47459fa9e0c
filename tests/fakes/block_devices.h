// Block devices described in memory (ListDisks, Probe, FindByLabel, Identify); none by default.
#ifndef ONEHPC_TESTS_FAKES_BLOCK_DEVICES_H_
#define ONEHPC_TESTS_FAKES_BLOCK_DEVICES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "roles/os/block_devices.h"

namespace onehpc::fakes {

/// Devices and what a probe finds on them; `writes` records the devices mkfs ran on.
class FakeBlockDevices : public BlockDevices {
 public:
  std::map<std::string, DeviceProbe> probes;
  std::vector<std::string> writes;           // devices mkfs ran on
  std::map<std::string, std::string> tails;  // what WriteTail put at each device's end
  std::map<std::string, int> scsi_targets;   // Identify's SCSI target of a device (else -1)

  void Blank(const std::string& dev, std::uint64_t size = 1ull << 30) {
    DeviceProbe p;
    p.device = dev;
    p.size = size;
    probes[dev] = p;
  }
  void Fs(const std::string& dev, const std::string& type, const std::string& label,
          const std::string& uuid = "11111111-2222-3333-4444-555555555555") {
    DeviceProbe p;
    p.device = dev;
    p.size = 1ull << 30;
    p.fs_type = type;
    p.fs_usage = "filesystem";
    p.label = label;
    p.uuid = uuid;
    p.signatures = {type + (label.empty() ? "" : " label=" + label) + " uuid=" + uuid};
    probes[dev] = p;
  }
  void Signature(const std::string& dev, const std::string& signature,
                 const std::string& pt_type = "", bool ambivalent = false) {
    DeviceProbe p;
    p.device = dev;
    p.size = 1ull << 30;
    p.pt_type = pt_type;
    p.ambivalent = ambivalent;
    if (!signature.empty()) p.signatures = {signature};
    probes[dev] = p;
  }
  Result<std::vector<std::string>> ListDisks(bool) override {
    std::vector<std::string> out;
    for (const auto& [d, p] : probes) out.push_back(d);
    return out;
  }
  Result<DeviceProbe> Probe(const std::string& device) override {
    auto it = probes.find(device);
    if (it == probes.end()) return Fail(ErrorKind::kNotFound, "no " + device);
    return it->second;
  }
  Result<std::string> ReadTail(const std::string& device, std::size_t bytes) override {
    if (!probes.count(device)) return Fail(ErrorKind::kNotFound, "no " + device);
    std::string tail = tails.count(device) ? tails[device] : std::string();
    if (tail.size() < bytes) tail.insert(0, bytes - tail.size(), '\0');
    return tail.substr(tail.size() - bytes);
  }
  Status WriteTail(const std::string& device, const std::string& data) override {
    if (!probes.count(device)) return Fail(ErrorKind::kNotFound, "no " + device);
    tails[device] = data;
    return Ok();
  }
  /// The probe's size, and the SCSI target from scsi_targets.
  Result<DiskIdentity> Identify(const std::string& device) override {
    auto it = probes.find(device);
    if (it == probes.end()) return Fail(ErrorKind::kNotFound, "no " + device);
    auto scsi = scsi_targets.find(device);
    return DiskIdentity{device, it->second.size, scsi == scsi_targets.end() ? -1 : scsi->second};
  }
  Result<std::string> FindByLabel(const std::string& label) override {
    std::vector<std::string> found;
    for (const auto& [d, p] : probes) {
      if (!p.ambivalent && !p.fs_type.empty() && p.label == label) found.push_back(d);
    }
    if (found.empty()) return Fail(ErrorKind::kNotFound, "no label " + label);
    if (found.size() > 1) return Fail(ErrorKind::kUnsafe, "label on several devices");
    return found.front();
  }
};

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_BLOCK_DEVICES_H_
