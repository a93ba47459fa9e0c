#include "roles/disk/disk_identity.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace onehpc::disk {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

// OpenNebula's SIZE is whole MiB; a disk whose bytes are not is rounded either way.
bool SizeMatches(std::uint64_t bytes, std::uint64_t size_mib) {
  return size_mib != 0 && (bytes / kMiB == size_mib || (bytes + kMiB - 1) / kMiB == size_mib);
}

std::string Name(const std::string& device) { return device.substr(device.rfind('/') + 1); }

}  // namespace

int ScsiTargetOf(const std::string& target) {
  if (target.size() != 3 || target.compare(0, 2, "sd") != 0) return -1;
  if (target[2] < 'a' || target[2] > 'z') return -1;
  return target[2] - 'a';
}

DiskMatch MatchListedDisks(const std::vector<ListedDisk>& listed,
                           const std::vector<DiskIdentity>& guest) {
  DiskMatch out;
  std::set<std::string> taken;
  std::vector<bool> done(listed.size(), false);
  auto take = [&](std::size_t i, const DiskIdentity& g, const std::string& how) {
    DiskFacts facts = listed[i].facts;
    facts.found_by = how;
    out.by_device[g.device] = facts;
    taken.insert(g.device);
    done[i] = true;
    out.notes.push_back(fmt::format("TARGET {} is {} ({})", facts.target, g.device, how));
  };

  // 1. SCSI targets: an address OpenNebula set, whatever the size says.
  for (std::size_t i = 0; i < listed.size(); ++i) {
    const int want = ScsiTargetOf(listed[i].facts.target);
    if (want < 0) continue;
    for (const auto& g : guest) {
      if (g.scsi_target != want || taken.count(g.device)) continue;
      if (listed[i].size_mib != 0 && !SizeMatches(g.size, listed[i].size_mib)) {
        out.notes.push_back(fmt::format(
            "TARGET {} (SCSI target {}) is not {}: that disk has {} MiB, OpenNebula says {}",
            listed[i].facts.target, want, g.device, g.size / kMiB, listed[i].size_mib));
        done[i] = true;  // the address is OpenNebula's: no other device is this disk
        break;
      }
      take(i, g, fmt::format("SCSI target {}", want));
      break;
    }
  }
  // 2. Sizes; a name only breaks a tie.
  for (std::size_t i = 0; i < listed.size(); ++i) {
    if (done[i] || listed[i].size_mib == 0) continue;
    std::vector<const DiskIdentity*> same;
    for (const auto& g : guest) {
      if (!taken.count(g.device) && SizeMatches(g.size, listed[i].size_mib)) same.push_back(&g);
    }
    auto named = std::find_if(same.begin(), same.end(), [&](const DiskIdentity* g) {
      return Name(g->device) == listed[i].facts.target;
    });
    if (same.size() == 1) {
      const bool by_name = named != same.end();
      take(i, *same.front(),
           fmt::format("its size, {} MiB{}", listed[i].size_mib,
                       by_name ? "" : "; the guest names it otherwise"));
    } else if (named != same.end()) {
      take(i, **named,
           fmt::format("its name and size, {} MiB; {} disks have that size", listed[i].size_mib,
                       same.size()));
    } else {
      out.notes.push_back(fmt::format(
          "TARGET {} ({} MiB) is not identified: {} disk(s) of that size, none named {}",
          listed[i].facts.target, listed[i].size_mib, same.size(), listed[i].facts.target));
    }
    done[i] = true;
  }
  // 3. No SIZE from OpenNebula: the name alone.
  for (std::size_t i = 0; i < listed.size(); ++i) {
    if (done[i]) continue;
    auto g = std::find_if(guest.begin(), guest.end(), [&](const DiskIdentity& d) {
      return Name(d.device) == listed[i].facts.target && !taken.count(d.device);
    });
    if (g != guest.end()) {
      take(i, *g, "its name only: OpenNebula gives no SIZE");
    } else {
      out.notes.push_back(fmt::format("TARGET {} (no SIZE) is not identified: no free disk {}",
                                      listed[i].facts.target, listed[i].facts.target));
    }
  }
  return out;
}

}  // namespace onehpc::disk
