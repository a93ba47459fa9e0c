#!/bin/bash
# lib.sh - helpers shared by the image-build scripts and the image tests (source it).

# mirror_for SUITE: the URI of the host's first enabled apt source of type "deb" whose suites
# include SUITE (deb822 *.sources first, then one-line *.list files). Prints nothing when no
# source matches. The repository never names a mirror host: the host's apt configuration does.
mirror_for() {
    local suite=$1 m="" f
    local -a deb822=() oneline=()
    for f in /etc/apt/sources.list.d/*.sources; do [ -f "$f" ] && deb822+=("$f"); done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do [ -f "$f" ] && oneline+=("$f"); done
    if [ ${#deb822[@]} -gt 0 ]; then
        m=$(awk -v want="$suite" '
            function stanza_end() {
                if (!found && enabled != "no" && (" " types " ") ~ / deb / &&
                    (" " suites " ") ~ (" " want " ") && uris != "") {
                    split(uris, parts, /[ \t]+/); print parts[1]; found = 1
                }
                types = suites = uris = enabled = ""
            }
            FNR == 1 { stanza_end() }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { stanza_end(); next }
            {
                field = tolower($1); value = $0; sub(/^[^:]*:[ \t]*/, "", value)
                gsub(/[ \t]+/, " ", value)
            }
            field == "types:" { types = value }
            field == "suites:" { suites = value }
            field == "uris:" { uris = value }
            field == "enabled:" { enabled = tolower(value) }
            END { stanza_end() }' "${deb822[@]}")
    fi
    if [ -z "$m" ] && [ ${#oneline[@]} -gt 0 ]; then
        m=$(awk -v want="$suite" '$1 == "deb" {
                i = 2
                if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == want) { print $i; exit }
            }' "${oneline[@]}")
    fi
    printf '%s\n' "$m"
}

# debian_mirror SUITE: mirror_for SUITE, or, when the host's sources do not name SUITE (a
# Debian 12 host building a Debian 13 image), the URI of the host's own release: the same
# archive serves both (SUITE-security from the host's security source).
debian_mirror() {
    local suite=$1 m own
    m=$(mirror_for "$suite")
    if [ -z "$m" ]; then
        own=$(. /etc/os-release 2>/dev/null && printf '%s\n' "${VERSION_CODENAME:-}")
        if [ -n "$own" ]; then
            case $suite in
                *-security) m=$(mirror_for "$own-security");;
                *) m=$(mirror_for "$own");;
            esac
        fi
    fi
    printf '%s\n' "$m"
}

# debian_release SUITE: the release number of a Debian suite (bookworm 12, trixie 13), empty
# for one this project does not build.
debian_release() {
    case $1 in
        bookworm) echo 12;;
        trixie) echo 13;;
    esac
}

# kvm_usable: true when /dev/kvm can be opened for reading and writing (qemu -accel kvm).
kvm_usable() {
    [ -c /dev/kvm ] || return 1
    { : <>/dev/kvm; } 2>/dev/null
}

# now_ms: milliseconds since the epoch.
now_ms() {
    local t
    t=$(date +%s%N)
    printf '%s\n' $((t / 1000000))
}

# kvm_boots_bios [SECONDS]: true when KVM really runs an ordinary BIOS guest: a 512-byte boot
# sector that writes "OK" to the serial port, under qemu -accel kvm. Some nested hypervisors
# answer the KVM ioctls but cannot run real-mode code (e.g. PVM), so the ioctl alone is not
# enough for booting disk images.
kvm_boots_bios() {
    local secs=${1:-20} dir rc=1
    kvm_usable || return 1
    command -v qemu-system-x86_64 >/dev/null || return 1
    dir=$(mktemp -d)
    # mov dx,0x3f8; mov al,'O'; out dx,al; mov al,'K'; out dx,al; hlt; jmp hlt
    printf '\272\370\003\260\117\356\260\113\356\364\353\375' > "$dir/boot.img"
    truncate -s 510 "$dir/boot.img"
    printf '\125\252' >> "$dir/boot.img"
    qemu_serial_says "$secs" OK "$dir" -accel kvm -m 64 \
        -drive "format=raw,file=$dir/boot.img,if=floppy" -boot a
    rc=$?
    rm -rf "$dir"
    return "$rc"
}

# kvm_boots_image IMAGE [SECONDS]: the image's kernel starts under KVM (serial console). The
# boot-sector probe (kvm_boots_bios) is not enough: on a nested PVM host it passes and a real
# guest still dies in extlinux ("KVM internal error. Suberror: 1"), paused, not exited.
kvm_boots_image() {
    local secs=${2:-60} dir rc
    kvm_usable || return 1
    dir=$(mktemp -d)
    qemu_serial_says "$secs" 'Run /init as init process|Welcome to' "$dir" -accel kvm -m 512 \
        -snapshot -drive "file=$1,if=virtio,format=qcow2"
    rc=$?
    rm -rf "$dir"
    return "$rc"
}

# qemu_serial_says SECONDS REGEX DIR QEMU_ARGS...: true when a qemu started with QEMU_ARGS
# (no display, no monitor, no reboot; serial console to DIR/serial) prints REGEX on its
# serial console within SECONDS; false when it exits, reports a KVM internal error, or the
# time runs out. The qemu is stopped either way.
qemu_serial_says() {
    local secs=$1 regex=$2 dir=$3 pid i rc=1
    shift 3
    timeout "$secs" qemu-system-x86_64 -display none -monitor none -no-reboot \
        -serial "file:$dir/serial" "$@" >"$dir/qemu.log" 2>&1 &
    pid=$!
    for ((i = 0; i < secs * 5; i++)); do
        if grep -qE "$regex" "$dir/serial" 2>/dev/null; then rc=0; break; fi
        grep -q 'KVM internal error' "$dir/qemu.log" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return "$rc"
}

# compact_image IMAGE WORK: IMAGE (qcow2) with the free blocks of its Linux partition zeroed,
# then compressed; WORK holds a raw copy meanwhile. The guest's fstrim cannot free a qcow2
# cluster (64 KiB) that a used block shares, so the contents of files deleted during a build
# (apt's lists and caches) stay in the image: 45,035 such blocks, 176 MiB of a 411 MB image,
# were seen. `e2fsck -E discard` on the raw copy punches a hole in every free block (read back
# as zeros) and checks the filesystem on the way: one that needs a repair is refused.
compact_image() {
    local image=$1 raw=$2/compact.raw start out
    qemu-img convert -O raw "$image" "$raw" || return 1
    start=$(sfdisk --dump "$raw" | awk '$0 ~ /type=83/ { sub(/,/, "", $4); print $4; exit }')
    if ! [[ $start =~ ^[0-9]+$ ]]; then
        echo "compact_image: no Linux partition (type 83) in $image" >&2; rm -f "$raw"; return 1
    fi
    if ! out=$(e2fsck -f -p -E discard "$raw?offset=$((start * 512))" 2>&1); then
        echo "compact_image: the filesystem of $image needs a repair: $out" >&2; rm -f "$raw"; return 1
    fi
    qemu-img convert -c -O qcow2 "$raw" "$image.tmp" || { rm -f "$raw" "$image.tmp"; return 1; }
    rm -f "$raw"
    mv -f "$image.tmp" "$image"
}
