// What Slurm prints about nodes and jobs, parsed: `scontrol -o show nodes` (one line per node,
// Key=Value words: Slurm 22.05, which has no --json), `scontrol --json show nodes` (23.02 and
// later: Slurm 24.11 on Debian 13), `squeue -o "%i %N"` and Slurm host lists ("n[1-3,7],gpu01").
#ifndef ONEHPC_ROLES_SLURM_NODES_H_
#define ONEHPC_ROLES_SLURM_NODES_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace onehpc::slurm {

/// One node of `scontrol show nodes`, text or JSON.
struct SlurmNode {
  std::string name;      ///< NodeName (JSON: name)
  std::string addr;      ///< NodeAddr (address)
  std::string hostname;  ///< NodeHostName (hostname)
  /// State as the text prints it, e.g. "IDLE+DYNAMIC_NORM+NOT_RESPONDING" (JSON: the state
  /// array joined by '+': the base state first, the same flags in another order, which
  /// BaseState and HasFlag do not mind).
  std::string state;
  std::string reason;  ///< Reason without Slurm's " [user@time]" suffix; "" if none
  /// When the reason was set (seconds since the epoch): the text's suffix time, JSON's
  /// reason_changed_at; nullopt if none.
  std::optional<long long> reason_since;
  /// When the node last ran a job (LastBusyTime, JSON last_busy); nullopt if unknown.
  std::optional<long long> last_busy;
  std::string features;  ///< AvailableFeatures, comma-separated (JSON: features joined by ',')
  std::string gres;      ///< Gres, e.g. "gpu:2" ("" or "(null)" when none)
  /// Every Key=Value of a text line (first occurrence wins; values may contain spaces); empty
  /// for a node read from JSON.
  std::map<std::string, std::string> fields;

  /// The base state: the part of State before the first '+', e.g. "IDLE", "DOWN", "MIXED".
  std::string BaseState() const;
  /// True if State has this '+'-separated flag (e.g. "DRAIN", "NOT_RESPONDING").
  bool HasFlag(std::string_view flag) const;
  bool IsDown() const { return BaseState() == "DOWN"; }
  bool IsNotResponding() const { return HasFlag("NOT_RESPONDING"); }
  bool IsDrain() const { return HasFlag("DRAIN"); }
};

/// Parses `scontrol -o show nodes` / `scontrol -o show node X` output. "No nodes in the
/// system" (and empty output) is an empty list. A line without NodeName= is an error.
Result<std::vector<SlurmNode>> ParseShowNodes(std::string_view output);

/// Parses `scontrol --json show nodes` / `scontrol --json show node X` (Slurm 23.02 and
/// later): the same members as ParseShowNodes but fields. A document that is not JSON, has no
/// "nodes" array or a node without a name is an error; so is a non-empty "errors" array.
Result<std::vector<SlurmNode>> ParseShowNodesJson(std::string_view output);

/// A time as Slurm prints it (YYYY-MM-DDTHH:MM:SS, slurmctld's local time) in seconds since
/// the epoch; nullopt for "None", "Unknown", "" or anything else.
std::optional<long long> ParseSlurmTime(std::string_view text);

/// A job of `squeue -h -t PENDING -o "%i|%r|%D"`.
struct PendingJob {
  std::string id;
  std::string reason;  ///< Slurm's pending reason (%r), e.g. "Resources", "Dependency"
  int nodes = 1;       ///< nodes it asks for (%D)
};
/// Parses those lines; a line that is not `id|reason|nodes` is an error.
Result<std::vector<PendingJob>> ParsePendingJobs(std::string_view output);

/// Expands a Slurm host list: "n[1-3,07-08],gpu" → n1 n2 n3 n07 n08 gpu; several bracket
/// groups multiply ("r[1-2]n[1-2]"). kInvalidInput on unbalanced brackets, bad ranges or
/// more than `limit` names.
Result<std::vector<std::string>> ExpandHostlist(std::string_view hostlist, size_t limit = 1000000);

/// Parses `squeue -h -o "%i %N"` lines into node name → job ids on it.
Result<std::map<std::string, std::vector<std::string>>> ParseSqueueJobNodes(
    std::string_view output);

/// A node name we are willing to put into an scontrol argument: [A-Za-z0-9._-], not starting
/// with '-' or '.', at most 64 characters. Rejects ',' and brackets, which scontrol would read
/// as a host list (a multi-name delete partially succeeds).
bool IsValidNodeName(std::string_view name);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_NODES_H_
