#include "roles/portal.h"

#include <algorithm>

#include "common/log.h"
#include "common/retry.h"
#include "roles/controller.h"
#include "roles/nfs/client_mounts.h"
#include "roles/ood/accounting.h"
#include "roles/ood/accounts.h"
#include "roles/ood/ood_yaml.h"
#include "roles/ood/settings.h"
#include "roles/ood/users.h"
#include "roles/slurm/address.h"
#include "roles/slurm/hosts.h"
#include "roles/slurm/munge.h"
#include "roles/slurm/protocol.h"
#include "roles/slurm/slurm_conf.h"
#include "roles/slurm/units.h"

namespace onehpc {
namespace {

constexpr char kMariaDbUnit[] = "mariadb.service";
constexpr char kSlurmdbdUnit[] = "slurmdbd.service";
constexpr char kSlurmdbdConf[] = "/etc/slurm/slurmdbd.conf";
constexpr char kAccountingDb[] = "slurm_acct_db";
constexpr char kPamService[] = "/etc/pam.d/ood";
constexpr Duration kMountTimeout{180000};
constexpr Duration kRootWriteDeadline{180000};
constexpr Duration kDaemonTimeout{90000};

const FileOwner kSlurmOwner{"slurm", "slurm"};

std::string StatePath(const std::string& rel) { return std::string(kPortalStateDir) + "/" + rel; }

// A directory through the plan unless it exists (its content and mode are then kept).
Status EnsureDirectory(RoleEnv& env, const std::string& path, const std::string& mode,
                       const std::string& owner, const std::string& why) {
  if (env.files.Exists(path)) {
    env.plan.Keep(path, "exists; kept");
    return Ok();
  }
  return env.plan.Do("create " + path + " (" + owner + ", " + mode + ")", why, [&]() -> Status {
    Command c;
    c.argv = {"install", "-d", "-o", owner, "-g", owner, "-m", mode, env.files.HostPath(path)};
    c.timeout = Duration(30000);  // on NFS
    auto r = RunChecked(env.runner, c);
    if (!r) return Fail(r.error());
    return Ok();
  });
}

// Runs SQL through the mariadb client as root (unix socket); the text goes on stdin, so a
// password in it never reaches a command line.
Result<std::string> RunSql(RoleEnv& env, const std::string& sql,
                           const std::vector<std::string>& secrets = {}) {
  Command c;
  c.argv = {"mariadb", "--batch", "--skip-column-names"};
  c.stdin_data = sql;
  c.secrets = secrets;
  c.timeout = Duration(60000);
  auto r = RunChecked(env.runner, c);
  if (!r) return Fail(r.error());
  return r->out;
}

// The StoragePass= of an existing slurmdbd.conf ("" when none).
std::string ExistingDbPassword(const std::string& conf) {
  auto v = slurm::SlurmConfValue(conf, "StoragePass");
  return v ? *v : std::string();
}

std::string RenderSlurmdbdConf(const std::string& password) {
  return "# Written by one-hpc (Open OnDemand portal) at every configure; local edits are\n"
         "# overwritten. The database is dumped to the state export every 30 minutes.\n"
         "AuthType=auth/munge\n"
         "DbdHost=localhost\n"
         "DbdPort=6819\n"
         "SlurmUser=slurm\n"
         "PidFile=/run/slurmdbd.pid\n"
         "StorageType=accounting_storage/mysql\n"
         "StorageHost=localhost\n"
         "StorageLoc=" + std::string(kAccountingDb) + "\n"
         "StorageUser=slurm\n"
         "StoragePass=" + password + "\n";
}

// MariaDB, the accounting database and its user, the restore of the newest complete dump
// into an empty database (a replaced portal), then slurmdbd.
Status SetUpAccounting(RoleEnv& env) {
  if (auto s = slurm::EnsureUnitEnabled(env, kMariaDbUnit, "multi-user.target",
                                        "the Slurm accounting database");
      !s) {
    return s;
  }
  if (auto s = slurm::EnsureUnitRunning(env, kMariaDbUnit, false, "", "slurmdbd stores there");
      !s) {
    return s;
  }
  if (!env.plan.dry_run()) {
    if (auto w = env.systemd.WaitActive(kMariaDbUnit, kDaemonTimeout, env.clock); !w) return w;
  }

  auto current = env.files.ReadIfExists(kSlurmdbdConf);
  if (!current) return Fail(current.error());
  std::string password = current->has_value() ? ExistingDbPassword(**current) : "";
  bool new_password = password.empty();
  if (new_password) {
    auto bytes = slurm::RandomBytes(24);
    if (!bytes) return Fail(bytes.error());
    static const char* kHex = "0123456789abcdef";
    for (unsigned char c : *bytes) {
      password += kHex[c >> 4];
      password += kHex[c & 15];
    }
  }
  log::AddSecret(password);

  bool ready = false;
  if (!env.plan.dry_run()) {
    auto probe = RunSql(env,
                        "SELECT (SELECT COUNT(*) FROM information_schema.schemata WHERE "
                        "schema_name='" + std::string(kAccountingDb) + "'), (SELECT COUNT(*) FROM "
                        "mysql.global_priv WHERE User='slurm' AND Host='localhost');\n");
    if (!probe) return Fail(probe.error().WithContext("MariaDB does not answer"));
    std::string p = *probe;
    p.erase(std::remove_if(p.begin(), p.end(), [](char c) { return c == '\n' || c == '\r'; }),
            p.end());
    ready = p == "1\t1" && !new_password;
  }
  if (ready) {
    env.plan.Keep("database " + std::string(kAccountingDb) + " and user slurm@localhost",
                  "exist; the password in " + std::string(kSlurmdbdConf) + " is kept");
  } else {
    auto s = env.plan.Do(
        "create database " + std::string(kAccountingDb) + " and user slurm@localhost",
        "slurmdbd stores the job accounting there (SQL on the client's stdin)", [&]() -> Status {
          std::string sql = "CREATE DATABASE IF NOT EXISTS " + std::string(kAccountingDb) +
                            ";\nCREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '" +
                            password + "';\nALTER USER 'slurm'@'localhost' IDENTIFIED BY '" +
                            password + "';\nGRANT ALL ON " + kAccountingDb +
                            ".* TO 'slurm'@'localhost';\n";
          auto r = RunSql(env, sql, {password});
          if (!r) return Fail(r.error());
          return Ok();
        });
    if (!s) return s;
  }

  // Before slurmdbd ever starts on this VM: it would create empty tables, and an empty
  // database is what tells a replaced portal to restore.
  ood::AccountingOptions options;
  options.database = kAccountingDb;
  options.backup_dir = env.files.HostPath(StatePath("accounting"));
  if (env.plan.dry_run()) {
    env.plan.Keep("restore of " + std::string(kAccountingDb),
                  "checked at configure: the newest complete dump is loaded when the "
                  "database has no table");
  } else {
    auto restored = ood::RestoreNewestComplete(options, env.runner);
    if (!restored) {
      return Fail(restored.error().WithContext("restoring the accounting database"));
    }
    if (restored->has_value()) {
      env.plan.Do("restored " + std::string(kAccountingDb) + " from " + **restored,
                  "the database was empty (a new portal) and the state export holds a dump",
                  [] { return Ok(); });
    } else {
      env.plan.Keep(kAccountingDb, "not empty, or no complete dump to restore");
    }
  }

  bool conf_changed = !current->has_value() || **current != RenderSlurmdbdConf(password);
  if (auto s = EnsureFile(env, kSlurmdbdConf, RenderSlurmdbdConf(password), 0600, kSlurmOwner,
                          "slurmdbd: the accounting database on this host");
      !s) {
    return s;
  }
  if (auto s = slurm::EnsureUnitEnabled(env, kSlurmdbdUnit, "multi-user.target",
                                        "Slurm's accounting daemon");
      !s) {
    return s;
  }
  if (auto s = slurm::EnsureUnitRunning(env, kSlurmdbdUnit, conf_changed && current->has_value(),
                                        "slurmdbd.conf changed", "slurmctld sends job records");
      !s) {
    return s;
  }
  if (!env.plan.dry_run()) {
    if (auto w = env.systemd.WaitActive(kSlurmdbdUnit, kDaemonTimeout, env.clock); !w) return w;
  }
  return Ok();
}

// The service's cluster in the accounting database (sacctmgr reads slurm.conf to find
// slurmdbd, so this runs after the controller is set up).
Status EnsureClusterRegistered(RoleEnv& env) {
  if (env.plan.dry_run()) {
    env.plan.Keep("cluster " + std::string(kOodClusterName) + " in the accounting database",
                  "checked at configure");
    return Ok();
  }
  auto listed = Retry<std::string>(
      RetryPolicy::Until(kDaemonTimeout), env.clock, "waiting for slurmdbd to answer sacctmgr",
      [](const Error&) { return true; }, [&]() -> Result<std::string> {
        Command c;
        c.argv = {"sacctmgr", "--noheader", "--parsable2", "list", "cluster", "format=cluster"};
        c.timeout = Duration(20000);
        auto r = RunChecked(env.runner, c);
        if (!r) return Fail(r.error());
        return r->out;
      });
  if (!listed) return Fail(listed.error().WithContext("slurmdbd does not answer"));
  bool registered = false;
  for (size_t b = 0; b < listed->size();) {
    size_t e = listed->find('\n', b);
    if (e == std::string::npos) e = listed->size();
    registered = registered || listed->compare(b, e - b, kOodClusterName) == 0;
    b = e + 1;
  }
  if (registered) {
    env.plan.Keep("cluster " + std::string(kOodClusterName), "registered in the accounting database");
    return Ok();
  }
  return env.plan.Do("sacctmgr add cluster " + std::string(kOodClusterName),
                     "job records of this cluster go to the accounting database",
                     [&]() -> Status {
                       Command c;
                       c.argv = {"sacctmgr", "--immediate", "add", "cluster", kOodClusterName};
                       c.timeout = Duration(30000);
                       auto r = RunChecked(env.runner, c);
                       if (!r) return Fail(r.error());
                       return Ok();
                     });
}

Status WriteOodConfig(RoleEnv& env, const std::string& servername,
                      const std::vector<ood::ClusterYamlInput>& clusters) {
  ood::PortalYamlInput portal;
  portal.servername = servername;
  auto yaml = ood::RenderPortalYaml(portal);
  if (!yaml) return Fail(yaml.error());
  if (auto s = EnsureFile(env, std::string(ood::kOodConfigDir) + "/ood_portal.yml", *yaml, 0600,
                          std::nullopt, "Open OnDemand's portal (Apache) configuration");
      !s) {
    return s;
  }
  if (auto s = EnsureFile(env, kPamService,
                          "# Written by one-hpc: Open OnDemand authenticates the local users\n"
                          "@include common-auth\n@include common-account\n",
                          0644, std::nullopt, "the portal's login checks the local accounts");
      !s) {
    return s;
  }
  std::string dir = std::string(ood::kOodConfigDir) + "/clusters.d";
  for (const auto& c : clusters) {
    auto text = ood::RenderClusterYaml(c);
    if (!text) return Fail(text.error());
    if (auto s = EnsureFile(env, dir + "/" + c.id + ".yml", *text, 0644, std::nullopt,
                            "Open OnDemand cluster '" + c.id + "'");
        !s) {
      return s;
    }
  }
  // A site cluster switched off: its file goes (it is ours: one-hpc names it).
  std::string site = dir + "/" + env.settings.GetString(ood::kSiteSlurmCluster) + ".yml";
  bool listed = std::any_of(clusters.begin(), clusters.end(), [&](const auto& c) {
    return dir + "/" + c.id + ".yml" == site;
  });
  if (!listed && env.files.Exists(site)) {
    return env.plan.Do("remove " + site, std::string(ood::kSiteSlurmEnabled) + " is NO",
                       [&] { return env.files.Remove(site); });
  }
  return Ok();
}

class PortalRole : public Role {
 public:
  std::string Name() const override { return ood::kPortalRole; }
  std::string Service() const override { return "Open OnDemand"; }
  std::string Summary() const override {
    return "Open OnDemand portal: homes and Slurm state on NFS, local users, slurmctld, "
           "accounting with dumps, node reconciler";
  }
  std::vector<SettingSpec> Settings() const override { return ood::PortalSettings(); }

  Status Configure(RoleEnv& env) override {
    // ---- every input is checked before anything changes
    auto home = ood::HomeSourceFrom(env.settings);
    if (!home) return Fail(home.error());
    const std::string nfs_host = env.settings.GetString(ood::kNfsHost);
    const std::string users_text = env.settings.GetString(ood::kLocalUsersVar);
    if (auto early = ood::ParseLocalUsers(users_text); !early) return Fail(early.error());
    std::string host = kPortalDefaultHostname;
    if (!env.Var("SET_HOSTNAME").empty()) {
      auto h = slurm::ShortNameFromSetHostname(env.Var("SET_HOSTNAME"));
      if (!h) return Fail(h.error());
      host = *h;
    }
    auto addr = ComputeAddress(env.context.vars);
    if (!addr) return Fail(addr.error());
    auto nics = slurm::ContextNics(env.context.vars);
    std::string servername = env.settings.GetString(ood::kPortalHostName);
    if (servername.empty()) servername = nics.front().ip;
    ood::ClusterYamlInput own;
    own.id = ood::kOwnClusterId;
    own.title = "Open OnDemand cluster";
    auto clusters = ood::ClustersFromSettings(env.settings, own);
    if (!clusters) return Fail(clusters.error());
    log::Info("portal: host {} on {} (compute network); homes from {}:{}{}; state from {}:{}",
              host, *addr, home->server, home->export_path,
              home->external ? " (the site's server)" : "", nfs_host, kPortalStateExport);

    if (auto s = slurm::EnsureHostname(env, host, "SlurmctldHost is the portal's host name");
        !s) {
      return s;
    }
    if (auto s = slurm::EnsureHostsBlock(env, {{*addr, host}},
                                         "the portal's name resolves to its compute address");
        !s) {
      return s;
    }

    // ---- the shared file systems
    nfs::NfsMount state{nfs_host,
                        kPortalStateExport,
                        kPortalStateDir,
                        "the Slurm state, the munge key and the accounting dumps",
                        ood::kNfsHost,
                        "slurmctld's state and the munge key are written as root"};
    nfs::NfsMount homes{home->server,     home->export_path,
                        kHomesDir,        "the users' homes",
                        home->setting,    "the portal creates each home as root at first login"};
    nfs::NfsMount software{nfs_host, kSoftwareExport, kSoftwareDir, "the software tree",
                           ood::kNfsHost};
    for (const auto* m : {&state, &homes, &software}) {
      if (auto s = nfs::EnsureNfsMount(env, *m, kMountTimeout); !s) return s;
    }
    if (!env.plan.dry_run()) {
      // Homes are created as root at first login; the state is written as root and slurm.
      for (const auto* m : {&state, &homes}) {
        if (auto s = nfs::CheckRootCanWrite(env, *m, kRootWriteDeadline); !s) return s;
      }
    }
    if (auto s = EnsureDirectory(env, StatePath("accounting"), "0700", "root",
                                 "dumps of the accounting database");
        !s) {
      return s;
    }

    // ---- users: names and uids are kept from this VM's accounts and from the owners of
    // the homes (a replaced portal, or a new service on the same disk)
    auto users = ood::ParsePortalUsers(env, users_text);
    if (!users) return Fail(users.error());
    if (auto s = ood::EnsureLocalAccounts(env, *users, ood::AccountMode::kPortal); !s) return s;

    // ---- munge (the key on the export), accounting, slurmctld
    auto key = slurm::EnsureSharedMungeKey(env, StatePath("munge.key"));
    if (!key) return Fail(key.error());
    if (auto s = slurm::EnsureMungeRunning(env, key->changed); !s) return s;
    if (auto s = SetUpAccounting(env); !s) return s;

    ControllerSetup setup;
    setup.host = host;
    setup.addr = *addr;
    setup.max_nodes = static_cast<int>(env.settings.GetInt("ONEAPP_SLURM_MAX_NODES"));
    setup.cluster_name = kOodClusterName;
    setup.state_save_location = StatePath("state");
    setup.shared_munge_key = StatePath("munge.key");
    setup.requires_mounts = {kPortalStateDir};
    setup.accounting = true;
    auto ctl_key = SetUpSlurmController(env, setup);
    if (!ctl_key) return Fail(ctl_key.error());
    if (auto s = EnsureClusterRegistered(env); !s) return s;

    if (auto s = slurm::EnsureUnitEnabled(env, kAccountingDumpTimer, "timers.target",
                                          "dumps the accounting database to the state export "
                                          "every 30 minutes");
        !s) {
      return s;
    }
    if (auto s = slurm::EnsureUnitRunning(env, kAccountingDumpTimer, false, "",
                                          "a replaced portal restores the newest dump");
        !s) {
      return s;
    }

    if (auto s = WriteOodConfig(env, servername, *clusters); !s) return s;

    if (auto s = PublishController(env, host, *addr, *ctl_key); !s) return s;
    // Always published (OneGate cannot hold an empty value: "none" means no user), so that
    // a worker never reads "not published" as "every user was removed".
    std::string table = ood::FormatUserTable(*users);
    if (env.publish != nullptr) {
      env.publish->emplace_back(ood::kAttrUserTable, table.empty() ? ood::kNoUsers : table);
    }
    return Ok();
  }
};

}  // namespace

Result<std::string> ComputeAddress(const ContextVars& vars) {
  auto nics = slurm::ContextNics(vars);
  if (nics.empty()) {
    return Fail(ErrorKind::kInvalidInput,
                "the context has no ETHn_IP: an Open OnDemand VM needs its compute network "
                "(NETWORK=YES in CONTEXT)");
  }
  return nics.back().ip;
}

std::unique_ptr<Role> MakePortalRole() { return std::make_unique<PortalRole>(); }

}  // namespace onehpc
