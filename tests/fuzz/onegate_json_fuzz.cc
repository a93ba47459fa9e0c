// Feeds arbitrary bytes to ParseVmJson and ParseServiceJson: no crash, leak, UB or escaping
// exception; a successful parse must be internally consistent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "context/onegate.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto vm = onehpc::ParseVmJson(text);
  if (vm) {
    for (const auto& nic : vm->nics) {
      // Entries kept as NICs are identified by something other than their IP.
      if (nic.name.empty() && nic.nic_id.empty() && nic.mac.empty() && nic.network.empty() &&
          nic.network_id.empty()) {
        std::abort();
      }
    }
    (void)vm->Attr("READY");
  } else if (vm.error().message.empty()) {
    std::abort();
  }
  auto service = onehpc::ParseServiceJson(text);
  if (service) {
    for (const auto& role : service->roles) {
      if (role.name.empty()) std::abort();
      if (service->FindRole(role.name) == nullptr) std::abort();
    }
  } else if (service.error().message.empty()) {
    std::abort();
  }
  return 0;
}
