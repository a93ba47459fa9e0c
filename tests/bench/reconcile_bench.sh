#!/bin/bash
# reconcile_bench.sh [SIZE...] - cost of one `one-hpc reconcile` cycle, of the reads of one
# `one-hpc elastic` cycle, and of one worker's join and follow pass, against N simulated workers
# (default sizes: 10 100 1000).
#
# Simulated workers: VMs of the worker role in the OneGate simulator, each publishing
# SLURM_NODENAME, and as many node records in a real slurmctld (Slurm 22.05), made without any
# slurmd: `scontrol create NodeName=bench-[a-b] State=FUTURE` (hidden from `scontrol show
# nodes`), then `scontrol update nodename=bench-[a-b] state=down` (now listed, DOWN). Each
# size also gets one unpublished DOWN node, which the first cycle deletes.
#
# Everything runs in a private network namespace (unshare --net: loopback plus a veth pair of
# its own, which slurmctld needs to resolve its listening address) and a private mount
# namespace (its own /etc/slurm, where one-hpc's scontrol and squeue find the bench's
# slurm.conf), with a private munged socket: nothing touches the host's Slurm, munge or network.
#
# Per size: cycle 1 (one deletion) and cycle 2 (steady state, nothing to change), then one
# elastic cycle with --dry-run (the same reads as a real cycle; the DOWN nodes leave it nothing
# to do, and a dry run writes no state on the host), then a worker's join and follow pass
# (`one-hpc plan` of a worker VM: configure's OneGate reads, requests and bytes; see
# join_cost), measuring
#   OneGate requests   counted by the simulator (GET /_sim/requests); must be exactly 1
#   child processes    successful execve() of one-hpc's children (strace -f), by program
#   Slurm calls        from one-hpc's own summary line
#   wall time          the median of 3 runs without strace
# and prints a table. Exit status: 0 pass, 1 a check failed, 77 skipped (not root, or a tool
# is missing).
#
# Environment: ONEHPC_BIN (one-hpc), ONEHPC_SIM (onegate-sim), ONEHPC_BINARY_DIR (default
# ./build); BENCH_KEEP=1 keeps the work directory.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=${ONEHPC_BINARY_DIR:-$HERE/../../build}
ONEHPC_BIN=${ONEHPC_BIN:-$BIN_DIR/one-hpc}
ONEHPC_SIM=${ONEHPC_SIM:-$BIN_DIR/tests/onegate-sim}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(10 100 1000)

[ "$(id -u)" = 0 ] || { echo "SKIPPED: the benchmark needs root (network namespace, slurmctld, munged)"; exit 77; }
for t in slurmctld scontrol squeue munged munge strace jq curl unshare ip; do
    command -v "$t" >/dev/null || { echo "SKIPPED: $t is missing (make deps)"; exit 77; }
done
for f in "$ONEHPC_BIN" "$ONEHPC_SIM"; do
    [ -x "$f" ] || { echo "SKIPPED: $f is not built"; exit 77; }
done

# Into a network namespace of our own (the script runs again there).
if [ "${BENCH_IN_NETNS:-}" != 1 ]; then
    exec unshare --net --mount --propagation private -- env BENCH_IN_NETNS=1 ONEHPC_BIN="$ONEHPC_BIN" ONEHPC_SIM="$ONEHPC_SIM" \
        bash "$0" "${SIZES[@]}"
fi

D=$(mktemp -d /tmp/onehpc-bench.XXXXXX)
chmod 0700 "$D"
MUNGED_PID="" CTLD_PID="" SIM_PID="" FAIL=0
# shellcheck disable=SC2317  # the EXIT trap
cleanup() {
    local p
    for p in "$CTLD_PID" "$SIM_PID" "$MUNGED_PID"; do
        [ -n "$p" ] || continue
        kill -TERM "$p" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    if [ "${BENCH_KEEP:-}" = 1 ] || [ "$FAIL" != 0 ]; then echo "work directory kept: $D"; else rm -rf "$D"; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", b - a}'; }
# poll TIMEOUT_S COMMAND... : until COMMAND succeeds (every 0.1 s).
poll() {
    local end=$(( $(date +%s) + $1 )); shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || return 1
        sleep 0.1
    done
}
die() { echo "bench: $*" >&2; FAIL=1; exit 1; }

ip link set lo up
if ! { ip link add bench0 type veth peer name bench1 && ip addr add 10.79.0.1/24 dev bench0 &&
        ip link set bench1 up && ip link set bench0 up; }; then
    die "cannot set up the namespace's network"
fi

# munged on a private socket.
mkdir -p "$D/state" "$D/spool" "$D/ctx"
head -c 1024 /dev/urandom > "$D/munge.key"; chmod 0400 "$D/munge.key"
munged -F --force --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" \
    --log-file="$D/munged.log" --seed-file="$D/munge.seed" > "$D/munged.out" 2>&1 &
MUNGED_PID=$!
poll 10 munge -n -S "$D/munge.sock" || die "munged did not start ($D/munged.log)"

cat > "$D/slurm.conf" <<EOF
ClusterName=bench
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge.sock
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmctldLogFile=$D/slurmctld.log
MaxNodeCount=$(( $(printf '%s\n' "${SIZES[@]}" | sort -n | tail -1) + ${#SIZES[@]} + 10 ))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MessageTimeout=10
MailProg=/bin/true
PartitionName=all Nodes=ALL Default=YES State=UP
EOF
export SLURM_CONF=$D/slurm.conf
# one-hpc's children inherit no SLURM_CONF (a clean environment): they read Slurm's default
# /etc/slurm/slurm.conf, as on a controller. This mount namespace has its own /etc/slurm.
mount -t tmpfs -o mode=0755 bench-etc-slurm /etc/slurm || die "cannot mount a private /etc/slurm"
cp "$D/slurm.conf" /etc/slurm/slurm.conf
slurmctld -D -c -f "$D/slurm.conf" > "$D/slurmctld.out" 2>&1 &
CTLD_PID=$!
poll 30 bash -c 'scontrol ping | grep -q "is UP"' || die "slurmctld did not answer ($D/slurmctld.log)"

SIM=http://127.0.0.1:5030
"$ONEHPC_SIM" --listen 127.0.0.1:5030 --operator-api > "$D/sim.log" 2>&1 &
SIM_PID=$!
poll 10 curl -sf "$SIM/_sim/health" || die "onegate-sim did not start"
sim() {   # sim METHOD PATH [JSON]
    local -a data=()
    [ $# -ge 3 ] && data=(-H 'Content-Type: application/json' --data "$3")
    curl -sS --fail-with-body --max-time 30 -X "$1" "${data[@]}" "$SIM$2"
}
SERVICE=$(sim POST /_sim/services '{"name":"OneSlurm","roles":[{"name":"controller"},{"name":"worker","parents":["controller"]}]}' | jq -r .id)
r=$(sim POST /_sim/vms "{\"service_id\":$SERVICE,\"role\":\"controller\",\"nics\":[{\"ip\":\"127.0.0.1\",\"network\":\"bench\",\"network_id\":\"0\"}]}")
CTL_ID=$(jq -r .id <<< "$r")
jq -r .token <<< "$r" > "$D/ctx/token.txt"
printf "ONEGATE_ENDPOINT='%s'\nTOKEN='YES'\nVMID='%s'\nONEAPP_ROLE='controller'\nONEAPP_SLURM_ELASTIC='YES'\n" \
    "$SIM" "$CTL_ID" > "$D/ctx/context.sh"

# add_workers FROM TO : VMs publishing bench-FROM..bench-TO (one curl process for all of them)
# and their DOWN node records in slurmctld.
add_workers() {
    local i cfg=$D/curl.cfg
    : > "$cfg"
    for ((i = $1; i <= $2; i++)); do
        [ "$i" = "$1" ] || echo next >> "$cfg"
        printf 'url = "%s/_sim/vms"\nrequest = "POST"\nheader = "Content-Type: application/json"\ndata = "{\\"service_id\\":%s,\\"role\\":\\"worker\\",\\"user_template\\":{\\"SLURM_NODENAME\\":\\"bench-%s\\"},\\"nics\\":[{\\"ip\\":\\"10.79.1.%s\\",\\"network\\":\\"bench\\",\\"network_id\\":\\"0\\"}]}"\noutput = "/dev/null"\n' \
            "$SIM" "$SERVICE" "$i" "$((i % 250 + 1))" >> "$cfg"
    done
    curl -sS --fail -K "$cfg" || die "cannot add VMs to the simulator"
    # Loopback addresses: slurmctld pings DOWN nodes, and a name it cannot resolve stalls it
    # for seconds per node; 127.x answers "connection refused" at once.
    local addrs
    addrs=$(for ((i = $1; i <= $2; i++)); do echo "127.1.$((i / 250)).$((i % 250 + 1))"; done | paste -sd,)
    scontrol create "NodeName=bench-[$1-$2] NodeAddr=$addrs CPUs=1 RealMemory=100 State=FUTURE" ||
        die "scontrol create failed"
    scontrol update "nodename=bench-[$1-$2]" state=down reason=bench || die "scontrol update failed"
}
add_gone() {   # an unpublished DOWN node: the next cycle deletes it
    if ! { scontrol create "NodeName=gone-$1 NodeAddr=127.2.0.1 CPUs=1 RealMemory=100 State=FUTURE" &&
           scontrol update "nodename=gone-$1" state=down reason=bench; }; then
        die "cannot create gone-$1"
    fi
}
registered() { scontrol -o show node "$1" 2>/dev/null | grep -q "^NodeName=$1 "; }
node_count() { scontrol -o show nodes 2>/dev/null | grep -c '^NodeName='; }
requests() { sim GET /_sim/requests | jq 'length'; }

# cycle LOG [strace] : one cycle of "${CMD[@]}" (default: reconcile); sets RC, WALL, REQ,
# CHILDREN, PROGS, CALLS.
CMD=(reconcile)
cycle() {
    local log=$1 t0 t1
    local -a pre=()
    [ "${2:-}" = strace ] && pre=(strace -f -qq -e trace=execve -e signal=none -o "$D/strace.out")
    sim DELETE /_sim/requests >/dev/null
    t0=$(now)
    "${pre[@]}" "$ONEHPC_BIN" "${CMD[@]}" --context "$D/ctx/context.sh" > "$log" 2>&1; RC=$?
    t1=$(now)
    WALL=$(dt "$t0" "$t1")
    REQ=$(requests)
    CALLS=$(sed -n 's/.*, \([0-9][0-9]*\) Slurm calls).*/\1/p' "$log" | tail -1)
    if [ "${2:-}" = strace ]; then
        # Successful execve of a child (the first one is one-hpc itself).
        CHILDREN=$(grep -c 'execve(.* = 0$' "$D/strace.out"); CHILDREN=$((CHILDREN - 1))
        PROGS=$(grep 'execve(.* = 0$' "$D/strace.out" | tail -n +2 |
            sed -n 's/^[0-9]* *execve("\([^"]*\)".*/\1/p' | xargs -rn1 basename | sort | uniq -c |
            awk '{printf "%s%s x%s", (NR>1?", ":""), $2, $1}')
    fi
}
median3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }

# The join's cost for one worker: a worker VM of the service (the joiner) whose controller
# publishes what a ready controller publishes, and `one-hpc plan` on it: a dry run of the
# join, which reads OneGate exactly as configure does (and as a follow pass does, once the
# controller's VM id is remembered: the hint file in its root) and changes nothing. Three
# kinds: a first join without the service template's wiring (the role's list of VMs), a first
# join with it (ONEAPP_SLURM_CONTROLLER_VM_ID, as OneFlow resolves ${controller.vm.id}: the
# shipped templates), a follow pass.
# Its root holds only what the plan reads besides OneGate (/proc/cpuinfo, /proc/meminfo).
sim PUT "/_sim/vms/$CTL_ID/user_template" "{\"READY\":\"YES\",\"SLURM_CONTROLLER_ADDR\":\"10.79.0.1\",\"SLURM_CONTROLLER_HOST\":\"bench-ctl\",\"SLURM_KEY_SERVER_PUBKEY\":\"$(head -c 32 /dev/urandom | base64)\",\"SLURM_MUNGE_KEY_ID\":\"$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')\"}" >/dev/null ||
    die "cannot publish the controller's attributes"
r=$(sim POST /_sim/vms "{\"service_id\":$SERVICE,\"role\":\"worker\",\"nics\":[{\"ip\":\"10.79.0.2\",\"network\":\"bench\",\"network_id\":\"0\"}]}") ||
    die "cannot add the joiner VM"
JOINER_ID=$(jq -r .id <<< "$r")
mkdir -p "$D/jctx" "$D/jroot/proc" "$D/jroot-hint/proc" "$D/jroot-hint/var/lib/one-hpc"
jq -r .token <<< "$r" > "$D/jctx/token.txt"
printf "ONEGATE_ENDPOINT='%s'\nTOKEN='YES'\nVMID='%s'\nONEAPP_ROLE='worker'\nETH0_IP='10.79.0.2'\nETH0_MASK='255.255.255.0'\n" \
    "$SIM" "$JOINER_ID" > "$D/jctx/context.sh"
mkdir -p "$D/jctx-wired"
cp "$D/jctx/token.txt" "$D/jctx-wired/"
{ cat "$D/jctx/context.sh"; echo "ONEAPP_SLURM_CONTROLLER_VM_ID='$CTL_ID'"; } > "$D/jctx-wired/context.sh"
for root in "$D/jroot" "$D/jroot-hint"; do cp /proc/cpuinfo /proc/meminfo "$root/proc/"; done
echo "$CTL_ID" > "$D/jroot-hint/var/lib/one-hpc/controller-vm-id"
# join_cost ROOT CONTEXT LOG : sets JRC, JREQ (the joiner's OneGate requests), JBYTES (their
# answers' bytes).
join_cost() {
    sim DELETE /_sim/requests >/dev/null
    "$ONEHPC_BIN" plan --root "$1" --context "$2" > "$3" 2>&1; JRC=$?
    local mine
    mine=$(sim GET /_sim/requests | jq --argjson v "$JOINER_ID" '[.[] | select(.vm_id == $v)]')
    JREQ=$(jq length <<< "$mine")
    JBYTES=$(jq '[.[].response_bytes] | add // 0' <<< "$mine")
    JPATHS=$(jq -r '[.[] | .method + " " + .path + (if .query != "" then "?" + .query else "" end)] | join(", ")' <<< "$mine")
}
declare -a JROWS=()

declare -a ROWS=()
have=0
T0=$(now)
# The elastic reads: scontrol's nodes and squeue's pending jobs; Slurm 22.05 (a Debian 12
# host) refuses `scontrol --json` first, one call more (roles/slurm/slurm_client.h).
case $(dpkg-query -W -f '${Version}' slurm-client 2>/dev/null) in
    22.*) WANT_CALLS=3;;
    *) WANT_CALLS=2;;
esac
for n in "${SIZES[@]}"; do
    echo "== $n simulated workers"
    t=$(now)
    [ "$n" -gt "$have" ] && add_workers $((have + 1)) "$n"
    have=$n
    add_gone "$n"
    echo "  set-up: $(node_count) Slurm nodes, $(sim GET "/_sim/vms" | jq --argjson s "$SERVICE" '[.[] | select(.service_id == $s)] | length') VMs in the service ($(dt "$t" "$(now)") s)"
    for c in 1 2; do
        if [ "$c" = 1 ]; then
            # Measured once under strace (children), the deletion then done; timings on copies
            # of the same situation are not possible without re-creating the node, so the
            # wall time of cycle 1 comes from this run too (strace adds little: few execs).
            cycle "$D/cycle-$n-$c.log" strace
            registered "gone-$n" && { echo "  FAIL gone-$n was not deleted"; FAIL=1; }
            w=$WALL
        else
            cycle "$D/cycle-$n-$c.log" strace
            walls=()
            for _ in 1 2 3; do cycle "$D/cycle-$n-$c-t.log"; walls+=("$WALL"); done
            w=$(median3 "${walls[@]}")
        fi
        [ "$RC" = 0 ] || { echo "  FAIL cycle $c exited with $RC:"; tail -5 "$D/cycle-$n-$c.log"; FAIL=1; }
        [ "$REQ" = 1 ] || { echo "  FAIL cycle $c made $REQ OneGate requests (want 1)"; FAIL=1; }
        what=$([ "$c" = 1 ] && echo "1 delete" || echo "steady")
        ROWS+=("$(printf '| %5s | %-8s | %16s | %11s | %15s | %-40s | %8s |' "$n" "$what" "$REQ" "${CALLS:-?}" "$CHILDREN" "$PROGS" "$w")")
        echo "  cycle $c ($what): rc=$RC, $REQ OneGate request(s), $CHILDREN child processes ($PROGS), ${w}s"
        grep 'reconcile: .* Slurm nodes' "$D/cycle-$n-$c.log" | sed 's/^/    | /'
    done
    CMD=(elastic --dry-run)
    cycle "$D/elastic-$n.log" strace
    walls=()
    for _ in 1 2 3; do cycle "$D/elastic-$n-t.log"; walls+=("$WALL"); done
    w=$(median3 "${walls[@]}")
    CMD=(reconcile)
    for kind in first wired follow; do
        root=$D/jroot; [ "$kind" = follow ] && root=$D/jroot-hint
        ctx=$D/jctx/context.sh; [ "$kind" = wired ] && ctx=$D/jctx-wired/context.sh
        join_cost "$root" "$ctx" "$D/join-$kind-$n.log"
        [ "$JRC" = 0 ] || { echo "  FAIL the $kind join's plan exited with $JRC:"; tail -5 "$D/join-$kind-$n.log"; FAIL=1; }
        # What must not grow with the service: a follow pass and a wired first join read two
        # documents of one VM each (the same bytes at every size); an unwired first join adds
        # the compact service document.
        want="GET /vms/$CTL_ID, GET /vm"
        [ "$kind" = first ] && want="GET /service, $want"
        [ "$JPATHS" = "$want" ] || { echo "  FAIL the $kind join made: $JPATHS (want: $want)"; FAIL=1; }
        if [ "$kind" != first ]; then
            [ -z "${ONE_VM_BYTES:-}" ] && ONE_VM_BYTES=$JBYTES
            [ "$JBYTES" = "$ONE_VM_BYTES" ] || { echo "  FAIL the $kind join read $JBYTES bytes at $n workers, $ONE_VM_BYTES at the first size"; FAIL=1; }
        fi
        JROWS+=("$(printf '| %5s | %-12s | %8s | %9s | %-60s |' "$n" "$kind" "$JREQ" "$JBYTES" "$JPATHS")")
        echo "  $kind join (plan): rc=$JRC, $JREQ OneGate request(s), $JBYTES bytes ($JPATHS)"
    done
    [ "$RC" = 0 ] || { echo "  FAIL the elastic cycle exited with $RC:"; tail -5 "$D/elastic-$n.log"; FAIL=1; }
    [ "$REQ" = 1 ] || { echo "  FAIL the elastic cycle made $REQ OneGate requests (want 1)"; FAIL=1; }
    [ "$CALLS" = "$WANT_CALLS" ] || { echo "  FAIL the elastic cycle made ${CALLS:-?} Slurm calls (want $WANT_CALLS)"; FAIL=1; }
    ROWS+=("$(printf '| %5s | %-8s | %16s | %11s | %15s | %-40s | %8s |' "$n" "elastic" "$REQ" "${CALLS:-?}" "$CHILDREN" "$PROGS" "$w")")
    echo "  elastic cycle (dry run): rc=$RC, $REQ OneGate request(s), $CHILDREN child processes ($PROGS), ${w}s"
    grep 'elastic (dry run): .* worker VMs' "$D/elastic-$n.log" | sed 's/^/    | /'
done
echo
echo "cost per cycle (one-hpc reconcile, one-hpc elastic --dry-run; Slurm 22.05 slurmctld in a private netns; $(nproc) CPUs)"
echo "| nodes | cycle    | OneGate requests | Slurm calls | child processes | programs                                 | wall s   |"
echo "|------:|----------|-----------------:|------------:|----------------:|------------------------------------------|---------:|"
printf '%s\n' "${ROWS[@]}"
echo
echo "OneGate cost of one worker's join (one-hpc plan: configure's reads): first without the template's wiring, first with it (wired), and a follow pass (the controller's VM id remembered)"
echo "| nodes | join         | requests | bytes     | requests made                                                |"
echo "|------:|--------------|---------:|----------:|--------------------------------------------------------------|"
printf '%s\n' "${JROWS[@]}"
echo "benchmark total: $(dt "$T0" "$(now)") s"
[ "$FAIL" = 0 ] && echo "PASS: one OneGate request per cycle at every size (and $WANT_CALLS Slurm calls for the elastic reads); a worker's wired first join and its follow pass read the same two one-VM documents at every size" && exit 0
exit 1
