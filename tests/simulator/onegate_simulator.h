// An in-process (or standalone) HTTP server that models OneGate and the OneFlow service
// behind it, following ../shared/reference/onegate-api.md and oneflow.md.
// The names below are the contract used by the client tests, the lab and the benchmarks;
// extend it, but keep these.
#ifndef ONEHPC_TESTS_SIMULATOR_ONEGATE_SIMULATOR_H_
#define ONEHPC_TESTS_SIMULATOR_ONEGATE_SIMULATOR_H_

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onehpc::sim {

struct NicSpec {
  std::string ip;        ///< may be empty: a node that has no IP yet
  std::string mac;
  std::string network;   ///< network name
  std::string network_id;
};

struct VmSpec {
  std::string name;  ///< default "<role>_<n>_(service_<id>)"
  std::vector<NicSpec> nics;
  std::map<std::string, std::string> context;        ///< TEMPLATE.CONTEXT
  std::map<std::string, std::string> user_template;  ///< extra USER_TEMPLATE attributes
};

struct RoleSpec {
  std::string name;
  int cardinality = 1;  ///< informational: VMs are added with AddVm
  int min_vms = 0;
  int max_vms = 100;
  int cooldown_seconds = 30;
  std::vector<std::string> parents;
};

struct VmHandle {
  int id = -1;
  std::string token;  ///< what token.txt would hold
};

enum class FaultKind {
  kStatus,     ///< answer `status` with `body` (plain text, JSON content type)
  kHang,       ///< accept, read the request, then send nothing for `delay`, then close
  kSlow,       ///< wait `delay`, then answer normally
  kTruncated,  ///< announce the full Content-Length but send only half the body
  kMalformed,  ///< 200 with a body that is not JSON
  kReset,      ///< close the connection without answering
};

/// A fault applies to requests whose method matches (empty = any) and whose path starts
/// with `path_prefix` (empty = any), for the next `times` requests (-1 = until cleared).
struct Fault {
  FaultKind kind = FaultKind::kStatus;
  std::string method;
  std::string path_prefix;
  int status = 500;
  std::string body = "Internal error";
  std::chrono::milliseconds delay{0};
  int times = -1;
};

struct RecordedRequest {
  std::string method;
  std::string path;   ///< without the query string
  std::string query;
  std::string body;
  int vm_id = -1;     ///< from X-ONEGATE-VMID, -1 if absent or not a number
  int status = 0;     ///< what the simulator answered (0 for hang/reset)
};

class OneGateSimulator {
 public:
  OneGateSimulator();
  ~OneGateSimulator();
  OneGateSimulator(const OneGateSimulator&) = delete;
  OneGateSimulator& operator=(const OneGateSimulator&) = delete;

  /// Listens on host:port (port 0 = any free port) in a background thread; returns the
  /// port, or -1 on failure.
  int Start(const std::string& host = "127.0.0.1", int port = 0);
  void Stop();
  /// "http://host:port"
  std::string Endpoint() const;

  // ---- model (all thread-safe)
  /// Creates a service in state RUNNING (2) with these roles; returns its id.
  int CreateService(const std::string& name, const std::vector<RoleSpec>& roles);
  /// Adds a VM to a role of a service (or to no service when service_id < 0).
  VmHandle AddVm(int service_id, const std::string& role, const VmSpec& spec = {});
  /// Operator view of a VM's USER_TEMPLATE value ("" if absent).
  std::string UserAttr(int vm_id, const std::string& key) const;
  /// Operator-side cardinality change (what `oneflow scale` does before VMs exist).
  bool SetCardinality(int service_id, const std::string& role, int cardinality);
  /// Removes a VM from the service; hard = no chance to run shutdown hooks (modelled only
  /// in the record: the VM disappears from the service either way).
  void TerminateVm(int vm_id, bool hard);

  // ---- faults
  void InjectFault(const Fault& fault);
  void ClearFaults();

  // ---- observation
  std::vector<RecordedRequest> Requests() const;
  void ClearRequests();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onehpc::sim

#endif  // ONEHPC_TESTS_SIMULATOR_ONEGATE_SIMULATOR_H_
