#!/bin/bash
# Elastic mode (issue 16) on real VMs (tests/vm/vm_lib.sh): the OneSlurm image, a private bridge
# (10.79.3.0/24), the OneGate simulator modelling OneFlow, a CONTEXT CD per VM. The controller
# has ONEAPP_SLURM_ELASTIC=YES (workers 1..3, idle limit 60 s); the cycle runs as the shipped
# oneslurm-elastic.service, started by hand (as its timer would) so that each step is one
# cycle. The test plays OneFlow: it boots the VMs the raised cardinality asks for, and gives
# a VM terminated through OneGate the ACPI power button (qemu's system_powerdown), as
# OpenNebula's terminate does. Checks, each a PASS/FAIL line:
#   - configure enabled oneslurm-elastic.timer; slurm.conf runs the shipped health check and
#     it passes on a worker;
#   - a job asking for 3 nodes pends; one cycle raises the worker role's cardinality to 3; the
#     two new VMs boot and the job runs on 3 nodes (figure: job submitted to job running);
#   - with a job running on the first worker, after the idle limit one cycle drains the two
#     others ("one-hpc elastic: idle"), the next terminates exactly their VMs; they power off,
#     their nodes leave Slurm through self-drain, the role is back to 1, the job still runs;
#   - the health check on a worker whose slurmd spool is full drains it with
#     "one-hpc health: disk: ..." and resumes it once there is room.
#
# Label vm-scenarios: `make test-vm` runs it. Figures in
# $ONEHPC_BINARY_DIR/oneslurm_elastic-results.txt. Exit 77 (skipped) as vm_lib.sh says.
# shellcheck disable=SC2317  # the predicates are called through wait_until
set -uo pipefail

# shellcheck source=SCRIPTDIR/vm_lib.sh
. "$(dirname "$0")/vm_lib.sh"
vm_begin oneslurm_elastic

NET=10.79.3
declare -A wnode=()

vm_lab oneslurm "$NET"

ctl() { vm_ssh controller "$@"; }
state_of() { ctl "sinfo -h -N -n $1 -o %t" 2>/dev/null | head -n1; }
is_idle() { [ "$(state_of "$1")" = idle ]; }
is_gone() { ctl true 2>/dev/null && [ -z "$(ctl "sinfo -h -N -n $1 -o %N" 2>/dev/null)" ]; }
full_state() { ctl "scontrol -o show node $1" 2>/dev/null | tr ' ' '\n' | sed -n 's/^State=//p'; }
reason_of() { ctl "scontrol -o show node $1" 2>/dev/null | sed -n 's/.* Reason=\(.*\) \[.*/\1/p'; }
job_state() { ctl "squeue -h -j $1 -o %T" 2>/dev/null; }
job_is() { [ "$(job_state "$1")" = "$2" ]; }
job_gone() { ctl true 2>/dev/null && [ -z "$(job_state "$1")" ]; }
worker_role() { sim GET "/_sim/services/$service_id" | json_get 'json.dumps([r for r in d["roles"] if r["name"] == "worker"][0])'; }
cardinality() { worker_role | json_get 'd["cardinality"]'; }
role_vms() { worker_role | json_get 'len(d["nodes"])'; }
terminated() { sim GET /_sim/terminations | json_get '" ".join(str(t["vm_id"]) for t in sorted(d, key=lambda t: t["vm_id"]))'; }
name_worker() { wnode[$1]=$(vm_host_name "$1"); }
# One run of the shipped unit; its log lines in $work/elastic.last.
elastic_now() {
    # shellcheck disable=SC2016  # expanded on the controller
    ctl 'n=$(journalctl -u oneslurm-elastic.service -o cat --no-pager | wc -l); systemctl start oneslurm-elastic.service; journalctl -u oneslurm-elastic.service -o cat --no-pager | tail -n +$((n + 1))' \
        > "$work/elastic.last" 2>&1
    sed 's/^/    | /' "$work/elastic.last"
}

vm_start controller oneslurm controller "$NET.11" 1536 "" ONEAPP_SLURM_ELASTIC=YES \
    ONEAPP_SLURM_ELASTIC_MIN_NODES=1 ONEAPP_SLURM_ELASTIC_MAX_NODES=3 \
    ONEAPP_SLURM_ELASTIC_IDLE_SECONDS=60 || vm_report
vm_start w1 oneslurm worker "$NET.21" 1536 "" || vm_report
name_worker w1
if wait_until 120 is_idle "${wnode[w1]}"; then pass "w1: ${wnode[w1]} idle"; else fail "w1 idle" "$(ctl 'sinfo -N' 2>&1)"; vm_report; fi
if [ "$(ctl 'systemctl is-enabled oneslurm-elastic.timer' 2>&1)" = enabled ]; then
    pass "configure enabled oneslurm-elastic.timer"
else fail "configure enabled oneslurm-elastic.timer" "$(ctl 'systemctl status oneslurm-elastic.timer' 2>&1)"; fi
ctl 'systemctl stop oneslurm-elastic.timer oneslurm-reconcile.timer' >/dev/null 2>&1
out=$(vm_ssh w1 '/usr/libexec/one-hpc/slurm-health-check; echo "exit=$?"' 2>&1)
if grep -q '^exit=0$' <<<"$out" && [ "$(ctl 'scontrol show config' 2>/dev/null | sed -n 's/^HealthCheckProgram *= *//p')" = /usr/libexec/one-hpc/slurm-health-check ]; then
    pass "slurm.conf runs the shipped health check, and it passes on w1: $(grep -c '^ok' <<<"$out") checks ok"
else fail "the shipped health check runs and passes on w1" "$out"; fi

# ---- grow: a job asking for 3 nodes --------------------------------------------------------------
t0=$(now_ms)
job=$(ctl "sbatch --parsable -N3 -o /dev/null --wrap 'srun hostname; sleep 20'" 2>&1)
sleep 3
log "job $job pends for: $(ctl "squeue -h -j $job -o %r" 2>&1)"
elastic_now
if [ "$(cardinality)" = 3 ]; then pass "one cycle raised the worker role's cardinality to 3 ($(grep -o 'grow role.*' "$work/elastic.last" | head -n1))"
else fail "one cycle raised the worker role's cardinality to 3" "cardinality $(cardinality); $(cat "$work/elastic.last")"; vm_report; fi
for i in 2 3; do
    vm_new "w$i" oneslurm worker "$NET.2$i" || vm_report
    log "OneFlow creates w$i (VM ${vm_id[w$i]})"
    vm_boot "w$i" 1536
done
for i in 2 3; do
    if why=$(vm_wait_ready "w$i" "$ready_timeout"); then name_worker "w$i"; else
        fail "w$i boots and publishes READY=YES" "$why"; vm_report
    fi
done
if wait_until 300 job_is "$job" RUNNING; then
    vm_result job_submitted_to_running_on_new_workers_seconds "$(secs_since_ms "$t0")"
    pass "job $job runs on $(ctl "squeue -h -j $job -o %D" 2>/dev/null) nodes $(secs_since_ms "$t0") s after it was submitted (2 new VMs booted)"
else fail "job $job runs on the 3 nodes" "$(ctl "squeue -j $job -o '%T %r'; sinfo -N" 2>&1)"; vm_report; fi
wait_until 120 job_gone "$job" || fail "job $job ends" "$(ctl "squeue -j $job" 2>&1)"

# ---- shrink: the idle ones, exactly their VMs, while a job runs on w1 ----------------------------
keep=$(ctl "sbatch --parsable -w ${wnode[w1]} -o /dev/null --wrap 'sleep 900'" 2>&1)
wait_until 60 job_is "$keep" RUNNING || fail "job $keep runs on ${wnode[w1]}" "$(ctl "squeue -j $keep" 2>&1)"
log "waiting for the idle limit (60 s since the last job of w2 and w3)"
sleep 62
elastic_now
ok=yes
for w in w2 w3; do
    st=$(full_state "${wnode[$w]}"); reason=$(reason_of "${wnode[$w]}")
    if [[ $st != *DRAIN* ]] || [ "$reason" != "one-hpc elastic: idle" ]; then
        ok=no; fail "$w drained by the cycle" "State=$st Reason=$reason"
    fi
done
[[ $(full_state "${wnode[w1]}") != *DRAIN* ]] || { ok=no; fail "w1 (running job $keep) is not drained" "$(full_state "${wnode[w1]}")"; }
[ "$ok" = yes ] && pass "idle limit: ${wnode[w2]} and ${wnode[w3]} drained with 'one-hpc elastic: idle', ${wnode[w1]} (job $keep) not"
t0=$(now_ms)
elastic_now
want=$(printf '%s\n' "${vm_id[w2]}" "${vm_id[w3]}" | sort -n | paste -sd' ')
if [ "$(terminated)" = "$want" ]; then pass "the next cycle terminated exactly VMs $want (w2, w3) through OneGate"
else fail "the next cycle terminated exactly VMs $want" "terminated: '$(terminated)'; $(cat "$work/elastic.last")"; fi
for w in w2 w3; do vm_monitor "$w" system_powerdown >/dev/null; done
for w in w2 w3; do
    if wait_until 120 is_gone "${wnode[$w]}"; then
        vm_result "${w}_terminate_to_node_gone_seconds" "$(secs_since_ms "$t0")"
        pass "$w: ${wnode[$w]} left Slurm through its self-drain ($(secs_since_ms "$t0") s after the terminate)"
    else fail "$w: ${wnode[$w]} left Slurm" "$(ctl 'sinfo -N' 2>&1)"; fi
    vm_wait_down "$w" 120 || fail "$w powers off within 120 s" "$(tail -n 10 "$work/$w.console")"
done
if [ "$(cardinality)/$(role_vms)" = 1/1 ]; then pass "OneFlow's watchdog lowered the role to 1 VM"
else fail "the role is back to 1 VM" "cardinality $(cardinality), VMs $(role_vms)"; fi
if job_is "$keep" RUNNING; then pass "job $keep still runs on ${wnode[w1]}"
else fail "job $keep still runs on ${wnode[w1]}" "$(job_state "$keep")"; fi

# ---- health: a worker whose slurmd spool is full is drained naming the check, then resumed -------
ctl "scancel $keep" >/dev/null 2>&1
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
