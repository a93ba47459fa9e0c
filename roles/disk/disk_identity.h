// Which guest device is the disk OpenNebula lists as TARGET=<x>. The guest's device names are
// not OpenNebula's: TARGET is what OpenNebula asks libvirt for, but the guest names a disk in
// the order it finds it (a disk hot-plugged after a detach takes the lowest free name), and a
// disk on another bus gets another prefix (TARGET hdb on a q35 machine's SATA bus is sda in
// the guest). OpenNebula gives the guest no serial and no WWN (its KVM driver writes neither),
// so a listed disk is matched by what the guest can check:
//   1. a TARGET sd<letter> by its SCSI address: OpenNebula's KVM driver pins such a disk to
//      SCSI target <letter - 'a'> on controller 0, bus 0, unit 0; the guest reads it from
//      sysfs (H:C:T:L) whatever name it gave the disk;
//   2. otherwise by its size: OpenNebula's SIZE (MiB) against the device's. One device of that
//      size (and not matched already) is the disk whatever its name; several of that size:
//      only the one that also has TARGET's name; a device of the name but another size is not
//      the disk.
//   3. a listed disk without SIZE: by name alone (said in the note).
// A listed disk that nothing identifies stays unmatched: a device without OpenNebula's word
// is never taken for a datablock. A device is matched to one listed disk at most.
#ifndef ONEHPC_ROLES_DISK_DISK_IDENTITY_H_
#define ONEHPC_ROLES_DISK_DISK_IDENTITY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "roles/disk/home_disk.h"
#include "roles/os/block_devices.h"

namespace onehpc::disk {

/// One disk of OpenNebula's list (TEMPLATE.DISK) with its SIZE in MiB (0 = not given).
struct ListedDisk {
  DiskFacts facts;
  std::uint64_t size_mib = 0;
};

struct DiskMatch {
  std::map<std::string, DiskFacts> by_device;  ///< "/dev/sda" -> the listed disk it is
  std::vector<std::string> notes;              ///< one line per listed disk: how, or why not
};

/// Matches OpenNebula's disks to the guest's (every whole disk, the root disk included).
DiskMatch MatchListedDisks(const std::vector<ListedDisk>& listed,
                           const std::vector<DiskIdentity>& guest);

/// The SCSI target OpenNebula pins a TARGET to ("sdb" -> 1), -1 for any other TARGET.
int ScsiTargetOf(const std::string& target);

}  // namespace onehpc::disk

#endif  // ONEHPC_ROLES_DISK_DISK_IDENTITY_H_
