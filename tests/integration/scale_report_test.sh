#!/bin/bash
# scale_report_test.sh - tests/bench/scale_report.py (the figures of `make test-scale`) on a
# made-up size of two workers: the join steps from each worker's journal, the requests of a join
# counted up to its READY=YES (not its follow passes), the key server's answer times, the
# percentiles, a worker that never registered left out of the join figures, the plot.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPORT=$HERE/../bench/scale_report.py
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
FAIL=0
check() {   # check DESCRIPTION GOT WANT
    if [ "$2" = "$3" ]; then echo "  ok    $1"; else echo "  FAIL  $1: got '$2', want '$3'"; FAIL=1; fi
}

# Journal entries: realtime in microseconds, as journalctl -o json writes them.
entry() { printf '{"__REALTIME_TIMESTAMP":"%s","MESSAGE":"%s"}\n' "$(( $1 * 1000000 + $2 * 1000 ))" "$3"; }
d=$T/scale-2; mkdir -p "$d"
echo 100 > "$d/w1.t0"; echo 11 > "$d/w1.vmid"
{ entry 101 0 "Starting one-hpc-configure.service"
  entry 101 500 "worker: controller slurm-one-controller at 10.0.0.1 (VM 10)"
  entry 102 0 "op(7): fetch the munge key from the controller's key server at 10.0.0.1:6830 [finished]"
  entry 104 0 "worker: node slurm-one-worker-11 registered (state IDLE)"; } > "$d/w1.json"
echo 100 > "$d/w2.t0"; echo 12 > "$d/w2.vmid"
{ entry 103 0 "Starting one-hpc-configure.service"
  entry 104 0 "worker: controller slurm-one-controller at 10.0.0.1 (VM 10)"
  entry 110 0 "worker: node slurm-one-worker-12 registered (state IDLE)"; } > "$d/w2.json"
echo 100 > "$d/w3.t0"; echo 13 > "$d/w3.vmid"   # never registered
entry 101 0 "Starting one-hpc-configure.service" > "$d/w3.json"
cat > "$d/requests.json" <<'EOF'
[{"vm_id":11,"method":"GET","path":"/service","body":"","response_bytes":1000},
 {"vm_id":12,"method":"GET","path":"/service","body":"","response_bytes":1000},
 {"vm_id":11,"method":"PUT","path":"/vm","body":"data=READY%3DYES&type=1","response_bytes":0},
 {"vm_id":11,"method":"GET","path":"/vm","body":"","response_bytes":300},
 {"vm_id":10,"method":"GET","path":"/vms/11","body":"","response_bytes":500},
 {"vm_id":12,"method":"GET","path":"/vm","body":"","response_bytes":200},
 {"vm_id":12,"method":"PUT","path":"/vm","body":"data=READY%3DYES&type=1","response_bytes":0}]
EOF
u=one-hpc-key-server@1-10.0.0.1:6830-10.0.0.2:1.service
{ printf '{"__REALTIME_TIMESTAMP":"%s","UNIT":"%s","JOB_TYPE":"start","JOB_RESULT":"done","MESSAGE":"Started"}\n' 101000000 "$u"
  printf '{"__REALTIME_TIMESTAMP":"%s","_SYSTEMD_UNIT":"%s","MESSAGE":"key-serve: sent"}\n' 101100000 "$u"
  printf '{"__REALTIME_TIMESTAMP":"%s","UNIT":"%s","MESSAGE_ID":"7ad2d189f7e94e70a38c781354912448","MESSAGE":"%s: Deactivated successfully."}\n' 101250000 "$u" "$u"
} > "$d/key-server.json"
printf '0\n1\n3\n2\n' > "$d/nconnections"

results=$T/results.tsv
python3 "$REPORT" header > "$results"
python3 "$REPORT" row "$d" 2 0.5 10.5 0.3 2 0 0.07 0.08 >> "$results" || { echo "  FAIL  row"; exit 1; }
fig() { python3 "$REPORT" show "$results" 2 | awk -v k="$1" '$1 == k {print $2}'; }
check "joins: the worker that never registered is left out" "$(fig joins)" 2
check "join p50 (nearest rank of 4 s and 10 s)" "$(fig join_p50_s)" 4.00
check "join p95" "$(fig join_p95_s)" 10.00
check "boot p95: container start to configure's first line" "$(fig boot_p95_s)" 3.00
check "discover p50: first line to the controller found" "$(fig discover_p50_s)" 0.50
check "key p95: to the fetch's end, 0 without a fetch" "$(fig key_p95_s)" 0.50
check "register p95" "$(fig register_p95_s)" 6.00
check "requests of a join counted up to its READY=YES" "$(fig onegate_req_per_join_max)" 3
check "bytes of a join, largest" "$(fig onegate_bytes_per_join_max)" 1200
check "every request in the total" "$(fig onegate_req_total)" 7
check "the key server's most concurrent connections" "$(fig key_max_concurrent)" 3
check "a key answer: Started to Deactivated" "$(fig key_answer_p50_s)" 0.25
check "the lab's start time kept" "$(fig starts_s)" 0.5
python3 "$REPORT" plot "$results" "$T/scale.svg"
check "the plot is an SVG with a line per figure" "$(grep -c "<polyline" "$T/scale.svg")" 12
exit "$FAIL"
