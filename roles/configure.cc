#include "roles/configure.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "roles/dispatcher.h"
#include "roles/names.h"
#include "roles/published.h"
#include "roles/role_change.h"
#include "roles/root_space.h"

namespace onehpc {
namespace {

// Now, UTC, ISO 8601 to the second ("2026-12-02T10:30:00Z").
std::string UtcNow() { return UtcTimestamp(std::time(nullptr)); }

void WriteStatus(SystemAdapters& sys, const ConfigureRequest& request,
                 const ConfigureOutcome& outcome) {
  nlohmann::json status = {
      {"result", outcome.exit_code == kExitOk ? "success" : "failure"},
      {"exit_code", outcome.exit_code},
      {"role", outcome.role},
      {"entry", request.entry},
      {"error", outcome.error},
      {"finished", UtcNow()},
  };
  Status written = sys.files.WriteAtomic(kStatusFile, status.dump(2) + "\n", 0644);
  if (!written)
    log::Warn("could not record the result in {}: {}", kStatusFile, written.error().message);
}

// The role module and its validated settings, as configure and follow both need them.
// `chosen` (optional) receives the role name once it is known, even when the module is then
// unknown or its settings are invalid (for the status file).
struct ResolvedRole {
  std::unique_ptr<Role> role;
  Settings settings;
  std::string source;  ///< where the role name came from
};
Result<ResolvedRole> ResolveRole(
    const ContextVars& vars, OneGateClient* onegate,
    const std::function<std::unique_ptr<Role>(const std::string&)>& make_role,
    std::string* chosen) {
  auto choice = ChooseRole(vars, onegate);
  if (!choice) return Fail(choice.error());
  if (chosen != nullptr) *chosen = choice->name;
  std::unique_ptr<Role> role = make_role ? make_role(choice->name) : MakeRole(choice->name);
  if (!role) return Fail(UnknownRoleError(*choice));
  if (auto refused = RefuseSecretsOfOtherRoles(*role, vars); !refused) {
    return Fail(refused.error());
  }
  auto settings = Settings::Resolve(SettingsFor(*role), vars);
  if (!settings) return Fail(settings.error());
  return ResolvedRole{std::move(role), std::move(*settings), choice->source};
}

}  // namespace

int ExitCodeFor(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidInput:
    case ErrorKind::kNotFound:
      return kExitInvalidInput;
    case ErrorKind::kUnsafe:
      return kExitUnsafe;
    case ErrorKind::kNetwork:
      return kExitNetwork;
    case ErrorKind::kInternal:
    case ErrorKind::kIo:
    case ErrorKind::kProcess:
      return kExitFailed;
  }
  return kExitFailed;
}

std::string OneGateSafeMessage(const std::string& message) {
  std::string out;
  // The ERROR attribute is readable by every VM of the service and by the operator: never a
  // registered secret (munge key, passwords), whatever a future error text contains.
  for (char c : log::Redact(message)) {
    switch (c) {
      case ',':
        out += ';';
        break;
      case '"':
        out += '\'';
        break;
      case '\\':
        out += '/';
        break;
      case '[':
        out += '(';
        break;
      case ']':
        out += ')';
        break;
      case '\n':
        out += " | ";
        break;
      case '\r':
      case '\t':
        out += ' ';
        break;
      default:
        out += c;
    }
  }
  const size_t kMax = 240;
  if (out.size() > kMax) out = out.substr(0, kMax - 3) + "...";
  // OneGate cannot store an empty value, and a trailing space would be trimmed.
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.empty()) out = "configure failed";
  return out;
}

namespace {

// The OneGate client of a run, null when the context gives none (logged).
std::unique_ptr<OneGateClient> MakeOneGate(const LoadedContext& context, SystemAdapters& sys,
                                           bool dry_run) {
  auto config = OneGateConfig::FromContext(context);
  if (!config) {
    log::Warn("OneGate is not available, nothing will be published: {}", config.error().message);
    return nullptr;
  }
  if (dry_run) {
    // A plan must answer quickly even when OneGate is far away: one short attempt.
    config->retry = RetryPolicy::Once();
    config->request_timeout = Duration(3000);
  }
  return std::make_unique<OneGateClient>(*config, sys.http, sys.clock);
}

}  // namespace

ConfigureOutcome RunConfigure(const ConfigureRequest& request, SystemAdapters& sys) {
  ConfigureOutcome outcome;
  outcome.plan = Plan(request.mode);
  const bool dry_run = request.mode == PlanMode::kDryRun;
  log::Info("one-hpc {} started (entry: {}, context from {})", dry_run ? "plan" : "configure",
            request.entry, request.context.origin);

  std::unique_ptr<OneGateClient> onegate = MakeOneGate(request.context, sys, dry_run);

  auto fail = [&](const Error& error) -> ConfigureOutcome {
    outcome.exit_code = ExitCodeFor(error.kind);
    outcome.error = log::Redact(error.message);
    log::Error("one-hpc {} failed: {}", dry_run ? "plan" : "configure", error.message);
    if (!dry_run) {
      if (onegate) PublishError(*onegate, sys.files, OneGateSafeMessage(error.message));
      WriteStatus(sys, request, outcome);
    }
    return std::move(outcome);
  };

  // Erased when this VM may have published it (roles/published.h): not at a first boot.
  if (!dry_run && onegate) EraseStaleReady(*onegate, sys.files);

  outcome.warnings = UnknownSettingWarnings(AllSettings(), request.context.vars);
  for (const auto& warning : outcome.warnings) log::Warn("{}", warning);

  auto resolved =
      ResolveRole(request.context.vars, onegate.get(), request.make_role, &outcome.role);
  if (!resolved) return fail(resolved.error());
  std::unique_ptr<Role>& role = resolved->role;
  log::Info("role: {} (service {}, from {})", role->Name(), role->Service(), resolved->source);
  Settings* settings = &resolved->settings;

  std::vector<std::pair<std::string, std::string>> publish;
  RoleEnv env =
      RoleEnv::From(request.context, *settings, onegate.get(), sys, outcome.plan, &publish);
  // What the role of the last successful configure left enabled (a role change between boots
  // is undone once the new role is configured; roles/role_change.h).
  auto previous = ReadRoleRecord(sys.files);
  if (!previous) return fail(previous.error());
  std::vector<std::string> enabled_units;
  env.enabled_units = &enabled_units;
  if (auto s = CheckRootSpace(env); !s) return fail(s.error());
  Status configured = role->Configure(env);
  if (!configured) {
    return fail(RetireAfterFailedRoleChange(env, *previous, role->Name(), enabled_units,
                                            configured.error()));
  }
  if (previous->has_value()) {
    if (auto s = RetirePreviousRole(env, **previous, role->Name(), enabled_units); !s) {
      return fail(s.error());
    }
  }

  const bool report_ready = settings->GetBool("REPORT_READY");
  if (report_ready) publish.emplace_back(kAttrReady, "YES");
  if (onegate) {
    Status reported =
        ReportSuccess(*onegate, sys.files, outcome.plan, publish,
                      report_ready ? "the configure succeeded and REPORT_READY=YES"
                                   : "the configure succeeded (REPORT_READY is not YES: no READY)");
    if (!reported) return fail(reported.error());
  } else if (report_ready) {
    return fail(Error{ErrorKind::kInvalidInput,
                      "REPORT_READY=YES but OneGate is not available: the VM template needs "
                      "CONTEXT/TOKEN=YES"});
  }

  if (!dry_run) {
    if (auto s = WriteRoleRecord(sys.files, RoleRecord{role->Name(), enabled_units}); !s) {
      log::Warn("could not record the role in {}: {}", kRoleRecordFile, s.error().message);
    }
    WriteStatus(sys, request, outcome);
    log::Info("one-hpc configure finished: role {} is configured", role->Name());
  }
  return outcome;
}

namespace {

// A role's command outside configure: its own settings, OneGate, no status file, no READY.
int RunRoleCommand(const LoadedContext& context, SystemAdapters& sys, const std::string& what,
                   const RetryPolicy& retry,
                   const std::function<Status(Role&, RoleEnv&)>& command) {
  auto config = OneGateConfig::FromContext(context);
  if (!config) {
    log::Error("{}: OneGate is not available: {}", what, config.error().message);
    return ExitCodeFor(config.error().kind);
  }
  config->retry = retry;
  auto onegate = std::make_unique<OneGateClient>(*config, sys.http, sys.clock);
  auto resolved = ResolveRole(context.vars, onegate.get(), nullptr, nullptr);
  if (!resolved) {
    log::Error("{}: {}", what, resolved.error().message);
    return ExitCodeFor(resolved.error().kind);
  }
  Plan plan(PlanMode::kApply);
  plan.set_quiet_keeps(true);
  RoleEnv env = RoleEnv::From(context, resolved->settings, onegate.get(), sys, plan);
  Status done = command(*resolved->role, env);
  if (!done) {
    log::Error("{}: {}", what, done.error().message);
    return ExitCodeFor(done.error().kind);
  }
  return kExitOk;
}

}  // namespace

int RunFollow(const LoadedContext& context, SystemAdapters& sys) {
  // One short look per tick: the timer comes back.
  return RunRoleCommand(context, sys, "follow", RetryPolicy::Once(),
                        [](Role& role, RoleEnv& env) { return role.Follow(env); });
}

int RunRotateMungeKey(const LoadedContext& context, SystemAdapters& sys) {
  RetryPolicy retry;  // the operator waits: the client's usual retries
  return RunRoleCommand(context, sys, "rotate-munge-key", retry,
                        [](Role& role, RoleEnv& env) { return role.RotateMungeKey(env); });
}

}  // namespace onehpc
