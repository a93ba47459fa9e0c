#include "context/onegate_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace onehpc {
namespace {

using nlohmann::json;

// ---- Tolerant JSON access (onegate-api.md sections 5, 6 and 12)

/// The member `key` of `obj`, or nullptr when `obj` is not an object or lacks it.
const json* Member(const json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

/// A leaf as text: strings as they are, numbers and booleans printed, null and `{}` (an
/// empty XML element) as "". nullopt for arrays and non-empty objects.
std::optional<std::string> LeafText(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return v.get_ref<const std::string&>();
    case json::value_t::number_integer:
      return std::to_string(v.get<std::int64_t>());
    case json::value_t::number_unsigned:
      return std::to_string(v.get<std::uint64_t>());
    case json::value_t::number_float:
      return fmt::format("{}", v.get<double>());
    case json::value_t::boolean:
      return std::string(v.get<bool>() ? "true" : "false");
    case json::value_t::null:
      return std::string();
    case json::value_t::object:
      if (v.empty()) return std::string();
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

/// The text of member `key`, "" when absent or not a leaf.
std::string Text(const json& obj, const std::string& key) {
  const json* v = Member(obj, key);
  if (!v) return {};
  return LeafText(*v).value_or(std::string());
}

/// True when a member is absent or reads as empty (null, {}, "").
bool IsEmptyValue(const json* v) {
  if (!v || v->is_null()) return true;
  if (v->is_object() && v->empty()) return true;
  if (v->is_string() && v->get_ref<const std::string&>().empty()) return true;
  return false;
}

/// Integer `key` of `obj`: a JSON integer or a numeric string (VM JSON has strings, service
/// JSON integers; either is accepted everywhere). Absent/empty values give `fallback`, or an
/// error naming `where.key` when there is none.
Result<int> IntField(const json& obj, const std::string& key, const std::string& where,
                     std::optional<int> fallback) {
  const std::string name = where + "." + key;
  const json* v = Member(obj, key);
  if (IsEmptyValue(v)) {
    if (fallback) return *fallback;
    return Fail(ErrorKind::kInvalidInput, name + " is missing");
  }
  auto bad = [&](const std::string& got) {
    return Fail(ErrorKind::kInvalidInput, name + ": expected an integer, got " + got);
  };
  switch (v->type()) {
    case json::value_t::number_integer: {
      std::int64_t n = v->get<std::int64_t>();
      if (n < INT_MIN || n > INT_MAX) return bad("an out-of-range number");
      return static_cast<int>(n);
    }
    case json::value_t::number_unsigned: {
      std::uint64_t n = v->get<std::uint64_t>();
      if (n > static_cast<std::uint64_t>(INT_MAX)) return bad("an out-of-range number");
      return static_cast<int>(n);
    }
    case json::value_t::number_float: {
      double d = v->get<double>();
      if (!std::isfinite(d) || d != std::trunc(d) || d < INT_MIN || d > INT_MAX) {
        return bad("a non-integral number");
      }
      return static_cast<int>(d);
    }
    case json::value_t::string: {
      const std::string& s = v->get_ref<const std::string&>();
      int n = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
      if (ec != std::errc() || end != s.data() + s.size()) {
        std::string shown = s.size() <= 20 ? s : s.substr(0, 20) + "...";
        // Keep the message printable.
        for (char& c : shown) {
          if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
        }
        return bad("\"" + shown + "\"");
      }
      return n;
    }
    default:
      return bad(std::string("a JSON ") + v->type_name());
  }
}

/// The elements of a value that may be one object or an array of them (NIC in extended
/// output); absent, null and `{}` give none.
std::vector<const json*> Elements(const json* v) {
  std::vector<const json*> out;
  if (!v) return out;
  if (v->is_array()) {
    for (const auto& e : *v) out.push_back(&e);
  } else if (v->is_object() && !v->empty()) {
    out.push_back(v);
  }
  return out;
}

/// String-valued members of an object; nested objects and arrays are skipped.
std::map<std::string, std::string> LeafMap(const json* v) {
  std::map<std::string, std::string> out;
  if (!v || !v->is_object()) return out;
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (auto text = LeafText(it.value())) out.emplace(it.key(), std::move(*text));
  }
  return out;
}

void ParseNics(const json* template_obj, VmInfo& vm) {
  if (!template_obj || !template_obj->is_object()) return;
  for (const json* e : Elements(Member(*template_obj, "NIC"))) {
    if (!e->is_object()) continue;
    VmNic nic;
    nic.ip = Text(*e, "IP");
    nic.ip6 = Text(*e, "IP6_GLOBAL");
    if (nic.ip6.empty()) nic.ip6 = Text(*e, "IP6");
    nic.mac = Text(*e, "MAC");
    nic.network = Text(*e, "NETWORK");
    nic.network_id = Text(*e, "NETWORK_ID");
    nic.name = Text(*e, "NAME");
    nic.nic_id = Text(*e, "NIC_ID");
    if (nic.nic_id.empty() && nic.name.size() > 3 && nic.name.compare(0, 3, "NIC") == 0 &&
        std::all_of(nic.name.begin() + 3, nic.name.end(),
                    [](unsigned char c) { return std::isdigit(c); })) {
      nic.nic_id = nic.name.substr(3);
    }
    const bool identified = !nic.name.empty() || !nic.nic_id.empty() || !nic.mac.empty() ||
                            !nic.network.empty() || !nic.network_id.empty();
    if (!identified) {
      // 6.10's external-IP entries ({"IP": ...} only): not a NIC of this VM.
      if (!nic.ip.empty()) vm.external_ips.push_back(nic.ip);
      continue;
    }
    vm.nics.push_back(std::move(nic));
  }
}

void ParseDisks(const json* template_obj, VmInfo& vm) {
  if (!template_obj || !template_obj->is_object()) return;
  const json* disks = Member(*template_obj, "DISK");
  if (!disks) return;
  vm.disks_listed = true;
  for (const json* e : Elements(disks)) {
    if (!e->is_object()) continue;
    VmDisk disk;
    disk.disk_id = Text(*e, "DISK_ID");
    disk.target = Text(*e, "TARGET");
    disk.image = Text(*e, "IMAGE");
    disk.type = Text(*e, "TYPE");
    disk.persistent = Text(*e, "PERSISTENT") == "YES";
    disk.size_mb = Text(*e, "SIZE");
    vm.disks.push_back(std::move(disk));
  }
}

/// A VM object (the value of "VM"). `fallback_id` is used when ID is absent.
Result<VmInfo> ParseVmObject(const json& obj, const std::string& where,
                             std::optional<int> fallback_id) {
  if (!obj.is_object()) {
    return Fail(ErrorKind::kInvalidInput,
                where + ": expected an object, got a JSON " + obj.type_name());
  }
  VmInfo vm;
  auto id = IntField(obj, "ID", where, fallback_id);
  if (!id) return Fail(id.error());
  vm.id = *id;
  vm.name = Text(obj, "NAME");
  auto state = IntField(obj, "STATE", where, -1);
  if (!state) return Fail(state.error());
  vm.state = *state;
  auto lcm = IntField(obj, "LCM_STATE", where, -1);
  if (!lcm) return Fail(lcm.error());
  vm.lcm_state = *lcm;
  // Only the elastic cycle reads it: an STIME not understood is "unknown" (0), not a VM that
  // cannot be read.
  if (const json* stime = Member(obj, "STIME"); stime != nullptr) {
    if (stime->is_number_integer()) {
      vm.stime = stime->get<long long>();
    } else if (stime->is_string()) {
      const std::string& t = stime->get_ref<const std::string&>();
      long long n = 0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
      if (ec == std::errc() && end == t.data() + t.size() && n > 0) vm.stime = n;
    }
  }
  const json* user = Member(obj, "USER_TEMPLATE");
  vm.has_user_template = user != nullptr && user->is_object();
  vm.user_template = LeafMap(user);
  if (vm.has_user_template) {
    for (auto it = user->begin(); it != user->end(); ++it) {
      if (!LeafText(it.value())) vm.non_text_attrs.insert(it.key());
    }
  }
  const json* tmpl = Member(obj, "TEMPLATE");
  ParseNics(tmpl, vm);
  ParseDisks(tmpl, vm);
  if (tmpl) vm.context = LeafMap(Member(*tmpl, "CONTEXT"));
  return vm;
}

/// Parses without ever quoting the text in the error (it may carry secrets).
Result<json> ParseJsonText(std::string_view text) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return Fail(ErrorKind::kInvalidInput, "malformed JSON at byte " + std::to_string(e.byte) +
                                              " of " + std::to_string(text.size()));
  } catch (const std::exception& e) {
    return Fail(ErrorKind::kInvalidInput, "malformed JSON");
  }
}

Result<ServiceNode> ParseNode(const json& node, const std::string& where) {
  if (!node.is_object()) {
    return Fail(ErrorKind::kInvalidInput,
                where + ": expected an object, got a JSON " + node.type_name());
  }
  ServiceNode out;
  auto id = IntField(node, "deploy_id", where, std::nullopt);
  if (!id) return Fail(id.error());
  out.vm_id = *id;
  // `running` is always null in current OneFlow: ignored.
  const json* info = Member(node, "vm_info");
  const json* vm = info ? Member(*info, "VM") : nullptr;
  if (vm && vm->is_object()) {
    out.vm_name = Text(*vm, "NAME");
    // Compact output has six strings (ID UID GID UNAME GNAME NAME); extended has the live VM.
    const bool extended = Member(*vm, "STATE") || Member(*vm, "LCM_STATE") ||
                          Member(*vm, "TEMPLATE") || Member(*vm, "USER_TEMPLATE");
    if (extended) {
      auto parsed = ParseVmObject(*vm, where + ".vm_info.VM", out.vm_id);
      if (!parsed) return Fail(parsed.error());
      out.vm = std::move(*parsed);
    }
  }
  return out;
}

Result<ServiceRole> ParseRole(const json& role, const std::string& where) {
  if (!role.is_object()) {
    return Fail(ErrorKind::kInvalidInput,
                where + ": expected an object, got a JSON " + role.type_name());
  }
  ServiceRole out;
  out.name = Text(role, "name");
  if (out.name.empty()) return Fail(ErrorKind::kInvalidInput, where + ".name is missing");
  auto cardinality = IntField(role, "cardinality", where, std::nullopt);
  if (!cardinality) return Fail(cardinality.error());
  out.cardinality = *cardinality;
  auto state = IntField(role, "state", where, -1);
  if (!state) return Fail(state.error());
  out.state = *state;
  const json* nodes = Member(role, "nodes");
  if (nodes && !nodes->is_array() && !nodes->is_object() && !nodes->is_null()) {
    return Fail(ErrorKind::kInvalidInput,
                where + ".nodes: expected an array, got a JSON " + std::string(nodes->type_name()));
  }
  std::size_t i = 0;
  for (const json* node : Elements(nodes)) {
    auto parsed = ParseNode(*node, where + ".nodes[" + std::to_string(i++) + "]");
    if (!parsed) return Fail(parsed.error());
    out.nodes.push_back(std::move(*parsed));
  }
  return out;
}

Result<VmInfo> ParseVmJsonUnguarded(std::string_view text) {
  auto doc = ParseJsonText(text);
  if (!doc) return Fail(doc.error());
  const json* vm = Member(*doc, "VM");
  if (!vm) {
    return Fail(ErrorKind::kInvalidInput, "expected a JSON object with a \"VM\" member");
  }
  return ParseVmObject(*vm, "VM", std::nullopt);
}

Result<ServiceInfo> ParseServiceJsonUnguarded(std::string_view text) {
  auto doc = ParseJsonText(text);
  if (!doc) return Fail(doc.error());
  const json* service = Member(*doc, "SERVICE");
  if (!service || !service->is_object()) {
    return Fail(ErrorKind::kInvalidInput,
                "expected a JSON object with a \"SERVICE\" object member");
  }
  ServiceInfo out;
  out.id = Text(*service, "id");
  out.name = Text(*service, "name");
  auto state = IntField(*service, "state", "SERVICE", -1);
  if (!state) return Fail(state.error());
  out.state = *state;
  const json* roles = Member(*service, "roles");
  if (!roles || roles->is_null()) {
    return Fail(ErrorKind::kInvalidInput, "SERVICE.roles is missing");
  }
  if (!roles->is_array() && !roles->is_object()) {
    return Fail(ErrorKind::kInvalidInput,
                std::string("SERVICE.roles: expected an array, got a JSON ") + roles->type_name());
  }
  std::size_t i = 0;
  for (const json* role : Elements(roles)) {
    auto parsed = ParseRole(*role, "SERVICE.roles[" + std::to_string(i++) + "]");
    if (!parsed) return Fail(parsed.error());
    out.roles.push_back(std::move(*parsed));
  }
  return out;
}

}  // namespace

// ---- Views

std::string VmInfo::Attr(const std::string& key) const {
  auto it = user_template.find(key);
  return it == user_template.end() ? std::string() : it->second;
}

const ServiceRole* ServiceInfo::FindRole(const std::string& name) const {
  for (const auto& role : roles) {
    if (role.name == name) return &role;
  }
  return nullptr;
}

Result<VmInfo> ParseVmJson(std::string_view json) {
  try {
    return ParseVmJsonUnguarded(json);
  } catch (const std::exception& e) {  // nlohmann's type errors and the like: never escape
    return Fail(ErrorKind::kInvalidInput, std::string("unexpected VM JSON: ") + e.what());
  }
}

Result<ServiceInfo> ParseServiceJson(std::string_view json) {
  try {
    return ParseServiceJsonUnguarded(json);
  } catch (const std::exception& e) {
    return Fail(ErrorKind::kInvalidInput, std::string("unexpected service JSON: ") + e.what());
  }
}

}  // namespace onehpc
