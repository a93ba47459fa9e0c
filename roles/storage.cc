#include "roles/storage.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "common/log.h"
#include "roles/disk/home_mount.h"
#include "roles/ensure.h"
#include "roles/host/container.h"
#include "roles/nfs/exports.h"
#include "roles/ood/settings.h"
#include "roles/squid/cvmfs_proxy.h"

namespace onehpc {
namespace {

constexpr char kHomeNfsEnabled[] = "ONEAPP_HOME_NFS_ENABLED";
constexpr char kNfsServer[] = "nfs-server.service";

class StorageRole : public Role {
 public:
  explicit StorageRole(StorageOptions options) : options_(std::move(options)) {}
  std::string Name() const override { return ood::kStorageRole; }
  std::string Service() const override { return ood::kServiceName; }
  std::string Summary() const override {
    return "Open OnDemand storage: homes on the ood-home disk, NFS exports of homes, Slurm "
           "state and software, export refresher, CernVM-FS proxy (Squid)";
  }
  std::vector<SettingSpec> Settings() const override { return StorageSettings(); }

  Status Configure(RoleEnv& env) override {
    // The compute NIC, the disk list and the portal's addresses all come from the extended
    // service document: one read for the whole configure.
    std::optional<OneGateClient::OneServiceRead> one_read;
    if (env.onegate != nullptr) one_read.emplace(*env.onegate);
    std::string how;
    auto net = ComputeNetworkOf(env, &how);
    if (!net) return Fail(net.error());
    // The software-cache inputs are checked before anything changes.
    if (auto url = squid::SiteProxyUrl(env.settings); !url) return Fail(url.error());
    bool external_home = env.settings.GetBool(kHomeNfsEnabled);
    log::Info("storage: compute network {} ({}); homes {}", *net, how,
              external_home ? "on the site's NFS server (ONEAPP_HOME_NFS_ENABLED)"
                            : "served from this VM");

    if (auto s = EnsureDirectory(env, ood::kSlurmExport, 0755, std::nullopt,
                                 "the portal keeps the Slurm controller state there");
        !s) {
      return s;
    }
    if (auto s = EnsureDirectory(env, ood::kSoftwareExport, 0755, std::nullopt,
                                 "the software tree for the compute network");
        !s) {
      return s;
    }
    const bool container = host::InContainer(env.files);
    auto home_on_disk = EnsureHomes(env, external_home, container);
    if (!home_on_disk) return Fail(home_on_disk.error());
    if (*home_on_disk) {
      if (auto s = disk::EnsureSlurmStateOnHomeDisk(env, options_.state); !s) return s;
    } else {
      env.plan.Keep(std::string("the Slurm state in ") + ood::kSlurmExport + " on the root disk",
                    external_home ? "the homes are on the site's server: no disk is used here"
                                  : "no ood-home disk: the homes are on the root disk too");
    }

    // Exports: the portal's compute address and the service's other VMs' from OneGate; on
    // failure the last good lists.
    nfs::ExportsConfig config;
    config.compute_net = *net;
    config.export_home = !external_home;
    config.home_on_disk = *home_on_disk;
    nfs::ExportClientsOrLastGood(config, env.files, env.onegate);

    // Order matters on a first boot: the exports exist before nfs-server starts (its
    // ExecStartPre runs exportfs -r); later runs re-export only when the file changed.
    bool live = options_.exportfs_under_root || env.files.root().empty() || env.files.root() == "/";
    auto changed = nfs::EnsureExports(env.plan, env.files, env.runner, config, false, live);
    if (!changed) return Fail(changed.error());
    if (auto s = EnsureNfsServer(env, container); !s) return s;
    if (auto s =
            EnsureUnitEnabled(env, ood::kExportsRefreshTimer, "timers.target",
                              "keeps the exports' clients (the portal, the service's VMs) current");
        !s) {
      return s;
    }
    if (auto s = EnsureUnitRunning(env, ood::kExportsRefreshTimer, false, "",
                                   "re-reads the service document every 20 s");
        !s) {
      return s;
    }
    // The software cache: Squid for CernVM-FS, unless the site's proxy is used.
    return squid::EnsureCvmfsProxy(env, *net);
  }

 private:
  // The CIDR of the compute NIC. When only OneGate could tell which NIC that is and OneGate
  // does not answer (down at a reboot), the network the last configure chose, as long as one
  // of this VM's NICs is still on it: the exports never move to another network on their own.
  static Result<std::string> ComputeNetworkOf(RoleEnv& env, std::string* how) {
    const std::string setting = env.settings.GetString(host::kComputeNetworkSetting);
    auto nic = host::FindComputeNic(env.context.vars, setting, env.onegate);
    if (nic) {
      *how = nic->how;
      return nfs::ComputeNetwork(nic->nic);
    }
    const bool onegate_failed = nic.error().kind == ErrorKind::kNetwork;
    if (onegate_failed) {
      if (auto text = env.files.ReadIfExists(nfs::kStateFile); text && text->has_value()) {
        if (auto state = nfs::ParseStateJson(**text); state && !state->compute_net.empty()) {
          for (const auto& c : host::ContextNics(env.context.vars)) {
            if (nfs::CidrContains(state->compute_net, c.ip)) {
              log::Warn("storage: {}; keeping the compute network of the last configure, {}",
                        nic.error().message, state->compute_net);
              *how = "the last configure's, ETH" + std::to_string(c.index) +
                     " (OneGate did not answer)";
              return state->compute_net;
            }
          }
        }
      }
    }
    return Fail(nic.error());
  }

  // Where the homes live: the site's server (nothing looked at), the root filesystem (in a
  // container), or the ood-home disk. Returns whether they are on a mounted data disk.
  Result<bool> EnsureHomes(RoleEnv& env, bool external_home, bool container) {
    if (external_home) {
      env.plan.Keep("home disk", std::string(kHomeNfsEnabled) +
                                     "=YES: the homes live on the site's NFS server; no disk "
                                     "is looked at and /export/home is not exported");
    } else {
      if (auto s = EnsureDirectory(env, ood::kHomeExport, 0755, std::nullopt,
                                   "the users' home directories");
          !s) {
        return Fail(s.error());
      }
      if (container) {
        // A container sees the host's block devices: never probe, format or mount them.
        log::Warn(
            "storage: in a container ({}): no block device is looked at (they are the "
            "host's); the homes stay in {} on the root filesystem",
            host::kContainerMarker, ood::kHomeExport);
        env.plan.Keep(std::string("homes in ") + ood::kHomeExport + " on the root filesystem",
                      "in a container the block devices in view are the host's");
      } else {
        auto on_disk = disk::EnsureHomeDisk(env, options_);
        if (!on_disk) return Fail(on_disk.error());
        return *on_disk;
      }
    }
    return false;
  }

  Status EnsureNfsServer(RoleEnv& env, bool container) {
    if (container) {
      log::Warn("storage: {} is neither enabled nor started: {}", kNfsServer,
                nfs::kContainerTransport);
      env.plan.Keep(kNfsServer, std::string("not enabled or started: ") + nfs::kContainerTransport);
    } else {
      if (auto s = EnsureUnitEnabled(env, kNfsServer, "multi-user.target",
                                     "the NFS server must come back after a reboot");
          !s) {
        return s;
      }
      if (auto s = EnsureUnitRunning(env, kNfsServer, false, "",
                                     "serves the homes, the Slurm state and the software");
          !s) {
        return s;
      }
    }
    return Ok();
  }

  StorageOptions options_;
};

}  // namespace

std::vector<SettingSpec> StorageSettings() {
  SettingSpec home;
  home.name = kHomeNfsEnabled;
  home.type = SettingType::kBool;
  home.default_value = "NO";
  home.description =
      "The homes live on the site's NFS server (ONEAPP_HOME_NFS_SERVER): the portal and the "
      "workers mount it, and the storage role neither looks at a disk nor exports /export/home "
      "(the Slurm state and software exports still run).";
  home.roles = {ood::kStorageRole};
  SettingSpec volatile_disk;
  volatile_disk.name = disk::kHomeDiskVolatileSetting;
  volatile_disk.type = SettingType::kBool;
  volatile_disk.default_value = "NO";
  volatile_disk.description =
      "Let a blank volatile disk (or a non-persistent image) hold the homes. By default only a "
      "persistent datablock is formatted (the one whose image is named ood-home, else the only "
      "persistent one, as OneGate lists this VM's disks): a volatile disk is deleted with the "
      "VM, and the homes with it.";
  volatile_disk.roles = {ood::kStorageRole};
  std::vector<SettingSpec> specs = {home, volatile_disk, ood::ComputeNetworkSetting()};
  for (auto& spec : squid::SoftwareProxySettings({ood::kStorageRole})) specs.push_back(spec);
  return specs;
}

std::unique_ptr<Role> MakeStorageRole() { return MakeStorageRole(StorageOptions{}); }
std::unique_ptr<Role> MakeStorageRole(StorageOptions options) {
  return std::make_unique<StorageRole>(std::move(options));
}

}  // namespace onehpc
