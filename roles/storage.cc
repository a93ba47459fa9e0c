#include "roles/storage.h"

#include <sys/stat.h>

#include <algorithm>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"
#include "roles/disk/mount_unit.h"
#include "roles/nfs/exports.h"
#include "roles/slurm/units.h"
#include "roles/squid/cvmfs_proxy.h"

namespace onehpc {
namespace {

constexpr char kHomeNfsEnabled[] = "ONEAPP_HOME_NFS_ENABLED";
constexpr char kNfsServer[] = "nfs-server.service";

Status EnsureDir(RoleEnv& env, const std::string& path, const std::string& why) {
  if (env.files.Exists(path)) {
    env.plan.Keep(path, "directory exists; its content is kept");
    return Ok();
  }
  return env.plan.Do("create " + path + " (0755)", why,
                     [&] { return env.files.MakeDirs(path, 0755); });
}

class StorageRole : public Role {
 public:
  explicit StorageRole(StorageOptions options) : options_(std::move(options)) {}
  std::string Name() const override { return kStorageRole; }
  std::string Service() const override { return kOpenOnDemandService; }
  std::string Summary() const override {
    return "Open OnDemand storage: homes on the ood-home disk, NFS exports of homes, Slurm "
           "state and software, export refresher, CernVM-FS proxy (Squid)";
  }
  std::vector<SettingSpec> Settings() const override { return StorageSettings(); }

  Status Configure(RoleEnv& env) override {
    auto net = nfs::ComputeNetwork(env.context.vars);
    if (!net) return Fail(net.error());
    // The software-cache inputs are checked before anything changes.
    if (auto url = squid::SiteProxyUrl(env.settings); !url) return Fail(url.error());
    bool external_home = env.settings.GetBool(kHomeNfsEnabled);
    log::Info("storage: compute network {}; homes {}", *net,
              external_home ? "on the site's NFS server (ONEAPP_HOME_NFS_ENABLED)"
                            : "served from this VM");

    if (auto s = EnsureDir(env, nfs::kSlurmExport,
                           "the portal keeps the Slurm controller state there (root disk)");
        !s) {
      return s;
    }
    if (auto s = EnsureDir(env, nfs::kSoftwareExport, "the software tree for the compute network");
        !s) {
      return s;
    }
    bool home_on_disk = false;
    const bool container = nfs::InContainer(env.files);
    if (external_home) {
      env.plan.Keep("home disk", std::string(kHomeNfsEnabled) +
                                     "=YES: the homes live on the site's NFS server; no disk "
                                     "is looked at and /export/home is not exported");
    } else {
      if (auto s = EnsureDir(env, disk::kHomeDir, "the users' home directories"); !s) return s;
      if (container) {
        // A container sees the host's block devices: never probe, format or mount them.
        log::Warn("storage: in a container ({}): no block device is looked at (they are the "
                  "host's); the homes stay in {} on the root filesystem",
                  nfs::kContainerMarker, disk::kHomeDir);
        env.plan.Keep(std::string("homes in ") + disk::kHomeDir + " on the root filesystem",
                      "in a container the block devices in view are the host's");
      } else {
        auto on_disk = EnsureHomeDisk(env);
        if (!on_disk) return Fail(on_disk.error());
        home_on_disk = *on_disk;
      }
    }

    // Exports: the portal's compute address from OneGate; on failure the last good list.
    nfs::ExportsConfig config;
    config.compute_net = *net;
    config.export_home = !external_home;
    config.home_on_disk = home_on_disk;
    config.portal_ips = PortalIps(env, *net);

    // Order matters on a first boot: the exports exist before nfs-server starts (its
    // ExecStartPre runs exportfs -r); later runs re-export only when the file changed.
    bool live = options_.exportfs_under_root || env.files.root().empty() ||
                env.files.root() == "/";
    auto changed = nfs::EnsureExports(env.plan, env.files, env.runner, config, false, live);
    if (!changed) return Fail(changed.error());
    if (container) {
      log::Warn("storage: {} is neither enabled nor started: {}", kNfsServer,
                nfs::kContainerTransport);
      env.plan.Keep(kNfsServer, std::string("not enabled or started: ") +
                                    nfs::kContainerTransport);
    } else {
      if (auto s = slurm::EnsureUnitEnabled(env, kNfsServer, "multi-user.target",
                                            "the NFS server must come back after a reboot");
          !s) {
        return s;
      }
      if (auto s = slurm::EnsureUnitRunning(env, kNfsServer, false, "",
                                            "serves the homes, the Slurm state and the software");
          !s) {
        return s;
      }
    }
    if (auto s = slurm::EnsureUnitEnabled(env, kExportsRefreshTimer, "timers.target",
                                          "keeps the portal's address in the exports current");
        !s) {
      return s;
    }
    if (auto s = slurm::EnsureUnitRunning(env, kExportsRefreshTimer, false, "",
                                          "re-reads the service document every 20 s");
        !s) {
      return s;
    }
    // The software cache: Squid for CernVM-FS, unless the site's proxy is used.
    return squid::EnsureCvmfsProxy(env, *net);
  }

 private:
  std::vector<std::string> PortalIps(RoleEnv& env, const std::string& net) {
    std::vector<std::string> last_good;
    if (auto text = env.files.ReadIfExists(nfs::kStateFile); text && text->has_value()) {
      if (auto state = nfs::ParseStateJson(**text)) last_good = state->portal_ips;
    }
    if (env.onegate == nullptr) {
      log::Warn("storage: no OneGate (TOKEN=YES missing): the portal gets no root access until "
                "the refresher can read the service; keeping [{}]",
                fmt::join(last_good, " "));
      return last_good;
    }
    auto service = env.onegate->GetService(/*extended=*/true);
    auto ips = service ? nfs::PortalAddresses(*service, net) : Fail(service.error());
    if (!ips) {
      log::Warn("storage: cannot read the portal's address from OneGate ({}); keeping the last "
                "good list [{}]",
                ips.error().message, fmt::join(last_good, " "));
      return last_good;
    }
    log::Info("storage: portal compute address(es) [{}]", fmt::join(*ips, " "));
    return *ips;
  }

  Result<std::vector<std::string>> Candidates(RoleEnv& env) {
    if (options_.candidates) return options_.candidates(env);
    auto disks = env.block_devices.ListDisks(false);
    if (!disks) return Fail(disks.error());
    std::string root = disk::RootDisk(env.mounts, options_.sys_class_block);
    log::Info("storage: root filesystem disk {}", root.empty() ? "unknown" : root);
    std::vector<std::string> out;
    for (const auto& d : *disks) {
      if (d != root) out.push_back(d);
    }
    return out;
  }

  // This VM already kept its homes on an ood-home filesystem (our mount unit names it) but that
  // filesystem is not attached now: switching to the root disk or to a new blank disk would
  // serve empty homes and the portal would create fresh ones. The unit is only ever used to
  // refuse, never to decide to format.
  Status CheckPreviousHomeDisk(RoleEnv& env, const disk::HomeDiskDecision& decision) {
    if (decision.source == disk::HomeSource::kReuseLabelled) return Ok();
    const std::string unit_path = disk::MountUnitPath(disk::kHomeDir);
    auto unit = env.files.ReadIfExists(unit_path);
    if (!unit) return Fail(unit.error());
    if (!unit->has_value()) return Ok();
    std::string what;
    auto pos = (*unit)->find("\nWhat=");
    if (pos != std::string::npos) {
      what = (*unit)->substr(pos + 6, (*unit)->find('\n', pos + 6) - pos - 6);
    }
    return Fail(ErrorKind::kUnsafe,
                "the homes of this VM were on the ood-home filesystem " + what +
                    " (see " + unit_path + "), which is not attached now; refusing to "
                    "serve " + (decision.source == disk::HomeSource::kFormatBlank
                                    ? "a newly formatted " + decision.device
                                    : std::string("the empty directory on the root disk")) +
                    ". Attach the ood-home disk again, or delete " + unit_path +
                    " to start with empty homes");
  }

  // Returns whether the homes are on a mounted data disk.
  Result<bool> EnsureHomeDisk(RoleEnv& env) {
    auto candidates = Candidates(env);
    if (!candidates) return Fail(candidates.error());
    disk::HomeDiskInputs inputs;
    inputs.candidates = *candidates;
    inputs.mount_point = env.files.HostPath(disk::kHomeDir);
    disk::LabelFinder find_label =
        options_.find_label ? options_.find_label : disk::FindLabelWith(env.block_devices);
    auto decision = disk::DecideHomeDisk(inputs, env.block_devices, env.mounts, find_label,
                                         options_.exclusive);
    if (!decision) return Fail(decision.error());
    for (const auto& f : decision->findings) {
      env.plan.Keep("disk " + f.device, f.content);
      log::Info("storage: disk {}: {}", f.device, f.content);
    }
    log::Info("storage: home disk decision: {}: {}", disk::ToString(decision->source),
              decision->why);
    if (auto s = CheckPreviousHomeDisk(env, *decision); !s) return Fail(s.error());
    if (decision->source == disk::HomeSource::kRootDisk) {
      env.plan.Keep(std::string("homes in ") + disk::kHomeDir + " on the root disk",
                    decision->why);
      return false;
    }

    std::string uuid = decision->uuid;
    if (decision->source == disk::HomeSource::kFormatBlank) {
      disk::HomeDiskTools tools{env.runner, env.block_devices, env.mounts, env.clock,
                                options_.exclusive};
      auto s = env.plan.Do("format " + decision->device + " (mkfs.ext4 -F -L " +
                               disk::kHomeLabel + ")",
                           decision->why, [&]() -> Status {
                             auto made = disk::FormatBlankDisk(*decision, disk::kHomeLabel, tools);
                             if (!made) return Fail(made.error());
                             uuid = *made;
                             return Ok();
                           });
      if (!s) return Fail(s.error());
    } else {
      env.plan.Keep("filesystem on " + decision->device, decision->why);
    }

    // Mount now (a crash between mkfs and here converges: the next run finds the label).
    std::string host_dir = env.files.HostPath(disk::kHomeDir);
    auto current = env.mounts.FindByTarget(host_dir);
    if (!current) return Fail(current.error());
    std::string fs_type = decision->fs_type;
    if (current->has_value()) {
      auto same = disk::EnsureMounted(decision->device, fs_type, host_dir, env.mounts);
      if (!same) return Fail(same.error());  // something else is mounted there
      env.plan.Keep("mounted " + decision->device + " on " + disk::kHomeDir, "already mounted");
    } else {
      if (auto hidden = env.files.List(disk::kHomeDir); hidden && !hidden->empty()) {
        log::Warn("storage: {} on the root disk holds {} entries ({}...); they are hidden, not "
                  "deleted, under the ood-home mount",
                  disk::kHomeDir, hidden->size(), hidden->front());
      }
      auto s = env.plan.Do("mount " + decision->device + " on " + disk::kHomeDir,
                           "the homes live on the ood-home disk", [&]() -> Status {
                             auto m = disk::EnsureMounted(decision->device, fs_type, host_dir,
                                                          env.mounts);
                             if (!m) return Fail(m.error());
                             return Ok();
                           });
      if (!s) return Fail(s.error());
    }
    if (!env.plan.dry_run()) {
      // The top of the home filesystem: root-owned, world-readable (mkfs leaves 0755 already;
      // a disk prepared elsewhere may differ). Idempotent; the homes below are not touched.
      struct stat st {};
      if (::stat(host_dir.c_str(), &st) == 0 && (st.st_mode & 07777) != 0755) {
        auto s = env.plan.Do("chmod 0755 " + std::string(disk::kHomeDir),
                             "the portal and the workers traverse it", [&]() -> Status {
                               if (::chmod(host_dir.c_str(), 0755) != 0) {
                                 return Fail(ErrorKind::kIo, "chmod " + host_dir + " failed");
                               }
                               return Ok();
                             });
        if (!s) return Fail(s.error());
      }
    }

    // Persist: generated units, then daemon-reload and enable.
    if (uuid.empty()) {
      auto s = env.plan.Do("write the export-home.mount unit for the new filesystem",
                           "mounted at every boot before nfs-server (UUID known after mkfs)",
                           [] { return Ok(); });
      if (!s) return Fail(s.error());
      return true;
    }
    auto units = disk::RenderMountUnits(uuid, fs_type, disk::kHomeDir);
    bool units_changed = false;
    for (const auto& [path, content, why] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {units.mount_unit_path, units.mount_unit,
              "mount the ood-home filesystem (uuid " + uuid + ") at every boot, before nfs-server"},
             {units.device_dropin_path, units.device_dropin,
              "a missing disk delays the boot by 30 s at most"},
             {units.nfs_dropin_path, units.nfs_dropin,
              "nfs-server never starts without the home disk (never exports the empty "
              "directory underneath)"}}) {
      auto old = env.files.ReadIfExists(path);
      if (!old) return Fail(old.error());
      if (!old->has_value() || **old != content) units_changed = true;
      if (auto s = EnsureFile(env, path, content, 0644, std::nullopt, why); !s) {
        return Fail(s.error());
      }
    }
    if (units_changed) {
      auto s = env.plan.Do("systemctl daemon-reload", "the mount unit or a drop-in changed",
                           [&] { return env.systemd.DaemonReload(); });
      if (!s) return Fail(s.error());
    }
    std::string mount_unit = units.mount_unit_path.substr(units.mount_unit_path.rfind('/') + 1);
    if (auto s = slurm::EnsureUnitEnabled(env, mount_unit, "local-fs.target",
                                          "the home disk is mounted at every boot");
        !s) {
      return Fail(s.error());
    }
    return true;
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
  home.roles = {kStorageRole};
  std::vector<SettingSpec> specs = {home};
  for (auto& spec : squid::SoftwareProxySettings({kStorageRole})) specs.push_back(spec);
  return specs;
}

std::unique_ptr<Role> MakeStorageRole() { return MakeStorageRole(StorageOptions{}); }
std::unique_ptr<Role> MakeStorageRole(StorageOptions options) {
  return std::make_unique<StorageRole>(std::move(options));
}

}  // namespace onehpc
