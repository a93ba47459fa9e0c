#!/bin/bash
# lab_first_boot_test.sh - a first boot with /etc/machine-id = "uninitialized" of an image with
# one-hpc's .deb and OpenNebula's one-context.
#
# On such a boot systemd applies the presets to every unit (enable-only) and enables every unit
# no preset names. one-context's package enables only one-context-local and one-context; its
# reconfigure units (WantedBy=multi-user.target, After=one-context.service, which is After=
# multi-user.target) each close an ordering cycle through multi-user.target once enabled, and
# systemd breaks it by dropping a start job. one-hpc's .deb ships presets
# (/usr/lib/systemd/system-preset/80-one-hpc.preset) that keep them disabled.
#
# Two clones of the product layer, each with a stand-in one-context package, booted by
# systemd-nspawn (every lab clone starts with machine-id "uninitialized"):
#   shipped   the .deb as built: no extra one-context unit enabled, no ordering cycle on the
#             console, one-context.service and one-hpc-configure.service ran, none of one-hpc's
#             per-role units enabled by the presets;
#   control   the same without one-hpc's preset file: the extra units are enabled and systemd
#             reports the ordering cycles and the jobs it deleted, so the stand-in reproduces
#             the defect.
#
# one-context is not in Debian and this machine cannot download it: the stand-in carries its
# units' names, [Install] sections and ordering (those of one-context 6.x: what makes the cycle),
# a one-contextd that only logs, and a postinst that enables what the real one enables.
#
# Exit status: 0 all checks passed, 1 a check failed, 77 skipped (not root, no lab host).

set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}

[ "$(id -u)" = 0 ] || { echo "SKIPPED: the lab needs root"; exit 77; }
OWN_LAB_DIR=yes; [ -n "${BOOTLAB_DIR:-}" ] && OWN_LAB_DIR=no
# shellcheck source-path=SCRIPTDIR source=bootlab.sh
. "$HERE/bootlab.sh"
# shellcheck source-path=SCRIPTDIR source=lab_lib.sh
. "$HERE/lab_lib.sh"
LAB_TIMEOUT=${LAB_TIMEOUT:-600}
lab_begin lab_first_boot_test

find_product || exit 1
[ -n "$DEB" ] || { echo "FAIL: this test needs the .deb (cmake --build $BIN_DIR --target package)"; exit 1; }
work=$BOOTLAB_DIR/first-boot
mkdir -p "$work"

step "setup: rootfs, package layers, a stand-in one-context package"
# shellcheck disable=SC2119  # no --fresh: reuse a cached rootfs
bl_rootfs || exit 1
build_layers slurm || exit 1

pkg=$work/one-context
mkdir -p "$pkg/DEBIAN" "$pkg/usr/sbin" "$pkg/usr/lib/systemd/system"
cat > "$pkg/DEBIAN/control" <<'EOF'
Package: one-context
Version: 6.10.0-1
Architecture: all
Maintainer: one-hpc tests <one-hpc@example.org>
Description: stand-in for OpenNebula's one-context (lab_first_boot_test)
EOF
printf '#!/bin/sh\nsystemctl enable one-context-local.service one-context.service >/dev/null 2>&1 || :\n' \
    > "$pkg/DEBIAN/postinst"
# shellcheck disable=SC2016  # $1 of the stand-in script
printf '#!/bin/sh\n# one-contextd (stand-in): logs its stage\necho "one-contextd stand-in: stage $1"\n' \
    > "$pkg/usr/sbin/one-contextd"
chmod 0755 "$pkg/DEBIAN/postinst" "$pkg/usr/sbin/one-contextd"
unit() {   # unit NAME [Unit] lines... -- [Install] WantedBy
    local name=$1 wanted=""; shift
    {
        echo "[Unit]"
        echo "Description=one-context stand-in: $name"
        while [ $# -gt 0 ] && [ "$1" != -- ]; do echo "$1"; shift; done
        [ "${1:-}" = -- ] && { shift; wanted=$1; }
        printf '\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/sbin/one-contextd %s\n' "$name"
        printf '\n[Install]\nWantedBy=%s\n' "$wanted"
    } > "$pkg/usr/lib/systemd/system/$name.service"
}
unit one-context-local DefaultDependencies=no Before=network-pre.target After=local-fs.target \
    -- multi-user.target
unit one-context Requires=one-context-local.service "After=multi-user.target one-context-local.service" \
    -- multi-user.target
unit one-context-online Wants=one-context-local.service After=one-context-local.service \
    Before=network-online.target -- network-online.target
for u in one-context-reconfigure one-context-reconfigure-delayed one-context-force; do
    unit "$u" After=one-context.service Requisite=one-context.service -- multi-user.target
done
check "the stand-in one-context .deb builds" \
    dpkg-deb --root-owner-group --build "$pkg" "$work/one-context.deb" >/dev/null

EXTRA="one-context-online.service one-context-reconfigure.service
one-context-reconfigure-delayed.service one-context-force.service"
# Units of one-hpc that only a role enables (the presets must not).
ROLE_ONLY="oneslurm-reconcile.timer oneslurm-self-drain.service one-hpc-accounting-dump.timer
one-hpc-key-server.socket oneslurm-follow-controller.timer"

enabled() { bl_exec "$1" systemctl is-enabled "$2" 2>/dev/null; }
# shellcheck disable=SC2317  # called through check
ran() {   # ran NAME UNIT: the unit was started during this boot
    [ "$(bl_exec "$1" systemctl show -p InactiveExitTimestampMonotonic --value "$2")" != 0 ]
}
# PID 1 reports the cycle before journald runs: read the console.
cycles() { grep -a -c 'Found ordering cycle' "$BOOTLAB_DIR/logs/$1.console" || true; }

first_boot() {   # first_boot NAME shipped|control
    local n=$1 variant=$2 r rc=0
    # shellcheck disable=SC2153  # LAB_LAYERS is set by build_layers
    BOOTLAB_LAYERS=$LAB_LAYERS bl_clone "$n" >/dev/null || return 1
    r=$(bl_root "$n")
    cp "$work/one-context.deb" "$r/tmp/"
    check "$n: stand-in one-context installed" \
        chroot "$r" dpkg -i /tmp/one-context.deb >>"$work/$n.log" 2>&1
    check "$n: one-context enabled only one-context-local and one-context" \
        eq "$(cd "$r/etc/systemd/system" && find . -name 'one-context*' -printf '%P\n' | sort | paste -sd' ')" \
        "multi-user.target.wants/one-context-local.service multi-user.target.wants/one-context.service"
    if [ "$variant" = control ]; then rm -f "$r/usr/lib/systemd/system-preset/80-one-hpc.preset"; fi
    # No network here: systemd-networkd-wait-online would hold the boot for 2 minutes.
    ln -sf /dev/null "$r/etc/systemd/system/systemd-networkd-wait-online.service"
    check "$n: /etc/machine-id is 'uninitialized' (a first boot)" eq "$(cat "$r/etc/machine-id")" uninitialized
    check "$n: nspawn starts (no network: nothing here needs one)" bl_boot "$n" --private-network || return 1
    bl_wait_running "$n" 120 || rc=$?
    # degraded (3) is expected: one-hpc-configure fails without a context.
    check "$n: the boot finished (running or degraded)" test "$rc" = 0 -o "$rc" = 3 || {
        tail -n 20 "$BOOTLAB_DIR/logs/$n.console" | sed 's/^/    | /'
        return 1
    }
}

step "shipped: the .deb's presets keep one-context as its package set it up"
if first_boot fb-shipped shipped; then
    for u in $EXTRA; do check "fb-shipped: $u not enabled" eq "$(enabled fb-shipped "$u")" disabled; done
    for u in $ROLE_ONLY; do check "fb-shipped: $u not enabled" eq "$(enabled fb-shipped "$u")" disabled; done
    check "fb-shipped: no ordering cycle on the console" eq "$(cycles fb-shipped)" 0
    check "fb-shipped: one-context.service ran" ran fb-shipped one-context.service
    check "fb-shipped: one-hpc-configure.service ran" ran fb-shipped one-hpc-configure.service
    check "fb-shipped: one-hpc-configure.service enabled" eq "$(enabled fb-shipped one-hpc-configure.service)" enabled
    bl_poweroff fb-shipped 60 || true
fi

step "control: the same image without one-hpc's preset file"
if first_boot fb-control control; then
    check "fb-control: the first boot enabled one-context-reconfigure.service" \
        eq "$(enabled fb-control one-context-reconfigure.service)" enabled
    check "fb-control: systemd reports the ordering cycle" test "$(cycles fb-control)" -gt 0
    grep -a 'deleted to break ordering cycle' "$BOOTLAB_DIR/logs/fb-control.console" |
        sed 's/\x1b\[[0-9;]*m//g; s/^/    | /'
    bl_poweroff fb-control 60 || true
fi

for n in fb-shipped fb-control; do bl_unclone "$n" 2>/dev/null || true; done
# shellcheck disable=SC2119  # no stop command: lab_end powers off what still runs
lab_end
