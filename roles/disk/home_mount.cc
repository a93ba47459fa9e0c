#include "roles/disk/home_mount.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <tuple>

#include "common/log.h"
#include "roles/disk/disk_identity.h"
#include "roles/disk/mount_unit.h"
#include "roles/ensure.h"
#include "roles/names.h"
#include "roles/role.h"

namespace onehpc::disk {
namespace {

Result<std::vector<std::string>> Candidates(RoleEnv& env, const HomeMountOptions& options) {
  if (options.candidates) return options.candidates(env);
  auto disks = env.block_devices.ListDisks(false);
  if (!disks) return Fail(disks.error());
  std::string root = RootDisk(env.mounts, options.sys_class_block);
  log::Info("storage: root filesystem disk {}", root.empty() ? "unknown" : root);
  std::vector<std::string> out;
  for (const auto& d : *disks) {
    if (d != root) out.push_back(d);
  }
  return out;
}

// OpenNebula's SIZE ("2048"), 0 when absent or not a whole number.
std::uint64_t ParseSizeMib(const std::string& text) {
  if (text.empty() || text.size() > 15 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return 0;
  }
  return std::stoull(text);
}

// Every whole disk of this VM with what identifies it (the root disk too: OpenNebula lists it).
Result<std::vector<DiskIdentity>> GuestDisks(RoleEnv& env) {
  auto disks = env.block_devices.ListDisks(false);
  if (!disks) return Fail(disks.error());
  std::vector<DiskIdentity> out;
  for (const auto& d : *disks) {
    auto id = env.block_devices.Identify(d);
    if (!id) return Fail(id.error());
    out.push_back(*id);
  }
  return out;
}

// This VM's TEMPLATE.DISK from the extended service document, by the guest device that is
// each disk (disk_identity.h).
std::optional<std::map<std::string, DiskFacts>> FactsFromOneGate(RoleEnv& env, std::string* note) {
  const std::string fallback = ": the home disk is chosen from the disks' content alone";
  if (env.onegate == nullptr) {
    *note = "no OneGate (TOKEN=YES is not in CONTEXT)" + fallback;
    return std::nullopt;
  }
  const std::string vmid = env.Var("VMID");
  auto service = env.onegate->GetService(true);
  if (!service) {
    *note =
        "OneGate's service document could not be read (" + service.error().message + ")" + fallback;
    return std::nullopt;
  }
  for (const auto& role : service->roles) {
    for (const auto& node : role.nodes) {
      if (std::to_string(node.vm_id) != vmid || !node.vm) continue;
      if (!node.vm->disks_listed) break;
      std::vector<ListedDisk> listed;
      for (const auto& d : node.vm->disks) {
        if (d.target.empty() || d.target.find('/') != std::string::npos) continue;
        ListedDisk l{DiskFacts{d.target, d.image, d.persistent, d.type}, 0};
        l.size_mib = ParseSizeMib(d.size_mb);
        listed.push_back(l);
      }
      auto guest = GuestDisks(env);
      if (!guest) {
        // OpenNebula's word is there but cannot be tied to a device: no blank disk is taken
        // for a datablock (an empty list refuses them all), unlike a missing OneGate.
        *note = "OpenNebula lists this VM's disks, but they cannot be identified here (" +
                guest.error().message + "): no blank disk is formatted";
        return std::map<std::string, DiskFacts>{};
      }
      DiskMatch match = MatchListedDisks(listed, *guest);
      *note =
          fmt::format("OpenNebula lists {} disk(s) of VM {}: {}", listed.size(), vmid,
                      match.notes.empty() ? "-" : fmt::format("{}", fmt::join(match.notes, "; ")));
      return match.by_device;
    }
  }
  *note = "OneGate's service document lists no disk of VM " + vmid + fallback;
  return std::nullopt;
}

// ---- an interrupted mkfs
// Before mkfs this VM records {device, nonce} in kMkfsStateFile (its root disk) and writes a
// marker with that nonce as the disk's last bytes; after mkfs it removes the record, and
// only then mounts: no home is ever written while the record exists. A record whose disk
// still ends with its marker is therefore a format this VM began and did not finish (power
// loss, a killed configure): it is finished. Anything else stays refused.

constexpr char kMkfsStateFile[] = "/var/lib/one-hpc/home-mkfs.json";

std::string MkfsMarker(const std::string& nonce) {
  std::string text = "one-hpc: mkfs of the ood-home disk begun by this VM, nonce " + nonce + "\n";
  text.resize(kMkfsMarkerBytes, '\0');
  return text;
}

struct PendingFormat {
  std::string device;
  std::string nonce;
};

std::optional<PendingFormat> ReadPendingFormat(RoleEnv& env) {
  auto text = env.files.ReadIfExists(kMkfsStateFile);
  if (!text || !text->has_value()) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(**text);
    PendingFormat p{j.at("device").get<std::string>(), j.at("nonce").get<std::string>()};
    if (p.device.rfind("/dev/", 0) != 0 || p.nonce.size() != 32) return std::nullopt;
    return p;
  } catch (const std::exception&) {
    log::Warn("storage: {} is not a format record; ignored", kMkfsStateFile);
    return std::nullopt;
  }
}

Result<std::string> NewNonce() {
  unsigned char bytes[16];
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    return Fail(ErrorKind::kInternal, "getrandom failed");
  }
  return fmt::format("{:02x}", fmt::join(bytes, bytes + sizeof bytes, ""));
}

// A decision to finish this VM's interrupted format, when the record and the disk agree.
std::optional<HomeDiskDecision> ResumableFormat(RoleEnv& env,
                                                const std::vector<std::string>& candidates) {
  auto pending = ReadPendingFormat(env);
  if (!pending) return std::nullopt;
  const bool candidate =
      std::find(candidates.begin(), candidates.end(), pending->device) != candidates.end();
  auto tail = candidate ? env.block_devices.ReadTail(pending->device, kMkfsMarkerBytes)
                        : Result<std::string>(Fail(ErrorKind::kNotFound, "not a candidate"));
  if (!tail || *tail != MkfsMarker(pending->nonce)) {
    log::Warn(
        "storage: {} names a format of {} that this VM began, but that disk {}; the record "
        "is forgotten and the disk judged by its content",
        kMkfsStateFile, pending->device,
        !candidate ? "is not attached" : "does not end with its marker");
    (void)env.plan.Do("forget " + std::string(kMkfsStateFile),
                      "its disk no longer carries the marker",
                      [&] { return env.files.Remove(kMkfsStateFile); });
    return std::nullopt;
  }
  HomeDiskDecision d;
  d.source = HomeSource::kFormatBlank;
  d.device = pending->device;
  d.fs_type = "ext4";
  d.resume_marker = MkfsMarker(pending->nonce);
  d.why = pending->device + " is the disk this VM began to format (" + kMkfsStateFile +
          " and the marker at its end agree) and the format did not finish: finishing it (no "
          "home was ever written to it)";
  d.findings.push_back({pending->device, "this VM's unfinished format", false});
  return d;
}

// What this VM's export-home.mount says: the device it mounts ("/dev/disk/by-uuid/<uuid>")
// and that UUID; nullopt when there is no such unit (the homes were never on a disk here).
struct RecordedHomeDisk {
  std::string unit_path;
  std::string what;
  std::string uuid;
};

Result<std::optional<RecordedHomeDisk>> ReadRecordedHomeDisk(RoleEnv& env) {
  RecordedHomeDisk recorded;
  recorded.unit_path = MountUnitPath(ood::kHomeExport);
  auto unit = env.files.ReadIfExists(recorded.unit_path);
  if (!unit) return Fail(unit.error());
  if (!unit->has_value()) return std::optional<RecordedHomeDisk>();
  auto pos = (*unit)->find("\nWhat=");
  if (pos != std::string::npos) {
    recorded.what = (*unit)->substr(pos + 6, (*unit)->find('\n', pos + 6) - pos - 6);
  }
  constexpr std::string_view kByUuid = "/dev/disk/by-uuid/";
  if (recorded.what.rfind(kByUuid, 0) == 0) recorded.uuid = recorded.what.substr(kByUuid.size());
  return std::optional<RecordedHomeDisk>(std::move(recorded));
}

// This VM already kept its homes on an ood-home filesystem (our mount unit names it):
//  - that filesystem is not attached now: switching to the root disk or to a new blank disk
//    would serve empty homes and the portal would create fresh ones;
//  - an ood-home filesystem with another UUID is attached: another service's disk or another
//    copy of it; mounting it would serve other homes under the same names.
// The unit is only ever used to refuse, never to decide to format.
Status CheckPreviousHomeDisk(const std::optional<RecordedHomeDisk>& recorded,
                             const HomeDiskDecision& decision) {
  if (!recorded) return Ok();
  const std::string& unit_path = recorded->unit_path;
  if (decision.source == HomeSource::kReuseLabelled) {
    if (recorded->uuid.empty() || recorded->uuid == decision.uuid) return Ok();
    return Fail(ErrorKind::kUnsafe,
                "the ood-home filesystem on " + decision.device + " has UUID " + decision.uuid +
                    ", but the homes of this VM were on UUID " + recorded->uuid + " (see " +
                    unit_path +
                    "): another service's disk or another copy of it; refusing to mount it. "
                    "Attach the disk with UUID " +
                    recorded->uuid + ", or, if " + decision.device + " is the right one, delete " +
                    unit_path + " and reconfigure");
  }
  return Fail(ErrorKind::kUnsafe, "the homes of this VM were on the ood-home filesystem " +
                                      recorded->what + " (see " + unit_path +
                                      "), which is not attached now; refusing to "
                                      "serve " +
                                      (decision.source == HomeSource::kFormatBlank
                                           ? "a newly formatted " + decision.device
                                           : std::string("the empty directory on the root disk")) +
                                      ". Attach the ood-home disk again, or delete " + unit_path +
                                      " to start with empty homes");
}

// A disk that appears after homes were made in /export/home on the root disk (a storage VM
// started without its datablock): mounting it would hide those homes and the portal would
// create empty ones. Refused before anything is formatted or mounted, unless the directory
// is empty.
Status CheckNothingHidden(RoleEnv& env, const HomeDiskDecision& decision) {
  auto entries = env.files.List(ood::kHomeExport);
  if (!entries && entries.error().kind == ErrorKind::kNotFound) return Ok();  // a dry run's
  if (!entries) return Fail(entries.error());
  if (entries->empty()) return Ok();
  std::string some;
  for (size_t i = 0; i < entries->size() && i < 5; ++i) {
    some += (i ? ", " : "") + (*entries)[i];
  }
  if (entries->size() > 5) some += ", ...";
  return Fail(
      ErrorKind::kUnsafe,
      std::string(ood::kHomeExport) + " on the root disk holds " + std::to_string(entries->size()) +
          " entries (" + some + "); " +
          (decision.source == HomeSource::kFormatBlank ? "formatting and mounting " : "mounting ") +
          decision.device +
          " over them would hide these homes and the portal would create empty ones. "
          "Nothing was changed: move them onto the disk first (mount " +
          decision.device + " elsewhere" +
          (decision.source == HomeSource::kFormatBlank
               ? " after `mkfs.ext4 -L " + std::string(kHomeLabel) + "`"
               : std::string()) +
          ", copy them with their owners, empty " + ood::kHomeExport +
          ") and reconfigure, or detach the disk");
}

// The decision (a format resumed after a crash, or DecideHomeDisk), logged and checked against
// the disk recorded by an earlier run. `inputs` gets OpenNebula's facts about the disks.
Result<HomeDiskDecision> DecideForThisVm(RoleEnv& env, const HomeMountOptions& options,
                                         HomeDiskInputs& inputs) {
  auto candidates = Candidates(env, options);
  if (!candidates) return Fail(candidates.error());
  inputs.candidates = *candidates;
  inputs.mount_point = env.files.HostPath(ood::kHomeExport);
  inputs.allow_volatile = env.settings.GetBool(kHomeDiskVolatileSetting);
  inputs.own_bind_targets = {env.files.HostPath(ood::kSlurmExport)};
  if (!inputs.candidates.empty()) {
    std::string note;
    inputs.facts =
        options.disk_facts ? options.disk_facts(env, &note) : FactsFromOneGate(env, &note);
    log::Info("storage: {}", note);
    env.plan.Keep("OpenNebula's disk list", note);
  }
  LabelFinder find_label =
      options.find_label ? options.find_label : FindLabelWith(env.block_devices);
  auto resumed = ResumableFormat(env, inputs.candidates);
  auto decision = resumed ? Result<HomeDiskDecision>(std::move(*resumed))
                          : DecideHomeDisk(inputs, env.block_devices, env.mounts, find_label,
                                           options.exclusive);
  if (!decision) return Fail(decision.error());
  for (const auto& f : decision->findings) {
    env.plan.Keep("disk " + f.device, f.content);
    log::Info("storage: disk {}: {}", f.device, f.content);
  }
  log::Info("storage: home disk decision: {}: {}", ToString(decision->source), decision->why);
  auto recorded = ReadRecordedHomeDisk(env);
  if (!recorded) return Fail(recorded.error());
  if (auto s = CheckPreviousHomeDisk(*recorded, *decision); !s) return Fail(s.error());
  return decision;
}

// The blank disk formatted (the record first, so that a crash from then on is recognised), or
// the labelled filesystem kept as it is; the filesystem's UUID ("" in a plan before mkfs).
Result<std::string> FormatOrKeep(RoleEnv& env, const HomeMountOptions& options,
                                 const HomeDiskDecision& decision,
                                 const std::optional<std::map<std::string, DiskFacts>>& facts) {
  std::string uuid = decision.uuid;
  if (decision.source != HomeSource::kFormatBlank) {
    env.plan.Keep("filesystem on " + decision.device, decision.why);
    if (facts) {
      auto f = facts->find(decision.device);
      if (f != facts->end() && !(f->second.persistent && !f->second.image.empty())) {
        log::Warn(
            "storage: the ood-home filesystem is on {}, a {}: the homes are deleted with "
            "the VM",
            decision.device, f->second.Describe());
      }
    }
    return uuid;
  }
  HomeDiskTools tools{env.runner, env.block_devices, env.mounts, env.clock, options.exclusive};
  auto s = env.plan.Do(
      "format " + decision.device + " (mkfs.ext4 -F -L " + kHomeLabel + ")", decision.why,
      [&]() -> Status {
        std::string marker = decision.resume_marker;
        if (marker.empty()) {
          auto nonce = NewNonce();
          if (!nonce) return Fail(nonce.error());
          nlohmann::json record = {{"device", decision.device}, {"nonce", *nonce}};
          if (auto w = env.files.WriteAtomic(kMkfsStateFile, record.dump() + "\n", 0600); !w) {
            return w;
          }
          marker = MkfsMarker(*nonce);
        }
        auto made = FormatBlankDisk(decision, kHomeLabel, tools, marker);
        if (!made) return Fail(made.error());  // the record stays
        uuid = *made;
        return env.files.Remove(kMkfsStateFile);
      });
  if (!s) return Fail(s.error());
  return uuid;
}

// Mounted now (a crash between mkfs and here converges: the next run finds the label), its top
// root-owned and world-readable.
Status MountHomes(RoleEnv& env, const HomeDiskDecision& decision, bool mounted,
                  const std::string& host_dir) {
  if (mounted) {
    auto same = EnsureMounted(decision.device, decision.fs_type, host_dir, env.mounts);
    if (!same) return Fail(same.error());  // something else is mounted there
    env.plan.Keep("mounted " + decision.device + " on " + ood::kHomeExport, "already mounted");
  } else {
    auto s = env.plan.Do("mount " + decision.device + " on " + ood::kHomeExport,
                         "the homes live on the ood-home disk", [&]() -> Status {
                           auto m = EnsureMounted(decision.device, decision.fs_type, host_dir,
                                                  env.mounts);
                           if (!m) return Fail(m.error());
                           return Ok();
                         });
    if (!s) return s;
  }
  if (env.plan.dry_run()) return Ok();
  // The top of the home filesystem: root-owned, world-readable (mkfs leaves 0755 already;
  // a disk prepared elsewhere may differ). Idempotent; the homes below are not touched.
  struct stat st {};
  if (::stat(host_dir.c_str(), &st) != 0 || (st.st_mode & 07777) == 0755) return Ok();
  return env.plan.Do("chmod 0755 " + std::string(ood::kHomeExport),
                     "the portal and the workers traverse it", [&]() -> Status {
                       if (::chmod(host_dir.c_str(), 0755) != 0) {
                         return Fail(ErrorKind::kIo, "chmod " + host_dir + " failed");
                       }
                       return Ok();
                     });
}

// The generated mount unit and its drop-ins, then daemon-reload and enable.
Status PersistHomeMount(RoleEnv& env, const std::string& uuid, const std::string& fs_type) {
  if (uuid.empty()) {
    return env.plan.Do("write the export-home.mount unit for the new filesystem",
                       "mounted at every boot before nfs-server (UUID known after mkfs)",
                       [] { return Ok(); });
  }
  auto units = RenderMountUnits(uuid, fs_type, ood::kHomeExport);
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
    auto written = EnsureFile(env, path, content, 0644, std::nullopt, why);
    if (!written) return Fail(written.error());
    units_changed = units_changed || *written;
  }
  if (auto s = DaemonReloadIf(env, units_changed, "the mount unit or a drop-in changed"); !s) {
    return s;
  }
  std::string mount_unit = units.mount_unit_path.substr(units.mount_unit_path.rfind('/') + 1);
  return EnsureUnitEnabled(env, mount_unit, "local-fs.target",
                           "the home disk is mounted at every boot");
}

}  // namespace

Result<bool> EnsureHomeDisk(RoleEnv& env, const HomeMountOptions& options) {
  HomeDiskInputs inputs;
  auto decision = DecideForThisVm(env, options, inputs);
  if (!decision) return Fail(decision.error());
  if (decision->source == HomeSource::kRootDisk) {
    env.plan.Keep(std::string("homes in ") + ood::kHomeExport + " on the root disk", decision->why);
    return false;
  }
  std::string host_dir = env.files.HostPath(ood::kHomeExport);
  auto current = env.mounts.FindByTarget(host_dir);
  if (!current) return Fail(current.error());
  if (!current->has_value()) {
    if (auto s = CheckNothingHidden(env, *decision); !s) return Fail(s.error());
  }
  auto uuid = FormatOrKeep(env, options, *decision, inputs.facts);
  if (!uuid) return Fail(uuid.error());
  if (auto s = MountHomes(env, *decision, current->has_value(), host_dir); !s) {
    return Fail(s.error());
  }
  if (auto s = PersistHomeMount(env, *uuid, decision->fs_type); !s) return Fail(s.error());
  return true;
}

}  // namespace onehpc::disk
