#!/bin/bash
# VM smoke of the OneSlurm appliance image on real VMs (qemu; KVM or TCG emulation):
#   1. the .deb, the Debian 12 base image (cached) and the OneSlurm image built by Packer;
#   2. a private network namespace with a bridge on 10.79.0.0/24 (the only addresses used),
#      one tap per VM, and the OneGate simulator on 10.79.0.1:5030 (operator API on);
#   3. a controller VM and then 2 worker VMs, each booted by qemu from its own copy-on-write
#      overlay of the image with its own CONTEXT ISO (context.sh and token.txt exactly as
#      OpenNebula writes them, made with `xorriso -as mkisofs -V CONTEXT -J -R`); the context
#      comes from templates/vm/oneslurm.tmpl and the role's wiring. The image has no
#      one-context: the context exists only on the CD;
#   4. checks: each VM publishes READY=YES (not ERROR); both workers are idle in the
#      controller's sinfo and `srun -N2 hostname` runs on both; on the CD-only worker
#      `one-hpc follow` and `one-hpc storage-refresh` load the context from the CD (no exit 3),
#      and the shipped reconcile timer does too on the controller;
#   5. hard kill: a worker's qemu gets SIGKILL while a job runs there and the VM leaves the
#      simulated service (as OneFlow drops a VM that is gone); the shipped
#      oneslurm-reconcile.timer (every 60 s) drains the node with reason `removed from OneFlow
#      service`, then deletes it once the job is gone. The kill is placed 8 s after a
#      reconcile run: with SlurmdTimeout=60 Slurm marks the node NOT_RESPONDING about 40 s
#      after the kill and DOWN (which ends the job) no sooner than 60 s after it, so the next
#      run (52 s after the kill) falls between the two; a kill at a random moment may miss that
#      window, and then the node is deleted without a drain, which is correct but proves less;
#   6. graceful: after a poweroff of the other worker its node is gone (self-drain).
# Prints the accelerator, the image size, build time and the timings, and writes them to
# $ONEHPC_BINARY_DIR/image-kvm-results.txt.
#
# Runs by default as root with the image tools installed (make image-deps); exit 77 (skipped)
# otherwise, or with ONEHPC_VM_TESTS=0. The accelerator is chosen at run time: KVM when
# /dev/kvm boots a 512-byte boot sector and then the base image's kernel (the boot sector alone
# passes on a nested PVM host where real guests die), else TCG (emulation; this test takes
# about 15 min on 2 cores); ONEHPC_KVM_ACCEL=kvm|tcg forces one. ONEHPC_KVM_IMAGE=FILE reuses a built image
# instead of running Packer; ONEHPC_DEB=FILE uses that .deb; ONEHPC_IMAGE_CACHE (default
# /var/cache/one-hpc-image) keeps the base image.
set -uo pipefail

SRC=${ONEHPC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}
# shellcheck source=SCRIPTDIR/../../image-build/lib.sh
. "$SRC/image-build/lib.sh"

loud_skip() {
    echo "###########################################################################"
    echo "### oneslurm_vm_test SKIPPED: $*"
    echo "###########################################################################"
    exit 77
}
case ${ONEHPC_VM_TESTS:-${ONEHPC_KVM_TESTS:-1}} in
    0|no|NO|false) loud_skip "ONEHPC_VM_TESTS=0";;
esac
[ "$(id -u)" = 0 ] || loud_skip "needs root (network namespace, taps, loop devices)"
for tool in packer qemu-system-x86_64 qemu-img mmdebstrap extlinux xorriso ssh ssh-keygen curl ip; do
    command -v "$tool" >/dev/null || loud_skip "tool $tool is missing: make image-deps installs the image tools"
done
case ${ONEHPC_KVM_ACCEL:-} in
    ""|kvm|tcg) ;;
    *) loud_skip "ONEHPC_KVM_ACCEL must be kvm or tcg, not '$ONEHPC_KVM_ACCEL'";;
esac
accel="" accel_why=""

passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; [ $# -lt 2 ] || printf '%s\n' "$2" | sed 's/^/    /'; failed=$((failed + 1)); }
log() { echo "--- $(date +%T) $*"; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

work=$(mktemp -d "${TMPDIR:-/tmp}/one-hpc-kvm.XXXXXX")
ns=onehpc-kvm-$$
sim_pid=""
watchdog_pid=""
declare -A qemu_pid=() vm_id=() ready_seconds=() boot_ms=() idle_seconds=()
image="" image_bytes=0 image_virtual=0 base_seconds="" build_seconds="" removed_seconds=""
drained_seconds="" deleted_seconds="" test_t0=$(date +%s)
results=$BIN_DIR/image-kvm-results.txt
logs=$BIN_DIR/image-kvm-logs

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    local name pid
    trap '' HUP INT TERM  # a signal now (the watchdog's) must not cut the clean-up short
    if [ -n "$watchdog_pid" ]; then
        # Its sleep first (by parent PID: once the subshell is gone the sleep would be
        # orphaned and keep ctest's pipe open); a killed sleep ends the subshell by itself.
        pkill -TERM -P "$watchdog_pid" 2>/dev/null
        kill -TERM "$watchdog_pid" 2>/dev/null
    fi
    for name in "${!qemu_pid[@]}"; do
        pid=${qemu_pid[$name]}
        if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null; fi
    done
    sleep 1
    for name in "${!qemu_pid[@]}"; do
        pid=${qemu_pid[$name]}
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; fi
    done
    if [ -n "$sim_pid" ] && kill -0 "$sim_pid" 2>/dev/null; then kill -TERM "$sim_pid"; fi
    wait 2>/dev/null
    if ip netns list | grep -qw "$ns"; then ip netns del "$ns"; fi
    rm -rf "$logs"
    mkdir -p "$logs"
    cp "$work"/*.console "$work"/*.log "$work"/image/build-console.log "$logs"/ 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
# VM_TIMEOUT=SECONDS (set by ctest): stop, cleaning up, before ctest's TIMEOUT kills us.
if [ "${VM_TIMEOUT:-0}" -gt 0 ]; then
    # TERM to the children too: a command substitution would keep the trap waiting.
    # Only a sleep that ran out stops the test (a killed one, at clean-up, does nothing).
    (sleep "$VM_TIMEOUT" && { echo "### oneslurm_vm_test: VM_TIMEOUT=$VM_TIMEOUT s reached, stopping"
     kill -TERM $$; pkill -TERM -P $$; }) &
    watchdog_pid=$!
fi

in_ns() { ip netns exec "$ns" "$@"; }
sim() {  # sim METHOD PATH [JSON]
    in_ns curl -sS --max-time 10 -X "$1" -H 'Content-Type: application/json' \
        ${3:+--data "$3"} "http://10.79.0.1:5030$2"
}
json_get() {  # json_get EXPR < json   (EXPR in Python on `d`)
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); v=eval(sys.argv[1]); print(v if v is not None else "")' "$1"
}
SSH_OPTS=(-i "$work/ssh-key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
          -o ConnectTimeout=5 -o BatchMode=yes -o LogLevel=ERROR)
vm_ssh() {  # vm_ssh IP COMMAND...
    local ip=$1; shift
    in_ns timeout 60 ssh "${SSH_OPTS[@]}" "root@$ip" "$@"
}

report() {
    local n
    {
        echo "accelerator=$accel ($accel_why)"
        echo "image: $image"
        echo "image_bytes=$image_bytes ($((image_bytes / 1048576)) MiB compressed qcow2, $((image_virtual / 1073741824)) GiB virtual)"
        echo "base_build_seconds=$base_seconds"
        echo "image_build_seconds=$build_seconds"
        for n in controller worker1 worker2; do
            echo "${n}_boot_to_ready_seconds=${ready_seconds[$n]:-not reached}"
        done
        for n in worker1 worker2; do
            echo "${n}_join_seconds_boot_to_idle=${idle_seconds[$n]:-not reached}"
        done
        echo "hard_kill_to_drained_seconds=${drained_seconds:-not reached}"
        echo "drained_to_deleted_seconds=${deleted_seconds:-not reached}"
        echo "node_removed_seconds_after_poweroff=${removed_seconds:-not reached}"
        echo "total_seconds=$(( $(date +%s) - test_t0 ))"
    } | tee "$results"
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

# ---- 1. the .deb, the base image, the OneSlurm image ------------------------------------------
if [ -n "${ONEHPC_DEB:-}" ]; then
    deb=$ONEHPC_DEB
else
    log "building the .deb in $BIN_DIR"
    cmake --build "$BIN_DIR" --target one-hpc onegate-sim -j2 >"$work/deb.log" 2>&1 &&
        (cd "$BIN_DIR" && cpack -G DEB >>"$work/deb.log" 2>&1)
    deb=$(find "$BIN_DIR" -maxdepth 1 -name 'one-hpc_*.deb' -printf '%T@ %p\n' | sort -rn |
          head -n1 | cut -d' ' -f2-)
fi
if [ -f "$deb" ]; then pass "the one-hpc .deb ($deb)"; else
    fail "the one-hpc .deb" "$(tail -n 20 "$work/deb.log" 2>/dev/null)"
    echo "$passed passed, $failed failed"; exit 1
fi
[ -x "$BIN_DIR/tests/onegate-sim" ] || cmake --build "$BIN_DIR" --target onegate-sim -j2 >/dev/null 2>&1
SIM_BIN=$BIN_DIR/tests/onegate-sim

cache=${ONEHPC_IMAGE_CACHE:-/var/cache/one-hpc-image}
mkdir -p "$cache"
base=$cache/debian-12-base.qcow2
stamp=$(cat "$SRC/image-build/make-base-image.sh" "$SRC/image-build/lib.sh" "$SRC"/image-build/base/* |
        sha256sum | cut -c1-16)
base_seconds=cached
if [ ! -s "$base" ] || [ "$(cat "$base.stamp" 2>/dev/null)" != "$stamp" ]; then
    log "building the base image"
    t0=$(date +%s)
    if bash "$SRC/image-build/make-base-image.sh" --output "$base" --cache "$cache" >"$work/base.log" 2>&1; then
        echo "$stamp" > "$base.stamp"
        base_seconds=$(( $(date +%s) - t0 ))
    else
        fail "make-base-image.sh" "$(tail -n 30 "$work/base.log")"
        echo "$passed passed, $failed failed"; exit 1
    fi
fi
pass "base image $base ($base_seconds s)"

# kvm_boots_image IMAGE SECONDS: the base image's kernel starts under KVM (serial console).
# The boot-sector probe (kvm_boots_bios) is not enough: on a nested PVM host it passes and a
# real guest still dies in extlinux ("KVM internal error. Suberror: 1"), paused, not exited.
kvm_boots_image() {
    local dir rc=1 pid i
    dir=$(mktemp -d "$work/kvm-probe.XXXXXX")
    timeout "$2" qemu-system-x86_64 -accel kvm -m 512 -snapshot -display none -monitor none \
        -drive "file=$1,if=virtio,format=qcow2" -serial "file:$dir/serial" -no-reboot \
        >"$dir/qemu.log" 2>&1 &
    pid=$!
    for ((i = 0; i < $2 * 5; i++)); do
        if grep -qE 'Run /init as init process|Welcome to' "$dir/serial" 2>/dev/null; then rc=0; break; fi
        grep -q 'KVM internal error' "$dir/qemu.log" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rm -rf "$dir"
    return "$rc"
}
if [ -n "${ONEHPC_KVM_ACCEL:-}" ]; then
    accel=$ONEHPC_KVM_ACCEL accel_why="ONEHPC_KVM_ACCEL=$ONEHPC_KVM_ACCEL"
elif ! kvm_usable; then
    accel=tcg accel_why="no usable /dev/kvm"
elif ! kvm_boots_bios 20; then
    accel=tcg accel_why="/dev/kvm cannot boot a BIOS boot sector"
elif ! kvm_boots_image "$base" 60; then
    accel=tcg accel_why="/dev/kvm boots a boot sector but not the base image's kernel (nested PVM?)"
else
    accel=kvm accel_why="/dev/kvm boots the base image's kernel"
fi
if [ "$accel" = kvm ]; then ready_timeout=600; else ready_timeout=900; fi
echo "### oneslurm_vm_test: accelerator $accel ($accel_why)"

if [ -n "${ONEHPC_KVM_IMAGE:-}" ]; then
    image=$ONEHPC_KVM_IMAGE
    build_seconds="(reused $image)"
else
    log "building the OneSlurm image with Packer"
    if bash "$SRC/image-build/build-image.sh" --appliance oneslurm --base "$base" --deb "$deb" \
           --output "$work/image" --packer-log "$work/packer.log" --accel "$accel" \
           >"$work/build.log" 2>&1; then
        image=$work/image/oneslurm.qcow2
        build_seconds=$(sed -n 's/^build_seconds=//p' "$work/image/build-stats")
        pass "packer build of the OneSlurm image (${build_seconds} s)"
    else
        fail "packer build of the OneSlurm image" "$(tail -n 40 "$work/build.log")"
        echo "$passed passed, $failed failed"; exit 1
    fi
fi
image_bytes=$(du -b "$image" | cut -f1)
image_virtual=$(qemu-img info --output=json "$image" | json_get 'd["virtual-size"]')

# ---- 2. private network and the OneGate simulator ----------------------------------------------
ip netns add "$ns"
in_ns ip link set lo up
in_ns ip link add br0 type bridge
in_ns ip addr add 10.79.0.1/24 dev br0
in_ns ip link set br0 up
for tap in tap-ctl tap-wrk1 tap-wrk2; do
    in_ns ip tuntap add dev "$tap" mode tap
    in_ns ip link set "$tap" master br0 up
done
# Not through in_ns: $! must be the process itself (ip netns exec execs it), not a subshell.
ip netns exec "$ns" "$SIM_BIN" --listen 10.79.0.1:5030 --operator-api >"$work/sim.log" 2>&1 &
sim_pid=$!
for _ in $(seq 50); do sim GET /_sim/health >/dev/null 2>&1 && break; sleep 0.2; done
if sim GET /_sim/health >/dev/null 2>&1; then pass "onegate-sim on 10.79.0.1:5030 in netns $ns"; else
    fail "onegate-sim starts" "$(cat "$work/sim.log")"; echo "$passed passed, $failed failed"; exit 1
fi

# The service as the OneFlow template describes it (roles, parents, max, cooldown); VMs are
# added one by one below, so min_vms is 0 here.
service_json=$("$PY" - "$SRC/templates/oneflow/oneslurm.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
roles = [{"name": r["name"], "cardinality": 0, "min_vms": 0, "max_vms": r.get("max_vms", 100),
          "cooldown": r.get("cooldown", 30), "parents": r.get("parents", [])} for r in t["roles"]]
print(json.dumps({"name": t["name"], "roles": roles}))
EOF
)
service_id=$(sim POST /_sim/services "$service_json" | json_get 'd.get("id")')
if [ -z "$service_id" ]; then fail "the simulator creates the service"; report; fi
ssh-keygen -q -t ed25519 -N '' -C one-hpc-kvm-test -f "$work/ssh-key"

# make_context NAME ROLE IP MAC VMID TOKEN: the CONTEXT ISO of one VM.
make_context() {
    local name=$1 role=$2 ip=$3 mac=$4 vmid=$5 token=$6 dir=$work/$1-context
    mkdir -p "$dir"
    "$PY" - "$SRC" "$role" "$ip" "$mac" "$vmid" "$(cat "$work/ssh-key.pub")" "$dir" <<'EOF'
import json, os, sys
sys.dont_write_bytecode = True
src, role, ip, mac, vmid, key, out = sys.argv[1:]
sys.path.insert(0, os.path.join(src, "tests", "integration"))
from templates_test import parse_one_template  # the same parser the template test uses
tmpl = dict(parse_one_template(open(os.path.join(src, "templates/vm/oneslurm.tmpl")).read()))
service = json.load(open(os.path.join(src, "templates/oneflow/oneslurm.json")))
wiring = {k: v for r in service["roles"] if r["name"] == role
          for k, v in r["template_contents"].items() if k != "NIC"}
ctx = {}
for k, v in tmpl["CONTEXT"]:
    if v.startswith("$USER["):
        v = key if k == "SSH_PUBLIC_KEY" else ""
    elif v.startswith("$"):
        v = wiring.get(v[1:], "")          # blank user inputs arrive as ''
    ctx[k] = v
ctx.update({"DISK_ID": "1", "TARGET": "hdb", "VMID": vmid,
            "ONEGATE_ENDPOINT": "http://10.79.0.1:5030",
            "ETH0_IP": ip, "ETH0_MAC": mac, "ETH0_MASK": "255.255.255.0",
            "ETH0_NETWORK": "10.79.0.0", "ETH0_GATEWAY": "", "ETH0_DNS": "",
            "ETH0_MTU": "", "ETH0_VLAN_ID": "", "ETH0_SEARCH_DOMAIN": ""})
# OpenNebula: a header, NAME='value' sorted by name (byte order), only ' escaped.
lines = ["# Context variables generated by OpenNebula"]
for k in sorted(ctx, key=lambda s: s.encode()):
    lines.append(f"{k}='" + ctx[k].replace("'", "'\\''") + "'")
open(os.path.join(out, "context.sh"), "w").write("\n".join(lines) + "\n")
EOF
    printf '%s\n' "$token" > "$dir/token.txt"
    xorriso -as mkisofs -quiet -V CONTEXT -J -R -o "$work/$name-context.iso" "$dir" 2>>"$work/xorriso.log"
}

# boot_vm NAME TAP MAC: qemu on a copy-on-write overlay, serial console to a file.
boot_vm() {
    local name=$1 tap=$2 mac=$3
    qemu-img create -q -f qcow2 -b "$image" -F qcow2 "$work/$name.qcow2"
    ip netns exec "$ns" qemu-system-x86_64 -name "$name" -accel "$accel" -smp 2 -m 1536 \
        -drive "file=$work/$name.qcow2,if=virtio,format=qcow2,discard=unmap" \
        -drive "file=$work/$name-context.iso,media=cdrom,if=ide,readonly=on" \
        -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=$mac" \
        -display none -monitor none -serial "file:$work/$name.console" 2>"$work/$name.qemu.log" &
    qemu_pid[$name]=$!
}

# wait_ready NAME IP VMID SECONDS: READY=YES (0), ERROR published or configure failed without
# publishing (1), or timeout (2).
wait_ready() {
    local name=$1 ip=$2 vmid=$3 deadline=$(( $(date +%s) + $4 )) ut status next_ssh=0
    while [ "$(date +%s)" -lt "$deadline" ]; do
        ut=$(sim GET "/_sim/vms/$vmid/user_template" 2>/dev/null)
        if [ "$(json_get 'd.get("READY")' <<<"$ut" 2>/dev/null)" = YES ]; then return 0; fi
        if [ -n "$(json_get 'd.get("ERROR")' <<<"$ut" 2>/dev/null)" ]; then
            echo "ERROR=$(json_get 'd.get("ERROR")' <<<"$ut")"; return 1
        fi
        if ! kill -0 "${qemu_pid[$name]}" 2>/dev/null; then echo "qemu exited"; return 2; fi
        if grep -q 'KVM internal error' "$work/$name.qemu.log" 2>/dev/null; then
            echo "qemu: $(head -n 3 "$work/$name.qemu.log")"; return 2
        fi
        # A configure that failed before it could reach OneGate publishes nothing: ask the VM.
        if [ "$(date +%s)" -ge "$next_ssh" ]; then
            next_ssh=$(( $(date +%s) + 30 ))
            if status=$(vm_ssh "$ip" 'if systemctl is-failed -q one-hpc-configure.service; then journalctl -b -u one-hpc-configure.service --no-pager | tail -n 4; cat /run/one-hpc/status.json 2>/dev/null; fi' 2>/dev/null) &&
               [ -n "$status" ]; then
                echo "one-hpc-configure.service failed without publishing to OneGate:"
                echo "$status"
                return 1
            fi
        fi
        sleep 2
    done
    echo "no READY nor ERROR after $4 s"
    return 2
}

diagnose() {  # diagnose NAME IP
    echo "== $1: last console lines"; tail -n 25 "$work/$1.console" 2>/dev/null
    echo "== $1: one-hpc journal (over SSH)"
    vm_ssh "$2" 'systemctl --no-pager status one-hpc-configure.service context-lite.service; journalctl --no-pager -b -u one-hpc-configure.service | tail -n 40' 2>&1
}

# start_vm NAME ROLE IP MAC TAP: creates the VM in the simulator, boots it, waits for READY.
start_vm() {
    local name=$1 role=$2 ip=$3 mac=$4 tap=$5 reply id token t0 why idx=${1//[!0-9]/}
    reply=$(sim POST /_sim/vms "{\"service_id\":$service_id,\"role\":\"$role\",\"name\":\"${role}_${idx:-0}_(service_$service_id)\",\"nics\":[{\"ip\":\"$ip\",\"mac\":\"$mac\",\"network\":\"Service\",\"network_id\":\"0\"}]}")
    id=$(json_get 'd.get("id")' <<<"$reply"); token=$(json_get 'd.get("token")' <<<"$reply")
    if [ -z "$id" ] || [ -z "$token" ]; then
        fail "$name: the simulator creates the VM" "$reply"
        return 1
    fi
    vm_id[$name]=$id
    make_context "$name" "$role" "$ip" "$mac" "$id" "$token"
    log "booting $name (VM $id, $ip)"
    t0=$(now_ms)
    boot_ms[$name]=$t0
    boot_vm "$name" "$tap" "$mac"
    if why=$(wait_ready "$name" "$ip" "$id" "$ready_timeout"); then
        ready_seconds[$name]=$(awk -v ms=$(( $(now_ms) - t0 )) 'BEGIN{printf "%.1f", ms/1000}')
        pass "$name ($role) boots and publishes READY=YES (${ready_seconds[$name]} s)"
        return 0
    fi
    ready_seconds[$name]="-"
    fail "$name ($role) boots and publishes READY=YES" "$why
$(diagnose "$name" "$ip")"
    return 1
}

ctl_ip=10.79.0.11
ctl() { vm_ssh "$ctl_ip" "$@"; }
# node_line NODE: prints the node's record; exit 0 registered, 1 not registered (scontrol
# says "not found"), 2 unknown (ssh or scontrol failed: slurmctld busy with a dead node, a
# lost packet). Only a 1 is ever read as "deleted".
node_line() {
    local out
    out=$(ctl scontrol -o show node "$1" 2>&1)
    if grep '^NodeName=' <<<"$out"; then return 0; fi
    if grep -q 'not found' <<<"$out"; then return 1; fi
    return 2
}
secs_since_ms() { awk -v ms=$(( $(now_ms) - $1 )) 'BEGIN{printf "%.1f", ms/1000}'; }

# ---- 3. controller, then 2 workers, each idle in sinfo before the next boots ---------------------
# wait_idle NAME: the worker's node idle in the controller's sinfo (join: VM start to idle).
wait_idle() {
    local w=$1 state="" t0
    wnode[$w]=$(vm_ssh "${wip[$w]}" hostname -s 2>/dev/null)
    t0=$(date +%s)
    while [ $(( $(date +%s) - t0 )) -lt 180 ]; do
        state=$(ctl sinfo -h -N -n "${wnode[$w]}" -o %t 2>/dev/null | head -n1)
        [ "$state" = idle ] && break
        sleep 3
    done
    if [ -n "${wnode[$w]}" ] && [ "$state" = idle ]; then
        idle_seconds[$w]=$(secs_since_ms "${boot_ms[$w]}")
        pass "$w: node ${wnode[$w]} is idle in the controller's sinfo (${idle_seconds[$w]} s after its VM started)"
    else
        fail "$w: node ${wnode[$w]:-?} is idle in the controller's sinfo" \
            "state '$state'; sinfo: $(ctl sinfo -N 2>&1)"
        report
    fi
}
start_vm controller controller "$ctl_ip" 02:00:0a:4f:00:0b tap-ctl || report
declare -A wip=([worker1]=10.79.0.12 [worker2]=10.79.0.13) wnode=()
start_vm worker1 worker "${wip[worker1]}" 02:00:0a:4f:00:0c tap-wrk1 || report
wait_idle worker1
start_vm worker2 worker "${wip[worker2]}" 02:00:0a:4f:00:0d tap-wrk2 || report
wait_idle worker2

# ---- 4. Slurm: srun on both nodes -----------------------------------------------------------------
out=$(ctl timeout 100 srun -N2 hostname 2>&1 | sort)
expected=$(printf '%s\n' "${wnode[worker1]}" "${wnode[worker2]}" | sort)
if [ "$out" = "$expected" ]; then pass "srun -N2 hostname runs on both nodes: $(echo "$out" | tr '\n' ' ')"; else
    fail "srun -N2 hostname runs on both nodes" "expected: $expected
got: $out"
fi

# ---- 5. the timers' commands find the CD-only context --------------------------------------------
# The image has no one-context: no context.sh.network, no /context/. Run the commands that
# timers run; they may fail later (a OneSlurm worker is not an Open OnDemand VM), but they must
# get past the context (before the fix they stopped there: "no context found", exit 3).
cd_only=$(vm_ssh "${wip[worker1]}" 'ls /var/run/one-context/context.sh.network /context/context.sh 2>/dev/null')
if [ -z "$cd_only" ]; then pass "worker1 has its context only on the CD (no context.sh.network, no /context/)"; else
    fail "worker1 has its context only on the CD" "$cd_only"
fi
for cmd in follow storage-refresh; do
    out=$(vm_ssh "${wip[worker1]}" "one-hpc $cmd 2>&1; echo \"exit=\$?\"")
    rc=$(sed -n 's/^exit=//p' <<<"$out" | tail -n1)
    # On a OneSlurm worker both then exit 3 for their own reason (follow: "role worker has
    # nothing to follow"; storage-refresh: no storage-exports.json): the exit code proves
    # nothing here, the log lines do.
    if grep -q 'loaded from the context CD-ROM' <<<"$out" &&
       ! grep -q "no context found\|cannot read the VM's context" <<<"$out"; then
        pass "one-hpc $cmd on the CD-only worker loads the context from the CD-ROM (exit $rc)"
    else
        fail "one-hpc $cmd on the CD-only worker loads the context from the CD-ROM" "$out"
    fi
done
left=$(vm_ssh "${wip[worker1]}" 'ls -d /run/one-hpc/context-cd* 2>/dev/null; grep -w iso9660 /proc/mounts')
if [ -z "$left" ]; then pass "no context CD mount or mount point left behind on worker1"; else
    fail "no context CD mount or mount point left behind on worker1" "$left"
fi
# The shipped reconcile timer (OnBootSec=2min) has run by now on the controller.
t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt 150 ]; do
    journal=$(ctl journalctl -b -u oneslurm-reconcile.service -o cat --no-pager 2>/dev/null)
    grep -q 'reconcile: .* Slurm nodes' <<<"$journal" && break
    sleep 5
done
if grep -q 'loaded from the context CD-ROM' <<<"$journal" && grep -q 'reconcile: .* Slurm nodes' <<<"$journal" &&
   ! grep -q 'no context found' <<<"$journal"; then
    pass "oneslurm-reconcile.timer's runs on the controller load the context from the CD-ROM"
else
    fail "oneslurm-reconcile.timer's runs on the controller load the context from the CD-ROM" \
        "$(tail -n 20 <<<"$journal")"
fi

# ---- 6. hard kill of worker2 while a job runs there ---------------------------------------------
victim=worker2 vnode=${wnode[worker2]}
# One string: ssh joins its arguments with blanks for the remote shell.
job=$(ctl "sbatch --parsable --no-requeue -w $vnode -J vm-hard -o /dev/null -D /tmp --wrap 'sleep 600'" 2>&1)
t0=$(date +%s) jstate=""
while [ $(( $(date +%s) - t0 )) -lt 90 ]; do
    jstate=$(ctl squeue -h -j "$job" -o %T:%N 2>/dev/null)  # no blank: ssh would split it
    [ "$jstate" = "RUNNING:$vnode" ] && break
    sleep 2
done
if [ "$jstate" = "RUNNING:$vnode" ]; then pass "job $job runs on $vnode"; else
    fail "job ${job:-?} runs on $vnode" "squeue: '$jstate'"
fi
# Place the kill 8 s after a reconcile run (the header says why), from the controller's clock:
# the next run comes 52 s after the kill; NOT_RESPONDING was seen 42 s after a kill here, and
# DOWN cannot come before SlurmdTimeout (60 s) after the last answer.
# shellcheck disable=SC2016  # expanded on the controller
timing=$(ctl 'echo $(systemctl show -P InactiveExitTimestampMonotonic oneslurm-reconcile.service) $(cut -d" " -f1 /proc/uptime)')
delay=$(awk -v last="${timing% *}" -v now="${timing#* }" 'BEGIN {
    if (last + 0 == 0) { print 0; exit }
    at = last / 1e6 + 8; while (at < now) at += 60; printf "%.1f", at - now }')
log "reconcile timer: last run at ${timing% *} us, now ${timing#* } s; killing $victim in $delay s"
sleep "$delay"
log "SIGKILL to $victim's qemu (no shutdown); the VM leaves the service in the simulator"
kill -KILL "${qemu_pid[$victim]}"
wait "${qemu_pid[$victim]}" 2>/dev/null
kill_ms=$(now_ms)
sim POST "/_sim/vms/${vm_id[$victim]}/terminate" '{"hard":true}' >/dev/null
drained=no seen_states=""
while [ $(( $(now_ms) - kill_ms )) -lt 240000 ]; do
    line=$(node_line "$vnode"); rc=$?
    if [ "$rc" = 2 ]; then sleep 3; continue; fi  # no answer this time: ask again
    st=$(sed -n 's/.* State=\([^ ]*\).*/\1/p' <<<"$line")
    case "$seen_states" in *" $st@"*) ;; *) seen_states="$seen_states $st@$(secs_since_ms "$kill_ms")s";; esac
    if grep -q 'Reason=removed from OneFlow service' <<<"$line" && grep -q DRAIN <<<"$st"; then
        drained=yes; break
    fi
    [ "$rc" = 1 ] && break  # deleted without a drain
    sleep 3
done
if [ "$drained" = yes ]; then
    drained_seconds=$(secs_since_ms "$kill_ms")
    drained_ms=$(now_ms)
    pass "reconciler drained $vnode with reason 'removed from OneFlow service' ($drained_seconds s after the kill; State=$st)"
    jstate=$(ctl squeue -h -j "$job" -o '%T' 2>/dev/null)
    log "job $job: ${jstate:-gone}; node states seen:$seen_states"
else
    fail "reconciler drained $vnode with reason 'removed from OneFlow service'" \
        "states seen:$seen_states; node: ${line:-not registered}
$(ctl journalctl -b -u oneslurm-reconcile.service -o short-monotonic --no-pager | tail -n 20)"
    drained_ms=$kill_ms
fi
deleted=no
while [ $(( $(now_ms) - drained_ms )) -lt 300000 ]; do
    if node_line "$vnode" >/dev/null; [ $? = 1 ]; then deleted=yes; break; fi
    sleep 5
done
journal=$(ctl journalctl -b -u oneslurm-reconcile.service -o cat --no-pager 2>/dev/null)
if [ "$deleted" = yes ] && grep -q "reconcile: delete $vnode: .*no job holds it" <<<"$journal"; then
    deleted_seconds=$(secs_since_ms "$drained_ms")
    pass "reconciler deleted $vnode once job $job was gone ($deleted_seconds s after the drain)"
else
    fail "reconciler deleted $vnode once job $job was gone" \
        "node: $(node_line "$vnode"); job: $(ctl squeue -h -j "$job" -o %T:%N 2>&1)
$(grep "$vnode\|Slurm nodes" <<<"$journal" | tail -n 10)"
fi

# ---- 7. graceful: worker1's poweroff, its node gone (self-drain) ---------------------------------
node=${wnode[worker1]}
log "powering off worker1"
t0=$(date +%s)
vm_ssh "${wip[worker1]}" systemctl poweroff >/dev/null 2>&1
for _ in $(seq 120); do kill -0 "${qemu_pid[worker1]}" 2>/dev/null || break; sleep 1; done
if kill -0 "${qemu_pid[worker1]}" 2>/dev/null; then
    fail "worker1 powers off within 120 s" "$(tail -n 20 "$work/worker1.console")"
else
    pass "worker1 powers off ($(( $(date +%s) - t0 )) s)"
fi
sim PUT "/_sim/vms/${vm_id[worker1]}/state" '{"state":8,"lcm_state":0}' >/dev/null
gone=no
while [ $(( $(date +%s) - t0 )) -lt 300 ]; do
    if [ -z "$(ctl sinfo -h -N -n "$node" -o %N 2>/dev/null)" ] && ctl true 2>/dev/null; then
        gone=yes; break
    fi
    sleep 5
done
if [ "$gone" = yes ]; then
    removed_seconds=$(( $(date +%s) - t0 ))
    pass "node $node is removed from Slurm after worker1's poweroff (${removed_seconds} s)"
else
    fail "node $node is removed from Slurm after worker1's poweroff" "$(ctl sinfo -N 2>&1)"
fi
report
