#include "roles/slurm/join.h"

#include <algorithm>
#include <cctype>

#include "common/base64.h"
#include "common/log.h"
#include "roles/ensure.h"
#include "roles/host/address.h"
#include "roles/host/hostname.h"
#include "roles/host/machine.h"
#include "roles/names.h"
#include "roles/slurm/gres.h"
#include "roles/slurm/key_delivery.h"
#include "roles/slurm/munge.h"
#include "roles/slurm/registration.h"
#include "roles/slurm/slurm_client.h"
#include "roles/slurm/slurm_conf.h"
#include "roles/slurm/slurmd_unit.h"

namespace onehpc {
namespace {

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out.empty() ? "none" : out;
}

// A node record that outlived an earlier life of this VM: the name keeps its old address, and
// a drain by the reconciler is kept across slurmd restarts. Both are
// positively ours: same name, and the reconciler's exact reason.
Status FixRegisteredNode(RoleEnv& env, slurm::SlurmClient& client, const slurm::SlurmNode& node,
                         const std::string& own_ip) {
  if (!node.addr.empty() && node.addr != own_ip) {
    auto s = env.plan.Do(
        "set NodeAddr of " + node.name + " to " + own_ip,
        "Slurm kept the old address " + node.addr + " of a previous registration under this name",
        [&]() -> Status {
          auto r = client.SetNodeAddr(node.name, own_ip);
          if (!r) return Fail(r.error());
          return Ok();
        });
    if (!s) return s;
  }
  if (node.IsDrain() && node.reason == slurm::kReconcileDrainReason) {
    auto s = env.plan.Do("resume " + node.name,
                         "it was drained by the reconciler ('" + node.reason +
                             "') but this VM is in the service and publishes its name",
                         [&]() -> Status {
                           auto r = client.SetState(node.name, slurm::NodeStateChange::kResume, "");
                           if (!r) return Fail(r.error());
                           return Ok();
                         });
    if (!s) return s;
  }
  return Ok();
}

// A 32-hex-digit id the controller publishes (`optional`: "" when absent).
Result<std::string> PublishedHexId(const VmInfo& vm, const char* attr, bool optional,
                                   const std::string& where) {
  std::string id = vm.Attr(attr);
  if (optional && id.empty()) return id;
  if (id.size() != 32 || id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Fail(ErrorKind::kInvalidInput,
                std::string(attr) + "='" + id + "'" + where + " is not 32 lower-case hex digits");
  }
  return id;
}

// The munge key's id the controller publishes now (after a box held a key of another id: a
// rotation under way); `known` when OneGate cannot say.
std::string PublishedKeyId(RoleEnv& env, const ControllerInfo& ctl, const std::string& known) {
  auto vm = env.onegate->GetVmById(ctl.vm_id);
  if (!vm) {
    log::Warn("worker: cannot read the controller's munge key id again: {}", vm.error().message);
    return known;
  }
  std::string now = vm->Attr(slurm::kAttrMungeKeyId);
  log::Info(
      "worker: the key server sent a munge key whose id is not {} (a key rotation under way); "
      "the controller publishes {} now",
      known, now.empty() ? "no id" : now);
  return now.empty() ? known : now;
}

// The munge key: the installed one when it has the id the controller publishes (no request at
// all), else one request to the controller's key server, retried on transient failures only.
Result<slurm::MungeKeyState> ObtainMungeKey(RoleEnv& env, const ControllerInfo& ctl, int vm_id,
                                            const slurm::BoxKeyPair& own,
                                            const RetryPolicy& policy) {
  auto installed = env.files.ReadIfExists(slurm::kMungeKeyPath);
  if (!installed) return Fail(installed.error());
  if (installed->has_value() && slurm::MungeKeyId(**installed) == ctl.munge_key_id) {
    return slurm::InstallMungeKey(env, **installed);
  }
  const std::string where = ctl.addr + ":" + std::to_string(slurm::kKeyServerPort);
  std::string why = installed->has_value() ? "the installed munge key is not the one whose id " +
                                                 ctl.munge_key_id + " the controller publishes"
                                           : "there is no munge key yet";
  std::string key;
  auto s = env.plan.Do(
      "fetch the munge key from the controller's key server at " + where,
      why + "; it comes boxed for this VM's public key", [&]() -> Status {
        if (env.exchange == nullptr) {
          return Fail(ErrorKind::kInternal, "no network adapter to reach the key server");
        }
        std::string key_id = ctl.munge_key_id;
        bool stale_id = false;  // the last box held a key of another id: a rotation under way
        auto got = Retry<std::string>(
            policy, env.clock, "fetching the munge key from " + where,
            [](const Error& e) { return e.kind == ErrorKind::kNetwork; },
            [&]() -> Result<std::string> {
              if (stale_id) key_id = PublishedKeyId(env, ctl, key_id);
              auto nonce = slurm::RandomBytes(slurm::kBoxNonceBytes);
              if (!nonce) return Fail(nonce.error());
              slurm::KeyRequest request{vm_id, *nonce};
              auto line = env.exchange->Exchange(ctl.addr, slurm::kKeyServerPort,
                                                 slurm::FormatKeyRequest(request), Duration(20000),
                                                 slurm::kMaxKeyLine);
              if (!line) return Fail(line.error());
              auto opened =
                  slurm::OpenKeyAnswer(*line, request, own, ctl.key_server_public_key, key_id);
              stale_id = !opened && opened.error().kind == ErrorKind::kNetwork &&
                         line->rfind(std::string(slurm::kKeyProtocol) + " OK ", 0) == 0;
              return opened;
            });
        if (!got) return Fail(got.error().WithContext("cannot get the munge key from " + where));
        key = std::move(*got);
        return Ok();
      });
  if (!s) return Fail(s.error());
  if (env.plan.dry_run()) return slurm::MungeKeyState{"", true};
  return slurm::InstallMungeKey(env, key);
}

// The controller's VM id this worker found last (kControllerVmIdFile), -1 when none or
// unreadable (then the role is read).
int KnownControllerVmId(const Files& files) {
  auto text = files.ReadIfExists(slurm::kControllerVmIdFile);
  if (!text || !text->has_value()) return -1;
  std::string id = **text;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return AllDigits(id) ? std::stoi(id) : -1;
}

// Two VMs under one name would share one Slurm node: jobs sent to the wrong VM, and one VM's
// shutdown removing the other's node. One extended read of the service.
Status CheckNameIsFree(OneGateClient& onegate, const std::string& name, int own_vm_id) {
  auto service = onegate.GetService(/*extended=*/true);
  if (!service) {
    return Fail(service.error().WithContext("reading which names the service's VMs publish"));
  }
  for (const auto& role : service->roles) {
    for (const auto& node : role.nodes) {
      if (node.vm_id == own_vm_id || !node.vm || node.vm->Attr(slurm::kAttrNodeName) != name) {
        continue;
      }
      return Fail(ErrorKind::kInvalidInput,
                  "the Slurm node name " + name + " is already published by VM " +
                      std::to_string(node.vm_id) +
                      " of this service: every worker needs its own name (leave SET_HOSTNAME "
                      "empty on a role with several VMs: each is then named after its VM id)");
    }
  }
  return Ok();
}

// The ready controller (DiscoverController, from the VM found last when it still is one), the
// node name checked free, the controller's VM id remembered for the next pass.
Result<ControllerInfo> FindController(RoleEnv& env, const JoinSetup& setup, int vm_id) {
  // In a dry run one look is enough: `one-hpc plan` must not wait for minutes.
  // A follow tick looks once too: the next tick looks again.
  RetryPolicy policy =
      env.plan.dry_run() || setup.once
          ? RetryPolicy::Once()
          : RetryPolicy::Until(setup.timeout, Duration(1000), Duration(15000), 0.3);
  Discovery discovery;
  discovery.controller_role = setup.controller_role;
  discovery.known_vm_id = KnownControllerVmId(env.files);
  // A first join: the VM the service template named (OneFlow resolved `${controller.vm.id}`
  // when it created this VM), read alone; the role's list only when it is not a controller.
  if (discovery.known_vm_id < 0 && env.settings.IsSet(kControllerVmIdSetting)) {
    discovery.known_vm_id = static_cast<int>(env.settings.GetInt(kControllerVmIdSetting));
  }
  auto ctl = DiscoverController(*env.onegate, discovery, policy, env.clock);
  if (!ctl) {
    return Fail(ctl.error().WithContext("cannot find a ready Slurm controller through OneGate"));
  }
  log::Info("worker: controller {} at {} (VM {})", ctl->host, ctl->addr, ctl->vm_id);
  // A name of the operator's (SET_HOSTNAME) may be taken by another VM of the role; a name
  // after this VM's id cannot be (WorkerNodeName). Checked when the node joins, not at every
  // follow pass: it is the one read of every VM of the service.
  if (!setup.once && !env.Var("SET_HOSTNAME").empty()) {
    if (auto s = CheckNameIsFree(*env.onegate, setup.node_name, vm_id); !s) return Fail(s.error());
  }
  if (auto s =
          EnsureFile(env, slurm::kControllerVmIdFile, std::to_string(ctl->vm_id) + "\n", 0644,
                     std::nullopt, "the controller's VM id: the next pass reads that VM alone");
      !s) {
    return Fail(s.error());
  }
  return ctl;
}

// Before slurmd registers: the reconciler acts only on names nobody publishes. Before the key
// request: the key server boxes the key for the public key this VM publishes.
Status PublishNodeName(RoleEnv& env, const ControllerInfo& ctl, const std::string& name,
                       const std::string& public_key) {
  std::vector<std::pair<std::string, std::string>> own_attrs;
  if (ctl.own_published_name != name) own_attrs.emplace_back(slurm::kAttrNodeName, name);
  if (ctl.own_published_key != public_key) {
    own_attrs.emplace_back(slurm::kAttrWorkerPublicKey, public_key);
  }
  const std::string published =
      std::string(slurm::kAttrNodeName) + "=" + name + " and " + slurm::kAttrWorkerPublicKey;
  if (own_attrs.empty()) {
    env.plan.Keep("published " + published, "OneGate already has them");
    return Ok();
  }
  return env.plan.Do("publish " + published + " in OneGate",
                     "before slurmd registers, so that the controller's reconciler never takes "
                     "this node for one whose VM is gone, and before the key request",
                     [&] { return env.onegate->UpdateVm(own_attrs); });
}

struct SlurmdFiles {
  bool unit_changed = false;
  bool gres_changed = false;
};

// slurmd's unit (a dynamic node of the controller with this VM's CPUs, memory and GPUs) and
// the node's gres.conf, which the fetched gres.conf includes: slurmd cannot start without it.
Result<SlurmdFiles> WriteSlurmdFiles(RoleEnv& env, const JoinSetup& setup,
                                     const ControllerInfo& ctl) {
  slurm::SlurmdUnitParams unit;
  unit.node_name = setup.node_name;
  unit.controller_addr = ctl.addr;
  unit.requires_mounts = setup.requires_mounts;
  auto cpus = host::CountCpus(env.files);
  if (!cpus) return Fail(cpus.error());
  auto mem = host::MemTotalMb(env.files);
  if (!mem) return Fail(mem.error());
  unit.cpus = *cpus;
  unit.real_memory_mb = host::RealMemoryMb(*mem);
  const host::GpuInventory gpus = host::DetectGpus(env.files, env.runner);
  unit.gres = slurm::NodeGres(gpus);
  log::Info("worker: advertising {} (MemTotal {} MiB, {} MiB kept for the OS)",
            slurm::SlurmdNodeConf(unit), *mem, host::OsMemoryReserveMb(*mem));
  auto written =
      EnsureFile(env, slurm::kSlurmdUnitPath, slurm::RenderSlurmdUnit(unit), 0644, std::nullopt,
                 "slurmd as dynamic node " + setup.node_name + " of " + ctl.addr + " (" +
                     slurm::SlurmdNodeConf(unit) + ")");
  if (!written) return Fail(written.error());
  auto gres_written =
      EnsureFile(env, slurm::kGresNodeConfPath, slurm::RenderNodeGresConf(gpus), 0644, std::nullopt,
                 "this node's GPUs for Slurm (" + gpus.why + ")");
  if (!gres_written) return Fail(gres_written.error());
  return SlurmdFiles{*written, *gres_written};
}

// Why slurmd must restart, or "" when it need not.
std::string SlurmdRestartWhy(RoleEnv& env, slurm::SlurmClient& client, const ControllerInfo& ctl,
                             const std::string& name, const SlurmdFiles& files, bool key_changed) {
  if (files.unit_changed) return "slurmd.service changed";
  if (files.gres_changed) {
    return std::string(slurm::kGresNodeConfPath) + " changed (slurmd reads it at start)";
  }
  if (key_changed) return "the munge key changed";
  if (!env.files.Exists(slurm::kConfiglessSlurmConf)) return "";
  // A configless slurmd keeps the slurm.conf it fetched at start; after the controller's
  // changed, only a restart fetches the new one. On 22.05 that is the safe way for dynamic
  // nodes: running jobs go on (their slurmstepd are not slurmd's children) and the node
  // re-registers under its name, whereas `scontrol reconfigure` leaves busy dynamic nodes
  // stuck ALLOCATED (tests/integration/slurm_real_test.cc).
  auto cached = env.files.Read(slurm::kConfiglessSlurmConf);
  const std::string cached_id = cached ? slurm::SlurmConfId(*cached) : "";
  // A slurmd whose node was deleted (or rejected by a full table) never
  // registers again by itself; only a restart makes it try.
  auto active = env.systemd.IsActive(slurm::kSlurmdUnit);
  if (!active || !*active) return "";
  if (!ctl.slurm_conf_id.empty() && cached && cached_id != ctl.slurm_conf_id) {
    return "the controller's slurm.conf changed (" + std::string(slurm::kAttrSlurmConfId) + " " +
           ctl.slurm_conf_id + ", this node's copy " + cached_id +
           "): a slurmd restart fetches it; running jobs go on";
  }
  auto shown = client.ShowNode(name);
  if (shown && !shown->has_value()) {
    return "slurmd runs but node " + name +
           " is not registered (deleted while slurmd kept running, or rejected "
           "by a full node table); only a restart registers it again";
  }
  return "";
}

// slurmd started (or restarted when it must), and the node registered with the controller.
Status StartSlurmd(RoleEnv& env, const JoinSetup& setup, const ControllerInfo& ctl,
                   const std::string& own_ip, const SlurmdFiles& files, bool key_changed) {
  if (auto s = DaemonReloadIf(env, files.unit_changed, "slurmd.service changed"); !s) return s;
  if (auto s = EnsureUnitEnabled(env, slurm::kSlurmdUnit, "multi-user.target",
                                 "the node rejoins after a reboot");
      !s) {
    return s;
  }
  slurm::SlurmClientOptions client_options;
  client_options.slurm_conf = env.files.HostPath(slurm::kConfiglessSlurmConf);
  slurm::SlurmClient client(env.runner, client_options);
  const std::string restart_why =
      SlurmdRestartWhy(env, client, ctl, setup.node_name, files, key_changed);
  if (auto s = EnsureUnitRunning(env, slurm::kSlurmdUnit, !restart_why.empty(), restart_why,
                                 "slurmd joins the cluster");
      !s) {
    return s;
  }
  if (env.plan.dry_run()) return Ok();
  slurm::RegistrationCheck check;
  check.node_name = setup.node_name;
  check.controller_addr = ctl.addr;
  check.timeout = setup.timeout;
  auto node = slurm::WaitForRegistration(env.files, client, env.clock, check);
  if (!node) return Fail(node.error());
  log::Info("worker: node {} registered (State={}, NodeAddr={})", node->name, node->state,
            node->addr);
  return FixRegisteredNode(env, client, *node, own_ip);
}

}  // namespace

Result<ControllerInfo> JoinSlurmCluster(RoleEnv& env, const JoinSetup& setup) {
  if (env.onegate == nullptr) {
    return Fail(ErrorKind::kInvalidInput,
                "a worker finds its controller through OneGate: set TOKEN=YES in CONTEXT");
  }
  std::string vmid = env.Var("VMID");
  if (!AllDigits(vmid)) {
    return Fail(ErrorKind::kInvalidInput, "VMID='" + vmid + "' is not a VM id");
  }
  const std::string& name = setup.node_name;

  auto ctl = FindController(env, setup, std::stoi(vmid));
  if (!ctl) return Fail(ctl.error());
  auto own = host::SelectWorkerAddress(ctl->addr, ctl->nics, ctl->own_nics, env.context.vars);
  if (!own) return Fail(own.error());
  log::Info("worker: node {} on address {} ({})", name, own->ip, own->how);

  if (auto s = host::EnsureHostname(env, name, "the Slurm node name is the host name"); !s) {
    return Fail(s.error());
  }
  if (auto s =
          host::EnsureHostsBlock(env, {{own->ip, name}, {ctl->addr, ctl->host}},
                                 "this node and the controller resolve to their service addresses");
      !s) {
    return Fail(s.error());
  }

  if (setup.before_slurmd) {
    if (auto s = setup.before_slurmd(*ctl); !s) return Fail(s.error());
  }

  auto box = slurm::EnsureBoxKeyPair(env, slurm::kWorkerBoxKeyPath,
                                     "the controller boxes the munge key for this VM's public key");
  if (!box) return Fail(box.error());
  if (auto s = PublishNodeName(env, *ctl, name, Base64Encode(box->public_key)); !s) {
    return Fail(s.error());
  }

  // The key server answers at once once the controller is ready: short first delays.
  RetryPolicy key_policy =
      setup.once ? RetryPolicy::Once()
                 : RetryPolicy::Until(setup.timeout, Duration(500), Duration(5000), 0.3);
  auto key = ObtainMungeKey(env, *ctl, std::stoi(vmid), *box, key_policy);
  if (!key) return Fail(key.error());
  if (auto s = slurm::EnsureMungeRunning(env, key->changed); !s) return Fail(s.error());

  auto files = WriteSlurmdFiles(env, setup, *ctl);
  if (!files) return Fail(files.error());
  if (auto s = StartSlurmd(env, setup, *ctl, own->ip, *files, key->changed); !s) {
    return Fail(s.error());
  }

  if (auto s = EnsureUnitEnabled(env, slurm::kSelfDrainUnit, "multi-user.target",
                                 "removes the node from Slurm when the VM shuts down");
      !s) {
    return Fail(s.error());
  }
  if (auto s = EnsureUnitRunning(env, slurm::kSelfDrainUnit, false, "",
                                 "arms the shutdown hook (its ExecStop runs at shutdown)");
      !s) {
    return Fail(s.error());
  }
  return *ctl;
}

SettingSpec ControllerVmIdSetting() {
  SettingSpec spec;
  spec.name = kControllerVmIdSetting;
  spec.type = SettingType::kInt;
  spec.description =
      "VM id of the Slurm controller (the portal in Open OnDemand), wiring set by the service "
      "template (`${controller.vm.id}`, resolved by OneFlow when it creates the worker): the "
      "first join reads that one VM instead of the role's list of VMs; empty, or a VM that is "
      "not a ready controller, means the list.";
  spec.roles = {slurm::kWorkerRole, ood::kWorkerRole};
  spec.min = 0;
  spec.max = 2147483647;
  spec.expected = "a VM id (an integer from 0)";
  return spec;
}

Result<std::string> WorkerNodeName(const ContextVars& vars, const std::string& prefix) {
  auto vmid = vars.find("VMID");
  const std::string own_id = vmid == vars.end() ? "" : vmid->second;
  auto it = vars.find("SET_HOSTNAME");
  if (it != vars.end() && !it->second.empty()) {
    auto name = host::ShortNameFromSetHostname(it->second);
    if (!name) return name;
    // <prefix><VM id> names that VM's node: no other VM may take it, so that a name of that
    // form is unique without reading every VM of the service (CheckNameIsFree).
    if (name->rfind(prefix, 0) == 0 && AllDigits(name->substr(prefix.size())) &&
        name->substr(prefix.size()) != own_id) {
      return Fail(ErrorKind::kInvalidInput,
                  "SET_HOSTNAME='" + it->second + "' gives the Slurm node name " + *name +
                      ", the name of VM " + name->substr(prefix.size()) + "'s node (" + prefix +
                      "<VM id>); expected another name, or SET_HOSTNAME "
                      "empty (this VM is then named " +
                      prefix + own_id + ")");
    }
    // slurm.conf's placeholder records hold these names (State=FUTURE, never a real node).
    if (name->starts_with(slurm::kPlaceholderPrefix)) {
      return Fail(ErrorKind::kInvalidInput,
                  "SET_HOSTNAME='" + it->second + "' gives the Slurm node name " + *name +
                      ", and names starting with " + slurm::kPlaceholderPrefix +
                      " are slurm.conf's placeholder records; expected another name, or "
                      "SET_HOSTNAME empty (this VM is then named " +
                      prefix + own_id + ")");
    }
    return name;
  }
  if (!AllDigits(own_id)) {
    return Fail(ErrorKind::kInvalidInput, "VMID is missing or not a VM id (set TOKEN=YES)");
  }
  return prefix + own_id;
}

Result<ControllerInfo> ControllerFromVm(const VmInfo& vm, const std::string& controller_role) {
  const std::string id = std::to_string(vm.id);
  // A controller powered off, stopped or gone may still show READY=YES: never join it.
  if (vm.state != kVmStateActive) {
    return Fail(ErrorKind::kNotFound, id + " (not ACTIVE: state " + std::to_string(vm.state) + ")");
  }
  std::vector<std::string> missing;
  if (vm.Attr(slurm::kAttrReady) != "YES") missing.push_back("READY=YES");
  for (const char* attr : {slurm::kAttrControllerAddr, slurm::kAttrControllerHost,
                           slurm::kAttrKeyServerPublicKey, slurm::kAttrMungeKeyId}) {
    if (vm.Attr(attr).empty()) missing.push_back(attr);
  }
  if (!missing.empty()) return Fail(ErrorKind::kNotFound, id + " (missing " + Join(missing) + ")");
  const std::string where = " published by " + controller_role + " VM " + id;
  auto server_key = slurm::DecodePublicKey(vm.Attr(slurm::kAttrKeyServerPublicKey),
                                           slurm::kAttrKeyServerPublicKey);
  if (!server_key) {
    return Fail(server_key.error().WithContext("published by " + controller_role + " VM " + id));
  }
  auto key_id = PublishedHexId(vm, slurm::kAttrMungeKeyId, false, where);
  if (!key_id) return Fail(key_id.error());
  auto conf_id = PublishedHexId(vm, slurm::kAttrSlurmConfId, true, where);
  if (!conf_id) return Fail(conf_id.error());
  std::string addr = vm.Attr(slurm::kAttrControllerAddr);
  if (!host::ParseIpv4(addr)) {
    return Fail(ErrorKind::kInvalidInput, std::string(slurm::kAttrControllerAddr) + "='" + addr +
                                              "'" + where + " is not an IPv4 address");
  }
  std::string host = vm.Attr(slurm::kAttrControllerHost);
  if (!host::IsValidHostLabel(host)) {
    return Fail(ErrorKind::kInvalidInput, std::string(slurm::kAttrControllerHost) + "='" + host +
                                              "'" + where + " is not a host name");
  }
  ControllerInfo info;
  info.vm_id = vm.id;
  info.addr = addr;
  info.host = host;
  info.key_server_public_key = std::move(*server_key);
  info.munge_key_id = *key_id;
  info.slurm_conf_id = *conf_id;
  info.nics = vm.nics;
  info.published = vm.user_template;
  return info;
}

std::string OneGateRefusal(long status) {
  switch (status) {
    case 400:
      return "OneGate does not count this VM as a member of a OneFlow service (removed from "
             "it, or not started by OneFlow); a worker joins only the service it belongs to";
    case 401:
      return "OneGate does not accept this VM's token (TOKEN=YES in CONTEXT; a VM re-created "
             "from a copied CONTEXT has a stale one)";
    case 403:
      return "the OneGate server forbids this request (its permissions in "
             "onegate-server.conf)";
    case 404:
      return "OneGate knows no such service or VM (the service was deleted)";
    default:
      return "";
  }
}

namespace {

// OneGate refusing this VM (OneGateRefusal): a permanent failure, kInvalidInput saying why.
Error Refused(OneGateClient& onegate, const Error& error, bool& permanent) {
  std::string why = OneGateRefusal(onegate.last_failure().status);
  if (why.empty()) return error;
  permanent = true;
  return Error{ErrorKind::kInvalidInput, error.message + ": " + why};
}

// The VM behind `vm_id` if OneGate shows it as a ready controller of the role; nullopt when it
// is not one (any more): another role, not ready, gone from the service (OneGate answers
// 400/404 for it). Other failures are errors: transient ones are waited out by the caller's
// retry, OneGate refusing this VM (401 past the boot window, 403) is permanent (Refused).
Result<std::optional<ControllerInfo>> ControllerAt(OneGateClient& onegate, int vm_id,
                                                   const std::string& controller_role,
                                                   std::string& why_not, bool& permanent) {
  auto vm = onegate.GetVmById(vm_id);
  if (!vm) {
    const long status = onegate.last_failure().status;
    if (status != 400 && status != 404) return Fail(Refused(onegate, vm.error(), permanent));
    why_not = std::to_string(vm_id) + " (not in the service: HTTP " + std::to_string(status) + ")";
    return std::optional<ControllerInfo>{};
  }
  if (vm->Attr("ROLE_NAME") != controller_role) {
    why_not = std::to_string(vm_id) + " (ROLE_NAME '" + vm->Attr("ROLE_NAME") + "')";
    return std::optional<ControllerInfo>{};
  }
  auto ctl = ControllerFromVm(*vm, controller_role);
  if (!ctl) {
    if (ctl.error().kind != ErrorKind::kNotFound) return Fail(ctl.error());
    why_not = ctl.error().message;
    return std::optional<ControllerInfo>{};
  }
  return std::optional<ControllerInfo>{std::move(*ctl)};
}

// The controller among the VMs of its role, oldest first: the compact service document names
// them (a few bytes per VM of the service), then each is read alone until one is ready.
Result<ControllerInfo> ControllerOfRole(OneGateClient& onegate, const std::string& controller_role,
                                        bool& permanent) {
  auto service = onegate.GetService(/*extended=*/false);
  if (!service) return Fail(Refused(onegate, service.error(), permanent));
  const ServiceRole* role = service->FindRole(controller_role);
  if (role == nullptr) {
    std::vector<std::string> names;
    for (const auto& r : service->roles) names.push_back("'" + r.name + "'");
    return Fail(ErrorKind::kNotFound, "service '" + service->name + "' has no role named '" +
                                          controller_role + "' (roles: " + Join(names) + ")");
  }
  std::vector<std::string> waiting;
  for (const auto& node : role->nodes) {
    std::string why_not;
    auto ctl = ControllerAt(onegate, node.vm_id, controller_role, why_not, permanent);
    if (!ctl) return Fail(ctl.error());
    if (ctl->has_value()) return std::move(**ctl);
    waiting.push_back(why_not);
  }
  return Fail(ErrorKind::kNotFound,
              "the controller is not ready yet: " +
                  (role->nodes.empty() ? "role '" + controller_role + "' has no VM"
                                       : "VM " + Join(waiting)));
}

}  // namespace

Result<ControllerInfo> DiscoverController(OneGateClient& onegate, const Discovery& discovery,
                                          const RetryPolicy& policy, Clock& clock) {
  // A transient view or outage is waited for until the deadline; OneGate refusing this VM
  // (400, 401 after the client's boot window, 403, 404) fails at once: waiting cannot help.
  bool permanent = false;
  return Retry<ControllerInfo>(
      policy, clock, "discovering the Slurm controller", [&](const Error&) { return !permanent; },
      [&]() -> Result<ControllerInfo> {
        permanent = false;
        std::optional<ControllerInfo> found;
        if (discovery.known_vm_id >= 0) {
          std::string why_not;
          auto known = ControllerAt(onegate, discovery.known_vm_id, discovery.controller_role,
                                    why_not, permanent);
          if (!known) return Fail(known.error());
          if (known->has_value()) {
            found = std::move(**known);
          } else {
            log::Info("worker: the controller this VM knew is not one now: VM {}", why_not);
          }
        }
        if (!found) {
          auto ctl = ControllerOfRole(onegate, discovery.controller_role, permanent);
          if (!ctl) return Fail(ctl.error());
          found = std::move(*ctl);
        }
        auto own = onegate.GetVm();
        if (!own) return Fail(Refused(onegate, own.error(), permanent));
        found->own_nics = own->nics;
        found->own_published_name = own->Attr(slurm::kAttrNodeName);
        found->own_published_key = own->Attr(slurm::kAttrWorkerPublicKey);
        return std::move(*found);
      });
}

}  // namespace onehpc
