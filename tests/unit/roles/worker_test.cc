// The worker role on a fake machine, with the controller published in the OneGate simulator.
#include "roles/worker.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <functional>

#include "common/base64.h"
#include "common/log.h"
#include "roles/names.h"
#include "roles/slurm/join.h"
#include "roles/slurm/slurm_conf.h"
#include "tests/fakes/key_server.h"
#include "tests/fakes/machine.h"
#include "tests/fakes/onegate_sim.h"
#include "tests/fakes/role_run.h"

namespace onehpc {
namespace {

using fakes::Exit;
using fakes::FakeMachine;
using fakes::FakeSlurm;
using fakes::RoleRun;

bool Has(const std::vector<std::string>& v, const std::string& item) {
  return std::find(v.begin(), v.end(), item) != v.end();
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(sim_.Start(), 0);
    service_ = sim_.CreateService("OneSlurm",
                                  {fakes::SimRole("controller", 1), fakes::SimRole("worker", 1)});
    key_ = std::string(128, '\0');
    for (size_t i = 0; i < key_.size(); ++i) key_[i] = static_cast<char>(i * 7 + 3);
    sim::VmSpec ctl;
    ctl.nics.push_back(fakes::SimNic("10.0.0.5", "service"));
    ctl.user_template = {{"READY", "YES"},
                         {"SLURM_CONTROLLER_ADDR", "10.0.0.5"},
                         {"SLURM_CONTROLLER_HOST", "slurm-one-controller"}};
    controller_ = sim_.AddVm(service_, "controller", ctl);
    keys_ = std::make_unique<fakes::FakeKeyServer>(sim_, controller_, "10.0.0.5", key_, "10.0.0.7",
                                                   http_, m_.clock);
    keys_->Publish();
    sim::VmSpec w;
    w.nics.push_back(fakes::SimNic("192.0.2.7", "public", "2"));
    w.nics.push_back(fakes::SimNic("10.0.0.7", "service"));
    worker_ = sim_.AddVm(service_, "worker", w);
    name_ = "slurm-one-worker-" + std::to_string(worker_.id);
    onegate_ = std::make_unique<OneGateClient>(fakes::SimConfig(sim_, worker_), hook_, m_.clock);
    vars_ = {{"VMID", std::to_string(worker_.id)},
             {"ETH0_IP", "192.0.2.7"},
             {"ETH0_MASK", "255.255.255.0"},
             {"ETH1_IP", "10.0.0.7"},
             {"ETH1_MASK", "255.255.255.0"}};
    slurm_.Install(m_.runner);
    // slurmd, when (re)started, fetches the configuration and registers (unless told not to).
    for (const char* verb : {"start", "restart"}) {
      m_.runner.On({"systemctl", "--no-block", verb, "slurmd.service"}, [this](const Command&) {
        m_.active.insert("slurmd.service");
        published_at_start_ = sim_.UserAttr(worker_.id, "SLURM_NODENAME");
        ++slurmd_starts_;
        if (fetches_config_) m_.Write("/run/slurm/conf/slurm.conf", "MaxNodeCount=2\n");
        if (registers_) slurm_.nodes[name_].addr = "10.0.0.7";
        return Exit(0);
      });
    }
  }
  std::unique_ptr<RoleRun> Run(PlanMode mode = PlanMode::kApply) {
    auto run = std::make_unique<RoleRun>(m_, *role_, vars_, onegate_.get(), mode, keys_.get());
    status_ = role_->Configure(*run->env);
    return run;
  }
  std::unique_ptr<RoleRun> RunOk(PlanMode mode = PlanMode::kApply) {
    auto run = Run(mode);
    EXPECT_TRUE(status_) << (status_ ? "" : status_.error().message) << "\n" << run->plan.Render();
    return run;
  }

  FakeMachine m_;
  sim::OneGateSimulator sim_;
  int service_ = -1;
  sim::VmHandle controller_, worker_;
  std::string key_, name_;
  CurlTransport http_;
  fakes::HookTransport hook_{http_};
  std::unique_ptr<OneGateClient> onegate_;
  std::unique_ptr<fakes::FakeKeyServer> keys_;
  std::unique_ptr<Role> role_ = MakeWorkerRole();
  ContextVars vars_;
  FakeSlurm slurm_;
  bool fetches_config_ = true;
  bool registers_ = true;
  int slurmd_starts_ = 0;
  std::string published_at_start_ = "<never started>";
  Status status_;
};

TEST_F(WorkerTest, Identity) {
  EXPECT_EQ(role_->Name(), "worker");
  EXPECT_EQ(role_->Service(), "OneSlurm");
  auto specs = role_->Settings();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "ONEAPP_SLURM_JOIN_TIMEOUT");
  EXPECT_EQ(specs[1].name, "ONEAPP_SLURM_CONTROLLER_VM_ID");
  EXPECT_EQ(WorkerNodeName({{"VMID", "42"}}).value_or("?"), "slurm-one-worker-42");
  EXPECT_EQ(WorkerNodeName({{"VMID", "42"}, {"SET_HOSTNAME", "gpu-3.lab"}}).value_or("?"), "gpu-3");
  EXPECT_FALSE(WorkerNodeName({{"VMID", "4x"}}));
}

TEST_F(WorkerTest, FirstJoin) {
  log::Capture logs;
  auto run = RunOk();
  // Name published before slurmd started, and the node verified afterwards.
  EXPECT_EQ(published_at_start_, name_);
  EXPECT_EQ(sim_.UserAttr(worker_.id, "SLURM_NODENAME"), name_);
  EXPECT_EQ(m_.Read("/proc/sys/kernel/hostname"), name_ + "\n");
  EXPECT_EQ(m_.Read("/etc/hosts"),
            "# BEGIN one-hpc managed block (do not edit)\n10.0.0.7\t" + name_ +
                "\n10.0.0.5\tslurm-one-controller\n# END one-hpc managed block\n"
                "127.0.0.1\tlocalhost\n127.0.1.1\tdebian\n");
  EXPECT_EQ(m_.Read("/etc/munge/munge.key"), key_);
  struct stat st {};
  ASSERT_EQ(stat((m_.root + "/etc/munge/munge.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  std::string unit = m_.Read("/etc/systemd/system/slurmd.service");
  // 4000 MiB MemTotal - 400 MiB for the OS; 2 CPUs; no GPU.
  EXPECT_NE(unit.find("ExecStart=/usr/sbin/slurmd -D -Z --conf-server 10.0.0.5:6817 -N " + name_ +
                      " --conf \"CPUs=2 RealMemory=3600 Feature=one\""),
            std::string::npos)
      << unit;
  EXPECT_TRUE(logs.Contains("on address 10.0.0.7 (NIC NIC1 on network 'service'"));
  auto changes = run->Changes();
  EXPECT_TRUE(
      Has(changes, "publish SLURM_NODENAME=" + name_ + " and SLURM_WORKER_PUBKEY in OneGate"));
  EXPECT_TRUE(Has(changes, "make a key pair in /var/lib/one-hpc/worker-box.key (0600 root)"));
  EXPECT_TRUE(
      Has(changes, "fetch the munge key from the controller's key server at 10.0.0.5:6830"));
  EXPECT_EQ(keys_->requests, 1);
  // The key server boxed the key for the public key of this VM's key pair.
  std::string pair = m_.Read("/var/lib/one-hpc/worker-box.key");
  ASSERT_EQ(pair.size(), 64u);
  EXPECT_EQ(sim_.UserAttr(worker_.id, "SLURM_WORKER_PUBKEY"), Base64Encode(pair.substr(32)));
  ASSERT_EQ(stat((m_.root + "/var/lib/one-hpc/worker-box.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_TRUE(Has(changes, "systemctl daemon-reload"));
  EXPECT_TRUE(Has(changes, "start slurmd.service (--no-block)"));
  EXPECT_TRUE(Has(changes, "enable oneslurm-self-drain.service"));
  EXPECT_TRUE(Has(changes, "start oneslurm-self-drain.service (--no-block)"));
  EXPECT_TRUE(run->publish.empty());  // READY goes out through the configure flow only
  // Requests whose size does not grow with the service but for the compact document (the
  // role's VM ids): the controller's VM, this VM, the publication; the key server reads this
  // VM alone.
  std::vector<std::string> by_worker, by_server;
  for (const auto& r : sim_.Requests()) {
    (r.vm_id == worker_.id ? by_worker : by_server)
        .push_back(r.method + " " + r.path + (r.query.empty() ? "" : "?" + r.query));
  }
  EXPECT_EQ(by_worker,
            (std::vector<std::string>{"GET /service", "GET /vms/" + std::to_string(controller_.id),
                                      "GET /vm", "PUT /vm"}));
  EXPECT_EQ(by_server, (std::vector<std::string>{"GET /vms/" + std::to_string(worker_.id)}));
  EXPECT_EQ(m_.Read("/var/lib/one-hpc/controller-vm-id"), std::to_string(controller_.id) + "\n");
  EXPECT_EQ(slurmd_starts_, 1);
  // Commands: munge checked before slurmd; registration checked with the configless config.
  auto cmds = m_.Changes();
  auto pos = [&](const std::string& a) {
    return std::find(cmds.begin(), cmds.end(), a) - cmds.begin();
  };
  EXPECT_LT(pos("unmunge"), pos("systemctl --no-block start slurmd.service"));
  EXPECT_LT(pos("systemctl --no-block start slurmd.service"),
            pos("scontrol -o show node " + name_));
  for (const auto& c : m_.runner.commands()) {
    if (c.argv[0] == "scontrol") {
      ASSERT_EQ(c.env.size(), 1u);
      EXPECT_EQ(c.env[0].second, m_.root + "/run/slurm/conf/slurm.conf");
    }
  }
  EXPECT_FALSE(logs.Contains(Base64Encode(key_)));
}

// The service template wires the controller's VM id (OneFlow resolves ${controller.vm.id}
// when it creates the worker): the first join reads that VM alone, no list of the role's VMs,
// so its OneGate requests do not grow with the service.
TEST_F(WorkerTest, FirstJoinReadsTheWiredControllerAlone) {
  vars_["ONEAPP_SLURM_CONTROLLER_VM_ID"] = std::to_string(controller_.id);
  RunOk();
  std::vector<std::string> by_worker;
  for (const auto& r : sim_.Requests()) {
    if (r.vm_id == worker_.id) by_worker.push_back(r.method + " " + r.path + r.query);
  }
  EXPECT_EQ(by_worker, (std::vector<std::string>{"GET /vms/" + std::to_string(controller_.id),
                                                 "GET /vm", "PUT /vm"}));
  EXPECT_EQ(m_.Read("/var/lib/one-hpc/controller-vm-id"), std::to_string(controller_.id) + "\n");
  EXPECT_EQ(sim_.UserAttr(worker_.id, "SLURM_NODENAME"), name_);
}

// A wired id that is no controller (a replaced controller's: gone; a worker's; a VM of
// another service) is a hint, not a fact: the role's list is read, and a bad value is named.
TEST_F(WorkerTest, AWiredIdThatIsNoControllerFallsBackToTheRole) {
  sim::VmSpec other;
  other.nics.push_back(fakes::SimNic("10.0.0.9", "service"));
  auto other_worker = sim_.AddVm(service_, "worker", other);
  for (int wired : {controller_.id + 1000, other_worker.id}) {
    SCOPED_TRACE(wired);
    std::remove((m_.root + "/var/lib/one-hpc/controller-vm-id").c_str());
    sim_.ClearRequests();
    vars_["ONEAPP_SLURM_CONTROLLER_VM_ID"] = std::to_string(wired);
    log::Capture logs;
    RunOk();
    std::vector<std::string> by_worker;
    for (const auto& r : sim_.Requests()) {
      if (r.vm_id == worker_.id) by_worker.push_back(r.method + " " + r.path + r.query);
    }
    ASSERT_GE(by_worker.size(), 3u);
    EXPECT_EQ(std::vector<std::string>(by_worker.begin(), by_worker.begin() + 3),
              (std::vector<std::string>{"GET /vms/" + std::to_string(wired), "GET /service",
                                        "GET /vms/" + std::to_string(controller_.id)}));
    EXPECT_TRUE(
        logs.Contains("the controller this VM knew is not one now: VM " + std::to_string(wired)));
    EXPECT_EQ(m_.Read("/var/lib/one-hpc/controller-vm-id"), std::to_string(controller_.id) + "\n");
  }
  auto specs = role_->Settings();
  vars_["ONEAPP_SLURM_CONTROLLER_VM_ID"] = "ctl-3";
  auto bad = Settings::Resolve(specs, vars_);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("ONEAPP_SLURM_CONTROLLER_VM_ID"), std::string::npos);
  EXPECT_NE(bad.error().message.find("ctl-3"), std::string::npos);
  EXPECT_NE(bad.error().message.find("expected a decimal integer"), std::string::npos)
      << bad.error().message;
}

TEST_F(WorkerTest, RerunKeepsEverything) {
  RunOk();
  auto again = RunOk();
  EXPECT_TRUE(again->Changes().empty()) << again->plan.Render();
  EXPECT_EQ(slurmd_starts_, 1);
  EXPECT_EQ(keys_->requests, 1);  // the installed key has the published id: nothing asked
}

TEST_F(WorkerTest, RotatedKeyIsInstalledAndDaemonsRestarted) {
  RunOk();
  std::string new_key(64, 'k');
  keys_->Rotate(new_key);
  auto run = RunOk();
  EXPECT_EQ(m_.Read("/etc/munge/munge.key"), new_key);
  EXPECT_EQ(keys_->requests, 2);
  auto changes = run->Changes();
  EXPECT_TRUE(Has(changes, "write /etc/munge/munge.key"));
  EXPECT_TRUE(Has(changes, "restart munge.service (--no-block)"));
  EXPECT_TRUE(Has(changes, "restart slurmd.service (--no-block)"));
}

TEST_F(WorkerTest, FollowFetchesARotatedKeyAndOtherwiseAsksNothing) {
  auto first = RunOk();
  EXPECT_TRUE(Has(first->Changes(), "enable oneslurm-follow-controller.timer"));
  {
    sim_.ClearRequests();
    RoleRun idle(m_, *role_, vars_, onegate_.get(), PlanMode::kApply, keys_.get());
    ASSERT_TRUE(role_->Follow(*idle.env));
    EXPECT_TRUE(idle.Changes().empty()) << idle.plan.Render();
    EXPECT_EQ(keys_->requests, 1);
    // Every 30 s on every worker: two documents of one VM each, never the service's.
    std::vector<std::string> paths;
    for (const auto& r : sim_.Requests()) paths.push_back(r.method + " " + r.path);
    EXPECT_EQ(paths,
              (std::vector<std::string>{"GET /vms/" + std::to_string(controller_.id), "GET /vm"}));
  }
  std::string new_key(128, 'r');
  keys_->Rotate(new_key);
  const int sleeps = m_.clock.sleeps();
  RoleRun follow(m_, *role_, vars_, onegate_.get(), PlanMode::kApply, keys_.get());
  auto s = role_->Follow(*follow.env);
  ASSERT_TRUE(s) << s.error().message << "\n" << follow.plan.Render();
  EXPECT_EQ(m_.Read("/etc/munge/munge.key"), new_key);
  EXPECT_EQ(keys_->requests, 2);
  auto changes = follow.Changes();
  EXPECT_TRUE(Has(changes, "restart munge.service (--no-block)"));
  EXPECT_TRUE(Has(changes, "restart slurmd.service (--no-block)"));
  EXPECT_EQ(m_.clock.sleeps(), sleeps);  // a follow pass never waits for the controller
}

// The controller this worker knew was replaced: the known VM is gone from the service, so the
// pass reads the role (compact) and the new controller, joins it and remembers it.
TEST_F(WorkerTest, FollowFindsAReplacedController) {
  RunOk();
  sim::VmSpec spec;
  spec.nics.push_back(fakes::SimNic("10.0.0.6", "service"));
  spec.user_template = {{"READY", "YES"},
                        {"SLURM_CONTROLLER_ADDR", "10.0.0.6"},
                        {"SLURM_CONTROLLER_HOST", "slurm-one-controller"}};
  auto replacement = sim_.AddVm(service_, "controller", spec);
  for (const auto& [k, v] : keys_->Published()) sim_.SetUserAttr(replacement.id, k, v);
  sim_.TerminateVm(controller_.id, /*hard=*/true);
  sim_.ClearRequests();
  RoleRun follow(m_, *role_, vars_, onegate_.get(), PlanMode::kApply, keys_.get());
  log::Capture logs;
  auto s = role_->Follow(*follow.env);
  ASSERT_TRUE(s) << s.error().message << "\n" << follow.plan.Render();
  EXPECT_NE(m_.Read("/etc/hosts").find("10.0.0.6\tslurm-one-controller"), std::string::npos)
      << follow.plan.Render();
  EXPECT_EQ(m_.Read("/var/lib/one-hpc/controller-vm-id"), std::to_string(replacement.id) + "\n");
  EXPECT_TRUE(logs.Contains("the controller this VM knew is not one now: VM " +
                            std::to_string(controller_.id)));
  std::vector<std::string> paths;
  for (const auto& r : sim_.Requests()) {
    if (r.vm_id == worker_.id) paths.push_back(r.method + " " + r.path + r.query);
  }
  ASSERT_GE(paths.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(paths.begin(), paths.begin() + 4),
            (std::vector<std::string>{"GET /vms/" + std::to_string(controller_.id), "GET /service",
                                      "GET /vms/" + std::to_string(replacement.id), "GET /vm"}));
}

// OpenNebula 6.10's OneGate appends the VMs' external IPs to NIC in GET /vm and GET /vms/:id,
// the documents a join reads now: they are not NICs, never an address to register under,
// and a key request from such an address is refused.
TEST_F(WorkerTest, UnderOpenNebula610ExternalIpEntriesAreNoAddresses) {
  sim_.SetOpenNebulaVersion("6.10");
  sim::VmSpec w;
  w.nics.push_back(fakes::SimNic("10.0.0.8", "service"));
  w.external_ips = {"203.0.113.8"};
  worker_ = sim_.AddVm(service_, "worker", w);
  name_ = "slurm-one-worker-" + std::to_string(worker_.id);
  onegate_ = std::make_unique<OneGateClient>(fakes::SimConfig(sim_, worker_), hook_, m_.clock);
  vars_ = {{"VMID", std::to_string(worker_.id)},
           {"ETH0_IP", "10.0.0.8"},
           {"ETH0_MASK", "255.255.255.0"}};
  // What this VM's GET /vm carries under 6.10 (so that the test cannot pass without it).
  auto own = onegate_->GetVm();
  ASSERT_TRUE(own) << own.error().message;
  EXPECT_EQ(own->external_ips, std::vector<std::string>{"203.0.113.8"});
  keys_->peer_ip = "203.0.113.8";
  vars_["ONEAPP_SLURM_JOIN_TIMEOUT"] = "10";
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(keys_->last_answer.find("DENIED the request came from 203.0.113.8, which is no "
                                    "address of VM " +
                                    std::to_string(worker_.id)),
            std::string::npos)
      << keys_->last_answer;
  keys_->peer_ip = "10.0.0.8";
  RunOk();
  EXPECT_NE(m_.Read("/etc/hosts").find("10.0.0.8\t" + name_), std::string::npos);
  EXPECT_EQ(m_.Read("/etc/hosts").find("203.0.113.8"), std::string::npos);
}

// A name of the form of another VM's node name is refused before anything is asked or done.
TEST_F(WorkerTest, SetHostnameCannotTakeAnotherVmsNodeName) {
  vars_["SET_HOSTNAME"] = "slurm-one-worker-12345.lab";
  auto name = WorkerNodeName(vars_);
  ASSERT_FALSE(name);
  EXPECT_NE(name.error().message.find("SET_HOSTNAME='slurm-one-worker-12345.lab' gives the Slurm "
                                      "node name slurm-one-worker-12345, the name of VM 12345's "
                                      "node"),
            std::string::npos)
      << name.error().message;
  vars_["SET_HOSTNAME"] = "slurm-one-worker-" + std::to_string(worker_.id);
  EXPECT_EQ(WorkerNodeName(vars_).value_or("?"), "slurm-one-worker-" + std::to_string(worker_.id));
  // slurm.conf's placeholder records (State=FUTURE) hold the one-hpc-slot names.
  vars_["SET_HOSTNAME"] = "one-hpc-slot7";
  name = WorkerNodeName(vars_);
  ASSERT_FALSE(name);
  EXPECT_NE(name.error().message.find("SET_HOSTNAME='one-hpc-slot7' gives the Slurm node name "
                                      "one-hpc-slot7, and names starting with one-hpc-slot are "
                                      "slurm.conf's placeholder records"),
            std::string::npos)
      << name.error().message;
  vars_["SET_HOSTNAME"] = "slurm-one-worker-x1";
  EXPECT_EQ(WorkerNodeName(vars_).value_or("?"), "slurm-one-worker-x1");
  name_ = "slurm-one-worker-x1";
  Run();
  EXPECT_TRUE(status_) << status_.error().message;
}

TEST_F(WorkerTest, FollowRestartsSlurmdWhenTheControllersSlurmConfChanged) {
  RunOk();
  // The copy slurmd fetched at start, and the controller publishing its id.
  m_.Write(slurm::kConfiglessSlurmConf, "ClusterName=one\nMaxNodeCount=100\n");
  m_.active.insert("slurmd.service");
  sim_.SetUserAttr(controller_.id, slurm::kAttrSlurmConfId,
                   slurm::SlurmConfId("ClusterName=one\nMaxNodeCount=100\n"));
  {
    RoleRun same(m_, *role_, vars_, onegate_.get(), PlanMode::kApply, keys_.get());
    ASSERT_TRUE(role_->Follow(*same.env));
    EXPECT_FALSE(Has(same.Changes(), "restart slurmd.service (--no-block)")) << same.plan.Render();
  }
  sim_.SetUserAttr(controller_.id, slurm::kAttrSlurmConfId,
                   slurm::SlurmConfId("ClusterName=one\nMaxNodeCount=200\n"));
  RoleRun changed(m_, *role_, vars_, onegate_.get(), PlanMode::kApply, keys_.get());
  auto s = role_->Follow(*changed.env);
  ASSERT_TRUE(s) << s.error().message << "\n" << changed.plan.Render();
  EXPECT_TRUE(Has(changed.Changes(), "restart slurmd.service (--no-block)"));
  EXPECT_NE(changed.plan.Render().find("the controller's slurm.conf changed"), std::string::npos);
}

TEST_F(WorkerTest, WaitsForTheControllerWithBackoff) {
  ASSERT_TRUE(sim_.EraseUserAttr(controller_.id, "READY"));
  hook_.hook = [this](int n) {  // two requests per look: the role's VM ids, the controller
    if (n == 6) sim_.SetUserAttr(controller_.id, "READY", "YES");
  };
  auto run = RunOk();
  EXPECT_GE(m_.clock.sleeps(), 3);
  EXPECT_GT(m_.clock.slept(), Duration(2000));
  int service_gets = 0;
  for (const auto& r : sim_.Requests()) {
    if (r.path == "/service" && r.vm_id == worker_.id) {
      ++service_gets;
      EXPECT_EQ(r.query.find("extended"), std::string::npos);  // the compact document
    }
  }
  EXPECT_EQ(service_gets, 4);
}

TEST_F(WorkerTest, NoControllerRoleIsAClearErrorWithinTheDeadline) {
  int other = sim_.CreateService("Other", {fakes::SimRole("worker", 1)});
  sim::VmSpec w;
  w.nics.push_back(fakes::SimNic("10.0.0.8", "service"));
  worker_ = sim_.AddVm(other, "worker", w);
  onegate_ = std::make_unique<OneGateClient>(fakes::SimConfig(sim_, worker_), hook_, m_.clock);
  vars_["VMID"] = std::to_string(worker_.id);
  vars_["ONEAPP_SLURM_JOIN_TIMEOUT"] = "60";
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(status_.error().message.find("has no role named 'controller' (roles: 'worker')"),
            std::string::npos)
      << status_.error().message;
  EXPECT_NE(status_.error().message.find("deadline of 60000 ms"), std::string::npos);
  EXPECT_LE(m_.clock.slept(), Duration(60000));
  int service_requests = 0;
  for (const auto& r : sim_.Requests()) {
    service_requests += (r.path == "/service" && r.vm_id == worker_.id) ? 1 : 0;
  }
  EXPECT_GT(service_requests, 3);  // retried, not an exit
  EXPECT_EQ(slurmd_starts_, 0);
}

// OneGate refusing this VM cannot be waited out: a worker removed from its service, a
// deleted service, a dead token or a forbidden route fails within seconds with exit 3 and an
// ERROR that says why, instead of retrying until the join deadline and exiting 5.
TEST_F(WorkerTest, OneGateRefusingThisVmFailsAtOnce) {
  int other = sim_.CreateService("Other", {fakes::SimRole("controller", 1)});
  struct Case {
    const char* name;
    std::function<void()> arrange;
    const char* status;
    const char* why;
  } cases[] = {
      {"removed from the service",
       [&] { sim_.SetUserAttr(worker_.id, "SERVICE_ID", std::to_string(other)); }, "HTTP 400",
       "does not count this VM as a member"},
      {"service deleted", [&] { sim_.SetUserAttr(worker_.id, "SERVICE_ID", "999"); }, "HTTP 404",
       "knows no such service"},
      {"dead token",
       [&] {
         auto config = fakes::SimConfig(sim_, worker_);
         config.token = "stale";
         onegate_ = std::make_unique<OneGateClient>(config, hook_, m_.clock);
       },
       "HTTP 401", "does not accept this VM's token"},
      {"forbidden", [&] { sim_.SetPermission("service.show", false); }, "HTTP 403",
       "forbids this request"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    sim_.SetUserAttr(worker_.id, "SERVICE_ID", std::to_string(service_));
    sim_.SetPermission("service.show", true);
    onegate_ = std::make_unique<OneGateClient>(fakes::SimConfig(sim_, worker_), hook_, m_.clock);
    c.arrange();
    const Duration slept_before = m_.clock.slept();
    sim_.ClearRequests();
    Run();
    ASSERT_FALSE(status_);
    EXPECT_EQ(status_.error().kind, ErrorKind::kInvalidInput) << status_.error().message;
    EXPECT_NE(status_.error().message.find(c.status), std::string::npos) << status_.error().message;
    EXPECT_NE(status_.error().message.find(c.why), std::string::npos) << status_.error().message;
    EXPECT_LT(m_.clock.slept() - slept_before, Duration(20000));
    int service_requests = 0;
    for (const auto& r : sim_.Requests()) service_requests += r.path == "/service" ? 1 : 0;
    EXPECT_LE(service_requests, 3);
    EXPECT_EQ(slurmd_starts_, 0);
  }
}

// With the controller's VM id remembered, the first request is GET /vms/<id>: OneGate refusing
// this VM there fails as fast as it does on GET /service.
TEST_F(WorkerTest, ADeadTokenFailsAtOnceWithAKnownControllerToo) {
  RunOk();
  ASSERT_TRUE(m_.Exists("/var/lib/one-hpc/controller-vm-id"));
  auto config = fakes::SimConfig(sim_, worker_);
  config.token = "stale";
  onegate_ = std::make_unique<OneGateClient>(config, hook_, m_.clock);
  const Duration slept_before = m_.clock.slept();
  Run();
  ASSERT_FALSE(status_);
  EXPECT_EQ(status_.error().kind, ErrorKind::kInvalidInput) << status_.error().message;
  EXPECT_NE(status_.error().message.find("does not accept this VM's token"), std::string::npos)
      << status_.error().message;
  EXPECT_LT(m_.clock.slept() - slept_before, Duration(20000));
}

TEST_F(WorkerTest, BadPublishedKeyIsNamed) {
  ASSERT_TRUE(sim_.SetUserAttr(controller_.id, "SLURM_KEY_SERVER_PUBKEY", "c2hvcnQ="));
  vars_["ONEAPP_SLURM_JOIN_TIMEOUT"] = "10";
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(status_.error().message.find("published by controller VM"), std::string::npos)
      << status_.error().message;
  EXPECT_NE(status_.error().message.find(
                "SLURM_KEY_SERVER_PUBKEY='c2hvcnQ=' is not the base64 of a 32-byte public key"),
            std::string::npos)
      << status_.error().message;
  EXPECT_EQ(keys_->requests, 0);
}

TEST_F(WorkerTest, ANameAnotherVmPublishesIsRefused) {
  // A fixed SET_HOSTNAME on a role with several VMs: the second one must not join.
  sim::VmSpec w;
  w.nics.push_back(fakes::SimNic("10.0.0.8", "service"));
  w.user_template = {{"SLURM_NODENAME", "gpu"}};
  auto other = sim_.AddVm(service_, "worker", w);
  vars_["SET_HOSTNAME"] = "gpu.lab";
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(status_.error().message.find("the Slurm node name gpu is already published by VM " +
                                         std::to_string(other.id) + " of this service"),
            std::string::npos)
      << status_.error().message;
  EXPECT_EQ(status_.error().kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(sim_.UserAttr(worker_.id, "SLURM_NODENAME"), "");  // nothing published
  EXPECT_EQ(slurmd_starts_, 0);
  EXPECT_EQ(keys_->requests, 0);
  // The one extended read of a join, and only for a name of the operator's.
  int extended = 0;
  for (const auto& r : sim_.Requests()) extended += r.query.find("extended") != std::string::npos;
  EXPECT_EQ(extended, 1);
}

TEST_F(WorkerTest, AnImpostorsBoxIsRefusedAtOnce) {
  // Someone answers on the controller's address with a box of its own making (it knows this
  // VM's public key: it is published) but cannot have the controller's secret key.
  fakes::FakeKeyServer impostor(sim_, controller_, "10.0.0.5", std::string(64, 'e'), "10.0.0.7",
                                http_, m_.clock);
  keys_ = std::make_unique<fakes::FakeKeyServer>(sim_, controller_, "10.0.0.5", key_, "10.0.0.7",
                                                 http_, m_.clock);
  keys_->Publish();
  RoleRun run(m_, *role_, vars_, onegate_.get(), PlanMode::kApply, &impostor);
  auto s = role_->Configure(*run.env);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("does not open with the public key the controller publishes"),
            std::string::npos)
      << s.error().message;
  EXPECT_EQ(impostor.requests, 1);  // a permanent refusal: not retried
  EXPECT_FALSE(m_.Exists("/etc/munge/munge.key"));
  EXPECT_EQ(slurmd_starts_, 0);
}

TEST_F(WorkerTest, ARequestFromAnotherAddressIsDenied) {
  keys_->peer_ip = "10.0.0.99";  // not an address of this VM in the service document
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(status_.error().message.find("the key server refused: the request came from "
                                         "10.0.0.99, which is no address of VM " +
                                         std::to_string(worker_.id)),
            std::string::npos)
      << status_.error().message;
  EXPECT_EQ(keys_->requests, 1);
  EXPECT_FALSE(m_.Exists("/etc/munge/munge.key"));
}

TEST_F(WorkerTest, AKeyServerNotUpYetIsRetried) {
  keys_->refuse_first = 2;  // slurmctld is up, the socket not yet
  auto run = RunOk();
  EXPECT_EQ(keys_->requests, 3);
  EXPECT_GE(m_.clock.sleeps(), 2);
  EXPECT_EQ(m_.Read("/etc/munge/munge.key"), key_);
}

// A worker that joins while the controller rotates the key gets the new key before its id is
// published: it asks again and checks the key against the id published then (review N9), rather
// than failing its configure for good.
TEST_F(WorkerTest, AKeyRotationUnderWayIsWaitedFor) {
  std::string rotated(128, 'r');
  keys_->RotateUnpublished(rotated);
  keys_->after_answer = [&](int n) {
    if (n == 1) keys_->Publish();  // the controller publishes the new id
  };
  log::Capture logs;
  auto run = RunOk();
  EXPECT_EQ(keys_->requests, 2);
  EXPECT_EQ(m_.Read("/etc/munge/munge.key"), rotated);
  EXPECT_TRUE(logs.Contains("a key rotation under way")) << logs.text();
}

// Review finding N11: a controller VM powered off (or stopped, or gone) may still show
// READY=YES; a worker never joins it, it waits for an ACTIVE one.
TEST_F(WorkerTest, AControllerThatIsNotActiveIsNeverJoined) {
  ASSERT_TRUE(sim_.SetVmState(controller_.id, sim::states::kVmPoweroff, 0));
  vars_["ONEAPP_SLURM_JOIN_TIMEOUT"] = "30";
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(status_.error().message.find("VM " + std::to_string(controller_.id) +
                                         " (not ACTIVE: state 8)"),
            std::string::npos)
      << status_.error().message;
  EXPECT_EQ(keys_->requests, 0);
  EXPECT_EQ(slurmd_starts_, 0);
}

TEST_F(WorkerTest, TableFullIsReported) {
  registers_ = false;  // slurmctld rejects the registration silently (trap 1)
  vars_["ONEAPP_SLURM_JOIN_TIMEOUT"] = "30";
  log::Capture logs;
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(status_.error().message.find("Slurm node " + name_ +
                                         " did not register with 10.0.0.5 within 30s: the node "
                                         "table may be full (it accepts 2 nodes"),
            std::string::npos)
      << status_.error().message;
  EXPECT_LE(m_.clock.slept(), Duration(30000));
  // sinfo shows the table full (2 nodes of the 2 it accepts, an idle and an allocated line):
  // the join fails at once instead of at its timeout.
  m_.runner.On({"sinfo", "-h", "-a", "-o", "%D"}, fakes::Exit(0, "1\n1\n"));
  const Duration slept = m_.clock.slept();
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(status_.error().message.find("Slurm node " + name_ +
                                         " was refused: slurmctld on 10.0.0.5 holds 2 nodes, "
                                         "as many as it accepts (2, ONEAPP_SLURM_MAX_NODES on "
                                         "the controller)"),
            std::string::npos)
      << status_.error().message;
  EXPECT_LT(m_.clock.slept() - slept, Duration(2000));
  EXPECT_EQ(slurmd_starts_, 2) << "the second run restarted the unregistered slurmd";
  m_.runner.On({"sinfo", "-h", "-a", "-o", "%D"}, fakes::Exit(0, "1\n"));
  // Reconfigure after a slot freed: slurmd is running but unregistered -> restarted.
  registers_ = true;
  auto run = RunOk();
  EXPECT_TRUE(Has(run->Changes(), "restart slurmd.service (--no-block)"));
  EXPECT_EQ(slurmd_starts_, 3);
}

TEST_F(WorkerTest, ConfigNeverFetched) {
  fetches_config_ = false;
  registers_ = false;
  vars_["ONEAPP_SLURM_JOIN_TIMEOUT"] = "20";
  Run();
  ASSERT_FALSE(status_);
  EXPECT_NE(status_.error().message.find("slurmd did not fetch its configuration from "
                                         "10.0.0.5:6817 within 20s"),
            std::string::npos)
      << status_.error().message;
}

TEST_F(WorkerTest, StaleRecordsOfThisNodeAreFixed) {
  RunOk();
  // Trap 4: the record kept an old address; and the reconciler drained it at some point.
  slurm_.nodes[name_].addr = "10.0.0.99";
  slurm_.nodes[name_].drain = true;
  slurm_.nodes[name_].reason = "removed from OneFlow service";
  auto run = RunOk();
  EXPECT_EQ(run->Changes(), (std::vector<std::string>{"set NodeAddr of " + name_ + " to 10.0.0.7",
                                                      "resume " + name_}));
  EXPECT_EQ(slurm_.nodes[name_].addr, "10.0.0.7");
  EXPECT_FALSE(slurm_.nodes[name_].drain);
  // An admin's drain is not ours: kept.
  slurm_.nodes[name_].drain = true;
  slurm_.nodes[name_].reason = "maintenance";
  auto admin = RunOk();
  EXPECT_TRUE(admin->Changes().empty());
}

TEST_F(WorkerTest, DryRunLooksOnceAndChangesNothing) {
  ASSERT_TRUE(sim_.EraseUserAttr(controller_.id, "READY"));
  Run(PlanMode::kDryRun);
  ASSERT_FALSE(status_);  // not ready: one look only, no waiting
  EXPECT_EQ(m_.clock.sleeps(), 0);
  ASSERT_TRUE(sim_.SetUserAttr(controller_.id, "READY", "YES"));
  auto run = RunOk(PlanMode::kDryRun);
  EXPECT_FALSE(m_.Exists("/etc/munge/munge.key"));
  EXPECT_FALSE(m_.Exists("/etc/systemd/system/slurmd.service"));
  EXPECT_EQ(sim_.UserAttr(worker_.id, "SLURM_NODENAME"), "");
  EXPECT_FALSE(m_.Exists("/var/lib/one-hpc/worker-box.key"));
  EXPECT_EQ(slurmd_starts_, 0);
  EXPECT_EQ(keys_->requests, 0);
  EXPECT_TRUE(Has(run->Changes(),
                  "publish SLURM_NODENAME=" + name_ + " and SLURM_WORKER_PUBKEY in OneGate"));
  EXPECT_TRUE(Has(run->Changes(), "start slurmd.service (--no-block)"));
}

TEST_F(WorkerTest, NeedsOneGateAndAGpuShowsUp) {
  RoleRun run(m_, *role_, vars_, nullptr);
  auto s = role_->Configure(*run.env);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("TOKEN=YES"), std::string::npos);
  // A device node alone is not a GPU: the driver must answer.
  m_.Write("/dev/nvidia0", "");
  RunOk();
  EXPECT_NE(m_.Read("/etc/systemd/system/slurmd.service").find("Feature=one\""), std::string::npos);
  EXPECT_EQ(m_.Read("/etc/slurm/gres-node.conf").find("Name=gpu"), std::string::npos);
  // The driver answers (a stand-in nvidia-smi): the node registers its GPU with its type, and
  // its own gres.conf lists the device; slurmd restarts for both.
  m_.Write("/usr/bin/nvidia-smi", "");
  m_.runner.On({m_.files->HostPath("/usr/bin/nvidia-smi")}, fakes::Exit(0, "0, Tesla T4\n"));
  auto gpu = RunOk();
  EXPECT_NE(m_.Read("/etc/systemd/system/slurmd.service").find("Feature=one Gres=gpu:tesla_t4:1\""),
            std::string::npos);
  EXPECT_NE(
      m_.Read("/etc/slurm/gres-node.conf").find("\nName=gpu Type=tesla_t4 File=/dev/nvidia0\n"),
      std::string::npos)
      << m_.Read("/etc/slurm/gres-node.conf");
  EXPECT_TRUE(Has(gpu->Changes(), "restart slurmd.service (--no-block)"));
  // The same again: nothing changes.
  EXPECT_TRUE(RunOk()->Changes().empty());
}

}  // namespace
}  // namespace onehpc
