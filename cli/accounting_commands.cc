// The accounting dump and restore (one-hpc-accounting-dump.service, an operator): on the
// Open OnDemand portal, and on a OneSlurm controller with accounting on.
#include "cli/commands.h"
#include "common/log.h"
#include "roles/configure.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/role_change.h"
#include "roles/slurm/accounting.h"

namespace onehpc {
namespace {

// The options, with the dump directory of this VM's role unless --backup-dir names one.
Result<slurm::AccountingOptions> ToAccountingOptions(const AccountingCliOptions& cli) {
  slurm::AccountingOptions options;
  options.backup_dir = cli.backup_dir;
  if (options.backup_dir.empty()) {
    auto record = ReadRoleRecord(Files(""));
    if (!record) return Fail(record.error());
    const std::string role = record->has_value() ? (*record)->role : "";
    options.backup_dir = slurm::AccountingDumpDir(role);
    if (options.backup_dir.empty()) {
      return Fail(ErrorKind::kInvalidInput,
                  "this VM " +
                      (role.empty() ? std::string("was never configured")
                                    : "is the " + role + ", which keeps no accounting") +
                      " (" + kRoleRecordFile + "): pass --backup-dir");
    }
  }
  options.database = cli.database;
  options.keep = cli.keep;
  if (!cli.socket.empty()) options.connection.push_back("--socket=" + cli.socket);
  return options;
}

}  // namespace

int CmdAccountingDump(const AccountingCliOptions& cli) {
  auto options = ToAccountingOptions(cli);
  if (!options) {
    log::Error("{}", options.error().message);
    return ExitCodeFor(options.error().kind);
  }
  RealProcessRunner runner;
  auto dumped = slurm::DumpAccounting(*options, runner, std::chrono::system_clock::now());
  if (!dumped) {
    log::Error("{}", dumped.error().message);
    return ExitCodeFor(dumped.error().kind);
  }
  return kExitOk;
}

int CmdAccountingRestore(const AccountingCliOptions& cli) {
  auto options = ToAccountingOptions(cli);
  if (!options) {
    log::Error("{}", options.error().message);
    return ExitCodeFor(options.error().kind);
  }
  RealProcessRunner runner;
  auto restored = slurm::RestoreNewestComplete(*options, runner);
  if (!restored) {
    log::Error("{}", restored.error().message);
    return ExitCodeFor(restored.error().kind);
  }
  return kExitOk;
}

}  // namespace onehpc
