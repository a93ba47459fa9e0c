// OneGate (onegate-server.rb) and the part of OneFlow a VM sees, as an HTTP server for tests.
// Spec: shared/reference/onegate-api.md and oneflow.md.
//
// HTTP: cpp-httplib parses requests, routes and writes responses, but this file owns each
// connection (SimHttpServer::process_and_close_socket) so that it can
//  - read a body on GET (httplib 0.11 ignores it; the official CLI sends `extended=true` so),
//  - hang, reset or truncate a connection on demand (faults).
// Every request body framed by Content-Length is read here, handed to the request as
// req.body, and the header is rewritten to `Content-Length: 0` for httplib.
//
// Operator API (only after EnableOperatorApi(true); JSON in and out; never faulted or
// recorded). Paths:
//   GET    /_sim/health
//   POST   /_sim/services                 {"name","roles":[role]} -> {"id"}
//          role: {"name","cardinality","min_vms","max_vms","cooldown","cooldown_ms",
//                 "parents","auto_provision","vm_template":vm,"provision_delay_ms",
//                 "ip_delay_ms","shutdown_delay_ms","hard_shutdown"}
//   GET    /_sim/services/:id             operator view (states, cardinality, nodes, min/max)
//   GET    /_sim/services/:id/onegate     what GET /service answers (?extended=1)
//   POST   /_sim/services/:id/scale       {"role","cardinality"} (forced, like SetCardinality)
//   PUT    /_sim/services/:id/state       {"state":N or -1}
//   PUT    /_sim/services/:id/roles/:role/state  {"state":N or -1}
//   POST   /_sim/vms                      {"service_id","role", vm} -> {"id","token"}
//          vm: {"name","nics":[{"ip","mac","network","network_id","name"}],"context":{},
//               "disks":[{"TARGET","IMAGE","PERSISTENT",...}],
//               "user_template":{},"user_vectors":{},"state","lcm_state"}
//   GET    /_sim/vms                      [{"id","name","service_id","role","state",...}]
//   GET    /_sim/vms/:id                  {"id","token","service_id","role","vm":{VM hash}}
//   GET    /_sim/vms/:id/user_template    the USER_TEMPLATE as OneGate renders it
//   PUT    /_sim/vms/:id/user_template    {"KEY":"value",...} (operator side, no rules)
//   DELETE /_sim/vms/:id/user_template/:key
//   PUT    /_sim/vms/:id/state            {"state","lcm_state"}
//   PUT    /_sim/vms/:id/nics/:index      {"ip"}
//   POST   /_sim/vms/:id/nics             {"ip","mac","network","network_id","name"} (attach)
//   POST   /_sim/vms/:id/disks            {"TARGET","IMAGE","PERSISTENT",...} (disk-attach)
//   POST   /_sim/vms/:id/terminate        {"hard":bool}
//   GET    /_sim/terminations
//   POST   /_sim/faults                   {"kind":"status|hang|slow|truncated|malformed|reset",
//                                          "method","path_prefix","status","body",
//                                          "delay_ms","times"}
//   DELETE /_sim/faults
//   GET    /_sim/requests   DELETE /_sim/requests
//   POST   /_sim/time                     {"advance_ms":N}
//   PUT    /_sim/config                   {"permissions":{"vm.show":false},
//                                          "restricted_attrs":[..],"restricted_actions":[..],
//                                          "opennebula_version":"6.10"}
#include "tests/simulator/onegate_simulator.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <variant>

#include "tests/simulator/oned_template.h"

namespace onehpc::sim {
namespace {

using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;
using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;

constexpr char kJsonType[] = "application/json;charset=utf-8";
constexpr char kUnsupported[] = "OneGate server doesn't support this feature";
constexpr char kNotAuthorized[] = "Not authorized";
constexpr int kReadTimeoutMs = 5000;
constexpr int kWriteTimeoutMs = 5000;
constexpr int kIdleTimeoutMs = 5000;
constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kMaxBody = 8 * 1024 * 1024;

std::string ToUpper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string ToLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Ruby's String#to_i: optional blanks and sign, then leading digits; 0 otherwise.
long long RubyToI(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  bool neg = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
    neg = s[i] == '-';
    ++i;
  }
  long long v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (v < 1000000000000LL) v = v * 10 + (s[i] - '0');
    ++i;
  }
  return neg ? -v : v;
}

std::string UrlDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Matches a path against a pattern of segments: ":" captures any non-empty segment,
// "#" a segment of digits; anything else must be equal. E.g. "/vms/:/action".
std::optional<std::vector<std::string>> MatchPath(const std::string& path,
                                                  const std::string& pattern) {
  auto split = [](const std::string& s) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (;;) {
      const size_t slash = s.find('/', start);
      parts.push_back(s.substr(start, slash == std::string::npos ? slash : slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    return parts;
  };
  const auto got = split(path);
  const auto want = split(pattern);
  if (got.size() != want.size()) return std::nullopt;
  std::vector<std::string> captures;
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i] == ":") {
      if (got[i].empty()) return std::nullopt;
      captures.push_back(got[i]);
    } else if (want[i] == "#") {
      if (!AllDigits(got[i]) || got[i].size() > 9) return std::nullopt;
      captures.push_back(got[i]);
    } else if (want[i] != got[i]) {
      return std::nullopt;
    }
  }
  return captures;
}

// Rack's form/query parsing: `k=v` pairs split on `&`; a key without `=` has a nil value.
using Params = std::map<std::string, std::optional<std::string>>;
void ParseForm(const std::string& text, Params& params) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('&', start);
    if (end == std::string::npos) end = text.size();
    const std::string pair = text.substr(start, end - start);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      if (eq == std::string::npos) {
        params[UrlDecode(pair)] = std::nullopt;
      } else {
        params[UrlDecode(pair.substr(0, eq))] = UrlDecode(pair.substr(eq + 1));
      }
    }
    start = end + 1;
  }
}

std::string RandomToken() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  static const char kHex[] = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 40; ++i) t += kHex[rng() % 16];
  return t;
}

long long EpochSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------------------
// Connection handling

// One client connection: httplib reads the request from it and writes the answer to it.
class Connection final : public httplib::Stream {
 public:
  Connection(int fd, const std::atomic<bool>& stopping) : fd_(fd), stopping_(stopping) {}
  ~Connection() override { Close(); }

  bool is_readable() const override { return pos_ < buf_.size() || Poll(POLLIN, kReadTimeoutMs); }
  bool is_writable() const override { return fd_ >= 0 && Poll(POLLOUT, kWriteTimeoutMs); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < buf_.size()) {
      const size_t n = std::min(size, buf_.size() - pos_);
      std::memcpy(ptr, buf_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    if (fd_ < 0 || !Poll(POLLIN, kReadTimeoutMs)) return -1;
    for (;;) {
      const ssize_t n = ::recv(fd_, ptr, size, 0);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t off = 0;
    while (off < size) {
      if (fd_ < 0 || !Poll(POLLOUT, kWriteTimeoutMs)) return -1;
      const ssize_t n = ::send(fd_, ptr + off, size - off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return -1;
      }
      off += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(false, ip, port);
  }
  socket_t socket() const override { return fd_; }

  /// Waits for the next request and buffers its head and Content-Length body; false when
  /// the connection should end.
  bool ReadRequest() {
    body_.clear();
    Compact();
    // Tolerate empty lines between requests.
    while (pos_ < buf_.size() && (buf_[pos_] == '\r' || buf_[pos_] == '\n')) ++pos_;
    size_t head_end;
    bool first = true;
    while ((head_end = buf_.find("\r\n\r\n", pos_)) == std::string::npos) {
      if (buf_.size() - pos_ > kMaxHead) return false;
      if (!Fill(first && pos_ == buf_.size() ? kIdleTimeoutMs : kReadTimeoutMs)) return false;
      first = false;
      while (pos_ < buf_.size() && (buf_[pos_] == '\r' || buf_[pos_] == '\n')) ++pos_;
    }
    head_end += 4;
    std::string head = buf_.substr(pos_, head_end - pos_);
    // Find the framing headers.
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < head.size()) {
      size_t e = head.find("\r\n", start);
      if (e == std::string::npos) e = head.size();
      lines.push_back(head.substr(start, e - start));
      start = e + 2;
    }
    long long length = -1;
    int length_line = -1;
    int expect_line = -1;
    bool chunked = false;
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      const std::string name = ToLower(lines[i].substr(0, colon));
      std::string value = lines[i].substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      value.erase(value.find_last_not_of(" \t") + 1);
      if (name == "content-length") {
        // Odd framing: let httplib read (or refuse) the body itself.
        if (length_line >= 0 || !AllDigits(value) || value.size() > 12) return true;
        length = std::stoll(value);
        length_line = static_cast<int>(i);
      } else if (name == "transfer-encoding") {
        chunked = true;
      } else if (name == "expect") {
        expect_line = static_cast<int>(i);
      }
    }
    body_.clear();
    if (chunked || length <= 0) return true;
    if (static_cast<size_t>(length) > kMaxBody) return false;
    const size_t need = static_cast<size_t>(length);
    if (expect_line >= 0 && buf_.size() - head_end < need) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      if (write(kContinue, sizeof(kContinue) - 1) < 0) return false;
    }
    while (buf_.size() - head_end < need) {
      if (!Fill(kReadTimeoutMs)) return false;
    }
    body_ = buf_.substr(head_end, need);
    lines[length_line] = "Content-Length: 0";
    std::string new_head;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (static_cast<int>(i) == expect_line) continue;
      if (i + 1 == lines.size() && lines[i].empty()) break;
      new_head += lines[i] + "\r\n";
    }
    new_head += "\r\n";
    buf_.replace(pos_, head_end - pos_ + need, new_head);
    return true;
  }

  std::string TakeBody() { return std::move(body_); }

  /// Ends the connection now: a FIN (hang) or an RST (reset).
  void Abort(bool reset) {
    if (fd_ < 0) return;
    if (reset) {
      struct linger l {
        1, 0
      };
      ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    } else {
      ::shutdown(fd_, SHUT_RDWR);
    }
    ::close(fd_);
    fd_ = -1;
    aborted_ = true;
  }

  void Close() {
    if (fd_ < 0) return;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    fd_ = -1;
  }

  bool aborted() const { return aborted_; }

 private:
  bool Poll(short events, int timeout_ms) const {
    if (fd_ < 0) return false;
    const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (stopping_.load()) return false;
      pollfd p{fd_, events, 0};
      const int rc = ::poll(&p, 1, 50);
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) return false;
      if (SteadyClock::now() >= deadline) return false;
    }
  }

  bool Fill(int timeout_ms) {
    if (!Poll(POLLIN, timeout_ms)) return false;
    char tmp[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(n));
      return true;
    }
  }

  void Compact() {
    if (pos_ > 0) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
  }

  void Address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int rc = peer ? ::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len)
                        : ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    if (rc != 0) return;
    char text[INET6_ADDRSTRLEN] = {0};
    if (addr.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
      port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
      port = ntohs(a->sin6_port);
    }
    ip = text;
  }

  int fd_;
  const std::atomic<bool>& stopping_;
  std::string buf_;
  size_t pos_ = 0;
  std::string body_;
  bool aborted_ = false;
};

// The connection the current worker thread is serving (handlers run on that thread), and
// whether the simulator's handler answered the current request (not httplib itself).
thread_local Connection* t_connection = nullptr;
thread_local bool t_dispatched = false;

class SimHttpServer final : public httplib::Server {
 public:
  explicit SimHttpServer(const std::atomic<bool>& stopping) : stopping_(stopping) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    Connection conn(sock, stopping_);
    t_connection = &conn;
    bool ok = true;
    for (int left = 100; left > 0 && !stopping_.load(); --left) {
      if (!conn.ReadRequest()) break;
      bool closed = false;
      ok = process_request(conn, left == 1 || stopping_.load(), closed,
                           [&conn](httplib::Request& req) {
                             t_dispatched = false;
                             req.body = conn.TakeBody();
                             // Sinatra does not compress; keep httplib from doing it.
                             req.headers.erase("Accept-Encoding");
                           });
      if (!ok || closed || conn.aborted()) break;
    }
    t_connection = nullptr;
    conn.Close();
    return ok;
  }

  const std::atomic<bool>& stopping_;
};

// ---------------------------------------------------------------------------------------
// Model

struct Nic {
  std::string ip;
  std::string pending_ip;  // an address the VM gets when it leaves PENDING
  std::string mac;
  std::string network;
  std::string network_id;
  std::string name;
};

struct Vm {
  int id = -1;
  std::string name;
  std::string token;
  int service_id = -1;
  std::string role;
  int state = states::kVmActive;
  int lcm_state = states::kLcmRunning;
  int prev_state = states::kVmActive;
  int prev_lcm_state = states::kLcmRunning;
  long long stime = 0;
  long long etime = 0;
  Json user_template = Json::object();  // key -> string | object | array (repeated key)
  std::vector<Nic> nics;
  std::vector<std::map<std::string, std::string>> disks;
  std::map<std::string, std::string> context;
  std::vector<std::string> external_ips;  // 6.10's extra NIC entries (VmSpec::external_ips)
  OJson creation_info;                    // the 6-field vm_info OneFlow stored at creation
};

struct Role {
  RoleSpec spec;
  int cardinality = 0;
  int forced_state = -1;
  std::vector<int> nodes;
  std::set<int> victims;  // scale-down victims still in nodes[]
  int last_vmname = 0;
  int pending_creations = 0;
  bool scaling = false;
  bool cooldown = false;
  TimePoint cooldown_until;
};

struct Service {
  int id = -1;
  std::string name;
  int forced_state = -1;
  std::vector<Role> roles;
};

struct Reply {
  int status = 200;
  std::string body;
};

// A request as OneGate's handlers see it.
struct GateRequest {
  std::string method;
  std::string path;
  std::string raw_body;
  std::string host;
  std::optional<std::string> token;
  std::optional<std::string> vmid;
  Params params;  // query string merged with a form body (the body wins)
};

// A VM that puts its role and its service in WARNING: OneFlow's watchdog calls
// ServiceLCM#error_wd_cb (OpenNebula/one src/flow/lib/LifeCycleManager.rb), which sets both to
// WARNING, for a VM that goes POWEROFF or UNKNOWN or into a *_FAILURE LCM state
// (Role.vm_failure?, src/flow/lib/models/role.rb); the monitor step sets the role RUNNING again
// once none is left. Scale requests need the service RUNNING (Scale below).
bool IsWarningVm(const Vm& vm) {
  static const std::set<int> kFailureLcm = {16, 36, 37, 38, 39, 40, 41, 42,
                                            44, 45, 46, 47, 48, 49, 50};
  return vm.state == states::kVmPoweroff || kFailureLcm.count(vm.lcm_state) > 0;
}

Json FaultToJson(const Fault& f);

}  // namespace

struct OneGateSimulator::Impl {
  // ---- configuration and state guarded by mu
  mutable std::mutex mu;
  std::map<int, Vm> vms;
  std::map<int, Service> services;
  int next_vm_id = 100;
  int next_service_id = 10;
  std::map<std::string, int> ip_counters;  // "a.b.c." -> next host number
  std::multimap<TimePoint, std::function<void()>> events;
  SteadyClock::duration offset{0};
  std::vector<Fault> faults;
  std::vector<RecordedRequest> requests;
  std::vector<TerminationRecord> terminations;
  std::vector<TerminationRecord> pending_notifications;
  std::function<void(const TerminationRecord&)> hook;
  std::map<std::string, bool> permissions;
  std::string opennebula_version = "7";
  std::vector<std::string> restricted_attrs{"SCHED_REQUIREMENTS", "SERVICE_ID", "ROLE_NAME"};
  std::vector<std::string> restricted_actions{"reboot"};
  std::atomic<bool> operator_api{false};
  int worker_threads = 32;
  OneGateSimulator* owner = nullptr;

  // ---- server
  std::atomic<bool> stopping{false};
  std::unique_ptr<SimHttpServer> server;
  std::thread listen_thread;
  std::thread ticker_thread;
  std::mutex sleep_mu;
  std::condition_variable sleep_cv;
  std::string host;
  int port = -1;

  // ===================================================================== time and events
  TimePoint Now() const { return SteadyClock::now() + offset; }

  void Schedule(SteadyClock::duration delay, std::function<void()> fn) {
    if (delay <= SteadyClock::duration::zero()) {
      fn();
    } else {
      events.emplace(Now() + delay, std::move(fn));
    }
  }

  /// Runs due events and state transitions (mu held).
  void Advance() {
    for (;;) {
      auto it = events.begin();
      if (it == events.end() || it->first > Now()) break;
      auto fn = std::move(it->second);
      events.erase(it);
      fn();
    }
    UpdateStates();
  }

  void UpdateStates() {
    for (auto& [sid, svc] : services) {
      for (auto& role : svc.roles) {
        if (role.scaling && role.pending_creations == 0 && role.victims.empty() &&
            static_cast<int>(role.nodes.size()) >= role.cardinality) {
          bool all_running = true;
          for (int id : role.nodes) {
            const Vm& vm = vms.at(id);
            if (vm.state != states::kVmActive || vm.lcm_state != states::kLcmRunning) {
              all_running = false;
            }
          }
          if (all_running) {
            role.scaling = false;
            role.cooldown = true;
            role.cooldown_until = Now() + CooldownOf(role.spec);
          }
        }
        if (role.cooldown && Now() >= role.cooldown_until) role.cooldown = false;
      }
    }
  }

  static SteadyClock::duration CooldownOf(const RoleSpec& spec) {
    if (spec.cooldown_ms >= 0) return std::chrono::milliseconds(spec.cooldown_ms);
    return std::chrono::seconds(std::max(0, spec.cooldown_seconds));
  }

  int RoleStateOf(const Role& role) const {
    if (role.forced_state >= 0) return role.forced_state;
    if (role.scaling) return states::kScaling;
    if (role.cooldown) return states::kCooldown;
    for (int id : role.nodes) {
      if (IsWarningVm(vms.at(id))) return states::kWarning;
    }
    return states::kRunning;
  }

  int ServiceStateOf(const Service& svc) const {
    if (svc.forced_state >= 0) return svc.forced_state;
    bool cooldown = false;
    bool warning = false;
    for (const auto& role : svc.roles) {
      const int s = RoleStateOf(role);
      if (s == states::kScaling) return states::kScaling;
      if (s == states::kCooldown) cooldown = true;
      if (s == states::kWarning) warning = true;
    }
    if (cooldown) return states::kCooldown;
    if (warning) return states::kWarning;
    return states::kRunning;
  }

  Service* FindService(int id) {
    auto it = services.find(id);
    return it == services.end() ? nullptr : &it->second;
  }
  Role* FindRole(Service* svc, const std::string& name) {
    if (!svc) return nullptr;
    for (auto& r : svc->roles) {
      if (r.spec.name == name) return &r;
    }
    return nullptr;
  }
  Vm* FindVm(int id) {
    auto it = vms.find(id);
    return it == vms.end() ? nullptr : &it->second;
  }

  // ===================================================================== VMs
  std::string NextIp(const std::string& base) {
    // "a.b.c.0" -> a fresh "a.b.c.N"; anything else as given.
    if (base.size() < 2 || base.compare(base.size() - 2, 2, ".0") != 0) return base;
    const std::string prefix = base.substr(0, base.size() - 1);
    int& next = ip_counters.try_emplace(prefix, 10).first->second;
    return prefix + std::to_string(next++);
  }

  static std::string MacFor(const std::string& ip, int vm_id, size_t index) {
    unsigned a, b, c, d;
    char buf[32];
    if (std::sscanf(ip.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) == 4 && a < 256 && b < 256 &&
        c < 256 && d < 256) {
      std::snprintf(buf, sizeof(buf), "02:00:%02x:%02x:%02x:%02x", a, b, c, d);
    } else {
      std::snprintf(buf, sizeof(buf), "02:01:%02x:%02x:%02x:%02x", (vm_id >> 16) & 0xff,
                    (vm_id >> 8) & 0xff, vm_id & 0xff, static_cast<unsigned>(index & 0xff));
    }
    return buf;
  }

  Vm& CreateVm(Service* svc, Role* role, const VmSpec& spec, bool auto_ips) {
    Vm vm;
    vm.id = next_vm_id++;
    vm.token = RandomToken();
    vm.stime = EpochSeconds();
    vm.state = vm.prev_state = spec.state;
    vm.lcm_state = vm.prev_lcm_state = spec.lcm_state;
    if (!spec.name.empty()) {
      vm.name = spec.name;
    } else if (svc && role) {
      vm.name = role->spec.name + "_" + std::to_string(role->last_vmname) + "_(service_" +
                std::to_string(svc->id) + ")";
    } else {
      vm.name = "one-" + std::to_string(vm.id);
    }
    if (role) role->last_vmname++;
    for (const auto& [k, v] : spec.user_template) vm.user_template[k] = v;
    for (const auto& [k, sub] : spec.user_vectors) {
      Json obj = Json::object();
      for (const auto& [sk, sv] : sub) obj[sk] = sv;
      vm.user_template[k] = obj;
    }
    if (svc && role) {
      vm.service_id = svc->id;
      vm.role = role->spec.name;
      vm.user_template["SERVICE_ID"] = std::to_string(svc->id);
      vm.user_template["ROLE_NAME"] = role->spec.name;
    }
    for (size_t i = 0; i < spec.nics.size(); ++i) {
      const NicSpec& ns = spec.nics[i];
      Nic nic;
      nic.ip = auto_ips ? NextIp(ns.ip) : ns.ip;
      nic.mac = !ns.mac.empty() ? ns.mac : MacFor(nic.ip, vm.id, i);
      nic.network = ns.network;
      nic.network_id = ns.network_id;
      nic.name = ns.name.empty() ? "NIC" + std::to_string(i) : ns.name;
      vm.nics.push_back(nic);
    }
    vm.context = spec.context;
    vm.disks = spec.disks;
    vm.external_ips = spec.external_ips;
    for (size_t i = 0; i < vm.disks.size(); ++i) vm.disks[i].emplace("DISK_ID", std::to_string(i));
    vm.creation_info = OJson{{"VM",
                              {{"ID", std::to_string(vm.id)},
                               {"UID", "5"},
                               {"GID", "1"},
                               {"UNAME", "alice"},
                               {"GNAME", "users"},
                               {"NAME", vm.name}}}};
    const int id = vm.id;
    vms.emplace(id, std::move(vm));
    if (role) role->nodes.push_back(id);
    return vms.at(id);
  }

  // OneFlow creating one node of a scale-up.
  void ProvisionNode(int service_id, const std::string& role_name) {
    Service* svc = FindService(service_id);
    Role* role = FindRole(svc, role_name);
    if (!role) return;
    role->pending_creations = std::max(0, role->pending_creations - 1);
    const bool delayed_ip = role->spec.ip_delay.count() > 0;
    VmSpec spec = role->spec.vm_template;
    if (delayed_ip) {
      spec.state = states::kVmPending;
      spec.lcm_state = 0;
    } else {
      spec.state = states::kVmActive;
      spec.lcm_state = states::kLcmRunning;
    }
    Vm& vm = CreateVm(svc, role, spec, /*auto_ips=*/true);
    if (delayed_ip) {
      for (auto& nic : vm.nics) {
        nic.pending_ip = nic.ip;
        nic.ip.clear();
      }
      const int id = vm.id;
      Schedule(role->spec.ip_delay, [this, id] {
        Vm* v = FindVm(id);
        if (!v || v->state != states::kVmPending) return;
        for (auto& nic : v->nics) {
          if (nic.ip.empty()) nic.ip = nic.pending_ip;
        }
        SetState(*v, states::kVmActive, states::kLcmRunning);
      });
    }
  }

  static void SetState(Vm& vm, int state, int lcm) {
    vm.prev_state = vm.state;
    vm.prev_lcm_state = vm.lcm_state;
    vm.state = state;
    vm.lcm_state = lcm;
  }

  void Record(int vm_id, bool hard, const std::string& cause) {
    TerminationRecord r{vm_id, hard, cause};
    terminations.push_back(r);
    pending_notifications.push_back(r);
  }

  void MarkDone(Vm& vm) {
    SetState(vm, states::kVmDone, 0);
    vm.etime = EpochSeconds();
  }

  void RemoveNode(Vm& vm, bool lower_cardinality) {
    Role* role = FindRole(FindService(vm.service_id), vm.role);
    if (!role) return;
    auto it = std::find(role->nodes.begin(), role->nodes.end(), vm.id);
    if (it == role->nodes.end()) return;
    role->nodes.erase(it);
    role->victims.erase(vm.id);
    if (lower_cardinality) role->cardinality = std::max(0, role->cardinality - 1);
  }

  // A scale-down victim receives its shutdown action.
  void BeginShutdown(Role& role, Vm& vm) {
    role.victims.insert(vm.id);
    SetState(vm, states::kVmActive, states::kLcmShutdown);
    Record(vm.id, role.spec.hard_shutdown, "scale-down");
    const int id = vm.id;
    Schedule(role.spec.shutdown_delay, [this, id] {
      Vm* v = FindVm(id);
      if (!v || v->state == states::kVmDone) return;
      MarkDone(*v);
      RemoveNode(*v, /*lower_cardinality=*/false);
    });
  }

  // The VM became DONE outside OneFlow (operator or OneGate terminate): OneFlow's watchdog
  // removes the node and lowers the cardinality.
  void TerminateOutsideFlow(Vm& vm, bool hard, const std::string& cause) {
    if (vm.state == states::kVmDone) return;
    Role* role = FindRole(FindService(vm.service_id), vm.role);
    const bool victim = role && role->victims.count(vm.id) > 0;
    if (!victim) Record(vm.id, hard, cause);
    MarkDone(vm);
    RemoveNode(vm, /*lower_cardinality=*/!victim);
  }

  // OneFlow's scale (`force` skips the state and min/max checks).
  bool Scale(Service& svc, const std::string& role_name, long long n, bool force) {
    Role* role = FindRole(&svc, role_name);
    if (!role || n < 0 || n > 100000) return false;
    if (!force) {
      if (ServiceStateOf(svc) != states::kRunning) return false;
      if (n == role->cardinality) return false;
      if (n < role->spec.min_vms || n > role->spec.max_vms) return false;
    } else if (n == role->cardinality) {
      return true;
    }
    role->cardinality = static_cast<int>(n);
    role->scaling = true;
    role->cooldown = false;
    const int live = static_cast<int>(role->nodes.size() - role->victims.size());
    if (role->cardinality > live + role->pending_creations) {
      const int need = role->cardinality - live - role->pending_creations;
      if (role->spec.auto_provision) {
        role->pending_creations += need;
        for (int k = 1; k <= need; ++k) {
          const int sid = svc.id;
          const std::string rn = role->spec.name;
          Schedule(role->spec.provision_delay * k, [this, sid, rn] { ProvisionNode(sid, rn); });
          role = FindRole(FindService(sid), rn);  // Schedule may have run it
        }
      }
    } else if (role->cardinality < live) {
      // The oldest nodes go first.
      int excess = live - role->cardinality;
      std::vector<int> chosen;
      for (int id : role->nodes) {
        if (excess == 0) break;
        if (role->victims.count(id)) continue;
        chosen.push_back(id);
        --excess;
      }
      for (int id : chosen) {
        Role* r = FindRole(FindService(svc.id), role_name);
        Vm* vm = FindVm(id);
        if (r && vm) BeginShutdown(*r, *vm);
      }
    }
    UpdateStates();
    return true;
  }

  // ===================================================================== JSON views
  static Json LeafOrEmpty(const std::string& v) { return v.empty() ? Json::object() : Json(v); }

  static Json RenderValue(const Json& v) {
    if (v.is_string()) return LeafOrEmpty(v.get<std::string>());
    if (v.is_object()) {
      if (v.empty()) return Json::object();
      Json out = Json::object();
      for (const auto& [k, sub] : v.items()) out[k] = RenderValue(sub);
      return out;
    }
    if (v.is_array()) {
      Json out = Json::array();
      for (const auto& e : v) out.push_back(RenderValue(e));
      return out;
    }
    return v;
  }

  static Json RenderUserTemplate(const Vm& vm, bool filtered) {
    Json out = Json::object();
    for (const auto& [k, v] : vm.user_template.items()) {
      if (filtered && k == "SCHED_MESSAGE") continue;
      out[k] = RenderValue(v);
    }
    return out;
  }

  static Json NicJson(const Nic& nic, size_t index, bool full) {
    Json n = Json::object();
    if (!nic.ip.empty()) n["IP"] = nic.ip;
    if (!nic.mac.empty()) n["MAC"] = nic.mac;
    if (!nic.name.empty()) n["NAME"] = nic.name;
    if (!nic.network.empty()) n["NETWORK"] = nic.network;
    if (full) {
      if (!nic.network_id.empty()) n["NETWORK_ID"] = nic.network_id;
      n["NIC_ID"] = std::to_string(index);
    }
    return n;
  }

  // GET /vm and GET /vms/:id (build_vm_hash). OneGate 6.10 appends an {"IP": ...} entry to
  // NIC for each external IP in the VM's MONITORING; 7.x does not.
  OJson FilteredVm(const Vm& vm) const {
    Json nics = Json::array();
    for (size_t i = 0; i < vm.nics.size(); ++i) nics.push_back(NicJson(vm.nics[i], i, false));
    if (opennebula_version == "6.10") {
      for (const auto& ip : vm.external_ips) nics.push_back(Json{{"IP", ip}});
    }
    OJson tmpl = OJson::object();
    tmpl["NIC"] = OJson::parse(nics.dump());
    tmpl["NIC_ALIAS"] = OJson::array();
    OJson v = OJson::object();
    v["NAME"] = vm.name;
    v["ID"] = std::to_string(vm.id);
    v["STATE"] = std::to_string(vm.state);
    v["LCM_STATE"] = std::to_string(vm.lcm_state);
    v["USER_TEMPLATE"] = OJson::parse(RenderUserTemplate(vm, true).dump());
    v["TEMPLATE"] = tmpl;
    return OJson{{"VM", v}};
  }

  // The unfiltered VM hash (vm.to_hash), as in extended service output.
  static OJson FullVm(const Vm& vm) {
    Json tmpl = Json::object();
    if (!vm.context.empty()) {
      Json ctx = Json::object();
      for (const auto& [k, v] : vm.context) ctx[k] = LeafOrEmpty(v);
      tmpl["CONTEXT"] = ctx;
    }
    tmpl["CPU"] = "1";
    tmpl["MEMORY"] = "1024";
    if (vm.nics.size() == 1) {
      tmpl["NIC"] = NicJson(vm.nics[0], 0, true);
    } else if (vm.nics.size() > 1) {
      Json arr = Json::array();
      for (size_t i = 0; i < vm.nics.size(); ++i) arr.push_back(NicJson(vm.nics[i], i, true));
      tmpl["NIC"] = arr;
    }
    // DISK like NIC in this hash: an object for one disk, an array for several.
    auto disk_json = [](const std::map<std::string, std::string>& d) {
      Json o = Json::object();
      for (const auto& [k, v] : d) o[k] = LeafOrEmpty(v);
      return o;
    };
    if (vm.disks.size() == 1) {
      tmpl["DISK"] = disk_json(vm.disks[0]);
    } else if (vm.disks.size() > 1) {
      Json arr = Json::array();
      for (const auto& d : vm.disks) arr.push_back(disk_json(d));
      tmpl["DISK"] = arr;
    }
    tmpl["TEMPLATE_ID"] = "0";
    tmpl["VMID"] = std::to_string(vm.id);
    OJson v = OJson::object();
    v["ID"] = std::to_string(vm.id);
    v["UID"] = "5";
    v["GID"] = "1";
    v["UNAME"] = "alice";
    v["GNAME"] = "users";
    v["NAME"] = vm.name;
    v["PERMISSIONS"] = OJson{{"OWNER_U", "1"}, {"OWNER_M", "1"}, {"OWNER_A", "0"},
                             {"GROUP_U", "0"}, {"GROUP_M", "0"}, {"GROUP_A", "0"},
                             {"OTHER_U", "0"}, {"OTHER_M", "0"}, {"OTHER_A", "0"}};
    v["LAST_POLL"] = "0";
    v["STATE"] = std::to_string(vm.state);
    v["LCM_STATE"] = std::to_string(vm.lcm_state);
    v["PREV_STATE"] = std::to_string(vm.prev_state);
    v["PREV_LCM_STATE"] = std::to_string(vm.prev_lcm_state);
    v["RESCHED"] = "0";
    v["STIME"] = std::to_string(vm.stime);
    v["ETIME"] = std::to_string(vm.etime);
    v["DEPLOY_ID"] =
        vm.state == states::kVmPending ? OJson::object() : OJson("one-" + std::to_string(vm.id));
    v["MONITORING"] = OJson::object();
    v["TEMPLATE"] = OJson::parse(tmpl.dump());
    v["USER_TEMPLATE"] = OJson::parse(RenderUserTemplate(vm, false).dump());
    v["HISTORY_RECORDS"] = OJson::object();
    return OJson{{"VM", v}};
  }

  OJson ServiceView(const Service& svc, bool extended) const {
    OJson s = OJson::object();
    s["name"] = svc.name;
    s["id"] = std::to_string(svc.id);
    s["state"] = ServiceStateOf(svc);
    OJson roles = OJson::array();
    for (const auto& role : svc.roles) {
      OJson r = OJson::object();
      r["name"] = role.spec.name;
      r["cardinality"] = role.cardinality;
      r["state"] = RoleStateOf(role);
      OJson nodes = OJson::array();
      for (int id : role.nodes) {
        const Vm& vm = vms.at(id);
        OJson n = OJson::object();
        n["deploy_id"] = id;
        n["running"] = nullptr;
        n["vm_info"] = extended ? FullVm(vm) : vm.creation_info;
        nodes.push_back(n);
      }
      r["nodes"] = nodes;
      roles.push_back(r);
    }
    s["roles"] = roles;
    return OJson{{"SERVICE", s}};
  }

  // ===================================================================== OneGate routes
  static Reply Error(int status, std::string body) { return Reply{status, std::move(body)}; }

  std::optional<Reply> CheckPermission(const std::string& resource, const std::string& action) {
    auto it = permissions.find(resource + "." + action);
    if (it != permissions.end() && !it->second) {
      return Error(403, "Action (" + action + ") on resource (" + resource + ") not supported");
    }
    return std::nullopt;
  }

  // OneGateCloudAuth: both headers, a known VM, the matching token.
  Vm* Authenticate(const GateRequest& r) {
    if (!r.token || !r.vmid || !AllDigits(*r.vmid) || r.vmid->size() > 9) return nullptr;
    Vm* vm = FindVm(std::stoi(*r.vmid));
    if (!vm || vm->token != *r.token) return nullptr;
    return vm;
  }

  static std::optional<std::string> ServiceIdAttr(const Vm& vm) {
    auto it = vm.user_template.find("SERVICE_ID");
    if (it == vm.user_template.end()) return std::nullopt;
    return it->is_string() ? it->get<std::string>() : std::string("{}");
  }

  // check_vm_in_service
  std::variant<Service*, Reply> CheckVmInService(long long vm_id,
                                                 const std::optional<std::string>& sid) {
    if (!sid || !AllDigits(*sid)) return Error(400, "Empty or invalid SERVICE_ID");
    Service* svc = sid->size() <= 9 ? FindService(std::stoi(*sid)) : nullptr;
    if (!svc) return Error(404, "Service " + *sid + " not found");
    if (svc->roles.empty()) return Error(400, "Service " + *sid + " is empty.");
    for (const auto& role : svc->roles) {
      for (int id : role.nodes) {
        if (id == vm_id) return svc;
      }
    }
    return Error(400, "Service " + *sid + " does not contain VM " + std::to_string(vm_id) + ".");
  }

  // get_requested_vm
  std::variant<Vm*, Reply> RequestedVm(Vm& source, const std::string& id_param) {
    const long long requested = RubyToI(id_param);
    if (requested == source.id) return &source;
    const auto sid = ServiceIdAttr(source);
    if (!sid) {
      return Error(400,
                   "This VM does not belong to any Virtual Router or Service, so it cannot "
                   "retrieve information from other VMs");
    }
    auto check = CheckVmInService(requested, sid);
    if (auto* reply = std::get_if<Reply>(&check)) return *reply;
    Vm* vm = FindVm(static_cast<int>(requested));
    if (!vm) {
      return Error(
          404, "[one.vm.info] Error getting virtual machine [" + std::to_string(requested) + "].");
    }
    return vm;
  }

  // OneGate's update(): data/type, escape_attr, restricted attributes, oned's update.
  Reply Update(Vm& vm, const GateRequest& r) {
    std::string data;
    auto d = r.params.find("data");
    if (d != r.params.end() && d->second) {
      data = *d->second;
    } else {
      data = r.raw_body;
    }
    long long type = 1;
    auto t = r.params.find("type");
    if (t != r.params.end() && t->second) type = RubyToI(*t->second);
    const std::string escaped = EscapeAttr(data);
    const std::string error = type == 1 ? "cannot be modified" : "cannot be deleted";
    // check_restricted_attrs: the text before the first '=' of each line.
    size_t start = 0;
    while (start < escaped.size()) {
      size_t end = escaped.find('\n', start);
      if (end == std::string::npos) end = escaped.size();
      const std::string line = escaped.substr(start, end - start);
      const std::string key = line.substr(0, line.find('='));
      if (!line.empty() && !key.empty()) {
        for (const auto& restricted : restricted_attrs) {
          if (ToUpper(key) == ToUpper(restricted)) {
            return Error(403, "Attribute (" + key + ") " + error);
          }
        }
      }
      start = end + 1;
    }
    if (vm.state == states::kVmDone) {
      return Error(500, "[one.vm.update] Error updating virtual machine [" + std::to_string(vm.id) +
                            "]: VM is in DONE state.");
    }
    if (type == 1) {
      const ParsedTemplate parsed = ParseOnedTemplate(escaped);
      if (!parsed.ok) return Error(500, "[one.vm.update] " + parsed.error);
      // Template::merge: drop every attribute named in the update, then add them all
      // (a name repeated within one update is kept several times).
      for (const auto& a : parsed.attributes) vm.user_template.erase(a.name);
      for (const auto& a : parsed.attributes) {
        Json value;
        if (a.value) {
          value = *a.value;
        } else {
          value = Json::object();
          for (const auto& [k, v] : a.vector) value[k] = v;
        }
        auto it = vm.user_template.find(a.name);
        if (it == vm.user_template.end()) {
          vm.user_template[a.name] = value;
        } else if (it->is_array()) {
          it->push_back(value);
        } else {
          Json arr = Json::array({*it, value});
          *it = arr;
        }
      }
      return Reply{200, ""};
    }
    // delete_element("USER_TEMPLATE/<data>"): one element name, case-sensitive.
    auto it = vm.user_template.find(escaped);
    if (escaped.empty() || it == vm.user_template.end()) {
      return Error(500, "attribute not found");
    }
    vm.user_template.erase(it);
    return Reply{200, ""};
  }

  Reply PerformAction(Vm& vm, const std::string& body) {
    Json j;
    try {
      j = Json::parse(body);
    } catch (const std::exception&) {
      if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
        return Error(400, "unexpected end of input");
      }
      return Error(400, "unexpected token at '" + body + "'");
    }
    if (!j.is_object() || !j.contains("action")) {
      return Error(400, "Error parsing JSON: Wrong resource type");
    }
    const Json& action = j["action"];
    std::string perform;
    bool has_perform = false;
    if (action.is_object() && action.contains("perform") && action["perform"].is_string()) {
      perform = action["perform"].get<std::string>();
      has_perform = true;
    }
    if (has_perform) {
      for (const auto& restricted : restricted_actions) {
        if (ToLower(perform) == ToLower(restricted)) {
          return Error(403, "Action (" + perform + ") is not allowed on this resource");
        }
      }
    }
    const bool hard = action.is_object() && action.contains("params") &&
                      action["params"].is_boolean() && action["params"].get<bool>();
    static const std::set<std::string> kNoOps = {
        "deploy",          "livemigrate",     "migrate",    "saveas",    "snapshot_create",
        "snapshot_revert", "snapshot_delete", "reboot",     "chown",     "chmod",
        "resize",          "attachdisk",      "detachdisk", "attachnic", "detachnic",
        "rename",          "resched",         "unresched",  "recover"};
    static const std::map<std::string, std::pair<int, int>> kStateChanges = {
        {"hold", {2, 0}},     {"release", {1, 0}},  {"stop", {4, 0}},  {"suspend", {5, 0}},
        {"poweroff", {8, 0}}, {"undeploy", {9, 0}}, {"resume", {3, 3}}};
    const bool known = perform == "terminate" || perform == "shutdown" || perform == "delete" ||
                       kNoOps.count(perform) || kStateChanges.count(perform);
    if (!known) return Error(500, perform + " action not available for this resource");
    if (vm.state == states::kVmDone) {
      return Error(500, "[one.vm.action] Error performing action \"" + perform +
                            "\" on virtual machine [" + std::to_string(vm.id) +
                            "]: This action is not available for state DONE");
    }
    if (perform == "terminate" || perform == "shutdown") {
      TerminateOutsideFlow(vm, hard, "action");
    } else if (perform == "delete") {
      TerminateOutsideFlow(vm, true, "action");
    } else if (auto it = kStateChanges.find(perform); it != kStateChanges.end()) {
      SetState(vm, it->second.first, it->second.second);
    }
    return Reply{204, ""};
  }

  Reply ScaleRole(Vm& source, const std::string& role_name, const std::string& body) {
    const auto sid = ServiceIdAttr(source);
    auto check = CheckVmInService(source.id, sid);
    if (auto* reply = std::get_if<Reply>(&check)) return *reply;
    Service* svc = std::get<Service*>(check);
    Json j;
    try {
      j = Json::parse(body);
    } catch (const std::exception&) {
      if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
        return Error(500, "unexpected end of input");
      }
      return Error(500, "unexpected token at '" + body + "'");
    }
    if (!j.is_object()) return Error(500, "no implicit conversion of String into Integer");
    std::optional<long long> n;
    if (j.contains("cardinality")) {
      const Json& c = j["cardinality"];
      if (c.is_number_integer()) {
        n = c.get<long long>();
      } else if (c.is_number_float() &&
                 c.get<double>() == static_cast<long long>(c.get<double>())) {
        n = static_cast<long long>(c.get<double>());
      } else if (c.is_string() && AllDigits(c.get<std::string>()) &&
                 c.get<std::string>().size() < 10) {
        n = std::stoll(c.get<std::string>());
      }
    }
    if (!n || !Scale(*svc, role_name, *n, /*force=*/false)) {
      return Error(400, "Error performing action on service " + *sid + " role " + role_name);
    }
    return Reply{200, ""};
  }

  Reply HandleGate(const GateRequest& r) {
    const std::string method = r.method == "HEAD" ? "GET" : r.method;
    const auto vms_id = MatchPath(r.path, "/vms/:");
    const auto vms_action = MatchPath(r.path, "/vms/:/action");
    const auto role_path = MatchPath(r.path, "/service/role/:");
    const auto vnet = MatchPath(r.path, "/vnet/:");

    auto authed = [&](const char* resource, const char* action,
                      const std::function<Reply(Vm&)>& fn) -> Reply {
      if (resource) {
        if (auto denied = CheckPermission(resource, action)) return *denied;
      }
      Vm* source = Authenticate(r);
      if (!source) return Error(401, kNotAuthorized);
      return fn(*source);
    };
    auto on_requested = [&](Vm& source, const std::string& id,
                            const std::function<Reply(Vm&)>& fn) -> Reply {
      auto target = RequestedVm(source, id);
      if (auto* reply = std::get_if<Reply>(&target)) return *reply;
      return fn(*std::get<Vm*>(target));
    };

    if (method == "GET" && r.path == "/") {
      return authed(nullptr, nullptr, [&](Vm&) {
        const std::string base = "http://" + r.host;
        OJson j = OJson::object();
        j["vm_info"] = base + "/vm";
        j["service_info"] = base + "/service";
        return Reply{200, j.dump()};
      });
    }
    if (method == "GET" && r.path == "/vm") {
      return authed("vm", "show", [&](Vm& vm) { return Reply{200, FilteredVm(vm).dump()}; });
    }
    if (method == "PUT" && r.path == "/vm") {
      return authed("vm", "update", [&](Vm& vm) { return Update(vm, r); });
    }
    if (method == "GET" && vms_id) {
      const std::string id = (*vms_id)[0];
      return authed("vm", "show_by_id", [&](Vm& source) {
        return on_requested(source, id, [&](Vm& vm) { return Reply{200, FilteredVm(vm).dump()}; });
      });
    }
    if (method == "PUT" && vms_id) {
      const std::string id = (*vms_id)[0];
      return authed("vm", "update_by_id", [&](Vm& source) {
        return on_requested(source, id, [&](Vm& vm) { return Update(vm, r); });
      });
    }
    if (method == "POST" && vms_action) {
      const std::string id = (*vms_action)[0];
      return authed("vm", "action_by_id", [&](Vm& source) {
        return on_requested(source, id, [&](Vm& vm) { return PerformAction(vm, r.raw_body); });
      });
    }
    if (method == "GET" && r.path == "/service") {
      return authed("service", "show", [&](Vm& source) {
        auto check = CheckVmInService(source.id, ServiceIdAttr(source));
        if (auto* reply = std::get_if<Reply>(&check)) return *reply;
        auto ext = r.params.find("extended");
        const bool extended = ext != r.params.end() && ext->second && !ext->second->empty();
        return Reply{200, ServiceView(*std::get<Service*>(check), extended).dump()};
      });
    }
    if (method == "PUT" && role_path) {
      const std::string role = (*role_path)[0];
      return authed("service", "change_cardinality",
                    [&](Vm& source) { return ScaleRole(source, role, r.raw_body); });
    }
    if (method == "GET" && r.path == "/vrouter") {
      return authed("vrouter", "show",
                    [&](Vm&) { return Error(400, "Empty or invalid VROUTER_ID"); });
    }
    if (method == "GET" && vnet) {
      const std::string id = (*vnet)[0];
      return authed("vnet", "show_by_id", [&](Vm&) {
        if (!AllDigits(id)) {
          return Error(400, "Invalid id format (ID: " + id + "). ID must be an integer.");
        }
        return Error(400,
                     "Virtual networks information can only be retrieved from Virtual "
                     "Routers.");
      });
    }
    return Error(400, kUnsupported);
  }

  // ===================================================================== HTTP glue
  std::optional<Fault> TakeFault(const std::string& method, const std::string& path) {
    for (auto it = faults.begin(); it != faults.end(); ++it) {
      if (!it->method.empty() && ToUpper(it->method) != method) continue;
      if (!it->path_prefix.empty() && !StartsWith(path, it->path_prefix)) continue;
      if (it->times == 0) continue;
      Fault f = *it;
      if (it->times > 0 && --it->times == 0) faults.erase(it);
      return f;
    }
    return std::nullopt;
  }

  /// Sleeps up to `d`, waking early when the server stops.
  void Sleep(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(sleep_mu);
    sleep_cv.wait_for(lock, d, [this] { return stopping.load(); });
  }

  void Notify() {
    std::vector<TerminationRecord> batch;
    std::function<void(const TerminationRecord&)> h;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(pending_notifications);
      h = hook;
    }
    if (h) {
      for (const auto& r : batch) h(r);
    }
  }

  static void Respond(httplib::Response& res, int status, const std::string& body) {
    res.status = status;
    res.set_content(body, kJsonType);
  }

  void Dispatch(const httplib::Request& req, httplib::Response& res);
  void HandleOperator(const httplib::Request& req, httplib::Response& res);
};

// ---------------------------------------------------------------------------------------

void OneGateSimulator::Impl::Dispatch(const httplib::Request& req, httplib::Response& res) {
  Connection* conn = t_connection;
  t_dispatched = true;
  std::string query;
  if (auto q = req.target.find('?'); q != std::string::npos) query = req.target.substr(q + 1);
  if (operator_api && (req.path == "/_sim" || StartsWith(req.path, "/_sim/"))) {
    HandleOperator(req, res);
    return;
  }

  GateRequest g;
  g.method = req.method;
  g.path = req.path;
  g.raw_body = req.body;
  g.host = req.get_header_value("Host");
  if (req.has_header("X-ONEGATE-TOKEN")) g.token = req.get_header_value("X-ONEGATE-TOKEN");
  if (req.has_header("X-ONEGATE-VMID")) g.vmid = req.get_header_value("X-ONEGATE-VMID");
  ParseForm(query, g.params);
  std::string media = ToLower(req.get_header_value("Content-Type"));
  media = media.substr(0, media.find(';'));
  media.erase(media.find_last_not_of(" \t") + 1);
  if (media == "application/x-www-form-urlencoded" || (media.empty() && req.method == "POST")) {
    ParseForm(req.body, g.params);
  }

  RecordedRequest rec;
  rec.method = req.method;
  rec.path = req.path;
  rec.query = query;
  rec.body = req.body;
  if (g.vmid && AllDigits(*g.vmid) && g.vmid->size() <= 9) rec.vm_id = std::stoi(*g.vmid);

  std::optional<Fault> fault;
  size_t index;
  {
    std::lock_guard<std::mutex> lock(mu);
    index = requests.size();
    requests.push_back(rec);
    fault = TakeFault(ToUpper(req.method), req.path);
  }
  auto set_status = [&](int status) {
    std::lock_guard<std::mutex> lock(mu);
    if (index < requests.size()) requests[index].status = status;
  };

  if (fault) {
    switch (fault->kind) {
      case FaultKind::kStatus:
        Respond(res, fault->status, fault->body);
        set_status(fault->status);
        return;
      case FaultKind::kMalformed:
        Respond(res, 200, fault->body);
        set_status(200);
        return;
      case FaultKind::kHang:
        Sleep(fault->delay);
        if (conn) conn->Abort(false);
        res.status = 500;
        return;
      case FaultKind::kReset:
        if (conn) conn->Abort(true);
        res.status = 500;
        return;
      case FaultKind::kSlow:
        Sleep(fault->delay);
        break;
      case FaultKind::kTruncated:
        break;
    }
  }

  Reply reply;
  {
    std::lock_guard<std::mutex> lock(mu);
    Advance();
    reply = HandleGate(g);
    UpdateStates();
  }
  Notify();
  set_status(reply.status);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (index < requests.size()) requests[index].response_bytes = reply.body.size();
  }
  if (fault && fault->kind == FaultKind::kTruncated) {
    const std::string body = reply.body;
    const size_t announced = std::max<size_t>(body.size(), 2);
    res.status = reply.status;
    res.set_content_provider(announced, kJsonType,
                             [body](size_t offset, size_t, httplib::DataSink& sink) {
                               if (offset == 0 && body.size() / 2 > 0)
                                 sink.write(body.data(), body.size() / 2);
                               return false;
                             });
    return;
  }
  Respond(res, reply.status, reply.body);
}

namespace {

Json FaultToJson(const Fault& f) {
  static const char* kKinds[] = {"status", "hang", "slow", "truncated", "malformed", "reset"};
  return Json{{"kind", kKinds[static_cast<int>(f.kind)]},
              {"method", f.method},
              {"path_prefix", f.path_prefix},
              {"status", f.status},
              {"body", f.body},
              {"delay_ms", f.delay.count()},
              {"times", f.times}};
}

std::optional<Fault> FaultFromJson(const Json& j) {
  static const std::map<std::string, FaultKind> kKinds = {
      {"status", FaultKind::kStatus},       {"hang", FaultKind::kHang},
      {"slow", FaultKind::kSlow},           {"truncated", FaultKind::kTruncated},
      {"malformed", FaultKind::kMalformed}, {"reset", FaultKind::kReset}};
  Fault f;
  auto it = kKinds.find(j.value("kind", "status"));
  if (it == kKinds.end()) return std::nullopt;
  f.kind = it->second;
  f.method = j.value("method", "");
  f.path_prefix = j.value("path_prefix", "");
  f.status = j.value("status", 500);
  f.body = j.value("body", std::string("Internal error"));
  f.delay = std::chrono::milliseconds(j.value("delay_ms", 0));
  f.times = j.value("times", -1);
  return f;
}

std::map<std::string, std::string> StringMap(const Json& j) {
  std::map<std::string, std::string> out;
  if (!j.is_object()) return out;
  for (const auto& [k, v] : j.items()) out[k] = v.is_string() ? v.get<std::string>() : v.dump();
  return out;
}

NicSpec NicSpecFromJson(const Json& n) {
  NicSpec nic;
  nic.ip = n.value("ip", "");
  nic.mac = n.value("mac", "");
  nic.network = n.value("network", "");
  nic.network_id = n.value("network_id", "");
  nic.name = n.value("name", "");
  return nic;
}

VmSpec VmSpecFromJson(const Json& j) {
  VmSpec spec;
  spec.name = j.value("name", "");
  if (j.contains("nics") && j["nics"].is_array()) {
    for (const auto& n : j["nics"]) spec.nics.push_back(NicSpecFromJson(n));
  }
  if (j.contains("context")) spec.context = StringMap(j["context"]);
  if (j.contains("disks") && j["disks"].is_array()) {
    for (const auto& d : j["disks"]) spec.disks.push_back(StringMap(d));
  }
  if (j.contains("user_template")) spec.user_template = StringMap(j["user_template"]);
  if (j.contains("external_ips") && j["external_ips"].is_array()) {
    for (const auto& ip : j["external_ips"]) spec.external_ips.push_back(ip.get<std::string>());
  }
  if (j.contains("user_vectors") && j["user_vectors"].is_object()) {
    for (const auto& [k, v] : j["user_vectors"].items()) spec.user_vectors[k] = StringMap(v);
  }
  spec.state = j.value("state", 3);
  spec.lcm_state = j.value("lcm_state", 3);
  return spec;
}

RoleSpec RoleSpecFromJson(const Json& j) {
  RoleSpec r;
  r.name = j.value("name", "");
  r.cardinality = j.value("cardinality", 1);
  r.min_vms = j.value("min_vms", 0);
  r.max_vms = j.value("max_vms", 100);
  r.cooldown_seconds = j.value("cooldown", 30);
  r.cooldown_ms = j.value("cooldown_ms", -1);
  if (j.contains("parents") && j["parents"].is_array()) {
    for (const auto& p : j["parents"]) {
      if (p.is_string()) r.parents.push_back(p.get<std::string>());
    }
  }
  r.auto_provision = j.value("auto_provision", false);
  if (j.contains("vm_template") && j["vm_template"].is_object()) {
    r.vm_template = VmSpecFromJson(j["vm_template"]);
  }
  r.provision_delay = std::chrono::milliseconds(j.value("provision_delay_ms", 0));
  r.ip_delay = std::chrono::milliseconds(j.value("ip_delay_ms", 0));
  r.shutdown_delay = std::chrono::milliseconds(j.value("shutdown_delay_ms", 0));
  r.hard_shutdown = j.value("hard_shutdown", false);
  return r;
}

}  // namespace

void OneGateSimulator::Impl::HandleOperator(const httplib::Request& req, httplib::Response& res) {
  // The public methods take the lock; reach them through the owning simulator's Impl.
  auto reply = [&res](int status, const Json& j) {
    res.status = status;
    res.set_content(j.dump(), "application/json");
  };
  auto fail = [&](int status, const std::string& msg) { reply(status, Json{{"error", msg}}); };
  Json body = Json::object();
  if (!req.body.empty()) {
    try {
      body = Json::parse(req.body);
    } catch (const std::exception& e) {
      fail(400, std::string("body is not JSON: ") + e.what());
      return;
    }
  }
  const std::string& p = req.path;
  const std::string& method = req.method;
  const auto service = MatchPath(p, "/_sim/services/#");
  auto service_sub = MatchPath(p, "/_sim/services/#/:");
  const auto role_state = MatchPath(p, "/_sim/services/#/roles/:/state");
  const auto vm_path = MatchPath(p, "/_sim/vms/#");
  auto vm_sub = MatchPath(p, "/_sim/vms/#/:");
  const auto vm_attr = MatchPath(p, "/_sim/vms/#/user_template/:");
  const auto vm_nic = MatchPath(p, "/_sim/vms/#/nics/#");
  const auto vm_nics = MatchPath(p, "/_sim/vms/#/nics");
  const auto vm_disks = MatchPath(p, "/_sim/vms/#/disks");
  try {
    if (method == "GET" && p == "/_sim/health") {
      reply(200, Json{{"ok", true}});
    } else if (method == "POST" && p == "/_sim/services") {
      std::vector<RoleSpec> roles;
      if (body.contains("roles") && body["roles"].is_array()) {
        for (const auto& r : body["roles"]) roles.push_back(RoleSpecFromJson(r));
      }
      const int id = owner->CreateService(body.value("name", "service"), roles);
      reply(200, Json{{"id", id}});
    } else if (service && method == "GET") {
      const int id = std::stoi((*service)[0]);
      std::lock_guard<std::mutex> lock(mu);
      Advance();
      Service* svc = FindService(id);
      if (!svc) return fail(404, "no such service");
      Json roles = Json::array();
      for (const auto& role : svc->roles) {
        roles.push_back(Json{
            {"name", role.spec.name},
            {"cardinality", role.cardinality},
            {"state", RoleStateOf(role)},
            {"min_vms", role.spec.min_vms},
            {"max_vms", role.spec.max_vms},
            {"cooldown_ms",
             std::chrono::duration_cast<std::chrono::milliseconds>(CooldownOf(role.spec)).count()},
            {"nodes", role.nodes},
            {"victims", role.victims},
            {"pending_creations", role.pending_creations}});
      }
      reply(200, Json{{"id", svc->id},
                      {"name", svc->name},
                      {"state", ServiceStateOf(*svc)},
                      {"roles", roles}});
    } else if (service_sub) {
      const int id = std::stoi((*service_sub)[0]);
      const std::string what = (*service_sub)[1];
      if (what == "onegate" && method == "GET") {
        const bool ext = req.has_param("extended") && !req.get_param_value("extended").empty();
        const std::string j = owner->ServiceJson(id, ext);
        if (j.empty()) return fail(404, "no such service");
        res.status = 200;
        res.set_content(j, kJsonType);
      } else if (what == "scale" && method == "POST") {
        if (!owner->SetCardinality(id, body.value("role", ""), body.value("cardinality", -1))) {
          return fail(400, "cannot scale");
        }
        reply(200, Json::object());
      } else if (what == "state" && method == "PUT") {
        if (!owner->SetServiceState(id, body.value("state", -1))) {
          return fail(404, "no such service");
        }
        reply(200, Json::object());
      } else {
        fail(405, "method not allowed");
      }
    } else if (role_state && method == "PUT") {
      if (!owner->SetRoleState(std::stoi((*role_state)[0]), (*role_state)[1],
                               body.value("state", -1))) {
        return fail(404, "no such role");
      }
      reply(200, Json::object());
    } else if (method == "POST" && p == "/_sim/vms") {
      const VmHandle h =
          owner->AddVm(body.value("service_id", -1), body.value("role", ""), VmSpecFromJson(body));
      if (h.id < 0) return fail(404, "no such service or role");
      reply(200, Json{{"id", h.id}, {"token", h.token}});
    } else if (method == "GET" && p == "/_sim/vms") {
      std::lock_guard<std::mutex> lock(mu);
      Advance();
      Json list = Json::array();
      for (const auto& [id, vm] : vms) {
        list.push_back(Json{{"id", id},
                            {"name", vm.name},
                            {"service_id", vm.service_id},
                            {"role", vm.role},
                            {"state", vm.state},
                            {"lcm_state", vm.lcm_state}});
      }
      reply(200, list);
    } else if (vm_path && method == "GET") {
      std::lock_guard<std::mutex> lock(mu);
      Advance();
      Vm* vm = FindVm(std::stoi((*vm_path)[0]));
      if (!vm) return fail(404, "no such VM");
      reply(200, Json{{"id", vm->id},
                      {"token", vm->token},
                      {"service_id", vm->service_id},
                      {"role", vm->role},
                      {"vm", Json::parse(FullVm(*vm).dump())["VM"]}});
    } else if (vm_nics && method == "POST") {
      if (!owner->AddNic(std::stoi((*vm_nics)[0]), NicSpecFromJson(body))) {
        return fail(404, "no such VM");
      }
      reply(200, Json::object());
    } else if (vm_disks && method == "POST") {
      if (!owner->AddDisk(std::stoi((*vm_disks)[0]), StringMap(body))) {
        return fail(404, "no such VM");
      }
      reply(200, Json::object());
    } else if (vm_sub) {  // after nics and disks, which it would match too
      const int id = std::stoi((*vm_sub)[0]);
      const std::string what = (*vm_sub)[1];
      if (what == "user_template" && method == "GET") {
        std::lock_guard<std::mutex> lock(mu);
        Vm* vm = FindVm(id);
        if (!vm) return fail(404, "no such VM");
        reply(200, RenderUserTemplate(*vm, false));
      } else if (what == "user_template" && method == "PUT") {
        for (const auto& [k, v] : StringMap(body)) {
          if (!owner->SetUserAttr(id, k, v)) return fail(404, "no such VM");
        }
        reply(200, Json::object());
      } else if (what == "state" && method == "PUT") {
        if (!owner->SetVmState(id, body.value("state", 3), body.value("lcm_state", 3))) {
          return fail(404, "no such VM");
        }
        reply(200, Json::object());
      } else if (what == "terminate" && method == "POST") {
        if (owner->VmState(id) < 0) return fail(404, "no such VM");
        owner->TerminateVm(id, body.value("hard", false));
        reply(200, Json::object());
      } else {
        fail(405, "method not allowed");
      }
    } else if (vm_attr && method == "DELETE") {
      if (!owner->EraseUserAttr(std::stoi((*vm_attr)[0]), (*vm_attr)[1])) {
        return fail(404, "no such attribute");
      }
      reply(200, Json::object());
    } else if (vm_nic && method == "PUT") {
      if (!owner->SetNicIp(std::stoi((*vm_nic)[0]), std::stoi((*vm_nic)[1]),
                           body.value("ip", ""))) {
        return fail(404, "no such NIC");
      }
      reply(200, Json::object());
    } else if (method == "GET" && p == "/_sim/terminations") {
      Json list = Json::array();
      for (const auto& t : owner->Terminations()) {
        list.push_back(Json{{"vm_id", t.vm_id}, {"hard", t.hard}, {"cause", t.cause}});
      }
      reply(200, list);
    } else if (p == "/_sim/faults" && method == "POST") {
      auto f = FaultFromJson(body);
      if (!f) return fail(400, "unknown fault kind");
      owner->InjectFault(*f);
      reply(200, Json::object());
    } else if (p == "/_sim/faults" && method == "GET") {
      std::lock_guard<std::mutex> lock(mu);
      Json list = Json::array();
      for (const auto& f : faults) list.push_back(FaultToJson(f));
      reply(200, list);
    } else if (p == "/_sim/faults" && method == "DELETE") {
      owner->ClearFaults();
      reply(200, Json::object());
    } else if (p == "/_sim/requests" && method == "GET") {
      Json list = Json::array();
      for (const auto& r : owner->Requests()) {
        list.push_back(Json{{"method", r.method},
                            {"path", r.path},
                            {"query", r.query},
                            {"body", r.body},
                            {"vm_id", r.vm_id},
                            {"status", r.status},
                            {"response_bytes", r.response_bytes}});
      }
      reply(200, list);
    } else if (p == "/_sim/requests" && method == "DELETE") {
      owner->ClearRequests();
      reply(200, Json::object());
    } else if (p == "/_sim/time" && method == "POST") {
      owner->AdvanceTime(std::chrono::milliseconds(body.value("advance_ms", 0)));
      reply(200, Json::object());
    } else if (p == "/_sim/config" && method == "PUT") {
      if (body.contains("permissions") && body["permissions"].is_object()) {
        for (const auto& [k, v] : body["permissions"].items()) {
          owner->SetPermission(k, v.is_boolean() && v.get<bool>());
        }
      }
      if (body.contains("restricted_attrs")) {
        owner->SetRestrictedAttributes(body["restricted_attrs"].get<std::vector<std::string>>());
      }
      if (body.contains("restricted_actions")) {
        owner->SetRestrictedActions(body["restricted_actions"].get<std::vector<std::string>>());
      }
      if (body.contains("opennebula_version")) {
        owner->SetOpenNebulaVersion(body["opennebula_version"].get<std::string>());
      }
      reply(200, Json::object());
    } else {
      fail(404, "unknown operator route " + method + " " + p);
    }
  } catch (const std::exception& e) {
    fail(400, std::string("bad request: ") + e.what());
  }
}

// ---------------------------------------------------------------------------------------
// Public API

OneGateSimulator::OneGateSimulator() : impl_(std::make_unique<Impl>()) { impl_->owner = this; }

OneGateSimulator::~OneGateSimulator() { Stop(); }

int OneGateSimulator::Start(const std::string& host, int port) {
  Stop();
  Impl& im = *impl_;
  im.stopping = false;
  im.server = std::make_unique<SimHttpServer>(im.stopping);
  const int threads = im.worker_threads;
  im.server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  auto handler = [&im](const httplib::Request& req, httplib::Response& res) {
    im.Dispatch(req, res);
  };
  im.server->Get(".*", handler);
  im.server->Post(".*", handler);
  im.server->Put(".*", handler);
  im.server->Patch(".*", handler);
  im.server->Delete(".*", handler);
  im.server->Options(".*", handler);
  // Requests httplib refuses by itself (unknown method, bad request line...).
  im.server->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!t_dispatched && res.body.empty()) res.set_content(kUnsupported, kJsonType);
  });
  int bound = -1;
  if (port == 0) {
    bound = im.server->bind_to_any_port(host);
  } else if (im.server->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    im.server.reset();
    return -1;
  }
  im.host = host;
  im.port = bound;
  im.listen_thread = std::thread([&im] { im.server->listen_after_bind(); });
  // stop() only works once the accept loop runs.
  for (int i = 0; i < 5000 && !im.server->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  im.ticker_thread = std::thread([&im] {
    while (!im.stopping.load()) {
      {
        std::lock_guard<std::mutex> lock(im.mu);
        im.Advance();
      }
      im.Notify();
      im.Sleep(std::chrono::milliseconds(20));
    }
  });
  return bound;
}

void OneGateSimulator::Stop() {
  Impl& im = *impl_;
  if (!im.server) return;
  {
    std::lock_guard<std::mutex> lock(im.sleep_mu);
    im.stopping = true;
  }
  im.sleep_cv.notify_all();
  im.server->stop();
  if (im.listen_thread.joinable()) im.listen_thread.join();
  if (im.ticker_thread.joinable()) im.ticker_thread.join();
  im.server.reset();
  im.port = -1;
}

std::string OneGateSimulator::Endpoint() const {
  const std::string host =
      impl_->host.find(':') != std::string::npos ? "[" + impl_->host + "]" : impl_->host;
  return "http://" + host + ":" + std::to_string(impl_->port);
}

int OneGateSimulator::CreateService(const std::string& name, const std::vector<RoleSpec>& roles) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Service svc;
  svc.id = impl_->next_service_id++;
  svc.name = name;
  for (const auto& spec : roles) {
    Role r;
    r.spec = spec;
    r.cardinality = std::max(0, spec.cardinality);
    svc.roles.push_back(std::move(r));
  }
  const int id = svc.id;
  impl_->services.emplace(id, std::move(svc));
  return id;
}

VmHandle OneGateSimulator::AddVm(int service_id, const std::string& role, const VmSpec& spec) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& im = *impl_;
  im.Advance();
  Service* svc = nullptr;
  Role* r = nullptr;
  if (service_id >= 0) {
    svc = im.FindService(service_id);
    r = im.FindRole(svc, role);
    if (!r) return VmHandle{};
  }
  Vm& vm = im.CreateVm(svc, r, spec, /*auto_ips=*/false);
  if (r && !r->scaling) {
    r->cardinality = std::max(r->cardinality, static_cast<int>(r->nodes.size()));
  }
  im.UpdateStates();
  return VmHandle{vm.id, vm.token};
}

std::string OneGateSimulator::UserAttr(int vm_id, const std::string& key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->vms.find(vm_id);
  if (it == impl_->vms.end()) return "";
  auto v = it->second.user_template.find(key);
  if (v == it->second.user_template.end()) return "";
  return v->is_string() ? v->get<std::string>() : v->dump();
}

bool OneGateSimulator::SetCardinality(int service_id, const std::string& role, int cardinality) {
  bool ok;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->Advance();
    Service* svc = impl_->FindService(service_id);
    ok = svc && impl_->Scale(*svc, role, cardinality, /*force=*/true);
  }
  impl_->Notify();
  return ok;
}

void OneGateSimulator::TerminateVm(int vm_id, bool hard) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->Advance();
    if (Vm* vm = impl_->FindVm(vm_id)) impl_->TerminateOutsideFlow(*vm, hard, "operator");
    impl_->UpdateStates();
  }
  impl_->Notify();
}

bool OneGateSimulator::SetServiceState(int service_id, int state) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Service* svc = impl_->FindService(service_id);
  if (!svc) return false;
  svc->forced_state = state;
  return true;
}

bool OneGateSimulator::SetRoleState(int service_id, const std::string& role, int state) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Role* r = impl_->FindRole(impl_->FindService(service_id), role);
  if (!r) return false;
  r->forced_state = state;
  return true;
}

bool OneGateSimulator::SetVmState(int vm_id, int state, int lcm_state) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Vm* vm = impl_->FindVm(vm_id);
  if (!vm) return false;
  Impl::SetState(*vm, state, lcm_state);
  impl_->UpdateStates();
  return true;
}

bool OneGateSimulator::SetNicIp(int vm_id, int nic_index, const std::string& ip) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Vm* vm = impl_->FindVm(vm_id);
  if (!vm || nic_index < 0 || nic_index >= static_cast<int>(vm->nics.size())) return false;
  vm->nics[nic_index].ip = ip;
  return true;
}

bool OneGateSimulator::AddNic(int vm_id, const NicSpec& ns) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Vm* vm = impl_->FindVm(vm_id);
  if (!vm) return false;
  const size_t index = vm->nics.size();
  Nic nic;
  nic.ip = ns.ip;
  nic.mac = !ns.mac.empty() ? ns.mac : Impl::MacFor(nic.ip, vm->id, index);
  nic.network = ns.network;
  nic.network_id = ns.network_id;
  nic.name = ns.name.empty() ? "NIC" + std::to_string(index) : ns.name;
  vm->nics.push_back(nic);
  return true;
}

bool OneGateSimulator::AddDisk(int vm_id, const std::map<std::string, std::string>& disk) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Vm* vm = impl_->FindVm(vm_id);
  if (!vm) return false;
  auto d = disk;
  d.emplace("DISK_ID", std::to_string(vm->disks.size()));
  vm->disks.push_back(std::move(d));
  return true;
}

bool OneGateSimulator::SetUserAttr(int vm_id, const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Vm* vm = impl_->FindVm(vm_id);
  if (!vm) return false;
  vm->user_template[key] = value;
  return true;
}

bool OneGateSimulator::EraseUserAttr(int vm_id, const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Vm* vm = impl_->FindVm(vm_id);
  return vm && vm->user_template.erase(key) > 0;
}

std::map<std::string, std::string> OneGateSimulator::UserTemplate(int vm_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::map<std::string, std::string> out;
  auto it = impl_->vms.find(vm_id);
  if (it == impl_->vms.end()) return out;
  for (const auto& [k, v] : it->second.user_template.items()) {
    out[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  return out;
}

std::string OneGateSimulator::Token(int vm_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->vms.find(vm_id);
  return it == impl_->vms.end() ? "" : it->second.token;
}

std::string OneGateSimulator::ServiceJson(int service_id, bool extended) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->Advance();
  const Service* svc = impl_->FindService(service_id);
  return svc ? impl_->ServiceView(*svc, extended).dump() : "";
}

std::string OneGateSimulator::VmJson(int vm_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->vms.find(vm_id);
  return it == impl_->vms.end() ? "" : Impl::FullVm(it->second).dump();
}

int OneGateSimulator::ServiceState(int service_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->Advance();
  const Service* svc = impl_->FindService(service_id);
  return svc ? impl_->ServiceStateOf(*svc) : -1;
}

int OneGateSimulator::RoleState(int service_id, const std::string& role) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->Advance();
  const Role* r = impl_->FindRole(impl_->FindService(service_id), role);
  return r ? impl_->RoleStateOf(*r) : -1;
}

int OneGateSimulator::Cardinality(int service_id, const std::string& role) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->Advance();
  const Role* r = impl_->FindRole(impl_->FindService(service_id), role);
  return r ? r->cardinality : -1;
}

std::vector<int> OneGateSimulator::Nodes(int service_id, const std::string& role) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->Advance();
  const Role* r = impl_->FindRole(impl_->FindService(service_id), role);
  return r ? r->nodes : std::vector<int>{};
}

int OneGateSimulator::VmState(int vm_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->Advance();
  auto it = impl_->vms.find(vm_id);
  return it == impl_->vms.end() ? -1 : it->second.state;
}

void OneGateSimulator::AdvanceTime(std::chrono::milliseconds by) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->offset += by;
    impl_->Advance();
  }
  impl_->Notify();
}

std::vector<TerminationRecord> OneGateSimulator::Terminations() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->terminations;
}

void OneGateSimulator::SetTerminationHook(std::function<void(const TerminationRecord&)> hook) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->hook = std::move(hook);
}

void OneGateSimulator::SetPermission(const std::string& key, bool allowed) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->permissions[key] = allowed;
}

void OneGateSimulator::SetOpenNebulaVersion(const std::string& version) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->opennebula_version = version;
}

void OneGateSimulator::SetRestrictedAttributes(std::vector<std::string> keys) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->restricted_attrs = std::move(keys);
}

void OneGateSimulator::SetRestrictedActions(std::vector<std::string> actions) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->restricted_actions = std::move(actions);
}

void OneGateSimulator::EnableOperatorApi(bool enabled) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->operator_api = enabled;
}

void OneGateSimulator::SetWorkerThreads(int threads) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->worker_threads = std::max(2, threads);
}

void OneGateSimulator::InjectFault(const Fault& fault) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->faults.push_back(fault);
}

void OneGateSimulator::ClearFaults() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->faults.clear();
}

std::vector<RecordedRequest> OneGateSimulator::Requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requests;
}

void OneGateSimulator::ClearRequests() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->requests.clear();
}

}  // namespace onehpc::sim
