# shellcheck shell=bash
# lab_lib.sh - what the lab test scripts share on top of bootlab.sh: the product under test
# (the .deb, or a development fallback) and the cached package layers it is installed in.
# Source it after bootlab.sh; it expects SRC (source tree) and BIN_DIR (build tree). It also
# holds the test harness (check, timings, clean-up traps, watchdog: lab_arm).

# The product to install: sets DEB (preferred) or DEV_BIN (fallback).
find_product() {
    DEB=${ONEHPC_DEB:-} DEV_BIN="" DEV_LIBS=""
    if [ -z "$DEB" ]; then
        DEB=$(find "$BIN_DIR" -maxdepth 1 -name "one-hpc_*_$(dpkg --print-architecture).deb" \
            -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -1 | cut -d' ' -f2-)
    fi
    if [ -n "$DEB" ] && [ -f "$DEB" ]; then
        echo "product: $DEB"
        local bin=${ONEHPC_BIN:-$BIN_DIR/one-hpc}
        if [ -f "$bin" ] && [ "$bin" -nt "$DEB" ]; then
            echo "WARNING: $bin is newer than $DEB: the lab tests the older package" \
                "(cmake --build $BIN_DIR --target package)"
        fi
        return 0
    fi
    if [ -n "${ONEHPC_DEB:-}" ]; then echo "ONEHPC_DEB=$ONEHPC_DEB: no such file" >&2; return 1; fi
    DEB="" DEV_BIN=${ONEHPC_BIN:-$BIN_DIR/one-hpc}
    if [ -x "$DEV_BIN" ]; then
        echo "WARNING: no one-hpc .deb in $BIN_DIR; installing $DEV_BIN and $SRC/install/systemd/*" \
            "by hand (development fallback: the package itself is NOT tested)"
        DEV_LIBS=$(dev_lib_packages "$DEV_BIN") || return 1
        echo "  shared libraries from: $DEV_LIBS"
        return 0
    fi
    echo "no one-hpc .deb in $BIN_DIR and no one-hpc binary; build the package target" >&2
    return 1
}

# The Debian packages that hold the shared libraries BIN links to (for the fallback; the
# .deb declares them itself).
dev_lib_packages() {
    local lib pkgs="" p name
    for name in $(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
        lib=$(ldd "$1" | awk -v n="$name" '$1 == n && $2 == "=>" {print $3}')
        [ -n "$lib" ] || { echo "$1 needs $name, which the host does not have" >&2; return 1; }
        p=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null ||
            dpkg -S "/usr$lib" 2>/dev/null) || { echo "no package holds $lib" >&2; return 1; }
        p=${p%%:*}
        case " $pkgs " in *" $p "*) ;; *) pkgs="$pkgs $p";; esac
    done
    echo "${pkgs# }"
}

# What a .deb installs, without the build dates CPack puts in every new archive (so a
# repackaged but unchanged product keeps its cached layer): the control members (control,
# maintainer scripts, md5sums of every file) and the modes, owners and sizes of the files.
deb_fingerprint() {
    { dpkg-deb --ctrl-tarfile "$1" | tar -xO
      dpkg-deb --contents "$1" | awk '{print $1, $2, $3, $6}'; } | sha256sum | cut -d' ' -f1
}

# build_role_layer SET: the layer appliance-SET (install-appliance.sh --role-packages SET over
# the template), cached while the script is the same. It does not depend on the product, so
# tests/lab/lab_prepare.sh builds it while the program compiles.
build_role_layer() {
    local set=$1 sum
    sum=$(sha256sum "$SRC/image-build/install-appliance.sh" | cut -d' ' -f1)
    # shellcheck disable=SC2016  # $1 of the inner shell
    bl_layer_build "appliance-$set" "" "install-appliance.sh $sum --role-packages $set" \
        --bind-ro="$SRC/image-build:/run/bootlab-src" -- \
        sh -c '/run/bootlab-src/install-appliance.sh --role-packages "$1" &&
               apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin' sh "$set"
}

# Layers, per role-package set SET (slurm, the default, or ood): appliance-SET =
# install-appliance.sh --role-packages SET; on top, the product layer (one-hpc for slurm,
# one-hpc-SET otherwise) = install-appliance.sh --deb (or the development fallback). Keyed by
# the script's and the package's checksums. Package lists are dropped afterwards to keep layers
# small (what --clean-image would do in the image; the lab does not seal its image). Sets
# LAB_LAYERS to the stack to clone from (BOOTLAB_LAYERS=$LAB_LAYERS bl_clone ...).
build_layers() {
    local set=${1:-slurm} script=$SRC/image-build/install-appliance.sh t0 sum key base top
    base=appliance-$set top=one-hpc
    [ "$set" = slurm ] || top=one-hpc-$set
    sum=$(sha256sum "$script" | cut -d' ' -f1)
    t0=$(_bl_now)
    build_role_layer "$set" || return 1
    timing "layer $base ($BL_LAYER_RESULT)" "$(_bl_dt "$t0" "$(_bl_now)")"
    t0=$(_bl_now)
    if [ -n "$DEB" ]; then
        key="install-appliance.sh $sum --deb $(deb_fingerprint "$DEB")"
        # shellcheck disable=SC2016  # $1 of the inner shell
        bl_layer_build "$top" "$base" "$key" \
            --bind-ro="$SRC/image-build:/run/bootlab-src" \
            --bind-ro="$DEB:/run/bootlab-deb/$(basename "$DEB")" -- \
            sh -c '/run/bootlab-src/install-appliance.sh --deb "$1" &&
                   apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin' \
            sh "/run/bootlab-deb/$(basename "$DEB")" || return 1
    else
        key="install-appliance.sh $sum dev $DEV_LIBS $(cat "$DEV_BIN" "$SRC"/install/systemd/* | sha256sum | cut -d' ' -f1)"
        # shellcheck disable=SC2016,SC2086  # "$@" of the inner shell; one word per package
        bl_layer_build "$top" "$base" "$key" \
            --bind-ro="$SRC/image-build:/run/bootlab-src" \
            --bind-ro="$DEV_BIN:/run/bootlab-bin/one-hpc" \
            --bind-ro="$SRC/install/systemd:/run/bootlab-units" -- \
            sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends "$@" &&
                   install -m 0755 /run/bootlab-bin/one-hpc /usr/sbin/one-hpc &&
                   install -m 0644 /run/bootlab-units/* /usr/lib/systemd/system/ &&
                   /run/bootlab-src/install-appliance.sh &&
                   apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin' \
            sh $DEV_LIBS || return 1
    fi
    timing "layer $top ($BL_LAYER_RESULT)" "$(_bl_dt "$t0" "$(_bl_now)")"
    # shellcheck disable=SC2034  # read by the test scripts
    LAB_LAYERS=$top:$base
}

# ---- the test harness: counted checks, timings, clean-up on every exit ----------------------
PASS=0 FAIL=0 SIM_PID="" WATCHDOG_PID=""
declare -a TIMINGS=()
check() {   # check DESCRIPTION COMMAND...   (returns the command's failure too)
    local what=$1; shift
    if "$@"; then echo "  ok    $what"; PASS=$((PASS + 1)); else echo "  FAIL  $what"; FAIL=$((FAIL + 1)); return 1; fi
}
# shellcheck disable=SC2317  # called through check
eq() { [ "$1" = "$2" ] || { echo "        got '$1', want '$2'"; return 1; }; }
# shellcheck disable=SC2317  # called through check
contains() { case $1 in *"$2"*) return 0;; esac; echo "        '$1' does not contain '$2'"; return 1; }
# shellcheck disable=SC2317  # called through check
lacks() { case $1 in *"$2"*) echo "        found '$2'"; return 1;; esac; return 0; }
timing() { TIMINGS+=("$(printf '%-52s %7ss' "$1" "$2")"); }
print_timings() {
    [ ${#TIMINGS[@]} -gt 0 ] || return 0
    echo "== timings"
    printf '  %s\n' "${TIMINGS[@]}"
}
sim_stop() {
    if [ -n "$SIM_PID" ] && _bl_alive "$SIM_PID"; then
        kill -TERM "$SIM_PID" 2>/dev/null
        for _ in $(seq 50); do _bl_alive "$SIM_PID" || break; sleep 0.1; done
        _bl_alive "$SIM_PID" && kill -KILL "$SIM_PID" 2>/dev/null
        wait "$SIM_PID" 2>/dev/null
    fi
    SIM_PID=""
}
# shellcheck disable=SC2317  # the EXIT trap
on_exit() {
    local rc=$?
    trap - EXIT
    kill -TERM -- "-$WATCHDOG_PID" 2>/dev/null
    sim_stop
    bl_cleanup
    print_timings
    exit "$rc"
}
# lab_begin NAME: skip (exit 77) when this host cannot run the lab; otherwise set it up, start
# the clock (T_START, read by say) and arm the clean-up and the watchdog (lab_arm NAME).
# OWN_LAB_DIR (yes when bootlab.sh made BOOTLAB_DIR) is set by the test before sourcing.
lab_begin() {
    if ! bl_host_check; then
        [ "$OWN_LAB_DIR" = yes ] && rmdir "$BOOTLAB_DIR"
        echo "SKIPPED: this host cannot run the lab (see above)"; exit 77
    fi
    bl_host_setup
    # shellcheck disable=SC2034  # read by say
    T_START=$(_bl_now)
    lab_arm "$1"
}
# lab_arm NAME: clean up on every exit, and stop the test at LAB_TIMEOUT seconds. ctest kills
# a test that overruns its TIMEOUT with SIGKILL, and then nothing would clean up: a watchdog
# (its own process group) sends SIGTERM first, which runs the clean-up. It only signals its
# parent: after a SIGKILL of the test it is re-parented and does nothing.
lab_arm() {
    trap on_exit EXIT
    trap 'echo "interrupted"; exit 130' INT
    trap 'echo "terminated"; exit 143' TERM
    LAB_TIMEOUT=${LAB_TIMEOUT:-1000}
    # shellcheck disable=SC2016  # arguments of the inner shell
    setsid bash -c 'sleep "$1"; read -r _ _ _ ppid _ < /proc/$$/stat; [ "$ppid" = "$2" ] || exit 0
        echo "$3: over LAB_TIMEOUT=$1 s, stopping" >&2; kill -TERM "$2"' \
        lab-watchdog "$LAB_TIMEOUT" $$ "$1" &
    WATCHDOG_PID=$!
}

# lab_end [STOP_COMMAND...]: the end of a scenario test (lab_lifecycle, lab_ood). Saves the
# journals when a check failed (they go with the clones), runs STOP_COMMAND (the test's own way
# to power off its containers), stops the simulator, cleans up and checks that nothing is left,
# prints the timings and "== N passed, N failed". Exits 0 (removing a lab directory of its own)
# when nothing failed, else 1 (keeping the logs).
lab_end() {
    local f n left
    step "clean-up"
    if [ "$FAIL" != 0 ]; then   # the journals go with the clones: keep them for the post-mortem
        for f in "$BOOTLAB_DIR"/run/*.pid; do
            [ -e "$f" ] || continue
            n=$(basename "$f" .pid)
            bl_journal "$n" -o short-monotonic > "$BOOTLAB_DIR/logs/$n.journal" 2>&1
        done
    fi
    [ $# -eq 0 ] || "$@"
    sim_stop
    bl_cleanup
    left=$(bl_leftovers)
    check "clean-up left nothing (mounts, cgroups, bridge)" eq "$left" ""
    timing "total" "$(_bl_dt "$T_START" "$(_bl_now)")"
    print_timings; TIMINGS=()
    echo "== $PASS passed, $FAIL failed"
    if [ "$FAIL" = 0 ]; then
        [ "$OWN_LAB_DIR" = yes ] && rm -rf "$BOOTLAB_DIR"
        exit 0
    fi
    echo "logs: $BOOTLAB_DIR/logs"
    exit 1
}

# ---- shared by the scenario tests (lab_lifecycle, lab_ood). lab_begin sets T_START; they set SIM_URL,
# BIN_DIR and the VMID array before calling these.

say() { echo "$(printf '[%6.1fs]' "$(_bl_dt "$T_START" "$(_bl_now)")") $*"; }
step() { echo; say "=== $*"; }

# wait_for SECONDS COMMAND...: polls every 0.2 s until COMMAND succeeds; WAITED = seconds spent
# (read by the tests that source this file).
# shellcheck disable=SC2034  # read by the tests
WAITED=0
# shellcheck disable=SC2034  # WAITED: read by the tests
wait_for() {
    local timeout=$1 t0 end; shift
    t0=$(_bl_now); end=$(( $(date +%s) + timeout ))
    while :; do
        if "$@" >/dev/null 2>&1; then WAITED=$(_bl_dt "$t0" "$(_bl_now)"); return 0; fi
        [ "$(date +%s)" -lt "$end" ] || break
        sleep 0.2
    done
    WAITED=$(_bl_dt "$t0" "$(_bl_now)"); return 1
}

# The OneGate simulator's operator API.
sim() {   # sim METHOD PATH [JSON]
    local -a data=()
    [ $# -ge 3 ] && data=(-H 'Content-Type: application/json' --data "$3")
    curl -sS --fail-with-body --max-time 5 -X "$1" "${data[@]}" "$SIM_URL$2"
}
start_sim() {
    local bin=${ONEHPC_SIM:-$BIN_DIR/tests/onegate-sim}
    [ -x "$bin" ] || { echo "no onegate-sim at $bin (build the onegate-sim target)"; return 1; }
    "$bin" --listen "$BOOTLAB_NET.1:5030" --operator-api > "$BOOTLAB_DIR/logs/onegate-sim.log" 2>&1 8>&- &
    SIM_PID=$!
    wait_for 10 sim GET /_sim/health ||
        { echo "onegate-sim did not start:"; cat "$BOOTLAB_DIR/logs/onegate-sim.log"; return 1; }
}
# USER_TEMPLATE attribute of a VM as OneGate holds it ("" when unset).
sim_attr() { sim GET "/_sim/vms/$1" | jq -r --arg a "$2" '.vm.USER_TEMPLATE[$a] // empty'; }

# The one-hpc-configure unit has finished (active or failed).
configured() {
    local s
    s=$(bl_exec "$1" systemctl show -p ActiveState --value one-hpc-configure.service 2>/dev/null)
    [ "$s" = active ] || [ "$s" = failed ]
}
configure_result() { bl_exec "$1" systemctl show -p Result --value one-hpc-configure.service; }
ready() { [ "$(sim_attr "${VMID[$1]}" READY)" = YES ]; }
show_configure_log() {   # show_configure_log NAME LINES
    echo "  --- $1: journalctl -u one-hpc-configure (last $2 lines)"
    bl_journal "$1" -u one-hpc-configure.service -o cat | tail -n "$2" | sed 's/^/  | /'
}
# boot_vms SECONDS NAME...: boots the clones, then waits for each one's configure to finish.
boot_vms() {
    local timeout=$1 n t0 out; shift
    t0=$(_bl_now)
    for n in "$@"; do bl_boot "$n" || return 1; done
    for n in "$@"; do
        out=$(bl_wait_running "$n" 120)
        case $? in 0|3) ;; *) echo "  $out"; tail -n 30 "$BOOTLAB_DIR/logs/$n.console"; return 1;; esac
        if ! wait_for "$timeout" configured "$n"; then
            echo "  $n: one-hpc-configure still running after ${timeout}s"
            show_configure_log "$n" 20
            return 1
        fi
    done
    say "booted and configured: $* ($(_bl_dt "$t0" "$(_bl_now)")s)"
}

# ---- the VMs of the lab tests. Those tests declare VMID and IP (associative arrays), SERVICE,
# NEXT_IP and SIM_URL.
# new_lab_vm LAYERS NAME ROLE [CONTEXT_VAR=value...] : a VM of ROLE in the service (OneGate
# simulator) and its container clone of LAYERS with an OpenNebula context; not booted.
new_lab_vm() {
    local layers=$1 name=$2 role=$3 ip r id token root; shift 3
    NEXT_IP=$((NEXT_IP + 1)); ip=$BOOTLAB_NET.$NEXT_IP
    r=$(sim POST /_sim/vms "{\"service_id\":$SERVICE,\"role\":\"$role\",\"name\":\"${role}_$name\",
        \"nics\":[{\"ip\":\"$ip\",\"mac\":\"$(bl_mac "$ip")\",\"network\":\"bootlab\",\"network_id\":\"0\"}]}") ||
        { echo "cannot add a VM to the service: $r"; return 1; }
    id=$(jq -r .id <<< "$r"); token=$(jq -r .token <<< "$r")
    # shellcheck disable=SC2004,SC2034  # associative arrays of the tests; IP: read by them
    VMID[$name]=$id IP[$name]=$ip
    BOOTLAB_LAYERS=$layers bl_clone "$name" "$ip/24" >/dev/null || return 1
    root=$(bl_root "$name")
    bl_context_token "$name" "$token"
    bl_context "$name" "DISK_ID=1" "ETH0_IP=$ip" "ETH0_MASK=255.255.255.0" \
        "ETH0_NETWORK=$BOOTLAB_NET.0" "ETH0_MAC=$(bl_mac "$ip")" "NETWORK=YES" "TARGET=hdb" \
        "ONEGATE_ENDPOINT=$SIM_URL" "TOKEN=YES" "VMID=$id" "REPORT_READY=YES" "$@" || return 1
    # A job step left running must not hold a poweroff for 90 s (boot-lab.md section 13).
    mkdir -p "$root/etc/systemd/system.conf.d"
    printf '[Manager]\nDefaultTimeoutStopSec=15s\n' > "$root/etc/systemd/system.conf.d/10-lab-stop-timeout.conf"
}
# new_slurm_vm NAME ROLE [CONTEXT_VAR=value...] : a OneSlurm VM (the slurm layers).
new_slurm_vm() { new_lab_vm one-hpc:appliance-slurm "$@"; }

# The Open OnDemand VMs (the ood layers). NFS in containers: kernel NFS cannot be served from a
# container, so the storage role, seeing /run/systemd/container, writes its exports but starts
# no nfs-server. One host directory, $NFS_DIR (set by the test), stands in for the NFS
# transport: bound at /export in the storage VM (the role creates home, slurm and software in
# it) and at /lab/nfs in the portal and the workers, whose mount units (home.mount,
# opt-software.mount and, on the portal, the state mount) a lab drop-in placed before the first
# boot turns into bind mounts of /lab/nfs/<home|slurm|software>.
declare -A OOD_LAB_MOUNTS=(
    ['home.mount']=home
    ['opt-software.mount']=software
    ['var-lib-one\x2dhpc-portal\x2dstate.mount']=slurm
)
# new_ood_vm NAME ROLE [CONTEXT_VAR=value...] : an Open OnDemand VM with $NFS_DIR bound.
new_ood_vm() {
    local name=$1 role=$2 unit
    new_lab_vm one-hpc-ood:appliance-ood "$@" || return 1
    if [ "$role" = storage ]; then
        bl_bind "$name" "$NFS_DIR:/export"
        return 0
    fi
    bl_bind "$name" "$NFS_DIR:/lab/nfs"
    for unit in "${!OOD_LAB_MOUNTS[@]}"; do
        bl_dropin "$name" "$unit" lab-bind \
            "$(printf '[Mount]\nWhat=/lab/nfs/%s\nType=none\nOptions=bind' "${OOD_LAB_MOUNTS[$unit]}")"
    done
}
# shellcheck disable=SC2317  # used by the tests
node() { echo "slurm-one-worker-${VMID[$1]}"; }
# shellcheck disable=SC2317  # used by the tests
ctl() { bl_exec ctl "$@"; }
# poweroff_slurm_workers: every running clone but the controller (ctl), for lab_end: workers
# first, so that their self-drain still reaches the controller (else each waits for it).
# shellcheck disable=SC2317  # called by lab_end
poweroff_slurm_workers() {
    local f n
    for f in "$BOOTLAB_DIR"/run/*.pid; do
        [ -e "$f" ] || continue
        n=$(basename "$f" .pid)
        [ "$n" = ctl ] || bl_poweroff "$n" 60 || true
    done
}
