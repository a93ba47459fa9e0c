#include "roles/host/address.h"

#include <algorithm>
#include <cctype>

namespace onehpc::host {

std::optional<uint32_t> ParseIpv4(std::string_view text) {
  uint32_t value = 0;
  int parts = 0;
  size_t pos = 0;
  while (parts < 4) {
    size_t end = text.find('.', pos);
    std::string_view part =
        text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    if (part.empty() || part.size() > 3) return std::nullopt;
    if (part.size() > 1 && part[0] == '0') return std::nullopt;
    int n = 0;
    for (char c : part) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      n = n * 10 + (c - '0');
    }
    if (n > 255) return std::nullopt;
    value = (value << 8) | static_cast<uint32_t>(n);
    ++parts;
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  if (parts != 4 || text.find('.', pos) != std::string_view::npos) return std::nullopt;
  // The loop stops after 4 parts; make sure nothing follows the fourth.
  size_t dots = std::count(text.begin(), text.end(), '.');
  if (dots != 3) return std::nullopt;
  return value;
}

std::optional<uint32_t> ParseMask(std::string_view text) {
  uint32_t mask = 0;
  if (!text.empty() && text.find('.') == std::string_view::npos) {
    if (text.size() > 2) return std::nullopt;
    int bits = 0;
    for (char c : text) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      bits = bits * 10 + (c - '0');
    }
    if (bits > 32) return std::nullopt;
    return bits == 0 ? 0u : ~uint32_t{0} << (32 - bits);
  }
  auto m = ParseIpv4(text);
  if (!m) return std::nullopt;
  mask = *m;
  // contiguous: ~mask + 1 is a power of two (or mask is all ones)
  uint32_t inverted = ~mask;
  if ((inverted & (inverted + 1)) != 0) return std::nullopt;
  return mask;
}

std::vector<ContextNic> ContextNics(const ContextVars& vars) {
  std::vector<ContextNic> nics;
  for (const auto& [name, value] : vars) {
    // ETH<n>_IP exactly (not ETH0_IP6, not ETH0_ALIAS0_IP)
    if (name.size() < 7 || name.compare(0, 3, "ETH") != 0) continue;
    if (name.compare(name.size() - 3, 3, "_IP") != 0) continue;
    std::string digits = name.substr(3, name.size() - 6);
    if (digits.empty() || digits.size() > 3 ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      continue;
    }
    if (!ParseIpv4(value)) continue;
    ContextNic nic;
    nic.index = std::stoi(digits);
    nic.ip = value;
    auto mask = vars.find("ETH" + digits + "_MASK");
    if (mask != vars.end()) nic.mask = mask->second;
    auto mac = vars.find("ETH" + digits + "_MAC");
    if (mac != vars.end()) nic.mac = mac->second;
    nics.push_back(nic);
  }
  std::sort(nics.begin(), nics.end(),
            [](const ContextNic& a, const ContextNic& b) { return a.index < b.index; });
  return nics;
}

Result<std::string> ControllerAddress(const ContextVars& vars) {
  auto nics = ContextNics(vars);
  if (nics.empty()) {
    return Fail(ErrorKind::kInvalidInput,
                "no IPv4 address in the context (ETH0_IP): the controller needs a NIC on the "
                "service network and NETWORK=YES in CONTEXT");
  }
  return nics.front().ip;
}

Result<AddressChoice> SelectWorkerAddress(const std::string& controller_addr,
                                          const std::vector<VmNic>& controller_nics,
                                          const std::vector<VmNic>& own_nics,
                                          const ContextVars& vars) {
  auto ctl = ParseIpv4(controller_addr);
  if (!ctl) {
    return Fail(ErrorKind::kInvalidInput,
                "controller address '" + controller_addr + "' is not an IPv4 address");
  }
  std::string network;
  for (const auto& nic : controller_nics) {
    if (nic.ip == controller_addr && !nic.network.empty()) {
      network = nic.network;
      break;
    }
  }
  if (!network.empty()) {
    for (const auto& nic : own_nics) {
      if (nic.network == network && ParseIpv4(nic.ip)) {
        return AddressChoice{nic.ip, "NIC " + (nic.name.empty() ? nic.nic_id : nic.name) +
                                         " on network '" + network + "', the controller's network"};
      }
    }
  }
  std::string tried;
  for (const auto& nic : ContextNics(vars)) {
    auto ip = ParseIpv4(nic.ip);
    auto mask = ParseMask(nic.mask);
    tried += (tried.empty() ? "" : ", ") + ("ETH" + std::to_string(nic.index) + "_IP=" + nic.ip +
                                            "/" + (nic.mask.empty() ? "?" : nic.mask));
    if (!ip || !mask) continue;
    if ((*ip & *mask) == (*ctl & *mask)) {
      return AddressChoice{nic.ip, "ETH" + std::to_string(nic.index) + "_IP, whose subnet " +
                                       nic.mask + " contains the controller address " +
                                       controller_addr};
    }
  }
  return Fail(ErrorKind::kNotFound,
              "this VM has no address on the controller's network (controller " + controller_addr +
                  (network.empty() ? std::string() : " on network '" + network + "'") +
                  "; context NICs: " + (tried.empty() ? "none" : tried) + ")");
}

namespace {

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string Describe(const std::vector<ContextNic>& nics) {
  std::string out;
  for (const auto& nic : nics) {
    out += (out.empty() ? "" : ", ") + ("ETH" + std::to_string(nic.index) + "_IP=" + nic.ip);
  }
  return out.empty() ? "none" : out;
}

std::string Describe(const std::vector<VmNic>& nics) {
  std::string out;
  for (const auto& nic : nics) {
    std::string id = nic.network_id.empty() ? "" : " (id " + nic.network_id + ")";
    out += (out.empty() ? "" : ", ") +
           ((nic.name.empty() ? "NIC " + nic.nic_id : nic.name) + " " +
            (nic.ip.empty() ? "without IPv4" : nic.ip) + " on '" + nic.network + "'" + id);
  }
  return out.empty() ? "none" : out;
}

// The ETHn of the context that is OneGate's NIC `nic`: same MAC, else same address.
std::optional<ContextNic> InContext(const std::vector<ContextNic>& context, const VmNic& nic) {
  if (!nic.mac.empty()) {
    for (const auto& c : context) {
      if (!c.mac.empty() && Lower(c.mac) == Lower(nic.mac)) return c;
    }
  }
  for (const auto& c : context) {
    if (!nic.ip.empty() && c.ip == nic.ip) return c;
  }
  return std::nullopt;
}

Result<ComputeNic> Matched(const std::vector<ContextNic>& context, const VmNic& nic,
                           const std::string& how) {
  auto c = InContext(context, nic);
  if (!c) {
    return Fail(ErrorKind::kInvalidInput,
                "the compute NIC (" + how + ", MAC " + nic.mac + ", address " + nic.ip +
                    ") has no IPv4 address in the context (" + Describe(context) +
                    "): NETWORK=YES in CONTEXT gives the VM its ETHn_IP variables");
  }
  return ComputeNic{*c, how + ", ETH" + std::to_string(c->index)};
}

}  // namespace

bool ComputeNicNeedsOneGate(const ContextVars& vars, const std::string& network) {
  return !network.empty() || ContextNics(vars).size() > 1;
}

Result<ComputeNic> ChooseComputeNic(const ContextVars& vars, const std::string& network,
                                    const std::vector<VmNic>* own_nics) {
  auto context = ContextNics(vars);
  if (context.empty()) {
    return Fail(ErrorKind::kInvalidInput,
                "no IPv4 address in the context (ETH0_IP, ETH1_IP...): an Open OnDemand VM "
                "needs a NIC on the compute network and NETWORK=YES in CONTEXT");
  }
  const std::string setting = kComputeNetworkSetting;
  if (!network.empty()) {
    if (own_nics == nullptr) {
      return Fail(ErrorKind::kInvalidInput,
                  setting + "='" + network +
                      "' names the compute network, but OneGate, which tells this VM's "
                      "networks, is not available (TOKEN=YES in CONTEXT)");
    }
    for (const auto& nic : *own_nics) {
      if (nic.network == network || (!nic.network_id.empty() && nic.network_id == network)) {
        return Matched(context, nic, "network '" + nic.network + "' (" + setting + ")");
      }
    }
    return Fail(ErrorKind::kInvalidInput,
                setting + "='" + network +
                    "': this VM has no NIC on a virtual network of that name or id (its NICs: " +
                    Describe(*own_nics) + "); expected the name or id of the compute network");
  }
  if (own_nics != nullptr) {
    for (const auto& nic : *own_nics) {
      if (Lower(nic.name) == kComputeNicName) {
        return Matched(context, nic, std::string("the NIC named '") + kComputeNicName + "'");
      }
    }
  }
  if (context.size() == 1) {
    return ComputeNic{context.front(), "the only NIC, ETH" + std::to_string(context.front().index)};
  }
  return Fail(ErrorKind::kInvalidInput,
              "this VM has " + std::to_string(context.size()) + " NICs (" + Describe(context) +
                  ") and none is named '" + kComputeNicName + "'" +
                  (own_nics == nullptr ? std::string(" (OneGate not available to tell)")
                                       : " (" + Describe(*own_nics) + ")") +
                  ": set " + setting +
                  " to the name or id of the compute network, or name its NIC '" + kComputeNicName +
                  "' in the VM template (NIC = [ NAME = \"" + kComputeNicName +
                  "\", ... ]); the exports and the Squid proxy trust that network");
}

Result<std::vector<VmNic>> OwnNics(OneGateClient& onegate, int vm_id, bool with_network_ids) {
  if (with_network_ids) {
    auto service = onegate.GetService(true);
    if (!service) {
      return Fail(service.error().WithContext("reading this VM's networks from OneGate"));
    }
    for (const auto& role : service->roles) {
      for (const auto& node : role.nodes) {
        if (node.vm_id == vm_id && node.vm) return node.vm->nics;
      }
    }
    return Fail(ErrorKind::kNotFound,
                "VM " + std::to_string(vm_id) + " is not a node of its service document");
  }
  auto vm = onegate.GetVm();
  if (!vm) return Fail(vm.error().WithContext("reading this VM's NICs from OneGate"));
  return vm->nics;
}

Result<ComputeNic> FindComputeNic(const ContextVars& vars, const std::string& network,
                                  OneGateClient* onegate) {
  if (!ComputeNicNeedsOneGate(vars, network) || onegate == nullptr) {
    return ChooseComputeNic(vars, network, nullptr);
  }
  int vm_id = -1;
  if (auto it = vars.find("VMID"); it != vars.end() && !it->second.empty() &&
                                   it->second.size() < 10 &&
                                   std::all_of(it->second.begin(), it->second.end(),
                                               [](char c) { return c >= '0' && c <= '9'; })) {
    vm_id = std::stoi(it->second);
  }
  auto nics = OwnNics(*onegate, vm_id, false);
  if (!nics) return Fail(nics.error());
  auto choice = ChooseComputeNic(vars, network, &*nics);
  // GET /vm names each NIC's network but not its id: a numeric setting that matched no
  // network name is looked up in the extended service document, which has NETWORK_ID.
  if (!choice && !network.empty() &&
      std::all_of(network.begin(), network.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    auto full = OwnNics(*onegate, vm_id, true);
    if (!full) return Fail(full.error());
    return ChooseComputeNic(vars, network, &*full);
  }
  return choice;
}

}  // namespace onehpc::host
