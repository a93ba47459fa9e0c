// An in-process (or standalone) HTTP server that models OneGate and the OneFlow service
// behind it, following ../shared/reference/onegate-api.md and oneflow.md.
// The names below are the contract used by the client tests, the lab and the benchmarks;
// extend it, but keep these.
#ifndef ONEHPC_TESTS_SIMULATOR_ONEGATE_SIMULATOR_H_
#define ONEHPC_TESTS_SIMULATOR_ONEGATE_SIMULATOR_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onehpc::sim {

struct NicSpec {
  std::string ip;  ///< may be empty: a node that has no IP yet
  std::string mac;
  std::string network;  ///< network name
  std::string network_id;
  std::string name;  ///< NIC NAME; "" = "NIC<index>" as OpenNebula names an unnamed NIC
};

struct VmSpec {
  std::string name;  ///< default "<role>_<n>_(service_<id>)"
  std::vector<NicSpec> nics;
  std::map<std::string, std::string> context;  ///< TEMPLATE.CONTEXT
  /// TEMPLATE.DISK entries (DISK_ID, IMAGE, PERSISTENT, TARGET, TYPE, SIZE, ...), in order;
  /// only in the unfiltered VM hash (extended service output), as OneGate does.
  std::vector<std::map<std::string, std::string>> disks;
  std::map<std::string, std::string> user_template;  ///< extra USER_TEMPLATE attributes
  /// Vector attributes of the USER_TEMPLATE (e.g. USER_INPUTS = [ONEAPP_X = "..."]).
  std::map<std::string, std::map<std::string, std::string>> user_vectors;
  int state = 3;      ///< initial VM STATE (3 = ACTIVE)
  int lcm_state = 3;  ///< initial LCM_STATE (3 = RUNNING)
  /// External IPs OpenNebula found in the VM's MONITORING (GUEST_IP, AWS_*, AZ_*, SL_*): under
  /// OpenNebula 6.10 (SetOpenNebulaVersion) GET /vm and GET /vms/:id append each to NIC as an
  /// entry holding only {"IP": ...}; 7.x dropped it (onegate-api.md section 5).
  std::vector<std::string> external_ips;
};

struct RoleSpec {
  std::string name;
  int cardinality = 1;  ///< informational: VMs are added with AddVm
  int min_vms = 0;
  int max_vms = 100;
  int cooldown_seconds = 30;
  std::vector<std::string> parents;

  /// Overrides cooldown_seconds when >= 0 (tests and the lab want short cooldowns).
  int cooldown_ms = -1;
  /// Scale-up creates the new VMs itself (like OneFlow) from `vm_template`; when false,
  /// a scale-up waits for AddVm to supply the new nodes. A template NIC whose ip ends in
  /// ".0" gets a fresh address in that /24 for every new VM; an empty ip stays empty.
  bool auto_provision = false;
  VmSpec vm_template;
  std::chrono::milliseconds provision_delay{0};  ///< between scale-up and each new node
  std::chrono::milliseconds ip_delay{0};         ///< a new node stays PENDING without IPs this long
  /// How long a scale-down victim stays in nodes[] (LCM SHUTDOWN) before it is DONE.
  std::chrono::milliseconds shutdown_delay{0};
  bool hard_shutdown = false;  ///< shutdown_action terminate-hard instead of terminate
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
  kMalformed,  ///< 200 with `body` (the default "Internal error" is not JSON)
  kReset,      ///< close the connection without answering (TCP RST)
};
// kStatus, kHang, kMalformed and kReset stand for a proxy or network failure: the request
// never reaches the model. kSlow and kTruncated run the request (its effects happen).
// Faults never apply to the operator API (/_sim/...).

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
  std::string path;  ///< without the query string
  std::string query;
  std::string body;
  int vm_id = -1;             ///< from X-ONEGATE-VMID, -1 if absent or not a number
  int status = 0;             ///< what the simulator answered (0 for hang/reset)
  size_t response_bytes = 0;  ///< the length of the body it answered with
};

/// A VM that left its service: scale-down victim, operator termination or a terminate
/// action through OneGate.
struct TerminationRecord {
  int vm_id = -1;
  bool hard = false;  ///< no chance to run shutdown hooks
  std::string cause;  ///< "scale-down", "operator" or "action"
};

/// OneFlow service and role states (oneflow.md section 5) and the VM states used here.
namespace states {
inline constexpr int kPending = 0;
inline constexpr int kDeploying = 1;
inline constexpr int kRunning = 2;
inline constexpr int kWarning = 4;
inline constexpr int kDone = 5;
inline constexpr int kScaling = 8;
inline constexpr int kFailedScaling = 9;
inline constexpr int kCooldown = 10;
inline constexpr int kVmPending = 1;   ///< VM STATE PENDING (LCM 0)
inline constexpr int kVmActive = 3;    ///< VM STATE ACTIVE
inline constexpr int kVmDone = 6;      ///< VM STATE DONE
inline constexpr int kVmPoweroff = 8;  ///< VM STATE POWEROFF
inline constexpr int kLcmRunning = 3;
inline constexpr int kLcmShutdown = 12;
}  // namespace states

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
  /// Forced: ignores min/max and the service state; false for an unknown role or N < 0.
  bool SetCardinality(int service_id, const std::string& role, int cardinality);
  /// Removes a VM from the service; hard = no chance to run shutdown hooks (modelled only
  /// in the record: the VM disappears from the service either way).
  void TerminateVm(int vm_id, bool hard);

  // ---- more model controls (all thread-safe)
  /// Forces a service state (e.g. states::kFailedScaling); -1 returns to the computed one.
  bool SetServiceState(int service_id, int state);
  /// Forces a role state; -1 returns to the computed one.
  bool SetRoleState(int service_id, const std::string& role, int state);
  /// Sets a VM's STATE/LCM_STATE (e.g. POWEROFF puts its role in WARNING).
  bool SetVmState(int vm_id, int state, int lcm_state);
  /// Gives NIC `nic_index` of a VM an address (a node that gets its IP late).
  bool SetNicIp(int vm_id, int nic_index, const std::string& ip);
  /// Attaches a NIC (onevm nic-attach): it becomes the VM's last NIC.
  bool AddNic(int vm_id, const NicSpec& nic);
  /// Attaches a disk (onevm disk-attach): it becomes the VM's last DISK.
  bool AddDisk(int vm_id, const std::map<std::string, std::string>& disk);
  /// Operator-side USER_TEMPLATE change (no OneGate rules applied).
  bool SetUserAttr(int vm_id, const std::string& key, const std::string& value);
  bool EraseUserAttr(int vm_id, const std::string& key);
  /// The whole USER_TEMPLATE; vector attributes and repeated keys as compact JSON text.
  std::map<std::string, std::string> UserTemplate(int vm_id) const;
  /// The VM's token ("" if unknown).
  std::string Token(int vm_id) const;
  /// What `GET /service` answers to a member (compact or extended), "" if unknown.
  std::string ServiceJson(int service_id, bool extended = false) const;
  /// The unfiltered VM hash (`{"VM":{...}}`, as in extended service output), "" if unknown.
  std::string VmJson(int vm_id) const;
  int ServiceState(int service_id) const;                                 ///< -1 if unknown
  int RoleState(int service_id, const std::string& role) const;           ///< -1 if unknown
  int Cardinality(int service_id, const std::string& role) const;         ///< -1 if unknown
  std::vector<int> Nodes(int service_id, const std::string& role) const;  ///< oldest first
  int VmState(int vm_id) const;                                           ///< STATE, -1 if unknown
  /// Moves the simulator's clock forward (cooldowns, provisioning delays) without sleeping.
  void AdvanceTime(std::chrono::milliseconds by);
  /// VMs terminated so far, in order.
  std::vector<TerminationRecord> Terminations() const;
  /// Called whenever a VM is terminated, outside the simulator's lock, from any of its
  /// threads (HTTP workers, the timer, or the caller of a model method).
  void SetTerminationHook(std::function<void(const TerminationRecord&)> hook);

  // ---- OneGate server configuration (onegate-server.conf)
  /// Permission switch such as "vm.show", "vm.update_by_id", "service.change_cardinality";
  /// all true by default. A disabled route answers 403 before authentication.
  void SetPermission(const std::string& key, bool allowed);
  /// :restricted_attrs (default SCHED_REQUIREMENTS, SERVICE_ID, ROLE_NAME).
  void SetRestrictedAttributes(std::vector<std::string> keys);
  /// :restricted_actions (default reboot).
  void SetRestrictedActions(std::vector<std::string> actions);
  /// The OpenNebula release whose OneGate to model: "7" (default) or "6.10" (its GET /vm and
  /// GET /vms/:id append the VM's external IPs to NIC, VmSpec::external_ips).
  void SetOpenNebulaVersion(const std::string& version);
  /// Serves the operator API under /_sim/ (off by default: /_sim/... is then an unknown
  /// route like any other). See onegate_simulator.cc for the routes.
  void EnableOperatorApi(bool enabled);
  /// HTTP worker threads (default 32); call before Start.
  void SetWorkerThreads(int threads);

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
