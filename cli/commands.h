// The commands of the one-hpc program; each returns the process exit code (roles/configure.h).
#ifndef ONEHPC_CLI_COMMANDS_H_
#define ONEHPC_CLI_COMMANDS_H_

#include <string>

namespace onehpc {

struct CommonOptions {
  std::string context_file;  ///< --context; "" = find the VM's context
  std::string root;          ///< --root; "" = the real /
};

struct SettingsOutput {
  bool json = false;
  bool show_secrets = false;
  bool all_roles = false;
  bool markdown = false;
  std::string role;
};

/// configure (dry_run false) and plan (dry_run true).
int CmdConfigure(const CommonOptions& options, const std::string& entry, bool dry_run);
int CmdSettings(const CommonOptions& options, const SettingsOutput& output);
int CmdContext(const CommonOptions& options, bool json, bool show_secrets);
int CmdReconcile(const CommonOptions& options);
/// `one-hpc elastic [--dry-run]`: one elastic cycle (roles/timers/elastic_cycle.h); exit 0 when
/// it ran or elastic mode is off, 1 when Slurm could not be read or a change failed.
int CmdElastic(const CommonOptions& options, bool dry_run);
/// `one-hpc status [--json]`: roles/status.h; exit 0 when all is well, 1 otherwise.
int CmdStatus(const CommonOptions& options, bool json);
int CmdSelfDrain(const CommonOptions& options);
/// `one-hpc health-check [--dry-run]` (roles/timers/health.h): exit 0 healthy, 1 otherwise.
int CmdHealthCheck(const CommonOptions& options, bool dry_run);
int CmdFollow(const CommonOptions& options);
/// A new munge key for the cluster (controller or portal).
int CmdRotateMungeKey(const CommonOptions& options);
/// One munge key request on the connection that is stdin (roles/slurm/key_delivery.h).
int CmdKeyServe(const CommonOptions& options);
/// Open OnDemand portal: first-login home of `user` (cli/ood_commands.cc).
int CmdHomeCreate(const std::string& user, const std::string& home_base, const std::string& skel);
struct AccountingCliOptions {
  /// "" = the dump directory of this VM's configured role (portal or controller).
  std::string backup_dir;
  std::string database = "slurm_acct_db";
  std::string socket;  ///< "" = the client's default
  int keep = 48;
};
/// The portal, or a controller with accounting: dump the accounting database / restore the
/// newest complete dump.
int CmdAccountingDump(const AccountingCliOptions& options);
int CmdAccountingRestore(const AccountingCliOptions& options);
int CmdStorageRefresh(const CommonOptions& options);

}  // namespace onehpc

#endif  // ONEHPC_CLI_COMMANDS_H_
