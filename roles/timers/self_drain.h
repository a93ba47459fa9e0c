// `one-hpc self-drain`: the ExecStop of oneslurm-self-drain.service on a worker. At shutdown
// (ordered After=slurmd, munge and the network, so it runs while they are still up) it sets
// this VM's node DOWN with a reason, deletes it, and stops slurmd (a deleted node whose slurmd
// keeps running never registers again). Every call has a short timeout and the whole
// run is bounded well below the unit's TimeoutStopSec, so it never hangs a shutdown.
#ifndef ONEHPC_ROLES_TIMERS_SELF_DRAIN_H_
#define ONEHPC_ROLES_TIMERS_SELF_DRAIN_H_

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "roles/names.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/os/systemd.h"

namespace onehpc {

struct SelfDrainOptions {
  std::string node_name;  ///< "" = the short host name (SelfDrainNodeName gives the right one)
  /// The configless config slurmd fetched; without it there is no controller to talk to.
  std::string slurm_conf = slurm::kConfiglessSlurmConf;
  std::string reason = "one-hpc self-drain: VM shutting down";
  Duration command_timeout{10000};  ///< per scontrol call
  /// No Slurm call starts after this; slurmd is stopped regardless (TimeoutStopSec is 90 s).
  Duration budget{45000};
  std::string slurmd_unit = slurm::kSlurmdUnit;
  /// This machine's IPv4 addresses. When given, a node registered from another address is
  /// another VM's (the same name on two VMs): it is left alone. Empty: no check.
  std::vector<std::string> own_addresses;
};

/// The name slurmd runs with, from the slurmd unit the worker wrote (`-N NAME`): a host name
/// changed by hand since then does not make the self-drain look for another node. "" (the host
/// name, logged) when there is no such unit.
std::string SelfDrainNodeName(const Files& files);

struct SelfDrainReport {
  std::string node;
  bool had_config = false;  ///< the configless config existed
  bool was_registered = false;
  bool deleted = false;  ///< verified gone (or was never there)
  bool slurmd_stop_requested = false;
  /// The node is registered from another VM's address: not ours to remove.
  bool left_alone = false;
  std::vector<std::string> problems;  ///< each also logged
};

/// Runs the sequence; never fails early: each step is tried and its problem recorded. Returns
/// an error only for an invalid node name.
Result<SelfDrainReport> RunSelfDrain(const SelfDrainOptions& options, ProcessRunner& runner,
                                     Systemd& systemd, Clock& clock);

/// Exit status for `one-hpc self-drain`: 0 when the node is gone (or was never registered, or
/// is another VM's) and the slurmd stop was requested, else 1 (shown in the journal; a shutdown
/// goes on either way).
int SelfDrainExitCode(const Result<SelfDrainReport>& result);

/// The short host name of this machine (up to the first '.'), "" on failure.
std::string ShortHostname();

/// The IPv4 addresses of this machine's interfaces (getifaddrs), loopback excluded.
std::vector<std::string> LocalIpv4Addresses();

}  // namespace onehpc

#endif  // ONEHPC_ROLES_TIMERS_SELF_DRAIN_H_
