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

/// The compute address of an Open OnDemand VM: the last NIC of the context (NIC 0 is the
/// management network, NIC 1 the compute network; with one NIC it is that one).
Result<std::string> ComputeAddress(const ContextVars& vars);

}  // namespace onehpc::host

#endif  // ONEHPC_ROLES_HOST_ADDRESS_H_
