#!/bin/bash
# OneSlurm scenarios on real VMs (tests/vm/vm_lib.sh) beyond the smoke: the shipped image, the
# shipped units and timer schedule, a private bridge (10.79.2.0/24), the OneGate simulator
# modelling OneFlow, a CONTEXT CD per VM. The controller has accounting and elastic mode on
# (ONEAPP_SLURM_ELASTIC: workers 1..4, idle limit 60 s); the elastic cycle runs as the shipped
# oneslurm-elastic.service, started by the test (as its timer would; the path unit that starts it
# at each submission is stopped) so that each step is one
# cycle. The test plays OneFlow: it boots the VMs a raised cardinality asks for, and gives a VM
# terminated through OneGate the ACPI power button (qemu's system_powerdown), as OpenNebula's
# terminate does. Each check a PASS/FAIL line; in this order:
#   elastic: configure enabled oneslurm-elastic.timer; slurm.conf runs the shipped
#      health check and it passes on the worker;
#   accounting (ONEAPP_SLURM_ACCOUNTING_ENABLED=YES): a finished job in sacct on the
#      controller and on the worker;
#   4. OneGate failing (503, a hang past the client's timeout, a connection reset) during a
#      run of the shipped oneslurm-reconcile.service: the run changes nothing (the live worker
#      stays idle, no drain reason) and says why in its journal;
#   5. the controller reboots: the same munge key, the job still in sacct, the node still
#      registered and idle, a job runs; then a worker reboots: it rejoins under the same name
#      and runs a job;
#   2. scale 1 -> 4 workers by elastic mode: a job asking for 4 nodes pends, one cycle raises
#      the worker role's cardinality to 4, the 3 new VMs boot together and the job runs on
#      the 4 nodes (figure: job submitted to started, from sacct); srun -N4 runs;
#      then back to 1 with the reconcile timer stopped, each node leaving `sinfo` within
#      seconds through oneslurm-self-drain alone: with jobs running on w1 and w2, after the
#      idle limit one cycle drains w3 and w4 ("one-hpc elastic: idle"), the next terminates
#      exactly their VMs, they power off by ACPI; then w2, its job ended, by a plain
#      `systemctl poweroff`;
#   elastic health: the health check on a worker whose slurmd spool is full drains it with
#      "one-hpc health: disk: ..." and resumes it once there is room.
# Scenarios 1 and 3 are in oneslurm_smoke_test.sh (make test). (Elastic mode and the scenarios
# share their VMs: four boots fewer than a test of their own.)
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
full_state() { ctl "scontrol -o show node $1" 2>/dev/null | tr ' ' '\n' | sed -n 's/^State=//p'; }
job_state() { ctl "squeue -h -j $1 -o %T" 2>/dev/null; }
job_is() { [ "$(job_state "$1")" = "$2" ]; }
job_gone() { ctl true 2>/dev/null && [ -z "$(job_state "$1")" ]; }
worker_role() { sim GET "/_sim/services/$service_id" | json_get 'json.dumps([r for r in d["roles"] if r["name"] == "worker"][0])'; }
cardinality() { worker_role | json_get 'd["cardinality"]'; }
role_vms() { worker_role | json_get 'len(d["nodes"])'; }
terminated() { sim GET /_sim/terminations | json_get '" ".join(str(t["vm_id"]) for t in sorted(d, key=lambda t: t["vm_id"]))'; }
# One run of the shipped elastic unit; its log lines in $work/elastic.last.
elastic_now() {
    # shellcheck disable=SC2016  # expanded on the controller
    ctl 'n=$(journalctl -u oneslurm-elastic.service -o cat --no-pager | wc -l); systemctl start oneslurm-elastic.service; journalctl -u oneslurm-elastic.service -o cat --no-pager | tail -n +$((n + 1))' \
        > "$work/elastic.last" 2>&1
    sed 's/^/    | /' "$work/elastic.last"
}

vm_start controller oneslurm controller "$NET.11" 1536 "" ONEAPP_SLURM_ACCOUNTING_ENABLED=YES \
    ONEAPP_SLURM_ELASTIC=YES ONEAPP_SLURM_ELASTIC_MIN_NODES=1 ONEAPP_SLURM_ELASTIC_MAX_NODES=4 \
    ONEAPP_SLURM_ELASTIC_IDLE_SECONDS=60 || vm_report
vm_start w1 oneslurm worker "$NET.21" 1536 "" || vm_report
name_worker w1
if wait_until 120 all_idle w1; then pass "w1: ${wnode[w1]} idle"; else fail "w1 idle" "$(ctl 'sinfo -N' 2>&1)"; vm_report; fi

# ---- elastic mode on: the timer, the health check -------------------------------------------------
if [ "$(ctl 'systemctl is-enabled oneslurm-elastic.timer' 2>&1)" = enabled ]; then
    pass "configure enabled oneslurm-elastic.timer"
else fail "configure enabled oneslurm-elastic.timer" "$(ctl 'systemctl status oneslurm-elastic.timer' 2>&1)"; fi
# From here each cycle runs when the test says (elastic_now).
ctl 'systemctl stop oneslurm-elastic.timer oneslurm-elastic.path' >/dev/null 2>&1
out=$(vm_ssh w1 '/usr/libexec/one-hpc/slurm-health-check; echo "exit=$?"' 2>&1)
if grep -q '^exit=0$' <<<"$out" && [ "$(ctl 'scontrol show config' 2>/dev/null | sed -n 's/^HealthCheckProgram *= *//p')" = /usr/libexec/one-hpc/slurm-health-check ]; then
    pass "slurm.conf runs the shipped health check, and it passes on w1: $(grep -c '^ok' <<<"$out") checks ok"
else fail "the shipped health check runs and passes on w1" "$out"; fi

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
ctl 'systemctl stop oneslurm-elastic.timer oneslurm-elastic.path' >/dev/null 2>&1   # back at boot; cycles stay the test's
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

# ---- 2. scale 1 -> 4 by elastic mode: a job asking for 4 nodes ----------------------------------
t0=$(now_ms)
job=$(ctl "sbatch --parsable -N4 -o /dev/null --wrap 'srun hostname; sleep 20'" 2>&1)
sleep 3
log "job $job pends for: $(ctl "squeue -h -j $job -o %r" 2>&1)"
elastic_now
if [ "$(cardinality)" = 4 ]; then pass "one elastic cycle raised the worker role's cardinality to 4 ($(grep -o 'grow role.*' "$work/elastic.last" | head -n1))"
else fail "one elastic cycle raised the worker role's cardinality to 4" "cardinality $(cardinality); $(cat "$work/elastic.last")"; vm_report; fi
for i in 2 3 4; do
    vm_new "w$i" oneslurm worker "$NET.2$i" || vm_report
    log "OneFlow creates w$i (VM ${vm_id[w$i]})"
    vm_boot "w$i" 1536
done
# The job starts when the 4th node registers, which may be before the last VM publishes READY
# (and it may have ended by then): its state and times come from accounting.
acct_job() { ctl "sacct -n -X -P -j $job -o State,NNodes,Submit,Start" 2>/dev/null | head -n1; }
job_started() { case $(acct_job | cut -d'|' -f1) in RUNNING|COMPLETED) return 0;; *) return 1;; esac; }
wait_until "$ready_timeout" job_started
IFS='|' read -r jstate jnodes jsubmit jstart <<<"$(acct_job)"
ok=yes
for i in 2 3 4; do
    if why=$(vm_wait_ready "w$i" "$ready_timeout"); then name_worker "w$i"; else
        fail "w$i boots and publishes READY=YES" "$why"; ok=no
    fi
done
if [ "$ok" = yes ] && [[ $jstate == @(RUNNING|COMPLETED) ]] && [ "$jnodes" = 4 ]; then
    secs=$(( $(date -d "$jstart" +%s) - $(date -d "$jsubmit" +%s) ))
    vm_result scale_1_to_4_seconds "$secs"
    pass "scaled 1 -> 4: job $job ran on $jnodes nodes, started $secs s after it was submitted (3 new VMs booted together; sacct: $jstate, $jsubmit -> $jstart)"
else fail "scaled 1 -> 4: job $job runs on the 4 nodes" "sacct: '$jstate|$jnodes|$jsubmit|$jstart'; names: ${wnode[w1]:-?} ${wnode[w2]:-?} ${wnode[w3]:-?} ${wnode[w4]:-?}
$(ctl "squeue -j $job -o '%T %r'; sinfo -N" 2>&1)"; vm_report; fi
wait_until 120 job_gone "$job" || fail "job $job ends" "$(ctl "squeue -j $job" 2>&1)"
out=$(ctl 'timeout 100 srun -N4 hostname -s' 2>&1 | sort | paste -sd' ')
if [ "$out" = "$(printf '%s\n' "${wnode[w1]}" "${wnode[w2]}" "${wnode[w3]}" "${wnode[w4]}" | sort | paste -sd' ')" ]; then
    pass "srun -N4 runs on the 4 nodes"
else fail "srun -N4 runs on the 4 nodes" "$out"; fi

# ---- 2. back to 1: elastic mode shrinks the idle ones, then a plain poweroff; self-drain alone ---
ctl 'systemctl stop oneslurm-reconcile.timer' >/dev/null 2>&1
keep1=$(ctl "sbatch --parsable -w ${wnode[w1]} -o /dev/null --wrap 'sleep 900'" 2>&1)
keep2=$(ctl "sbatch --parsable -w ${wnode[w2]} -o /dev/null --wrap 'sleep 900'" 2>&1)
wait_until 60 job_is "$keep1" RUNNING || fail "job $keep1 runs on ${wnode[w1]}" "$(ctl "squeue -j $keep1" 2>&1)"
wait_until 60 job_is "$keep2" RUNNING || fail "job $keep2 runs on ${wnode[w2]}" "$(ctl "squeue -j $keep2" 2>&1)"
log "waiting for the idle limit (60 s since the last job of w3 and w4)"
sleep 62
elastic_now
ok=yes
for w in w3 w4; do
    st=$(full_state "${wnode[$w]}"); reason=$(reason_of "${wnode[$w]}")
    if [[ $st != *DRAIN* ]] || [ "$reason" != "one-hpc elastic: idle" ]; then
        ok=no; fail "$w drained by the elastic cycle" "State=$st Reason=$reason"
    fi
done
for w in w1 w2; do
    [[ $(full_state "${wnode[$w]}") != *DRAIN* ]] || { ok=no; fail "$w (running a job) is not drained" "$(full_state "${wnode[$w]}")"; }
done
[ "$ok" = yes ] && pass "idle limit: ${wnode[w3]} and ${wnode[w4]} drained with 'one-hpc elastic: idle', ${wnode[w1]} and ${wnode[w2]} (jobs $keep1, $keep2) not"
t0=$(now_ms)
elastic_now
want=$(printf '%s\n' "${vm_id[w3]}" "${vm_id[w4]}" | sort -n | paste -sd' ')
if [ "$(terminated)" = "$want" ]; then pass "the next cycle terminated exactly VMs $want (w3, w4) through OneGate"
else fail "the next cycle terminated exactly VMs $want" "terminated: '$(terminated)'; $(cat "$work/elastic.last")"; fi
for w in w3 w4; do vm_monitor "$w" system_powerdown >/dev/null; done
for w in w3 w4; do
    if wait_until 120 is_gone "${wnode[$w]}"; then
        vm_result "${w}_terminate_to_node_gone_seconds" "$(secs_since_ms "$t0")"
        pass "$w (terminated, ACPI poweroff): ${wnode[$w]} left sinfo through self-drain alone ($(secs_since_ms "$t0") s after the terminate, reconcile timer stopped)"
    else fail "$w: ${wnode[$w]} left sinfo through self-drain alone" "$(ctl 'sinfo -N' 2>&1)"; fi
    vm_wait_down "$w" 120 || fail "$w powers off within 120 s" "$(tail -n 10 "$work/$w.console")"
done
if [ "$(cardinality)/$(role_vms)" = 2/2 ]; then pass "OneFlow's watchdog lowered the worker role to 2 VMs"
else fail "the worker role is down to 2 VMs" "cardinality $(cardinality), VMs $(role_vms)"; fi
if job_is "$keep1" RUNNING && job_is "$keep2" RUNNING; then pass "jobs $keep1 and $keep2 still run on ${wnode[w1]} and ${wnode[w2]}"
else fail "jobs $keep1 and $keep2 still run" "$(job_state "$keep1") $(job_state "$keep2")"; fi

ctl "scancel $keep2" >/dev/null 2>&1
wait_until 60 is_idle "${wnode[w2]}" >/dev/null
w=w2 node=${wnode[w2]}
t0=$(now_ms)
vm_ssh "$w" 'systemctl poweroff' >/dev/null 2>&1
sim PUT "/_sim/vms/${vm_id[$w]}/state" '{"state":8,"lcm_state":0}' >/dev/null
if wait_until 120 is_gone "$node"; then
    vm_result "${w}_poweroff_to_node_gone_seconds" "$(secs_since_ms "$t0")"
    pass "$w's poweroff: $node left sinfo through self-drain alone ($(secs_since_ms "$t0") s, reconcile timer stopped)"
else fail "$w's poweroff: $node left sinfo through self-drain alone" "$(ctl 'sinfo -N' 2>&1)"; fi
vm_wait_down "$w" 120 || fail "$w powers off within 120 s" "$(tail -n 10 "$work/$w.console")"
ctl 'systemctl start oneslurm-reconcile.timer' >/dev/null 2>&1
if [ "$(ctl 'sinfo -h -N -o %N' 2>/dev/null | paste -sd' ')" = "${wnode[w1]}" ]; then
    pass "back to 1 worker: sinfo shows only ${wnode[w1]}"
else fail "back to 1 worker: sinfo shows only ${wnode[w1]}" "$(ctl 'sinfo -N' 2>&1)"; fi

# ---- elastic health: a worker whose slurmd spool is full is drained naming the check, resumed ----
ctl "scancel $keep1" >/dev/null 2>&1
wait_until 60 is_idle "${wnode[w1]}" >/dev/null
# A 1 MiB tmpfs on the spool with the spool's files (conf-cache among them: Slurm's commands on
# a worker read their slurm.conf there), filled; then the shipped link, as slurmd runs it.
vm_ssh w1 'cp -a /var/lib/slurm/slurmd /var/tmp/spool-copy && mount -t tmpfs -o size=1m full /var/lib/slurm/slurmd &&
    cp -a /var/tmp/spool-copy/. /var/lib/slurm/slurmd/ && { dd if=/dev/zero of=/var/lib/slurm/slurmd/fill bs=64k count=64 2>/dev/null; true; } &&
    /usr/libexec/one-hpc/slurm-health-check' > "$work/health.out" 2>&1
st=$(full_state "${wnode[w1]}"); reason=$(reason_of "${wnode[w1]}")
if [[ $st == *DRAIN* ]] && [[ $reason == "one-hpc health: disk: /var/lib/slurm/slurmd is 100% full"* ]]; then
    pass "a full spool: the health check drained ${wnode[w1]} with '$reason'"
else fail "a full spool: the health check drains ${wnode[w1]} naming the check" "State=$st Reason=$reason
$(cat "$work/health.out")"; fi
vm_ssh w1 'umount /var/lib/slurm/slurmd && /usr/libexec/one-hpc/slurm-health-check' > "$work/health.out" 2>&1
if [[ $(full_state "${wnode[w1]}") != *DRAIN* ]]; then pass "room again: the health check resumed ${wnode[w1]}"
else fail "room again: the health check resumes ${wnode[w1]}" "$(full_state "${wnode[w1]}") $(cat "$work/health.out")"; fi
vm_report
