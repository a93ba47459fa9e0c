#include "roles/os/block_devices.h"

#include <blkid/blkid.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fmt/ranges.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <type_traits>

#include "common/log.h"

namespace onehpc {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr int kMaxSignatures = 64;

struct ProbeDeleter {
  void operator()(blkid_probe probe) const { blkid_free_probe(probe); }
};
using ProbePtr = std::unique_ptr<std::remove_pointer_t<blkid_probe>, ProbeDeleter>;

struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

/// The device opened for reading (kNotFound when it does not exist).
Result<int> OpenReadOnly(const std::string& device) {
  int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int error = errno;
    return Fail(error == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo,
                "cannot open " + device + ": " + strerror(error));
  }
  return fd;
}

std::string Value(blkid_probe probe, const char* name) {
  const char* data = nullptr;
  size_t len = 0;
  if (blkid_probe_lookup_value(probe, name, &data, &len) != 0 || !data) return "";
  std::string value(data, len);
  while (!value.empty() && value.back() == '\0') value.pop_back();  // len counts the NUL
  return value;
}

bool NeedsQuotes(const std::string& s) {
  return s.empty() || std::any_of(s.begin(), s.end(), [](unsigned char c) {
           return c <= ' ' || c == '"' || c >= 0x7f;
         });
}

std::string Field(const std::string& name, const std::string& value) {
  if (value.empty()) return "";
  return " " + name + "=" + (NeedsQuotes(value) ? "\"" + value + "\"" : value);
}

/// Reads exactly `size` bytes at `offset` (short only at the end of the device).
Result<std::string> ReadAt(int fd, std::uint64_t offset, size_t size, const std::string& dev) {
  std::string buf(size, '\0');
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, buf.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Fail(ErrorKind::kIo, "cannot read " + dev + " at offset " +
                                      std::to_string(offset + done) + ": " + strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  buf.resize(done);
  return buf;
}

bool AllZero(const std::string& data) {
  return std::all_of(data.begin(), data.end(), [](char c) { return c == 0; });
}

/// Every signature libblkid knows about, wipefs-style: one blkid_do_probe step each.
Status ListSignatures(blkid_probe probe, const std::string& device, DeviceProbe& out) {
  blkid_reset_probe(probe);
  blkid_probe_enable_superblocks(probe, 1);
  blkid_probe_set_superblocks_flags(probe, BLKID_SUBLKS_MAGIC | BLKID_SUBLKS_TYPE |
                                               BLKID_SUBLKS_USAGE | BLKID_SUBLKS_LABEL |
                                               BLKID_SUBLKS_UUID | BLKID_SUBLKS_BADCSUM);
  blkid_probe_enable_partitions(probe, 1);
  blkid_probe_set_partitions_flags(probe, BLKID_PARTS_MAGIC | BLKID_PARTS_FORCE_GPT);
  for (int i = 0; i < kMaxSignatures; ++i) {
    int rc = blkid_do_probe(probe);
    if (rc == 1) return Ok();
    if (rc != 0) {
      return Fail(ErrorKind::kIo, "libblkid could not probe " + device + " for signatures");
    }
    std::string type = Value(probe, "TYPE");
    std::string text;
    if (!type.empty()) {
      text = type + Field("usage", Value(probe, "USAGE")) + Field("label", Value(probe, "LABEL")) +
             Field("uuid", Value(probe, "UUID")) + Field("offset", Value(probe, "SBMAGIC_OFFSET"));
      if (!Value(probe, "SBBADCSUM").empty()) text += " (bad checksum)";
    } else {
      std::string pttype = Value(probe, "PTTYPE");
      if (pttype.empty()) continue;
      text = pttype + " partition table" + Field("uuid", Value(probe, "PTUUID")) +
             Field("offset", Value(probe, "PTMAGIC_OFFSET"));
    }
    if (std::find(out.signatures.begin(), out.signatures.end(), text) == out.signatures.end()) {
      out.signatures.push_back(text);
    }
  }
  return Ok();
}

bool HasSignatureStarting(const DeviceProbe& p, const std::string& prefix) {
  return std::any_of(p.signatures.begin(), p.signatures.end(),
                     [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
}

/// A GPT backup header ("EFI PART") in the last logical block, for 512 and 4096 byte
/// sectors. libblkid only finds a GPT whose primary header (and protective MBR) survive.
Status CheckBackupGpt(int fd, const std::string& device, DeviceProbe& out) {
  if (HasSignatureStarting(out, "gpt ")) return Ok();
  for (std::uint64_t sector : {512u, 4096u}) {
    if (out.size < 2 * sector) continue;
    std::uint64_t offset = out.size - sector;
    auto magic = ReadAt(fd, offset, 8, device);
    if (!magic) return Fail(magic.error());
    if (*magic == "EFI PART") {
      out.signatures.push_back("gpt backup header (no primary) offset=" + std::to_string(offset));
      return Ok();
    }
  }
  return Ok();
}

/// Non-zero bytes in the first or last MiB when nothing else was recognised.
Status CheckForData(int fd, const std::string& device, DeviceProbe& out) {
  std::uint64_t head_size = std::min<std::uint64_t>(kMiB, out.size);
  auto head = ReadAt(fd, 0, head_size, device);
  if (!head) return Fail(head.error());
  if (!AllZero(*head)) {
    out.signatures.push_back("unknown data (non-zero bytes in the first MiB)");
    return Ok();
  }
  if (out.size > head_size) {
    std::uint64_t tail_start =
        std::max(head_size, out.size - std::min<std::uint64_t>(kMiB, out.size));
    auto tail = ReadAt(fd, tail_start, out.size - tail_start, device);
    if (!tail) return Fail(tail.error());
    if (!AllZero(*tail)) {
      out.signatures.push_back("unknown data (non-zero bytes in the last MiB)");
    }
  }
  return Ok();
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::string content;
  std::getline(in, content);
  return content;
}

std::uint64_t SysSizeSectors(const std::string& dir) {
  std::string text = ReadSmallFile(dir + "/size");
  if (text.empty()) return 0;
  try {
    return std::stoull(text);
  } catch (...) {
    return 0;
  }
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

/// sysfs writes '/' in device names as '!' (cciss!c0d0).
std::string DevPath(std::string name) {
  std::replace(name.begin(), name.end(), '!', '/');
  return "/dev/" + name;
}

/// The devices of `candidates` whose one filesystem has exactly this label (a device that
/// cannot be probed is skipped).
std::vector<std::string> Labelled(BlockDevices& devices, const std::vector<std::string>& candidates,
                                  const std::string& label) {
  std::vector<std::string> matches;
  for (const auto& device : candidates) {
    auto probe = devices.Probe(device);
    if (!probe) {
      log::Debug("find label {}: skipping {}: {}", label, device, probe.error().message);
      continue;
    }
    if (!probe->ambivalent && !probe->fs_type.empty() && probe->label == label) {
      matches.push_back(device);
    }
  }
  return matches;
}

}  // namespace

BlkidBlockDevices::BlkidBlockDevices(bool find_on_loop, std::string sys_block)
    : find_on_loop_(find_on_loop), sys_block_(std::move(sys_block)) {}

Result<std::vector<std::string>> BlkidBlockDevices::ListDisks(bool include_loop) {
  DIR* d = ::opendir(sys_block_.c_str());
  if (!d) {
    return Fail(ErrorKind::kIo, "cannot list " + sys_block_ + ": " + strerror(errno));
  }
  ::closedir(d);
  std::vector<std::string> disks;
  for (const auto& name : DirEntries(sys_block_)) {
    if (StartsWith(name, "ram") || StartsWith(name, "zram") || StartsWith(name, "sr") ||
        StartsWith(name, "fd") || (!include_loop && StartsWith(name, "loop"))) {
      continue;
    }
    if (SysSizeSectors(sys_block_ + "/" + name) == 0) continue;  // no medium, detached loop
    disks.push_back(DevPath(name));
  }
  std::sort(disks.begin(), disks.end());
  return disks;
}

Result<DeviceProbe> BlkidBlockDevices::Probe(const std::string& device) {
  DeviceProbe out;
  out.device = device;
  auto opened = OpenReadOnly(device);
  if (!opened) return Fail(opened.error());
  const int fd = *opened;
  FdCloser closer{fd};
  ProbePtr probe(blkid_new_probe());
  if (!probe) return Fail(ErrorKind::kInternal, "blkid_new_probe failed");
  if (blkid_probe_set_device(probe.get(), fd, 0, 0) != 0) {
    return Fail(ErrorKind::kIo, "libblkid cannot use " + device);
  }
  blkid_loff_t size = blkid_probe_get_size(probe.get());
  out.size = size > 0 ? static_cast<std::uint64_t>(size) : 0;

  // One probe with both chains for the values (superblocks alone would call a partitioned
  // disk empty). A bad checksum still counts as a filesystem: never treat it as blank.
  blkid_probe_enable_superblocks(probe.get(), 1);
  blkid_probe_set_superblocks_flags(probe.get(), BLKID_SUBLKS_LABEL | BLKID_SUBLKS_UUID |
                                                     BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE |
                                                     BLKID_SUBLKS_VERSION | BLKID_SUBLKS_BADCSUM);
  blkid_probe_enable_partitions(probe.get(), 1);
  blkid_probe_set_partitions_flags(probe.get(), BLKID_PARTS_FORCE_GPT);
  int rc = blkid_do_safeprobe(probe.get());
  if (rc == -2) {
    out.ambivalent = true;
  } else if (rc == 0) {
    out.fs_type = Value(probe.get(), "TYPE");
    out.fs_usage = Value(probe.get(), "USAGE");
    out.label = Value(probe.get(), "LABEL");
    out.uuid = Value(probe.get(), "UUID");
    out.pt_type = Value(probe.get(), "PTTYPE");
  } else if (rc != 1) {
    return Fail(ErrorKind::kIo, "libblkid could not probe " + device);
  }

  if (auto s = ListSignatures(probe.get(), device, out); !s) return Fail(s.error());
  // Whatever safeprobe reported is a signature even if the step-wise listing missed it.
  if (!out.fs_type.empty() && !HasSignatureStarting(out, out.fs_type)) {
    out.signatures.push_back(out.fs_type + Field("label", out.label) + Field("uuid", out.uuid));
  }
  if (!out.pt_type.empty() && !HasSignatureStarting(out, out.pt_type + " ")) {
    out.signatures.push_back(out.pt_type + " partition table");
  }
  if (auto s = CheckBackupGpt(fd, device, out); !s) return Fail(s.error());
  if (out.signatures.empty() && !out.ambivalent) {
    if (auto s = CheckForData(fd, device, out); !s) return Fail(s.error());
  }
  log::Debug("probe {}: size={} type={} label={} pttype={}{} signatures=[{}]", device, out.size,
             out.fs_type, out.label, out.pt_type, out.ambivalent ? " ambivalent" : "",
             fmt::join(out.signatures, "; "));
  return out;
}

Result<std::string> BlkidBlockDevices::FindByLabel(const std::string& label) {
  if (label.empty()) return Fail(ErrorKind::kInvalidInput, "empty filesystem label");
  auto disks = ListDisks(find_on_loop_);
  if (!disks) return Fail(disks.error());
  std::vector<std::string> candidates;
  for (const auto& disk : *disks) {
    candidates.push_back(disk);
    std::string name = disk.substr(5);
    std::replace(name.begin(), name.end(), '/', '!');
    for (const auto& entry : DirEntries(sys_block_ + "/" + name)) {
      struct stat st;
      std::string part_file = sys_block_ + "/" + name + "/" + entry + "/partition";
      if (::stat(part_file.c_str(), &st) == 0) candidates.push_back(DevPath(entry));
    }
  }
  // CD-ROM drives (OpenNebula's CONTEXT CD is one): ListDisks leaves them out on purpose.
  for (const auto& drive : CdromDrives()) candidates.push_back(drive);
  std::vector<std::string> matches = Labelled(*this, candidates, label);
  if (matches.empty()) {
    return Fail(ErrorKind::kNotFound,
                "no filesystem labelled '" + label + "' on " +
                    (candidates.empty() ? std::string("any disk")
                                        : fmt::format("{}", fmt::join(candidates, ", "))));
  }
  if (matches.size() > 1) {
    return Fail(ErrorKind::kUnsafe, fmt::format("filesystem label '{}' is on several devices: {}",
                                                label, fmt::join(matches, ", ")));
  }
  return matches.front();
}

std::vector<std::string> BlkidBlockDevices::CdromDrives() const {
  std::vector<std::string> drives;
  for (const auto& entry : DirEntries(sys_block_)) {
    if (entry.rfind("sr", 0) == 0) drives.push_back(DevPath(entry));
  }
  std::sort(drives.begin(), drives.end());
  return drives;
}

Result<std::string> BlockDevices::FindContextCd(const std::string& label) {
  return FindByLabel(label);
}

Result<std::string> BlkidBlockDevices::FindContextCd(const std::string& label) {
  if (label.empty()) return Fail(ErrorKind::kInvalidInput, "empty filesystem label");
  const std::vector<std::string> drives = CdromDrives();
  std::vector<std::string> matches = Labelled(*this, drives, label);
  if (matches.size() == 1) return matches.front();
  if (matches.size() > 1) {
    return Fail(ErrorKind::kUnsafe, fmt::format("filesystem label '{}' is on several devices: {}",
                                                label, fmt::join(matches, ", ")));
  }
  log::Debug("no CD-ROM drive ({}) holds a filesystem labelled '{}': looking at every device",
             drives.empty() ? std::string("none") : fmt::format("{}", fmt::join(drives, ", ")),
             label);
  return FindByLabel(label);
}

Result<std::string> BlockDevices::ReadTail(const std::string& device, std::size_t) {
  return Fail(ErrorKind::kInvalidInput, "this adapter does not read " + device);
}

Status BlockDevices::WriteTail(const std::string& device, const std::string&) {
  return Fail(ErrorKind::kInvalidInput, "this adapter does not write " + device);
}

Result<DiskIdentity> BlockDevices::Identify(const std::string& device) {
  return Fail(ErrorKind::kInvalidInput, "this adapter does not identify " + device);
}

Result<DiskIdentity> BlkidBlockDevices::Identify(const std::string& device) {
  if (device.rfind("/dev/", 0) != 0) {
    return Fail(ErrorKind::kInvalidInput, "not a device: " + device);
  }
  std::string name = device.substr(5);
  std::replace(name.begin(), name.end(), '/', '!');
  const std::string dir = sys_block_ + "/" + name;
  DiskIdentity id;
  id.device = device;
  id.size = SysSizeSectors(dir) * 512;  // sysfs counts 512-byte sectors whatever the disk's
  if (id.size == 0) return Fail(ErrorKind::kNotFound, "no size for " + device + " in " + dir);
  char* real = ::realpath((dir + "/device").c_str(), nullptr);
  if (real == nullptr) return id;  // no device link (a loop, a dm device): no address
  const std::string path(real);
  ::free(real);
  // ".../host2/target2:0:1/2:0:1:0": the last component is H:C:T:L.
  const std::string last = path.substr(path.rfind('/') + 1);
  unsigned host = 0, channel = 0, target = 0, lun = 0;
  char tail = 0;
  const bool scsi =
      std::sscanf(last.c_str(), "%u:%u:%u:%u%c", &host, &channel, &target, &lun, &tail) == 4;
  const bool port_addressed =
      path.find("/ata") != std::string::npos || path.find("/usb") != std::string::npos;
  if (scsi && !port_addressed && channel == 0 && lun == 0) {
    id.scsi_target = static_cast<int>(target);
  }
  return id;
}

Result<std::string> BlkidBlockDevices::ReadTail(const std::string& device, std::size_t bytes) {
  auto opened = OpenReadOnly(device);
  if (!opened) return Fail(opened.error());
  const int fd = *opened;
  FdCloser closer{fd};
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) return Fail(ErrorKind::kIo, "cannot size " + device + ": " + strerror(errno));
  if (static_cast<std::uint64_t>(size) < bytes) return std::string();
  return ReadAt(fd, static_cast<std::uint64_t>(size) - bytes, bytes, device);
}

Status BlkidBlockDevices::WriteTail(const std::string& device, const std::string& data) {
  int fd = ::open(device.c_str(), O_WRONLY | O_EXCL | O_CLOEXEC);
  if (fd < 0) {
    return Fail(errno == EBUSY ? ErrorKind::kUnsafe : ErrorKind::kIo,
                "cannot open " + device + " exclusively to write: " + strerror(errno));
  }
  FdCloser closer{fd};
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0 || static_cast<std::uint64_t>(size) < data.size()) {
    return Fail(ErrorKind::kIo, "cannot size " + device);
  }
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done,
                         size - static_cast<off_t>(data.size()) + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(ErrorKind::kIo, "write to " + device + ": " + strerror(errno));
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return Fail(ErrorKind::kIo, "fsync " + device + ": " + strerror(errno));
  return Ok();
}

}  // namespace onehpc
