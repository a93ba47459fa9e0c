// The Slurm client calls one-hpc makes, with a timeout on each and the semantics learned on
// Slurm 22.05 (tested against it in tests/integration/slurm_real_test.cc) and 24.11 (the VM
// smoke on Debian 13): one node per delete, "Invalid node name specified" means the node is
// already gone, and exit codes are not trusted alone — callers that must know verify with
// ShowNode (or the next ShowNodes).
//
// Nodes are read as JSON where scontrol has it (`scontrol --json`, Slurm 23.02 and later): a
// reason or an OS string with "Key=" in it cannot split a node's record there. The first
// listing of a client asks for JSON; Slurm 22.05 answers "unrecognized option '--json'" (the
// one process more it costs per client) and the client reads the text from then on, as it
// does when the JSON plugin is missing or its document cannot be read (logged). Any other
// failure (slurmctld down) is returned as it is. A client that got JSON once keeps asking for
// it. The jobs are read with squeue's format strings on every version (a few columns per job,
// where `squeue --json` prints about a hundred fields per job).
#ifndef ONEHPC_ROLES_SLURM_SLURM_CLIENT_H_
#define ONEHPC_ROLES_SLURM_SLURM_CLIENT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "roles/os/process.h"
#include "roles/slurm/nodes.h"

namespace onehpc::slurm {

struct SlurmClientOptions {
  /// SLURM_CONF for every call; "" = Slurm's own lookup (/etc/slurm/slurm.conf, or the
  /// configless cache /run/slurm/conf on a worker).
  std::string slurm_conf;
  Duration timeout{10000};  ///< per call
  std::string scontrol = "scontrol";
  std::string squeue = "squeue";
  std::string sinfo = "sinfo";
  /// Ask scontrol for JSON first (false: the text only).
  bool json = true;
};

/// What a state change or delete found.
enum class NodeChange {
  kDone,         ///< the call succeeded
  kAlreadyGone,  ///< Slurm does not know the node ("Invalid node name specified")
};

/// The state changes one-hpc makes.
enum class NodeStateChange { kDown, kDrain, kResume };

/// Runs scontrol/squeue through a ProcessRunner. Every method is exactly one process.
class SlurmClient {
 public:
  SlurmClient(ProcessRunner& runner, SlurmClientOptions options);

  /// `scontrol ping`: true when the primary controller answers "is UP".
  Result<bool> Ping();
  /// `scontrol --json show nodes`, or `scontrol -o show nodes` (see above).
  Result<std::vector<SlurmNode>> ShowNodes();
  /// `scontrol --json show node NAME` or `scontrol -o show node NAME`; nullopt when Slurm
  /// says "Node NAME not found".
  Result<std::optional<SlurmNode>> ShowNode(const std::string& name);
  /// `squeue -h -a -t RUNNING,SUSPENDED,COMPLETING -o "%i %N"`: node → ids of the jobs that
  /// still hold it.
  Result<std::map<std::string, std::vector<std::string>>> ActiveJobsByNode();
  /// `sinfo -h -a -o %D`: how many nodes slurmctld holds (its lines, one per partition and
  /// state, summed: every node is in the one partition). A few lines whatever the nodes.
  Result<int> NodeCount();
  /// `squeue -h -a -t PENDING -o "%i|%r|%D"`: the jobs that wait, with their reason and the
  /// nodes they ask for.
  Result<std::vector<PendingJob>> PendingJobs();
  /// `scontrol update jobid=ID admincomment=TEXT` (what `scontrol show job` shows the
  /// operator). kInvalidInput for an id that is not [0-9_]+ or a text with a newline.
  Status SetJobAdminComment(const std::string& job_id, const std::string& text);
  /// `scontrol delete nodename=NAME` (one node). An error (kProcess) quotes scontrol's
  /// stderr, e.g. "Requested nodes are busy".
  Result<NodeChange> DeleteNode(const std::string& name);
  /// `scontrol update nodename=NAME state=DOWN|DRAIN|RESUME [reason=REASON]`.
  Result<NodeChange> SetState(const std::string& name, NodeStateChange change,
                              const std::string& reason);
  /// `scontrol update nodename=NAME nodeaddr=ADDR` (a re-registered name keeps its
  /// old address).
  Result<NodeChange> SetNodeAddr(const std::string& name, const std::string& addr);

  /// Delete, then ShowNode to make sure the node is gone (exit codes lie).
  Result<NodeChange> DeleteNodeVerified(const std::string& name);

  /// Processes started so far.
  int calls() const { return calls_; }
  /// Whether this client reads nodes as JSON: nullopt until its first listing.
  std::optional<bool> reads_json() const { return json_; }
  const SlurmClientOptions& options() const { return options_; }

 private:
  Result<ProcessResult> Run(std::vector<std::string> argv);
  Result<NodeChange> Change(const std::string& name, std::vector<std::string> argv,
                            const std::string& what);
  /// `scontrol --json show ARGS...` while JSON is possible: the nodes, or nullopt when this
  /// scontrol has no usable JSON (the client then reads text), or scontrol's error. `name`:
  /// a single node's "not found" is an empty list.
  Result<std::optional<std::vector<SlurmNode>>> ShowJson(const std::vector<std::string>& what,
                                                         const std::string& name);
  ProcessRunner& runner_;
  SlurmClientOptions options_;
  int calls_ = 0;
  std::optional<bool> json_;
};

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_SLURM_CLIENT_H_
