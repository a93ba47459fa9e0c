#include "roles/timers/self_drain.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "common/log.h"
#include "roles/host/address.h"
#include "roles/slurm/nodes.h"
#include "roles/slurm/slurm_client.h"
#include "roles/slurm/slurmd_unit.h"

namespace onehpc {
namespace {

struct Run {
  const SelfDrainOptions& options;
  Clock& clock;
  TimePoint start;
  SelfDrainReport& report;

  void Problem(std::string text) {
    log::Warn("self-drain: {}", text);
    report.problems.push_back(std::move(text));
  }
  bool InBudget(const char* step) {
    if (clock.Now() - start <= options.budget) return true;
    Problem(std::string("skipping ") + step + ": the time budget of " +
            std::to_string(options.budget.count()) + " ms is used up");
    return false;
  }

  // DOWN, then delete; sets report.was_registered / report.deleted.
  void RemoveNode(slurm::SlurmClient& client) {
    const std::string& node = report.node;
    // 0. Only our own registration: the same name registered from another VM's address is
    //    that VM's node (a duplicate name the join refused here), never removed by us.
    if (!options.own_addresses.empty()) {
      auto shown = client.ShowNode(node);
      // NodeAddr may also be a name (the node's own): only an address can be foreign.
      if (shown && shown->has_value() && host::ParseIpv4((*shown)->addr) &&
          std::find(options.own_addresses.begin(), options.own_addresses.end(), (*shown)->addr) ==
              options.own_addresses.end()) {
        log::Warn(
            "self-drain: node {} is registered from {}, no address of this VM: it is "
            "another VM's node under the same name, left alone",
            node, (*shown)->addr);
        report.left_alone = true;
        return;
      }
    }
    // 1. DOWN with a reason: the controller stops scheduling here at once, even if the delete
    //    fails; running jobs end (requeued when requeueable).
    if (!InBudget("DOWN")) return;
    auto down = client.SetState(node, slurm::NodeStateChange::kDown, options.reason);
    if (!down) {
      Problem("setting " + node + " DOWN failed: " + down.error().message);
      if (down.error().message.find("timed out") != std::string::npos) {
        Problem(
            "not trying the delete: the controller does not answer; its reconciler removes "
            "the node once Slurm sees it DOWN");
        return;
      }
    } else if (*down == slurm::NodeChange::kAlreadyGone) {
      log::Info("self-drain: node {} is not registered: nothing to delete", node);
      report.deleted = true;
      return;
    } else {
      report.was_registered = true;
      log::Info("self-drain: node {} set DOWN (reason '{}')", node, options.reason);
    }
    // 2. Delete (one node per call), then check that it is gone (exit codes lie).
    if (!InBudget("delete")) return;
    auto deleted = client.DeleteNodeVerified(node);
    if (!deleted) {
      Problem("deleting " + node + " failed: " + deleted.error().message);
      return;
    }
    report.deleted = true;
    log::Info("self-drain: node {} deleted from Slurm{}", node,
              *deleted == slurm::NodeChange::kAlreadyGone ? " (it was already gone)" : "");
  }
};

}  // namespace

std::vector<std::string> LocalIpv4Addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) out.emplace_back(text);
  }
  freeifaddrs(list);
  return out;
}

std::string ShortHostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  std::string name(buf);
  return name.substr(0, name.find('.'));
}

std::string SelfDrainNodeName(const Files& files) {
  auto unit = files.ReadIfExists(slurm::kSlurmdUnitPath);
  if (unit && unit->has_value()) {
    if (auto name = slurm::SlurmdUnitNodeName(**unit)) return *name;
  }
  log::Info("self-drain: no node name in {}: using the host name", slurm::kSlurmdUnitPath);
  return "";
}

Result<SelfDrainReport> RunSelfDrain(const SelfDrainOptions& options, ProcessRunner& runner,
                                     Systemd& systemd, Clock& clock) {
  SelfDrainReport report;
  report.node = options.node_name.empty() ? ShortHostname() : options.node_name;
  if (!slurm::IsValidNodeName(report.node)) {
    return Fail(ErrorKind::kInvalidInput,
                "self-drain: '" + report.node + "' is not a usable Slurm node name");
  }
  Run run{options, clock, clock.Now(), report};

  std::error_code ec;
  report.had_config = std::filesystem::exists(options.slurm_conf, ec);
  if (!report.had_config) {
    log::Info(
        "self-drain: {} does not exist (slurmd never fetched a configuration, so this VM "
        "never registered): no Slurm node to remove",
        options.slurm_conf);
    report.deleted = true;
  } else {
    slurm::SlurmClientOptions client_options;
    client_options.slurm_conf = options.slurm_conf;
    client_options.timeout = options.command_timeout;
    slurm::SlurmClient client(runner, client_options);
    run.RemoveNode(client);
  }

  // 3. Stop slurmd, always (a deleted node's slurmd never registers again), without waiting for the
  // job: at shutdown slurmd's stop
  //    job is ordered after ours, so waiting would deadlock.
  auto stop = systemd.StopNoBlock(options.slurmd_unit);
  if (!stop) {
    run.Problem("stopping " + options.slurmd_unit + " failed: " + stop.error().message);
  } else {
    report.slurmd_stop_requested = true;
    log::Info("self-drain: stop of {} requested", options.slurmd_unit);
  }
  return report;
}

int SelfDrainExitCode(const Result<SelfDrainReport>& result) {
  if (!result) return 1;
  return (result->deleted || result->left_alone) && result->slurmd_stop_requested ? 0 : 1;
}

}  // namespace onehpc
