// A machine under a temporary root (files, systemctl with state, hostname, munge), and a
// slurmctld seen through scontrol/squeue with state, as Slurm 24.11 (or, with json = false,
// 22.05) answered in the lab.
#ifndef ONEHPC_TESTS_FAKES_MACHINE_H_
#define ONEHPC_TESTS_FAKES_MACHINE_H_

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "roles/os/files.h"
#include "roles/os/systemd.h"
#include "roles/role.h"
#include "roles/slurm/nodes.h"
#include "tests/fakes/block_devices.h"
#include "tests/fakes/clock.h"
#include "tests/fakes/http.h"
#include "tests/fakes/mounts.h"
#include "tests/fakes/process_runner.h"

namespace onehpc::fakes {

namespace fs = std::filesystem;

/// A machine under a temporary root. systemctl, hostname, munge and unmunge are
/// answered with state; Slurm commands are up to each test (runner.On(...)).
class FakeMachine {
 public:
  FakeMachine() {
    char tmpl[] = "/tmp/onehpc-slurm-test.XXXXXX";
    root = mkdtemp(tmpl);
    files = std::make_unique<Files>(root);
    Write("/proc/cpuinfo", "processor\t: 0\nmodel name\t: x\n\nprocessor\t: 1\nmodel name\t: x\n");
    Write("/proc/meminfo", "MemTotal:        4096000 kB\nMemFree:          100000 kB\n");
    Write("/proc/sys/kernel/hostname", "localhost\n");
    Write("/etc/hosts", "127.0.0.1\tlocalhost\n127.0.1.1\tdebian\n");
    fs::create_directories(root + "/dev");
    fs::create_directories(root + "/etc/systemd/system");
    fs::create_directories(root + "/sys/fs/cgroup");
    runner.On({"systemctl", "is-active", "--quiet"},
              [this](const Command& c) { return Exit(active.count(c.argv[3]) ? 0 : 3); });
    for (const char* verb : {"start", "restart"}) {
      runner.On({"systemctl", "--no-block", verb}, [this](const Command& c) {
        active.insert(c.argv[3]);
        return Exit(0);
      });
    }
    runner.On({"systemctl", "--no-block", "stop"}, [this](const Command& c) {
      active.erase(c.argv[3]);
      return Exit(0);
    });
    runner.On({"systemctl", "enable"}, [this](const Command& c) {
      Write(WantsLink(c.argv.back()), "enabled\n");
      return Exit(0);
    });
    runner.On({"systemctl", "disable"}, [this](const Command& c) {
      fs::remove(root + WantsLink(c.argv.back()));
      return Exit(0);
    });
    runner.On({"hostname"}, [this](const Command& c) {
      Write("/proc/sys/kernel/hostname", c.argv.at(1) + "\n");
      return Exit(0);
    });
    runner.On({"munge", "-n"}, [](const Command&) { return Exit(0, "MUNGE:AAAA:\n"); });
    runner.On({"unmunge"}, [](const Command& c) {
      return c.stdin_data.empty() ? Exit(1, "", "unmunge: no credential")
                                  : Exit(0, "STATUS: Success (0)\n");
    });
  }
  ~FakeMachine() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }

  static std::string WantsLink(const std::string& unit) {
    auto ends = [&](const std::string& suffix) {
      return unit.size() > suffix.size() &&
             unit.compare(unit.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const char* target = ends(".timer")    ? "timers.target"
                         : ends(".socket") ? "sockets.target"
                                           : "multi-user.target";
    return std::string("/etc/systemd/system/") + target + ".wants/" + unit;
  }
  void Write(const std::string& path, const std::string& content) {
    fs::create_directories(fs::path(root + path).parent_path());
    std::ofstream(root + path, std::ios::binary) << content;
  }
  std::string Read(const std::string& path) const {
    std::ifstream in(root + path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  bool Exists(const std::string& path) const { return fs::exists(root + path); }
  /// The permission bits of a file (0 when it is missing).
  unsigned Mode(const std::string& path) const {
    std::error_code ec;
    auto st = fs::status(root + path, ec);
    return ec ? 0u : static_cast<unsigned>(st.permissions()) & 07777u;
  }
  /// Argvs of the commands run, excluding the read-only systemctl is-active and show probes.
  std::vector<std::string> Changes() const {
    std::vector<std::string> out;
    for (const auto& a : runner.Argvs()) {
      if (a.rfind("systemctl is-active", 0) == 0 || a.rfind("systemctl show", 0) == 0) continue;
      out.push_back(a);
    }
    return out;
  }

  std::string root;
  std::unique_ptr<Files> files;
  FakeProcessRunner runner;
  SystemctlSystemd systemd{runner};
  FakeClock clock;
  std::set<std::string> active;
  FakeBlockDevices block_devices;
  FakeMounts mounts;
  /// Scripted answers (none by default: every request fails, as NoHttp).
  ScriptedTransport http;
  /// The adapters of this machine, as a run gets them.
  SystemAdapters Adapters() {
    return {runner, *files, systemd, block_devices, mounts, clock, http};
  }
};

/// A slurmctld seen through scontrol/squeue, with state, answering like Slurm did in the lab
/// (messages, exit codes, busy deletes): scontrol lists nodes as Slurm 24.11 does with --json
/// (the members one-hpc reads, shaped as in tests/data/slurm/scontrol-24.11-show-nodes.json,
/// which FakeSlurmTest compares them with), or, with `json = false`, as Slurm 22.05 does: no
/// --json, `-o` lines.
class FakeSlurm {
 public:
  struct Node {
    std::string base = "IDLE";  ///< IDLE, MIXED, ALLOCATED, DOWN
    bool drain = false;
    bool not_responding = false;
    std::string reason;
    std::string addr = "10.0.0.99";
    std::vector<std::string> jobs;
    std::string last_busy;  ///< LastBusyTime, e.g. "2026-11-29T16:00:00"; "" = none printed
    std::string reason_time = "2026-11-29T16:12:52";  ///< the time in the reason's suffix
  };
  /// A job of `squeue -t PENDING`.
  struct Pending {
    std::string id;
    std::string reason = "Resources";
    int nodes = 1;  ///< per task for an array
    std::string admin_comment;
    /// A job array of this many pending tasks (0: not an array): squeue prints one line
    /// `<id>_[1-N]` for it, or one line per task `<id>_<i>` with -r, as Slurm does.
    int array_tasks = 0;
  };
  std::map<std::string, Node> nodes;
  std::vector<Pending> pending;
  bool delete_lies = false;      ///< delete answers rc 0 but keeps the node
  bool down = false;             ///< slurmctld does not answer
  bool json = true;              ///< scontrol --json (24.11); false: unrecognized (22.05)
  std::vector<std::string> log;  ///< changes applied: "delete n1", "update n1 state=DRAIN ..."

  std::string State(const Node& n) const {
    return n.base + (n.drain ? "+DRAIN" : "") + "+DYNAMIC_NORM" +
           (n.not_responding ? "+NOT_RESPONDING" : "");
  }
  std::string Line(const std::string& name, const Node& n) const {
    std::string line =
        "NodeName=" + name + " Arch=x86_64 CPUTot=2 AvailableFeatures=one NodeAddr=" + n.addr +
        " NodeHostName=" + name +
        " OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC Debian RealMemory=1000 State=" + State(n) +
        " Partitions=all";
    if (!n.last_busy.empty()) line += " LastBusyTime=" + n.last_busy;
    if (!n.reason.empty()) line += " Reason=" + n.reason + " [root@" + n.reason_time + "]";
    return line + "\n";
  }
  /// One node as `scontrol --json show nodes` prints it (the members one-hpc reads).
  nlohmann::json JsonNode(const std::string& name, const Node& n) const {
    auto time = [](long long t) {
      return nlohmann::json{{"set", true}, {"infinite", false}, {"number", t}};
    };
    nlohmann::json state = nlohmann::json::array({n.base});
    if (n.drain) state.push_back("DRAIN");
    if (n.not_responding) state.push_back("NOT_RESPONDING");
    state.push_back("DYNAMIC_NORM");
    return {{"name", name},
            {"address", n.addr},
            {"hostname", name},
            {"state", state},
            {"reason", n.reason},
            {"reason_changed_at",
             time(n.reason.empty() ? 0 : slurm::ParseSlurmTime(n.reason_time).value_or(0))},
            {"last_busy", time(slurm::ParseSlurmTime(n.last_busy).value_or(0))},
            {"features", nlohmann::json::array({"one"})},
            {"gres", ""},
            {"operating_system", "Linux 6.12.0 #1 SMP PREEMPT_DYNAMIC Debian"}};
  }
  std::string JsonNodes(const std::vector<std::string>& names) const {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& name : names) {
      if (auto it = nodes.find(name); it != nodes.end()) list.push_back(JsonNode(name, it->second));
    }
    return nlohmann::json{
        {"nodes", list}, {"errors", nlohmann::json::array()}, {"warnings", nlohmann::json::array()}}
        .dump(2);
  }
  void Install(FakeProcessRunner& runner) {
    auto unreachable = [] {
      return Exit(1, "",
                  "slurm_load_node error: Unable to contact slurm controller (connect failure)\n");
    };
    runner.On({"scontrol", "--json"}, [this, unreachable](const Command& c) {
      if (!json) {  // Slurm 22.05
        return Exit(1, "",
                    "scontrol: unrecognized option '--json'\nTry \"scontrol --help\" for more "
                    "information\n");
      }
      if (down) return unreachable();  // 24.11 prints no document then: the same stderr
      std::vector<std::string> names;
      if (c.argv.size() >= 5 && c.argv[3] == "node") {
        names.push_back(c.argv[4]);  // not found: "nodes": [] and exit 0, as 24.11 does
      } else {
        for (const auto& [name, n] : nodes) names.push_back(name);
      }
      return Exit(0, JsonNodes(names));
    });
    runner.On({"scontrol", "-o", "show", "nodes"}, [this, unreachable](const Command&) {
      if (down) return unreachable();
      std::string out;
      for (const auto& [name, n] : nodes) out += Line(name, n);
      return Exit(0, out.empty() ? "No nodes in the system\n" : out);
    });
    runner.On({"scontrol", "-o", "show", "node"}, [this, unreachable](const Command& c) {
      if (down) return unreachable();
      const std::string& name = c.argv.at(4);
      auto it = nodes.find(name);
      if (it == nodes.end()) return Exit(1, "Node " + name + " not found\n");
      return Exit(0, Line(name, it->second));
    });
    runner.On({"scontrol", "delete"}, [this, unreachable](const Command& c) {
      if (down) return unreachable();
      std::string name = c.argv.at(2).substr(std::string("nodename=").size());
      auto it = nodes.find(name);
      if (it == nodes.end()) {
        return Exit(1, "",
                    "scontrol: error: failed to delete nodes " + name +
                        "\ndelete_node nodename=" + name + ": Invalid node name specified\n");
      }
      if (!it->second.jobs.empty() && it->second.base != "DOWN") {
        return Exit(1, "",
                    "scontrol: error: failed to delete nodes " + name +
                        "\ndelete_node nodename=" + name + ": Requested nodes are busy\n");
      }
      log.push_back("delete " + name);
      if (!delete_lies) nodes.erase(it);
      return Exit(0);
    });
    runner.On({"scontrol", "update"}, [this, unreachable](const Command& c) {
      if (down) return unreachable();
      if (c.argv.at(2).rfind("jobid=", 0) == 0) {
        std::string id = c.argv[2].substr(6);
        for (auto& p : pending) {
          if (p.id != id) continue;
          log.push_back("update job " + id + " " + c.argv.at(3));
          if (c.argv[3].rfind("admincomment=", 0) == 0) p.admin_comment = c.argv[3].substr(13);
          return Exit(0);
        }
        return Exit(1, "", "slurm_update error: Invalid job id specified\n");
      }
      std::string name = c.argv.at(2).substr(std::string("nodename=").size());
      auto it = nodes.find(name);
      if (it == nodes.end()) {
        return Exit(1, "", "slurm_update error: Invalid node name specified\n");
      }
      std::string change;
      for (size_t i = 3; i < c.argv.size(); ++i) change += " " + c.argv[i];
      log.push_back("update " + name + change);
      Node& n = it->second;
      for (size_t i = 3; i < c.argv.size(); ++i) {
        const std::string& a = c.argv[i];
        if (a == "state=DRAIN") n.drain = true;
        if (a == "state=DOWN") n.base = "DOWN";
        if (a == "state=RESUME") {
          n.drain = false;
          if (n.base == "DOWN") n.base = "IDLE";
          n.reason.clear();
        }
        if (a.rfind("reason=", 0) == 0) n.reason = a.substr(7);
        if (a.rfind("nodeaddr=", 0) == 0) n.addr = a.substr(9);
      }
      return Exit(0);
    });
    runner.On({"squeue"}, [this](const Command& c) {
      if (down) return Exit(1, "", "squeue: error: Unable to contact slurm controller\n");
      std::string out;
      if (std::find(c.argv.begin(), c.argv.end(), "PENDING") != c.argv.end()) {
        const bool tasks = std::find(c.argv.begin(), c.argv.end(), "-r") != c.argv.end();
        for (const auto& p : pending) {
          const std::string tail = "|" + p.reason + "|" + std::to_string(p.nodes) + "\n";
          if (p.array_tasks == 0) {
            out += p.id + tail;
          } else if (!tasks) {
            out += p.id + "_[1-" + std::to_string(p.array_tasks) + "]" + tail;
          } else {
            for (int i = 1; i <= p.array_tasks; ++i) out += p.id + "_" + std::to_string(i) + tail;
          }
        }
        return Exit(0, out);
      }
      for (const auto& [name, n] : nodes) {
        for (const auto& j : n.jobs) out += j + " " + name + "\n";
      }
      return Exit(0, out);
    });
  }
};

}  // namespace onehpc::fakes

#endif  // ONEHPC_TESTS_FAKES_MACHINE_H_
