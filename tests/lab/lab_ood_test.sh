#!/bin/bash
# lab_ood_test.sh [--phase N] - the Open OnDemand service on booted "VMs": storage, portal and
# two workers as systemd-nspawn containers of the ood package layer
# (image-build/install-appliance.sh --role-packages ood + one-hpc's .deb), each with its own
# /context/context.sh and token, in a OneFlow service of the OneGate simulator (10.78.0.1:5030
# on the lab bridge; one NIC per VM, ETH0 = the compute network).
#
# NFS in containers: kernel NFS cannot be served from a container, so the storage role, seeing
# /run/systemd/container, writes its exports but starts no nfs-server. The NFS transport is
# stood in by one host directory, $BOOTLAB_DIR/nfs, bound at /export in the storage container
# (the role creates home, slurm and software in it) and at /lab/nfs in the portal and the
# workers. Their roles write the usual mount units (home.mount, opt-software.mount and, on the
# portal, var-lib-one\x2dhpc-portal\x2dstate.mount); a lab drop-in, placed before the first
# boot, makes each a bind mount of /lab/nfs/<home|slurm|software> instead of an NFS mount.
#
# Phases, on one service (the issue's "Done when"):
#   0  setup; the storage VM comes up READY in its container (exports written, no nfs-server).
#   1  portal + 2 workers come up: all READY; the same uid for alice everywhere; after
#      `one-hpc home-create alice` on the portal, a job of alice runs on both workers and
#      writes into /home/alice (seen in the shared directory).
#   2  portal reboot with one job RUNNING and one PENDING: both kept (ids, states), the running
#      one not restarted (same StartTime, same sleep process on its worker).
#   3  portal replaced (accounting dumped, old portal killed hard, a new VM with a new id and
#      address in role portal): READY; same munge key; same queue; accounting restored; the
#      workers follow the new address (sinfo: both responding); a new job runs; the storage
#      refresher exports to the new portal address.
#   4  a worker killed hard (SIGKILL of its PID 1, terminated in OneGate) is reconciled away
#      (drained "removed from OneFlow service" or deleted) on the portal.
#
# --phase N (or LAB_OOD_PHASE=N): stop after phase N (0-4; default 4, everything).
# Test-only drop-ins (placed before boot): oneslurm-reconcile.timer every 3 s on the portal,
# one-hpc-follow-portal.timer every 3 s on the workers, DefaultTimeoutStopSec=15s everywhere.
#
# Exit status: 0 all checks passed, 1 a check failed, 77 skipped (not root, or the host lacks
# what systemd-nspawn needs). Environment: as lab_lifecycle_test.sh (BOOTLAB_CACHE, ONEHPC_DEB,
# ONEHPC_SIM, ONEHPC_SOURCE_DIR, ONEHPC_BINARY_DIR, LAB_TIMEOUT).

set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}
STOP_AFTER=${LAB_OOD_PHASE:-4}
case ${1:-} in
    --phase) STOP_AFTER=${2:-}; shift 2 || true;;
    --phase=*) STOP_AFTER=${1#*=};;
    "") ;;
    *) echo "usage: $0 [--phase 0-4]" >&2; exit 2;;
esac
case $STOP_AFTER in [0-4]) ;; *) echo "usage: $0 [--phase 0-4]" >&2; exit 2;; esac

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: the lab boots containers and needs root (run it with sudo)"; exit 77
fi
OWN_LAB_DIR=yes; [ -n "${BOOTLAB_DIR:-}" ] && OWN_LAB_DIR=no
# shellcheck source-path=SCRIPTDIR source=bootlab.sh
. "$HERE/bootlab.sh"
# shellcheck source-path=SCRIPTDIR source=lab_lib.sh
. "$HERE/lab_lib.sh"
lab_begin lab_ood_test
echo "lab directory: $BOOTLAB_DIR   cache: $BOOTLAB_CACHE   phases: 0-$STOP_AFTER"

# The shared directory standing in for the storage VM's NFS exports (see the header).
NFS_DIR=$BOOTLAB_DIR/nfs
PORTAL_STATE=/var/lib/one-hpc/portal-state
USERS="alice:alicepass1 bob:bobpass12:20001"
PROXY_URL=http://$BOOTLAB_NET.1:3128

# ---- polling -------------------------------------------------------------------------------

# wait_for TIMEOUT COMMAND... : poll COMMAND every 0.2 s until it succeeds; sets WAITED to the
# seconds it took. Returns 1 on timeout.

# ---- the OneGate simulator -----------------------------------------------------------------

SIM_URL="http://$BOOTLAB_NET.1:5030"

# ---- VMs -----------------------------------------------------------------------------------

declare -A VMID=() IP=()
SERVICE=""
NEXT_IP=10
# new_vm NAME ROLE [CONTEXT_VAR=value...] : new_ood_vm (lab_lib.sh: the storage VM gets
# $NFS_DIR at /export; the others at /lab/nfs, with the bind drop-ins), with the test's timers.
new_vm() {
    local name=$1 role=$2
    new_ood_vm "$@" || return 1
    # Test cadence for the timers a phase waits for. OnActiveSec= (from the timer's start by
    # configure) and OnUnitActiveSec= (from the service's last run) replace the shipped values.
    local fast
    fast=$(printf '[Timer]\nOnBootSec=\nOnActiveSec=\nOnUnitActiveSec=\nOnActiveSec=2s\nOnUnitActiveSec=3s\nAccuracySec=100ms')
    case $role in
        portal) bl_dropin "$name" oneslurm-reconcile.timer lab-fast "$fast";;
        worker) bl_dropin "$name" one-hpc-follow-portal.timer lab-fast "$fast";;
    esac
}
node() { echo "ood-worker-${VMID[$1]}"; }
PORTAL=portal          # the container that is the portal now (phase 3 replaces it)
PORTAL_NAME=ood.lab.test   # ONEAPP_PORTAL_HOST_NAME: the certificate's name
P() { bl_exec "$PORTAL" "$@"; }
as_alice() { P runuser -u alice -- "$@"; }
# submit SBATCH_OPTIONS... : sbatch as alice in her home; prints the job id (stderr to a log).
submit() {
    as_alice sbatch --parsable -D /home/alice -o /dev/null "$@" 2>> "$BOOTLAB_DIR/logs/sbatch.err"
}
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
is_id() {
    local a
    for a in "$@"; do
        case $a in ''|*[!0-9]*) echo "        not a job id: '$a' ($(tail -n 2 "$BOOTLAB_DIR/logs/sbatch.err" 2>/dev/null))"; return 1;; esac
    done
}

# configured_ok NAME... : checks "configure succeeded" and "READY" for each; logs on failure.
configured_ok() {
    local n rc=0
    for n in "$@"; do
        check "$n: one-hpc-configure succeeded" eq "$(configure_result "$n")" success ||
            { show_configure_log "$n" 40; rc=1; continue; }
        wait_for 20 ready "$n"
        check "$n: READY=YES in OneGate" ready "$n" || rc=1
    done
    return $rc
}
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
ne() { [ "$1" != "$2" ] || { echo "        got '$1'"; return 1; }; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
pw_hashed() { case $1 in '$'*) return 0;; esac; echo "        shadow field '$1'"; return 1; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
pw_locked() { case $1 in '!'*|'*'*) return 0;; esac; echo "        shadow field '${1:0:4}...'"; return 1; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
unit_active() { [ "$(bl_exec "$1" systemctl is-active "$2")" = active ]; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
unit_enabled() { [ "$(bl_exec "$1" systemctl is-enabled "$2")" = enabled ]; }
# The portal's certificate names NAME (read on the host: openssl is not in the image).
# shellcheck disable=SC2317  # invoked indirectly (check)
cert_covers() {
    P cat "/etc/ood/ssl/$1.crt" | openssl x509 -noout -checkhost "$1" 2>/dev/null | grep -q 'does match'
}
# A file in a container: its sha256 ("" when missing).
sha_in() { bl_exec "$1" sha256sum "$2" 2>/dev/null | cut -d' ' -f1; }
# The first timer run can be before configure started the timer's chain: run the service once
# by hand when the timer never triggered (lab_lifecycle_test.sh phase 3 saw the same).
kick_timer() {   # kick_timer NAME TIMER SERVICE
    [ "$(bl_exec "$1" systemctl show -p LastTriggerUSecMonotonic --value "$2")" = 0 ] || return 0
    bl_exec "$1" systemctl start --no-block "$3"
}

# ---- Slurm views (from the portal) ---------------------------------------------------------

# shellcheck disable=SC2317  # called only by functions that check and wait_for invoke
node_state() { P sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -1; }
# shellcheck disable=SC2317  # called only by functions that check and wait_for invoke
registered() { P scontrol -o show node "$1" 2>/dev/null | grep -q "^NodeName=$1 "; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
not_registered() { ! registered "$1"; }
# shellcheck disable=SC2317  # called only by functions that check and wait_for invoke
node_reason() { P scontrol show node "$1" 2>/dev/null | sed -n 's/^ *Reason=\(.*\) \[.*/\1/p'; }
print_sinfo() { P sinfo -N -o '%N %6t %10T %E' | sed 's/^/    | /'; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
slurmctld_up() { P scontrol ping | grep -q 'is UP'; }
# Both workers registered and responding (no '*' after the state) in one of STATES.
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
workers_are() {   # workers_are REGEX
    local n s
    for n in w1 w2; do
        s=$(node_state "$(node "$n")")
        [[ $s =~ ^($1)$ ]] || return 1
    done
}
job_field() { P scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# shellcheck disable=SC2317  # called only by functions that check and wait_for invoke
job_state() { P squeue -h -j "$1" -o '%T' 2>/dev/null; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
job_state_is() { [ "$(job_state "$1")" = "$2" ]; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
in_sacct() { P sacct -n -X -j "$1" -o JobID 2>/dev/null | grep -qw "$1"; }
# The node a running job is on, and the PID of its `sleep` there (proof it was not restarted).
sleep_pid_on() { bl_exec "$1" pgrep -x -f "sleep $2" | head -1; }

# ---- phases ----------------------------------------------------------------------------------

setup() {
    local t0
    step "setup: rootfs, ood package layers, bridge, OneGate simulator, shared NFS directory"
    find_product || return 1
    t0=$(_bl_now)
    # shellcheck disable=SC2119  # no --fresh: reuse a cached rootfs
    bl_rootfs || return 1
    timing "rootfs ($BL_ROOTFS_RESULT)" "$(_bl_dt "$t0" "$(_bl_now)")"
    build_layers ood || return 1
    bl_bridge_up || return
    start_sim || return 1
    SERVICE=$(sim POST /_sim/services '{"name":"Open OnDemand","roles":[
        {"name":"storage","cardinality":1,"cooldown_ms":0},
        {"name":"portal","cardinality":1,"parents":["storage"],"cooldown_ms":0},
        {"name":"worker","cardinality":2,"parents":["portal"],"cooldown_ms":0}]}' | jq -r .id)
    if [ -z "$SERVICE" ] || [ "$SERVICE" = null ]; then echo "cannot create the service"; return 1; fi
    mkdir -p "$NFS_DIR"
    say "OneGate simulator on $SIM_URL, service $SERVICE (roles storage, portal, worker); NFS stand-in $NFS_DIR"
}

phase0_storage() {
    local t0 exports
    step "0. the storage VM comes up in its container (no disk, no nfs-server, exports written)"
    t0=$(_bl_now)
    new_vm sto storage ONEAPP_ROLE=storage ONEAPP_SOFTWARE_PROXY_ENABLED=YES \
        "ONEAPP_SOFTWARE_PROXY_URL=$PROXY_URL" || return 1
    say "storage VM ${VMID[sto]} (${IP[sto]})"
    boot_vms 120 sto || return 1
    configured_ok sto || return 1
    timing "0: storage booted + configured" "$(_bl_dt "$t0" "$(_bl_now)")"
    check "storage: systemd says it runs in a container" eq "$(bl_exec sto systemd-detect-virt -c)" systemd-nspawn
    local d
    for d in home slurm software; do
        check "storage: /export/$d created, seen in the shared directory" test -d "$NFS_DIR/$d"
    done
    exports=$(bl_exec sto cat /etc/exports.d/one-hpc.exports)
    # Review M5: to the service's VMs by address (the storage VM alone so far), never the
    # compute network's CIDR.
    check "storage: /export/home exported to the service's VMs (the storage VM's own ${IP[sto]})" \
        contains "$exports" "/export/home ${IP[sto]}("
    check "storage: /export/software exported to the service's VMs" \
        contains "$exports" "/export/software ${IP[sto]}("
    check "storage: nothing exported to the whole compute network $BOOTLAB_NET.0/24" \
        lacks "$exports" "/24("
    check "storage: nfs-server not started" ne "$(bl_exec sto systemctl is-active nfs-server.service)" active
    check "storage: nfs-server not enabled" ne "$(bl_exec sto systemctl is-enabled nfs-server.service 2>/dev/null)" enabled
    check "storage: configure logged why (bind mounts stand in)" \
        contains "$(bl_journal sto -u one-hpc-configure.service -o cat)" "in a container the NFS transport is stood in by bind mounts"
    check "storage: no block device was looked at" \
        contains "$(bl_journal sto -u one-hpc-configure.service -o cat)" "no block device is looked at"
    check "storage: squid not enabled (site proxy $PROXY_URL)" \
        ne "$(bl_exec sto systemctl is-enabled squid.service 2>/dev/null)" enabled
    check "storage: exports refresher timer active" unit_active sto one-hpc-exports-refresh.timer
}

phase1_up() {
    local t0 n out uid_p uid_w
    step "1. portal + 2 workers come up; alice's job runs on both workers and writes her home"
    t0=$(_bl_now)
    new_vm portal portal ONEAPP_ROLE=portal "ONEAPP_NFS_HOST=${IP[sto]}" \
        "ONEAPP_AUTH_LOCAL_USERS=$USERS" "ONEAPP_PORTAL_HOST_NAME=$PORTAL_NAME" || return 1
    # ONEAPP_AUTH_LOCAL_USERS is the portal's only (a worker refuses it): the workers take
    # the users from the portal's OOD_USERS.
    for n in w1 w2; do
        new_vm "$n" worker ONEAPP_ROLE=ood-worker "ONEAPP_NFS_HOST=${IP[sto]}" || return 1
    done
    say "VMs: portal ${VMID[portal]} (${IP[portal]}), workers ${VMID[w1]} (${IP[w1]}), ${VMID[w2]} (${IP[w2]})"
    boot_vms 300 portal w1 w2 || return 1
    configured_ok portal w1 w2 || return 1
    timing "1: portal + 2 workers booted + configured" "$(_bl_dt "$t0" "$(_bl_now)")"

    # The portal: name, mounts (through the lab's bind drop-ins), published attributes.
    check "portal: host name ood-portal" eq "$(P hostname)" ood-portal
    local unit
    for unit in home.mount 'var-lib-one\x2dhpc-portal\x2dstate.mount' opt-software.mount; do
        check "portal: $unit active" unit_active portal "$unit"
        check "portal: $unit uses the lab drop-in" \
            contains "$(P systemctl show -p DropInPaths --value "$unit")" lab-bind.conf
    done
    date +%s.%N > "$NFS_DIR/home/.lab-probe"
    check "portal: /home is the shared home directory" eq "$(P cat /home/.lab-probe)" "$(cat "$NFS_DIR/home/.lab-probe")"
    check "portal: $PORTAL_STATE is the shared slurm directory" test -d "$NFS_DIR/slurm/state"
    check "portal: published SLURM_CONTROLLER_ADDR=${IP[portal]}" \
        eq "$(sim_attr "${VMID[portal]}" SLURM_CONTROLLER_ADDR)" "${IP[portal]}"
    check "portal: published SLURM_CONTROLLER_HOST=ood-portal" \
        eq "$(sim_attr "${VMID[portal]}" SLURM_CONTROLLER_HOST)" ood-portal
    check "portal: published SLURM_KEY_SERVER_PUBKEY" test -n "$(sim_attr "${VMID[portal]}" SLURM_KEY_SERVER_PUBKEY)"
    check "portal: never publishes the munge key (no SLURM_MUNGE_KEY_BASE64)" \
        test -z "$(sim_attr "${VMID[portal]}" SLURM_MUNGE_KEY_BASE64)"
    check "portal: published OOD_USERS (alice)" contains "$(sim_attr "${VMID[portal]}" OOD_USERS)" alice
    check "portal: StateSaveLocation=$PORTAL_STATE/state" \
        eq "$(P sed -n 's/^StateSaveLocation=//p' /etc/slurm/slurm.conf)" "$PORTAL_STATE/state"
    check "portal: munge key kept in $PORTAL_STATE/munge.key (same bytes as /etc/munge/munge.key)" \
        eq "$(sha256sum < "$NFS_DIR/slurm/munge.key" | cut -d' ' -f1)" "$(sha_in portal /etc/munge/munge.key)"
    check "portal: its self-signed certificate kept on the state export" \
        eq "$(sha_in portal "/etc/ood/ssl/$PORTAL_NAME.crt")" "$(sha256sum < "$NFS_DIR/slurm/ssl/portal.crt" | cut -d' ' -f1)"
    check "portal: the certificate covers $PORTAL_NAME" cert_covers "$PORTAL_NAME"
    check "portal: the TLS key is root's alone (0600)" \
        eq "$(P stat -c %a:%U "/etc/ood/ssl/$PORTAL_NAME.key")" "600:root"
    check "portal: pwauth admits the listed users only (/etc/one-hpc/portal-users: alice bob)" \
        eq "$(P cat /etc/one-hpc/portal-users | tr '\n' ' ')" "alice bob "
    check "portal: pwauth runs for root and www-data only (4750 root:www-data)" \
        eq "$(P stat -c %a:%U:%G /usr/sbin/pwauth)" "4750:root:www-data"
    check "portal: mod_ssl and mod_authnz_external enabled" \
        P test -e /etc/apache2/mods-enabled/ssl.load -a -e /etc/apache2/mods-enabled/authnz_external.load
    # The default login (ONEAPP_PORTAL_LOGIN=form): its modules and its two keys.
    check "portal: the login form's modules enabled (auth_form, session_crypto, authn_socache)" \
        P test -e /etc/apache2/mods-enabled/auth_form.load -a -e /etc/apache2/mods-enabled/session_crypto.load \
            -a -e /etc/apache2/mods-enabled/authn_socache.load
    check "portal: the session key is root's (600), the login stamp key Apache's workers' (640 root:www-data)" \
        eq "$(P stat -c %a:%U:%G /etc/one-hpc/portal-session.key /etc/one-hpc/portal-stamp.key | tr '\n' ' ')" \
            "600:root:root 640:root:www-data "
    # The lab's image has no Open OnDemand (OSC's repository is not reachable here): the portal
    # says so in OneGate and in `one-hpc status`, and leaves Apache alone.
    check "portal: published OOD_PORTAL (absent: no Open OnDemand in this image)" \
        contains "$(sim_attr "${VMID[portal]}" OOD_PORTAL)" "absent: no Open OnDemand in this image"
    check "portal: publishes no OOD_URL without Open OnDemand" test -z "$(sim_attr "${VMID[portal]}" OOD_URL)"
    check "portal: one-hpc status says there is no Open OnDemand" \
        contains "$(P one-hpc status 2>&1)" "Open OnDemand:   absent: no Open OnDemand in this image"
    check "portal: apache2.service neither enabled nor active without Open OnDemand" \
        eq "$(P systemctl is-enabled apache2.service 2>&1):$(P systemctl is-active apache2.service 2>&1)" "disabled:inactive"
    check "portal: one-hpc-accounting-dump.timer enabled" unit_enabled portal one-hpc-accounting-dump.timer
    check "portal: slurmdbd active" unit_active portal slurmdbd.service
    check "portal: oneslurm-reconcile.timer active" unit_active portal oneslurm-reconcile.timer
    wait_for 45 exports_name "${IP[portal]}"
    check "storage refresher: exports name the portal ${IP[portal]} (${WAITED}s)" exports_name "${IP[portal]}"
    wait_for 45 exports_name "${IP[w2]}"
    check "storage refresher: exports name the workers ${IP[w1]} and ${IP[w2]} (${WAITED}s)" \
        eq "$(bl_exec sto grep -cE "^/export/home (${IP[w1]}|${IP[w2]})\\(" /etc/exports.d/one-hpc.exports)" 2
    kick_timer portal oneslurm-reconcile.timer oneslurm-reconcile.service

    # Accounts: the same uid on the portal and the workers; passwords on the portal only.
    uid_p=$(P getent passwd alice | cut -d: -f3)
    check "portal: alice has an automatic uid >= 10001 ($uid_p)" test "${uid_p:-0}" -ge 10001
    check "portal: bob has uid 20001" eq "$(P getent passwd bob | cut -d: -f3)" 20001
    check "portal: alice has a password" pw_hashed "$(P getent shadow alice | cut -d: -f2)"
    for n in w1 w2; do
        uid_w=$(bl_exec "$n" getent passwd alice | cut -d: -f3)
        check "$n: alice has the portal's uid ($uid_p)" eq "$uid_w" "$uid_p"
        check "$n: bob has uid 20001" eq "$(bl_exec "$n" getent passwd bob | cut -d: -f3)" 20001
        check "$n: alice's password is locked" pw_locked "$(bl_exec "$n" getent shadow alice | cut -d: -f2)"
        check "$n: home.mount active" unit_active "$n" home.mount
        check "$n: opt-software.mount active" unit_active "$n" opt-software.mount
        check "$n: /home is the shared home directory" eq "$(bl_exec "$n" cat /home/.lab-probe)" \
            "$(cat "$NFS_DIR/home/.lab-probe")"
        check "$n: one-hpc-follow-portal.timer active" unit_active "$n" one-hpc-follow-portal.timer
        check "$n: oneslurm-self-drain.service active" unit_active "$n" oneslurm-self-drain.service
        kick_timer "$n" one-hpc-follow-portal.timer one-hpc-follow-portal.service
    done

    # Slurm: both workers idle under their names.
    wait_for 60 workers_are idle
    check "sinfo: $(node w1) and $(node w2) idle (${WAITED}s)" workers_are idle || print_sinfo
    # Open OnDemand's /node and /rnode reach the workers by name: the reconciler's block of the
    # portal's /etc/hosts, never a multicast answer.
    wait_for 30 portal_names_workers
    check "portal: /etc/hosts names $(node w1) and $(node w2) at their addresses (${WAITED}s)" \
        portal_names_workers || P cat /etc/hosts | sed 's/^/    | /'
    check "portal: LLMNR and multicast DNS off (systemd-resolved drop-in)" \
        eq "$(P grep -E '^(LLMNR|MulticastDNS)=' /etc/systemd/resolved.conf.d/one-hpc.conf | paste -sd' ')" \
            "LLMNR=no MulticastDNS=no"

    # The munge key: boxed for each worker by the portal's key server, never in OneGate.
    local key64 docs id
    key64=$(base64 -w0 < "$NFS_DIR/slurm/munge.key")
    docs=$(sim GET /_sim/vms; for id in "${VMID[@]}"; do sim GET "/_sim/vms/$id"; done)
    check "no OneGate document (USER_TEMPLATE, CONTEXT of any VM) holds the munge key" lacks "$docs" "$key64"
    for n in w1 w2; do
        check "$n: publishes SLURM_WORKER_PUBKEY" test -n "$(sim_attr "${VMID[$n]}" SLURM_WORKER_PUBKEY)"
        check "$n: the same munge key as the portal (from its key server)" \
            eq "$(sha_in "$n" /etc/munge/munge.key)" "$(sha_in portal /etc/munge/munge.key)"
    done
    check "portal: its key server answered both workers" \
        eq "$(P journalctl -o cat --no-pager -u 'one-hpc-key-server@*' | grep -c 'sent the munge key, boxed for VM')" 2

    # First login: the home, then a job of alice on both workers writing into it.
    check "portal: one-hpc home-create alice" P one-hpc home-create alice
    check "/home/alice is alice's (shared directory)" eq "$(stat -c %u "$NFS_DIR/home/alice" 2>/dev/null)" "$uid_p"
    # shellcheck disable=SC2016  # expanded by the job's shell
    out=$(as_alice timeout 90 srun -N2 -D /home/alice bash -c 'id -un; hostname > "lab-$SLURMD_NODENAME"' 2>>"$BOOTLAB_DIR/logs/srun.err")
    check "srun -N2 as alice runs as alice on both workers" eq "$(sort <<< "$out" | paste -sd' ')" "alice alice"
    for n in w1 w2; do
        check "the job wrote /home/alice/lab-$(node "$n") (owner alice, in the shared directory)" \
            eq "$(stat -c %u "$NFS_DIR/home/alice/lab-$(node "$n")" 2>/dev/null)" "$uid_p"
    done
    print_sinfo
}

JOB_RUN="" JOB_PEND="" RUN_NODE="" RUN_START="" RUN_SLEEP=""
phase2_reboot() {
    local t0 w="" n
    step "2. portal reboot with one job RUNNING and one PENDING"
    JOB_RUN=$(submit -J lab-run --wrap 'sleep 600')
    JOB_PEND=$(submit -J lab-pend --begin=now+1hour --wrap true)
    say "jobs: $JOB_RUN (sleep 600), $JOB_PEND (--begin=now+1hour)"
    check "two jobs submitted as alice" is_id "$JOB_RUN" "$JOB_PEND" || return 1
    wait_for 30 job_state_is "$JOB_RUN" RUNNING
    check "job $JOB_RUN RUNNING" job_state_is "$JOB_RUN" RUNNING || return 1
    check "job $JOB_PEND PENDING" job_state_is "$JOB_PEND" PENDING
    RUN_NODE=$(P squeue -h -j "$JOB_RUN" -o '%N') RUN_START=$(job_field "$JOB_RUN" StartTime)
    for n in w1 w2; do [ "$(node "$n")" = "$RUN_NODE" ] && w=$n; done
    wait_for 10 sleep_pid_on "$w" 600
    RUN_SLEEP=$(sleep_pid_on "$w" 600)
    say "job $JOB_RUN runs on $RUN_NODE ($w) since $RUN_START, sleep PID $RUN_SLEEP there"
    t0=$(_bl_now)
    bl_reboot portal 60 || return 1
    bl_wait_running portal 120 >/dev/null
    wait_for 180 configured portal
    configured_ok portal || return 1
    wait_for 30 slurmctld_up
    check "slurmctld answers after the reboot" slurmctld_up
    timing "2: portal reboot + configure" "$(_bl_dt "$t0" "$(_bl_now)")"
    check "job $JOB_RUN still RUNNING" job_state_is "$JOB_RUN" RUNNING
    check "job $JOB_PEND still PENDING" job_state_is "$JOB_PEND" PENDING
    check "job $JOB_RUN not restarted: same StartTime" eq "$(job_field "$JOB_RUN" StartTime)" "$RUN_START"
    check "job $JOB_RUN not restarted: Restarts=0" eq "$(job_field "$JOB_RUN" Restarts)" 0
    check "job $JOB_RUN not restarted: same sleep process on $RUN_NODE" eq "$(sleep_pid_on "$w" 600)" "$RUN_SLEEP"
    wait_for 60 workers_are 'idle|mix|alloc'
    check "both workers responding after the reboot" workers_are 'idle|mix|alloc' || print_sinfo
}

phase3_replace() {
    local t0 job_done key_before cert_before dumps_before old n other
    step "3. portal replaced: new VM, new address; key, queue and accounting kept; workers follow"
    job_done=$(submit --wait -J lab-done --wrap true | head -1)
    check "a job of alice ran to its end ($job_done)" is_id "$job_done" || return 1
    wait_for 30 in_sacct "$job_done"
    check "finished job $job_done in the old portal's accounting" in_sacct "$job_done"
    dumps_before=$(find "$NFS_DIR/slurm/accounting" -type f 2>/dev/null | wc -l)
    check "old portal: accounting dump by hand" P systemctl start one-hpc-accounting-dump.service
    check "a new dump in $PORTAL_STATE/accounting" \
        test "$(find "$NFS_DIR/slurm/accounting" -type f 2>/dev/null | wc -l)" -gt "$dumps_before"
    key_before=$(sha256sum < "$NFS_DIR/slurm/munge.key" | cut -d' ' -f1)
    cert_before=$(sha_in portal "/etc/ood/ssl/$PORTAL_NAME.crt")

    old=$PORTAL
    say "SIGKILL to the PID 1 of $old (VM ${VMID[$old]}); terminated in OneGate"
    kill -KILL "$(bl_leader "$old")"
    bl_wait_exit "$old" 30 >/dev/null
    sim POST "/_sim/vms/${VMID[$old]}/terminate" '{"hard":true}' >/dev/null
    t0=$(_bl_now)
    sim POST "/_sim/services/$SERVICE/scale" '{"role":"portal","cardinality":1}' >/dev/null
    new_vm portal2 portal ONEAPP_ROLE=portal "ONEAPP_NFS_HOST=${IP[sto]}" \
        "ONEAPP_AUTH_LOCAL_USERS=$USERS" "ONEAPP_PORTAL_HOST_NAME=$PORTAL_NAME" || return 1
    PORTAL=portal2
    say "new portal VM ${VMID[portal2]} (${IP[portal2]})"
    boot_vms 300 portal2 || return 1
    configured_ok portal2 || return 1
    timing "3: new portal booted + configured" "$(_bl_dt "$t0" "$(_bl_now)")"
    kick_timer portal2 oneslurm-reconcile.timer oneslurm-reconcile.service
    check "new portal: host name ood-portal" eq "$(P hostname)" ood-portal
    check "new portal: published SLURM_CONTROLLER_ADDR=${IP[portal2]}" \
        eq "$(sim_attr "${VMID[portal2]}" SLURM_CONTROLLER_ADDR)" "${IP[portal2]}"
    check "same munge key bytes (kept in $PORTAL_STATE)" eq "$(sha_in portal2 /etc/munge/munge.key)" "$key_before"
    check "new portal: the same certificate as the old one (kept in $PORTAL_STATE/ssl)" \
        eq "$(sha_in portal2 "/etc/ood/ssl/$PORTAL_NAME.crt")" "$cert_before"
    wait_for 30 slurmctld_up
    check "new portal: job $JOB_RUN RUNNING" job_state_is "$JOB_RUN" RUNNING
    check "new portal: job $JOB_PEND PENDING" job_state_is "$JOB_PEND" PENDING
    wait_for 30 in_sacct "$job_done"
    check "new portal: sacct -j $job_done (finished before the replacement)" in_sacct "$job_done"
    t0=$(_bl_now)
    wait_for 90 workers_are 'idle|mix|alloc'
    check "workers follow the new portal: both responding in sinfo (${WAITED}s)" workers_are 'idle|mix|alloc' ||
        { print_sinfo; for n in w1 w2; do bl_journal "$n" -u one-hpc-follow-portal.service -o cat | tail -n 5 | sed "s/^/    $n | /"; done; }
    timing "3: workers follow the new portal" "$(_bl_dt "$t0" "$(_bl_now)")"
    other=w1; [ "$(node w1)" = "$RUN_NODE" ] && other=w2
    # sinfo shows the nodes from the state the new portal restored; a worker may still be
    # re-registering with it (a first step launch then fails with "Communication connection
    # failure", as seen once in CI): the job is retried for up to 90 s. The check is that run's
    # result, not one more job launched at once (that one found the node still completing the
    # first and failed, as seen once in CI).
    local ran=0
    wait_for 90 alice_runs_on "$(node "$other")" || ran=$?
    check "a new job of alice runs on $(node "$other") (${WAITED}s)" eq "$ran" 0 ||
        tail -n 5 "$BOOTLAB_DIR/logs/srun.err" | sed 's/^/    | /'
    wait_for 45 exports_name "${IP[portal2]}"
    check "storage refresher: exports name the new portal ${IP[portal2]} (${WAITED}s)" \
        contains "$(bl_exec sto cat /etc/exports.d/one-hpc.exports)" "${IP[portal2]}("
    print_sinfo
}

# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
exports_name() { bl_exec sto grep -qF " $1(" /etc/exports.d/one-hpc.exports; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
not_exported() { ! exports_name "$1"; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
alice_runs_on() {
    [ "$(as_alice timeout 60 srun -N1 -w "$1" -D /home/alice id -un 2>>"$BOOTLAB_DIR/logs/srun.err")" = alice ]
}
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
portal_names_workers() {
    [ "$(P getent hosts "$(node w1)" | awk '{print $1}')" = "${IP[w1]}" ] &&
        [ "$(P getent hosts "$(node w2)" | awk '{print $1}')" = "${IP[w2]}" ]
}
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
not_in_portal_hosts() { ! P grep -qw "$1" /etc/hosts; }
# shellcheck disable=SC2317  # invoked indirectly (check, wait_for)
reconciled_away() {
    not_registered "$1" ||
        { [ "$(node_reason "$1")" = "removed from OneFlow service" ] && node_state "$1" | grep -q 'drain\|drng'; }
}
phase4_worker_killed() {
    local victim=w2 vnode t0
    [ "$(node w1)" = "$RUN_NODE" ] || victim=w1
    vnode=$(node "$victim")
    step "4. a worker killed hard: $victim ($vnode) is reconciled away on the portal"
    kill -KILL "$(bl_leader "$victim")"
    bl_wait_exit "$victim" 30 >/dev/null
    sim POST "/_sim/vms/${VMID[$victim]}/terminate" '{"hard":true}' >/dev/null
    t0=$(_bl_now)
    wait_for 60 reconciled_away "$vnode"
    check "$vnode drained ('removed from OneFlow service') or deleted (${WAITED}s)" reconciled_away "$vnode" ||
        P journalctl -u oneslurm-reconcile.service -o short-monotonic --no-pager | tail -n 20 | sed 's/^/    | /'
    timing "4: kill -> reconciled away" "$(_bl_dt "$t0" "$(_bl_now)")"
    wait_for 30 not_in_portal_hosts "$vnode"
    check "portal: $vnode's name is gone from /etc/hosts (${WAITED}s)" not_in_portal_hosts "$vnode"
    wait_for 45 not_exported "${IP[$victim]}"
    check "storage refresher: the terminated VM's ${IP[$victim]} is no longer exported to (${WAITED}s)" \
        not_exported "${IP[$victim]}"
    print_sinfo
}

scenario() {
    setup || return 1
    phase0_storage || return 1
    [ "$STOP_AFTER" -ge 1 ] || return 0
    phase1_up || return 1
    [ "$STOP_AFTER" -ge 2 ] || return 0
    phase2_reboot || return 1
    [ "$STOP_AFTER" -ge 3 ] || return 0
    phase3_replace || return 1
    [ "$STOP_AFTER" -ge 4 ] || return 0
    phase4_worker_killed || return 1
}

scenario; rc=$?
[ "$rc" = 0 ] || { echo "  FAIL  scenario stopped early (status $rc, see above)"; FAIL=$((FAIL + 1)); }
# No job may hold a poweroff; then workers first (their self-drain reaches the portal).
# shellcheck disable=SC2317  # called by lab_end
poweroff_workers() {
    local f n
    if bl_running "$PORTAL"; then P scancel --user=alice >/dev/null 2>&1; fi
    for f in "$BOOTLAB_DIR"/run/*.pid; do
        [ -e "$f" ] || continue
        n=$(basename "$f" .pid)
        case $n in w*) bl_poweroff "$n" 60 >/dev/null || true;; esac
    done
}
lab_end poweroff_workers
