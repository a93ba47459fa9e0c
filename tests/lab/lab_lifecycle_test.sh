#!/bin/bash
# lab_lifecycle_test.sh [--demo] - the OneSlurm lifecycle on booted "VMs".
#
# A OneFlow service in the OneGate simulator (10.78.0.1:5030 on the lab bridge) with a
# controller role and a worker role; every VM is a systemd-nspawn container of the package
# layer (image-build/install-appliance.sh + one-hpc's .deb) with its own /context/context.sh
# and token. The real units run one-hpc at boot (one-hpc-configure), at shutdown
# (oneslurm-self-drain) and on the controller's timer (oneslurm-reconcile). One cluster is
# reused through the phases, in this order:
#
#   1  controller (accounting on) + 2 workers come up: READY in OneGate, `sinfo` 2 idle,
#      `srun -N2 hostname`, a finished job in `sacct` on the controller and a worker, a dump;
#      the shipped reconcile timer's schedule (OnBootSec=2min, OnUnitActiveSec=60s).
#   2  reconcile timer stopped; the key server flooded with 600 connections (its socket stays
#      up, it listens on the service address only); scale to 4 workers (they get the key right
#      after the flood), then graceful poweroff of 3: their nodes leave `sinfo` within seconds,
#      through self-drain alone.
#   6  controller reboot (its context now says ONEAPP_SLURM_MAX_NODES=3): same munge key, the
#      node kept, the new MaxNodeCount applied (6: 3 nodes, 3 placeholders), the accounting of phase 1's job kept; accounting turned
#      off by a reconfigure (units retired, database kept); worker reboot: it rejoins.
#   5  node table full: 3 nodes, a 4th worker publishes the table-full ERROR at once (not at
#      its join timeout), is not READY.
#   3  hard removal: a worker running a job is killed (SIGKILL of its PID 1); the reconciler
#      (timer shortened by a drop-in, SlurmdTimeout=15) drains it with the exact reason while
#      the job is there ...
#   4  ... then, with the reconciler run by hand: OneGate failing (5xx, hang, 401, malformed
#      JSON, reset) or no worker published: nothing changes; a live published worker set DOWN
#      is left alone; the dead node is deleted once its job is gone (end of 3).
#
# --demo: the newcomer's tour (`make demo`): phases 1, 2 and 3 with more narration and the
# Slurm views printed; no fault injection.
#
# Exit status: 0 all checks passed, 1 a check failed, 77 skipped (not root, or the host lacks
# what systemd-nspawn needs). Environment: as lab_smoke_test.sh (BOOTLAB_CACHE, ONEHPC_DEB,
# ONEHPC_SIM, ONEHPC_SOURCE_DIR, ONEHPC_BINARY_DIR, LAB_TIMEOUT).

set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}
DEMO=no
case ${1:-} in
    --demo) DEMO=yes;;
    "") ;;
    *) echo "usage: $0 [--demo]" >&2; exit 2;;
esac

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: the lab boots containers and needs root (run it with sudo)"; exit 77
fi
OWN_LAB_DIR=yes; [ -n "${BOOTLAB_DIR:-}" ] && OWN_LAB_DIR=no
# shellcheck source-path=SCRIPTDIR source=bootlab.sh
. "$HERE/bootlab.sh"
# shellcheck source-path=SCRIPTDIR source=lab_lib.sh
. "$HERE/lab_lib.sh"
lab_begin lab_lifecycle_test
echo "lab directory: $BOOTLAB_DIR   cache: $BOOTLAB_CACHE"

# ---- polling -------------------------------------------------------------------------------

# wait_for TIMEOUT COMMAND... : poll COMMAND every 0.2 s until it succeeds; sets WAITED to the
# seconds it took. Returns 1 on timeout.

# ---- the OneGate simulator -----------------------------------------------------------------

SIM_URL="http://$BOOTLAB_NET.1:5030"
sim_fault() { sim POST /_sim/faults "$1" >/dev/null; }
sim_clear_faults() { sim DELETE /_sim/faults >/dev/null; }
# OneGate requests the VM made (its token), per path, since the last clear.
sim_requests() { sim GET /_sim/requests | jq -r --argjson id "$1" '[.[] | select(.vm_id == $id)] | length'; }

# ---- VMs -----------------------------------------------------------------------------------

declare -A VMID=() IP=()
SERVICE=""
NEXT_IP=10
# new_slurm_vm, node, ctl: lab_lib.sh (the OneSlurm VMs of the lab).


# ---- Slurm views (from the controller) --------------------------------------------------------

# "name state" per node, sorted (sinfo -N lists a node once per partition; one partition).
sinfo_nodes() { ctl sinfo -h -N -o '%N %t' | sort -u; }
node_state() { ctl sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -1; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
registered() { ctl scontrol -o show node "$1" 2>/dev/null | grep -q "^NodeName=$1 "; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
not_registered() { ! registered "$1"; }
idle_count() { sinfo_nodes | awk '$2 == "idle"' | wc -l; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
idle_is() { [ "$(idle_count)" = "$1" ] && [ "$(sinfo_nodes | wc -l)" = "$1" ]; }
node_field() {   # node_field NODE FIELD : a field of `scontrol -o show node`
    ctl scontrol -o show node "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
node_reason() { ctl scontrol show node "$1" 2>/dev/null | sed -n 's/^ *Reason=\(.*\) \[.*/\1/p'; }
print_sinfo() { ctl sinfo -N -o '%N %6t %10T %E' | sed 's/^/    | /'; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
slurmctld_up() { ctl scontrol ping | grep -q 'is UP'; }
# acct_state HOST NAME: the state sacct shows on HOST for the job named NAME.
acct_state() { bl_exec "$1" sacct -n -X -P -S 2020-01-01 --name="$2" -o State 2>/dev/null | head -1; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
acct_completed() { [ "$(acct_state "$1" "$2")" = COMPLETED ]; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
unit_inactive() { [ "$(bl_exec "$1" systemctl is-active "$2" 2>/dev/null)" != active ]; }

# ---- the key server -----------------------------------------------------------------------------

# flood ADDR PORT N: N TCP connections from the host, each closed at once, as fast as they go;
# prints how many were accepted.
flood() {
    python3 - "$1" "$2" "$3" <<'PY'
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ok, t0 = 0, time.monotonic()
for _ in range(n):
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect((host, port))
        ok += 1
    except OSError:
        pass
    s.close()
print(f"{ok} of {n} accepted in {time.monotonic() - t0:.2f} s")
PY
}
# The key server flooded (review finding N1): systemd's default trigger limit for Accept=yes
# sockets (200 in 2 s) would leave the socket failed for good and no worker could join. It
# listens on the controller's service address only.
key_server_flood() {
    local out
    out=$(flood "${IP[ctl]}" 6830 600)
    say "key server flooded from the host: $out"
    sleep 1
    check "the key server's socket is still active after 600 connections" \
        eq "$(ctl systemctl is-active one-hpc-key-server.socket)" active
    check "the key server listens on ${IP[ctl]}:6830 only" \
        eq "$(ctl systemctl show -p Listen --value one-hpc-key-server.socket)" "${IP[ctl]}:6830 (Stream)"
    check "inside the controller, ${IP[ctl]}:6830 answers (bash's /dev/tcp connects)" \
        ctl bash -c "exec 3<>/dev/tcp/${IP[ctl]}/6830"
    check "nothing answers on 127.0.0.1:6830 inside the controller" \
        ctl bash -c '! exec 3<>/dev/tcp/127.0.0.1/6830' 2>/dev/null
}

# ---- reconciler --------------------------------------------------------------------------------

# Runs oneslurm-reconcile.service once (the real unit, as the timer would) and prints what it
# logged in that run.
reconcile_now() {
    local before
    before=$(ctl journalctl -u oneslurm-reconcile.service -o cat --no-pager | wc -l)
    ctl systemctl start oneslurm-reconcile.service
    ctl journalctl -u oneslurm-reconcile.service -o cat --no-pager | tail -n +"$((before + 1))" |
        grep -v '^Start\|^Finished\|^oneslurm-reconcile.service: Deactivated' > "$BOOTLAB_DIR/logs/reconcile.last"
    sed 's/^/    | /' "$BOOTLAB_DIR/logs/reconcile.last"
}
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
reconcile_logged() { grep -qF -- "$1" "$BOOTLAB_DIR/logs/reconcile.last"; }

# ---- phases ------------------------------------------------------------------------------------

setup() {
    local t0
    step "setup: rootfs, package layers, bridge, OneGate simulator"
    find_product || return 1
    t0=$(_bl_now)
    # shellcheck disable=SC2119  # no --fresh: reuse a cached rootfs
    bl_rootfs || return 1
    timing "rootfs ($BL_ROOTFS_RESULT)" "$(_bl_dt "$t0" "$(_bl_now)")"
    # shellcheck disable=SC2119  # no argument: the slurm layer set
    build_layers || return 1
    bl_bridge_up || return
    start_sim || return 1
    SERVICE=$(sim POST /_sim/services '{"name":"OneSlurm","roles":[
        {"name":"controller","cardinality":1,"cooldown_ms":0},
        {"name":"worker","cardinality":2,"parents":["controller"],"cooldown_ms":0}]}' | jq -r .id)
    if [ -z "$SERVICE" ] || [ "$SERVICE" = null ]; then echo "cannot create the service"; return 1; fi
    say "OneGate simulator on $SIM_URL, service $SERVICE (roles controller, worker)"
}

phase1_up() {
    local t0 out n
    step "1. a service with 1 controller and 2 workers comes up"
    t0=$(_bl_now)
    new_slurm_vm ctl controller ONEAPP_SLURM_ACCOUNTING_ENABLED=YES || return 1
    new_slurm_vm w1 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 || return 1
    new_slurm_vm w2 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 || return 1
    say "VMs: controller ${VMID[ctl]} (${IP[ctl]}), workers ${VMID[w1]} (${IP[w1]}), ${VMID[w2]} (${IP[w2]})"
    say "booting all three at once (workers wait for the controller through OneGate)"
    boot_vms 240 ctl w1 w2 || return 1
    for n in ctl w1 w2; do
        check "$n: one-hpc-configure succeeded" eq "$(configure_result "$n")" success
        check "$n: READY=YES in OneGate" ready "$n"
    done
    [ "$(configure_result ctl)" = success ] || { show_configure_log ctl 30; return 1; }
    check "controller published SLURM_CONTROLLER_ADDR=${IP[ctl]}" \
        eq "$(sim_attr "${VMID[ctl]}" SLURM_CONTROLLER_ADDR)" "${IP[ctl]}"
    for n in w1 w2; do
        check "$n published SLURM_NODENAME=$(node "$n")" eq "$(sim_attr "${VMID[$n]}" SLURM_NODENAME)" "$(node "$n")"
    done
    # The containers see the host's cgroup v1 controllers read-only: slurmd could not use them.
    check "slurm.conf: ProctrackType=proctrack/linuxproc in a container" \
        eq "$(ctl sed -n 's/^ProctrackType=//p' /etc/slurm/slurm.conf)" proctrack/linuxproc
    wait_for 30 idle_is 2
    check "sinfo shows 2 idle nodes" eq "$(idle_count)" 2
    print_sinfo
    out=$(ctl timeout 60 srun -N2 hostname 2>&1 | sort | paste -sd' ')
    check "srun -N2 hostname runs on both workers" eq "$out" "$(printf '%s\n' "$(node w1)" "$(node w2)" | sort | paste -sd' ')"
    timing "1: service up (3 VMs booted+configured, srun)" "$(_bl_dt "$t0" "$(_bl_now)")"

    # Accounting (ONEAPP_SLURM_ACCOUNTING_ENABLED=YES): MariaDB and slurmdbd on the controller,
    # a finished job in sacct there and on a worker (AccountingStorageHost is the controller's
    # name in the slurm.conf the worker fetched), one dump through the shipped unit.
    check "controller: mariadb active" eq "$(ctl systemctl is-active mariadb.service)" active
    check "controller: slurmdbd active" eq "$(ctl systemctl is-active slurmdbd.service)" active
    check "controller: cluster 'one' registered" eq "$(ctl sacctmgr -n -P list cluster format=cluster)" one
    out=$(ctl timeout 60 srun -J acct-check -N1 hostname 2>&1)
    check "srun -J acct-check ran" contains "$out" slurm-one-worker-
    wait_for 30 acct_completed ctl acct-check
    check "sacct on the controller: acct-check COMPLETED" eq "$(acct_state ctl acct-check)" COMPLETED
    check "sacct on worker w1: acct-check COMPLETED" eq "$(acct_state w1 acct-check)" COMPLETED
    ctl systemctl start one-hpc-accounting-dump.service
    check "one-hpc-accounting-dump.service succeeded" \
        eq "$(ctl systemctl show -p Result --value one-hpc-accounting-dump.service)" success
    check "a complete dump in /var/lib/one-hpc/accounting-dumps" \
        contains "$(ctl sh -c 'tail -n 1 /var/lib/one-hpc/accounting-dumps/slurm_acct_db-*.sql')" "-- Dump completed"
    check "accounting dump timer enabled" eq "$(ctl systemctl is-enabled one-hpc-accounting-dump.timer)" enabled

    # `one-hpc status` on the real controller: the role, the configure, READY, the managed
    # units, both nodes as the reconciler sees them (kept: published), at the stated cost.
    local status_rc=0
    out=$(ctl one-hpc status 2>&1) || status_rc=$?
    check "one-hpc status on the controller exits 0" eq "$status_rc" 0 || printf '%s\n' "$out" | sed 's/^/    | /'
    check "status: role controller (OneSlurm)" contains "$out" "role:            controller (OneSlurm)"
    check "status: the last configure succeeded" contains "$out" "last configure:  success (exit 0"
    check "status: READY=YES in OneGate" contains "$out" "READY=YES"
    check "status: the reconcile timer and its next run" contains "$out" "oneslurm-reconcile.timer"
    for n in w1 w2; do
        check "status: $(node "$n") kept, published by VM ${VMID[$n]}" contains "$out" "VM ${VMID[$n]} ("
    done
    # Slurm 22.05 (the lab's Debian 12): its refused `scontrol --json` first, then the text and
    # squeue (on 24.11 the JSON and squeue: 2).
    check "status: one OneGate request and the reconciler's 3 Slurm calls (22.05)" contains "$out" "cost: 1 OneGate request, 3 Slurm calls"

    # The shipped schedule (no drop-in on this controller yet).
    local timers next boot since
    timers=$(ctl systemctl show -p TimersMonotonic --value oneslurm-reconcile.timer)
    say "oneslurm-reconcile.timer: $timers"
    check "reconcile timer enabled" eq "$(ctl systemctl is-enabled oneslurm-reconcile.timer)" enabled
    check "reconcile timer active" eq "$(ctl systemctl is-active oneslurm-reconcile.timer)" active
    check "shipped timer: OnBootSec=2min" contains "$timers" "OnBootUSec=2min"
    check "shipped timer: OnUnitActiveSec=60s" contains "$timers" "OnUnitActiveUSec=1min"
    check "shipped timer: AccuracySec=1s" eq "$(ctl systemctl show -p AccuracyUSec --value oneslurm-reconcile.timer)" 1s
    check "no drop-in on the shipped timer" eq "$(ctl systemctl show -p DropInPaths --value oneslurm-reconcile.timer)" ""
    # First elapse: 2 min after the container started (OnBootSec counts from container start).
    next=$(ctl systemctl show -p NextElapseUSecMonotonic --value oneslurm-reconcile.timer)
    boot=$(ctl systemctl show -p UserspaceTimestampMonotonic --value)
    since=$(ctl systemctl show -p LastTriggerUSecMonotonic --value oneslurm-reconcile.timer)
    say "first reconcile due at ${next} (monotonic), guest userspace started at ${boot}us"
    check "not triggered yet, $(_bl_dt "$t0" "$(_bl_now)")s after the boot began (OnBootSec=2min)" eq "$since" 0
}

phase2_graceful() {
    local t0 n gone
    step "2. scale to 4 workers, then graceful scale-down to 1 (self-drain alone)"
    ctl systemctl stop oneslurm-reconcile.timer
    check "reconcile timer stopped for this phase" eq "$(ctl systemctl is-active oneslurm-reconcile.timer)" inactive
    key_server_flood
    t0=$(_bl_now)
    sim POST "/_sim/services/$SERVICE/scale" '{"role":"worker","cardinality":4}' >/dev/null
    new_slurm_vm w3 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 || return 1
    new_slurm_vm w4 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 || return 1
    say "scale-up: new VMs ${VMID[w3]}, ${VMID[w4]}"
    boot_vms 240 w3 w4 || return 1
    for n in w3 w4; do check "$n: configure succeeded, READY" ready "$n"; done
    wait_for 30 idle_is 4
    check "sinfo shows 4 idle nodes" eq "$(idle_count)" 4
    [ "$DEMO" = yes ] && print_sinfo
    timing "2: scale-up by 2 workers" "$(_bl_dt "$t0" "$(_bl_now)")"

    # Scale-down as OneFlow does it: the chosen VMs are shut down (ACPI poweroff), then they
    # leave the service (terminated explicitly: the simulator's own scale-down would pick
    # its victims itself).
    for n in w2 w3 w4; do
        say "poweroff $n ($(node "$n")) - oneslurm-self-drain.service runs one-hpc self-drain"
        t0=$(_bl_now)
        bl_poweroff "$n" 60 >/dev/null
        check "$n powered off cleanly" eq "$(bl_rc "$n")" 0
        timing "2: poweroff of $n (with self-drain)" "$(_bl_dt "$t0" "$(_bl_now)")"
        # Right after the container exited: the node must already be gone.
        t0=$(_bl_now)
        wait_for 5 not_registered "$(node "$n")"; gone=$?
        check "$(node "$n") gone from Slurm within 5 s of poweroff (took ${WAITED}s after exit)" eq "$gone" 0
        sim POST "/_sim/vms/${VMID[$n]}/terminate" '{}' >/dev/null
        echo "  --- $n: self-drain at shutdown"
        bl_journal "$n" -u oneslurm-self-drain.service -o cat | grep -i 'self-drain\|node' | tail -n 5 | sed 's/^/  | /'
    done
    check "sinfo: only $(node w1) is left" eq "$(sinfo_nodes | awk '{print $1}' | paste -sd' ')" "$(node w1)"
    check "the reconciler did not run in this phase" \
        eq "$(ctl systemctl show -p ExecMainStartTimestampMonotonic --value oneslurm-reconcile.service)" 0
    [ "$DEMO" = yes ] && print_sinfo
    for n in w2 w3 w4; do bl_unclone "$n"; done
}

phase6_reboots() {
    local key_before key_after t0 nodes_before
    step "6. controller reboot keeps the munge key and the nodes; worker reboot rejoins"
    key_before=$(ctl sha256sum /etc/munge/munge.key | cut -d' ' -f1)
    nodes_before=$(sinfo_nodes | awk '{print $1}' | paste -sd' ')
    # A changed setting, applied by the configure of the next boot (used by phase 5).
    local root ctx
    root=$(bl_root ctl); ctx=$root/context/context.sh
    echo "ONEAPP_SLURM_MAX_NODES='3'" >> "$ctx"
    say "controller context now has ONEAPP_SLURM_MAX_NODES=3; rebooting the controller"
    t0=$(_bl_now)
    bl_reboot ctl 60 || return 1
    bl_wait_running ctl 120 >/dev/null
    wait_for 120 configured ctl
    check "controller: configure after reboot succeeded" eq "$(configure_result ctl)" success
    wait_for 30 ready ctl
    check "controller READY=YES again" ready ctl
    timing "6: controller reboot + configure" "$(_bl_dt "$t0" "$(_bl_now)")"
    key_after=$(ctl sha256sum /etc/munge/munge.key | cut -d' ' -f1)
    check "munge key unchanged across the reboot" eq "$key_after" "$key_before"
    check "munge key 0400 munge:munge" eq "$(ctl stat -c '%a %U:%G' /etc/munge/munge.key)" "400 munge:munge"
    # 3 dynamic nodes, and as many placeholder records (State=FUTURE) in the table.
    check "MaxNodeCount=6 applied (3 nodes, 3 placeholders)" eq "$(ctl sed -n 's/^MaxNodeCount=//p' /etc/slurm/slurm.conf)" 6
    check "3 placeholder records" eq "$(ctl sed -n 's/^NodeName=\([^ ]*\) State=FUTURE .*/\1/p' /etc/slurm/slurm.conf)" "one-hpc-slot[1-3]"
    check "slurmctld answers" wait_for 30 slurmctld_up
    check "the registered nodes are kept ($nodes_before)" \
        eq "$(sinfo_nodes | awk '{print $1}' | paste -sd' ')" "$nodes_before"
    wait_for 60 idle_is 1
    check "srun -w $(node w1) hostname after the controller reboot" \
        eq "$(ctl timeout 60 srun -w "$(node w1)" hostname 2>&1)" "$(node w1)"
    check "slurmdbd active after the reboot" eq "$(ctl systemctl is-active slurmdbd.service)" active
    check "sacct after the controller reboot: acct-check still COMPLETED" \
        eq "$(acct_state ctl acct-check)" COMPLETED

    # Accounting turned off (a reconfigure): slurm.conf without slurmdbd, the units disabled
    # and stopped, the database kept.
    echo "ONEAPP_SLURM_ACCOUNTING_ENABLED='NO'" >> "$ctx"
    ctl systemctl start one-hpc-reconfigure.service
    check "reconfigure with accounting off succeeded" \
        eq "$(ctl systemctl show -p Result --value one-hpc-reconfigure.service)" success
    check "slurm.conf: AccountingStorageType=accounting_storage/none" \
        eq "$(ctl sed -n 's/^AccountingStorageType=//p' /etc/slurm/slurm.conf)" accounting_storage/none
    local u
    for u in slurmdbd.service mariadb.service one-hpc-accounting-dump.timer; do
        check "accounting off: $u disabled" eq "$(ctl systemctl is-enabled "$u" 2>/dev/null)" disabled
        wait_for 30 unit_inactive ctl "$u"
        check "accounting off: $u stopped" unit_inactive ctl "$u"
    done
    check "accounting off: the database is kept" ctl test -d /var/lib/mysql/slurm_acct_db
    check "slurmctld answers with accounting off" wait_for 30 slurmctld_up

    say "rebooting worker w1 ($(node w1))"
    t0=$(_bl_now)
    bl_reboot w1 60 || return 1
    bl_wait_running w1 120 >/dev/null
    wait_for 120 configured w1
    check "w1: configure after reboot succeeded" eq "$(configure_result w1)" success
    [ "$(configure_result w1)" = success ] || show_configure_log w1 40
    wait_for 30 idle_is 1
    check "$(node w1) rejoined: idle" eq "$(node_state "$(node w1)")" idle
    check "w1 READY=YES again" ready w1
    check "srun -w $(node w1) hostname after the worker reboot" \
        eq "$(ctl timeout 60 srun -w "$(node w1)" hostname 2>&1)" "$(node w1)"
    timing "6: worker reboot + rejoin" "$(_bl_dt "$t0" "$(_bl_now)")"
}

phase5_table_full() {
    local t0 err
    step "5. node table full: 3 nodes accepted, a 4th worker reports the ERROR and is not READY"
    t0=$(_bl_now)
    new_slurm_vm w5 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 || return 1
    new_slurm_vm w6 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 || return 1
    boot_vms 240 w5 w6 || return 1
    wait_for 30 idle_is 3
    check "3 nodes idle (the table is full)" eq "$(idle_count)" 3
    # A join timeout longer than the boot wait: only a join that sees the full table and
    # fails at once lets the boot finish in time.
    new_slurm_vm w7 worker ONEAPP_SLURM_JOIN_TIMEOUT=300 || return 1
    say "4th worker: VM ${VMID[w7]} ($(node w7)), join timeout 300 s"
    boot_vms 120 w7 || return 1
    check "w7: one-hpc-configure failed" eq "$(configure_result w7)" exit-code
    err=$(sim_attr "${VMID[w7]}" ERROR)
    say "w7 ERROR in OneGate: $err"
    # OneGate's ERROR has ';' for ',' (an attribute value cannot hold a comma).
    check "w7 published the table-full ERROR" contains "$err" "was refused: slurmctld on ${IP[ctl]} holds 3 nodes; as many as it accepts (3; ONEAPP_SLURM_MAX_NODES"
    check "w7 is not READY" eq "$(sim_attr "${VMID[w7]}" READY)" ""
    check "$(node w7) is not in Slurm" not_registered "$(node w7)"
    check "still 3 nodes" eq "$(sinfo_nodes | wc -l)" 3
    timing "5: table full (3 workers booted)" "$(_bl_dt "$t0" "$(_bl_now)")"
    bl_poweroff w7 60 >/dev/null
    sim POST "/_sim/vms/${VMID[w7]}/terminate" '{}' >/dev/null
    bl_unclone w7
}

# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
job_running_on() { [ "$(ctl squeue -h -j "$1" -o '%T %N')" = "RUNNING $2" ]; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
job_gone() {
    local s
    s=$(ctl squeue -h -j "$1" -o '%T' 2>/dev/null)
    case $s in RUNNING|COMPLETING) return 1;; esac
}
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
reconcile_runs_above() {
    [ "$(ctl journalctl -u oneslurm-reconcile.service -o cat --no-pager | grep -c 'reconcile: .* Slurm nodes')" -gt "$1" ]
}
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
node_is_idle() { [ "$(node_state "$1")" = idle ]; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
drained_by_reconciler() { [ "$(node_reason "$1")" = "removed from OneFlow service" ] && node_state "$1" | grep -q 'drain\|drng'; }
state_has() { node_field "$1" State | grep -q "$2"; }

phase3_hard() {
    local t0 job victim=$1 other=$2 vnode n
    vnode=$(node "$victim")
    step "3. hard removal: $victim ($vnode) is killed while a job runs there"
    # Shorter timers for the test: SlurmdTimeout=15 (slurm-dynamic-nodes.md: NOT_RESPONDING
    # after 7-11 s, DOWN after 15-20 s with 10) and the reconcile timer every 3 s.
    ctl sed -i 's/^SlurmdTimeout=.*/SlurmdTimeout=15/' /etc/slurm/slurm.conf
    ctl systemctl restart slurmctld
    wait_for 30 slurmctld_up
    ctl mkdir -p /etc/systemd/system/oneslurm-reconcile.timer.d
    # OnUnitActiveSec counts from the service's last run: one run by hand starts the chain
    # (in the lab, neither a past OnBootSec nor OnActiveSec fired after the restart).
    printf '[Timer]\nOnBootSec=\nOnUnitActiveSec=\nOnUnitActiveSec=3s\nAccuracySec=100ms\n' |
        ctl tee /etc/systemd/system/oneslurm-reconcile.timer.d/lab.conf >/dev/null
    ctl systemctl daemon-reload
    ctl systemctl restart oneslurm-reconcile.timer
    say "test drop-ins: SlurmdTimeout=15, oneslurm-reconcile.timer every 3 s (one run by hand starts it)"
    ctl systemctl start oneslurm-reconcile.service
    local runs
    runs=$(ctl journalctl -u oneslurm-reconcile.service -o cat --no-pager | grep -c 'reconcile: .* Slurm nodes')
    wait_for 20 reconcile_runs_above "$runs"
    check "the shortened timer runs oneslurm-reconcile.service again by itself (${WAITED}s)" \
        reconcile_runs_above "$runs"
    job=$(ctl sbatch --parsable --no-requeue -w "$vnode" -J lab-hard -o /dev/null -D /tmp --wrap 'sleep 600' 2>&1)
    wait_for 30 job_running_on "$job" "$vnode"
    check "job $job runs on $vnode" job_running_on "$job" "$vnode"
    say "SIGKILL to the PID 1 of $victim (no shutdown: no self-drain); VM terminated in OneGate"
    kill -KILL "$(bl_leader "$victim")"
    bl_wait_exit "$victim" 30 >/dev/null
    sim POST "/_sim/vms/${VMID[$victim]}/terminate" '{"hard":true}' >/dev/null
    t0=$(_bl_now)
    wait_for 60 drained_by_reconciler "$vnode"
    check "reconciler drained $vnode with reason 'removed from OneFlow service' (${WAITED}s)" \
        drained_by_reconciler "$vnode" ||
        ctl journalctl -u oneslurm-reconcile.service -o short-monotonic --no-pager | tail -n 25 | sed 's/^/    | /'
    if [ "$DEMO" = yes ]; then print_sinfo; fi
    state_has "$vnode" NOT_RESPONDING && say "$vnode: $(node_field "$vnode" State)"
    check "job $job still RUNNING on the drained node" job_running_on "$job" "$vnode"
    timing "3: kill -> drained by the reconciler" "$(_bl_dt "$t0" "$(_bl_now)")"
    if [ "$DEMO" = yes ]; then
        wait_for 90 not_registered "$vnode"
        check "reconciler deleted $vnode once its job was gone (${WAITED}s later)" not_registered "$vnode"
        ctl journalctl -u oneslurm-reconcile.service -o cat --no-pager | grep "$vnode" | tail -n 4 | sed 's/^/    | /'
        print_sinfo
        return 0
    fi
    # The dead node stays for phase 4: the timer stops here, the reconciler is run by hand.
    ctl systemctl stop oneslurm-reconcile.timer
    wait_for 60 job_gone "$job"
    check "job $job ended once $vnode went DOWN" job_gone "$job"
    wait_for 30 state_has "$vnode" DOWN
    check "$vnode: DOWN+DRAIN in Slurm" state_has "$vnode" 'DOWN.*DRAIN'
    say "$vnode: $(node_field "$vnode" State)"

    phase4_faults "$vnode" "$other"
}

phase4_faults() {
    local vnode=$1 other=$2 f t0 desc kind n
    step "4. OneGate failing or nobody published: the reconciler changes nothing"
    for f in 'status 503|{"kind":"status","status":503,"path_prefix":"/service"}' \
             'status 401|{"kind":"status","status":401,"body":"Unauthorized","path_prefix":"/service"}' \
             'malformed JSON|{"kind":"malformed","body":"{\"SERVICE\": [","path_prefix":"/service"}' \
             'hang 20 s|{"kind":"hang","delay_ms":20000,"path_prefix":"/service"}' \
             'connection reset|{"kind":"reset","path_prefix":"/service"}'; do
        desc=${f%%|*} kind=${f#*|}
        sim_fault "$kind"
        say "fault: $desc"
        t0=$(_bl_now)
        reconcile_now
        check "$desc: $vnode still registered" registered "$vnode"
        check "$desc: logged 'no change this cycle'" reconcile_logged "no change this cycle"
        timing "4: reconcile cycle under fault '$desc'" "$(_bl_dt "$t0" "$(_bl_now)")"
        sim_clear_faults
    done
    say "no worker has published SLURM_NODENAME (erased from every worker VM)"
    for n in w1 "$other"; do sim DELETE "/_sim/vms/${VMID[$n]}/user_template/SLURM_NODENAME" >/dev/null; done
    reconcile_now
    check "nobody published: $vnode still registered" registered "$vnode"
    check "nobody published: logged why" reconcile_logged "no VM of the service has published SLURM_NODENAME"
    for n in w1 "$other"; do
        sim PUT "/_sim/vms/${VMID[$n]}/user_template" "{\"SLURM_NODENAME\":\"$(node "$n")\"}" >/dev/null
    done
    step "3+4. OneGate answers again; a live published worker is DOWN in Slurm"
    say "$(node "$other") (alive, published) set DOWN by hand; $vnode (dead, unpublished) has no job left"
    ctl scontrol update nodename="$(node "$other")" state=down reason=lab-test
    sim DELETE /_sim/requests >/dev/null
    reconcile_now
    check "live published worker $(node "$other") (DOWN): left alone" registered "$(node "$other")"
    check "live published worker $(node "$other"): not drained" \
        bash -c "[ \"\$1\" != 'removed from OneFlow service' ]" _ "$(node_reason "$(node "$other")")"
    check "3: reconciler deleted $vnode now that its job is gone" not_registered "$vnode"
    check "3: logged 'delete $vnode' with its reason" reconcile_logged "delete $vnode: no VM of the service publishes it"
    check "one OneGate request in that cycle" eq "$(sim_requests "${VMID[ctl]}")" 1
    check "$(node w1) still registered" registered "$(node w1)"
    ctl scontrol update nodename="$(node "$other")" state=resume
    wait_for 30 node_is_idle "$(node "$other")"
    check "$(node "$other") idle again after resume" node_is_idle "$(node "$other")"
    print_sinfo
}

scenario() {
    setup || return 1
    phase1_up || return 1
    phase2_graceful || return 1
    if [ "$DEMO" = yes ]; then
        new_slurm_vm w5 worker ONEAPP_SLURM_JOIN_TIMEOUT=120 || return 1
        step "scale up again by one worker (VM ${VMID[w5]}) to show a hard removal"
        boot_vms 240 w5 || return 1
        wait_for 30 idle_is 2
        print_sinfo
        phase3_hard w5 w1
        return 0
    fi
    phase6_reboots || return 1
    phase5_table_full || return 1
    phase3_hard w6 w5 || return 1
}

scenario; rc=$?
[ "$rc" = 0 ] || { echo "  FAIL  scenario stopped early (status $rc, see above)"; FAIL=$((FAIL + 1)); }
# Workers first: their self-drain still reaches the controller (else each waits for it).
lab_end poweroff_slurm_workers
