#include "roles/portal.h"

#include <algorithm>

#include "common/log.h"
#include "roles/ensure.h"
#include "roles/host/address.h"
#include "roles/host/hostname.h"
#include "roles/names.h"
#include "roles/nfs/client_mounts.h"
#include "roles/ood/accounts.h"
#include "roles/ood/certificate.h"
#include "roles/ood/interactive_apps.h"
#include "roles/ood/ood_yaml.h"
#include "roles/ood/portal_login.h"
#include "roles/ood/portal_web.h"
#include "roles/ood/settings.h"
#include "roles/ood/users.h"
#include "roles/slurm/accounting.h"
#include "roles/slurm/controller_setup.h"
#include "roles/slurm/munge.h"
#include "roles/slurm/slurm_conf.h"

namespace onehpc {
namespace {

constexpr Duration kMountTimeout{180000};
// The storage VM adds a new portal to its no_root_squash clients at its next exports refresh
// (a replaced portal is squashed until then): retry for 3 minutes. The site's own server
// changes its exports only by hand: a squash there is permanent, so fail within 20 s (time
// for an `exportfs -ra` that is just running).
constexpr Duration kRootWriteDeadline{180000};
constexpr Duration kSiteRootWriteDeadline{20000};

std::string StatePath(const std::string& rel) {
  return std::string(ood::kPortalStateDir) + "/" + rel;
}

class PortalRole : public Role {
 public:
  std::string Name() const override { return ood::kPortalRole; }
  std::string Service() const override { return ood::kServiceName; }
  std::string Summary() const override {
    return "Open OnDemand portal: homes and Slurm state on NFS, local users, slurmctld, "
           "accounting with dumps, node reconciler";
  }
  std::vector<SettingSpec> Settings() const override { return ood::PortalSettings(); }

  Status Configure(RoleEnv& env) override {
    // ---- every input is checked before anything changes
    auto in = CheckInputs(env);
    if (!in) return Fail(in.error());
    log::Info("portal: host {} on {} (compute network); homes from {}:{}{}; state from {}:{}",
              in->host, in->addr, in->home.server, in->home.export_path,
              in->home.external ? " (the site's server)" : "", in->nfs_host, ood::kSlurmExport);

    if (auto s = host::EnsureHostname(env, in->host, "SlurmctldHost is the portal's host name");
        !s) {
      return s;
    }
    if (auto s = host::EnsureHostsBlock(env, {{in->addr, in->host}},
                                        "the portal's name resolves to its compute address");
        !s) {
      return s;
    }
    // Open OnDemand's /node and /rnode follow the workers' names (the reconciler's block of
    // /etc/hosts): no answer from the link may stand in for a missing one.
    if (auto s = host::EnsureNoMulticastNames(
            env, "the portal proxies to its workers by name: no LLMNR or mDNS answer");
        !s) {
      return s;
    }
    if (auto s = MountSharedFileSystems(env, *in); !s) return s;

    // ---- users: names and uids are kept from this VM's accounts and from the owners of
    // the homes (a replaced portal, or a new service on the same disk)
    auto users = ood::ParsePortalUsers(env, in->users_text);
    if (!users) return Fail(users.error());
    if (auto s = ood::EnsureLocalAccounts(env, *users, ood::AccountMode::kPortal); !s) return s;
    if (auto s = ood::RecordUids(env, *users); !s) return s;

    auto key = SetUpSlurm(env, *in);
    if (!key) return Fail(key.error());
    // ---- the web front: the certificate (kept on the state export), the login, Open
    // OnDemand's configuration, then Apache (restarted only when what it serves changed)
    const size_t web = env.plan.Mark();
    if (auto s =
            ood::EnsurePortalCertificate(env, in->servername, in->public_ip, ood::kPortalStateDir);
        !s) {
      return s;
    }
    auto jail_changed = ood::EnsurePortalLogin(env, *users, in->login);
    if (!jail_changed) return Fail(jail_changed.error());
    const bool served_changed = env.plan.ChangedSince(web);
    if (auto s = ood::WriteOodConfig(env, in->servername, in->login, in->clusters); !s) return s;
    if (auto s = ood::PinInteractiveApps(env, ood::kOwnClusterId); !s) return s;
    if (auto s =
            ood::ServeOpenOnDemand(env, in->servername, in->login, served_changed, *jail_changed);
        !s) {
      return s;
    }

    if (auto s = PublishController(env, in->host, in->addr, *key); !s) return s;
    // Always published (OneGate cannot hold an empty value: "none" means no user), so that
    // a worker never reads "not published" as "every user was removed".
    std::string table = ood::FormatUserTable(*users);
    if (env.publish != nullptr) {
      env.publish->emplace_back(ood::kAttrUserTable, table.empty() ? ood::kNoUsers : table);
    }
    return Ok();
  }

 private:
  struct Inputs {
    ood::HomeSource home;
    std::string nfs_host;
    std::string users_text;
    ood::PortalLogin login;
    std::string host = kPortalDefaultHostname;
    std::string addr;        ///< compute address
    std::string servername;  ///< the public name of the portal
    std::string public_ip;   ///< the first NIC's address (in the self-signed certificate)
    std::vector<ood::ClusterYamlInput> clusters;
  };

 public:
  Status RotateMungeKey(RoleEnv& env) override {
    auto in = CheckInputs(env);
    if (!in) return Fail(in.error());
    // The key's home is the state export: never write it into an empty mount point.
    if (!env.files.Exists(StatePath("munge.key"))) {
      return Fail(ErrorKind::kUnsafe, StatePath("munge.key") +
                                          " is missing: the state export is not mounted, or the "
                                          "portal was never configured");
    }
    return RotateControllerMungeKey(env, in->host, StatePath("munge.key"));
  }

 private:
  static Result<Inputs> CheckInputs(RoleEnv& env) {
    Inputs in;
    auto home = ood::HomeSourceFrom(env.settings);
    if (!home) return Fail(home.error());
    in.home = *home;
    in.nfs_host = env.settings.GetString(ood::kNfsHost);
    in.users_text = env.settings.GetString(ood::kLocalUsersVar);
    auto early = ood::ParseLocalUsers(in.users_text);
    if (!early) return Fail(early.error());
    if (!env.Var("SET_HOSTNAME").empty()) {
      auto h = host::ShortNameFromSetHostname(env.Var("SET_HOSTNAME"));
      if (!h) return Fail(h.error());
      in.host = *h;
    }
    auto nic = host::FindComputeNic(
        env.context.vars, env.settings.GetString(host::kComputeNetworkSetting), env.onegate);
    if (!nic) return Fail(nic.error());
    in.addr = nic->nic.ip;
    log::Info("portal: compute address {} ({})", in.addr, nic->how);
    in.public_ip = host::ContextNics(env.context.vars).front().ip;
    in.servername = env.settings.GetString(ood::kPortalHostName);
    if (in.servername.empty()) in.servername = in.public_ip;
    auto login = ood::PortalLoginFrom(env.settings, in.servername, *early);
    if (!login) return Fail(login.error());
    in.login = std::move(*login);
    ood::ClusterYamlInput own;
    own.id = ood::kOwnClusterId;
    own.title = "Open OnDemand cluster";
    auto clusters = ood::ClustersFromSettings(env.settings, own);
    if (!clusters) return Fail(clusters.error());
    in.clusters = std::move(*clusters);
    return in;
  }

  // The Slurm state, the homes and the software tree over NFS; root must be able to write
  // the first two.
  static Status MountSharedFileSystems(RoleEnv& env, const Inputs& in) {
    nfs::NfsMount state{
        in.nfs_host,          ood::kSlurmExport,
        ood::kPortalStateDir, "the Slurm state, the munge key and the accounting dumps",
        ood::kNfsHost,        "slurmctld's state and the munge key are written as root"};
    nfs::NfsMount homes{in.home.server,  in.home.export_path,
                        ood::kHomesDir,  "the users' homes",
                        in.home.setting, "the portal creates each home as root at first login"};
    nfs::NfsMount software{in.nfs_host,         ood::kSoftwareExport, ood::kSoftwareDir,
                           "the software tree", ood::kNfsHost,        ""};
    for (const auto* m : {&state, &homes, &software}) {
      if (auto s = nfs::EnsureNfsMount(env, *m, kMountTimeout); !s) return s;
    }
    if (!env.plan.dry_run()) {
      // Homes are created as root at first login; the state is written as root and slurm.
      for (const auto* m : {&state, &homes}) {
        const bool site = m == &homes && in.home.external;
        const Duration deadline = site ? kSiteRootWriteDeadline : kRootWriteDeadline;
        if (auto s = nfs::CheckRootCanWrite(env, *m, deadline); !s) return s;
      }
    }
    return Ok();
  }

  // munge (the key on the export), accounting (the dumps on the export) and slurmctld.
  static Result<ControllerKeys> SetUpSlurm(RoleEnv& env, const Inputs& in) {
    ControllerSetup setup;
    setup.host = in.host;
    setup.addr = in.addr;
    setup.max_nodes = static_cast<int>(env.settings.GetInt(kMaxNodesSetting));
    setup.cluster_name = kOodClusterName;
    setup.state_save_location = StatePath("state");
    setup.shared_munge_key = StatePath("munge.key");
    setup.requires_mounts = {ood::kPortalStateDir};
    setup.accounting_dumps = slurm::kPortalDumpDir;
    return SetUpSlurmController(env, setup);
  }
};

}  // namespace

std::unique_ptr<Role> MakePortalRole() { return std::make_unique<PortalRole>(); }

}  // namespace onehpc
