#include "roles/slurm/controller_setup.h"

#include <set>
#include <sstream>

#include "common/base64.h"
#include "common/log.h"
#include "common/retry.h"
#include "roles/ensure.h"
#include "roles/host/address.h"
#include "roles/host/hostname.h"
#include "roles/names.h"
#include "roles/slurm/accounting.h"
#include "roles/slurm/elastic_settings.h"
#include "roles/slurm/gres.h"
#include "roles/slurm/key_delivery.h"
#include "roles/slurm/munge.h"
#include "roles/slurm/slurm_client.h"
#include "roles/slurm/slurm_conf.h"

namespace onehpc {
namespace {

using slurm::NodeChange;

constexpr Duration kSlurmctldStartTimeout{90000};
constexpr char kSlurmctldDropIn[] = "/etc/systemd/system/slurmctld.service.d/one-hpc.conf";

// "MaxNodeCount=100 -> MaxNodeCount=3" style summary of the lines that differ.
std::string DescribeChange(const std::string& old_text, const std::string& new_text) {
  auto lines = [](const std::string& text) {
    std::set<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line[0] != '#') out.insert(line);
    }
    return out;
  };
  auto before = lines(old_text);
  auto after = lines(new_text);
  std::string removed, added;
  for (const auto& l : before) {
    if (!after.count(l)) removed += (removed.empty() ? "" : ", ") + l;
  }
  for (const auto& l : after) {
    if (!before.count(l)) added += (added.empty() ? "" : ", ") + l;
  }
  if (removed.empty() && added.empty()) return "only comments differ";
  std::string out;
  if (!removed.empty()) out += "was: " + removed;
  if (!added.empty()) out += std::string(out.empty() ? "" : "; ") + "now: " + added;
  if (out.size() > 300) out = out.substr(0, 300) + "...";
  return out;
}

// Writes a file through EnsureFile and says whether its content changes.
Result<bool> EnsureConfigFile(RoleEnv& env, const std::string& path, const std::string& content,
                              const std::string& why) {
  auto current = env.files.ReadIfExists(path);
  if (!current) return Fail(current.error());
  bool changed = !current->has_value() || **current != content;
  std::string reason = why;
  if (current->has_value() && changed) reason += " (" + DescribeChange(**current, content) + ")";
  if (!current->has_value()) reason += " (new file)";
  auto s = EnsureFile(env, path, content, 0644, std::nullopt, reason);
  if (!s) return Fail(s.error());
  return changed && current->has_value();  // a first write needs a start, not a restart
}

Status WaitForSlurmctld(RoleEnv& env, const std::string& host) {
  slurm::SlurmClient client(env.runner, {});
  RetryPolicy policy = RetryPolicy::Until(kSlurmctldStartTimeout, Duration(250));
  auto up = Retry<bool>(
      policy, env.clock, "waiting for slurmctld to answer scontrol ping",
      [](const Error&) { return true; },
      [&]() -> Result<bool> {
        auto ping = client.Ping();
        if (!ping) return Fail(ping.error());
        if (!*ping) {
          return Fail(ErrorKind::kProcess, "slurmctld on " + host + " does not answer yet");
        }
        return true;
      });
  if (!up) {
    // The daemon's own words (a refused address, a bad state file, munge down) name the cause.
    const std::string tail = env.systemd.RecentLog(slurm::kSlurmctldUnit, 3);
    return Fail(up.error().WithContext(
        "slurmctld did not start" +
        (tail.empty() ? std::string() : " (its last log lines: " + tail + ")") +
        "; see journalctl -u slurmctld"));
  }
  env.plan.Keep("check: scontrol ping", "slurmctld on " + host + " is UP");
  return Ok();
}

// The image may have the packaged slurmd enabled: with our slurm.conf present it would start
// on the controller and fail (the controller is not a node).
Status DisablePackagedSlurmd(RoleEnv& env) {
  const std::string link =
      "/etc/systemd/system/multi-user.target.wants/" + std::string(slurm::kSlurmdUnit);
  if (!env.files.Exists(link)) return Ok();
  return env.plan.Do("disable " + std::string(slurm::kSlurmdUnit),
                     "the controller is not a Slurm node; the packaged slurmd would start with "
                     "the controller's slurm.conf and fail",
                     [&] { return env.systemd.Disable(slurm::kSlurmdUnit); });
}

// Slurm's lua plugin as Debian installs it (/usr/lib/<multiarch>/slurm-wlm/): slurmctld
// cannot start with JobSubmitPlugins=lua and no plugin.
bool HasJobSubmitLuaPlugin(const Files& files) {
  auto dirs = files.List("/usr/lib");
  if (!dirs) return false;
  for (const auto& d : *dirs) {
    if (files.Exists("/usr/lib/" + d + "/slurm-wlm/job_submit_lua.so")) return true;
  }
  return files.Exists("/usr/lib/slurm-wlm/job_submit_lua.so");
}

// job_submit.lua, before slurm.conf names it (slurmctld cannot start without the script).
// True when one-hpc's script is in place; false when the file is the site's own (it does not
// start with one-hpc's first line: kept as it is, and slurm.conf does not load it, as before)
// or Slurm has no lua plugin here.
Result<bool> EnsureJobSubmitLua(RoleEnv& env) {
  if (!HasJobSubmitLuaPlugin(env.files)) {
    log::Warn(
        "controller: no job_submit_lua.so under /usr/lib/*/slurm-wlm: slurm.conf loads no "
        "job_submit.lua; in elastic mode a new job waits for the next 60 s cycle");
    return false;
  }
  auto current = env.files.ReadIfExists(slurm::kJobSubmitLuaPath);
  if (!current) return Fail(current.error());
  if (current->has_value() && !(*current)->starts_with(slurm::kJobSubmitLuaFirstLine)) {
    log::Warn(
        "controller: {} is not one-hpc's (its first line is not \"{}\"): kept, and slurm.conf "
        "does not load it; in elastic mode a new job waits for the next 60 s cycle",
        slurm::kJobSubmitLuaPath, slurm::kJobSubmitLuaFirstLine);
    return false;
  }
  auto s = EnsureFile(env, slurm::kJobSubmitLuaPath,
                      slurm::RenderJobSubmitLua(slurm::kElasticKickFile), 0644, std::nullopt,
                      "in elastic mode a submitted job starts an elastic cycle at once");
  if (!s) return Fail(s.error());
  return true;
}

// The accounting database's dumps directory and the database itself, before slurmctld
// (re)starts with slurmdbd in its slurm.conf.
Status PrepareAccounting(RoleEnv& env, const std::string& dumps) {
  if (auto s = EnsureDirectory(env, dumps, 0700, FileOwner{"root", "root"},
                               "dumps of the accounting database");
      !s) {
    return s;
  }
  return slurm::SetUpAccounting(env, dumps);
}

struct SlurmConfig {
  std::string slurm_conf;  ///< slurm.conf's text (its id is published)
  bool changed = false;    ///< slurmctld must restart to read it
};

// slurm.conf, cgroup.conf, gres.conf and the node file it includes (the controller has no
// GPU); job_submit.lua before slurm.conf names it.
Result<SlurmConfig> WriteSlurmConfig(RoleEnv& env, const ControllerSetup& setup, bool accounting) {
  auto cgroups = slurm::DetectCgroups(env.files);
  log::Info("controller: {} ({})",
            cgroups.use_cgroup ? "proctrack/cgroup + task/cgroup,task/affinity"
                               : "proctrack/linuxproc + task/none",
            cgroups.why);
  slurm::SlurmConfParams params;
  params.controller_host = setup.host;
  params.controller_addr = setup.addr;
  params.max_nodes = setup.max_nodes;
  params.cluster_name = setup.cluster_name;
  params.state_save_location = setup.state_save_location;
  params.accounting = accounting;
  params.use_cgroup = cgroups.use_cgroup;
  auto lua = EnsureJobSubmitLua(env);
  if (!lua) return Fail(lua.error());
  params.job_submit_lua = *lua;
  SlurmConfig config{slurm::RenderSlurmConf(params)};
  // A controller configured by a one-hpc without gres.conf (an upgrade) must restart to serve it.
  const bool gres_added =
      env.files.Exists(slurm::kSlurmConfPath) && !env.files.Exists(slurm::kGresConfPath);
  auto conf_changed = EnsureConfigFile(
      env, slurm::kSlurmConfPath, config.slurm_conf,
      "configless cluster of up to " + std::to_string(params.max_nodes) + " dynamic nodes");
  if (!conf_changed) return Fail(conf_changed.error());
  auto cgroup_changed = EnsureConfigFile(env, slurm::kCgroupConfPath,
                                         slurm::RenderCgroupConf(cgroups.use_cgroup), cgroups.why);
  if (!cgroup_changed) return Fail(cgroup_changed.error());
  // The node file first: slurmctld parses the Include too and cannot start without it.
  host::GpuInventory no_gpus;
  no_gpus.why = "The controller is not a Slurm node: no GPU.";
  if (auto s = EnsureFile(env, slurm::kGresNodeConfPath, slurm::RenderNodeGresConf(no_gpus), 0644,
                          std::nullopt, "gres.conf includes it on every host");
      !s) {
    return Fail(s.error());
  }
  auto gres_changed =
      EnsureConfigFile(env, slurm::kGresConfPath, slurm::RenderGresConf(),
                       "each dynamic node describes its own GPUs in " +
                           std::string(slurm::kGresNodeConfPath) + " (AutoDetect=off)");
  if (!gres_changed) return Fail(gres_changed.error());
  config.changed = *conf_changed || *cgroup_changed || *gres_changed || gres_added;
  return config;
}

// With the state on a network file system, slurmctld never starts (and writes a fresh, empty
// state) while that file system is not mounted.
Status EnsureStateMountDropIn(RoleEnv& env, const std::vector<std::string>& requires_mounts) {
  if (requires_mounts.empty()) return Ok();
  std::string text =
      "# Written by one-hpc: slurmctld's state is on a network file system; it must never\n"
      "# start (and write a fresh, empty state) while that file system is not mounted.\n"
      "[Unit]\n";
  for (const auto& m : requires_mounts) text += "RequiresMountsFor=" + m + "\n";
  auto written = EnsureFile(env, kSlurmctldDropIn, text, 0644, std::nullopt,
                            "slurmctld waits for its state export");
  if (!written) return Fail(written.error());
  return DaemonReloadIf(env, *written, "a slurmctld drop-in changed");
}

// slurmctld enabled, running (restarted when its configuration or the munge key changed) and
// answering.
Status StartSlurmctld(RoleEnv& env, const std::string& host, bool config_changed,
                      bool key_changed) {
  if (auto s = EnsureUnitEnabled(env, slurm::kSlurmctldUnit, "multi-user.target",
                                 "slurmctld must come back after a reboot");
      !s) {
    return s;
  }
  std::string restart_why;
  if (config_changed) {
    restart_why =
        "the Slurm configuration changed: a restart keeps the saved state and the "
        "registered nodes (scontrol reconfigure is avoided: it leaves busy dynamic "
        "nodes stuck ALLOCATED on 22.05)";
  } else if (key_changed) {
    restart_why = "the munge key changed";
  }
  if (auto s = EnsureUnitRunning(env, slurm::kSlurmctldUnit, !restart_why.empty(), restart_why,
                                 "the Slurm controller daemon");
      !s) {
    return s;
  }
  if (env.plan.dry_run()) return Ok();
  return WaitForSlurmctld(env, host);
}

Status EnsureReconcileTimer(RoleEnv& env) {
  if (auto s = EnsureUnitEnabled(env, slurm::kReconcileTimer, "timers.target",
                                 "removes Slurm nodes whose worker VM is gone");
      !s) {
    return s;
  }
  return EnsureUnitRunning(env, slurm::kReconcileTimer, false, "",
                           "runs one-hpc reconcile every 60 s");
}

}  // namespace

Result<ControllerKeys> SetUpSlurmController(RoleEnv& env, const ControllerSetup& setup) {
  // Bad elastic limits stop the configure before it changes anything.
  if (env.settings.GetBool(kElasticSetting)) {
    if (auto limits = ElasticLimits(env.settings); !limits) return Fail(limits.error());
  }
  if (auto s = host::EnsureHostname(env, setup.host,
                                    "SlurmctldHost must equal the controller's short host name");
      !s) {
    return Fail(s.error());
  }
  if (auto s = host::EnsureHostsBlock(env, {{setup.addr, setup.host}},
                                      "the controller name resolves to its service address");
      !s) {
    return Fail(s.error());
  }

  auto key = setup.shared_munge_key.empty()
                 ? slurm::EnsureControllerMungeKey(env)
                 : slurm::EnsureSharedMungeKey(env, setup.shared_munge_key);
  if (!key) return Fail(key.error());
  if (auto s = slurm::EnsureMungeRunning(env, key->changed); !s) return Fail(s.error());
  const bool accounting = !setup.accounting_dumps.empty();
  if (accounting) {
    if (auto s = PrepareAccounting(env, setup.accounting_dumps); !s) return Fail(s.error());
  }
  if (auto s = DisablePackagedSlurmd(env); !s) return Fail(s.error());
  if (auto s = EnsureDirectory(env, setup.state_save_location, 0700, FileOwner{"slurm", "slurm"},
                               "slurmctld saves its state (registered nodes, jobs) there");
      !s) {
    return Fail(s.error());
  }

  auto config = WriteSlurmConfig(env, setup, accounting);
  if (!config) return Fail(config.error());
  if (auto s = EnsureStateMountDropIn(env, setup.requires_mounts); !s) return Fail(s.error());
  if (auto s = StartSlurmctld(env, setup.host, config->changed, key->changed); !s) {
    return Fail(s.error());
  }
  if (accounting) {
    if (auto s = slurm::EnsureClusterRegistered(env, setup.cluster_name); !s) {
      return Fail(s.error());
    }
    if (auto s = slurm::EnsureAccountingDumps(env); !s) return Fail(s.error());
  }
  if (auto s = EnsureReconcileTimer(env); !s) return Fail(s.error());
  if (auto s = EnsureElasticUnits(env); !s) return Fail(s.error());

  auto server = slurm::EnsureKeyServer(env, setup.addr);
  if (!server) return Fail(server.error());
  return ControllerKeys{*key, server->public_key, slurm::SlurmConfId(config->slurm_conf)};
}

Status PublishController(RoleEnv& env, const std::string& host, const std::string& addr,
                         const ControllerKeys& keys) {
  std::string what = "publish " + std::string(slurm::kAttrControllerAddr) + "=" + addr + ", " +
                     slurm::kAttrControllerHost + "=" + host + ", " +
                     slurm::kAttrKeyServerPublicKey + ", " + slurm::kAttrMungeKeyId + " and " +
                     slurm::kAttrSlurmConfId + " after a successful configure";
  std::vector<std::pair<std::string, std::string>> attrs;
  if (!keys.munge.key.empty() && !keys.server_public_key.empty()) {
    attrs = {{slurm::kAttrControllerAddr, addr},
             {slurm::kAttrControllerHost, host},
             {slurm::kAttrKeyServerPublicKey, Base64Encode(keys.server_public_key)},
             {slurm::kAttrMungeKeyId, slurm::MungeKeyId(keys.munge.key)}};
    if (!keys.slurm_conf_id.empty()) {
      attrs.emplace_back(slurm::kAttrSlurmConfId, keys.slurm_conf_id);
    }
  }
  bool same = false;
  bool legacy = false;
  if (env.onegate != nullptr) {
    auto vm = env.onegate->GetVm();
    if (vm) {
      same = !attrs.empty();
      for (const auto& [k, v] : attrs) same = same && vm->Attr(k) == v;
      legacy = !vm->Attr(slurm::kAttrLegacyMungeKey).empty();
    } else {
      log::Warn("controller: cannot read this VM from OneGate ({}); publishing anyway",
                vm.error().message);
    }
  }
  if (legacy) {
    log::Warn(
        "controller: an earlier one-hpc published the munge key in clear in this VM's "
        "OneGate attributes ({}); it is erased now, but whoever read it holds the key: "
        "rotate it (see one-hpc's docs/security.md)",
        slurm::kAttrLegacyMungeKey);
    auto s = env.plan.Do("erase " + std::string(slurm::kAttrLegacyMungeKey) + " from OneGate",
                         "the munge key never travels or rests in clear; workers fetch it boxed "
                         "from the key server",
                         [&] { return env.onegate->EraseVmAttribute(slurm::kAttrLegacyMungeKey); });
    if (!s) return s;
  }
  if (same) {
    env.plan.Keep(what, "OneGate already holds these values (sent again in the final update)");
  } else {
    auto s = env.plan.Do(what, "workers discover the controller and its key server through OneGate",
                         [] { return Ok(); });
    if (!s) return s;
  }
  if (env.publish == nullptr) {
    if (!env.plan.dry_run()) {
      log::Warn("controller: no publish list; the caller must publish the controller data");
    }
    return Ok();
  }
  for (auto& a : attrs) env.publish->push_back(a);
  return Ok();
}

Status RotateControllerMungeKey(RoleEnv& env, const std::string& host,
                                const std::string& shared_munge_key) {
  if (!env.files.Exists(slurm::kSlurmConfPath) || !env.files.Exists(slurm::kMungeKeyPath)) {
    return Fail(ErrorKind::kInvalidInput, "this VM runs no Slurm controller yet (no " +
                                              std::string(slurm::kSlurmConfPath) + " or " +
                                              slurm::kMungeKeyPath + "): configure it first");
  }
  if (env.onegate == nullptr) {
    return Fail(ErrorKind::kInvalidInput,
                "the workers learn of a new key through OneGate: set TOKEN=YES in CONTEXT");
  }
  auto key = slurm::WriteNewMungeKey(env, shared_munge_key);
  if (!key) return Fail(key.error());
  if (auto s = slurm::EnsureMungeRunning(env, true); !s) return s;
  if (auto s = EnsureUnitRunning(env, slurm::kSlurmctldUnit, true, "the munge key changed",
                                 "the Slurm controller daemon");
      !s) {
    return s;
  }
  if (!env.plan.dry_run()) {
    if (auto s = WaitForSlurmctld(env, host); !s) return s;
  }
  const std::string id = env.plan.dry_run() ? "<new>" : slurm::MungeKeyId(key->key);
  return env.plan.Do("publish " + std::string(slurm::kAttrMungeKeyId) + "=" + id,
                     "every worker's follow timer (30 s) fetches the new key from the key server",
                     [&] {
                       return env.onegate->UpdateVm({{slurm::kAttrMungeKeyId, id}});
                     });
}

SettingSpec MaxNodesSetting(const std::string& role) {
  SettingSpec max_nodes;
  max_nodes.name = kMaxNodesSetting;
  max_nodes.type = SettingType::kInt;
  max_nodes.default_value = "100";
  max_nodes.description =
      "Most Slurm nodes (workers) slurmctld accepts on the controller or the portal; "
      "slurm.conf's MaxNodeCount is twice that, half of it placeholders that let a job wait "
      "for workers not joined yet. A change restarts slurmctld and keeps the registered nodes.";
  max_nodes.roles = {role};
  max_nodes.min = 1;
  max_nodes.max = 65000;
  max_nodes.expected = "an integer from 1 to 65000";
  return max_nodes;
}

}  // namespace onehpc
