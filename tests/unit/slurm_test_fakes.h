// Test helpers for the OneSlurm roles: a fake machine (files under a temporary root, systemctl
// with state, hostname/munge/install answered by FakeProcessRunner), a OneGate simulator
// service with a controller and workers, and RoleEnv plumbing.
#ifndef ONEHPC_TESTS_UNIT_SLURM_TEST_FAKES_H_
#define ONEHPC_TESTS_UNIT_SLURM_TEST_FAKES_H_

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "context/http.h"
#include "context/onegate.h"
#include "context/settings.h"
#include "roles/os/block_devices.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"
#include "roles/os/systemd.h"
#include "roles/plan.h"
#include "roles/role.h"
#include "tests/simulator/onegate_simulator.h"

namespace onehpc::slurmtest {

namespace fs = std::filesystem;

inline ProcessResult Exit(int code, std::string out = "", std::string err = "") {
  ProcessResult r;
  r.exit_code = code;
  r.out = std::move(out);
  r.err = std::move(err);
  return r;
}

class StubBlockDevices : public BlockDevices {
 public:
  Result<std::vector<std::string>> ListDisks(bool) override { return std::vector<std::string>{}; }
  Result<DeviceProbe> Probe(const std::string&) override {
    return Fail(ErrorKind::kInternal, "not used by the Slurm roles");
  }
  Result<std::string> FindByLabel(const std::string&) override {
    return Fail(ErrorKind::kNotFound, "not used by the Slurm roles");
  }
};

class StubMounts : public Mounts {
 public:
  Result<std::optional<MountEntry>> FindByTarget(const std::string&) override {
    return std::optional<MountEntry>();
  }
  Result<std::vector<MountEntry>> FindBySource(const std::string&) override {
    return std::vector<MountEntry>{};
  }
  Status Mount(const MountEntry&) override { return Fail(ErrorKind::kInternal, "not used"); }
  Status Unmount(const std::string&) override { return Fail(ErrorKind::kInternal, "not used"); }
};

/// A machine under a temporary root. systemctl, hostname, munge, unmunge and install are
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
    runner.On({"systemctl", "is-active", "--quiet"}, [this](const Command& c) {
      return Exit(active.count(c.argv[3]) ? 0 : 3);
    });
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
      Write(WantsLink(c.argv[2]), "enabled\n");
      return Exit(0);
    });
    runner.On({"systemctl", "disable"}, [this](const Command& c) {
      fs::remove(root + WantsLink(c.argv[2]));
      return Exit(0);
    });
    runner.On({"hostname"}, [this](const Command& c) {
      Write("/proc/sys/kernel/hostname", c.argv.at(1) + "\n");
      return Exit(0);
    });
    runner.On({"munge", "-n"}, [](const Command&) { return Exit(0, "MUNGE:AAAA:\n"); });
    runner.On({"unmunge"}, [](const Command& c) {
      return c.stdin_data.empty() ? Exit(1, "", "unmunge: no credential") : Exit(0, "STATUS: Success (0)\n");
    });
    runner.On({"install", "-d"}, [](const Command& c) {
      fs::create_directories(c.argv.back());
      return Exit(0);
    });
  }
  ~FakeMachine() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }

  static std::string WantsLink(const std::string& unit) {
    bool timer = unit.size() > 6 && unit.substr(unit.size() - 6) == ".timer";
    return std::string("/etc/systemd/system/") + (timer ? "timers.target" : "multi-user.target") +
           ".wants/" + unit;
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
  /// Argvs of the commands run, excluding the read-only systemctl is-active probes.
  std::vector<std::string> Changes() const {
    std::vector<std::string> out;
    for (const auto& a : runner.Argvs()) {
      if (a.rfind("systemctl is-active", 0) == 0) continue;
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
};

/// A slurmctld seen through scontrol/squeue, with state, answering like Slurm 22.05 did in
/// the lab (messages, exit codes, busy deletes).
class FakeSlurm {
 public:
  struct Node {
    std::string base = "IDLE";  ///< IDLE, MIXED, ALLOCATED, DOWN
    bool drain = false;
    bool not_responding = false;
    std::string reason;
    std::string addr = "10.0.0.99";
    std::vector<std::string> jobs;
  };
  std::map<std::string, Node> nodes;
  bool delete_lies = false;  ///< delete answers rc 0 but keeps the node
  bool down = false;         ///< slurmctld does not answer
  std::vector<std::string> log;  ///< changes applied: "delete n1", "update n1 state=DRAIN ..."

  std::string State(const Node& n) const {
    return n.base + (n.drain ? "+DRAIN" : "") + "+DYNAMIC_NORM" +
           (n.not_responding ? "+NOT_RESPONDING" : "");
  }
  std::string Line(const std::string& name, const Node& n) const {
    std::string line = "NodeName=" + name + " Arch=x86_64 CPUTot=2 AvailableFeatures=one NodeAddr=" +
                       n.addr + " NodeHostName=" + name +
                       " OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC Debian RealMemory=1000 State=" +
                       State(n) + " Partitions=all";
    if (!n.reason.empty()) line += " Reason=" + n.reason + " [root@2026-11-29T16:12:52]";
    return line + "\n";
  }
  void Install(FakeProcessRunner& runner) {
    auto unreachable = [] {
      return Exit(1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)\n");
    };
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
        return Exit(1, "", "scontrol: error: failed to delete nodes " + name +
                               "\ndelete_node nodename=" + name +
                               ": Invalid node name specified\n");
      }
      if (!it->second.jobs.empty() && it->second.base != "DOWN") {
        return Exit(1, "", "scontrol: error: failed to delete nodes " + name +
                               "\ndelete_node nodename=" + name +
                               ": Requested nodes are busy\n");
      }
      log.push_back("delete " + name);
      if (!delete_lies) nodes.erase(it);
      return Exit(0);
    });
    runner.On({"scontrol", "update"}, [this, unreachable](const Command& c) {
      if (down) return unreachable();
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
    runner.On({"squeue"}, [this](const Command&) {
      if (down) return Exit(1, "", "squeue: error: Unable to contact slurm controller\n");
      std::string out;
      for (const auto& [name, n] : nodes) {
        for (const auto& j : n.jobs) out += j + " " + name + "\n";
      }
      return Exit(0, out);
    });
  }
};

/// Simulator specs without partial aggregate initialisation (-Wmissing-field-initializers).
inline sim::RoleSpec SimRole(const std::string& name, int cardinality) {
  sim::RoleSpec r;
  r.name = name;
  r.cardinality = cardinality;
  return r;
}
inline sim::NicSpec SimNic(const std::string& ip, const std::string& network,
                           const std::string& network_id = "1") {
  sim::NicSpec n;
  n.ip = ip;
  n.network = network;
  n.network_id = network_id;
  return n;
}
inline sim::Fault SimFault(sim::FaultKind kind, int status = 500, const std::string& body = "",
                           std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
  sim::Fault f;
  f.kind = kind;
  f.path_prefix = "/service";
  f.status = status;
  f.body = body;
  f.delay = delay;
  return f;
}

/// A OneGate client for a simulator VM (real HTTP on 127.0.0.1, fake clock for its retries).
inline OneGateConfig SimConfig(const sim::OneGateSimulator& sim, const sim::VmHandle& vm) {
  OneGateConfig c;
  c.endpoint = sim.Endpoint();
  c.vmid = std::to_string(vm.id);
  c.token = vm.token;
  c.connect_timeout = Duration(500);
  c.request_timeout = Duration(400);
  c.retry.initial_delay = Duration(100);
  c.retry.max_delay = Duration(400);
  c.retry.max_attempts = 2;
  c.retry.deadline = Duration(5000);
  c.retry.jitter = 0.0;
  c.unauthorized_attempts = 1;
  c.malformed_retries = 0;
  return c;
}

/// Everything a RoleEnv refers to, for one role run.
struct RoleRun {
  RoleRun(FakeMachine& m, const Role& role, ContextVars vars, OneGateClient* onegate,
          PlanMode mode = PlanMode::kApply)
      : plan(mode) {
    context.vars = std::move(vars);
    auto resolved = Settings::Resolve(role.Settings(), context.vars);
    EXPECT_TRUE(resolved) << (resolved ? "" : resolved.error().message);
    if (resolved) settings = std::make_unique<Settings>(std::move(*resolved));
    env = std::make_unique<RoleEnv>(RoleEnv{context, *settings, onegate, m.runner, *m.files,
                                            m.systemd, block_devices, mounts, m.clock, plan,
                                            &publish});
  }
  /// Plan lines "what [outcome]" for the actions that are not keeps.
  std::vector<std::string> Changes() const {
    std::vector<std::string> out;
    for (const auto& a : plan.actions()) {
      if (a.outcome != PlannedAction::Outcome::kKept) out.push_back(a.what);
    }
    return out;
  }
  LoadedContext context;
  std::unique_ptr<Settings> settings;
  Plan plan;
  std::vector<std::pair<std::string, std::string>> publish;
  StubBlockDevices block_devices;
  StubMounts mounts;
  std::unique_ptr<RoleEnv> env;
};

}  // namespace onehpc::slurmtest

#endif  // ONEHPC_TESTS_UNIT_SLURM_TEST_FAKES_H_
