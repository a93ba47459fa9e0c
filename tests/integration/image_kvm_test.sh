#!/bin/bash
# End-to-end proof of the OneSlurm appliance image under KVM (slow: 10-30 minutes):
#   1. the .deb, the Debian 12 base image (cached) and the OneSlurm image built by Packer;
#   2. a private network namespace with a bridge on 10.79.0.0/24 (the only addresses used),
#      one tap per VM, and the OneGate simulator on 10.79.0.1:5030 (operator API on);
#   3. a controller VM and then a worker VM, each booted by qemu from its own copy-on-write
#      overlay of the image with its own CONTEXT ISO (context.sh and token.txt exactly as
#      OpenNebula writes them, made with `xorriso -as mkisofs -V CONTEXT -J -R`); the context
#      comes from templates/vm/oneslurm.tmpl and the role's wiring;
#   4. checks: each VM publishes READY=YES (not ERROR), the worker is idle in the controller's
#      sinfo, and after a poweroff of the worker its node is gone.
# Prints the image size, build time and boot-to-READY times, and writes them to
# $ONEHPC_BINARY_DIR/image-kvm-results.txt.
#
# Runs only with ONEHPC_KVM_TESTS=1, as root, where /dev/kvm boots an ordinary BIOS guest
# (checked by booting a 512-byte boot sector; exit 77 otherwise). ONEHPC_KVM_ACCEL=tcg runs
# the same test by emulation instead (slow: about an hour on 2 cores) where KVM cannot.
# ONEHPC_KVM_IMAGE=FILE reuses a built image instead of running Packer; ONEHPC_DEB=FILE uses
# that .deb; ONEHPC_IMAGE_CACHE (default /var/cache/one-hpc-image) keeps the base image.
set -uo pipefail

SRC=${ONEHPC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}
# shellcheck source=SCRIPTDIR/../../image-build/lib.sh
. "$SRC/image-build/lib.sh"

loud_skip() {
    echo "###########################################################################"
    echo "### image_kvm_test SKIPPED: $*"
    echo "###########################################################################"
    exit 77
}
if [ "${ONEHPC_KVM_TESTS:-}" != 1 ]; then
    loud_skip "it builds and boots VM images (10-30 min); set ONEHPC_KVM_TESTS=1 to run it"
fi
[ "$(id -u)" = 0 ] || loud_skip "needs root (network namespace, taps, loop devices)"
accel=${ONEHPC_KVM_ACCEL:-kvm}
case $accel in
    kvm)
        kvm_usable || loud_skip "/dev/kvm is missing or cannot be opened: no KVM on this machine"
        kvm_boots_bios 20 || loud_skip "/dev/kvm answers but cannot boot an ordinary BIOS guest (a nested hypervisor such as PVM?); ONEHPC_KVM_ACCEL=tcg runs this test by emulation (slow)"
        ready_timeout=900;;
    tcg) echo "### image_kvm_test: ONEHPC_KVM_ACCEL=tcg: emulation, no KVM (slow)"; ready_timeout=2700;;
    *) loud_skip "ONEHPC_KVM_ACCEL must be kvm or tcg, not '$accel'";;
esac

passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; [ $# -lt 2 ] || printf '%s\n' "$2" | sed 's/^/    /'; failed=$((failed + 1)); }
log() { echo "--- $(date +%T) $*"; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for tool in packer qemu-system-x86_64 qemu-img mmdebstrap extlinux xorriso ssh ssh-keygen curl ip; do
    if ! command -v "$tool" >/dev/null; then
        fail "tool $tool is installed" "make image-deps installs the image tools"
        echo "$passed passed, $failed failed"
        exit 1
    fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/one-hpc-kvm.XXXXXX")
ns=onehpc-kvm-$$
sim_pid=""
declare -A qemu_pid=() vm_id=() ready_seconds=()
image="" image_bytes=0 image_virtual=0 base_seconds="" build_seconds="" idle_seconds="" removed_seconds=""
results=$BIN_DIR/image-kvm-results.txt
logs=$BIN_DIR/image-kvm-logs

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    local name pid
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
    {
        echo "image: $image"
        echo "image_bytes=$image_bytes ($((image_bytes / 1048576)) MiB compressed qcow2, $((image_virtual / 1073741824)) GiB virtual)"
        echo "base_build_seconds=$base_seconds"
        echo "image_build_seconds=$build_seconds"
        echo "controller_boot_to_ready_seconds=${ready_seconds[controller]:-not reached}"
        echo "worker_boot_to_ready_seconds=${ready_seconds[worker]:-not reached}"
        echo "node_idle_seconds_after_worker_ready=${idle_seconds:-not reached}"
        echo "node_removed_seconds_after_poweroff=${removed_seconds:-not reached}"
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
for tap in tap-ctl tap-wrk; do
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
        -display none -monitor none -serial "file:$work/$name.console" &
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
    local name=$1 role=$2 ip=$3 mac=$4 tap=$5 reply id token t0 why
    reply=$(sim POST /_sim/vms "{\"service_id\":$service_id,\"role\":\"$role\",\"name\":\"${role}_0_(service_$service_id)\",\"nics\":[{\"ip\":\"$ip\",\"mac\":\"$mac\",\"network\":\"Service\",\"network_id\":\"0\"}]}")
    id=$(json_get 'd.get("id")' <<<"$reply"); token=$(json_get 'd.get("token")' <<<"$reply")
    if [ -z "$id" ] || [ -z "$token" ]; then
        fail "$name: the simulator creates the VM" "$reply"
        return 1
    fi
    vm_id[$name]=$id
    make_context "$name" "$role" "$ip" "$mac" "$id" "$token"
    log "booting $name (VM $id, $ip)"
    t0=$(now_ms)
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


# ---- 3. controller, then worker -----------------------------------------------------------------
start_vm controller controller 10.79.0.11 02:00:0a:4f:00:0b tap-ctl || report
start_vm worker worker 10.79.0.12 02:00:0a:4f:00:0c tap-wrk || report

# ---- 4. Slurm: the worker idle in sinfo, gone after its poweroff ------------------------------------
node=$(vm_ssh 10.79.0.12 hostname -s 2>/dev/null)
t0=$(date +%s)
state=""
while [ $(( $(date +%s) - t0 )) -lt 180 ]; do
    state=$(vm_ssh 10.79.0.11 sinfo -h -N -n "$node" -o %t 2>/dev/null | head -n1)
    [ "$state" = idle ] && break
    sleep 3
done
if [ -n "$node" ] && [ "$state" = idle ]; then
    idle_seconds=$(( $(date +%s) - t0 ))
    pass "worker node $node is idle in the controller's sinfo"
else
    fail "worker node ${node:-?} is idle in the controller's sinfo" \
        "state '$state'; sinfo: $(vm_ssh 10.79.0.11 sinfo -N 2>&1)"
    report
fi

log "powering off the worker"
t0=$(date +%s)
vm_ssh 10.79.0.12 systemctl poweroff >/dev/null 2>&1
for _ in $(seq 120); do kill -0 "${qemu_pid[worker]}" 2>/dev/null || break; sleep 1; done
if kill -0 "${qemu_pid[worker]}" 2>/dev/null; then
    fail "the worker VM powers off within 120 s" "$(tail -n 20 "$work/worker.console")"
else
    pass "the worker VM powers off ($(( $(date +%s) - t0 )) s)"
fi
sim PUT "/_sim/vms/${vm_id[worker]}/state" '{"state":8,"lcm_state":0}' >/dev/null
gone=no
while [ $(( $(date +%s) - t0 )) -lt 300 ]; do
    if [ -z "$(vm_ssh 10.79.0.11 sinfo -h -N -n "$node" -o %N 2>/dev/null)" ] &&
       vm_ssh 10.79.0.11 true 2>/dev/null; then
        gone=yes; break
    fi
    sleep 5
done
if [ "$gone" = yes ]; then
    removed_seconds=$(( $(date +%s) - t0 ))
    pass "node $node is removed from Slurm after the worker's poweroff (${removed_seconds} s)"
else
    fail "node $node is removed from Slurm after the worker's poweroff" \
        "$(vm_ssh 10.79.0.11 sinfo -N 2>&1)"
fi
report
