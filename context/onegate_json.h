// Typed views over what OneGate returns: a VM document and a service document, parsed
// tolerantly (strings for numbers, {} for empty, a NIC object or an array).
#ifndef ONEHPC_CONTEXT_ONEGATE_JSON_H_
#define ONEHPC_CONTEXT_ONEGATE_JSON_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace onehpc {

// ---- Views over the JSON (tolerant: strings for numbers, {} for empty, NIC object or array)

struct VmNic {
  std::string nic_id;  ///< NIC_ID (extended) or derived from NAME "NIC<n>"
  std::string name;    ///< NAME, e.g. "NIC0" (may be empty in extended output)
  std::string ip;      ///< IP, empty when none
  std::string ip6;     ///< IP6_GLOBAL, else IP6
  std::string mac;
  std::string network;  ///< NETWORK name
  std::string network_id;
};

/// One entry of TEMPLATE.DISK (extended service output: the live, unfiltered VM hash).
struct VmDisk {
  std::string disk_id;
  std::string target;       ///< TARGET, the guest's device name as OpenNebula asks for it ("vdb")
  std::string image;        ///< IMAGE: the image's name; empty for a volatile disk
  std::string type;         ///< TYPE: "fs"/"swap" for volatile disks, the image's disk type else
  bool persistent = false;  ///< PERSISTENT=YES: the image outlives the VM
  std::string size_mb;      ///< SIZE
};

/// VM STATE values (OpenNebula's VirtualMachine::VmState) the roles act on.
inline constexpr int kVmStateActive = 3;
inline constexpr int kVmStateDone = 6;
inline constexpr int kVmStateFailed = 7;  ///< obsolete, still defined by oned

struct VmInfo {
  int id = -1;
  std::string name;
  int state = -1;
  int lcm_state = -1;
  /// STIME: when the VM was created (seconds since the epoch; extended output only, else 0).
  long long stime = 0;
  /// String-valued USER_TEMPLATE attributes; `{}` reads as ""; nested objects are skipped.
  std::map<std::string, std::string> user_template;
  /// False when the VM object had no USER_TEMPLATE object at all (OneGate always sends one:
  /// an answer without it is not understood).
  bool has_user_template = false;
  /// USER_TEMPLATE attributes whose value is not text (an array from a repeated key, a
  /// non-empty object from a vector attribute): they are in neither `user_template` nor "".
  std::set<std::string> non_text_attrs;
  std::vector<VmNic> nics;
  /// TEMPLATE.DISK, in template order; `disks_listed` is false when there is no DISK at all
  /// (GET /vm filters it out; an extended service document has it).
  std::vector<VmDisk> disks;
  bool disks_listed = false;
  /// TEMPLATE.CONTEXT (only in extended service output); secrets: never log.
  std::map<std::string, std::string> context;
  /// OpenNebula 6.10 appends entries holding only an IP (external IPs found in MONITORING)
  /// to TEMPLATE.NIC; they are not NICs of the VM and are kept here instead of in `nics`.
  std::vector<std::string> external_ips;

  /// USER_TEMPLATE value or "" when absent.
  std::string Attr(const std::string& key) const;
};

struct ServiceNode {
  int vm_id = -1;            ///< deploy_id
  std::string vm_name;       ///< vm_info.VM.NAME when present
  std::optional<VmInfo> vm;  ///< full VM (extended output only)
};

struct ServiceRole {
  std::string name;
  int cardinality = 0;
  int state = -1;
  std::vector<ServiceNode> nodes;
};

struct ServiceInfo {
  std::string id;
  std::string name;
  int state = -1;
  std::vector<ServiceRole> roles;

  const ServiceRole* FindRole(const std::string& name) const;
};

/// {"VM": {...}} from GET /vm or /vms/:id. kInvalidInput on malformed or unexpected JSON;
/// VM.ID is required, a present but non-numeric STATE/LCM_STATE is an error naming it.
/// Error messages never quote the document (it may carry secrets).
Result<VmInfo> ParseVmJson(std::string_view json);
/// {"SERVICE": {...}} from GET /service, compact or extended. Required: SERVICE.roles and
/// each role's name and cardinality and each node's deploy_id (errors name the path, e.g.
/// "SERVICE.roles[1].nodes[0].deploy_id"). A node's vm_info.VM is parsed as a full VmInfo
/// when it carries more than the compact six strings (extended output).
Result<ServiceInfo> ParseServiceJson(std::string_view json);

}  // namespace onehpc

#endif  // ONEHPC_CONTEXT_ONEGATE_JSON_H_
