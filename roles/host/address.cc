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

Result<std::string> ComputeAddress(const ContextVars& vars) {
  auto nics = ContextNics(vars);
  if (nics.empty()) {
    return Fail(ErrorKind::kInvalidInput,
                "the context has no ETHn_IP: an Open OnDemand VM needs its compute network "
                "(NETWORK=YES in CONTEXT)");
  }
  return nics.back().ip;
}

}  // namespace onehpc::host
