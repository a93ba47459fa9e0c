# shellcheck shell=bash
# bootlab.sh - boot Debian root filesystems as systemd-nspawn containers ("appliance VMs")
# with real systemd as PID 1, several at once on a private bridge, so that lab tests exercise
# one-hpc's real units at boot and shutdown. Adapted from the team's boot-lab reference
# (shared/reference/boot-lab.md), which documents every choice below.
#
# Host requirements: root; systemd-nspawn (systemd-container), debootstrap, nsenter
# (util-linux), ip (iproute2); overlayfs; cgroup v1 with a name=systemd hierarchy ("hybrid"
# layout). The host's PID 1 need not be systemd: there is no machined and no system bus, so
# nspawn runs with --register=no --keep-unit, each container in cgroups of its own created
# beforehand, and commands enter the guest with nsenter. No host service is started or changed.
#
# Use:  . tests/lab/bootlab.sh    (bash; safe under set -euo pipefail)
#       bl_host_check || exit 77; bl_host_setup; trap bl_cleanup EXIT
#       bl_rootfs; bl_layer ...; bl_bridge_up; bl_clone vm1 10.78.0.11/24; [bl_bind, bl_put,
#       bl_dropin before boot;] bl_boot vm1; ...
#
# Environment (all optional):
#   BOOTLAB_DIR       one lab: clones, console logs, run files. Default: a new mktemp -d under
#                     ${TMPDIR:-/tmp}; exported so that child scripts share it.
#   BOOTLAB_CACHE     template rootfs and package layers, reused across runs (keyed by stamps).
#                     Default $BOOTLAB_DIR/cache; point it at a persistent directory.
#   BOOTLAB_SUITE     Debian suite to bootstrap (bookworm)
#   BOOTLAB_MIRROR    archive URI; default: read from the host's apt sources at run time
#   BOOTLAB_BRIDGE    the lab bridge (bootlab0)
#   BOOTLAB_LAYERS    layers stacked by bl_clone, top first, ':'-separated
#   BOOTLAB_ON_REBOOT restart (default): relaunch nspawn when the guest reboots (exit status 133),
#                     like systemd-nspawn@.service's RestartForceExitStatus=133; exit: do not.
#   BOOTLAB_MAX_RESTARTS  reboot relaunches per bl_boot before giving up (10)
#
# The lab network is 10.78.0.0/24, host side 10.78.0.1; nothing else is ever put on the
# bridge, and bl_bridge_up refuses if the subnet is already routed on the host.
#
# Layout:
#   $BOOTLAB_CACHE/rootfs (+ rootfs.stamp)   prepared template, lower layer of every clone
#   $BOOTLAB_CACHE/layers/NAME (+ .stamp)    a layer: overlay upper directory over its lowers
#   $BOOTLAB_DIR/m/NAME/{upper,ovlwork,root} per-container overlay; upper = what the guest wrote
#   $BOOTLAB_DIR/m/NAME/binds                its bl_bind options (one --bind= a line)
#   $BOOTLAB_DIR/logs/NAME.console           guest console (boot and shutdown messages)
#   $BOOTLAB_DIR/run/NAME.*                  nspawn PID, exit status, cgroups, history

BOOTLAB_ORIG_DIR=${BOOTLAB_DIR:-}
if [ -z "${BOOTLAB_DIR:-}" ] && [ "${BASH_SOURCE[0]}" != "$0" ]; then
    BOOTLAB_DIR=$(mktemp -d "${TMPDIR:-/tmp}/bootlab.XXXXXX")
fi
BOOTLAB_CACHE=${BOOTLAB_CACHE:-$BOOTLAB_DIR/cache}
BOOTLAB_SUITE=${BOOTLAB_SUITE:-bookworm}
BOOTLAB_BRIDGE=${BOOTLAB_BRIDGE:-bootlab0}
BOOTLAB_LAYERS=${BOOTLAB_LAYERS:-}
BOOTLAB_ON_REBOOT=${BOOTLAB_ON_REBOOT:-restart}
BOOTLAB_MAX_RESTARTS=${BOOTLAB_MAX_RESTARTS:-10}
# Fixed on purpose: the lab never puts other addresses on a bridge it creates.
BOOTLAB_NET=10.78.0
BOOTLAB_HOST_IP=$BOOTLAB_NET.1/24
BL_HAD_BRIDGE=no   # yes once this lab created (or took over) the bridge
BOOTLAB_ID=$(printf %s "$BOOTLAB_DIR" | cksum | awk '{printf "%08x", $1}')
export BOOTLAB_DIR BOOTLAB_CACHE BOOTLAB_SUITE BOOTLAB_BRIDGE BOOTLAB_ON_REBOOT BOOTLAB_MAX_RESTARTS

# Bump when the template preparation in bl_rootfs changes: every cache is then rebuilt.
_BL_PREP_VERSION=1
_BL_INCLUDE=systemd,systemd-sysv,dbus,iproute2,iputils-ping
_BL_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

_bl_now() { date +%s.%N; }
_bl_dt() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b - a}'; }
_bl_err() { echo "bootlab: $*" >&2; }
# True while PID exists and is not a zombie: the host's PID 1 may reap orphans late, so
# "kill -0" alone would call a finished process alive.
_bl_alive() {
    [ -n "${1:-}" ] && [ -d "/proc/$1" ] &&
        ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}
# True if PID is alive and runs COMM (guards against a recycled PID).
_bl_is() { _bl_alive "$1" && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]; }
# A valid machine name: it becomes a hostname, a path component and a cgroup name.
_bl_name_ok() {
    case $1 in ''|*[!a-z0-9-]*|-*) _bl_err "bad machine name '$1' (want [a-z0-9-]+)"; return 1;; esac
    [ ${#1} -le 40 ] || { _bl_err "machine name '$1' is longer than 40 characters"; return 1; }
}

# ---- host ----------------------------------------------------------------------------------

# URI of the Debian archive that serves SUITE, read from the host's apt configuration
# (deb822 *.sources first, then one-line *.list). No mirror host is written in this file.
bl_mirror() {
    local suite=${1:-$BOOTLAB_SUITE} m="" f
    local -a s822=() slist=()
    for f in /etc/apt/sources.list.d/*.sources; do [ -f "$f" ] && s822+=("$f"); done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do [ -f "$f" ] && slist+=("$f"); done
    if [ ${#s822[@]} -gt 0 ]; then
        m=$(awk -v s="$suite" '
            function flush() {
                gsub(/[ \t]+/, " ", types); gsub(/[ \t]+/, " ", suites)
                if (!done && enabled != "no" && (" " types " ") ~ / deb / &&
                    (" " suites " ") ~ (" " s " ") && uris != "") {
                    split(uris, u, /[ \t]+/); print u[1]; done = 1 }
                types = suites = uris = enabled = ""
            }
            FNR == 1 { flush() }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            { key = tolower($1); val = $0; sub(/^[^:]*:[ \t]*/, "", val) }
            key == "types:" { types = val }
            key == "suites:" { suites = val }
            key == "uris:" { uris = val }
            key == "enabled:" { enabled = tolower(val) }
            END { flush() }' "${s822[@]}")
    fi
    if [ -z "$m" ] && [ ${#slist[@]} -gt 0 ]; then
        m=$(awk -v s="$suite" '$1 == "deb" {
                i = 2
                if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == s) { print $i; exit } }' "${slist[@]}")
    fi
    echo "$m"
}

# Can this host run the lab? Prints every missing piece; returns 1 if anything is missing.
# Installs nothing: a test calling it should exit 77 (skipped) on failure.
bl_host_check() {
    local c bad=0
    [ "$(id -u)" = 0 ] || { _bl_err "needs root"; return 1; }
    for c in systemd-nspawn:systemd-container debootstrap:debootstrap nsenter:util-linux \
             ip:iproute2 setsid:util-linux mountpoint:util-linux flock:util-linux; do
        command -v "${c%%:*}" >/dev/null ||
            { _bl_err "missing ${c%%:*} (Debian package ${c#*:})"; bad=1; }
    done
    if [ ! -d /sys/fs/cgroup/systemd ] || [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
        _bl_err "needs the hybrid cgroup layout (v1 name=systemd at /sys/fs/cgroup/systemd)"; bad=1
    fi
    grep -qw overlay /proc/filesystems || modprobe -q overlay 2>/dev/null ||
        { _bl_err "no overlay file system"; bad=1; }
    return $bad
}

# Lab directories. Idempotent.
bl_host_setup() {
    mkdir -p "$BOOTLAB_DIR"/logs "$BOOTLAB_DIR"/run "$BOOTLAB_DIR"/m "$BOOTLAB_CACHE"
}

# nspawn keeps /run/systemd/nspawn/propagate/NAME and refuses to remove it at exit unless it
# is on a tmpfs ("Attempted to remove disk file system ..."). Where /run is not a tmpfs, mount
# a small one there for the lab's lifetime (bl_cleanup removes it).
_bl_nspawn_tmpfs() {
    if [ "$(stat -fc %T /run)" != tmpfs ] && ! mountpoint -q /run/systemd/nspawn; then
        [ -d /run/systemd ] || { mkdir -p /run/systemd && : > "$BOOTLAB_DIR/run/created-run-systemd"; }
        [ -d /run/systemd/nspawn ] || { mkdir /run/systemd/nspawn && : > "$BOOTLAB_DIR/run/created-nspawn-dir"; }
        mount -t tmpfs -o mode=0755,size=16m bootlab-nspawn /run/systemd/nspawn
        : > "$BOOTLAB_DIR/run/mounted-nspawn-tmpfs"
    fi
    return 0
}

# ---- bridge ----------------------------------------------------------------------------------

# Lines of the routing tables that cover or fall inside 10.78.0.0/24 (default routes aside).
_bl_routes_in_lab_net() {
    { ip -4 route show table all to match "$BOOTLAB_NET.1" 2>/dev/null
      ip -4 route show table all root "$BOOTLAB_NET.0/24" 2>/dev/null; } |
        grep -v -e '^default' -e '^unreachable default' | sort -u
}

# Create the lab bridge with 10.78.0.1/24. While a lab owns the bridge it holds a lock
# (fd 8 on /run/lock/bootlab-BRIDGE.lock, released when the lab process ends), so a leftover
# bridge of a killed lab (same name, only our address, no ports, lock free) can be taken over.
# Returns 2 when the host cannot give the lab its network (subnet routed elsewhere, bridge in
# use): callers may treat that as "skipped"; 1 on other errors.
bl_bridge_up() {
    local addrs ports
    if [ -e "$BOOTLAB_DIR/run/created-bridge" ] && ip link show "$BOOTLAB_BRIDGE" >/dev/null 2>&1; then
        ip link set "$BOOTLAB_BRIDGE" up; return
    fi
    mkdir -p /run/lock
    exec 8> "/run/lock/bootlab-$BOOTLAB_BRIDGE.lock"
    if ! flock -n 8; then
        exec 8>&-
        _bl_err "another lab is using $BOOTLAB_BRIDGE (lock /run/lock/bootlab-$BOOTLAB_BRIDGE.lock)"
        return 2
    fi
    if ip link show "$BOOTLAB_BRIDGE" >/dev/null 2>&1; then
        addrs=$(ip -4 -o addr show dev "$BOOTLAB_BRIDGE" | awk '{print $4}' | paste -sd' ')
        ports=$(ip -o link show master "$BOOTLAB_BRIDGE" | wc -l)
        if [ "$addrs" != "$BOOTLAB_HOST_IP" ] || [ "$ports" != 0 ] ||
           ! ip -d -o link show "$BOOTLAB_BRIDGE" | grep -q ' bridge '; then
            exec 8>&-
            _bl_err "$BOOTLAB_BRIDGE exists (addresses '$addrs', $ports ports) and is not an idle" \
                "leftover: containers of an aborted lab may still run (BOOTLAB_DIR=<its directory>" \
                "bash tests/lab/bootlab.sh cleanup), or it is not a lab bridge"
            return 2
        fi
        _bl_err "taking over the idle leftover bridge $BOOTLAB_BRIDGE"
        : > "$BOOTLAB_DIR/run/created-bridge"; BL_HAD_BRIDGE=yes
    else
        if [ -n "$(_bl_routes_in_lab_net)" ]; then
            exec 8>&-
            _bl_err "$BOOTLAB_NET.0/24 is already routed on this host; refusing to create $BOOTLAB_BRIDGE:"
            _bl_routes_in_lab_net | sed 's/^/    /' >&2
            return 2
        fi
        ip link add "$BOOTLAB_BRIDGE" type bridge || { exec 8>&-; return 1; }
        : > "$BOOTLAB_DIR/run/created-bridge"; BL_HAD_BRIDGE=yes
        ip addr add "$BOOTLAB_HOST_IP" dev "$BOOTLAB_BRIDGE" || return 1
    fi
    # A fixed MAC: by default a bridge takes the lowest MAC of its ports, so it changes when
    # that container goes away, and the guests' ARP entries for the host then point nowhere
    # for ~30 s (seen: OneGate unreachable from the controller after a worker was killed).
    ip link set "$BOOTLAB_BRIDGE" address "$(bl_mac "$BOOTLAB_NET.1")" || return 1
    ip link set "$BOOTLAB_BRIDGE" up
}
# Delete the bridge, only if this lab created (or took over) it.
bl_bridge_down() {
    [ -e "$BOOTLAB_DIR/run/created-bridge" ] || return 0
    ip link del "$BOOTLAB_BRIDGE" 2>/dev/null || true
    rm -f "$BOOTLAB_DIR/run/created-bridge"
    exec 8>&-   # the bridge lock
}

# ---- cgroups ---------------------------------------------------------------------------------
# With --keep-unit nspawn moves itself to "<its cgroup>/supervisor" and the guest to
# "<its cgroup>/payload"; started from a shell in the root cgroup, two containers would share
# them. So each container gets cgroups of its own, created before nspawn starts, in
# name=systemd, the controller-less cgroup2 at unified/ (if any) and v1 memory (accounting).
_bl_cgdirs() {
    local tag="bootlab-$BOOTLAB_ID-$1" sd u mem
    sd=$(awk -F: '$2=="name=systemd"{print $3}' /proc/self/cgroup)
    echo "/sys/fs/cgroup/systemd${sd%/}/$tag"
    if [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
        u=$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)
        echo "/sys/fs/cgroup/unified${u%/}/$tag"
    fi
    if [ -d /sys/fs/cgroup/memory ]; then
        mem=$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
        echo "/sys/fs/cgroup/memory${mem%/}/$tag"
    fi
}
# Remove the cgroups recorded for TAG (deepest first) once its supervisor shell has exited.
bl_cg_cleanup() {
    local run=$BOOTLAB_DIR/run/$1 d s
    [ -f "$run.cgdirs" ] || return 0
    s=$(cat "$run.sup" 2>/dev/null || true)
    for _ in $(seq 100); do _bl_alive "$s" || break; sleep 0.1; done
    while read -r d; do
        [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done < "$run.cgdirs"
    return 0
}
# bl_in_cg TAG CMD... : run CMD (e.g. a non-booting nspawn) in cgroups of its own.
bl_in_cg() {
    local tag=$1 run=$BOOTLAB_DIR/run/$1 rc d; shift
    _bl_cgdirs "$tag" > "$run.cgdirs"
    while read -r d; do mkdir -p "$d"; done < "$run.cgdirs"
    (
        while read -r d; do echo "$BASHPID" > "$d/cgroup.procs"; done < "$run.cgdirs"
        exec "$@"
    )
    rc=$?
    rm -f "$run.sup"; bl_cg_cleanup "$tag"; rm -f "$run.cgdirs"
    return $rc
}

# ---- template rootfs ---------------------------------------------------------------------------

_bl_lock_cache() {   # serialise cache builds between labs; fd 9 stays open in the caller
    exec 9> "$BOOTLAB_CACHE/.lock"
    flock -w 900 9 || { _bl_err "cache $BOOTLAB_CACHE is locked by another lab"; return 1; }
}
_bl_unlock_cache() { flock -u 9 2>/dev/null; exec 9>&-; }

# bl_rootfs [--fresh] : build or reuse the template $BOOTLAB_CACHE/rootfs: debootstrap minbase
# + systemd, dbus, iproute2, iputils-ping from the host's mirror, then prepared for many clones.
# Reused as is while its stamp matches (suite, architecture, packages, preparation version).
# Prints what it did and how long it took; sets BL_ROOTFS_RESULT to "cached" or "built".
bl_rootfs() {
    local c=$BOOTLAB_CACHE arch key mirror sec upd r t0 rc=0
    arch=$(dpkg --print-architecture)
    key="$BOOTLAB_SUITE $arch minbase $_BL_INCLUDE prep=$_BL_PREP_VERSION"
    if [ "${1:-}" != --fresh ] && [ -f "$c/rootfs.stamp" ] && [ "$(cat "$c/rootfs.stamp")" = "$key" ]; then
        BL_ROOTFS_RESULT=cached; echo "rootfs: reusing $c/rootfs"; return 0
    fi
    _bl_lock_cache || return 1
    if [ "${1:-}" != --fresh ] && [ -f "$c/rootfs.stamp" ] && [ "$(cat "$c/rootfs.stamp")" = "$key" ]; then
        _bl_unlock_cache; BL_ROOTFS_RESULT=cached; echo "rootfs: reusing $c/rootfs"; return 0
    fi
    # overlayfs must not see its lower layer change under a mounted clone
    if grep -q "lowerdir=[^ ]*$c/" /proc/mounts; then
        _bl_unlock_cache; _bl_err "clones of $c are mounted; power them off first"; return 1
    fi
    mirror=${BOOTLAB_MIRROR:-$(bl_mirror "$BOOTLAB_SUITE")}
    if [ -z "$mirror" ]; then
        _bl_unlock_cache; _bl_err "no apt source for $BOOTLAB_SUITE on the host; set BOOTLAB_MIRROR"; return 1
    fi
    r=$c/rootfs.new
    rm -rf "$r"
    t0=$(_bl_now)
    echo "rootfs: debootstrap $BOOTLAB_SUITE from $mirror (log: $BOOTLAB_DIR/logs/debootstrap.log)"
    if ! debootstrap --variant=minbase --include="$_BL_INCLUDE" "$BOOTLAB_SUITE" "$r" "$mirror" \
            > "$BOOTLAB_DIR/logs/debootstrap.log" 2>&1; then
        rm -rf "$r"; _bl_unlock_cache
        _bl_err "debootstrap failed, see $BOOTLAB_DIR/logs/debootstrap.log"; return 1
    fi
    echo "rootfs: debootstrap took $(_bl_dt "$t0" "$(_bl_now)")s"

    # No shared identity: "uninitialized" makes each clone's first boot a real first boot
    # (ConditionFirstBoot=yes, preset-all); systemd commits a new machine-id at its end.
    echo template > "$r/etc/hostname"
    echo uninitialized > "$r/etc/machine-id"
    # Otherwise systemd takes the D-Bus id made at install time and all clones share it.
    rm -f "$r/var/lib/dbus/machine-id"; ln -s /etc/machine-id "$r/var/lib/dbus/machine-id"
    # Persistent journal: readable from the host after poweroff (journalctl -D).
    mkdir -p "$r/var/log/journal"
    # Timers that are noise in a test. Removing their links alone is undone by the first
    # boot's preset-all; "disable" preset lines keep them off.
    mkdir -p "$r/etc/systemd/system-preset"
    printf 'disable %s\n' apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
        e2scrub_all.timer fstrim.timer > "$r/etc/systemd/system-preset/10-bootlab.preset"
    rm -f "$r"/etc/systemd/system/timers.target.wants/{apt-daily-upgrade,apt-daily,dpkg-db-backup,e2scrub_all,fstrim}.timer
    # Root without password: `systemd-nspawn -b -D <clone root>` console when debugging.
    chroot "$r" passwd -d root >/dev/null
    # apt sources for layers: the host's mirrors for the suite, -updates and -security.
    sec=$(bl_mirror "$BOOTLAB_SUITE-security")
    upd=$(bl_mirror "$BOOTLAB_SUITE-updates")
    rm -f "$r/etc/apt/sources.list"
    {
        printf 'Types: deb\nURIs: %s\nSuites: %s%s\nComponents: main\n' \
            "$mirror" "$BOOTLAB_SUITE" "${upd:+ $BOOTLAB_SUITE-updates}"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
        [ -z "$sec" ] || printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$sec" "$BOOTLAB_SUITE"
    } > "$r/etc/apt/sources.list.d/debian.sources"
    # Smaller template: no downloaded .debs, no package lists (layers run apt-get update).
    rm -f "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin
    find "$r/var/lib/apt/lists" -mindepth 1 -maxdepth 1 ! -name partial ! -name lock -exec rm -rf {} +

    rm -rf "$c/rootfs" "$c/rootfs.stamp" "$c/layers" || rc=1
    mv "$r" "$c/rootfs" && echo "$key" > "$c/rootfs.stamp" || rc=1
    _bl_unlock_cache
    [ $rc = 0 ] || { _bl_err "cannot install the template in $c"; return 1; }
    # shellcheck disable=SC2034  # read by callers
    BL_ROOTFS_RESULT=built
    echo "rootfs: built in $(_bl_dt "$t0" "$(_bl_now)")s, $(du -sh "$c/rootfs" | cut -f1)"
}

# ---- layers ----------------------------------------------------------------------------------

# Stamp of a layer stack (top first, ':'-separated; empty = the template alone).
_bl_stack_stamp() {
    local l
    cat "$BOOTLAB_CACHE/rootfs.stamp" 2>/dev/null || echo none
    for l in ${1//:/ }; do
        [ -f "$BOOTLAB_CACHE/layers/$l.stamp" ] || { echo "missing layer $l"; continue; }
        echo "layer $l: $(cksum < "$BOOTLAB_CACHE/layers/$l.stamp")"
    done
}
# The overlay lowerdir= value of a layer stack on top of the template.
_bl_lowerdir() {
    local l lower=""
    for l in ${1//:/ }; do lower+="$BOOTLAB_CACHE/layers/$l:"; done
    echo "$lower$BOOTLAB_CACHE/rootfs"
}

# bl_layer_build NAME LOWERS KEY [nspawn options...] -- CMD... : the cached layer
# $BOOTLAB_CACHE/layers/NAME = what CMD changes when run, in a non-booting systemd-nspawn with
# the host's network (so apt reaches the mirror), over the template and the layers LOWERS
# (top first, ':'-separated, may be empty). Rebuilt when KEY, the template or a lower layer
# changes. Options before "--" go to nspawn (e.g. --bind-ro=SRC:/run/x; /run is a tmpfs in
# the container, so bind targets there leave no trace in the layer). Output goes to
# $BOOTLAB_DIR/logs/layer-NAME.log. Sets BL_LAYER_RESULT to "cached" or "built".
bl_layer_build() {
    local name=$1 lowers=$2 key=$3 dir b rc t0
    shift 3
    local -a opts=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || { _bl_err "bl_layer_build $name: no command"; return 1; }
    _bl_name_ok "$name" || return 1
    dir=$BOOTLAB_CACHE/layers/$name b=$BOOTLAB_DIR/m/.layer-$name
    key="$(_bl_stack_stamp "$lowers")
$key"
    if [ -f "$dir.stamp" ] && [ "$(cat "$dir.stamp")" = "$key" ]; then
        BL_LAYER_RESULT=cached; echo "layer $name: cached"; return 0
    fi
    _bl_lock_cache || return 1
    if grep -q "lowerdir=[^ ]*${dir}[:,]" /proc/mounts; then
        _bl_unlock_cache; _bl_err "clones using layer $name are mounted; power them off first"; return 1
    fi
    t0=$(_bl_now)
    rm -rf "$dir" "$dir.stamp" "$b"; mkdir -p "$dir" "$b/ovlwork" "$b/root"
    _bl_nspawn_tmpfs
    mount -t overlay "bootlab-layer-$name" \
        -o "lowerdir=$(_bl_lowerdir "$lowers"),upperdir=$dir,workdir=$b/ovlwork" "$b/root" ||
        { _bl_unlock_cache; return 1; }
    bl_in_cg "layer-$name" systemd-nspawn --quiet --register=no --keep-unit \
        --directory="$b/root" --resolv-conf=bind-host --timezone=off \
        --setenv=DEBIAN_FRONTEND=noninteractive --setenv=PATH="$_BL_PATH" \
        "${opts[@]}" "$@" </dev/null > "$BOOTLAB_DIR/logs/layer-$name.log" 2>&1
    rc=$?
    umount "$b/root"; rm -rf "$b"
    if [ $rc = 0 ]; then
        echo "$key" > "$dir.stamp"
        # shellcheck disable=SC2034  # read by callers
        BL_LAYER_RESULT=built
        echo "layer $name: built in $(_bl_dt "$t0" "$(_bl_now)")s, $(du -sh "$dir" | cut -f1)"
    else
        rm -rf "$dir"
        _bl_err "layer $name failed (exit status $rc); last lines of $BOOTLAB_DIR/logs/layer-$name.log:"
        tail -n 20 "$BOOTLAB_DIR/logs/layer-$name.log" | sed 's/^/    /' >&2
    fi
    _bl_unlock_cache
    return $rc
}

# bl_layer NAME PKG... : a layer with Debian packages installed over the template
# (--no-install-recommends; package lists and downloaded .debs are dropped afterwards).
bl_layer() {
    local name=$1; shift
    bl_layer_build "$name" "" "apt: $*" -- sh -c 'apt-get update -q &&
        apt-get install -y -q --no-install-recommends "$@" && apt-get clean &&
        rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin' sh "$@"
}

# ---- clones ----------------------------------------------------------------------------------

# bl_clone NAME [10.78.0.N/24] : an overlay root for NAME over $BOOTLAB_LAYERS and the
# template, with a fresh identity (machine-id "uninitialized" = first boot) and, with an
# address, a static host0 configuration for systemd-networkd (address, and the MAC that
# OpenNebula derives from it, see bl_mac).
bl_clone() {
    local name=$1 ip=${2:-} d=$BOOTLAB_DIR/m/$1 l
    _bl_name_ok "$name" || return 1
    [ -f "$BOOTLAB_CACHE/rootfs.stamp" ] || { _bl_err "no template in $BOOTLAB_CACHE; run bl_rootfs"; return 1; }
    for l in ${BOOTLAB_LAYERS//:/ }; do
        [ -f "$BOOTLAB_CACHE/layers/$l.stamp" ] || { _bl_err "no layer $l in $BOOTLAB_CACHE"; return 1; }
    done
    if [ -n "$ip" ]; then
        case $ip in
            "$BOOTLAB_NET".*/24) ;;
            *) _bl_err "$name: address $ip is outside $BOOTLAB_NET.0/24"; return 1;;
        esac
        local host=${ip#"$BOOTLAB_NET".}; host=${host%/24}
        case $host in ''|*[!0-9]*) _bl_err "$name: bad address $ip"; return 1;; esac
        if [ "$host" -lt 2 ] || [ "$host" -gt 254 ]; then
            _bl_err "$name: address $ip is not usable for a guest (.2 to .254)"; return 1
        fi
    fi
    bl_unclone "$name" || return 1
    mkdir -p "$d/upper" "$d/ovlwork" "$d/root"
    mount -t overlay "bootlab-$name" \
        -o "lowerdir=$(_bl_lowerdir "$BOOTLAB_LAYERS"),upperdir=$d/upper,workdir=$d/ovlwork" "$d/root" ||
        return 1
    echo "$name" > "$d/root/etc/hostname"
    echo uninitialized > "$d/root/etc/machine-id"
    : > "$BOOTLAB_DIR/logs/$name.console"   # a new machine, a new console log
    if [ -n "$ip" ]; then
        mkdir -p "$d/root/etc/systemd/network" "$d/root/etc/systemd/system/multi-user.target.wants"
        printf '[Match]\nName=host0\n[Link]\nMACAddress=%s\n[Network]\nAddress=%s\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
            "$(bl_mac "${ip%/*}")" "$ip" > "$d/root/etc/systemd/network/10-host0.network"
        ln -sf /lib/systemd/system/systemd-networkd.service \
            "$d/root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
    fi
}
# Remove the clone of NAME and its run files (refuses while it runs). Console logs stay.
bl_unclone() {
    local d=$BOOTLAB_DIR/m/$1 run=$BOOTLAB_DIR/run/$1
    if bl_running "$1"; then _bl_err "$1 is running"; return 1; fi
    bl_cg_cleanup "$1"
    rm -f "$run".pid "$run".rc "$run".t0 "$run".cgdirs "$run".sup "$run".history
    if mountpoint -q "$d/root" 2>/dev/null; then umount "$d/root" || return 1; fi
    rm -rf "$d"
}
# The MAC OpenNebula would give a NIC with this IPv4 address: 02:00 and the address in hex.
bl_mac() {
    local -a o
    IFS=. read -ra o <<< "$1"
    printf '02:00:%02x:%02x:%02x:%02x\n' "${o[0]}" "${o[1]}" "${o[2]}" "${o[3]}"
}
bl_root() { echo "$BOOTLAB_DIR/m/$1/root"; }    # the merged root (use before boot / after exit)
bl_upper() { echo "$BOOTLAB_DIR/m/$1/upper"; }  # only the files the guest created or changed

# bl_bind NAME HOSTDIR:GUESTDIR : bind HOSTDIR (created if missing) at GUESTDIR in NAME at every
# bl_boot of this clone (systemd-nspawn --bind=, read-write; reboot relaunches keep it). E.g. a
# host directory shared by several containers, standing in for a network filesystem. Recorded
# with the clone: bl_unclone forgets it.
bl_bind() {
    local name=$1 spec=$2 d=$BOOTLAB_DIR/m/$1
    [ -d "$d" ] || { _bl_err "$name is not cloned"; return 1; }
    case $spec in /*:/*) ;; *) _bl_err "bl_bind $name: want HOSTDIR:GUESTDIR, got '$spec'"; return 1;; esac
    mkdir -p "${spec%%:*}"
    echo "--bind=$spec" >> "$d/binds"
}
# bl_put NAME GUESTPATH [MODE] < CONTENT : a file in the clone before it boots (it lands in the
# clone's upper layer); parent directories are created. Any path, also with the \x2d escapes of
# systemd unit names.
bl_put() {
    local name=$1 path=$2 mode=${3:-0644} root
    root=$(bl_root "$name")
    mountpoint -q "$root" || { _bl_err "$name is not cloned"; return 1; }
    case $path in /*) ;; *) _bl_err "bl_put $name: '$path' is not absolute"; return 1;; esac
    mkdir -p "$(dirname "$root$path")"
    cat > "$root$path" && chmod "$mode" "$root$path"
}
# bl_dropin NAME UNIT CONF CONTENT : /etc/systemd/system/UNIT.d/CONF.conf in the clone before
# boot, e.g. bl_dropin vm1 home.mount lab-bind $'[Mount]\nWhat=/lab/nfs/home\n'.
bl_dropin() { printf '%s\n' "$4" | bl_put "$1" "/etc/systemd/system/$2.d/$3.conf"; }

# ---- OpenNebula context ----------------------------------------------------------------------

# bl_context NAME VAR=value... : write /context/context.sh into the clone exactly as
# OpenNebula writes it on the context CD: the header comment, then NAME='value' lines sorted
# by name (byte order), each ' written as '\'' and newlines kept literally. Mode 0600 in a
# 0700 directory (it may hold passwords).
bl_context() {
    local name=$1 a k v dir; shift
    dir=$(bl_root "$name")/context
    local -A vars=()
    for a in "$@"; do
        k=${a%%=*} v=${a#*=}
        case $k in ''|*[!A-Z0-9_]*) _bl_err "bad context variable name '$k'"; return 1;; esac
        [ "$k" != "$a" ] || { _bl_err "context argument '$k' has no '='"; return 1; }
        vars[$k]=$v
    done
    [ -d "$dir" ] || mkdir -m 0700 "$dir"
    (
        umask 077
        {
            echo "# Context variables generated by OpenNebula"
            for k in $(printf '%s\n' "${!vars[@]}" | LC_ALL=C sort); do
                v=${vars[$k]}
                printf "%s='%s'\n" "$k" "${v//\'/\'\\\'\'}"
            done
        } > "$dir/context.sh"
    )
}
# bl_context_token NAME TOKEN : /context/token.txt as OpenNebula writes it (a trailing newline).
bl_context_token() {
    local dir
    dir=$(bl_root "$1")/context
    [ -d "$dir" ] || mkdir -m 0700 "$dir"
    ( umask 077; printf '%s\n' "$2" > "$dir/token.txt" )
}

# ---- containers ------------------------------------------------------------------------------

# The supervisor shell: joins the container's cgroups, runs nspawn, records its PID and exit
# status, and relaunches it when the guest rebooted (133) if BOOTLAB_ON_REBOOT=restart.
# shellcheck disable=SC2016  # expanded by the supervisor shell
_BL_SUPERVISOR='
run=$1 on_reboot=$2 max=$3; shift 3
echo $$ > "$run.sup"
while read -r d; do echo $$ > "$d/cgroup.procs" || { echo 255 > "$run.rc"; exit 1; }; done < "$run.cgdirs"
n=0
while :; do
    date +%s.%N > "$run.t0"
    "$@" &
    echo $! > "$run.pid.tmp"; mv "$run.pid.tmp" "$run.pid"
    wait $!; rc=$?
    echo "$rc" >> "$run.history"
    while read -r d; do find "$d" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null; done < "$run.cgdirs"
    n=$((n + 1))
    if [ "$rc" = 133 ] && [ "$on_reboot" = restart ] && [ "$n" -le "$max" ]; then
        echo "bootlab: guest rebooted (exit status 133), relaunching nspawn" >&2
        continue
    fi
    echo "$rc" > "$run.rc"; break
done'

# bl_boot NAME [systemd-nspawn options] : boot the clone in the background on the lab bridge
# (pass other network options to replace --network-bridge), with its bl_bind binds; the console goes to
# $BOOTLAB_DIR/logs/NAME.console. Returns once nspawn runs.
bl_boot() {
    local name=$1; shift
    local root=$BOOTLAB_DIR/m/$name/root run=$BOOTLAB_DIR/run/$name d
    local -a net=(--network-bridge="$BOOTLAB_BRIDGE") binds=()
    case " $* " in *" --network-"*|*" --private-network "*) net=();; esac
    mountpoint -q "$root" || { _bl_err "$name is not cloned"; return 1; }
    [ -f "$BOOTLAB_DIR/m/$name/binds" ] && mapfile -t binds < "$BOOTLAB_DIR/m/$name/binds"
    if bl_running "$name"; then _bl_err "$name is already running"; return 1; fi
    bl_cg_cleanup "$name"
    _bl_nspawn_tmpfs
    _bl_cgdirs "$name" > "$run.cgdirs"
    while read -r d; do mkdir -p "$d"; done < "$run.cgdirs"
    rm -f "$run.pid" "$run.rc" "$run.sup"
    setsid bash -c "$_BL_SUPERVISOR" bootlab-supervisor "$run" "$BOOTLAB_ON_REBOOT" "$BOOTLAB_MAX_RESTARTS" \
        systemd-nspawn --quiet --register=no --keep-unit --boot \
            --machine="$name" --directory="$root" "${net[@]}" "${binds[@]}" "$@" \
        </dev/null >>"$BOOTLAB_DIR/logs/$name.console" 2>&1 8>&- 9>&- &
    for _ in $(seq 200); do { [ -s "$run.pid" ] || [ -s "$run.rc" ]; } && break; sleep 0.05; done
    [ -s "$run.pid" ] || { _bl_err "$name: nspawn did not start (console: $BOOTLAB_DIR/logs/$name.console)"; return 1; }
}

bl_pid() { cat "$BOOTLAB_DIR/run/$1.pid" 2>/dev/null; }   # PID of systemd-nspawn
bl_rc() { cat "$BOOTLAB_DIR/run/$1.rc" 2>/dev/null; }     # its final exit status; empty while running
# True while NAME's supervisor has not recorded a final exit status.
bl_running() { [ -f "$BOOTLAB_DIR/run/$1.pid" ] && [ ! -f "$BOOTLAB_DIR/run/$1.rc" ]; }

# Host PID of the guest's PID 1: the child of nspawn that is PID 1 in its own PID namespace
# (nspawn's outer child exists briefly; do not take the first child blindly).
bl_leader() {
    local p c
    local -a kids=()
    p=$(bl_pid "$1") || return 1
    _bl_is "$p" systemd-nspawn || return 1
    read -ra kids 2>/dev/null < "/proc/$p/task/$p/children" || true
    for c in "${kids[@]}"; do
        if awk '/^NSpid:/{exit !(NF >= 3 && $NF == 1)}' "/proc/$c/status" 2>/dev/null; then
            echo "$c"; return 0
        fi
    done
    return 1
}

# bl_exec NAME CMD... : run CMD in all namespaces of the guest with a clean environment. It
# stays in the host's cgroup, not in a guest unit; use bl_run for that.
bl_exec() {
    local name=$1 l; shift
    l=$(bl_leader "$name") || { _bl_err "$name is not running"; return 125; }
    nsenter --target "$l" --all env -i HOME=/root LANG=C.UTF-8 TERM=dumb PATH="$_BL_PATH" "$@" 8>&- 9>&-
}
# bl_run NAME [systemd-run options] CMD... : run CMD as a transient service of the guest's
# systemd (systemd-run --wait --pipe); returns its exit status, pipes stdin and stdout.
bl_run() { local name=$1; shift; bl_exec "$name" systemd-run --quiet --wait --pipe --collect "$@"; }

# bl_wait_running NAME [TIMEOUT] : wait until the guest has finished booting. Prints the state
# and the time since nspawn started. Returns 0 for "running", 3 for "degraded" (a unit
# failed), 1 on timeout, 2 if nspawn exited.
bl_wait_running() {
    local name=$1 timeout=${2:-60} t0 s="" end
    end=$(( $(date +%s) + timeout ))
    while [ "$(date +%s)" -lt "$end" ]; do
        if ! bl_running "$name"; then echo "$name: nspawn exited with status $(bl_rc "$name")"; return 2; fi
        if bl_leader "$name" >/dev/null; then
            s=$(bl_exec "$name" systemctl is-system-running 2>/dev/null || true)
            case $s in
                running|degraded)
                    t0=$(cat "$BOOTLAB_DIR/run/$name.t0")
                    echo "$name: $s after $(_bl_dt "$t0" "$(_bl_now)")s"
                    [ "$s" = running ] && return 0
                    return 3;;
            esac
        fi
        sleep 0.05
    done
    echo "$name: timeout after ${timeout}s, state=${s:-unknown}"; return 1
}

# bl_wait_ip NAME [TIMEOUT] : wait until systemd-networkd has put an IPv4 address on host0.
bl_wait_ip() {
    local name=$1 timeout=${2:-20} end
    end=$(( $(date +%s) + timeout ))
    while [ "$(date +%s)" -lt "$end" ]; do
        bl_exec "$name" ip -4 -o addr show dev host0 2>/dev/null | grep -q ' inet ' && return 0
        sleep 0.05
    done
    _bl_err "$name: no IPv4 address on host0 after ${timeout}s"; return 1
}

# bl_wait_exit NAME [TIMEOUT] : wait until nspawn has exited for good; prints its exit status.
bl_wait_exit() {
    local name=$1 timeout=${2:-60} end
    end=$(( $(date +%s) + timeout ))
    while [ "$(date +%s)" -lt "$end" ]; do
        [ -n "$(bl_rc "$name")" ] && { bl_rc "$name"; return 0; }
        sleep 0.05
    done
    return 1
}

# bl_poweroff NAME [TIMEOUT] : clean poweroff from inside; waits for nspawn to exit. Prints
# the duration and the exit status; BL_POWEROFF_SECONDS holds the duration.
bl_poweroff() {
    local name=$1 timeout=${2:-120} t0 t1 rc
    bl_running "$name" || return 0
    t0=$(_bl_now)
    bl_exec "$name" systemctl poweroff --no-block || return 1
    rc=$(bl_wait_exit "$name" "$timeout") || { echo "$name: poweroff timeout after ${timeout}s"; return 1; }
    t1=$(_bl_now); bl_cg_cleanup "$name"
    BL_POWEROFF_SECONDS=$(_bl_dt "$t0" "$t1")
    echo "$name: powered off in ${BL_POWEROFF_SECONDS}s, nspawn exit status $rc"
    [ "$rc" = 0 ]
}
# What "machinectl poweroff" does: SIGRTMIN+4 to the guest's PID 1. Does not wait.
bl_poweroff_signal() { local l; l=$(bl_leader "$1") && kill -s SIGRTMIN+4 "$l"; }
# bl_reboot NAME [TIMEOUT] : reboot from inside and wait until nspawn has been relaunched
# (needs BOOTLAB_ON_REBOOT=restart, the default). Then use bl_wait_running.
bl_reboot() {
    local name=$1 timeout=${2:-60} n end
    n=$({ wc -l < "$BOOTLAB_DIR/run/$name.history"; } 2>/dev/null || echo 0)
    bl_exec "$name" systemctl reboot --no-block || return 1
    end=$(( $(date +%s) + timeout ))
    while [ "$(date +%s)" -lt "$end" ]; do
        if [ "$({ wc -l < "$BOOTLAB_DIR/run/$name.history"; } 2>/dev/null || echo 0)" -gt "$n" ]; then
            bl_running "$name" && return 0
            _bl_err "$name: nspawn exited with status $(bl_rc "$name") instead of rebooting"; return 1
        fi
        sleep 0.05
    done
    _bl_err "$name: no reboot within ${timeout}s"; return 1
}

# bl_kill NAME : last resort. SIGTERM to nspawn (the guest halts), then SIGKILL to the guest's
# PID 1 and to nspawn. Only the recorded PIDs are signalled, after checking what they run.
bl_kill() {
    local name=$1 p l
    p=$(bl_pid "$name" || true)
    bl_running "$name" || p=""
    if [ -n "$p" ] && _bl_is "$p" systemd-nspawn; then
        l=$(bl_leader "$name" || true)
        kill -TERM "$p" 2>/dev/null
        for _ in $(seq 100); do _bl_alive "$p" || break; sleep 0.1; done
        if _bl_alive "$p"; then
            [ -n "$l" ] && kill -KILL "$l" 2>/dev/null
            sleep 1; _bl_is "$p" systemd-nspawn && kill -KILL "$p" 2>/dev/null
        fi
    fi
    bl_wait_exit "$name" 10 >/dev/null
    bl_cg_cleanup "$name"
}

# bl_journal NAME [journalctl options] : the guest's journal, live (through nsenter) while it
# runs, from the persistent journal in its overlay after poweroff.
bl_journal() {
    local name=$1; shift
    if bl_running "$name" && bl_leader "$name" >/dev/null; then
        bl_exec "$name" journalctl --no-pager "$@"
    else
        journalctl --no-pager -D "$(bl_upper "$name")/var/log/journal" "$@"
    fi
}

# bl_mem NAME : memory of one running guest (v1 memory cgroup usage, includes page cache).
bl_mem() {
    local d u
    while read -r d; do
        case $d in
            */memory/*) [ -r "$d/memory.usage_in_bytes" ] && u=$(cat "$d/memory.usage_in_bytes");;
        esac
    done < "$BOOTLAB_DIR/run/$1.cgdirs"
    awk -v n="$1" -v u="${u:-0}" 'BEGIN{printf "%s: memory cgroup %.1f MiB\n", n, u / 1048576}'
}

# ---- clean-up --------------------------------------------------------------------------------

# Stop every container of this lab (by recorded PID), unmount clones, remove cgroups, the
# bridge and the tmpfs if this lab made them. Keeps logs and the cache. Safe to call twice;
# always returns 0. --purge also deletes $BOOTLAB_DIR (and a cache inside it).
bl_cleanup() {
    local f n
    for f in "$BOOTLAB_DIR"/run/*.pid; do
        [ -e "$f" ] || continue
        n=$(basename "$f" .pid)
        bl_running "$n" || continue
        if bl_leader "$n" >/dev/null; then
            bl_poweroff "$n" 30 || bl_kill "$n"
        else
            bl_kill "$n"
        fi
    done
    for f in "$BOOTLAB_DIR"/run/*.cgdirs; do [ -e "$f" ] && bl_cg_cleanup "$(basename "$f" .cgdirs)"; done
    for f in "$BOOTLAB_DIR"/m/*/root "$BOOTLAB_DIR"/m/.layer-*/root; do
        mountpoint -q "$f" 2>/dev/null && { umount "$f" || umount -l "$f"; }
    done
    rm -rf "$BOOTLAB_DIR/m"
    bl_bridge_down
    if [ -e "$BOOTLAB_DIR/run/mounted-nspawn-tmpfs" ]; then
        if pgrep -x systemd-nspawn >/dev/null; then
            _bl_err "other systemd-nspawn processes run; leaving the tmpfs on /run/systemd/nspawn"
        else
            umount /run/systemd/nspawn
            [ -e "$BOOTLAB_DIR/run/created-nspawn-dir" ] && rmdir /run/systemd/nspawn 2>/dev/null
            [ -e "$BOOTLAB_DIR/run/created-run-systemd" ] && rmdir /run/systemd 2>/dev/null
        fi
    fi
    rm -rf "$BOOTLAB_DIR/run"
    [ "${1:-}" = --purge ] && rm -rf "$BOOTLAB_DIR"
    return 0
}

# What this lab left on the host: prints one line per leftover (overlay mounts under
# $BOOTLAB_DIR, cgroups of this lab, the bridge if this lab ever had it, the tmpfs). Returns 1
# if anything is left.
bl_leftovers() {
    local bad=0 m c
    m=$(awk -v d="$BOOTLAB_DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts)
    [ -z "$m" ] || { echo "mounts under $BOOTLAB_DIR: $m"; bad=1; }
    c=$(find /sys/fs/cgroup -maxdepth 6 -type d -name "bootlab-$BOOTLAB_ID-*" 2>/dev/null)
    [ -z "$c" ] || { echo "cgroups: $c"; bad=1; }
    if [ "$BL_HAD_BRIDGE" = yes ] && ip link show "$BOOTLAB_BRIDGE" >/dev/null 2>&1; then
        echo "bridge $BOOTLAB_BRIDGE"; bad=1
    fi
    if grep -q ' /run/systemd/nspawn tmpfs ' /proc/mounts && ! pgrep -x systemd-nspawn >/dev/null &&
       grep -q '^bootlab-nspawn ' /proc/mounts; then
        echo "tmpfs on /run/systemd/nspawn"; bad=1
    fi
    return $bad
}

# Run directly, it cleans up after an aborted lab (the lab directory is printed at its start):
#   BOOTLAB_DIR=/tmp/bootlab.XXXXXX bash tests/lab/bootlab.sh cleanup [--purge]
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case ${1:-} in
        cleanup)
            if [ -z "${BOOTLAB_ORIG_DIR:-}" ] || [ ! -d "$BOOTLAB_ORIG_DIR" ]; then
                echo "usage: BOOTLAB_DIR=<lab directory> $0 cleanup [--purge]" >&2; exit 2
            fi
            [ -e "$BOOTLAB_DIR/run/created-bridge" ] && BL_HAD_BRIDGE=yes
            bl_cleanup "${2:-}"
            if bl_leftovers; then echo "nothing of $BOOTLAB_DIR is left"; else exit 1; fi;;
        *) echo "usage: BOOTLAB_DIR=<lab directory> $0 cleanup [--purge]   (otherwise: source it)" >&2
           exit 2;;
    esac
fi
