#include "cli/commands.h"

#include <algorithm>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "common/log.h"
#include "context/context_file.h"
#include "context/http.h"
#include "context/onegate.h"
#include "context/settings.h"
#include "roles/boot_context.h"
#include "roles/configure.h"
#include "roles/dispatcher.h"
#include "roles/names.h"
#include "roles/nfs/exports.h"
#include "roles/ood/users.h"
#include "roles/os/block_devices.h"
#include "roles/os/files.h"
#include "roles/os/mounts.h"
#include "roles/os/process.h"
#include "roles/os/rooted.h"
#include "roles/os/systemd.h"
#include "roles/os/tcp.h"
#include "roles/slurm/controller_setup.h"
#include "roles/slurm/elastic_settings.h"
#include "roles/slurm/key_delivery.h"
#include "roles/status.h"
#include "roles/timers/elastic_cycle.h"
#include "roles/timers/health.h"
#include "roles/timers/key_server.h"
#include "roles/timers/reconcile.h"
#include "roles/timers/self_drain.h"

namespace onehpc {
namespace {

/// The real adapters, built once per command. Under a --root other than "/", the runner, the
/// block devices and the mounts are fenced (roles/os/rooted.h): nothing acts on this machine.
struct RealSystem {
  explicit RealSystem(const std::string& root)
      : files(root),
        rooted_runner(real_runner, root),
        rooted_devices(root),
        rooted_mounts(real_mounts, root),
        runner(IsOtherRoot(root) ? static_cast<ProcessRunner&>(rooted_runner) : real_runner),
        systemd(runner, root),
        adapters{runner,
                 files,
                 systemd,
                 IsOtherRoot(root) ? static_cast<BlockDevices&>(rooted_devices) : real_devices,
                 IsOtherRoot(root) ? static_cast<Mounts&>(rooted_mounts) : real_mounts,
                 SystemClock(),
                 http,
                 &exchange} {}
  RealProcessRunner real_runner;
  Files files;
  BlkidBlockDevices real_devices;
  LibmountMounts real_mounts;
  RootedProcessRunner rooted_runner;
  RootedBlockDevices rooted_devices;
  RootedMounts rooted_mounts;
  ProcessRunner& runner;
  SystemctlSystemd systemd;
  CurlTransport http;
  TcpLineExchange exchange;
  SystemAdapters adapters;
};

// Every command, configure and the timers' alike, finds its context here: --context FILE,
// one-contextd's environment (the hook), else the CONTEXT CD-ROM (read afresh each time),
// the saved context.sh.network or /context/ (roles/boot_context.h).
Result<LoadedContext> LoadForCommand(const CommonOptions& options, bool from_one_context) {
  CommandContextOptions load;
  load.context_file = options.context_file;
  load.root = options.root;
  load.from_one_context = from_one_context;
  Files files(options.root);
  BlkidBlockDevices block_devices;
  LibmountMounts mounts;
  return LoadCommandContext(load, block_devices, mounts, files);
}

// Variables whose values are secrets in a raw context (besides settings marked secret).
bool IsSecretVariable(const std::string& name, const std::vector<SettingSpec>& specs) {
  static const std::regex kSecret(
      ".*(PASSWORD|PASSWD|SECRET|PRIVATE|TOKENTXT|ONEGATE_TOKEN|MUNGE_KEY|_KEY_BASE64).*");
  if (std::regex_match(name, kSecret)) return true;
  return std::any_of(specs.begin(), specs.end(), [&](const SettingSpec& s) {
    return (s.secret || s.type == SettingType::kPassword) && s.name == name;
  });
}

constexpr const char* kMask = "********";

// Has a one-context hook run configure during this boot? (/run is emptied at every boot.)
bool HookRanThisBoot(Files& files) {
  auto text = files.ReadIfExists(kStatusFile);
  if (!text || !text->has_value()) return false;
  auto status = nlohmann::json::parse(**text, nullptr, /*allow_exceptions=*/false);
  return status.is_object() && status.value("entry", "") == "one-context";
}

// Serialises configure and follow on one VM (both change the same files and daemons).
// flock(2) on a file in /run: released by the kernel when the process ends, even killed.
class RunLock {
 public:
  RunLock(const Files& files, bool wait) {
    auto lock = files.Lock(kRunLockFile, wait);
    if (!lock) {
      error_ = lock.error().message;
    } else if (!lock->has_value()) {
      error_ = "busy";
    } else {
      lock_ = std::move(**lock);
      held_ = true;
    }
  }
  bool held() const { return held_; }
  const std::string& error() const { return error_; }

 private:
  static constexpr const char* kRunLockFile = "/run/one-hpc/run.lock";
  FileLock lock_;
  bool held_ = false;
  std::string error_;
};

}  // namespace

int CmdFollow(const CommonOptions& options) {
  RealSystem sys(options.root);
  RunLock lock(sys.files, /*wait=*/false);
  if (!lock.held()) {
    if (lock.error() == "busy") {
      log::Info(
          "follow: a configure or another follow pass holds the run lock; this pass is "
          "skipped");
      return kExitOk;
    }
    log::Error("follow: {}", lock.error());
    return kExitFailed;
  }
  auto context = LoadForCommand(options, false);
  if (!context) {
    log::Error("follow: cannot read the VM's context: {}", context.error().message);
    return ExitCodeFor(context.error().kind);
  }
  return RunFollow(*context, sys.adapters);
}

int CmdRotateMungeKey(const CommonOptions& options) {
  RealSystem sys(options.root);
  RunLock lock(sys.files, /*wait=*/true);  // never beside a configure or a follow pass
  if (!lock.held()) {
    log::Error("rotate-munge-key: {}", lock.error());
    return kExitFailed;
  }
  auto context = LoadForCommand(options, false);
  if (!context) {
    log::Error("rotate-munge-key: cannot read the VM's context: {}", context.error().message);
    return ExitCodeFor(context.error().kind);
  }
  return RunRotateMungeKey(*context, sys.adapters);
}

int CmdConfigure(const CommonOptions& options, const std::string& entry, bool dry_run) {
  RealSystem sys(options.root);
  std::unique_ptr<RunLock> lock;
  if (!dry_run) {
    // A follow pass is bounded (25 s): waiting for it is short.
    lock = std::make_unique<RunLock>(sys.files, /*wait=*/true);
    if (!lock->held()) log::Warn("configure runs without its lock: {}", lock->error());
  }
  if (entry == "service" && !dry_run && HookRanThisBoot(sys.files)) {
    log::Info("configure already ran this boot from the one-context hook; nothing to do");
    return kExitOk;
  }
  Result<LoadedContext> context = LoadForCommand(options, entry == "one-context");
  if (!context) {
    log::Error("cannot read the VM's context: {}", context.error().message);
    return ExitCodeFor(context.error().kind);
  }
  ConfigureRequest request;
  request.context = std::move(*context);
  request.mode = dry_run ? PlanMode::kDryRun : PlanMode::kApply;
  request.entry = entry;
  ConfigureOutcome outcome = RunConfigure(request, sys.adapters);
  if (dry_run) {
    std::cout << "Plan for role " << (outcome.role.empty() ? "(unknown)" : outcome.role)
              << " (context: " << request.context.origin
              << ", root: " << (options.root.empty() ? "/" : options.root) << ")\n\n";
    for (const auto& warning : outcome.warnings) std::cout << "warning: " << warning << "\n";
    if (!outcome.warnings.empty()) std::cout << "\n";
    std::cout << outcome.plan.Render();
    if (outcome.exit_code != kExitOk) {
      std::cout << "\nThe plan stops here: " << outcome.error << "\n";
    }
  }
  return outcome.exit_code;
}

int CmdSettings(const CommonOptions& options, const SettingsOutput& output) {
  if (output.all_roles) {
    std::vector<SettingSpec> all = AllSettings();
    if (output.markdown) {
      std::cout << SettingsMarkdownTable(all);
      return kExitOk;
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& s : all) {
      // Consumed by templates/generate.py (OneFlow/VM template inputs): keep the keys stable.
      nlohmann::json entry = {{"name", s.name},
                              {"type", ToString(s.type)},
                              {"default", s.default_value},
                              {"roles", s.roles},
                              {"description", s.description},
                              {"secret", s.secret},
                              {"required", s.required},
                              {"min", nullptr},
                              {"max", nullptr},
                              {"choices", s.choices},
                              {"pattern", s.pattern},
                              {"expected", s.expected}};
      if (s.min != INT64_MIN) entry["min"] = s.min;
      if (s.max != INT64_MAX) entry["max"] = s.max;
      list.push_back(std::move(entry));
    }
    std::cout << list.dump(2) << "\n";
    return kExitOk;
  }
  auto context = LoadForCommand(options, false);
  if (!context) {
    log::Error("cannot read the VM's context: {}", context.error().message);
    return ExitCodeFor(context.error().kind);
  }
  std::string role_name = output.role;
  if (role_name.empty()) {
    std::unique_ptr<OneGateClient> onegate;
    CurlTransport http;
    if (auto config = OneGateConfig::FromContext(*context)) {
      config->retry = RetryPolicy::Once();
      config->request_timeout = Duration(3000);
      onegate = std::make_unique<OneGateClient>(*config, http, SystemClock());
    }
    auto choice = ChooseRole(context->vars, onegate.get());
    if (!choice) {
      log::Error("{}", choice.error().message);
      return ExitCodeFor(choice.error().kind);
    }
    role_name = choice->name;
  }
  auto role = MakeRole(role_name);
  if (!role) {
    log::Error("{}",
               UnknownRoleError({role_name, output.role.empty() ? "the VM" : "--role"}).message);
    return kExitInvalidInput;
  }
  auto settings = Settings::Resolve(SettingsFor(*role), context->vars);
  if (!settings) {
    log::Error("{}", settings.error().message);
    return ExitCodeFor(settings.error().kind);
  }
  nlohmann::json values = settings->ToJson(output.show_secrets);
  if (output.json) {
    std::cout << nlohmann::json{{"role", role_name}, {"settings", values}}.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "Settings of role " << role_name << ":\n";
  for (const auto& [name, entry] : values.items()) {
    std::string value =
        entry["value"].is_string() ? entry["value"].get<std::string>() : entry["value"].dump();
    std::cout << "  " << name << " = " << value << "  (" << entry.value("source", "") << ")\n";
  }
  return kExitOk;
}

int CmdContext(const CommonOptions& options, bool json, bool show_secrets) {
  auto context = LoadForCommand(options, true);
  if (!context) {
    log::Error("cannot read the VM's context: {}", context.error().message);
    return ExitCodeFor(context.error().kind);
  }
  std::vector<SettingSpec> specs = AllSettings();
  nlohmann::json vars = nlohmann::json::object();
  for (const auto& [name, value] : context->vars) {
    vars[name] = (!show_secrets && IsSecretVariable(name, specs)) ? kMask : value;
  }
  if (json) {
    std::cout << vars.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  std::cout << "# from " << context->origin << " (" << ToString(context->source) << ")\n";
  for (const auto& [name, value] : vars.items()) {
    std::cout << FormatContextAssignment(name, value.get<std::string>()) << "\n";
  }
  return kExitOk;
}

namespace {

// Runs outside configure (timers, shutdown), with the context LoadForCommand found.
Result<std::unique_ptr<OneGateClient>> OneGateFor(const LoadedContext& context,
                                                  HttpTransport& http) {
  auto config = OneGateConfig::FromContext(context);
  if (!config) return Fail(config.error());
  // Bounded so a cycle ends well inside its unit's TimeoutStartSec (50 s for reconcile and
  // elastic): 5 s a request, 25 s for the extended service document (every VM of a large
  // service, slower), no retry begun after 15 s.
  config->request_timeout = Duration(5000);
  config->extended_service_timeout = Duration(25000);
  config->retry.max_attempts = 3;
  config->retry.deadline = Duration(15000);
  return std::make_unique<OneGateClient>(*config, http, SystemClock());
}

}  // namespace

int CmdReconcile(const CommonOptions& options) {
  auto context = LoadForCommand(options, false);
  if (!context) {
    // No context: no OneGate, so nothing can be known about the service: change nothing.
    log::Error("reconcile: cannot read the VM's context, changing nothing: {}",
               context.error().message);
    return ExitCodeFor(context.error().kind);
  }
  CurlTransport http;
  auto onegate = OneGateFor(*context, http);
  if (!onegate) {
    log::Error("reconcile: OneGate is not configured, changing nothing: {}",
               onegate.error().message);
    return ExitCodeFor(onegate.error().kind);
  }
  RealProcessRunner runner;
  ReconcileOptions reconcile;
  // The Open OnDemand portal proxies to its workers by name: their block of /etc/hosts.
  Files files(options.root);
  if (auto role = ChooseRole(context->vars, nullptr); role && role->name == ood::kPortalRole) {
    reconcile.files = &files;
  }
  return ReconcileExitCode(RunReconcile(reconcile, **onegate, runner, SystemClock()));
}

int CmdElastic(const CommonOptions& options, bool dry_run) {
  Files files(options.root);
  ElasticOptions elastic;
  // First: a kick left by a run that stops below would start the unit again at once.
  if (!dry_run) {
    elastic.kicked = ConsumeTheKick(elastic, SystemClock(), files,
                                    [] { return static_cast<long long>(std::time(nullptr)); });
  }
  auto context = LoadForCommand(options, false);
  if (!context) {
    log::Error("elastic: cannot read the VM's context, changing nothing: {}",
               context.error().message);
    return ExitCodeFor(context.error().kind);
  }
  std::vector<SettingSpec> specs = ElasticSettings(slurm::kControllerRole);
  specs.push_back(MaxNodesSetting(slurm::kControllerRole));
  auto settings = Settings::Resolve(specs, context->vars);
  if (!settings) {
    log::Error("elastic: {}", settings.error().message);
    return ExitCodeFor(settings.error().kind);
  }
  if (!settings->GetBool(kElasticSetting) && !dry_run) {
    log::Info("elastic: elastic mode is off ({}=NO): nothing to do", kElasticSetting);
    return kExitOk;
  }
  auto limits = ElasticLimits(*settings);
  if (!limits) {
    log::Error("elastic: {}", limits.error().message);
    return ExitCodeFor(limits.error().kind);
  }
  CurlTransport http;
  auto onegate = OneGateFor(*context, http);
  if (!onegate) {
    log::Error("elastic: OneGate is not configured, changing nothing: {}", onegate.error().message);
    return ExitCodeFor(onegate.error().kind);
  }
  RealProcessRunner runner;
  elastic.limits = *limits;
  elastic.dry_run = dry_run;
  return ElasticExitCode(RunElastic(elastic, **onegate, runner, SystemClock(), files));
}

int CmdHealthCheck(const CommonOptions& options, bool dry_run) {
  Files files(options.root);
  RealProcessRunner runner;
  HealthOptions health = HealthOptionsForThisVm(files);
  health.dry_run = dry_run;
  auto report = RunHealthCheck(health, runner, files);
  if (!report) {
    log::Error("health-check: {}", report.error().message);
  } else {
    for (const auto& c : report->checks) {
      std::cout << (c.ok ? "ok     " : "FAILED ") << c.name << (c.detail.empty() ? "" : ": ")
                << c.detail << "\n";
    }
  }
  return HealthExitCode(report);
}

int CmdStatus(const CommonOptions& options, bool json) {
  // The dry-run cycle logs a line per node: the table says it; keep stderr for trouble.
  log::Options quiet = log::DetectOptions();
  if (quiet.min_level < log::Level::kWarn) quiet.min_level = log::Level::kWarn;
  log::Init(quiet);
  Files files(options.root);
  RealProcessRunner runner;
  CurlTransport http;
  StatusInputs inputs;
  inputs.query_machine = options.root.empty();
  std::unique_ptr<OneGateClient> onegate;
  auto context = LoadForCommand(options, false);
  if (!context) {
    inputs.onegate_why = "cannot read the VM's context: " + context.error().message;
  } else if (auto client = OneGateFor(*context, http); !client) {
    inputs.onegate_why = "OneGate is not configured: " + client.error().message;
  } else {
    onegate = std::move(*client);
    inputs.onegate = onegate.get();
    if (auto it = context->vars.find("VMID"); it != context->vars.end()) {
      inputs.own_vm_id = std::atoi(it->second.c_str());
    }
  }
  StatusReport report = CollectStatus(inputs, files, runner, SystemClock());
  if (context) {
    if (auto it = context->vars.find(ood::kLocalUsersVar); it != context->vars.end()) {
      if (auto clear = ood::ClearTextPasswordNames(it->second); !clear.empty()) {
        report.warnings.push_back(ood::ClearTextPasswordWarning(clear));
      }
    }
  }
  if (json) {
    std::cout << StatusJson(report).dump(2) << "\n";
  } else {
    std::cout << RenderStatus(report);
  }
  return StatusExitCode(report);
}

int CmdSelfDrain(const CommonOptions& options) {
  RealProcessRunner runner;
  SystemctlSystemd systemd(runner);
  SelfDrainOptions drain;
  drain.own_addresses = LocalIpv4Addresses();
  drain.node_name = SelfDrainNodeName(Files(options.root));
  return SelfDrainExitCode(RunSelfDrain(drain, runner, systemd, SystemClock()));
}

int CmdStorageRefresh(const CommonOptions& options) {
  Files files(options.root);
  RealProcessRunner runner;
  CurlTransport http;
  auto context = LoadForCommand(options, false);
  std::unique_ptr<OneGateClient> onegate;
  std::string why;
  if (!context) {
    why = "cannot read the VM's context: " + context.error().message;
  } else if (auto client = OneGateFor(*context, http)) {
    onegate = std::move(*client);
  } else {
    why = "OneGate is not configured: " + client.error().message;
  }
  // Without OneGate the refresher still repairs the exports from the last good state.
  auto outcome = nfs::RefreshExports(
      files, runner,
      [&]() -> Result<ServiceInfo> {
        if (!onegate) return Fail(ErrorKind::kNetwork, why);
        return onegate->GetService(/*extended=*/true);
      },
      /*live=*/options.root.empty() || options.root == "/");
  if (!outcome) {
    log::Error("storage-refresh: {}", outcome.error().message);
    return ExitCodeFor(outcome.error().kind);
  }
  return outcome->onegate_failed ? kExitNetwork : kExitOk;
}

int CmdKeyServe(const CommonOptions& options) {
  constexpr int kSocket = 0;  // systemd Accept=yes: the connection is stdin
  constexpr Duration kIoTimeout{5000};
  auto peer = PeerIpv4(kSocket);
  if (!peer) {
    log::Error("key-serve: stdin is not a TCP connection: {}", peer.error().message);
    return kExitInvalidInput;
  }
  Files files(options.root);
  std::optional<CurlTransport> http;  // made only for a request worth asking OneGate about
  // What configure left for the key server: OneGate's endpoint, this VM's id and token
  // (--context names another file: the tests).
  auto open_onegate = [&]() -> KeyServerOneGate {
    CommonOptions from = options;
    if (from.context_file.empty()) from.context_file = files.HostPath(slurm::kKeyServerContextPath);
    auto context = LoadForCommand(from, false);
    if (!context) {
      log::Error("key-serve: cannot read {} (written by configure): {}", from.context_file,
                 context.error().message);
      return {nullptr, "the key server is not configured yet"};
    }
    auto onegate = OneGateFor(*context, http.emplace());
    if (!onegate) {
      log::Error("key-serve: OneGate is not configured: {}", onegate.error().message);
      return {nullptr, "the controller has no OneGate"};
    }
    return {std::move(*onegate), ""};
  };
  const auto answer = ServeKeyRequest(files, ReadLine(kSocket, slurm::kMaxKeyLine, kIoTimeout),
                                      *peer, open_onegate);
  if (answer.granted) {
    log::Info("key-serve: {}", answer.log);
  } else {
    log::Warn("key-serve: request from {}: {}", *peer, answer.log);
  }
  if (!answer.line.empty()) {
    if (auto s = WriteAll(kSocket, answer.line + "\n", kIoTimeout); !s) {
      log::Warn("key-serve: cannot answer {}: {}", *peer, s.error().message);
      return kExitNetwork;
    }
  }
  return kExitOk;
}

}  // namespace onehpc
