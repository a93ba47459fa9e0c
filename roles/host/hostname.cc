#include "roles/host/hostname.h"

#include <cctype>

#include "roles/names.h"
#include "roles/role.h"

namespace onehpc::host {
namespace {

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string RenderBlock(const HostEntries& entries, const HostsBlockMarkers& markers) {
  std::string out = std::string(markers.begin) + "\n";
  for (const auto& [addr, names] : entries) out += addr + "\t" + names + "\n";
  out += std::string(markers.end) + "\n";
  return out;
}

}  // namespace

Result<std::string> ReplaceHostsBlock(std::string_view current, const HostEntries& entries,
                                      const HostsBlockMarkers& markers) {
  std::string before_first;  // text before the first block
  std::string rest;          // text after it (other blocks dropped)
  bool seen_block = false;
  bool in_block = false;
  size_t pos = 0;
  while (pos < current.size()) {
    size_t nl = current.find('\n', pos);
    std::string_view line =
        current.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    std::string full(line);
    full += '\n';  // a last line without newline gets one
    pos = nl == std::string_view::npos ? current.size() : nl + 1;
    std::string t = Trim(line);
    if (t == markers.begin) {
      if (in_block) {
        return Fail(ErrorKind::kInvalidInput,
                    "/etc/hosts: nested '" + std::string(markers.begin) + "'");
      }
      in_block = true;
      seen_block = true;
      continue;
    }
    if (t == markers.end) {
      if (!in_block) {
        return Fail(ErrorKind::kInvalidInput,
                    "/etc/hosts: '" + std::string(markers.end) + "' without a matching begin line");
      }
      in_block = false;
      continue;
    }
    if (in_block) continue;
    (seen_block ? rest : before_first) += full;
  }
  if (in_block) {
    return Fail(ErrorKind::kInvalidInput, "/etc/hosts: '" + std::string(markers.begin) +
                                              "' without an end line; fix the file by hand");
  }
  std::string block = RenderBlock(entries, markers);
  if (!seen_block) return block + before_first;
  return before_first + block + rest;
}

bool IsValidHostLabel(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (name.front() == '-' || name.back() == '-') return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

Result<std::string> ShortNameFromSetHostname(std::string_view value) {
  std::string v = Trim(value);
  std::string short_name = v.substr(0, v.find('.'));
  if (!IsValidHostLabel(short_name)) {
    return Fail(ErrorKind::kInvalidInput,
                "SET_HOSTNAME='" + v +
                    "' is not a usable host name: expected letters, digits "
                    "and '-' (at most 63) before the first '.'");
  }
  return short_name;
}

Status EnsureHostname(RoleEnv& env, const std::string& name, const std::string& why) {
  if (!IsValidHostLabel(name)) {
    return Fail(ErrorKind::kInvalidInput, "invalid host name '" + name + "'");
  }
  if (auto s = EnsureFile(env, kHostnamePath, name + "\n", 0644, std::nullopt, why); !s) {
    return Fail(s.error());
  }
  auto running = env.files.ReadIfExists("/proc/sys/kernel/hostname");
  if (!running) return Fail(running.error());
  std::string current = running->has_value() ? Trim(**running) : "";
  if (current == name) {
    env.plan.Keep("hostname " + name, "the running host name is already " + name);
    return Ok();
  }
  return env.plan.Do("set the running host name to " + name, why + " (now '" + current + "')",
                     [&]() -> Status {
                       Command c;
                       c.argv = {"hostname", name};
                       c.timeout = Duration(10000);
                       auto r = RunChecked(env.runner, c);
                       if (!r) return Fail(r.error());
                       return Ok();
                     });
}

Status EnsureHostsBlock(RoleEnv& env, const HostEntries& entries, const std::string& why) {
  auto current = env.files.ReadIfExists(kHostsPath);
  if (!current) return Fail(current.error());
  // A missing file gets the usual loopback lines besides our block.
  std::string base = current->has_value()
                         ? **current
                         : "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  auto text = ReplaceHostsBlock(base, entries);
  if (!text) return Fail(text.error());
  if (auto s = EnsureFile(env, kHostsPath, *text, 0644, std::nullopt, why); !s) {
    return Fail(s.error());
  }
  return Ok();
}

Status EnsureNoMulticastNames(RoleEnv& env, const std::string& why) {
  auto changed = EnsureFile(env, kResolvedNoMulticast,
                            "# Written by one-hpc: names come from /etc/hosts and DNS, never from\n"
                            "# whoever on the link answers a multicast query first.\n"
                            "[Resolve]\nLLMNR=no\nMulticastDNS=no\n",
                            0644, std::nullopt, why);
  if (!changed) return Fail(changed.error());
  if (!*changed) return Ok();
  constexpr char kResolved[] = "systemd-resolved.service";
  auto active = env.systemd.IsActive(kResolved);
  if (!active) return Fail(active.error());
  if (!*active) {
    env.plan.Keep(kResolved, "not running: it reads the drop-in when it starts");
    return Ok();
  }
  return env.plan.Do(std::string("restart ") + kResolved,
                     "it reads " + std::string(kResolvedNoMulticast) + " when it starts",
                     [&] { return env.systemd.RestartNoBlock(kResolved); });
}

Result<bool> UpdateHostsBlock(Files& files, const std::string& path, const HostEntries& entries,
                              const HostsBlockMarkers& markers) {
  auto current = files.ReadIfExists(path);
  if (!current) return Fail(current.error());
  if (!current->has_value()) return false;
  auto text = ReplaceHostsBlock(**current, entries, markers);
  if (!text) return Fail(text.error().WithContext(path));
  if (*text == **current) return false;
  if (auto s = files.WriteAtomic(path, *text, 0644); !s) return Fail(s.error());
  return true;
}

}  // namespace onehpc::host
