// Slurm accounting: MariaDB and slurmdbd on the controller's host, dumps of the database every
// 30 minutes, and the restore of the newest complete one into an empty database. One
// implementation for two services: the Open OnDemand portal (always; the dumps are on the
// storage role's state export, so a replaced portal gets its accounting back) and the OneSlurm
// controller (ONEAPP_SLURM_ACCOUNTING_ENABLED=YES; the dumps stay on its own disk, for the
// operator to copy off or to load into a rebuilt database).
//
// Dump: `mariadb-dump --single-transaction --result-file=<temp>` (argv, timeout; the
// credentials come from the client's option files or the unix-socket login, never from the
// command line) to `.<name>.tmp` in the backup directory; kept only if its last line is
// mariadb-dump's `-- Dump completed ...` trailer; fsync, chmod 0600, atomic rename to
// `<db>-<YYYYmmddTHHMMSSZ>.sql`, fsync of the directory; then only the `keep` newest dumps
// (by the timestamp in the name) are kept.
// Restore: only when the database has no table; the dumps are tried newest first, and one
// without the trailer (truncated: the VM died mid-dump, the disk filled) is skipped for
// the previous complete one; a failed load of a complete dump is an error.
#ifndef ONEHPC_ROLES_SLURM_ACCOUNTING_H_
#define ONEHPC_ROLES_SLURM_ACCOUNTING_H_

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "roles/os/process.h"

namespace onehpc {
struct RoleEnv;
}

namespace onehpc::slurm {

inline constexpr const char* kDumpCompleted = "-- Dump completed";
/// The OneSlurm controller's dump directory (on its own disk).
inline constexpr char kControllerDumpDir[] = "/var/lib/one-hpc/accounting-dumps";
/// The portal's dump directory (on the state export).
inline constexpr char kPortalDumpDir[] = "/var/lib/one-hpc/portal-state/accounting";

/// The dump directory of the role a VM was configured as ("" when that role keeps no
/// accounting: `one-hpc accounting-dump` then needs --backup-dir).
std::string AccountingDumpDir(const std::string& role);
/// The restore marker (AccountingOptions::restore_marker) on the portal.
inline constexpr char kRestoreMarker[] = "/var/lib/one-hpc/accounting-restore";

struct AccountingOptions {
  std::string dump_program = "mariadb-dump";
  std::string client_program = "mariadb";
  /// Connection options for both programs, e.g. {"--socket=/run/mysqld/mysqld.sock"}.
  /// Never a password: use an option file (--defaults-extra-file=...) for that.
  std::vector<std::string> connection;
  std::string database = "slurm_acct_db";
  std::string backup_dir;  ///< host path of the backup directory on the export
  int keep = 48;           ///< newest complete dumps kept
  /// Host path of the restore marker, next to the database on this VM's disk: it names the
  /// dump being loaded while a restore runs. Present at the next start = that restore was
  /// interrupted: the partial database (ours: the marker is only written before loading into
  /// an empty one) is dropped and loaded again from the same dump; no dump is taken meanwhile.
  std::string restore_marker = kRestoreMarker;
  Duration dump_timeout{15 * 60 * 1000};
  /// Inside one-hpc-configure.service's TimeoutStartSec (20 min) with room for the rest; a
  /// restore that takes longer is redone at the next boot (the marker), never left partial.
  Duration restore_timeout{12 * 60 * 1000};
};

/// `<db>-YYYYmmddTHHMMSSZ.sql` for a UTC time.
std::string DumpFileName(const std::string& database, std::chrono::system_clock::time_point when);

/// True if `text` (a dump's end) ends with mariadb-dump's completion trailer line.
bool HasCompletionTrailer(const std::string& tail);

/// Dumps the database; returns the path of the new dump. Refused (kUnsafe) while the restore
/// marker exists: the database is partial.
Result<std::string> DumpAccounting(const AccountingOptions& options, ProcessRunner& runner,
                                   std::chrono::system_clock::time_point now);

/// The dump files in the backup directory, newest first (by name).
Result<std::vector<std::string>> ListDumps(const AccountingOptions& options);

/// Removes all but the `keep` newest dumps, never the newest complete one (a dump whose end
/// has the completion trailer); returns the removed paths.
Result<std::vector<std::string>> PruneDumps(const AccountingOptions& options);

/// If the database has no table, loads the newest complete dump (the restore marker written
/// before, removed after). If the marker says a restore was interrupted, the partial
/// database is dropped and the marker's dump loaded again (or the newest complete one when
/// that dump is gone). Returns the restored path, or nullopt if nothing was done (database
/// not empty, or no complete dump).
Result<std::optional<std::string>> RestoreNewestComplete(const AccountingOptions& options,
                                                         ProcessRunner& runner);

/// MariaDB, the accounting database and its user (a generated password, only in
/// slurmdbd.conf), the restore of the newest complete dump in `backup_dir` into an empty
/// database (a replaced portal), then slurmdbd. `backup_dir` must exist.
Status SetUpAccounting(RoleEnv& env, const std::string& backup_dir);

/// The dump timer enabled and running (after EnsureClusterRegistered).
Status EnsureAccountingDumps(RoleEnv& env);

/// `cluster` in the accounting database (sacctmgr reads slurm.conf to find slurmdbd, so this
/// runs after the controller is set up).
Status EnsureClusterRegistered(RoleEnv& env, const std::string& cluster);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_ACCOUNTING_H_
