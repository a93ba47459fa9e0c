#include "roles/disk/home_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "common/log.h"
#include "roles/disk/mount_unit.h"

namespace onehpc::disk {
namespace {

std::string Canonical(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) return buf;
  return path;
}

/// What is on a probed device, for messages ("ext4 label=data; gpt partition table").
std::string Describe(const DeviceProbe& p) {
  std::vector<std::string> parts;
  if (p.ambivalent) parts.push_back("ambivalent probe (several filesystem signatures)");
  for (const auto& s : p.signatures) parts.push_back(s);
  if (parts.empty() && !p.fs_type.empty()) {
    parts.push_back(p.fs_type + (p.label.empty() ? "" : " label=" + p.label));
  }
  if (parts.empty() && !p.pt_type.empty()) parts.push_back(p.pt_type + " partition table");
  if (parts.empty()) return "blank";
  return fmt::format("{}", fmt::join(parts, "; "));
}

// The disk found by the label, probed again: that label alone, and a filesystem for homes
// (owners and modes: a vfat, a swap area or an image labelled so is no home disk).
Status CheckLabelledProbe(const std::string& device, const DeviceProbe& probe,
                          const std::string& label) {
  if (probe.ambivalent || probe.fs_type.empty() || probe.label != label) {
    return Fail(ErrorKind::kUnsafe, device + " was found by the label '" + label +
                                        "' but a fresh probe shows: " + Describe(probe) +
                                        "; refusing to use it");
  }
  if (std::find(std::begin(kHomeFilesystems), std::end(kHomeFilesystems), probe.fs_type) ==
      std::end(kHomeFilesystems)) {
    return Fail(ErrorKind::kUnsafe,
                fmt::format("{} holds a {} filesystem labelled '{}' ({}): the homes need a "
                            "POSIX filesystem ({}); refusing to mount it, nothing was written. "
                            "Relabel that disk, or give the homes a blank one",
                            device, probe.fs_type, label, Describe(probe),
                            fmt::join(kHomeFilesystems, ", ")));
  }
  return Ok();
}

std::string SizeText(std::uint64_t bytes) {
  constexpr std::uint64_t kMiB = 1024 * 1024;
  if (bytes >= 1024 * kMiB) return fmt::format("{:.1f} GiB", bytes / (1024.0 * kMiB));
  return fmt::format("{} MiB", bytes / kMiB);
}

std::string Mounted(const std::vector<MountEntry>& entries) {
  std::vector<std::string> targets;
  for (const auto& e : entries) targets.push_back(e.target);
  return fmt::format("{}", fmt::join(targets, ", "));
}

}  // namespace

Status OpenExclusive(const std::string& device) {
  int fd = ::open(device.c_str(), O_RDONLY | O_EXCL | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return Ok();
  }
  int error = errno;
  if (error == EBUSY) {
    return Fail(ErrorKind::kUnsafe,
                device +
                    " is in use (exclusive open failed: mounted, active swap, "
                    "device-mapper/LVM/RAID member or held by another program)");
  }
  return Fail(ErrorKind::kIo, "cannot open " + device + " exclusively: " + strerror(error));
}

LabelFinder FindLabelWith(BlockDevices& devices) {
  return [&devices](const std::string& label) -> Result<std::optional<std::string>> {
    auto found = devices.FindByLabel(label);
    if (found) return std::optional<std::string>(*found);
    if (found.error().kind == ErrorKind::kNotFound) return std::optional<std::string>();
    return Fail(found.error());
  };
}

std::string RootDisk(Mounts& mounts, const std::string& sys_class_block) {
  // The device number of / is exact even when mountinfo says /dev/root (no initramfs).
  struct stat root_st {};
  if (::stat("/", &root_st) == 0 && major(root_st.st_dev) != 0) {
    std::string sys = sys_class_block + "/../../dev/block/" +
                      std::to_string(major(root_st.st_dev)) + ":" +
                      std::to_string(minor(root_st.st_dev));
    std::string real = Canonical(sys);
    struct stat part {};
    if (real != sys) {
      std::string name = real.substr(real.rfind('/') + 1);
      if (::stat((real + "/partition").c_str(), &part) == 0) {
        std::string parent = real.substr(0, real.rfind('/'));
        return "/dev/" + parent.substr(parent.rfind('/') + 1);
      }
      return "/dev/" + name;
    }
  }
  auto root = mounts.FindByTarget("/");
  if (!root || !root->has_value()) return "";
  std::string source = (*root)->source;
  if (source.rfind("/dev/", 0) != 0) return "";  // overlay, tmpfs, nfs root...
  std::string name = Canonical(source);
  auto slash = name.rfind('/');
  name = name.substr(slash + 1);
  std::string sys = sys_class_block + "/" + name;
  struct stat st {};
  if (::stat((sys + "/partition").c_str(), &st) == 0) {
    // /sys/class/block/vda1 -> ../../devices/.../block/vda/vda1: the parent is the disk.
    std::string real = Canonical(sys);
    std::string parent = real.substr(0, real.rfind('/'));
    return "/dev/" + parent.substr(parent.rfind('/') + 1);
  }
  return "/dev/" + name;  // a whole-disk filesystem, or dm-N (LVM root: no disk of ours)
}

const char* ToString(HomeSource source) {
  switch (source) {
    case HomeSource::kRootDisk:
      return "root disk";
    case HomeSource::kReuseLabelled:
      return "reuse labelled filesystem";
    case HomeSource::kFormatBlank:
      return "format blank disk";
  }
  return "?";
}

std::string DiskFacts::Describe() const {
  const std::string found = found_by.empty() ? "" : ", found by " + found_by;
  if (!image.empty()) {
    return std::string(persistent ? "persistent" : "non-persistent (a copy deleted with the VM)") +
           " image '" + image + "' (TARGET " + target + found + ")";
  }
  return "volatile disk (TYPE=" + (type.empty() ? std::string("?") : type) + ", TARGET " + target +
         found + ", deleted with the VM)";
}

namespace {

// Among the blank disks, the one OpenNebula's disk list positively names for the homes: a
// persistent image called ood-home, else the only persistent image; a volatile one only when
// the operator allows it. Returns the device and why.
Result<std::pair<std::string, std::string>> ChooseByFacts(const HomeDiskInputs& inputs,
                                                          const std::vector<std::string>& blank) {
  std::vector<std::string> named, persistent, volatile_ok, refused;
  for (const auto& device : blank) {
    auto it = inputs.facts->find(device);
    if (it == inputs.facts->end()) {
      refused.push_back(device + ": not identified in OpenNebula's disk list");
      continue;
    }
    const DiskFacts& f = it->second;
    const bool keeps = !f.image.empty() && f.persistent;
    if (keeps && f.image == inputs.label) {
      named.push_back(device);
    } else if (keeps) {
      persistent.push_back(device);
    } else if (inputs.allow_volatile) {
      volatile_ok.push_back(device);
    } else {
      refused.push_back(device + ": " + f.Describe());
    }
  }
  auto describe = [&](const std::string& device) {
    return device + " (" + inputs.facts->at(device).Describe() + ")";
  };
  if (named.size() == 1) {
    return std::make_pair(named.front(), "persistent image '" + inputs.label + "'");
  }
  if (named.size() > 1) {
    return Fail(ErrorKind::kUnsafe,
                fmt::format("several blank persistent images are named '{}' ({}): refusing to "
                            "guess which one holds the homes; detach all but one",
                            inputs.label, fmt::join(named, ", ")));
  }
  if (persistent.size() == 1) {
    return std::make_pair(persistent.front(),
                          "only persistent datablock (" + describe(persistent.front()) + ")");
  }
  if (persistent.size() > 1) {
    std::vector<std::string> all;
    for (const auto& d : persistent) all.push_back(describe(d));
    return Fail(ErrorKind::kUnsafe,
                fmt::format("several blank persistent datablocks ({}): refusing to guess which "
                            "one holds the homes; name that image '{}'",
                            fmt::join(all, "; "), inputs.label));
  }
  if (volatile_ok.size() == 1) {
    return std::make_pair(volatile_ok.front(),
                          "only blank disk allowed by ONEAPP_HOME_DISK_VOLATILE=YES (" +
                              describe(volatile_ok.front()) + ": the homes go with the VM)");
  }
  if (volatile_ok.size() > 1) {
    return Fail(ErrorKind::kUnsafe,
                fmt::format("several blank volatile disks ({}): refusing to guess which one "
                            "holds the homes; attach a persistent datablock named '{}'",
                            fmt::join(volatile_ok, ", "), inputs.label));
  }
  return Fail(ErrorKind::kUnsafe,
              fmt::format("no blank disk is a persistent datablock, so none is formatted for the "
                          "homes (they would be deleted with the VM): {}. Nothing was written. "
                          "Attach a persistent datablock (named '{}'), or set "
                          "ONEAPP_HOME_DISK_VOLATILE=YES to keep the homes on a volatile disk",
                          fmt::join(refused, "; "), inputs.label));
}

// Which of the blank disks holds the homes: the one OpenNebula's disk list names, or without
// the list the only one (several are refused).
Status ChooseBlank(const HomeDiskInputs& inputs, const std::vector<std::string>& blank,
                   HomeDiskDecision& decision) {
  decision.source = HomeSource::kFormatBlank;
  decision.device = blank.front();
  decision.fs_type = "ext4";
  if (inputs.facts) {
    auto chosen = ChooseByFacts(inputs, blank);
    if (!chosen) return Fail(chosen.error());
    decision.device = chosen->first;
    decision.why = chosen->first +
                   " is blank (no signature, no partition table, zeros at both ends, not "
                   "mounted, not held) and OpenNebula says it is the " +
                   chosen->second;
    for (auto& f : decision.findings) {
      auto it = inputs.facts->find(f.device);
      f.content += "; OpenNebula: " + (it == inputs.facts->end()
                                           ? std::string("not identified in its disk list")
                                           : it->second.Describe());
    }
    return Ok();
  }
  if (blank.size() > 1) {
    // Without OpenNebula's word, a name says nothing of which disk is the datablock meant for
    // the homes: the first by name may be a volatile scratch disk.
    return Fail(ErrorKind::kUnsafe,
                fmt::format("{} blank disks ({}) and no disk list from OpenNebula (OneGate "
                            "unreachable, or no TOKEN=YES): refusing to guess which one holds "
                            "the homes. Nothing was written. Reconfigure once OneGate answers, "
                            "or attach only the disk for the homes",
                            blank.size(), fmt::join(blank, ", ")));
  }
  decision.why = blank.front() +
                 " is blank (no signature, no partition table, zeros at both "
                 "ends, not mounted, not held)";
  return Ok();
}

// 1. The label anywhere wins: that filesystem is mounted as it is, never formatted, unless it
// is mounted elsewhere (but on our own bind targets).
Result<HomeDiskDecision> ReuseLabelled(const HomeDiskInputs& inputs, const std::string& device,
                                       BlockDevices& devices, Mounts& mounts) {
  auto probe = devices.Probe(device);
  if (!probe) return Fail(probe.error());
  if (auto s = CheckLabelledProbe(device, *probe, inputs.label); !s) return Fail(s.error());
  auto where = mounts.FindBySource(device);
  if (!where) return Fail(where.error());
  for (const auto& e : *where) {
    const bool own_bind =
        std::any_of(inputs.own_bind_targets.begin(), inputs.own_bind_targets.end(),
                    [&](const std::string& t) { return Canonical(t) == Canonical(e.target); });
    if (Canonical(e.target) != Canonical(inputs.mount_point) && !own_bind) {
      return Fail(ErrorKind::kUnsafe,
                  device + " (" + Describe(*probe) + ") is already mounted on " + Mounted(*where) +
                      "; unmount it so it can be mounted on " + inputs.mount_point);
    }
  }
  HomeDiskDecision decision;
  decision.source = HomeSource::kReuseLabelled;
  decision.device = device;
  decision.fs_type = probe->fs_type;
  decision.uuid = probe->uuid;
  decision.why = device + " holds the " + probe->fs_type + " filesystem labelled '" + inputs.label +
                 "' (uuid " + probe->uuid + "): mounted as it is, never formatted";
  for (const auto& c : inputs.candidates) {
    if (c != device) decision.findings.push_back({c, "not looked at (the label was found)", false});
  }
  return decision;
}

// 2. One candidate classified: blank (nothing on it, not mounted, ours alone) or what it holds,
// with the problem that keeps it from being formatted. Nothing is written to it here.
struct Classified {
  DiskFinding finding;
  std::string problem;  ///< empty: none (a blank disk, or the context image skipped)
};

Result<Classified> ClassifyCandidate(const std::string& device, BlockDevices& devices,
                                     Mounts& mounts, const ExclusiveCheck& exclusive) {
  Classified c{{device, "", false}, ""};
  auto probe = devices.Probe(device);
  if (!probe) {
    c.finding.content = "unreadable (" + probe.error().message + ")";
    c.problem = device + ": " + c.finding.content;
    return c;
  }
  std::string content = Describe(*probe);
  if (!probe->ambivalent && probe->fs_type == "iso9660" && probe->label == "CONTEXT") {
    // OpenNebula's context image attached as a disk rather than a CD-ROM: not a candidate.
    c.finding.content = "the OpenNebula context image (iso9660 CONTEXT): skipped";
    return c;
  }
  auto where = mounts.FindBySource(device);
  if (!where) return Fail(where.error());
  if (!where->empty()) {
    content = (content == "blank" ? std::string("no signature") : content) + ", mounted on " +
              Mounted(*where);
  } else if (probe->blank()) {
    if (auto held = exclusive(device); !held) {
      content = "no signature, but " + held.error().message;
    } else {
      c.finding.blank = true;
    }
  }
  c.finding.content = c.finding.blank ? "blank (" + SizeText(probe->size) + ")" : content;
  if (!c.finding.blank) c.problem = device + ": " + content;
  return c;
}

}  // namespace

Result<HomeDiskDecision> DecideHomeDisk(const HomeDiskInputs& inputs, BlockDevices& devices,
                                        Mounts& mounts, const LabelFinder& find_label,
                                        const ExclusiveCheck& exclusive) {
  auto labelled = find_label(inputs.label);
  if (!labelled) {
    return Fail(labelled.error().WithContext("looking for the '" + inputs.label + "' filesystem"));
  }
  if (labelled->has_value()) return ReuseLabelled(inputs, **labelled, devices, mounts);

  HomeDiskDecision decision;
  std::vector<std::string> candidates = inputs.candidates;
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  std::vector<std::string> problems;
  std::vector<std::string> blank;
  for (const auto& device : candidates) {
    auto c = ClassifyCandidate(device, devices, mounts, exclusive);
    if (!c) return Fail(c.error());
    if (!c->problem.empty()) problems.push_back(c->problem);
    if (c->finding.blank) blank.push_back(device);
    decision.findings.push_back(c->finding);
  }
  if (!problems.empty()) {
    return Fail(
        ErrorKind::kUnsafe,
        fmt::format("no filesystem labelled '{}' was found, and {} not blank, so it is "
                    "not formatted: {}. Nothing was written. Attach a blank disk, or "
                    "label the home filesystem '{}', or detach the other disk",
                    inputs.label, problems.size() == 1 ? "a data disk is" : "data disks are",
                    fmt::join(problems, "; "), inputs.label));
  }
  if (blank.empty()) {
    decision.source = HomeSource::kRootDisk;
    decision.why = "no data disk attached (no '" + inputs.label +
                   "' filesystem, no blank disk): the homes live on the root disk and are "
                   "deleted with the VM";
    return decision;
  }
  if (auto s = ChooseBlank(inputs, blank, decision); !s) return Fail(s.error());
  return decision;
}

namespace {

// The UUID of the filesystem mkfs.ext4 just made on `device`, once a probe shows it. udev
// creates /dev/disk/by-uuid and by-label from the new superblock; bounded wait. No udev (a
// container) is fine: we mount by device node and verify with our own probe.
Result<std::string> NewFilesystemUuid(HomeDiskTools& tools, const std::string& device,
                                      const std::string& label) {
  Command settle;
  settle.argv = {"udevadm", "settle",
                 "--timeout=" + std::to_string(tools.udev_timeout.count() / 1000)};
  settle.timeout = tools.udev_timeout + Duration(5000);
  auto settled = tools.runner.Run(settle);
  if (!settled) {
    log::Debug("udevadm not available ({}); verifying {} by probing it", settled.error().message,
               device);
  } else if (!settled->ok()) {
    log::Warn("udevadm settle did not finish ({}); verifying {} by probing it",
              settled->timed_out ? "timed out" : "exit " + std::to_string(settled->exit_code),
              device);
  }
  TimePoint deadline = tools.clock.Now() + tools.udev_timeout;
  while (true) {
    auto after = tools.devices.Probe(device);
    if (after && !after->ambivalent && after->fs_type == "ext4" && after->label == label &&
        !after->uuid.empty()) {
      return after->uuid;
    }
    if (tools.clock.Now() >= deadline) {
      return Fail(ErrorKind::kIo, "mkfs.ext4 exited 0 but " + device +
                                      " does not show an ext4 filesystem labelled '" + label +
                                      "' (" + (after ? Describe(*after) : after.error().message) +
                                      ")");
    }
    tools.clock.SleepFor(Duration(500));
  }
}

}  // namespace

Result<std::string> FormatBlankDisk(const HomeDiskDecision& decision, const std::string& label,
                                    HomeDiskTools& tools, const std::string& marker) {
  if (decision.source != HomeSource::kFormatBlank || decision.device.empty()) {
    return Fail(ErrorKind::kInternal, "FormatBlankDisk called without a blank disk");
  }
  const std::string& device = decision.device;
  // Check again right before writing: a second configure or an operator may have been faster.
  auto probe = tools.devices.Probe(device);
  if (!probe) return Fail(probe.error());
  if (decision.resume_marker.empty()) {
    if (!probe->blank()) {
      return Fail(ErrorKind::kUnsafe,
                  device + " is no longer blank (" + Describe(*probe) + "); not formatting it");
    }
  } else {
    auto tail = tools.devices.ReadTail(device, kMkfsMarkerBytes);
    if (!tail) return Fail(tail.error());
    if (*tail != decision.resume_marker) {
      return Fail(ErrorKind::kUnsafe, device +
                                          " no longer ends with this VM's format marker; not "
                                          "formatting it");
    }
  }
  auto where = tools.mounts.FindBySource(device);
  if (!where) return Fail(where.error());
  if (!where->empty()) {
    return Fail(ErrorKind::kUnsafe,
                device + " is mounted on " + Mounted(*where) + "; not formatting it");
  }
  if (auto s = tools.exclusive(device); !s) return Fail(s.error());
  if (!marker.empty() && decision.resume_marker.empty()) {
    if (auto s = tools.devices.WriteTail(device, marker); !s) return Fail(s.error());
  }

  // The filesystem ends kMkfsTailReserve before the disk: mke2fs zeroes the last blocks of
  // what it formats (old RAID metadata), which would take the marker with it at the start of
  // the run. Observed with e2fsprogs 1.47: the marker survives only outside the filesystem.
  constexpr std::uint64_t kBlock = 4096;
  if (probe->size < 2 * kMkfsTailReserve) {
    return Fail(ErrorKind::kUnsafe, device + " is too small (" + std::to_string(probe->size) +
                                        " bytes) for the homes; not formatting it");
  }
  const std::uint64_t blocks = (probe->size - kMkfsTailReserve) / kBlock;

  Command mkfs;
  mkfs.argv = {
      "mkfs.ext4",           "-F", "-q", "-L", label, "-E", "nodiscard", "-b", "4096", device,
      std::to_string(blocks)};
  mkfs.timeout = tools.mkfs_timeout;
  auto made = RunChecked(tools.runner, mkfs);
  if (!made) return Fail(made.error());

  return NewFilesystemUuid(tools, device, label);
}

Result<bool> EnsureMounted(const std::string& device, const std::string& fs_type,
                           const std::string& host_mount_point, Mounts& mounts) {
  auto current = mounts.FindByTarget(host_mount_point);
  if (!current) return Fail(current.error());
  if (current->has_value()) {
    if (Canonical((*current)->source) == Canonical(device)) return false;
    return Fail(ErrorKind::kUnsafe, host_mount_point + " already has " + (*current)->source + " (" +
                                        (*current)->fs_type + ") mounted on it, not " + device +
                                        "; unmount it first");
  }
  auto s = mounts.Mount(MountEntry{device, host_mount_point, fs_type, kHomeDiskMountOptions});
  if (!s) return Fail(s.error());
  return true;
}

}  // namespace onehpc::disk
