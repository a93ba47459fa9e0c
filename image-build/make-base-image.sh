#!/bin/bash
# make-base-image.sh - builds the Debian 12 or 13 base image that the Packer template boots
# (vendor cloud images cannot be downloaded here): a partitioned qcow2 that boots with BIOS
# (extlinux) and with UEFI (GRUB on an EFI system partition), a kernel, an fstab by UUID, a
# serial console, a root that grows to the disk's size at boot (grow-root),
# systemd-networkd (DHCP unless the CONTEXT CD says otherwise), OpenSSH and context-lite
# (root's SSH keys and static network from the OpenNebula CONTEXT CD). No cloud-init, no one-context. Only Debian packages, from the mirror the host's
# apt sources name.
#
# Usage: make-base-image.sh [--output FILE] [--size SIZE] [--suite SUITE] [--mirror URL]
#                           [--cache DIR] [--fresh]
#   --output FILE   the qcow2 to write (default: ./debian-<release>-base.qcow2)
#   --size SIZE     virtual disk size (default 8G)
#   --suite SUITE   Debian suite: bookworm (12, the default) or trixie (13)
#   --mirror URL    Debian mirror (default: the host's apt source for SUITE)
#   --cache DIR     where the bootstrap tarball is kept between runs
#                   (default: $ONEHPC_IMAGE_CACHE or /var/cache/one-hpc-image)
#   --fresh         bootstrap again even if the cache matches
#
# Needs root (loop devices, mounts) and the packages mmdebstrap, extlinux, syslinux-common,
# grub-efi-amd64-bin, dosfstools, mtools, qemu-utils, e2fsprogs, fdisk. Takes 2-4 minutes (about 1 minute with a cached tarball).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$HERE/lib.sh"

# Bump when the bootstrap (not the later configuration) changes, to invalidate the cache.
BOOTSTRAP_VERSION=1
PACKAGES="systemd-sysv,udev,kmod,dbus,linux-image-amd64,initramfs-tools,openssh-server,\
systemd-resolved,systemd-timesyncd,iproute2,iputils-ping,netbase,ca-certificates,e2fsprogs,\
procps,less,fdisk"

output=""
size=8G
suite=bookworm
mirror=""
cache=${ONEHPC_IMAGE_CACHE:-/var/cache/one-hpc-image}
fresh=no

die() { echo "make-base-image: $*" >&2; exit 1; }
log() { echo "make-base-image: $*"; }
usage() { sed -n '9,19s/^# \{0,1\}//p' "$0" >&2; exit 2; }

# The image's file system is mounted in a mount namespace of this script's own. A namespace
# another process clones from the host's while it is mounted there (a container starting
# beside this build: make test's lab) keeps it mounted after our umount: its superblock is never
# written back, the image keeps a journal to replay, and that replay at the VM's first boot
# writes back the block 0 the journal saw at mount time, zeroing extlinux's boot sector (seen in
# make test, 2026-12-05: every image built from such a base stopped booting after one boot).
if [ "$(id -u)" = 0 ] && [ "${ONEHPC_BASE_IMAGE_NS:-}" != private ]; then
    command -v unshare >/dev/null || die "unshare not found (apt-get install util-linux)"
    ONEHPC_BASE_IMAGE_NS=private exec unshare --mount --propagation private -- "$BASH" "$0" "$@"
fi

while [ $# -gt 0 ]; do
    case $1 in
        --output) [ $# -ge 2 ] || usage; output=$2; shift 2;;
        --size) [ $# -ge 2 ] || usage; size=$2; shift 2;;
        --suite) [ $# -ge 2 ] || usage; suite=$2; shift 2;;
        --mirror) [ $# -ge 2 ] || usage; mirror=$2; shift 2;;
        --cache) [ $# -ge 2 ] || usage; cache=$2; shift 2;;
        --fresh) fresh=yes; shift;;
        -h|--help) usage;;
        *) echo "make-base-image: unknown argument '$1'" >&2; usage;;
    esac
done

[ "$(id -u)" = 0 ] || die "must run as root (loop devices and mounts)"
for tool in mmdebstrap extlinux qemu-img sfdisk losetup mkfs.ext4 blkid systemctl grub-mkimage \
    mkfs.vfat mmd mcopy mdir; do
    command -v "$tool" >/dev/null || die "$tool not found (apt-get install mmdebstrap extlinux syslinux-common grub-efi-amd64-bin dosfstools mtools qemu-utils fdisk e2fsprogs systemd)"
done
MBR=/usr/lib/EXTLINUX/mbr.bin
[ -f "$MBR" ] || die "$MBR not found (apt-get install extlinux syslinux-common)"
GRUB_EFI=/usr/lib/grub/x86_64-efi
[ -f "$GRUB_EFI/linux.mod" ] || die "$GRUB_EFI/linux.mod not found (apt-get install grub-efi-amd64-bin)"
case $size in *[!0-9KMGT]*|"") die "--size $size: expected a size such as 8G";; esac

release=$(debian_release "$suite")
[ -n "$release" ] || die "--suite $suite: expected bookworm (Debian 12) or trixie (Debian 13)"
output=${output:-$PWD/debian-$release-base.qcow2}
if [ -z "$mirror" ]; then
    mirror=$(debian_mirror "$suite")
    [ -n "$mirror" ] || die "no apt source for suite $suite on this host; pass --mirror URL"
fi
security=$(debian_mirror "$suite-security")
case $output in /*) ;; *) output=$PWD/$output;; esac
mkdir -p "$(dirname "$output")" "$cache"

# ---- bootstrap (cached tarball) ------------------------------------------------------------
key=$(printf '%s\n' "$BOOTSTRAP_VERSION" "$suite" "$mirror" "$security" "$PACKAGES" | sha256sum | cut -c1-16)
tarball=$cache/$suite-base-$key.tar
if [ "$fresh" = yes ] || [ ! -s "$tarball" ]; then
    log "bootstrapping $suite from $mirror (mmdebstrap)"
    sources=("deb $mirror $suite main" "deb $mirror $suite-updates main")
    if [ -n "$security" ]; then sources+=("deb $security $suite-security main"); fi
    # shellcheck disable=SC2016  # $1 is expanded by mmdebstrap's hook, not here
    mmdebstrap --mode=root --variant=minbase --include="$PACKAGES" --format=tar \
        --aptopt='Acquire::Retries "3"' \
        --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
        "$suite" "$tarball.tmp" "${sources[@]}"
    mv -f "$tarball.tmp" "$tarball"
else
    log "reusing $tarball"
fi

# ---- disk: MBR; partition 1 the root (ext4, active), partition 2 the EFI system partition ----
# The ESP (FAT, type 0xEF: UEFI firmware finds it in an MBR as in a GPT) comes first on the
# disk, the root after it and last, so that grow-root can give the root the rest of the disk;
# the root keeps number 1 (vda1), as in the images before the ESP.
work=$(mktemp -d "$(dirname "$output")/.base-image.XXXXXX")
loop=""
mnt=$work/root
cleanup() {
    set +e
    if mountpoint -q "$mnt"; then umount -R "$mnt"; fi
    if [ -n "$loop" ]; then losetup -d "$loop"; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

raw=$work/disk.raw
truncate -s "$size" "$raw"
esp_start=2048 esp_sectors=65536 root_start=67584   # 1 MiB, 32 MiB, 33 MiB
printf 'label: dos\nstart=%s, type=83, bootable\nstart=%s, size=%s, type=ef\n' \
    "$root_start" "$esp_start" "$esp_sectors" | sfdisk --quiet --no-reread --no-tell-kernel "$raw"
# The partition through a loop device of its own (offset 33 MiB): partition scanning of loop
# devices needs udev and a partitionable loop driver, which build hosts often lack.
part_offset=$((root_start * 512))
part_bytes=$(( $(stat -c %s "$raw") - part_offset ))
loop=$(losetup --find --show --offset "$part_offset" --sizelimit "$part_bytes" "$raw")
part=$loop
# extlinux reads ext4 without the 64bit feature; a root fs of a VM needs nothing more.
mkfs.ext4 -q -L root -O ^64bit "$part"
uuid=$(blkid -c /dev/null -o value -s UUID "$part")
mkdir -p "$mnt"
mount "$part" "$mnt"
tar -C "$mnt" --numeric-owner --xattrs --xattrs-include='*' -xpf "$tarball"

# ---- configuration ---------------------------------------------------------------------------
log "configuring (root UUID $uuid)"
printf '# <file system> <mount point> <type> <options> <dump> <pass>\nUUID=%s / ext4 errors=remount-ro 0 1\n' \
    "$uuid" > "$mnt/etc/fstab"
echo debian > "$mnt/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$mnt/etc/hosts"
# An empty machine-id: every VM makes its own at first boot (and runs the presets).
: > "$mnt/etc/machine-id"
rm -f "$mnt/var/lib/dbus/machine-id"
ln -s /etc/machine-id "$mnt/var/lib/dbus/machine-id"

# apt: the same mirror, written as the image's only source.
rm -f "$mnt/etc/apt/sources.list"
{
    printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$mirror" "$suite" "$suite"
    if [ -n "$security" ]; then
        printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$security" "$suite"
    fi
} > "$mnt/etc/apt/sources.list.d/debian.sources"

# Network: DHCP on every Ethernet NIC unless context-lite wrote a static file for it.
mkdir -p "$mnt/etc/systemd/network"
printf '[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n' > "$mnt/etc/systemd/network/99-default-dhcp.network"
ln -sf /run/systemd/resolve/stub-resolv.conf "$mnt/etc/resolv.conf"

# SSH: host keys are made at the first start (none are in the image); keys only for root.
mkdir -p "$mnt/etc/systemd/system/ssh.service.d"
printf '%s\n' '# make-base-image.sh: the image has no host keys' '[Service]' 'ExecStartPre=' \
    'ExecStartPre=/usr/bin/ssh-keygen -A' 'ExecStartPre=/usr/sbin/sshd -t' \
    > "$mnt/etc/systemd/system/ssh.service.d/05-host-keys.conf"
printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
    > "$mnt/etc/ssh/sshd_config.d/10-base-image.conf"

install -m 0755 "$HERE/base/context-lite" "$mnt/usr/local/sbin/context-lite"
install -m 0644 "$HERE/base/context-lite.service" "$mnt/etc/systemd/system/context-lite.service"
# The root grows to the disk the VM is given (sfdisk, partx, resize2fs).
install -m 0755 "$HERE/base/grow-root" "$mnt/usr/local/sbin/grow-root"
install -m 0644 "$HERE/base/grow-root.service" "$mnt/etc/systemd/system/grow-root.service"
systemctl --root="$mnt" enable context-lite.service grow-root.service systemd-networkd.service \
    systemd-resolved.service systemd-timesyncd.service ssh.service >/dev/null 2>&1
# Stop timers that would only make noise (and network traffic) in an appliance.
mkdir -p "$mnt/etc/systemd/system-preset"
printf 'disable apt-daily.timer\ndisable apt-daily-upgrade.timer\n' \
    > "$mnt/etc/systemd/system-preset/10-base-image.preset"
systemctl --root="$mnt" disable apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1 || true

# Logs on the serial console are the only way to see a VM that does not come up.
mkdir -p "$mnt/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=persistent\n' > "$mnt/etc/systemd/journald.conf.d/10-base-image.conf"
rm -rf "$mnt/var/lib/apt/lists/"* "$mnt/var/cache/apt/"*.bin
find "$mnt/var/log" -type f -exec truncate -s 0 {} +

# ---- boot loaders: extlinux on the root and syslinux's MBR (BIOS); GRUB on the ESP (UEFI) ---
# Both read the kernel and initrd through the root's /vmlinuz and /initrd.img links, which
# Debian's kernel packages keep pointing at the newest kernel: nothing to update on upgrades.
mkdir -p "$mnt/boot/extlinux"
cat > "$mnt/boot/extlinux/extlinux.conf" <<EOF
# make-base-image.sh: /vmlinuz and /initrd.img follow kernel upgrades.
DEFAULT debian
PROMPT 0
TIMEOUT 1
LABEL debian
    LINUX /vmlinuz
    INITRD /initrd.img
    APPEND root=UUID=$uuid ro console=tty0 console=ttyS0,115200n8
EOF
if [ ! -e "$mnt/vmlinuz" ] || [ ! -e "$mnt/initrd.img" ]; then die "no /vmlinuz or /initrd.img in the image"; fi
extlinux --install "$mnt/boot/extlinux" >/dev/null
sync
umount "$mnt"
# Unmounted for real: the superblock was written back, nothing is left to replay (see above).
if dumpe2fs -h "$part" 2>/dev/null | grep -q '^Filesystem features:.*needs_recovery'; then
    die "the root file system still has a journal to replay after its umount (is it mounted in another mount namespace?): its first boot would erase the boot sector"
fi
losetup -d "$loop"
loop=""
# The partition's boot sector must know where the partition starts ("hidden sectors", offset
# 0x1C, little endian): extlinux saw a loop device at offset 0 and wrote 0.
hidden=$(printf '%08x' "$root_start")
printf %b "\\x${hidden:6:2}\\x${hidden:4:2}\\x${hidden:2:2}\\x${hidden:0:2}" |
    dd of="$raw" bs=1 seek=$((part_offset + 0x1C)) conv=notrunc status=none
# The syslinux MBR: boots the active partition.
dd if="$MBR" of="$raw" bs=440 count=1 conv=notrunc status=none
[ "$(dd if="$raw" bs=1 skip=$((part_offset + 3)) count=8 status=none)" = SYSLINUX ] ||
    die "no SYSLINUX boot sector at the start of the partition after extlinux --install"

# UEFI: the firmware runs \EFI\BOOT\BOOTX64.EFI of a FAT partition (the removable-media path:
# no boot entry in the VM's NVRAM needed, so a fresh OVMF_VARS boots it). That file is a GRUB
# image with its modules and this configuration built in: find the root by its UUID, boot
# the kernel as extlinux does. Not signed: Secure Boot is not supported.
printf '%s\n' "search --no-floppy --fs-uuid --set=root $uuid" \
    "linux /vmlinuz root=UUID=$uuid ro console=tty0 console=ttyS0,115200n8" \
    'initrd /initrd.img' 'boot' > "$work/grub-early.cfg"
grub-mkimage --format=x86_64-efi --prefix=/EFI/BOOT --config="$work/grub-early.cfg" \
    --output="$work/BOOTX64.EFI" part_msdos ext2 fat search search_fs_uuid linux boot gzio \
    serial efi_gop normal
truncate -s $((esp_sectors * 512)) "$work/esp.img"
out=$(mkfs.vfat -n EFI -h "$esp_start" "$work/esp.img" 2>&1) || die "mkfs.vfat of the EFI system partition failed: $out"
mmd -i "$work/esp.img" ::/EFI ::/EFI/BOOT
mcopy -i "$work/esp.img" "$work/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
dd if="$work/esp.img" of="$raw" bs=512 seek="$esp_start" conv=notrunc status=none
mdir -i "$raw@@$((esp_start * 512))" -b ::/EFI/BOOT 2>/dev/null | grep -q 'BOOTX64.EFI$' ||
    die "no EFI/BOOT/BOOTX64.EFI on the EFI system partition"

log "writing $output"
qemu-img convert -c -O qcow2 "$raw" "$output.tmp"
mv -f "$output.tmp" "$output"
log "done: $output ($(du -h "$output" | cut -f1) on disk, $size virtual)"
