// What Slurm 22.05 prints about nodes and jobs, parsed: `scontrol -o show nodes` (one line
// per node, Key=Value words; scontrol has no --json before 23.02), `squeue -o "%i %N"` and
// Slurm host lists ("n[1-3,7],gpu01").
#ifndef ONEHPC_ROLES_SLURM_NODES_H_
#define ONEHPC_ROLES_SLURM_NODES_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace onehpc::slurm {

/// One node of `scontrol -o show nodes`.
struct SlurmNode {
  std::string name;         ///< NodeName
  std::string addr;         ///< NodeAddr
  std::string hostname;     ///< NodeHostName
  std::string state;        ///< State as printed, e.g. "IDLE+DYNAMIC_NORM+NOT_RESPONDING"
  std::string reason;       ///< Reason without Slurm's " [user@time]" suffix; "" if none
  std::string reason_time;  ///< the time of that suffix (YYYY-MM-DDTHH:MM:SS); "" if none
  std::string features;     ///< AvailableFeatures
  /// Every Key=Value of the line (first occurrence wins; values may contain spaces).
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
