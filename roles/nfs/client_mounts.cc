#include "roles/nfs/client_mounts.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/log.h"
#include "common/retry.h"
#include "roles/disk/mount_unit.h"
#include "roles/ensure.h"
#include "roles/host/address.h"
#include "roles/host/hostname.h"
#include "roles/role.h"

namespace onehpc::nfs {
namespace {

constexpr Duration kIpRouteTimeout{10000};
constexpr size_t kMaxQuoted = 300;

bool IsDigits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// A dotted-quad IPv4 address or a DNS name whose last label is not numeric (so that a
// mistyped address such as 10.0.1.256 is not taken for a name).
bool IsValidServer(const std::string& server) {
  if (host::ParseIpv4(server)) return true;
  if (server.empty() || server.size() > 253) return false;
  std::vector<std::string> labels;
  size_t start = 0;
  for (;;) {
    size_t dot = server.find('.', start);
    labels.push_back(server.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& label : labels) {
    if (!host::IsValidHostLabel(label)) return false;
  }
  return !IsDigits(labels.back());
}

// "" when `path` is a plain absolute path that systemd and the mount table show unchanged;
// else what is wrong with it.
std::string PathProblem(const std::string& path) {
  if (path.empty() || path[0] != '/') return "not an absolute path";
  if (path.size() > 1 && path.back() == '/') return "ends with '/'";
  if (path.find("//") != std::string::npos) return "contains '//'";
  if (path == "/.." || path.find("/../") != std::string::npos ||
      (path.size() >= 3 && path.compare(path.size() - 3, 3, "/..") == 0)) {
    return "contains '..'";
  }
  for (unsigned char c : path) {
    if (std::iscntrl(c) || std::isspace(c)) return "contains whitespace or a control character";
    if (c == '\\' || c == '%') return "contains '\\' or '%'";
  }
  return "";
}

std::string Quoted(const std::string& text) {
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (t.size() > kMaxQuoted) t = t.substr(0, kMaxQuoted) + "...";
  return "'" + t + "'";
}

std::string Seconds(Duration d) {
  auto ms = d.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return fmt::format("{:.1f} s", static_cast<double>(ms) / 1000.0);
}

std::string ErrnoName(int error) {
  switch (error) {
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case EROFS:
      return "EROFS";
    case EEXIST:
      return "EEXIST";
    case ENOENT:
      return "ENOENT";
    case EIO:
      return "EIO";
    case ESTALE:
      return "ESTALE";
    case ENOSPC:
      return "ENOSPC";
    case EDQUOT:
      return "EDQUOT";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    default:
      return "errno " + std::to_string(error);
  }
}

// Escapes systemd specifiers in free text (Description=).
std::string NoSpecifiers(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

// The unit name as a shell word for the journalctl hint (escaped names hold '\').
std::string ShellWord(const std::string& unit) {
  if (unit.find('\\') == std::string::npos) return unit;
  return "'" + unit + "'";
}

}  // namespace

Status ValidateNfsMount(const NfsMount& m) {
  const std::string& setting = m.setting.empty() ? std::string("the NFS share") : m.setting;
  if (!IsValidServer(m.server)) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("{}: the NFS server '{}' is not usable: expected an IPv4 address "
                            "(a.b.c.d) or a DNS name (letters, digits, '-' and '.')",
                            setting, m.server));
  }
  if (auto problem = PathProblem(m.export_path); !problem.empty()) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("{}: the export '{}' of {} is not usable ({}): expected an absolute "
                            "path on the server such as /export/home",
                            setting, m.export_path, m.server, problem));
  }
  if (auto problem = PathProblem(m.where); !problem.empty() || m.where == "/") {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("{}: the mount point '{}' for {} is not usable ({}): expected an "
                            "absolute path other than / such as /home",
                            setting, m.where, m.What(),
                            problem.empty() ? "it is the root directory" : problem));
  }
  if (m.why.find_first_of("\r\n") != std::string::npos) {
    return Fail(ErrorKind::kInternal,
                "the reason given for the NFS mount on " + m.where + " must be one line");
  }
  return Ok();
}

std::string NfsMountUnitName(const std::string& where) { return disk::MountUnitName(where); }

std::string RenderNfsMountUnit(const NfsMount& m) {
  return fmt::format(
      "# Generated by one-hpc: {why}.\n"
      "# hard: a short pause of the server blocks I/O and resumes it instead of failing writes.\n"
      "# Replacing the transport (What=/Type=/Options=) belongs in a drop-in in {unit}.d/.\n"
      "[Unit]\n"
      "Description=one-hpc: {desc} ({what})\n"
      "After=network-online.target\n"
      "Wants=network-online.target\n"
      "\n"
      "[Mount]\n"
      "What={what}\n"
      "Where={where}\n"
      "Type=nfs4\n"
      "Options={options}\n"
      "TimeoutSec={timeout}s\n"
      "\n"
      "[Install]\n"
      "WantedBy=remote-fs.target\n",
      fmt::arg("why", m.why), fmt::arg("unit", NfsMountUnitName(m.where)),
      fmt::arg("desc", NoSpecifiers(m.why)), fmt::arg("what", m.What()), fmt::arg("where", m.where),
      fmt::arg("options", kNfsMountOptions), fmt::arg("timeout", kNfsMountUnitTimeoutSec));
}

namespace {

constexpr Duration kMountRestartEvery{10000};

// Step 4 of EnsureNfsMount: the unit active and something mounted at `where` (whatever the
// source at a start: the lab's drop-in mounts a bind; with `exact`, after a restart, only a mount
// of m.What()).
Status WaitForMount(RoleEnv& env, const NfsMount& m, const std::string& unit,
                    const std::string& host_where, bool exact, Duration mount_timeout) {
  const std::string what = m.What();
  std::string state = "not checked";
  bool pending = false;  // the last attempt found the mount not there yet (not an error)
  TimePoint started = env.clock.Now();
  auto waited = Retry<bool>(
      RetryPolicy::Until(mount_timeout), env.clock, "wait for " + unit,
      [&](const Error&) { return pending; },
      [&]() -> Result<bool> {
        pending = false;
        auto active = env.systemd.IsActive(unit);
        if (!active) return Fail(active.error());
        auto mounted = env.mounts.FindByTarget(host_where);
        if (!mounted) return Fail(mounted.error());
        if (*active && mounted->has_value() && (!exact || (*mounted)->source == what)) {
          log::Info("nfs: {} mounted on {} from {}", unit, m.where, (*mounted)->source);
          return true;
        }
        state = std::string(*active ? "active" : "not active") + ", " +
                (mounted->has_value() ? "mounted from " + (*mounted)->source
                                      : "nothing mounted on " + m.where);
        pending = true;
        // A mount the server refused (it exports to the service's VMs, and a new VM is added
        // within its refresher's period) fails the unit, and systemd does not try again: start
        // it again, every kMountRestartEvery (far below systemd's start limit).
        if (!*active && !mounted->has_value() && env.clock.Now() - started >= kMountRestartEvery) {
          log::Info(
              "nfs: {} is not mounted yet ({}); starting it again (the server may not "
              "export to this VM yet)",
              unit, state);
          if (auto s = env.systemd.StartNoBlock(unit); !s) return Fail(s.error());
          started = env.clock.Now();
        }
        return Fail(ErrorKind::kNotFound, unit + ": " + state);
      });
  if (waited) return Ok();
  if (!pending) return Fail(waited.error());
  return Fail(ErrorKind::kNetwork,
              fmt::format("{} ({}) was not mounted on {} within {} ({}: {}); check that the NFS "
                          "server answers and exports {} to this VM; see journalctl -u {}",
                          what, m.setting.empty() ? "NFS share" : m.setting, m.where,
                          Seconds(mount_timeout), unit, state, m.export_path, ShellWord(unit)));
}

}  // namespace

Status EnsureNfsMount(RoleEnv& env, const NfsMount& m, Duration mount_timeout) {
  if (auto s = ValidateNfsMount(m); !s) return s;
  const std::string what = m.What();
  const std::string unit = NfsMountUnitName(m.where);
  const std::string unit_path = disk::MountUnitPath(m.where);

  // 1. The mount point.
  if (env.files.Exists(m.where)) {
    env.plan.Keep(m.where, "the mount point exists");
  } else {
    auto s = env.plan.Do("create " + m.where + " (0755)", "the mount point of " + what,
                         [&] { return env.files.MakeDirs(m.where, 0755); });
    if (!s) return s;
  }

  // 2. The unit (only ours: drop-ins in <unit>.d/ belong to whoever put them there).
  const std::string content = RenderNfsMountUnit(m);
  auto changed = EnsureFile(env, unit_path, content, 0644, std::nullopt,
                            "mount " + what + " on " + m.where + " at every boot: " + m.why);
  if (!changed) return Fail(changed.error());
  if (auto s = DaemonReloadIf(env, *changed, unit + " changed"); !s) return s;
  if (auto s = EnsureUnitEnabled(env, unit, "remote-fs.target",
                                 what + " is mounted on " + m.where + " at every boot");
      !s) {
    return s;
  }

  // 3. Mounted now?
  bool exact = false;  // only a mount from `what` will do (after a restart)
  const std::string host_where = env.files.HostPath(m.where);
  auto current = env.mounts.FindByTarget(host_where);
  if (!current) return Fail(current.error());
  if (current->has_value()) {
    const std::string& source = (*current)->source;
    if (source == what || !*changed) {
      env.plan.Keep("mounted " + m.where, source == what
                                              ? "mounted from " + what
                                              : "mounted from " + source + " (" + unit +
                                                    " is unchanged; a drop-in may replace the NFS "
                                                    "transport, as in the lab)");
      return Ok();
    }
    auto s = env.plan.Do(
        "restart " + unit + " (--no-block)",
        m.where + " is mounted from " + source + " and " + unit + " changed to mount " + what,
        [&] { return env.systemd.RestartNoBlock(unit); });
    if (!s) return s;
    // Until systemd runs the queued restart the old mount is still there: only `what` counts,
    // unless a drop-in of someone else's says what is mounted (the lab's bind, whose source
    // does not change).
    auto dropins = env.files.List(unit_path + ".d");
    exact = !dropins || dropins->empty();
  } else {
    auto s = env.plan.Do("start " + unit + " (--no-block)",
                         "nothing is mounted on " + m.where + "; " + m.why,
                         [&] { return env.systemd.StartNoBlock(unit); });
    if (!s) return s;
  }
  if (env.plan.dry_run()) return Ok();
  return WaitForMount(env, m, unit, host_where, exact, mount_timeout);
}

Result<std::string> ResolveIpv4(const std::string& server) {
  if (host::ParseIpv4(server)) return server;
  if (!IsValidServer(server)) {
    return Fail(ErrorKind::kInvalidInput,
                "'" + server + "' is neither an IPv4 address nor a DNS name");
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;  // IPv4 only: the appliance networks are IPv4
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(server.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Fail(ErrorKind::kNetwork, "cannot resolve " + server + " to an IPv4 address: " +
                                         (rc != 0 ? ::gai_strerror(rc) : "no address"));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);
  char text[INET_ADDRSTRLEN] = {};
  const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) == nullptr) {
    return Fail(ErrorKind::kInternal, "inet_ntop failed for " + server);
  }
  return std::string(text);
}

Result<std::string> ParseRouteGetJson(const std::string& json, const std::string& server_ip) {
  auto bad = [&](const std::string& why) {
    return Fail(ErrorKind::kProcess, fmt::format("ip -j route get {}: {} in its output {}",
                                                 server_ip, why, Quoted(json)));
  };
  auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad("not JSON");
  if (!doc.is_array() || doc.empty() || !doc[0].is_object()) return bad("no route object");
  auto it = doc[0].find("prefsrc");
  if (it == doc[0].end()) return bad("no \"prefsrc\" (source address)");
  if (!it->is_string() || !host::ParseIpv4(it->get<std::string>())) {
    return bad("\"prefsrc\" is not an IPv4 address");
  }
  return it->get<std::string>();
}

Result<std::string> SourceAddressFor(ProcessRunner& runner, const std::string& server) {
  auto ip = ResolveIpv4(server);
  if (!ip) return Fail(ip.error());
  Command c;
  c.argv = {"ip", "-j", "route", "get", *ip};
  c.timeout = kIpRouteTimeout;
  auto r = RunChecked(runner, c);
  if (!r) return Fail(r.error());
  return ParseRouteGetJson(r->out, *ip);
}

WriteProbe::Outcome RealWriteProbe::CreateAndRemove(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int error = errno;
    // Ours from a killed run with the same pid: remove it so that the next attempt is clean.
    if (error == EEXIST) (void)::unlink(path.c_str());
    return {error, "create"};
  }
  ::close(fd);
  if (::unlink(path.c_str()) != 0) return {errno, "remove"};
  return {};
}

Status CheckRootCanWrite(RoleEnv& env, const NfsMount& m, Duration deadline, WriteProbe& probe) {
  if (auto s = ValidateNfsMount(m); !s) return s;
  const std::string probe_name = kRootProbePrefix + std::to_string(::getpid());
  const std::string target_path = m.where + "/" + probe_name;
  if (env.plan.dry_run()) {
    env.plan.Keep("root can write to " + m.where,
                  "checked by configure (creates and removes " + target_path + ")");
    return Ok();
  }
  const std::string host_path = env.files.HostPath(m.where) + "/" + probe_name;
  const TimePoint start = env.clock.Now();
  int attempts = 0;
  WriteProbe::Outcome last;
  auto done = Retry<bool>(
      RetryPolicy::Until(deadline), env.clock, "create and remove " + target_path + " as root",
      [](const Error&) { return true; },
      [&]() -> Result<bool> {
        ++attempts;
        last = probe.CreateAndRemove(host_path);
        if (last.error == 0) return true;
        return Fail(ErrorKind::kIo,
                    fmt::format("{} {}: {}", last.step, target_path, std::strerror(last.error)));
      });
  if (done) {
    env.plan.Keep("root can write to " + m.where,
                  "created and removed " + target_path + " on " + m.What());
    return Ok();
  }
  const auto spent = std::chrono::duration_cast<Duration>(env.clock.Now() - start);
  const std::string detail = fmt::format(
      "{} {}: {} ({}); {} attempt{} in {}", last.step, target_path, std::strerror(last.error),
      ErrnoName(last.error), attempts, attempts == 1 ? "" : "s", Seconds(spent));
  const std::string what = m.What();
  const std::string setting = m.setting.empty() ? "" : " (" + m.setting + ")";
  if (last.error != EACCES && last.error != EPERM && last.error != EROFS) {
    return Fail(ErrorKind::kIo, fmt::format("root cannot write to {}, mounted from {}{}: {}",
                                            m.where, what, setting, detail));
  }
  // Whom the server must trust: the address this VM reaches it from.
  std::string to_whom;
  auto server_ip = ResolveIpv4(m.server);
  auto source = server_ip ? SourceAddressFor(env.runner, *server_ip) : Fail(server_ip.error());
  if (source) {
    to_whom = fmt::format("{}, the address this VM uses to reach {} (ip route get {})", *source,
                          m.server, *server_ip);
  } else {
    to_whom = fmt::format("the address this VM uses to reach {} (could not tell which: {})",
                          m.server, source.error().message);
  }
  const std::string export_as =
      last.error == EROFS ? "read-write (rw) and with no_root_squash" : "with no_root_squash";
  std::string message = fmt::format(
      "root cannot write to {}, mounted from {}{}: the NFS server must export {} {} "
      "to {}",
      m.where, what, setting, m.export_path, export_as, to_whom);
  if (!m.root_write_why.empty()) message += "; " + m.root_write_why;
  message += " (" + detail + ")";
  return Fail(ErrorKind::kInvalidInput, message);
}

Status CheckRootCanWrite(RoleEnv& env, const NfsMount& m, Duration deadline) {
  RealWriteProbe probe;
  return CheckRootCanWrite(env, m, deadline, probe);
}

}  // namespace onehpc::nfs
