// one-hpc: the command line. Each command is a thin wrapper over roles/ and context/.
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/log.h"
#include "common/version.h"
#include "roles/configure.h"
#include "roles/timers/health.h"

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

// What the command line sets: the options every command shares and each command's own.
struct CliValues {
  CommonOptions options;
  std::string entry = "cli";
  SettingsOutput settings;
  bool json = false;
  bool show_secrets = false;
  bool dry_run = false;
  std::string home_user;
  std::string home_user_option;
  std::string home_base = "/home";
  std::string home_skel = "/etc/skel";
  AccountingCliOptions accounting;
};

// One command of the table: its name and help, which of the common options it takes (none,
// --context, or --context and --root), its own options, and what runs it once parsed.
enum class Common { kNone, kContext, kContextAndRoot };
struct CliCommand {
  std::string name;
  std::string help;
  Common common = Common::kContext;
  std::function<void(CLI::App&)> add_options;
  std::function<int()> run;
};

std::vector<CliCommand> ConfigureCommands(CliValues& v) {
  return {
      {"configure", "Configure this VM for its role (what the boot units run); exit 0 on success",
       Common::kContextAndRoot,
       [&v](CLI::App& c) {
         c.add_option("--entry", v.entry,
                      "Which entry point runs it: cli, service, reconfigure, one-context")
             ->check(CLI::IsMember({"cli", "service", "reconfigure", "one-context"}));
       },
       [&v] { return CmdConfigure(v.options, v.entry, false); }},
      {"plan", "Print the ordered actions configure would take, with their reasons; change nothing",
       Common::kContextAndRoot, nullptr, [&v] { return CmdConfigure(v.options, "cli", true); }},
      {"settings", "Print the effective typed ONEAPP_* settings of this VM's role (secrets masked)",
       Common::kContextAndRoot,
       [&v](CLI::App& c) {
         c.add_flag("--json", v.settings.json, "JSON output");
         c.add_flag("--show-secrets", v.settings.show_secrets,
                    "Show secret values instead of masking them");
         c.add_option("--role", v.settings.role, "Use this role instead of the VM's");
         c.add_flag("--all", v.settings.all_roles,
                    "Every setting of every role (no context needed)");
         c.add_flag("--markdown", v.settings.markdown,
                    "With --all: the operator guide's Markdown table");
       },
       [&v] { return CmdSettings(v.options, v.settings); }},
      {"context", "Print every context variable exactly as parsed (secrets masked)",
       Common::kContextAndRoot,
       [&v](CLI::App& c) {
         c.add_flag("--json", v.json, "JSON object of NAME: value");
         c.add_flag("--show-secrets", v.show_secrets, "Show secret values instead of masking them");
       },
       [&v] { return CmdContext(v.options, v.json, v.show_secrets); }},
      {"status",
       "What this VM is and how it is doing: the role, the last configure, READY and ERROR in "
       "OneGate, the units one-hpc manages, and on a controller or portal the Slurm nodes as "
       "the reconciler sees them; changes nothing; exit 1 when something is wrong",
       Common::kContextAndRoot,
       [&v](CLI::App& c) { c.add_flag("--json", v.json, "JSON output, for scripts"); },
       [&v] { return CmdStatus(v.options, v.json); }},
      {"version", "Print the version", Common::kNone, nullptr,
       [] {
         std::cout << "one-hpc " << ONEHPC_VERSION << "\n";
         return kExitOk;
       }},
  };
}

std::vector<CliCommand> SlurmCommands(CliValues& v) {
  return {
      {"reconcile",
       "Slurm controller: remove nodes whose worker VM left the OneFlow service "
       "(oneslurm-reconcile.service)",
       Common::kContext, nullptr, [&v] { return CmdReconcile(v.options); }},
      {"elastic",
       "Slurm controller or portal with ONEAPP_SLURM_ELASTIC=YES: one elastic cycle, growing the "
       "worker role for waiting jobs and terminating idle drained nodes' VMs "
       "(oneslurm-elastic.service)",
       Common::kContext,
       [&v](CLI::App& c) {
         c.add_flag("--dry-run", v.dry_run,
                    "Print what the cycle would do and change nothing (also with elastic mode "
                    "off)");
       },
       [&v] { return CmdElastic(v.options, v.dry_run); }},
      {"health-check",
       "Slurm worker: check munge, slurmd's controller, the mounts, the disk and the GPUs; drain "
       "the node naming the failed check, resume it once all pass (slurm.conf's "
       "HealthCheckProgram, as slurm-health-check)",
       Common::kContext,
       [&v](CLI::App& c) { c.add_flag("--dry-run", v.dry_run, "Check and print, change nothing"); },
       [&v] { return CmdHealthCheck(v.options, v.dry_run); }},
      {"self-drain",
       "Slurm worker: take this node out of Slurm at shutdown (ExecStop of "
       "oneslurm-self-drain.service)",
       Common::kContext, nullptr, [&v] { return CmdSelfDrain(v.options); }},
      {"rotate-munge-key",
       "Slurm controller or portal: a new munge key for the cluster; every worker fetches it "
       "within 30 s (its follow timer) and credentials of the old key are refused",
       Common::kContextAndRoot, nullptr, [&v] { return CmdRotateMungeKey(v.options); }},
      {"key-serve",
       "Slurm controller or portal: answer one worker's munge key request on the connection "
       "that is stdin (one-hpc-key-server@.service, Accept=yes)",
       Common::kContextAndRoot, nullptr, [&v] { return CmdKeyServe(v.options); }},
  };
}

void AddAccountingOptions(CLI::App& c, AccountingCliOptions& a) {
  c.add_option("--backup-dir", a.backup_dir,
               "Dump directory (default: the role's: the portal's state export, the "
               "controller's /var/lib/one-hpc/accounting-dumps)");
  c.add_option("--database", a.database, "Database")->capture_default_str();
  c.add_option("--socket", a.socket, "MariaDB unix socket (default: the client's)");
  c.add_option("--keep", a.keep, "Newest complete dumps kept")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
}

int HomeCreate(const CliValues& v) {
  if (v.home_user.empty() == v.home_user_option.empty()) {
    std::cerr << "home-create: give the user once, as USER or --user USER\n";
    return kExitUsage;
  }
  return CmdHomeCreate(v.home_user.empty() ? v.home_user_option : v.home_user, v.home_base,
                       v.home_skel);
}

std::vector<CliCommand> OodCommands(CliValues& v) {
  return {
      {"follow",
       "Open OnDemand worker: one pass following the portal (a replaced portal's address, the "
       "users it publishes); one-hpc-follow-portal.service",
       Common::kContextAndRoot, nullptr, [&v] { return CmdFollow(v.options); }},
      {"home-create",
       "Open OnDemand portal: create USER's home from the skeleton at first login, never "
       "following a link (run as root by the PUN pre-start hook)",
       Common::kNone,
       [&v](CLI::App& c) {
         c.add_option("USER", v.home_user, "The user");  // CLI11 2.4: not "user" (--user)
         c.add_option("--user", v.home_user_option,
                      "The user (the form Open OnDemand's pun_pre_hook_root_cmd passes)");
         c.add_option("--home-base", v.home_base, "Directory holding the homes")
             ->capture_default_str();
         c.add_option("--skel", v.home_skel, "Skeleton copied into a new home")
             ->capture_default_str();
         c.allow_extras();  // the hook may pass more options in later OOD versions
       },
       [&v] { return HomeCreate(v); }},
      {"accounting-dump",
       "Portal, or controller with accounting: dump the Slurm accounting database "
       "(consistent, completion checked, atomic, bounded retention)",
       Common::kNone, [&v](CLI::App& c) { AddAccountingOptions(c, v.accounting); },
       [&v] { return CmdAccountingDump(v.accounting); }},
      {"accounting-restore",
       "Portal, or controller with accounting: if the accounting database is empty, load the "
       "newest complete dump",
       Common::kNone, [&v](CLI::App& c) { AddAccountingOptions(c, v.accounting); },
       [&v] { return CmdAccountingRestore(v.accounting); }},
      {"storage-refresh",
       "Open OnDemand storage: rewrite the NFS exports when the portal's address changed "
       "(one-hpc-exports-refresh.service)",
       Common::kContextAndRoot, nullptr, [&v] { return CmdStorageRefresh(v.options); }},
  };
}

// The arguments CLI11 parses: argv, or the command a link to this binary stands for. Open
// OnDemand runs pun_pre_hook_root_cmd as `<path> --user <name>` (one executable, no shell): a
// link named one-hpc-home-create means `one-hpc home-create`; slurmd runs HealthCheckProgram
// without arguments: a link named slurm-health-check.
std::vector<std::string> Arguments(int argc, char** argv) {
  std::vector<std::string> args;
  if (InvokedAs(argv[0], "one-hpc-home-create")) {
    args = {"one-hpc", "home-create"};
  } else if (InvokedAs(argv[0], kHealthCheckProgramName)) {
    args = {"one-hpc", "health-check"};
  } else {
    args = {argv[0]};
  }
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  return args;
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

  CLI::App app{
      "one-hpc: turns an OpenNebula VM into a member of an HPC service "
      "(OneSlurm, Open OnDemand)",
      "one-hpc"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  CliValues values;
  std::vector<CliCommand> table = ConfigureCommands(values);
  for (auto* group : {SlurmCommands, OodCommands}) {
    for (auto& c : group(values)) table.push_back(std::move(c));
  }
  std::vector<std::pair<CLI::App*, const CliCommand*>> parsed;
  for (const CliCommand& c : table) {
    CLI::App* cmd = app.add_subcommand(c.name, c.help);
    if (c.common != Common::kNone) {
      cmd->add_option("--context", values.options.context_file,
                      "Read this context.sh instead of finding the VM's context");
    }
    if (c.common == Common::kContextAndRoot) {
      cmd->add_option("--root", values.options.root,
                      "Treat DIR as / for every file the command reads or writes");
    }
    if (c.add_options) c.add_options(*cmd);
    parsed.emplace_back(cmd, &c);
  }

  const std::vector<std::string> args = Arguments(argc, argv);
  std::vector<const char*> arg_ptrs;
  for (const auto& a : args) arg_ptrs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  for (const auto& [cmd, c] : parsed) {
    if (*cmd) return c->run();
  }
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
