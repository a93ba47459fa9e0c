#!/bin/bash
# lab_smoke_test.sh [appliance|pair|all] - smoke tests of the booted-container lab.
#
#   appliance  the template rootfs + a layer made by image-build/install-appliance.sh
#              (Slurm role packages and one-hpc's .deb), one container booted with an
#              OpenNebula /context/ (and a VM of the OneGate simulator on 10.78.0.1:5030 when
#              onegate-sim is built): it reaches running/degraded, `one-hpc version` runs
#              inside, one-hpc-configure.service ran (its journal is printed, whatever its
#              result), the role daemons stayed disabled, poweroff is clean.
#   pair       two containers of the plain template on the bridge ping each other and 10.78.0.1.
#   all        both (default).
# Every scenario ends with a clean-up check: no mounts under the lab directory, no cgroups of
# the lab, no bridge. Timings (rootfs cold/cached, layers, boot, poweroff) are printed.
#
# Exit status: 0 all checks passed, 1 a check failed, 77 skipped (not root, or the host lacks
# what systemd-nspawn needs).
#
# Environment:
#   BOOTLAB_CACHE      persistent cache for the rootfs and layers (ctest: /var/cache/one-hpc-bootlab)
#   ONEHPC_DEB         one-hpc's .deb; default: the newest one-hpc_*.deb in $ONEHPC_BINARY_DIR
#   ONEHPC_BIN         without a .deb: the built one-hpc, copied into the layer with
#                      install/systemd/* by hand (a development fallback, announced loudly)
#   ONEHPC_SIM         onegate-sim; default $ONEHPC_BINARY_DIR/tests/onegate-sim if it exists
#   ONEHPC_SOURCE_DIR, ONEHPC_BINARY_DIR   set by ctest; default: this checkout, ./build
#   LAB_CONFIGURE_TIMEOUT  seconds to wait for one-hpc-configure to finish (300)
#   LAB_TIMEOUT        seconds before the test stops itself, cleaning up (1000; keep it
#                      below ctest's TIMEOUT, which kills without clean-up)
#   LAB_CONTEXT        extra context variables for the appliance VM, one VAR=value per line

set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}
SCENARIO=${1:-all}
case $SCENARIO in appliance|pair|all) ;; *) echo "usage: $0 [appliance|pair|all]" >&2; exit 2;; esac

[ "$(id -u)" = 0 ] || { echo "SKIPPED: the lab needs root"; exit 77; }
OWN_LAB_DIR=yes; [ -n "${BOOTLAB_DIR:-}" ] && OWN_LAB_DIR=no   # ours: removed after a pass
# shellcheck source-path=SCRIPTDIR source=bootlab.sh
. "$HERE/bootlab.sh"
# shellcheck source-path=SCRIPTDIR source=lab_lib.sh
. "$HERE/lab_lib.sh"
lab_begin lab_smoke_test
echo "lab directory: $BOOTLAB_DIR   cache: $BOOTLAB_CACHE"

# Clean-up must leave nothing behind; checked after an explicit clean-up (the trap would do it
# too, but then nobody could look).
final_cleanup_checks() {
    local left
    echo "== clean-up"
    sim_stop
    bl_cleanup
    left=$(bl_leftovers)
    check "clean-up left nothing (mounts, cgroups, bridge)" eq "$left" ""
    check "no mount under the lab directory" bash -c "! grep -qF ' $BOOTLAB_DIR/' /proc/mounts"
    check "no cgroup of this lab" bash -c "! find /sys/fs/cgroup -maxdepth 6 -type d -name 'bootlab-$BOOTLAB_ID-*' | grep -q ."
    if [ "$BL_HAD_BRIDGE" = yes ]; then
        check "bridge $BOOTLAB_BRIDGE removed" bash -c "! ip link show '$BOOTLAB_BRIDGE' >/dev/null 2>&1"
    fi
}

rootfs() {
    local t0
    t0=$(_bl_now)
    # shellcheck disable=SC2119  # no --fresh: reuse a cached rootfs
    bl_rootfs || return 1
    timing "rootfs ($BL_ROOTFS_RESULT)" "$(_bl_dt "$t0" "$(_bl_now)")"
}

# ---- appliance ------------------------------------------------------------------------------

# The OneGate simulator on the bridge, and a VM in it for vm1. Sets SMOKE_VMID and TOKEN, or leaves
# them empty when the simulator is not built.
start_sim() {
    local sim=${ONEHPC_SIM:-$BIN_DIR/tests/onegate-sim} out
    SMOKE_VMID="" TOKEN=""
    if [ ! -x "$sim" ]; then
        echo "NOTE: no onegate-sim at $sim: the context has no TOKEN, VMID or ONEGATE_ENDPOINT"
        return 0
    fi
    "$sim" --listen "$BOOTLAB_NET.1:5030" --operator-api > "$BOOTLAB_DIR/logs/onegate-sim.log" 2>&1 8>&- &
    SIM_PID=$!
    for _ in $(seq 100); do
        curl -sf -o /dev/null --max-time 1 "http://$BOOTLAB_NET.1:5030/_sim/health" && break
        _bl_alive "$SIM_PID" || break
        sleep 0.05
    done
    _bl_alive "$SIM_PID" || { echo "onegate-sim did not start:"; cat "$BOOTLAB_DIR/logs/onegate-sim.log"; return 1; }
    out=$(sim_add_vm vm1 "$BOOTLAB_NET.11") || { echo "cannot create a VM in onegate-sim: $out"; return 1; }
    read -r SMOKE_VMID TOKEN <<< "$out"
    echo "onegate-sim: pid $SIM_PID on http://$BOOTLAB_NET.1:5030, VM $SMOKE_VMID"
}
# sim_add_vm NAME IP : prints "VMID TOKEN" of a new VM (in no service) made through the
# operator API (POST /_sim/vms -> {"id":N,"token":"..."}, tests/simulator/onegate_simulator.cc).
sim_add_vm() {
    local r id token
    r=$(curl -sS --fail-with-body --max-time 5 -H 'Content-Type: application/json' -X POST \
        --data "{\"service_id\":-1,\"name\":\"$1\",\"nics\":[{\"ip\":\"$2\",\"mac\":\"$(bl_mac "$2")\",\"network\":\"bootlab\",\"network_id\":\"0\"}]}" \
        "http://$BOOTLAB_NET.1:5030/_sim/vms") || { echo "$r"; return 1; }
    id=$(printf '%s' "$r" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
    token=$(printf '%s' "$r" | sed -n 's/.*"token":"\([A-Za-z0-9+\/=]*\)".*/\1/p')
    if [ -z "$id" ] || [ -z "$token" ]; then echo "unexpected answer: $r"; return 1; fi
    echo "$id $token"
}

scenario_appliance() {
    local root t0 s rc out state result enabled u line
    echo "=== scenario appliance: install-appliance.sh layer, one VM with a context"
    find_product || return 1
    rootfs || return 1
    # shellcheck disable=SC2119  # no argument: the slurm layer set
    build_layers || return 1
    bl_bridge_up || return   # 2: the host cannot give us the lab network (skip)
    start_sim || return 1

    t0=$(_bl_now)
    BOOTLAB_LAYERS=one-hpc:appliance-slurm bl_clone vm1 "$BOOTLAB_NET.11/24" || return 1
    timing "clone" "$(_bl_dt "$t0" "$(_bl_now)")"
    root=$(bl_root vm1)
    local -a ctx=(
        "DISK_ID=1" "ETH0_IP=$BOOTLAB_NET.11" "ETH0_MASK=255.255.255.0" "ETH0_NETWORK=$BOOTLAB_NET.0"
        "ETH0_MAC=$(bl_mac "$BOOTLAB_NET.11")" "NETWORK=YES" "SET_HOSTNAME=vm1" "TARGET=hdb"
    )
    if [ -n "$SMOKE_VMID" ]; then
        ctx+=("ONEGATE_ENDPOINT=http://$BOOTLAB_NET.1:5030" "TOKEN=YES" "VMID=$SMOKE_VMID")
        bl_context_token vm1 "$TOKEN"
    fi
    # Extra variables for trying things by hand, one VAR=value per line (e.g. ONEAPP_ROLE=...).
    while IFS= read -r line; do
        [ -n "$line" ] && ctx+=("$line")
    done <<< "${LAB_CONTEXT:-}"
    bl_context vm1 "${ctx[@]}" || return 1
    echo "  /context/context.sh:"; sed 's/^/    /' "$root/context/context.sh"

    echo "== image content (offline, before the first boot)"
    check "one-hpc installed at /usr/sbin/one-hpc" test -x "$root/usr/sbin/one-hpc"
    check "one-hpc-configure.service installed" test -f "$root/usr/lib/systemd/system/one-hpc-configure.service"
    check "one-hpc-configure.service enabled" eq "$(systemctl --root="$root" is-enabled one-hpc-configure.service 2>&1)" enabled
    check "preset file installed" test -f "$root/etc/systemd/system-preset/20-one-hpc.preset"
    # Units that must stay off until one-hpc enables them for a role: the role daemons and
    # one-hpc's own units other than the configure unit (those with an [Install] section).
    local -a off=(munge.service slurmd.service slurmctld.service)
    for u in "$root"/usr/lib/systemd/system/one-hpc-* "$root"/usr/lib/systemd/system/oneslurm-*; do
        if [ ! -f "$u" ] || ! grep -q '^\[Install\]' "$u"; then continue; fi
        [ "${u##*/}" = one-hpc-configure.service ] || off+=("${u##*/}")
    done
    for u in "${off[@]}"; do
        check "$u disabled in the image" eq "$(systemctl --root="$root" is-enabled "$u" 2>&1)" disabled
    done

    echo "== boot vm1 (first boot)"
    t0=$(_bl_now)
    bl_boot vm1 || return 1
    out=$(bl_wait_running vm1 120); rc=$?
    echo "  $out"
    check "vm1 reached running or degraded" test "$rc" = 0 -o "$rc" = 3
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || { tail -n 40 "$BOOTLAB_DIR/logs/vm1.console"; return 1; }
    timing "boot to $(bl_exec vm1 systemctl is-system-running 2>/dev/null)" "$(_bl_dt "$t0" "$(_bl_now)")"
    echo "  guest: $(bl_exec vm1 systemd-analyze time 2>/dev/null | head -1)"

    out=$(bl_exec vm1 /usr/sbin/one-hpc version 2>&1); rc=$?
    echo "  one-hpc version: $out"
    check "one-hpc version runs inside (exit status 0)" eq "$rc" 0

    echo "== one-hpc-configure.service"
    for _ in $(seq $((${LAB_CONFIGURE_TIMEOUT:-300} * 10))); do
        state=$(bl_exec vm1 systemctl show -p ActiveState --value one-hpc-configure.service)
        [ "$state" = activating ] || break
        sleep 0.1
    done
    s=$(bl_exec vm1 systemctl show -p ExecMainStartTimestampMonotonic --value one-hpc-configure.service)
    result=$(bl_exec vm1 systemctl show -p Result --value one-hpc-configure.service)
    echo "  state=$state result=$result exit=$(bl_exec vm1 systemctl show -p ExecMainStatus --value one-hpc-configure.service)"
    check "one-hpc-configure.service ran at boot" test "${s:-0}" != 0
    if [ "$state" = activating ]; then
        echo "  NOTE: still activating after ${LAB_CONFIGURE_TIMEOUT:-300}s"
    fi
    echo "  --- journalctl -u one-hpc-configure"
    bl_journal vm1 -u one-hpc-configure.service -o short-monotonic | sed 's/^/  | /'
    echo "  ---"
    if [ -n "$SIM_PID" ]; then
        echo "  onegate-sim log (last lines):"; tail -n 20 "$BOOTLAB_DIR/logs/onegate-sim.log" | sed 's/^/  | /'
    fi
    echo "  failed units: $(bl_exec vm1 systemctl --failed --no-legend --plain | awk '{print $1}' | paste -sd' ')"
    check "one-hpc-configure.service enabled after first boot" \
        eq "$(bl_exec vm1 systemctl is-enabled one-hpc-configure.service)" enabled
    if [ "$result" = success ] && [ "$state" = active ]; then
        echo "  (configure succeeded: role daemons are one-hpc's business now, not checked)"
    else
        # Nothing enabled them, and the first boot's preset-all must not have either.
        for u in "${off[@]}"; do
            enabled=$(bl_exec vm1 systemctl is-enabled "$u")
            check "$u still disabled after first boot" eq "$enabled" disabled
        done
    fi

    echo "== poweroff"
    bl_poweroff vm1 60; rc=$?
    check "vm1 powered off cleanly (nspawn exit status 0)" eq "$rc" 0
    [ "$rc" = 0 ] && timing "poweroff" "$BL_POWEROFF_SECONDS"
    check "journal readable from the host after poweroff" \
        test "$(bl_journal vm1 --list-boots 2>/dev/null | tail -n +2 | wc -l)" -ge 1
    bl_unclone vm1
}

# ---- pair -----------------------------------------------------------------------------------

loss() { bl_exec "$1" ping -c3 -i0.2 -W1 -q "$2" | awk -F', ' '/packet loss/{print $3}'; }

scenario_pair() {
    local t0 n rc out
    echo "=== scenario pair: two VMs on the bridge"
    rootfs || return 1
    bl_bridge_up || return
    BOOTLAB_LAYERS="" bl_clone vm-a "$BOOTLAB_NET.21/24" || return 1
    BOOTLAB_LAYERS="" bl_clone vm-b "$BOOTLAB_NET.22/24" || return 1
    t0=$(_bl_now)
    bl_boot vm-a || return 1
    bl_boot vm-b || return 1
    for n in vm-a vm-b; do
        out=$(bl_wait_running "$n" 120); rc=$?
        echo "  $out"
        check "$n reached running" eq "$rc" 0
        [ "$rc" = 0 ] || [ "$rc" = 3 ] || return 1
    done
    timing "boot two VMs together" "$(_bl_dt "$t0" "$(_bl_now)")"
    bl_wait_ip vm-a && bl_wait_ip vm-b || return 1
    echo "  host side: $(ip -br link show master "$BOOTLAB_BRIDGE" | awk '{print $1}' | paste -sd' ')"
    check "vm-a has the MAC OpenNebula would give 10.78.0.21" \
        eq "$(bl_exec vm-a cat /sys/class/net/host0/address)" "$(bl_mac "$BOOTLAB_NET.21")"
    check "ping vm-a -> vm-b" eq "$(loss vm-a "$BOOTLAB_NET.22")" "0% packet loss"
    check "ping vm-b -> vm-a" eq "$(loss vm-b "$BOOTLAB_NET.21")" "0% packet loss"
    check "ping vm-a -> host $BOOTLAB_NET.1" eq "$(loss vm-a "$BOOTLAB_NET.1")" "0% packet loss"
    check "ping vm-b -> host $BOOTLAB_NET.1" eq "$(loss vm-b "$BOOTLAB_NET.1")" "0% packet loss"
    check "separate network namespaces" test "$(readlink "/proc/$(bl_leader vm-a)/ns/net")" != \
        "$(readlink "/proc/$(bl_leader vm-b)/ns/net")"
    t0=$(_bl_now)
    for n in vm-a vm-b; do bl_exec "$n" systemctl poweroff --no-block; done
    for n in vm-a vm-b; do check "$n powered off (exit status 0)" eq "$(bl_wait_exit "$n" 60)" 0; done
    timing "poweroff of both" "$(_bl_dt "$t0" "$(_bl_now)")"
    bl_unclone vm-a; bl_unclone vm-b
}

SKIPPED=0
ended() {   # ended SCENARIO STATUS
    case $2 in
        0) ;;
        2) echo "  SKIP  scenario $1: the host cannot give the lab its network (see above)"
           SKIPPED=$((SKIPPED + 1));;
        *) echo "  FAIL  scenario $1 (setup failed, see above)"; FAIL=$((FAIL + 1));;
    esac
}
if [ "$SCENARIO" = appliance ] || [ "$SCENARIO" = all ]; then
    scenario_appliance; ended appliance $?
    sim_stop; bl_cleanup; bl_host_setup
fi
if [ "$SCENARIO" = pair ] || [ "$SCENARIO" = all ]; then
    scenario_pair; ended pair $?
fi
final_cleanup_checks
print_timings; TIMINGS=()
echo "== $PASS passed, $FAIL failed, $SKIPPED scenarios skipped"
if [ "$FAIL" = 0 ]; then
    [ "$OWN_LAB_DIR" = yes ] && rm -rf "$BOOTLAB_DIR"
    if [ "$SKIPPED" != 0 ]; then echo "SKIPPED"; exit 77; fi
    exit 0
fi
echo "logs: $BOOTLAB_DIR/logs"
exit 1
