#!/bin/bash
# OneSlurm scenarios on real VMs (tests/vm/vm_lib.sh) beyond the smoke: the shipped image, the
# shipped units and timer schedule, a private bridge (10.79.2.0/24), the OneGate simulator,
# a CONTEXT CD per VM. Each check a PASS/FAIL line; in this order (issue 12's numbers):
#   4. OneGate failing (503, a hang past the client's timeout, a connection reset) during a
#      run of the shipped oneslurm-reconcile.service: the run changes nothing (the live worker
#      stays idle, no drain reason) and says why in its journal;
#   accounting (issue 17; the controller has ONEAPP_SLURM_ACCOUNTING_ENABLED=YES): a finished
#      job in sacct on the controller and on the worker;
#   5. the controller reboots: the same munge key, the job still in sacct, the node still
#      registered and idle, a job runs; then a worker reboots: it rejoins under the same name
#      and runs a job;
#   2. scale 1 -> 4 workers (3 booted together; wall time to all idle), then back to 1 by
#      graceful poweroffs with the reconcile timer stopped: each node leaves `sinfo` within
#      seconds, through oneslurm-self-drain alone.
# Scenarios 1 and 3 are in oneslurm_smoke_test.sh (make test).
#
# Label vm-scenarios: `make test-vm` runs it. Figures in
# $ONEHPC_BINARY_DIR/oneslurm_scenarios-results.txt. Exit 77 (skipped) as vm_lib.sh says.
# shellcheck disable=SC2317  # the predicates are called through wait_until
set -uo pipefail

# shellcheck source=SCRIPTDIR/vm_lib.sh
. "$(dirname "$0")/vm_lib.sh"
vm_begin oneslurm_scenarios

NET=10.79.2
declare -A wnode=()

vm_lab oneslurm "$NET"

ctl() { vm_ssh controller "$@"; }
state_of() { ctl "sinfo -h -N -n $1 -o %t" 2>/dev/null | head -n1; }
is_idle() { [ "$(state_of "$1")" = idle ]; }
is_gone() { ctl true 2>/dev/null && [ -z "$(ctl "sinfo -h -N -n $1 -o %N" 2>/dev/null)" ]; }
all_idle() { local w; for w in "$@"; do is_idle "${wnode[$w]}" || return 1; done; }
reason_of() { ctl "scontrol -o show node $1" 2>/dev/null | sed -n 's/.* Reason=\(.*\) \[.*/\1/p'; }
runs_on() {  # runs_on NODE: a one-node job runs there
    [ "$(ctl "timeout 100 srun -N1 -w $1 hostname -s" 2>/dev/null)" = "$1" ]
}
name_worker() { wnode[$1]=$(vm_host_name "$1"); }

vm_start controller oneslurm controller "$NET.11" 1536 "" ONEAPP_SLURM_ACCOUNTING_ENABLED=YES || vm_report
vm_start w1 oneslurm worker "$NET.21" 1536 "" || vm_report
name_worker w1
if wait_until 120 all_idle w1; then pass "w1: ${wnode[w1]} idle"; else fail "w1 idle" "$(ctl 'sinfo -N' 2>&1)"; vm_report; fi

# ---- accounting (ONEAPP_SLURM_ACCOUNTING_ENABLED=YES): a finished job in sacct -----------------
acct_state() { vm_ssh "$1" 'sacct -n -X -P -S 2020-01-01 --name=acct-vm -o State' 2>/dev/null | head -n1; }
acct_done() { [ "$(acct_state controller)" = COMPLETED ]; }
ctl 'timeout 100 srun -J acct-vm -N1 hostname -s' >/dev/null 2>&1
if wait_until 60 acct_done; then pass "accounting: the finished job acct-vm is COMPLETED in sacct on the controller"
else fail "accounting: acct-vm COMPLETED in sacct on the controller" "$(ctl 'systemctl status slurmdbd mariadb --no-pager; sacct -a' 2>&1 | tail -n 20)"; fi
if [ "$(acct_state w1)" = COMPLETED ]; then pass "accounting: sacct on the worker w1 shows it too"
else fail "accounting: sacct on the worker w1 shows acct-vm" "$(vm_ssh w1 'sacct -a' 2>&1 | tail -n 5)"; fi

# ---- 4. OneGate failing during a reconcile: nothing changes ---------------------------------------
ctl 'systemctl stop oneslurm-reconcile.timer' >/dev/null 2>&1   # only our runs, at known times
NO_CHANGE='no change this cycle|changing nothing'
for fault in '{"kind":"status","status":503,"body":"Service Unavailable"}' \
             '{"kind":"hang","delay_ms":40000}' \
             '{"kind":"reset"}'; do
    kind=$(json_get 'd["kind"]' <<<"$fault")
    sim DELETE /_sim/faults >/dev/null
    sim POST /_sim/faults "$(json_get 'json.dumps(dict(d, path_prefix="/service"))' <<<"$fault")" >/dev/null
    ctl 'journalctl --rotate >/dev/null 2>&1; systemctl reset-failed oneslurm-reconcile.service' >/dev/null 2>&1
    since=$(ctl 'date +%s')
    t0=$(now_ms)
    ctl 'systemctl start oneslurm-reconcile.service' >/dev/null 2>&1
    secs=$(secs_since_ms "$t0")
    journal=$(ctl "journalctl -u oneslurm-reconcile.service --since @$since -o cat --no-pager" 2>&1)
    st=$(state_of "${wnode[w1]}") reason=$(reason_of "${wnode[w1]}")
    if [ "$st" = idle ] && [ -z "$reason" ] && grep -qE "$NO_CHANGE" <<<"$journal"; then
        pass "OneGate fault '$kind' during a reconcile: nothing changed (${wnode[w1]} $st, ${secs} s): $(grep -E "$NO_CHANGE" <<<"$journal" | tail -n1)"
    else
        fail "OneGate fault '$kind' during a reconcile: nothing changed" "node $st reason '$reason' (${secs} s)
$(tail -n 12 <<<"$journal")"
    fi
    vm_result "reconcile_with_onegate_${kind}_seconds" "$secs"
done
sim DELETE /_sim/faults >/dev/null
ctl 'systemctl start oneslurm-reconcile.service' >/dev/null 2>&1
if [ "$(state_of "${wnode[w1]}")" = idle ]; then pass "after the faults a reconcile with OneGate back keeps ${wnode[w1]} idle"
else fail "after the faults a reconcile keeps ${wnode[w1]} idle" "$(ctl 'sinfo -N' 2>&1)"; fi
ctl 'systemctl start oneslurm-reconcile.timer' >/dev/null 2>&1

# ---- 5. reboots: the controller, then a worker ----------------------------------------------------
key_before=$(ctl 'sha256sum /etc/munge/munge.key' | cut -d' ' -f1)
log "rebooting the controller"
t0=$(now_ms)
ctl 'systemctl reboot' >/dev/null 2>&1
sleep 10
configured() {  # configured NAME: this boot's one-hpc-configure.service succeeded
    # one property per -P: systemctl prints several in its own order, not the one asked
    [ "$(vm_ssh "$1" 'systemctl show -P ActiveState one-hpc-configure.service; systemctl show -P Result one-hpc-configure.service' 2>/dev/null | paste -sd,)" = active,success ]
}
if wait_until 600 configured controller; then
    vm_result controller_reboot_to_configured_seconds "$(secs_since_ms "$t0")"
    pass "controller rebooted and configured again ($(secs_since_ms "$t0") s)"
else fail "controller rebooted and configured again" "$(tail -n 20 "$work/controller.console")"; fi
key_after=$(ctl 'sha256sum /etc/munge/munge.key' | cut -d' ' -f1)
if wait_until 60 acct_done; then pass "accounting: acct-vm is still in sacct after the controller's reboot"
else fail "accounting: acct-vm still in sacct after the controller's reboot" "$(ctl 'systemctl status slurmdbd mariadb --no-pager' 2>&1 | tail -n 20)"; fi
if [ -n "$key_before" ] && [ "$key_after" = "$key_before" ]; then pass "the controller keeps its munge key across the reboot"
else fail "the controller keeps its munge key across the reboot" "before $key_before, after $key_after"; fi
if wait_until 120 all_idle w1 && runs_on "${wnode[w1]}"; then
    pass "after the controller's reboot ${wnode[w1]} is registered, idle, and runs a job (${waited} s)"
else fail "after the controller's reboot ${wnode[w1]} is registered, idle, and runs a job" "$(ctl 'sinfo -N' 2>&1)"; fi

log "rebooting w1"
t0=$(now_ms)
vm_ssh w1 'systemctl reboot' >/dev/null 2>&1
sleep 10
if wait_until 600 configured w1 && [ "$(vm_ssh w1 'hostname -s')" = "${wnode[w1]}" ] &&
   wait_until 120 all_idle w1 && runs_on "${wnode[w1]}"; then
    vm_result worker_reboot_to_idle_seconds "$(secs_since_ms "$t0")"
    pass "w1 rebooted, rejoined as ${wnode[w1]} and runs a job ($(secs_since_ms "$t0") s)"
else fail "w1 rebooted, rejoined as ${wnode[w1]} and runs a job" "$(ctl 'sinfo -N' 2>&1)
$(tail -n 10 "$work/w1.console")"; fi

# ---- 2. scale 1 -> 4 -> 1 by graceful poweroff, self-drain alone --------------------------------
t0=$(now_ms)
for i in 2 3 4; do
    vm_new "w$i" oneslurm worker "$NET.2$i" || vm_report
    log "booting w$i (VM ${vm_id[w$i]})"
    vm_boot "w$i" 1536
done
ok=yes
for i in 2 3 4; do
    if why=$(vm_wait_ready "w$i" "$ready_timeout"); then name_worker "w$i"; else
        fail "w$i boots and publishes READY=YES" "$why"; ok=no
    fi
done
if [ "$ok" = yes ] && wait_until 180 all_idle w1 w2 w3 w4; then
    vm_result scale_1_to_4_seconds "$(secs_since_ms "$t0")"
    pass "scaled 1 -> 4: all 4 nodes idle $(secs_since_ms "$t0") s after the 3 new VMs started"
else fail "scaled 1 -> 4: all 4 nodes idle" "names: ${wnode[w1]:-?} ${wnode[w2]:-?} ${wnode[w3]:-?} ${wnode[w4]:-?}, waited ${waited:-?} s
$(ctl 'sinfo -N' 2>&1)"; vm_report; fi
out=$(ctl 'timeout 100 srun -N4 hostname -s' 2>&1 | sort | paste -sd' ')
if [ "$out" = "$(printf '%s\n' "${wnode[w1]}" "${wnode[w2]}" "${wnode[w3]}" "${wnode[w4]}" | sort | paste -sd' ')" ]; then
    pass "srun -N4 runs on the 4 nodes"
else fail "srun -N4 runs on the 4 nodes" "$out"; fi

ctl 'systemctl stop oneslurm-reconcile.timer' >/dev/null 2>&1
for i in 4 3 2; do
    w=w$i node=${wnode[w$i]}
    t0=$(now_ms)
    vm_ssh "$w" 'systemctl poweroff' >/dev/null 2>&1
    sim PUT "/_sim/vms/${vm_id[$w]}/state" '{"state":8,"lcm_state":0}' >/dev/null
    if wait_until 120 is_gone "$node"; then
        vm_result "${w}_poweroff_to_node_gone_seconds" "$(secs_since_ms "$t0")"
        pass "$w's poweroff: $node left sinfo through self-drain alone ($(secs_since_ms "$t0") s, reconcile timer stopped)"
    else fail "$w's poweroff: $node left sinfo through self-drain alone" "$(ctl 'sinfo -N' 2>&1)"; fi
    vm_wait_down "$w" 120 || fail "$w powers off within 120 s" "$(tail -n 10 "$work/$w.console")"
done
ctl 'systemctl start oneslurm-reconcile.timer' >/dev/null 2>&1
if [ "$(ctl 'sinfo -h -N -o %N' 2>/dev/null | paste -sd' ')" = "${wnode[w1]}" ]; then
    pass "back to 1 worker: sinfo shows only ${wnode[w1]}"
else fail "back to 1 worker: sinfo shows only ${wnode[w1]}" "$(ctl 'sinfo -N' 2>&1)"; fi
vm_report
