#!/bin/bash
# scale_test.sh [N...] - a OneSlurm or Open OnDemand service at scale on booted containers
# (`make test-scale`, SCALE_SERVICE=oneslurm or ood).
#
# The container lab (tests/lab/bootlab.sh): every VM is a systemd-nspawn container of the
# package layer (install-appliance.sh + one-hpc's .deb) booting with real systemd, munged,
# slurmd (workers) or slurmctld (the controller), and the real one-hpc units; the OneGate
# simulator (a stand-in for OpenNebula's OneGate and OneFlow, tests/simulator) serves them over
# HTTP on the lab bridge.
#
# One controller (elastic mode on, idle limit 1 h) and one first worker (w0) serve every size.
# With SCALE_SERVICE=ood the service is Open OnDemand's, of the ood layers: a storage VM, the
# portal as the controller (its users, accounting, the shared Slurm state) and Open OnDemand
# workers, each mounting the homes and the software tree and creating the portal's users
# before it joins; one host directory bound into every container stands in for NFS (as in
# lab_ood_test.sh; lab_lib.sh's new_ood_vm). The elastic phase below is then off by default
# (SCALE_ELASTIC=yes turns it on): each size's submission already times the portal's cycle.
# For each size N (default 1 10 25 50 100; 1 is the floor the others are compared with):
#   1  N new worker VMs are added to the service and their containers started together (one
#      after the other as fast as nspawn starts them: 0.1 s each for 10, 0.8 s each for 100 on
#      2 cores); the test waits until slurmctld lists all N + 1 nodes idle. Figures: the time
#      to start the containers, and from the first start to all idle; each worker's join steps
#      from its own journal (see scale_report.py); OneGate requests and bytes per join (the
#      simulator's log of the VM up to its READY) and in total; the key server's most
#      concurrent connections (its socket's NConnections, sampled every 0.5 s) and its time per
#      answer (each accepted connection's service instance, from the controller's journal);
#      slurmctld's CPU time during the joins.
#   2  with the N + 1 nodes live: one reconcile cycle and one elastic cycle, each the real unit
#      started by hand, their wall time; then a job for N + 2 nodes, whose submission starts a
#      cycle (oneslurm-elastic.path) that must raise the role within 10 s.
#   3  scale-down to 1 (w0): half of the N powered off (ACPI: self-drain), the other half
#      killed (SIGKILL of the container's PID 1: no self-drain) and terminated in OneGate; every
#      node but w0's must leave Slurm (the killed ones through the reconciler).
# Then (SCALE_ELASTIC=no skips it), at the largest size M: a job asking for M nodes; the
# elastic cycle, started by the submission as shipped (job_submit.lua, oneslurm-elastic.path),
# raises the worker role's cardinality from 1 to M within 10 s; the test plays OneFlow (creates
# and boots the M - 1 VMs the cardinality asks for) and the job must run on M nodes. Figures:
# submission to cardinality raised, to the job running.
#
# Results: one line per size in $SCALE_RESULTS (default $BIN_DIR/scale-results.tsv, columns
# documented in scale_report.py; `scale_report.py plot` draws them) and what each figure was
# read from under $BOOTLAB_DIR/logs/scale-N/ (kept when a check failed). Exit status: 0 all
# checks passed, 1 a check failed, 77 skipped (not root, or no lab on this host).
# Environment: as the lab tests (BOOTLAB_CACHE, ONEHPC_DEB, ONEHPC_SIM, ONEHPC_BINARY_DIR,
# LAB_TIMEOUT), SCALE_SERVICE (oneslurm, the default, or ood), SCALE_RESULTS, SCALE_ELASTIC=no
# to skip the elastic phase (=yes to run it with ood).

set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1 10 25 50 100)
for n in "${SIZES[@]}"; do
    case $n in ''|*[!0-9]*) echo "usage: $0 [N...] (N from 1 to 200)" >&2; exit 2;; esac
    if [ "$n" -lt 1 ] || [ "$n" -gt 200 ]; then echo "usage: $0 [N...] (N from 1 to 200)" >&2; exit 2; fi
done
SCALE_SERVICE=${SCALE_SERVICE:-oneslurm}
case $SCALE_SERVICE in
    oneslurm) SCALE_ELASTIC=${SCALE_ELASTIC:-yes};;
    ood) SCALE_ELASTIC=${SCALE_ELASTIC:-no};;
    *) echo "SCALE_SERVICE=$SCALE_SERVICE: expected oneslurm or ood" >&2; exit 2;;
esac
SCALE_RESULTS=${SCALE_RESULTS:-$BIN_DIR/scale-results.tsv}
MAX_N=$(printf '%s\n' "${SIZES[@]}" | sort -n | tail -1)

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: the lab boots containers and needs root (run it with sudo)"; exit 77
fi
OWN_LAB_DIR=yes; [ -n "${BOOTLAB_DIR:-}" ] && OWN_LAB_DIR=no
LAB_TIMEOUT=${LAB_TIMEOUT:-5400}
# shellcheck source-path=SCRIPTDIR source=../lab/bootlab.sh
. "$HERE/../lab/bootlab.sh"
# shellcheck source-path=SCRIPTDIR source=../lab/lab_lib.sh
. "$HERE/../lab/lab_lib.sh"
lab_begin scale_test

# Each container's systemd, journald, networkd and logind take inotify instances of the host's
# root user: Debian's default of 128 is used up by about 20 containers, after which a
# container's units fail with "Too many open files" and it never finishes booting. Raised for
# the run, given back at its end.
INOTIFY_KEYS=(fs.inotify.max_user_instances fs.inotify.max_user_watches)
INOTIFY_OLD=()
for key in "${INOTIFY_KEYS[@]}"; do INOTIFY_OLD+=("$(sysctl -n "$key")"); done
# shellcheck disable=SC2317  # the EXIT trap
inotify_restore() {
    local i
    for i in "${!INOTIFY_KEYS[@]}"; do sysctl -q -w "${INOTIFY_KEYS[$i]}=${INOTIFY_OLD[$i]}"; done
}
SAMPLER=""   # the background sampler of the key server's socket (run_size)
trap 'rc=$?; [ -z "$SAMPLER" ] || kill "$SAMPLER" 2>/dev/null; inotify_restore; (exit "$rc"); on_exit' EXIT
want=$((32 * (MAX_N + 10)))
[ "${INOTIFY_OLD[0]}" -ge "$want" ] || sysctl -q -w "fs.inotify.max_user_instances=$want"
want=$((8192 * (MAX_N + 10)))
[ "${INOTIFY_OLD[1]}" -ge "$want" ] || sysctl -q -w "fs.inotify.max_user_watches=$want"
echo "lab directory: $BOOTLAB_DIR   cache: $BOOTLAB_CACHE   service: $SCALE_SERVICE   sizes: ${SIZES[*]}"

SIM_URL="http://$BOOTLAB_NET.1:5030"
# shellcheck disable=SC2034  # IP: written by new_lab_vm
declare -A VMID=() IP=()
NFS_DIR=$BOOTLAB_DIR/nfs   # Open OnDemand: what stands in for the storage VM's NFS exports
SERVICE=""
NEXT_IP=10
FIRST_WORKER_IP=""
WORKERS=()   # the worker clones of the current size

# shellcheck disable=SC2317  # invoked through cardinality_is
cardinality() { sim GET "/_sim/services/$SERVICE" | jq -r '.roles[] | select(.name == "worker") | .cardinality'; }
# shellcheck disable=SC2317  # invoked through wait_for
idle_count() { ctl sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | grep -c .; }
# shellcheck disable=SC2317  # invoked through wait_for
all_idle() { [ "$(idle_count)" -ge "$1" ]; }
# shellcheck disable=SC2317  # invoked through wait_for
node_count() { ctl scontrol -o show nodes 2>/dev/null | grep -c '^NodeName='; }
# shellcheck disable=SC2317  # invoked through wait_for
only_w0() { [ "$(node_count)" = 1 ]; }
# shellcheck disable=SC2317  # invoked through wait_for
job_is() { [ "$(ctl squeue -h -j "$1" -o '%T' 2>/dev/null)" = "$2" ]; }
# shellcheck disable=SC2317  # invoked through wait_for
cardinality_is() { [ "$(cardinality)" = "$1" ]; }
slurmctld_cpu() {   # CPU seconds (user + system) slurmctld has used so far
    local pid
    pid=$(ctl pidof slurmctld) || { echo 0; return; }
    ctl cat "/proc/$pid/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}'
}
socket_prop() { ctl systemctl show -p "$1" --value one-hpc-key-server.socket; }

# A worker of the service: OneSlurm's with a join timeout that leaves room for a large batch;
# Open OnDemand's (its join timeout is the role's 300 s) with the storage VM's address. Both
# with the controller's VM id, as the service templates wire it (OneFlow resolves
# ${controller.vm.id} / ${portal.vm.id} when it creates a worker; the lab stands in for that).
new_worker() {
    if [ "$SCALE_SERVICE" = ood ]; then
        new_ood_vm "$1" worker ONEAPP_ROLE=ood-worker "ONEAPP_NFS_HOST=${IP[sto]}" \
            "ONEAPP_SLURM_CONTROLLER_VM_ID=${VMID[ctl]}"
    else
        new_slurm_vm "$1" worker ONEAPP_SLURM_JOIN_TIMEOUT=900 \
            "ONEAPP_SLURM_CONTROLLER_VM_ID=${VMID[ctl]}"
    fi
}
# The controller's elastic settings: w0 and the largest size, MAX_N + 1 workers (slurmctld
# accepts ONEAPP_SLURM_MAX_NODES of them), and room for one more, which each size's submission
# asks for.
controller_settings() {
    echo "ONEAPP_SLURM_MAX_NODES=$((MAX_N + 2))" ONEAPP_SLURM_ELASTIC=YES \
        ONEAPP_SLURM_ELASTIC_MIN_NODES=0 "ONEAPP_SLURM_ELASTIC_MAX_NODES=$((MAX_N + 2))" \
        ONEAPP_SLURM_ELASTIC_IDLE_SECONDS=3600 "ONEAPP_SLURM_ELASTIC_STEP=$MAX_N"
}
# The Open OnDemand service: the storage VM (a site proxy: no Squid), then the portal as ctl.
setup_ood() {
    local -a settings
    read -r -a settings <<< "$(controller_settings)"
    SERVICE=$(sim POST /_sim/services "{\"name\":\"Open OnDemand\",\"roles\":[
        {\"name\":\"storage\",\"cardinality\":1,\"cooldown_ms\":0},
        {\"name\":\"portal\",\"cardinality\":1,\"parents\":[\"storage\"],\"cooldown_ms\":0},
        {\"name\":\"worker\",\"cardinality\":0,\"min_vms\":0,\"max_vms\":$((MAX_N + 2)),
         \"parents\":[\"portal\"],\"cooldown_ms\":0}]}" | jq -r .id)
    if [ -z "$SERVICE" ] || [ "$SERVICE" = null ]; then echo "cannot create the service"; return 1; fi
    mkdir -p "$NFS_DIR"
    new_ood_vm sto storage ONEAPP_ROLE=storage ONEAPP_SOFTWARE_PROXY_ENABLED=YES \
        "ONEAPP_SOFTWARE_PROXY_URL=http://$BOOTLAB_NET.1:3128" || return 1
    boot_vms 120 sto || return 1
    check "storage READY" ready sto || return 1
    new_ood_vm ctl portal ONEAPP_ROLE=portal "ONEAPP_NFS_HOST=${IP[sto]}" \
        "ONEAPP_AUTH_LOCAL_USERS=alice:alicepass1 bob:bobpass12:20001" \
        ONEAPP_PORTAL_HOST_NAME=ood.lab.test "${settings[@]}" || return 1
}
# Open OnDemand: the worker NAME has the portal's users (alice with her uid there) and the
# shared homes (the lab's bind mount of home.mount).
# shellcheck disable=SC2317  # invoked through check
ood_worker_ok() {
    local name=$1 uid
    uid=$(ctl id -u alice 2>/dev/null) || return 1
    [ "$(bl_exec "$name" id -u alice 2>/dev/null)" = "$uid" ] &&
        [ "$(bl_exec "$name" systemctl is-active home.mount)" = active ] &&
        [ "$(bl_exec "$name" stat -c %i /home)" = "$(ctl stat -c %i /home)" ]
}

setup() {
    step "setup: rootfs, package layers, bridge, OneGate simulator, controller"
    find_product || return 1
    # shellcheck disable=SC2119  # no --fresh: reuse a cached rootfs
    bl_rootfs || return 1
    if [ "$SCALE_SERVICE" = ood ]; then build_layers ood || return 1; else
        # shellcheck disable=SC2119  # no argument: the slurm layer set
        build_layers || return 1
    fi
    bl_bridge_up || return 1
    start_sim || return 1
    if [ "$SCALE_SERVICE" = ood ]; then setup_ood || return 1; else setup_oneslurm || return 1; fi
    new_worker w0 || return 1
    boot_vms 300 ctl w0 || return 1
    check "controller READY" ready ctl
    check "w0 READY" ready w0
    FIRST_WORKER_IP=$NEXT_IP   # each size's workers take the addresses after it again
    wait_for 60 all_idle 1
    check "w0's node idle" all_idle 1 || return 1
    python3 "$HERE/scale_report.py" header > "$SCALE_RESULTS"
}

setup_oneslurm() {
    local -a settings
    read -r -a settings <<< "$(controller_settings)"
    SERVICE=$(sim POST /_sim/services "{\"name\":\"OneSlurm\",\"roles\":[
        {\"name\":\"controller\",\"cardinality\":1,\"cooldown_ms\":0},
        {\"name\":\"worker\",\"cardinality\":0,\"min_vms\":0,\"max_vms\":$((MAX_N + 2)),
         \"parents\":[\"controller\"],\"cooldown_ms\":0}]}" | jq -r .id)
    if [ -z "$SERVICE" ] || [ "$SERVICE" = null ]; then echo "cannot create the service"; return 1; fi
    new_slurm_vm ctl controller "${settings[@]}"
}

# The key server's socket, sampled every 0.5 s into FILE until the file STOP exists.
sample_socket() {
    local out=$1 stop=$2
    while [ ! -e "$stop" ]; do
        socket_prop NConnections >> "$out" 2>/dev/null
        sleep 0.5
    done
}

# Runs UNIT (a oneshot) on the controller once and prints its wall time in seconds.
cycle_time() {
    local t0
    t0=$(_bl_now)
    ctl systemctl start "$1" || { echo "$1 failed:" >&2; ctl journalctl -u "$1" -n 20 --no-pager -o cat >&2; }
    _bl_dt "$t0" "$(_bl_now)"
}

# One size: N workers join together, the cycles with N live nodes, the scale-down.
run_size() {
    local n=$1 dir=$BOOTLAB_DIR/logs/scale-$1 i name t0 t_idle cpu0 cpu1 acc0 ref0 stop timeout
    local rec ela t_starts bytes
    local -a shown
    step "N=$n: $n workers started together (w0 already idle)"
    mkdir -p "$dir"
    WORKERS=()
    for i in $(seq 1 "$n"); do
        name=w$n-$i
        new_worker "$name" || return 1
        WORKERS+=("$name")
    done
    sim DELETE /_sim/requests >/dev/null
    cpu0=$(slurmctld_cpu)
    acc0=$(socket_prop NAccepted) ref0=$(socket_prop NRefused)
    date +%s.%N > "$dir/t0"
    stop=$dir/stop-sampling; rm -f "$stop" "$dir/nconnections"
    sample_socket "$dir/nconnections" "$stop" 8>&- &   # not holding the lab's lock
    SAMPLER=$!
    t0=$(_bl_now)
    for name in "${WORKERS[@]}"; do bl_boot "$name" || { : > "$stop"; wait "$SAMPLER"; return 1; }; done
    t_starts=$(_bl_dt "$t0" "$(_bl_now)")
    say "all $n containers started in ${t_starts}s"
    timeout=$((300 + 6 * n))
    wait_for "$timeout" all_idle $((n + 1))
    t_idle=$(_bl_dt "$t0" "$(_bl_now)")
    : > "$stop"; wait "$SAMPLER"; SAMPLER=""   # not a bare wait: the containers are children too
    check "N=$n: all $n new nodes idle (${t_idle}s after the first start)" all_idle $((n + 1)) || {
        ctl sinfo -N -o '%N %t %E' | sed 's/^/    | /'
        for name in "${WORKERS[@]}"; do
            if ! configured "$name" || [ "$(configure_result "$name")" != success ]; then
                show_configure_log "$name" 15
            fi
        done
        return 1
    }
    cpu1=$(slurmctld_cpu)
    # A node is idle as soon as slurmd registers; its configure logs that a little later.
    local unfinished=0
    for name in "${WORKERS[@]}"; do
        wait_for 120 configured "$name" && [ "$(configure_result "$name")" = success ] ||
            unfinished=$((unfinished + 1))
    done
    check "N=$n: every worker's configure succeeded" eq "$unfinished" 0
    if [ "$SCALE_SERVICE" = ood ]; then
        for name in $(printf '%s\n' "${WORKERS[0]}" "${WORKERS[$((n - 1))]}" | sort -u); do
            check "N=$n: $name has the portal's users and the shared homes" ood_worker_ok "$name"
        done
    fi
    # What each worker's join logged, OneGate's log, the key server's instances.
    for name in "${WORKERS[@]}"; do
        cp "$BOOTLAB_DIR/run/$name.t0" "$dir/$name.t0"
        echo "${VMID[$name]}" > "$dir/$name.vmid"
        bl_journal "$name" -u one-hpc-configure.service -o json > "$dir/$name.json"
    done
    sim GET /_sim/requests > "$dir/requests.json"
    ctl journalctl --no-pager -o json --since "@$(cut -d. -f1 "$dir/t0")" \
        -u 'one-hpc-key-server@*' > "$dir/key-server.json"
    echo "${VMID[ctl]}" > "$dir/controller.vmid"
    rec=$(cycle_time oneslurm-reconcile.service)
    ela=$(cycle_time oneslurm-elastic.service)
    check "N=$n: the cycles left the $((n + 1)) nodes alone" eq "$(idle_count)" $((n + 1))
    submission_grows "$n"
    python3 "$HERE/scale_report.py" row "$dir" "$n" "$t_starts" "$t_idle" \
        "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN{printf "%.2f", b - a}')" \
        "$(( $(socket_prop NAccepted) - acc0 ))" "$(( $(socket_prop NRefused) - ref0 ))" \
        "$rec" "$ela" >> "$SCALE_RESULTS" || { check "N=$n: the report of this size" false; return 1; }
    mapfile -t shown < <(python3 "$HERE/scale_report.py" show "$SCALE_RESULTS" "$n")
    printf '    %s\n' "${shown[@]}"
    # A join the report cannot find (a log line it reads has changed) would leave it out.
    check "N=$n: the report found the $n joins in the workers' journals" eq \
        "$(printf '%s\n' "${shown[@]}" | awk '$1 == "joins" {print $2}')" "$n"
    # The cost of one join must not grow with N: its largest OneGate answer bytes stay within
    # a quarter of the first size's (a document of every VM would add ~140 bytes per VM).
    bytes=$(printf '%s\n' "${shown[@]}" | awk '$1 == "onegate_bytes_per_join_max" {print $2}')
    : "${FIRST_BYTES:=$bytes}"
    check "N=$n: one join's OneGate bytes do not grow with N ($bytes, first size $FIRST_BYTES)" \
        awk -v b="$bytes" -v f="$FIRST_BYTES" 'BEGIN { exit !(b != "" && b <= f * 1.25) }'
    scale_down "$n" "$dir"
}

# With the N + 1 nodes live, a job for one node more: the cycle its submission starts
# (job_submit.lua, oneslurm-elastic.path, as shipped) raises the role within 10 s. Submitted
# 5 s after the cycle run by hand, so that the figure is the cycle's, not its spacing (a
# submission right after a cycle waits up to 5 s more: ElasticCycleTest). The job is
# cancelled and the cardinality put back (the test does not play OneFlow here).
submission_grows() {
    local n=$1 job t0 t_kick want=$(( $1 + 2 ))
    sleep 5
    t0=$(_bl_now)
    job=$(ctl sbatch --parsable -N "$want" -o /dev/null --wrap true) ||
        { check "N=$n: sbatch of a $want-node job" false; return 1; }
    wait_for 30 cardinality_is "$want"
    t_kick=$(_bl_dt "$t0" "$(_bl_now)")
    check "N=$n: a job for $want nodes raised the role to $want (${t_kick}s after the submission)" cardinality_is "$want" || {
        say "job $job: $(ctl squeue -h -j "$job" -o '%T %r %D')"
        ctl journalctl -u oneslurm-elastic.service -n 12 --no-pager -o cat | sed 's/^/    | /'
    }
    check "N=$n: within 10 s of the submission" awk -v t="$t_kick" 'BEGIN { exit !(t <= 10) }'
    printf '# submission\tsize %s\tsubmitted_to_cardinality_s %s\n' "$n" "$t_kick" >> "$SCALE_RESULTS"
    ctl scancel "$job"
    sim POST "/_sim/services/$SERVICE/scale" "{\"role\":\"worker\",\"cardinality\":$((n + 1))}" >/dev/null
    wait_for 10 cardinality_is $((n + 1))
}

# Back to w0 alone: half powered off (self-drain), half killed and terminated (the
# reconciler removes them).
scale_down() {
    local n=$1 dir=$2 i name t0 half=$(( $1 / 2 ))
    step "N=$n: scale-down: $half powered off, $((n - half)) killed"
    t0=$(_bl_now)
    for i in $(seq 0 $((half - 1))); do
        name=${WORKERS[$i]}
        sim POST "/_sim/vms/${VMID[$name]}/terminate" '{}' >/dev/null
        bl_poweroff_signal "$name"
    done
    for i in $(seq "$half" $((n - 1))); do
        name=${WORKERS[$i]}
        kill -KILL "$(bl_leader "$name")" 2>/dev/null
        sim POST "/_sim/vms/${VMID[$name]}/terminate" '{"hard":true}' >/dev/null
    done
    for name in "${WORKERS[@]}"; do bl_wait_exit "$name" 120 >/dev/null; done
    say "all containers stopped ($(_bl_dt "$t0" "$(_bl_now)")s)"
    # The killed nodes: slurmctld marks them DOWN after SlurmdTimeout (60 s), then the
    # reconcile timer (every 60 s) deletes them.
    wait_for 300 only_w0
    check "N=$n: every node but w0's left Slurm ($(_bl_dt "$t0" "$(_bl_now)")s after the scale-down began)" only_w0 ||
        ctl sinfo -N -o '%N %t %E' | sed 's/^/    | /'
    check "N=$n: the worker role is back to 1" eq "$(cardinality)" 1
    for name in "${WORKERS[@]}"; do bl_unclone "$name"; done
    NEXT_IP=$FIRST_WORKER_IP
}

# A job for M nodes with w0 alone: the elastic cycle its submission starts (as shipped)
# raises the role to M within 10 s, the test boots the M - 1 VMs OneFlow would create, the job
# runs on M nodes.
elastic_grow() {
    local m=$1 job t0 t_card t_run i name timeout
    step "elastic: a job for $m nodes with 1 worker, the cycle started by its submission"
    t0=$(_bl_now)
    job=$(ctl sbatch --parsable -N "$m" -o /dev/null --wrap 'srun hostname; sleep 30') ||
        { echo "sbatch refused the job: $job"; return 1; }
    wait_for 150 cardinality_is "$m"
    t_card=$(_bl_dt "$t0" "$(_bl_now)")
    check "elastic: the cycle raised the worker role to $m (${t_card}s after the submission)" cardinality_is "$m" || {
        ctl journalctl -u oneslurm-elastic.service -n 20 --no-pager -o cat | sed 's/^/    | /'
        return 1
    }
    check "elastic: within 10 s of the submission" awk -v t="$t_card" 'BEGIN { exit !(t <= 10) }'
    WORKERS=()
    for i in $(seq 1 $((m - 1))); do
        name=e$m-$i
        new_worker "$name" || return 1
        WORKERS+=("$name")
    done
    for name in "${WORKERS[@]}"; do bl_boot "$name" || return 1; done
    timeout=$((300 + 6 * m))
    wait_for "$timeout" job_is "$job" RUNNING
    t_run=$(_bl_dt "$t0" "$(_bl_now)")
    check "elastic: the job runs on $m nodes (${t_run}s after the submission)" eq "$(ctl squeue -h -j "$job" -o '%D')" "$m"
    printf '# elastic\tsize %s\tsubmitted_to_cardinality_s %s\tsubmitted_to_running_s %s\n' \
        "$m" "$t_card" "$t_run" >> "$SCALE_RESULTS"
    timing "elastic: job for $m nodes submitted -> cardinality $m" "$t_card"
    timing "elastic: job for $m nodes submitted -> running" "$t_run"
}

scenario() {
    local n
    setup || return 1
    for n in "${SIZES[@]}"; do run_size "$n" || return 1; done
    [ "$SCALE_ELASTIC" = no ] || elastic_grow "$MAX_N"
}

scenario; rc=$?
[ "$rc" = 0 ] || { echo "  FAIL  scenario stopped early (status $rc, see above)"; FAIL=$((FAIL + 1)); }
[ -s "$SCALE_RESULTS" ] && echo "results: $SCALE_RESULTS"
lab_end poweroff_slurm_workers
