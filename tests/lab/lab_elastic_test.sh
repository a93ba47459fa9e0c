#!/bin/bash
# lab_elastic_test.sh - elastic mode (ONEAPP_SLURM_ELASTIC=YES) on booted "VMs": a OneSlurm
# controller and its workers as systemd-nspawn containers of the package layer, the OneGate
# simulator (10.78.0.1:5030) modelling OneFlow. The test plays OneFlow's provisioning: when
# the role's cardinality rises above its VMs it creates the new VMs and boots them; when a VM
# is terminated through OneGate it powers that container off (what OneFlow's terminate does:
# an ACPI poweroff, so the worker's self-drain runs). The cycle runs as the real unit
# (oneslurm-elastic.service): in phase 2 started by oneslurm-elastic.path when slurmctld's
# job_submit.lua kicks it, then by hand, as its timer would start it.
#
#   1  a controller (elastic mode, workers 1..3, idle limit 60 s) and 1 worker come up;
#      oneslurm-elastic.timer and oneslurm-elastic.path are enabled by configure, slurm.conf
#      loads one-hpc's job_submit.lua;
#   2  a job asking for 3 nodes is submitted; with no cycle started by the test, the worker
#      role's cardinality is 3 in OneGate within 10 s (figure: submitted to cardinality raised);
#      `one-hpc status` on the controller shows the last cycle's decision; the two new workers
#      boot and the job runs on 3 nodes (figure: job submitted to job running);
#   3  a job runs on the first worker; after the idle limit the next cycle drains the two
#      others with "one-hpc elastic: idle", the cycle after terminates exactly their VMs; their
#      nodes leave Slurm, the role's cardinality is 1 again and the job is still running;
#   4  the health check (slurm.conf's HealthCheckProgram, the link one-hpc ships) on a worker
#      whose slurmd spool is full drains it with "one-hpc health: disk: ..." and resumes it
#      once the spool has room again.
#
# Exit status: 0 all checks passed, 1 a check failed, 77 skipped (not root, or the host lacks
# what systemd-nspawn needs). Environment: as lab_smoke_test.sh.

set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: the lab boots containers and needs root (run it with sudo)"; exit 77
fi
OWN_LAB_DIR=yes; [ -n "${BOOTLAB_DIR:-}" ] && OWN_LAB_DIR=no
# shellcheck source-path=SCRIPTDIR source=bootlab.sh
. "$HERE/bootlab.sh"
# shellcheck source-path=SCRIPTDIR source=lab_lib.sh
. "$HERE/lab_lib.sh"
lab_begin lab_elastic_test
echo "lab directory: $BOOTLAB_DIR   cache: $BOOTLAB_CACHE"

SIM_URL="http://$BOOTLAB_NET.1:5030"
# shellcheck disable=SC2034  # IP: written by new_slurm_vm
declare -A VMID=() IP=()
SERVICE=""
NEXT_IP=10
# new_slurm_vm, node, ctl: lab_lib.sh.
# shellcheck disable=SC2317  # invoked through wait_for
cardinality_is() { [ "$(cardinality)" = "$1" ]; }
# shellcheck disable=SC2317  # invoked through wait_for
cycle_finished() { [ "$(ctl systemctl is-active oneslurm-elastic.service)" != activating ]; }
cardinality() { sim GET "/_sim/services/$SERVICE" | jq -r '.roles[] | select(.name == "worker") | .cardinality'; }
role_vms() { sim GET "/_sim/services/$SERVICE" | jq -r '.roles[] | select(.name == "worker") | .nodes | length'; }
terminated() { sim GET /_sim/terminations | jq -r '.[].vm_id' | sort -n | paste -sd' '; }
# shellcheck disable=SC2317  # invoked through job_is
job_state() { ctl squeue -h -j "$1" -o '%T' 2>/dev/null; }
# shellcheck disable=SC2317  # invoked through wait_for
job_is() { [ "$(job_state "$1")" = "$2" ]; }
# shellcheck disable=SC2317  # invoked through wait_for
registered() { ctl scontrol -o show node "$1" 2>/dev/null | grep -q "^NodeName=$1 "; }
# shellcheck disable=SC2317  # invoked through wait_for
not_registered() { ! registered "$1"; }
# shellcheck disable=SC2317  # invoked through wait_for
job_gone() { [ -z "$(ctl squeue -h -j "$1" 2>/dev/null)" ]; }
# shellcheck disable=SC2317  # invoked through wait_for
idle_node() { ctl sinfo -h -N -n "$1" -o '%t' 2>/dev/null | grep -qx idle; }
node_reason() { ctl scontrol show node "$1" 2>/dev/null | sed -n 's/^ *Reason=\(.*\) \[.*/\1/p'; }
node_state() { ctl scontrol -o show node "$1" 2>/dev/null | tr ' ' '\n' | sed -n 's/^State=//p'; }

# Runs oneslurm-elastic.service once (the real unit, as its timer would) and prints its log.
elastic_now() {
    local before
    before=$(ctl journalctl -u oneslurm-elastic.service -o cat --no-pager | wc -l)
    ctl systemctl start oneslurm-elastic.service
    ctl journalctl -u oneslurm-elastic.service -o cat --no-pager | tail -n +"$((before + 1))" |
        grep -v '^Start\|^Finished\|^oneslurm-elastic.service: Deactivated' > "$BOOTLAB_DIR/logs/elastic.last"
    sed 's/^/    | /' "$BOOTLAB_DIR/logs/elastic.last"
}

setup() {
    step "setup: rootfs, package layers, bridge, OneGate simulator"
    find_product || return 1
    # shellcheck disable=SC2119  # no --fresh: reuse a cached rootfs
    bl_rootfs || return 1
    # shellcheck disable=SC2119  # no argument: the slurm layer set
    build_layers || return 1
    bl_bridge_up || return
    start_sim || return 1
    SERVICE=$(sim POST /_sim/services '{"name":"OneSlurm","roles":[
        {"name":"controller","cardinality":1,"cooldown_ms":0},
        {"name":"worker","cardinality":1,"min_vms":1,"max_vms":3,"parents":["controller"],
         "cooldown_ms":0}]}' | jq -r .id)
    if [ -z "$SERVICE" ] || [ "$SERVICE" = null ]; then echo "cannot create the service"; return 1; fi
}

phase1_up() {
    step "1. a controller in elastic mode (1..3 workers) and 1 worker"
    new_slurm_vm ctl controller ONEAPP_SLURM_ELASTIC=YES ONEAPP_SLURM_ELASTIC_MIN_NODES=1 \
        ONEAPP_SLURM_ELASTIC_MAX_NODES=3 ONEAPP_SLURM_ELASTIC_IDLE_SECONDS=60 || return 1
    new_slurm_vm w1 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 || return 1
    boot_vms 240 ctl w1 || return 1
    check "controller READY" ready ctl
    check "w1 READY" ready w1
    check "configure enabled oneslurm-elastic.timer" eq "$(ctl systemctl is-enabled oneslurm-elastic.timer)" enabled
    check "configure enabled and started oneslurm-elastic.path" eq "$(ctl systemctl is-enabled oneslurm-elastic.path) $(ctl systemctl is-active oneslurm-elastic.path)" "enabled active"
    check "slurmctld loads one-hpc's job_submit.lua" eq "$(ctl scontrol show config | sed -n 's/^JobSubmitPlugins *= *//p')" lua
    # Phase 2's cycle comes from the path unit; the timer's are left out of the test.
    ctl systemctl stop oneslurm-elastic.timer oneslurm-reconcile.timer
    wait_for 30 idle_node "$(node w1)"
    check "$(node w1) idle" idle_node "$(node w1)"
}

phase2_grow() {
    local job t0 n listed
    step "2. a job asking for 3 nodes grows the worker role from 1 to 3"
    before=$(ctl journalctl -u oneslurm-elastic.service -o cat --no-pager | wc -l)
    t0=$(_bl_now)
    job=$(ctl sbatch --parsable -N3 -o /dev/null --wrap 'srun hostname; sleep 20') ||
        { echo "sbatch refused the job: $job"; return 1; }
    # No cycle started here: job_submit.lua kicks oneslurm-elastic.path.
    wait_for 10 cardinality_is 3
    check "submitting the job raised the worker role's cardinality to 3 within 10 s" eq "$(cardinality)" 3
    timing "2: job submitted -> cardinality raised (path unit)" "$(_bl_dt "$t0" "$(_bl_now)")"
    say "job $job pends for: $(ctl squeue -h -j "$job" -o '%r')"
    wait_for 10 cycle_finished
    ctl journalctl -u oneslurm-elastic.service -o cat --no-pager | tail -n +"$((before + 1))" |
        grep -v '^Start\|^Finished\|^oneslurm-elastic.service: Deactivated' > "$BOOTLAB_DIR/logs/elastic.last"
    sed 's/^/    | /' "$BOOTLAB_DIR/logs/elastic.last"
    check "the decision is logged with its reason" grep -qF "grow role worker to 3 VMs: 1 job(s) ($job) wait for 3 node(s)" "$BOOTLAB_DIR/logs/elastic.last"
    check "the cycle consumed the kick" eq "$(ctl test -e /run/one-hpc-elastic/kick && echo left)" ""
    # (the timer's cycle may have run since: which decision status shows is not checked here)
    ctl one-hpc status > "$BOOTLAB_DIR/logs/status.elastic" 2>&1
    sed -n '/^elastic mode/,/^$/s/^/    | /p' "$BOOTLAB_DIR/logs/status.elastic"
    check "one-hpc status shows the last elastic cycle's decision" grep -q "^elastic mode: the last cycle's decision, the same since 20[0-9-]*T[0-9:]*Z:$" "$BOOTLAB_DIR/logs/status.elastic"
    # OneFlow creates the two VMs, with the controller's VM id as the service template wires it
    # (it resolves ${controller.vm.id}; w1 above has no such value: the role's list); they boot.
    new_slurm_vm w2 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 "ONEAPP_SLURM_CONTROLLER_VM_ID=${VMID[ctl]}" || return 1
    new_slurm_vm w3 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 "ONEAPP_SLURM_CONTROLLER_VM_ID=${VMID[ctl]}" || return 1
    boot_vms 240 w2 w3 || return 1
    # A first boot's join reads one VM, not the service's list, and erases nothing it never
    # published (READY, ERROR); w1, unwired, read the list (what the query would see).
    for n in w1 w2 w3; do
        listed=$(sim GET /_sim/requests | jq --argjson v "${VMID[$n]}" '[.[] | select(.vm_id == $v) |
            select((.method == "GET" and .path == "/service") or (.method == "PUT" and (.body | test("type=2"))))] | length')
        if [ "$n" = w1 ]; then
            check "w1 (no wiring) read the role's list: GET /service" awk -v c="$listed" 'BEGIN { exit !(c >= 1) }'
        else
            check "$n read the controller's VM alone: no GET /service, no erase" eq "$listed" 0
        fi
    done
    wait_for 60 job_is "$job" RUNNING
    check "job $job runs on 3 nodes ($(ctl squeue -h -j "$job" -o '%N'))" eq "$(ctl squeue -h -j "$job" -o '%D')" 3
    timing "2: job submitted -> running on 2 new workers" "$(_bl_dt "$t0" "$(_bl_now)")"
    wait_for 60 job_gone "$job"
    for n in w2 w3; do check "$n READY" ready "$n"; done
}

phase3_shrink() {
    local keep t0 n gone
    step "3. idle workers drained, then exactly their VMs terminated, while a job runs on w1"
    # The cycles below are started by hand, one at a time.
    ctl systemctl stop oneslurm-elastic.path
    keep=$(ctl sbatch --parsable -w "$(node w1)" -o /dev/null --wrap 'sleep 600')
    wait_for 30 job_is "$keep" RUNNING
    check "job $keep runs on $(node w1)" job_is "$keep" RUNNING
    say "waiting for the idle limit (60 s since w2's and w3's last job)"
    sleep 62
    elastic_now
    for n in w2 w3; do
        check "$(node "$n") drained by the cycle" contains "$(node_state "$(node "$n")")" DRAIN
        check "$(node "$n")'s reason" eq "$(node_reason "$(node "$n")")" "one-hpc elastic: idle"
    done
    check "$(node w1) (running a job) not drained" lacks "$(node_state "$(node w1)")" DRAIN
    check "no VM terminated yet" eq "$(terminated)" ""
    t0=$(_bl_now)
    elastic_now
    check "the cycle terminated exactly w2's and w3's VMs" eq "$(terminated)" "$(printf '%s\n' "${VMID[w2]}" "${VMID[w3]}" | sort -n | paste -sd' ')"
    # OneFlow powers the terminated VMs off (ACPI): their self-drain runs.
    for n in w2 w3; do bl_poweroff "$n" 60 >/dev/null; done
    for n in w2 w3; do
        wait_for 20 not_registered "$(node "$n")"; gone=$?
        check "$(node "$n") left Slurm" eq "$gone" 0
    done
    timing "3: terminate -> nodes gone (2 workers)" "$(_bl_dt "$t0" "$(_bl_now)")"
    check "OneFlow's watchdog lowered the role to 1" eq "$(cardinality)/$(role_vms)" 1/1
    check "job $keep still running on $(node w1)" job_is "$keep" RUNNING
    ctl scancel "$keep"
    for n in w2 w3; do bl_unclone "$n"; done
}

phase4_health() {
    local w1n
    step "4. the health check drains a worker whose slurmd spool is full, and resumes it"
    w1n=$(node w1)
    wait_for 30 idle_node "$w1n"
    check "slurm.conf runs the shipped health check" contains "$(ctl scontrol show config | grep HealthCheckProgram)" /usr/libexec/one-hpc/slurm-health-check
    # A full spool: a 1 MiB tmpfs on it with the spool's files (among them conf-cache, where
    # /run/slurm/conf points: Slurm's commands on a worker read their slurm.conf there), filled.
    bl_exec w1 cp -a /var/lib/slurm/slurmd /var/tmp/lab-spool
    bl_exec w1 mount -t tmpfs -o size=1m lab-full /var/lib/slurm/slurmd
    bl_exec w1 cp -a /var/tmp/lab-spool/. /var/lib/slurm/slurmd/
    bl_exec w1 dd if=/dev/zero of=/var/lib/slurm/slurmd/fill bs=64k count=64 >/dev/null 2>&1
    bl_exec w1 /usr/libexec/one-hpc/slurm-health-check | sed 's/^/    | /'
    check "$w1n drained by its health check" contains "$(node_state "$w1n")" DRAIN
    check "the reason names the check" contains "$(node_reason "$w1n")" "one-hpc health: disk: /var/lib/slurm/slurmd is 100% full"
    bl_exec w1 umount /var/lib/slurm/slurmd
    bl_exec w1 /usr/libexec/one-hpc/slurm-health-check | sed 's/^/    | /'
    check "$w1n resumed once the check passes" lacks "$(node_state "$w1n")" DRAIN
}

scenario() {
    setup || return 1
    phase1_up || return 1
    phase2_grow || return 1
    phase3_shrink || return 1
    phase4_health || return 1
}

scenario; rc=$?
[ "$rc" = 0 ] || { echo "  FAIL  scenario stopped early (status $rc, see above)"; FAIL=$((FAIL + 1)); }
lab_end poweroff_slurm_workers
