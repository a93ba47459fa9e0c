// The OneSlurm logic against a REAL Slurm 22.05: slurmctld and dynamic `slurmd -Z` nodes, each
// in its own network namespace on a private bridge (10.79.0.0/24, created here and always
// removed), one munged on the default socket, and the in-process OneGate simulator.
// Follows ../shared/reference/slurm-lab/ (nsenter --net, not `ip netns exec`; SlurmdTimeout=10).
// Needs root and the Debian packages slurmctld slurmd slurm-client munge; skipped otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "context/http.h"
#include "context/onegate.h"
#include "roles/ensure.h"
#include "roles/host/machine.h"
#include "roles/names.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/os/rooted.h"
#include "roles/os/systemd.h"
#include "roles/slurm/elastic.h"
#include "roles/slurm/gres.h"
#include "roles/slurm/munge.h"
#include "roles/slurm/registration.h"
#include "roles/slurm/slurm_client.h"
#include "roles/slurm/slurm_conf.h"
#include "roles/slurm/slurmd_unit.h"
#include "roles/timers/elastic_cycle.h"
#include "roles/timers/health.h"
#include "roles/timers/reconcile.h"
#include "roles/timers/self_drain.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/integration/helpers.h"
#include "tests/simulator/onegate_simulator.h"

namespace onehpc {
namespace {

using testing::HaveProgram;
using testing::ReadAll;
namespace fs = std::filesystem;
using fakes::SimFault;
using fakes::SimRole;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr char kBridge[] = "ohslbr0";
constexpr char kNsPrefix[] = "ohsl-";
constexpr char kCtlNs[] = "ohsl-ctl";
constexpr char kCtlAddr[] = "10.79.0.1";
constexpr char kHostAddr[] = "10.79.0.254";
constexpr char kMungeSocket[] = "/run/munge/munge.socket.2";

std::string ShortHost() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  std::string h(buf);
  return h.substr(0, h.find('.'));
}

// A daemon run in the foreground as our child, output appended to a log file.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int in = open("/dev/null", O_RDONLY);
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

bool Alive(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == 0;
}

// Signals our child and reaps it (SIGKILL after 10 s).
void Stop(pid_t pid, int sig) {
  if (pid <= 0) return;
  kill(pid, sig);
  for (int i = 0; i < 100; ++i) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || r < 0) return;
    std::this_thread::sleep_for(milliseconds(100));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

bool WaitFor(const std::function<bool()>& pred, milliseconds timeout,
             milliseconds step = milliseconds(250)) {
  auto end = steady_clock::now() + timeout;
  while (steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(step);
  }
  return pred();
}

// ---- The lab: one per test program run.
class Lab {
 public:
  bool Up(std::string* why) {
    char tmpl[] = "/tmp/ohsl-lab.XXXXXX";
    if (!mkdtemp(tmpl)) return Fail(why, "mkdtemp failed");
    dir_ = tmpl;
    for (const char* sub : {"etc", "state/ctld", "run", "log", "jobs", "munge"}) {
      fs::create_directories(dir_ + "/" + sub);
    }
    CleanNetwork();
    if (!Ip({"link", "add", kBridge, "type", "bridge"})) return Fail(why, "cannot create a bridge");
    Ip({"addr", "add", std::string(kHostAddr) + "/24", "dev", kBridge});
    Ip({"link", "set", kBridge, "up"});
    if (!AddNs(kCtlNs, "vhctl", kCtlAddr)) return Fail(why, "cannot create network namespaces");
    if (!StartMunge(why)) return false;
    return StartCtld(100, true, why);
  }

  void Down() {
    for (auto& [name, pid] : slurmds_) Stop(pid, SIGTERM);
    slurmds_.clear();
    Stop(ctld_, SIGTERM);
    ctld_ = -1;
    if (munged_ > 0) {
      Stop(munged_, SIGTERM);
      munged_ = -1;
      unlink((std::string(kMungeSocket) + ".lock").c_str());
    }
    CleanNetwork();
    std::error_code ec;
    if (fs::read_symlink("/run/slurm/conf", ec).string().rfind(dir_, 0) == 0) {
      fs::remove("/run/slurm/conf", ec);
      fs::remove("/run/slurm", ec);
    }
    if (!dir_.empty() && getenv("OHSL_KEEP_LAB") == nullptr) fs::remove_all(dir_, ec);
  }

  const std::string& dir() const { return dir_; }
  std::string conf() const { return dir_ + "/etc/slurm.conf"; }
  /// The configless cache of a node (what /run/slurm/conf points to on that worker).
  std::string NodeConf(const std::string& node) const {
    return dir_ + "/state/" + node + "/conf-cache/slurm.conf";
  }

  // slurm.conf from the product's renderer, with lab paths.
  void WriteConf(int max_nodes) {
    slurm::SlurmConfParams p;
    p.cluster_name = "ohsl";
    p.controller_host = ShortHost();
    p.controller_addr = kCtlAddr;
    p.max_nodes = max_nodes;
    p.use_cgroup = false;
    p.slurmd_timeout = 10;
    p.state_save_location = dir_ + "/state/ctld";
    p.slurmd_spool_dir = dir_ + "/state/%n";
    p.slurmctld_pid_file = dir_ + "/run/slurmctld.pid";
    p.slurmd_pid_file = dir_ + "/run/slurmd-%n.pid";
    p.slurm_user = "root";
    p.slurmctld_log_file = dir_ + "/log/slurmctld.log";
    p.slurmd_log_file = dir_ + "/log/slurmd-%n.log";
    p.health_check_program = health_check_program_;
    p.health_check_interval = 5;
    // The product's job_submit.lua (slurmctld reads it beside slurm.conf), kicking a lab file.
    p.job_submit_lua = true;
    std::ofstream(dir_ + "/etc/job_submit.lua") << slurm::RenderJobSubmitLua(KickFile());
    std::ofstream(conf()) << slurm::RenderSlurmConf(p);
    // As on the controller: gres.conf includes each node's own file (no GPU by default).
    std::ofstream(dir_ + "/etc/gres.conf") << slurm::RenderGresConf(NodeGresConf());
    WriteNodeGres(host::GpuInventory{{}, "", "no GPU"});
  }
  /// What job_submit.lua creates at each submission (slurm.conf runs it as SlurmUser root).
  std::string KickFile() const { return dir_ + "/run/elastic-kick"; }
  /// The file every lab node's fetched gres.conf includes (one file: the nodes share a disk).
  std::string NodeGresConf() const { return dir_ + "/etc/gres-node.conf"; }
  void WriteNodeGres(const host::GpuInventory& gpus) {
    std::ofstream(NodeGresConf()) << slurm::RenderNodeGresConf(gpus);
  }

  bool StartCtld(int max_nodes, bool clean, std::string* why) {
    WriteConf(max_nodes);
    std::vector<std::string> argv = {
        "nsenter", std::string("--net=/run/netns/") + kCtlNs, "slurmctld", "-D", "-f", conf()};
    if (clean) argv.push_back("-c");
    ctld_ = Spawn(argv, dir_ + "/log/slurmctld.out");
    slurm::SlurmClient client = Client();
    if (!WaitFor([&] { return client.Ping().value_or(false); }, milliseconds(20000))) {
      return Fail(why, "slurmctld did not answer (see " + dir_ + "/log/slurmctld.log)");
    }
    return true;
  }
  void StopCtld() {
    Stop(ctld_, SIGTERM);
    ctld_ = -1;
  }
  /// HealthCheckProgram of the next slurm.conf ("" = none: the product's path does not exist
  /// on the host).
  void SetHealthCheckProgram(std::string path) { health_check_program_ = std::move(path); }

  // A dynamic node in its own netns.
  // A node started again keeps its namespace and address, as a VM keeps its NIC.
  void StartSlurmd(const std::string& name, const std::string& gres = "") {
    auto known = ns_of_.find(name);
    int i = known != ns_of_.end() ? known->second : ++next_ns_;
    ns_of_[name] = i;
    std::string ns = kNsPrefix + std::string("n") + std::to_string(i);
    if (!fs::exists("/run/netns/" + ns)) {
      AddNs(ns, "vh" + std::to_string(i), "10.79.0." + std::to_string(10 + i));
    }
    slurmds_[name] = Spawn(
        {"nsenter", "--net=/run/netns/" + ns, "slurmd", "-D", "-Z", "-N", name, "--conf-server",
         kCtlAddr, "--conf", "RealMemory=500 Feature=one" + (gres.empty() ? "" : " Gres=" + gres)},
        dir_ + "/log/slurmd-" + name + ".out");
  }
  void KillSlurmd(const std::string& name, int sig = SIGKILL) {
    auto it = slurmds_.find(name);
    if (it == slurmds_.end()) return;
    Stop(it->second, sig);
    slurmds_.erase(it);
  }
  bool SlurmdAlive(const std::string& name) {
    auto it = slurmds_.find(name);
    return it != slurmds_.end() && Alive(it->second);
  }
  void KillAllSlurmds() {
    for (auto& [name, pid] : slurmds_) Stop(pid, SIGKILL);
    slurmds_.clear();
  }

  slurm::SlurmClient Client() {
    slurm::SlurmClientOptions o;
    o.slurm_conf = conf();
    o.timeout = milliseconds(10000);
    return slurm::SlurmClient(runner_, o);
  }
  std::optional<slurm::SlurmNode> Node(const std::string& name) {
    auto c = Client();
    auto n = c.ShowNode(name);
    return n ? *n : std::nullopt;
  }
  bool Registered(const std::string& name) { return Node(name).has_value(); }
  ProcessResult Slurm(std::vector<std::string> argv) {
    Command c;
    c.argv = std::move(argv);
    c.env = {{"SLURM_CONF", conf()}};
    c.timeout = milliseconds(15000);
    auto r = runner_.Run(c);
    return r ? *r : ProcessResult{};
  }
  ProcessRunner& runner() { return runner_; }

 private:
  static bool Fail(std::string* why, std::string text) {
    *why = std::move(text);
    return false;
  }
  bool Ip(std::vector<std::string> args) {
    Command c;
    c.argv = {"ip"};
    c.argv.insert(c.argv.end(), args.begin(), args.end());
    c.timeout = milliseconds(10000);
    auto r = runner_.Run(c);
    return r && r->ok();
  }
  bool AddNs(const std::string& ns, const std::string& veth, const std::string& addr) {
    std::string peer = veth + "p";
    return Ip({"netns", "add", ns}) &&
           Ip({"link", "add", veth, "type", "veth", "peer", "name", peer}) &&
           Ip({"link", "set", peer, "netns", ns}) &&
           Ip({"link", "set", veth, "master", kBridge, "up"}) &&
           Ip({"-n", ns, "link", "set", "lo", "up"}) &&
           Ip({"-n", ns, "addr", "add", addr + "/24", "dev", peer}) &&
           Ip({"-n", ns, "link", "set", peer, "up"});
  }
  // Removes this test's namespaces (killing what still runs in them) and the bridge.
  void CleanNetwork() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/run/netns", ec)) {
      std::string ns = e.path().filename();
      if (ns.rfind(kNsPrefix, 0) != 0) continue;
      Command pids;
      pids.argv = {"ip", "netns", "pids", ns};
      pids.timeout = milliseconds(5000);
      if (auto r = runner_.Run(pids); r && r->ok()) {
        std::istringstream in(r->out);
        pid_t pid;
        while (in >> pid) kill(pid, SIGKILL);
      }
      Ip({"netns", "del", ns});
    }
    Ip({"link", "del", kBridge});
  }
  bool StartMunge(std::string* why) {
    // Reuse a munged that already answers on the default socket (e.g. the system's).
    Command probe;
    probe.argv = {"munge", "-n"};
    probe.timeout = milliseconds(5000);
    if (auto r = runner_.Run(probe); r && r->ok()) return true;
    fs::create_directories("/run/munge");
    chmod("/run/munge", 0755);  // munged refuses a socket directory without o+x
    std::string key_path = dir_ + "/munge/munge.key";
    auto key = slurm::RandomBytes(128);
    if (!key) return Fail(why, key.error().message);
    { std::ofstream(key_path, std::ios::binary) << *key; }
    chmod(key_path.c_str(), 0400);
    chmod((dir_ + "/munge").c_str(), 0700);
    munged_ = Spawn({"munged", "-F", "--force", "--key-file=" + key_path,
                     std::string("--socket=") + kMungeSocket, "--pid-file=" + dir_ + "/munge/pid",
                     "--log-file=" + dir_ + "/munge/log", "--seed-file=" + dir_ + "/munge/seed"},
                    dir_ + "/log/munged.out");
    if (!WaitFor(
            [&] {
              auto r = runner_.Run(probe);
              return r && r->ok();
            },
            milliseconds(10000), milliseconds(50))) {
      return Fail(why, "munged did not start (see " + dir_ + "/munge/log)");
    }
    return true;
  }

  std::string dir_;
  std::string health_check_program_;
  RealProcessRunner runner_;
  pid_t ctld_ = -1;
  pid_t munged_ = -1;
  std::map<std::string, pid_t> slurmds_;
  std::map<std::string, int> ns_of_;
  int next_ns_ = 0;
};

// systemd stand-in for the self-drain: stopping slurmd ends that node's lab slurmd.
class LabSystemd : public Systemd {
 public:
  LabSystemd(Lab& lab, std::string node) : lab_(lab), node_(std::move(node)) {}
  Status DaemonReload() override { return Ok(); }
  Status Enable(const std::string&) override { return Ok(); }
  Status Disable(const std::string&) override { return Ok(); }
  Status StartNoBlock(const std::string&) override { return Ok(); }
  Status RestartNoBlock(const std::string&) override { return Ok(); }
  Status StopNoBlock(const std::string& unit) override {
    stopped.push_back(unit);
    lab_.KillSlurmd(node_, SIGTERM);
    return Ok();
  }
  Result<bool> IsActive(const std::string&) override { return lab_.SlurmdAlive(node_); }
  std::vector<std::string> stopped;

 private:
  Lab& lab_;
  std::string node_;
};

Lab* g_lab = nullptr;
std::string g_skip;         // not root, packages missing
std::string g_setup_error;  // root and packages present, but the lab did not come up

class SlurmRealTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log::Init({log::Level::kInfo, false});
    if (geteuid() != 0) {
      g_skip = "needs root (network namespaces, munged, slurmctld)";
      return;
    }
    for (const char* p : {"slurmctld", "slurmd", "scontrol", "squeue", "sbatch", "munged", "munge",
                          "ip", "nsenter"}) {
      if (!HaveProgram(p)) {
        g_skip = std::string(p) +
                 " is not installed (apt-get install --no-install-recommends "
                 "slurmctld slurmd slurm-client munge)";
        return;
      }
    }
    g_lab = new Lab();
    std::string why;
    if (!g_lab->Up(&why)) g_setup_error = "lab setup failed: " + why;
  }
  static void TearDownTestSuite() {
    if (g_lab != nullptr) g_lab->Down();
    delete g_lab;
    g_lab = nullptr;
  }
  void SetUp() override {
    if (!g_skip.empty()) GTEST_SKIP() << g_skip;
    ASSERT_EQ(g_setup_error, "");
    ASSERT_GT(sim_.Start(), 0);
    service_ = sim_.CreateService("OneSlurm", {SimRole("controller", 1), SimRole("worker", 4)});
    controller_ = sim_.AddVm(service_, "controller");
  }
  void TearDown() override {
    if (g_lab != nullptr) g_lab->KillAllSlurmds();
  }
  int PublishWorker(const std::string& name) {
    sim::VmSpec spec;
    spec.user_template[slurm::kAttrNodeName] = name;
    return sim_.AddVm(service_, "worker", spec).id;
  }
  Result<ReconcileReport> Reconcile() {
    OneGateConfig c;
    c.endpoint = sim_.Endpoint();
    c.vmid = std::to_string(controller_.id);
    c.token = controller_.token;
    c.request_timeout = milliseconds(1000);
    c.retry.max_attempts = 1;
    c.unauthorized_attempts = 1;
    c.malformed_retries = 0;
    OneGateClient client(c, http_, clock_);
    ReconcileOptions o;
    o.slurm_conf = g_lab->conf();
    return RunReconcile(o, client, g_lab->runner(), clock_);
  }
  bool WaitState(const std::string& node, const std::function<bool(const slurm::SlurmNode&)>& p,
                 milliseconds timeout) {
    return WaitFor(
        [&] {
          auto n = g_lab->Node(node);
          return n && p(*n);
        },
        timeout);
  }
  std::vector<std::string> Names() {
    auto c = g_lab->Client();
    auto nodes = c.ShowNodes();
    std::vector<std::string> out;
    if (nodes) {
      for (const auto& n : *nodes) out.push_back(n.name);
    }
    return out;
  }

  sim::OneGateSimulator sim_;
  int service_ = -1;
  sim::VmHandle controller_;
  CurlTransport http_;
  RealClock clock_;
};

TEST_F(SlurmRealTest, ReconcileDeletesDrainsAndLeavesPublishedNodes) {
  // live: published and running; dead-pub: published, slurmd crashed (its VM still exists);
  // gone: unpublished, slurmd killed; busy: unpublished, killed while running a job.
  for (const char* n : {"live", "dead-pub", "gone", "busy"}) g_lab->StartSlurmd(n);
  PublishWorker("live");
  PublishWorker("dead-pub");
  for (const char* n : {"live", "dead-pub", "gone", "busy"}) {
    ASSERT_TRUE(WaitState(
        n, [](const slurm::SlurmNode& x) { return x.BaseState() == "IDLE"; }, milliseconds(10000)))
        << n << " did not register";
  }
  auto job = g_lab->Slurm({"sbatch", "--no-requeue", "-w", "busy", "-o",
                           g_lab->dir() + "/jobs/%j.out", "--wrap", "sleep 300"});
  ASSERT_TRUE(job.ok()) << job.err;
  ASSERT_TRUE(WaitFor(
      [&] {
        return g_lab->Slurm({"squeue", "-h", "-t", "R", "-w", "busy", "-o", "%i"}).out.size() > 1;
      },
      milliseconds(15000)))
      << "the job did not start on busy";

  // Nothing to do while every node responds.
  auto idle = Reconcile();
  ASSERT_TRUE(idle) << idle.error().message;
  EXPECT_EQ(idle->Count(ReconcileDecision::Action::kDelete), 0);
  EXPECT_EQ(idle->Count(ReconcileDecision::Action::kDrain), 0);

  g_lab->KillSlurmd("gone");
  g_lab->KillSlurmd("dead-pub");
  ASSERT_TRUE(WaitState(
      "gone", [](const slurm::SlurmNode& x) { return x.IsNotResponding(); }, milliseconds(30000)));

  // OneGate faults: no change at all.
  std::vector<sim::Fault> faults = {
      SimFault(sim::FaultKind::kStatus, 500, "Internal error"),
      SimFault(sim::FaultKind::kStatus, 401, "Not authorized"),
      SimFault(sim::FaultKind::kMalformed, 200, "{\"SERVICE\":"),
      SimFault(sim::FaultKind::kHang, 0, "", milliseconds(2500)),
  };
  for (const auto& f : faults) {
    sim_.ClearFaults();
    sim_.InjectFault(f);
    auto r = Reconcile();
    ASSERT_TRUE(r);
    EXPECT_NE(r->skipped, "");
    EXPECT_TRUE(g_lab->Registered("gone"));
  }
  sim_.ClearFaults();

  auto cycle = Reconcile();
  ASSERT_TRUE(cycle) << cycle.error().message;
  EXPECT_FALSE(g_lab->Registered("gone"));
  EXPECT_TRUE(g_lab->Registered("live"));
  EXPECT_TRUE(g_lab->Registered("dead-pub"));
  EXPECT_TRUE(g_lab->Registered("busy"));

  // The busy node: killed with its job running -> drained with the exact reason first.
  g_lab->KillSlurmd("busy");
  ASSERT_TRUE(WaitState(
      "busy", [](const slurm::SlurmNode& x) { return x.IsNotResponding(); }, milliseconds(30000)));
  auto drain = Reconcile();
  ASSERT_TRUE(drain) << drain.error().message;
  auto busy = g_lab->Node("busy");
  ASSERT_TRUE(busy.has_value());
  if (busy->IsDown() &&
      g_lab->Slurm({"squeue", "-h", "-t", "R", "-w", "busy", "-o", "%i"}).out.empty()) {
    GTEST_LOG_(WARNING) << "busy went DOWN before the drain could be observed";
  } else {
    EXPECT_TRUE(busy->IsDrain()) << busy->state;
    EXPECT_EQ(busy->reason, "removed from OneFlow service");
  }
  // ... and deleted by a later cycle, once Slurm has ended the job on the DOWN node.
  EXPECT_TRUE(WaitFor(
      [&] {
        auto r = Reconcile();
        return r && !g_lab->Registered("busy");
      },
      milliseconds(40000), milliseconds(1000)));
  // Published nodes are never touched, responding or not.
  EXPECT_TRUE(g_lab->Registered("live"));
  auto dead = g_lab->Node("dead-pub");
  ASSERT_TRUE(dead.has_value());
  EXPECT_TRUE(dead->IsDown() || dead->IsNotResponding()) << dead->state;
  EXPECT_FALSE(dead->IsDrain());
  auto last = Reconcile();  // keep the result alive while iterating over it
  ASSERT_TRUE(last);
  for (const auto& d : last->decisions) {
    EXPECT_TRUE(d.ok) << d.node << ": " << d.error;
  }
}

TEST_F(SlurmRealTest, RestartKeepsDynamicNodes) {
  g_lab->StartSlurmd("keep");
  ASSERT_TRUE(WaitFor([] { return g_lab->Registered("keep"); }, milliseconds(10000)));
  // What the controller does when slurm.conf changes: restart, never `scontrol reconfigure`.
  g_lab->StopCtld();
  std::string why;
  ASSERT_TRUE(g_lab->StartCtld(100, false, &why)) << why;
  EXPECT_TRUE(g_lab->Registered("keep"));
}

// Issue: a configless worker keeps the slurm.conf it fetched until slurmd restarts. The
// controller restarts slurmctld on a change (above); the worker's follow restarts slurmd when
// the published SLURM_CONF_ID differs from its copy's (roles/slurm/join.cc). Proven here: the
// copy is byte-identical to the controller's (so the ids compare), it stays old after the
// controller's restart, and a slurmd restart on a busy dynamic node fetches the new one while
// the job goes on and the node stays registered and responding.
TEST_F(SlurmRealTest, AChangedSlurmConfReachesABusyDynamicNodeThroughASlurmdRestart) {
  const std::string node = "conf-busy";
  g_lab->StartSlurmd(node);
  ASSERT_TRUE(WaitState(
      node, [](const slurm::SlurmNode& x) { return x.BaseState() == "IDLE"; },
      milliseconds(10000)));
  auto job = g_lab->Slurm({"sbatch", "--parsable", "--no-requeue", "-w", node, "-o",
                           g_lab->dir() + "/jobs/%j.out", "--wrap", "sleep 300"});
  ASSERT_TRUE(job.ok()) << job.err;
  std::string id = job.out.substr(0, job.out.find_first_of(";\n"));
  auto running = [&] {
    return g_lab->Slurm({"squeue", "-h", "-j", id, "-o", "%T"}).out == "RUNNING\n";
  };
  ASSERT_TRUE(WaitFor(running, milliseconds(15000))) << "job " << id << " did not start";
  const std::string before = ReadAll(g_lab->NodeConf(node));
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(slurm::SlurmConfId(before), slurm::SlurmConfId(ReadAll(g_lab->conf())))
      << "the fetched copy is not the controller's file byte for byte";

  // The controller's change: a new slurm.conf, slurmctld restarted.
  g_lab->StopCtld();
  std::string why;
  ASSERT_TRUE(g_lab->StartCtld(150, false, &why)) << why;
  const std::string changed = ReadAll(g_lab->conf());
  ASSERT_NE(slurm::SlurmConfId(changed), slurm::SlurmConfId(before));
  std::this_thread::sleep_for(milliseconds(3000));
  EXPECT_EQ(ReadAll(g_lab->NodeConf(node)), before) << "slurmd fetched the change by itself";

  // The worker's follow: slurmd restarted (systemctl restart sends SIGTERM, then starts it).
  g_lab->KillSlurmd(node, SIGTERM);
  g_lab->StartSlurmd(node);
  EXPECT_TRUE(WaitFor(
      [&] {
        return slurm::SlurmConfId(ReadAll(g_lab->NodeConf(node))) == slurm::SlurmConfId(changed);
      },
      milliseconds(15000)))
      << "the restarted slurmd did not fetch the new slurm.conf";
  EXPECT_TRUE(running()) << "the job did not survive the slurmd restart";
  // Past SlurmdTimeout (10 s): the node is registered, responding and still runs the job.
  std::this_thread::sleep_for(milliseconds(12000));
  auto shown = g_lab->Node(node);
  ASSERT_TRUE(shown) << node << " is gone";
  EXPECT_FALSE(shown->IsNotResponding()) << shown->state;
  EXPECT_NE(shown->BaseState(), "DOWN") << shown->state;
  EXPECT_TRUE(running()) << "the job ended after the slurmd restart";
  g_lab->Slurm({"scancel", id});
}

// GPUs on a dynamic node of a configless cluster: the devices one-hpc finds under a root with
// stand-in device nodes and a stand-in nvidia-smi, written to the node's own file that the
// served gres.conf includes, bound to jobs by a real slurmd (CUDA_VISIBLE_DEVICES). No GPU
// here: the device nodes are character devices with /dev/null's numbers.
TEST_F(SlurmRealTest, ANodesOwnGresFileBindsItsGpusToJobs) {
  const std::string root = g_lab->dir() + "/gpu-root";
  fs::create_directories(root + "/dev");
  fs::create_directories(root + "/usr/bin");
  for (const char* d : {"/dev/nvidia0", "/dev/nvidia1"}) {
    ASSERT_EQ(::mknod((root + d).c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << d;
  }
  std::ofstream(root + "/dev/nvidiactl") << "";
  {
    std::ofstream smi(root + "/usr/bin/nvidia-smi");
    smi << "#!/bin/sh\nprintf '0, Tesla T4\\n1, Tesla T4\\n'\n";
  }
  ::chmod((root + "/usr/bin/nvidia-smi").c_str(), 0755);
  Files files(root);
  RootedProcessRunner rooted(g_lab->runner(), root);
  host::GpuInventory gpus = host::DetectGpus(files, rooted);
  ASSERT_EQ(gpus.devices, (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia1"})) << gpus.why;
  ASSERT_EQ(gpus.type, "tesla_t4");
  const std::string gres = slurm::NodeGres(gpus);
  EXPECT_EQ(gres, "gpu:tesla_t4:2");
  // The lab's nodes share one disk: the device paths are the stand-ins'.
  for (auto& d : gpus.devices) d = root + d;
  g_lab->WriteNodeGres(gpus);
  const std::string node = "gpu-node";
  g_lab->StartSlurmd(node, gres);
  ASSERT_TRUE(WaitState(
      node, [](const slurm::SlurmNode& x) { return x.BaseState() == "IDLE"; }, milliseconds(15000)))
      << "see " << g_lab->dir() << "/log/slurmd-" << node << ".log";
  // Back to no GPU for the nodes that start after this test.
  g_lab->WriteNodeGres(host::GpuInventory{{}, "", "no GPU"});
  auto shown = g_lab->Slurm({"scontrol", "show", "node", node});
  EXPECT_NE(shown.out.find("Gres=gpu:tesla_t4:2"), std::string::npos) << shown.out;

  auto both = g_lab->Slurm({"srun", "-w", node, "--mem=100", "--gres=gpu:tesla_t4:2", "printenv",
                            "CUDA_VISIBLE_DEVICES"});
  EXPECT_EQ(both.out, "0,1\n") << both.err;
  // Two jobs with one GPU each at the same time: one device each.
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto job = g_lab->Slurm({"sbatch", "--parsable", "-w", node, "--mem=100", "--gres=gpu:1", "-o",
                             g_lab->dir() + "/jobs/gpu-%j.out", "--wrap",
                             "echo $CUDA_VISIBLE_DEVICES; sleep 3"});
    ASSERT_TRUE(job.ok()) << job.err;
    ids.push_back(job.out.substr(0, job.out.find_first_of(";\n")));
  }
  auto out = [&](const std::string& id) {
    return ReadAll(g_lab->dir() + "/jobs/gpu-" + id + ".out");
  };
  ASSERT_TRUE(
      WaitFor([&] { return !out(ids[0]).empty() && !out(ids[1]).empty(); }, milliseconds(20000)));
  const std::set<std::string> seen = {out(ids[0]), out(ids[1])};
  EXPECT_EQ(seen, (std::set<std::string>{"0\n", "1\n"}));
  g_lab->KillSlurmd(node);
  g_lab->Slurm({"scontrol", "delete", "nodename=" + node});
}

TEST_F(SlurmRealTest, SelfDrainRemovesTheNodeAndStopsSlurmd) {
  g_lab->StartSlurmd("leaving");
  ASSERT_TRUE(WaitFor([] { return g_lab->Registered("leaving"); }, milliseconds(10000)));
  LabSystemd systemd(*g_lab, "leaving");
  SelfDrainOptions o;
  o.node_name = "leaving";
  o.slurm_conf = g_lab->NodeConf("leaving");
  ASSERT_TRUE(fs::exists(o.slurm_conf));
  auto start = steady_clock::now();
  auto r = RunSelfDrain(o, g_lab->runner(), systemd, clock_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->was_registered);
  EXPECT_TRUE(r->deleted);
  EXPECT_TRUE(r->problems.empty());
  EXPECT_EQ(SelfDrainExitCode(r), 0);
  EXPECT_EQ(systemd.stopped, (std::vector<std::string>{"slurmd.service"}));
  EXPECT_FALSE(g_lab->Registered("leaving"));
  EXPECT_FALSE(g_lab->SlurmdAlive("leaving"));
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(15));
  // Again (e.g. a second stop): the node is gone, nothing fails.
  auto again = RunSelfDrain(o, g_lab->runner(), systemd, clock_);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->deleted);
}

TEST_F(SlurmRealTest, FullNodeTableIsReported) {
  std::string why;
  g_lab->StopCtld();
  ASSERT_TRUE(g_lab->StartCtld(2, true, &why)) << why;
  g_lab->StartSlurmd("f1");
  g_lab->StartSlurmd("f2");
  ASSERT_TRUE(WaitFor([] { return g_lab->Registered("f1") && g_lab->Registered("f2"); },
                      milliseconds(10000)));
  g_lab->StartSlurmd("f3");
  Files files;
  auto client = g_lab->Client();
  slurm::RegistrationCheck check;
  check.controller_addr = kCtlAddr;
  check.timeout = milliseconds(5000);
  check.node_name = "f2";
  check.fetched_conf = g_lab->NodeConf("f2");
  EXPECT_TRUE(slurm::WaitForRegistration(files, client, clock_, check));
  check.node_name = "f3";
  check.fetched_conf = g_lab->NodeConf("f3");
  // A full table is final for this slurmd: the wait fails at once, not at its timeout.
  check.timeout = milliseconds(60000);
  const auto t0 = steady_clock::now();
  auto full = slurm::WaitForRegistration(files, client, clock_, check);
  ASSERT_FALSE(full);
  EXPECT_LT(steady_clock::now() - t0, milliseconds(15000));
  EXPECT_NE(full.error().message.find("Slurm node f3 was refused: slurmctld on 10.79.0.1 holds 2 "
                                      "nodes, as many as it accepts (2,"),
            std::string::npos)
      << full.error().message;
  EXPECT_TRUE(g_lab->SlurmdAlive("f3"));  // trap 1: slurmd runs on, silently rejected
  g_lab->KillAllSlurmds();
  g_lab->StopCtld();
  ASSERT_TRUE(g_lab->StartCtld(100, true, &why)) << why;
}

// Elastic mode against the real slurmctld: a job asking for 3 nodes on a 1-node cluster pends
// for a reason the cycle grows for; the cycle asks OneFlow (the simulator) for 3 VMs; once the
// new nodes register the job runs; later, with a job running on the first node, the two
// others idle for longer than the limit are drained with the cycle's reason, then their exact
// VMs are terminated while the job goes on.
TEST_F(SlurmRealTest, ElasticGrowsForAWaitingJobAndShrinksByTheExactIdleVms) {
  // No node of an earlier test may take the job.
  {
    auto c = g_lab->Client();
    if (auto nodes = c.ShowNodes(); nodes) {
      for (const auto& n : *nodes) {
        (void)c.SetState(n.name, slurm::NodeStateChange::kDown, "elastic test");
        (void)c.DeleteNode(n.name);
      }
    }
  }
  sim::RoleSpec worker = SimRole("worker", 1);
  worker.min_vms = 1;
  worker.max_vms = 3;
  worker.cooldown_ms = 0;
  const int service = sim_.CreateService("OneSlurm", {SimRole("controller", 1), worker});
  const sim::VmHandle controller = sim_.AddVm(service, "controller");
  std::map<std::string, int> vm_of;
  auto add_worker = [&](const std::string& name) {
    sim::VmSpec spec;
    spec.user_template[slurm::kAttrNodeName] = name;
    vm_of[name] = sim_.AddVm(service, "worker", spec).id;
    g_lab->StartSlurmd(name);
  };
  auto idle = [](const slurm::SlurmNode& x) { return x.BaseState() == "IDLE"; };
  add_worker("el1");
  ASSERT_TRUE(WaitState("el1", idle, milliseconds(15000)));

  long long shift = 0;  // seconds added to the cycle's clock ("the idle time has passed")
  auto cycle = [&](bool dry_run = false) {
    OneGateConfig c;
    c.endpoint = sim_.Endpoint();
    c.vmid = std::to_string(controller.id);
    c.token = controller.token;
    c.request_timeout = milliseconds(2000);
    c.retry.max_attempts = 1;
    OneGateClient client(c, http_, clock_);
    ElasticOptions o;
    o.slurm_conf = g_lab->conf();
    o.state_file = g_lab->dir() + "/elastic.json";
    o.limits.min_nodes = 1;
    o.limits.max_nodes = 3;
    o.dry_run = dry_run;
    o.now = [&] { return static_cast<long long>(time(nullptr)) + shift; };
    o.kick_file = g_lab->KickFile();
    o.last_cycle_file = g_lab->dir() + "/run/elastic-last-cycle";
    o.spacing = Duration(0);  // the unit test proves the spacing; here it would only wait
    Files files;
    return RunElastic(o, client, g_lab->runner(), clock_, files);
  };
  auto squeue = [&](const std::string& job, const std::string& format) {
    std::string out = g_lab->Slurm({"squeue", "-h", "-j", job, "-o", format}).out;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  };

  std::error_code gone;
  fs::remove(g_lab->KickFile(), gone);  // earlier tests' jobs made it too
  auto submitted = g_lab->Slurm({"sbatch", "--parsable", "--no-requeue", "-N3", "-o",
                                 g_lab->dir() + "/jobs/%j.out", "--wrap", "sleep 8"});
  ASSERT_TRUE(submitted.ok()) << "Slurm refused a 3-node job on a 1-node cluster: "
                              << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find_first_of(";\n"));
  // slurmctld ran the product's job_submit.lua for it (JobSubmitPlugins=lua): the kick that
  // starts oneslurm-elastic.path's cycle on a controller.
  EXPECT_TRUE(fs::exists(g_lab->KickFile())) << "job_submit.lua did not create the kick file";
  std::string reason;
  ASSERT_TRUE(WaitFor(
      [&] {
        reason = squeue(job, "%r");
        return !reason.empty() && reason != "None";
      },
      milliseconds(15000)));
  // Slurm 22.05 with slurm.conf's placeholder records (State=FUTURE): "ReqNodeNotAvail, May be
  // reserved for other job", which the cycle reads as "more nodes would help" (without them,
  // PartitionConfig: the partition has fewer nodes than the job asks for).
  EXPECT_TRUE(reason.starts_with("ReqNodeNotAvail")) << reason;

  // A dry run asks for nothing.
  auto dry = cycle(true);
  ASSERT_TRUE(dry) << dry.error().message;
  EXPECT_EQ(sim_.Cardinality(service, "worker"), 1);

  auto grow = cycle();
  ASSERT_TRUE(grow) << grow.error().message;
  EXPECT_EQ(grow->onegate_requests, 2);  // GET /service and the PUT
  EXPECT_FALSE(fs::exists(g_lab->KickFile())) << "the cycle did not consume the kick";
  EXPECT_EQ(sim_.Cardinality(service, "worker"), 3) << "the cycle did not ask for 3 workers";
  // OneFlow creates the two VMs; they boot and register.
  add_worker("el2");
  add_worker("el3");
  EXPECT_TRUE(WaitFor([&] { return squeue(job, "%T") == "RUNNING"; }, milliseconds(30000)))
      << "the 3-node job did not start: " << squeue(job, "%T %r");
  EXPECT_TRUE(WaitFor([&] { return squeue(job, "%T").empty(); }, milliseconds(30000)));

  // A long job on el1; the two others idle "for 11 minutes".
  auto running = g_lab->Slurm({"sbatch", "--parsable", "--no-requeue", "-w", "el1", "-o",
                               g_lab->dir() + "/jobs/%j.out", "--wrap", "sleep 300"});
  ASSERT_TRUE(running.ok()) << running.err;
  std::string keep = running.out.substr(0, running.out.find_first_of(";\n"));
  ASSERT_TRUE(WaitFor([&] { return squeue(keep, "%T") == "RUNNING"; }, milliseconds(15000)));
  for (const char* n : {"el2", "el3"}) {
    ASSERT_TRUE(WaitState(n, idle, milliseconds(15000))) << n;
    auto node = g_lab->Node(n);
    ASSERT_TRUE(node);
    ASSERT_TRUE(node->fields.count("LastBusyTime")) << "no LastBusyTime in scontrol's output";
    EXPECT_TRUE(slurm::ParseSlurmTime(node->fields.at("LastBusyTime")))
        << node->fields.at("LastBusyTime");
  }
  shift = 660;
  auto drain = cycle();
  ASSERT_TRUE(drain) << drain.error().message;
  for (const char* n : {"el2", "el3"}) {
    auto node = g_lab->Node(n);
    ASSERT_TRUE(node);
    EXPECT_TRUE(node->IsDrain()) << n << " " << node->state;
    EXPECT_EQ(node->reason, elastic::kElasticIdleReason);
  }
  EXPECT_FALSE(g_lab->Node("el1")->IsDrain());
  EXPECT_TRUE(sim_.Terminations().empty());

  auto shrink = cycle();
  ASSERT_TRUE(shrink) << shrink.error().message;
  std::set<int> terminated;
  for (const auto& t : sim_.Terminations()) terminated.insert(t.vm_id);
  EXPECT_EQ(terminated, (std::set<int>{vm_of["el2"], vm_of["el3"]}));
  EXPECT_EQ(sim_.Cardinality(service, "worker"), 1) << "OneFlow's watchdog lowers it";
  EXPECT_EQ(squeue(keep, "%T"), "RUNNING") << "the job on el1 must go on";
  g_lab->Slurm({"scancel", keep});
}

// slurmd runs the product's health check (HealthCheckProgram, the slurm-health-check name of
// the one-hpc binary): a node drained by the health check is resumed by slurmd's next run once
// every check passes, which proves slurmd runs it with the node's name and that it reaches the
// controller from the node. A drain by someone else stays.
TEST_F(SlurmRealTest, SlurmdRunsTheHealthCheckWhichLiftsItsOwnDrainOnly) {
  const char* bin = ONEHPC_TEST_BIN;
  const std::string link = g_lab->dir() + "/bin/" + kHealthCheckProgramName;
  fs::create_directories(g_lab->dir() + "/bin");
  fs::remove(link);
  fs::create_symlink(bin, link);
  g_lab->StopCtld();
  g_lab->SetHealthCheckProgram(link);
  std::string why;
  ASSERT_TRUE(g_lab->StartCtld(100, false, &why)) << why;
  g_lab->StartSlurmd("hc1");
  g_lab->StartSlurmd("hc2");
  for (const char* n : {"hc1", "hc2"}) {
    ASSERT_TRUE(WaitState(
        n, [](const slurm::SlurmNode& x) { return x.BaseState() == "IDLE"; }, milliseconds(15000)))
        << n;
  }
  auto c = g_lab->Client();
  ASSERT_TRUE(c.SetState("hc1", slurm::NodeStateChange::kDrain, "one-hpc health: disk: test"));
  ASSERT_TRUE(c.SetState("hc2", slurm::NodeStateChange::kDrain, "maintenance"));
  EXPECT_TRUE(WaitState(
      "hc1", [](const slurm::SlurmNode& x) { return !x.IsDrain(); }, milliseconds(30000)))
      << "slurmd's health check did not resume hc1 (see " << g_lab->dir() << "/log)";
  auto hc2 = g_lab->Node("hc2");
  ASSERT_TRUE(hc2);
  EXPECT_TRUE(hc2->IsDrain());
  EXPECT_EQ(hc2->reason, "maintenance");
  g_lab->KillAllSlurmds();
  g_lab->StopCtld();
  g_lab->SetHealthCheckProgram("");
  ASSERT_TRUE(g_lab->StartCtld(100, false, &why)) << why;
}

// The slurmd unit the worker renders is a valid unit for systemd 252 (no output at all).
TEST(SlurmdUnitTest, PassesSystemdAnalyzeVerify) {
  if (!HaveProgram("systemd-analyze")) GTEST_SKIP() << "systemd-analyze missing";
  if (access("/usr/sbin/slurmd", X_OK) != 0) GTEST_SKIP() << "slurmd not installed";
  char tmpl[] = "/tmp/ohsl-unit.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  slurm::SlurmdUnitParams p;
  p.node_name = "slurm-one-worker-7";
  p.controller_addr = "10.0.0.5";
  p.cpus = 2;
  p.real_memory_mb = 1800;
  p.gres = "gpu:tesla_t4:1";
  std::ofstream(dir + "/slurmd.service") << slurm::RenderSlurmdUnit(p);
  Command c;
  c.argv = {"systemd-analyze", "verify", "--man=no", "slurmd.service"};
  c.cwd = dir;
  c.env = {{"SYSTEMD_LOG_LEVEL", "warning"}};
  c.timeout = milliseconds(30000);
  RealProcessRunner runner;
  auto r = runner.Run(c);
  std::error_code ec;
  fs::remove_all(dir, ec);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out + r->err, "");
}

}  // namespace
}  // namespace onehpc
