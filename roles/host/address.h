// IPv4 helpers and the choice of this VM's address on the controller's network.
#ifndef ONEHPC_ROLES_HOST_ADDRESS_H_
#define ONEHPC_ROLES_HOST_ADDRESS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "context/context_file.h"
#include "context/onegate.h"

namespace onehpc::host {

/// Dotted-quad IPv4 → host-order integer; nullopt for anything else (no leading zeros,
/// exactly four parts 0..255).
std::optional<uint32_t> ParseIpv4(std::string_view text);
/// "255.255.255.0" or a prefix length "24" → mask; nullopt if not a contiguous mask.
std::optional<uint32_t> ParseMask(std::string_view text);

/// The context's ETHn_IP values with their n, in n order (only valid IPv4 addresses).
struct ContextNic {
  int index = 0;
  std::string ip;
  std::string mask;  ///< ETHn_MASK ("" when absent)
  std::string mac;   ///< ETHn_MAC ("" when absent)
};
std::vector<ContextNic> ContextNics(const ContextVars& vars);

/// The controller's own address: ETH0_IP, else the lowest-numbered ETHn_IP (the first NIC of a
/// OneFlow VM is the service network). kInvalidInput when the context has none.
Result<std::string> ControllerAddress(const ContextVars& vars);

/// An address choice and how it was made (for the log and the plan).
struct AddressChoice {
  std::string ip;
  std::string how;
};

/// This worker's address on the controller's network:
/// 1. the network of the controller NIC that holds `controller_addr` (extended service
///    document), then this VM's NIC on that network (first IPv4 in NIC order);
/// 2. else the context's ETHn_IP whose ETHn_MASK subnet contains `controller_addr`.
/// kNotFound naming what was compared when neither matches.
Result<AddressChoice> SelectWorkerAddress(const std::string& controller_addr,
                                          const std::vector<VmNic>& controller_nics,
                                          const std::vector<VmNic>& own_nics,
                                          const ContextVars& vars);

/// The setting that names the compute network of an Open OnDemand VM.
inline constexpr char kComputeNetworkSetting[] = "ONEAPP_COMPUTE_NETWORK";
/// The NIC name the service templates give the compute NIC (NIC attribute NAME).
inline constexpr char kComputeNicName[] = "compute";

/// This VM's NIC on the compute network, and how it was chosen (for the log and the plan).
struct ComputeNic {
  ContextNic nic;
  std::string how;
};

/// True when ChooseComputeNic needs this VM's NICs as OneGate shows them: a network is named,
/// or the context has more than one IPv4 NIC.
bool ComputeNicNeedsOneGate(const ContextVars& vars, const std::string& network);

/// The compute NIC of an Open OnDemand VM (the exports, Squid's localnet and the portal's
/// trusted address live on it), never "the last NIC", so that a NIC added later moves nothing:
/// 1. `network` (ONEAPP_COMPUTE_NETWORK) set: this VM's NIC on the virtual network of that
///    name or numeric id;
/// 2. else this VM's NIC named "compute" (the service templates name it so);
/// 3. else the context's only IPv4 NIC.
/// `own_nics` are this VM's NICs from OneGate (nullptr: not available); a OneGate NIC is
/// matched to its ETHn by MAC, else by address. kInvalidInput naming what was compared and
/// what to set, when no rule applies.
Result<ComputeNic> ChooseComputeNic(const ContextVars& vars, const std::string& network,
                                    const std::vector<VmNic>* own_nics);

/// This VM's NICs as OneGate shows them: GET /vm (names, networks, MACs, addresses), or with
/// `with_network_ids` its node `vm_id` in the extended service document (adds NETWORK_ID).
Result<std::vector<VmNic>> OwnNics(OneGateClient& onegate, int vm_id, bool with_network_ids);

/// ChooseComputeNic, asking OneGate (`onegate` may be null) only when it is needed.
Result<ComputeNic> FindComputeNic(const ContextVars& vars, const std::string& network,
                                  OneGateClient* onegate);

}  // namespace onehpc::host

#endif  // ONEHPC_ROLES_HOST_ADDRESS_H_
