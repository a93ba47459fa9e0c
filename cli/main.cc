// one-hpc: the command line. Each command is a thin wrapper over roles/ and context/.
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/log.h"
#include "common/version.h"
#include "roles/configure.h"
#include "roles/slurm/health.h"

namespace onehpc {
namespace {

// one-contextd runs every executable in /etc/one-context.d as `<script> <stage> [<command>]`.
// The hook /etc/one-context.d/net-90-one-hpc is a symlink to this binary: no shell between
// one-context and us.
bool InvokedAsOneContextHook(const char* argv0) {
  std::string name = argv0 ? argv0 : "";
  auto slash = name.rfind('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  return name.rfind("net-", 0) == 0;
}

bool InvokedAs(const char* argv0, const std::string& wanted) {
  std::string name = argv0 ? argv0 : "";
  auto slash = name.rfind('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  return name == wanted;
}

int Main(int argc, char** argv) {
  // The process holds secrets (the OneGate token, the munge key, passwords): no core dump,
  // no ptrace or /proc/<pid>/mem by another user's process. execve of a child resets it.
  (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  log::Init(log::DetectOptions());

  if (InvokedAsOneContextHook(argv[0])) {
    CommonOptions options;
    std::string stage = argc > 1 ? argv[1] : "";
    std::string command = argc > 2 ? argv[2] : "";
    log::Info("started by one-context as a hook (stage '{}', command '{}')", stage,
              command.empty() ? "boot" : command);
    if (!stage.empty() && stage != "network") {
      log::Info("nothing to do in the '{}' stage", stage);
      return kExitOk;
    }
    return CmdConfigure(options, "one-context", /*dry_run=*/false);
  }

  // Open OnDemand runs pun_pre_hook_root_cmd as `<path> --user <name>` (one executable, no
  // shell): a link named one-hpc-home-create to this binary means `one-hpc home-create`.
  std::vector<std::string> hook_args;
  if (InvokedAs(argv[0], "one-hpc-home-create")) {
    hook_args.push_back("one-hpc");
    hook_args.push_back("home-create");
    for (int i = 1; i < argc; ++i) hook_args.push_back(argv[i]);
  }
  // slurmd runs HealthCheckProgram without arguments: a link named slurm-health-check.
  if (InvokedAs(argv[0], kHealthCheckProgramName)) {
    hook_args = {"one-hpc", "health-check"};
    for (int i = 1; i < argc; ++i) hook_args.push_back(argv[i]);
  }

  CLI::App app{
      "one-hpc: turns an OpenNebula VM into a member of an HPC service "
      "(OneSlurm, Open OnDemand)",
      "one-hpc"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");

  CommonOptions options;
  auto add_common = [&](CLI::App* cmd, bool with_root) {
    cmd->add_option("--context", options.context_file,
                    "Read this context.sh instead of finding the VM's context");
    if (with_root) {
      cmd->add_option("--root", options.root,
                      "Treat DIR as / for every file the command reads or writes");
    }
  };

  std::string entry = "cli";
  auto* configure = app.add_subcommand(
      "configure", "Configure this VM for its role (what the boot units run); exit 0 on success");
  add_common(configure, true);
  configure
      ->add_option("--entry", entry,
                   "Which entry point runs it: cli, service, reconfigure, one-context")
      ->check(CLI::IsMember({"cli", "service", "reconfigure", "one-context"}));

  auto* plan = app.add_subcommand(
      "plan", "Print the ordered actions configure would take, with their reasons; change nothing");
  add_common(plan, true);

  bool json = false;
  bool show_secrets = false;
  bool all_roles = false;
  bool markdown = false;
  std::string role_name;
  auto* settings = app.add_subcommand(
      "settings", "Print the effective typed ONEAPP_* settings of this VM's role (secrets masked)");
  add_common(settings, true);
  settings->add_flag("--json", json, "JSON output");
  settings->add_flag("--show-secrets", show_secrets, "Show secret values instead of masking them");
  settings->add_option("--role", role_name, "Use this role instead of the VM's");
  settings->add_flag("--all", all_roles, "Every setting of every role (no context needed)");
  settings->add_flag("--markdown", markdown, "With --all: the operator guide's Markdown table");

  auto* context = app.add_subcommand(
      "context", "Print every context variable exactly as parsed (secrets masked)");
  add_common(context, true);
  context->add_flag("--json", json, "JSON object of NAME: value");
  context->add_flag("--show-secrets", show_secrets, "Show secret values instead of masking them");

  auto* status = app.add_subcommand(
      "status",
      "What this VM is and how it is doing: the role, the last configure, READY and ERROR in "
      "OneGate, the units one-hpc manages, and on a controller or portal the Slurm nodes as "
      "the reconciler sees them; changes nothing; exit 1 when something is wrong");
  add_common(status, true);
  status->add_flag("--json", json, "JSON output, for scripts");

  auto* version = app.add_subcommand("version", "Print the version");

  auto* reconcile =
      app.add_subcommand("reconcile",
                         "Slurm controller: remove nodes whose worker VM left the OneFlow service "
                         "(oneslurm-reconcile.service)");
  add_common(reconcile, false);

  bool elastic_dry_run = false;
  auto* elastic = app.add_subcommand(
      "elastic",
      "Slurm controller or portal with ONEAPP_SLURM_ELASTIC=YES: one elastic cycle, growing the "
      "worker role for waiting jobs and terminating idle drained nodes' VMs "
      "(oneslurm-elastic.service)");
  add_common(elastic, false);
  elastic->add_flag(
      "--dry-run", elastic_dry_run,
      "Print what the cycle would do and change nothing (also with elastic mode off)");

  bool health_dry_run = false;
  auto* health = app.add_subcommand(
      "health-check",
      "Slurm worker: check munge, slurmd's controller, the mounts, the disk and the GPUs; drain "
      "the node naming the failed check, resume it once all pass (slurm.conf's "
      "HealthCheckProgram, as slurm-health-check)");
  add_common(health, false);
  health->add_flag("--dry-run", health_dry_run, "Check and print, change nothing");

  auto* self_drain = app.add_subcommand("self-drain",
                                        "Slurm worker: take this node out of Slurm at shutdown "
                                        "(ExecStop of oneslurm-self-drain.service)");
  add_common(self_drain, false);

  auto* rotate = app.add_subcommand(
      "rotate-munge-key",
      "Slurm controller or portal: a new munge key for the cluster; every worker fetches it "
      "within 30 s (its follow timer) and credentials of the old key are refused");
  add_common(rotate, true);

  auto* key_serve =
      app.add_subcommand("key-serve",
                         "Slurm controller or portal: answer one worker's munge key request on "
                         "the connection that is stdin (one-hpc-key-server@.service, Accept=yes)");
  add_common(key_serve, true);

  auto* follow =
      app.add_subcommand("follow",
                         "Open OnDemand worker: one pass following the portal (a replaced portal's "
                         "address, the users it publishes); one-hpc-follow-portal.service");
  add_common(follow, true);

  std::string home_user;
  std::string home_user_option;
  std::string home_base = "/home";
  std::string home_skel = "/etc/skel";
  auto* home_create =
      app.add_subcommand("home-create",
                         "Open OnDemand portal: create USER's home from the skeleton at first "
                         "login, never following a link (run as root by the PUN pre-start hook)");
  home_create->add_option("USER", home_user, "The user");  // CLI11 2.4: not "user" (--user)
  home_create->add_option("--user", home_user_option,
                          "The user (the form Open OnDemand's pun_pre_hook_root_cmd passes)");
  home_create->add_option("--home-base", home_base, "Directory holding the homes")
      ->capture_default_str();
  home_create->add_option("--skel", home_skel, "Skeleton copied into a new home")
      ->capture_default_str();
  home_create->allow_extras();  // the hook may pass more options in later OOD versions

  AccountingCliOptions accounting;
  auto add_accounting = [&](CLI::App* cmd) {
    cmd->add_option("--backup-dir", accounting.backup_dir,
                    "Dump directory (default: the role's: the portal's state export, the "
                    "controller's /var/lib/one-hpc/accounting-dumps)");
    cmd->add_option("--database", accounting.database, "Database")->capture_default_str();
    cmd->add_option("--socket", accounting.socket, "MariaDB unix socket (default: the client's)");
    cmd->add_option("--keep", accounting.keep, "Newest complete dumps kept")
        ->capture_default_str()
        ->check(CLI::Range(1, 10000));
  };
  auto* accounting_dump =
      app.add_subcommand("accounting-dump",
                         "Portal, or controller with accounting: dump the Slurm accounting "
                         "database (consistent, completion checked, atomic, bounded retention)");
  add_accounting(accounting_dump);
  auto* accounting_restore =
      app.add_subcommand("accounting-restore",
                         "Portal, or controller with accounting: if the accounting database is "
                         "empty, load the newest complete dump");
  add_accounting(accounting_restore);
  auto* storage_refresh =
      app.add_subcommand("storage-refresh",
                         "Open OnDemand storage: rewrite the NFS exports when the portal's "
                         "address changed (one-hpc-exports-refresh.service)");
  add_common(storage_refresh, true);

  try {
    if (hook_args.empty()) {
      app.parse(argc, argv);
    } else {
      std::vector<const char*> args;
      for (const auto& a : hook_args) args.push_back(a.c_str());
      app.parse(static_cast<int>(args.size()), args.data());
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }

  if (*configure) return CmdConfigure(options, entry, false);
  if (*plan) return CmdConfigure(options, "cli", true);
  if (*settings) {
    return CmdSettings(options, SettingsOutput{json, show_secrets, all_roles, markdown, role_name});
  }
  if (*context) return CmdContext(options, json, show_secrets);
  if (*version) {
    std::cout << "one-hpc " << ONEHPC_VERSION << "\n";
    return kExitOk;
  }
  if (*reconcile) return CmdReconcile(options);
  if (*elastic) return CmdElastic(options, elastic_dry_run);
  if (*health) return CmdHealthCheck(options, health_dry_run);
  if (*status) return CmdStatus(options, json);
  if (*self_drain) return CmdSelfDrain(options);
  if (*follow) return CmdFollow(options);
  if (*key_serve) return CmdKeyServe(options);
  if (*rotate) return CmdRotateMungeKey(options);
  if (*accounting_dump) return CmdAccountingDump(accounting);
  if (*accounting_restore) return CmdAccountingRestore(accounting);
  if (*home_create) {
    if (home_user.empty() == home_user_option.empty()) {
      std::cerr << "home-create: give the user once, as USER or --user USER\n";
      return kExitUsage;
    }
    return CmdHomeCreate(home_user.empty() ? home_user_option : home_user, home_base, home_skel);
  }
  if (*storage_refresh) return CmdStorageRefresh(options);
  return kExitUsage;
}

}  // namespace
}  // namespace onehpc

int main(int argc, char** argv) {
  try {
    return onehpc::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "one-hpc: internal error: %s\n", e.what());
    return onehpc::kExitFailed;
  }
}
