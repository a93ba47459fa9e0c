// A mount table in memory: Mount and Unmount edit it.
#ifndef ONEHPC_TESTS_FAKES_MOUNTS_H_
#define ONEHPC_TESTS_FAKES_MOUNTS_H_

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "roles/os/mounts.h"

namespace onehpc::fakes {

class FakeMounts : public Mounts {
 public:
  std::vector<MountEntry> table;
  int mounts = 0;  ///< Mount calls
  Result<std::optional<MountEntry>> FindByTarget(const std::string& target) override {
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (it->target == target) return std::optional<MountEntry>(*it);
    }
    return std::optional<MountEntry>();
  }
  Result<std::vector<MountEntry>> FindBySource(const std::string& source) override {
    std::vector<MountEntry> out;
    for (const auto& e : table) {
      if (e.source == source) out.push_back(e);
    }
    return out;
  }
  /// A bind mount is recorded as the kernel shows it: the source of the mount that holds
  /// entry.source, with the subdirectory as its root.
  Status Mount(const MountEntry& entry) override {
    ++mounts;
    if (on_mount) on_mount(entry);
    MountEntry e = entry;
    if (entry.options == "bind") {
      const MountEntry* holder = nullptr;
      for (const auto& m : table) {
        if (entry.source.rfind(m.target + "/", 0) == 0 &&
            (!holder || m.target.size() >= holder->target.size())) {
          holder = &m;
        }
      }
      if (holder) {
        e.source = holder->source;
        e.fs_type = holder->fs_type;
        e.root = entry.source.substr(holder->target.size());
      }
    } else if (e.root.empty()) {
      e.root = "/";
    }
    table.push_back(e);
    return Ok();
  }
  /// Called with each mount as it is asked for, before it is recorded.
  std::function<void(const MountEntry&)> on_mount;
  Status Unmount(const std::string& target) override {
    table.erase(std::remove_if(table.begin(), table.end(),
                               [&](const MountEntry& e) { return e.target == target; }),
                table.end());
    return Ok();
  }
};

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_MOUNTS_H_
