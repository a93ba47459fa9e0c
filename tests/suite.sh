#!/bin/bash
# suite.sh - the whole of `make test` (the Makefile installs the packages, then runs this), laid
# out for a 2-core machine so that no core waits while another phase could use it:
#
#   background from the start   lab_prepare.sh and vm_prepare.sh oneslurm: the lab's template
#                               and role-package layers, the VM base image and the OneSlurm
#                               packages layer (the archive and dpkg, one TCG build VM)
#   1 build-product             the program, the simulator, the stand-in generator, the .deb
#   background stream "vm+lab"  the .deb's checks (label package), the container lab (label
#                               lab), then the VM smoke (label vm-smoke, one vCPU per VM; by
#                               then its packages layer is ready): mostly waiting on lintian,
#                               containers, VMs and timers
#   2 build-asan, build-fuzz    compiled meanwhile
#   3 asan tests, fuzz tests    unit (one process) + integration under ASan/UBSan, every fuzz
#                               target
#   end                         waits for the stream; prints every phase's time, every skipped
#                               test with its reason, and the counts
#
# The unit and integration tests run once, under ASan/UBSan (the normal build compiles only
# what the lab and the VMs use). Exit status 0 only when every phase passed. Logs and JUnit
# files: $BUILD/suite/. Environment: BUILD, BUILD_ASAN, BUILD_FUZZ (the Makefile's),
# ONEHPC_VM_CPUS (default 1 here: the smoke runs beside a build).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build} BUILD_ASAN=${BUILD_ASAN:-build-asan} BUILD_FUZZ=${BUILD_FUZZ:-build-fuzz}
MAKE=${MAKE:-make}
LOGS=$PWD/$BUILD/suite
rm -rf "$LOGS"
mkdir -p "$LOGS"
export ONEHPC_VM_CPUS=${ONEHPC_VM_CPUS:-1}
T0=$(date +%s)
declare -a PHASES=()   # "name start end status"
declare -A BG_PID=() BG_START=()

elapsed() { echo $(( $(date +%s) - T0 )); }
say() { printf '=== suite %s +%ss: %s\n' "$(date +%T)" "$(elapsed)" "$*"; }
record() { PHASES+=("$1 $2 $(elapsed) $3"); }

# phase NAME COMMAND...: in the foreground, its output to the terminal and to NAME.log.
phase() {
    local name=$1 start rc; shift
    start=$(elapsed)
    say "$name: started"
    "$@" 2>&1 | tee "$LOGS/$name.log"
    rc=${PIPESTATUS[0]}
    record "$name" "$start" "$rc"
    say "$name: finished, exit status $rc"
    return "$rc"
}
# background NAME COMMAND...: in the background, its output to NAME.log (printed at the end).
background() {
    local name=$1; shift
    BG_START[$name]=$(elapsed)
    say "$name: started in the background (log: $LOGS/$name.log)"
    "$@" >"$LOGS/$name.log" 2>&1 &
    BG_PID[$name]=$!
}
# join NAME: waits for a background phase and records it.
join() {
    local name=$1 rc
    wait "${BG_PID[$name]}"
    rc=$?
    record "$name" "${BG_START[$name]}" "$rc"
    say "$name: finished, exit status $rc"
    return "$rc"
}
# ctest_run BUILD_DIR NAME CTEST-ARGS...: ctest with a JUnit report for the summary.
# shellcheck disable=SC2317  # these are run through phase and background
ctest_run() {
    local dir=$1 name=$2; shift 2
    ctest --test-dir "$dir" --output-on-failure --output-junit "$LOGS/$name.xml" "$@"
}

# shellcheck disable=SC2317
prepare() {
    local rc=0
    bash tests/lab/lab_prepare.sh || rc=1
    ONEHPC_BINARY_DIR=$PWD/$BUILD bash tests/vm/vm_prepare.sh oneslurm || rc=1
    return "$rc"
}
# shellcheck disable=SC2317
vm_and_lab() {
    local rc=0
    ctest_run "$BUILD" package -L '^package$' || rc=1
    ctest_run "$BUILD" lab -L '^lab$' || rc=1
    ctest_run "$BUILD" vm-smoke -L '^vm-smoke$' || rc=1
    return "$rc"
}

# The unit tests (hermetic: no root, no network, no shared state) as one process, which
# writes its own JUnit report: through ctest (one process per test case, about 700) they
# took 371 s under ASan, in one process about 30 s (this machine, 2026-12-05). The
# integration tests keep a process each: they mount, fork servers and enter namespaces.
# A unit_tests that dies before writing its report is counted as a failure by the summary.
# shellcheck disable=SC2317
asan_tests() {
    local rc=0 unit_rc=0
    rm -f "$LOGS/unit.exit"
    ONEHPC_SOURCE_DIR=$PWD ONEHPC_BINARY_DIR=$PWD/$BUILD_ASAN ONEHPC_BIN=$PWD/$BUILD_ASAN/one-hpc \
        "$BUILD_ASAN/tests/unit_tests" --gtest_brief=1 --gtest_output="xml:$LOGS/unit.xml" ||
        unit_rc=$?
    if [ "$unit_rc" != 0 ]; then
        rc=1
        echo "$unit_rc" >"$LOGS/unit.exit"
        say "unit_tests exited $unit_rc"
    fi
    ctest_run "$BUILD_ASAN" asan -L '^integration$' || rc=1
    return "$rc"
}

failed=0
background prepare prepare
phase build-product "$MAKE" --no-print-directory build-product || failed=1
if [ $failed = 0 ]; then
    background vm+lab vm_and_lab
else
    say "vm+lab: not started (the product did not build)"
fi
phase build-asan "$MAKE" --no-print-directory build-asan || failed=1
phase build-fuzz "$MAKE" --no-print-directory build-fuzz || failed=1
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    phase asan-tests asan_tests || failed=1
phase fuzz-tests ctest_run "$BUILD_FUZZ" fuzz -L '^fuzz$' || failed=1
join prepare || say "prepare failed: the tests built what it could not (see its log)"
if [ -n "${BG_PID[vm+lab]:-}" ]; then
    join vm+lab || failed=1
    echo
    say "the output of the background stream vm+lab:"
    cat "$LOGS/vm+lab.log"
fi
echo
say "prepare's output:"
cat "$LOGS/prepare.log"

# ---- summary -------------------------------------------------------------------------------
echo
echo "=== make test: time of each phase (seconds from the start; wall $(elapsed) s)"
printf '%-16s %7s %7s %7s  %s\n' phase start end seconds result
for p in "${PHASES[@]}"; do
    read -r name start end rc <<<"$p"
    printf '%-16s %7s %7s %7s  %s\n' "$name" "$start" "$end" $((end - start)) \
        "$([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")"
done
# Phases that failed outside a test (a build): counted as failures of their own.
broken=""
for p in "${PHASES[@]}"; do
    read -r name _ _ rc <<<"$p"
    case $name in build-*) [ "$rc" = 0 ] || broken+="$name ";; esac
done
if [ $failed = 0 ]; then say "make test passed"; else say "make test FAILED"; fi
python3 - "$LOGS" "$broken" <<'EOF'
import glob, os, re, sys
import xml.etree.ElementTree as ET
logs = sys.argv[1]
passed = failed = skipped = 0
skips, failures = [], []
for phase in sys.argv[2].split():
    failed += 1
    failures.append(f"phase {phase} (see {logs}/{phase}.log)")
# unit_tests writes its own report (GoogleTest's JUnit); if it died first, that is a failure.
unit_exit = os.path.join(logs, "unit.exit")
if os.path.exists(unit_exit):
    code = open(unit_exit).read().strip()
    try:
        unit_failures = int(ET.parse(os.path.join(logs, "unit.xml")).getroot().get("failures", "0"))
    except (OSError, ET.ParseError):
        unit_failures = 0
    if unit_failures == 0:
        failed += 1
        failures.append(f"unit_tests exited {code} without a failed test in its report "
                        f"(see {logs}/asan-tests.log)")
for path in sorted(glob.glob(os.path.join(logs, "*.xml"))):
    run = os.path.basename(path)[:-4]
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        failures.append(f"{run}: unreadable JUnit report ({e})")
        failed += 1
        continue
    for case in root.iter("testcase"):
        name = case.get("name")
        # GoogleTest's report names the case and its suite apart; ctest's repeats the name.
        if case.get("classname") and case.get("classname") != name:
            name = f"{case.get('classname')}.{name}"
        out = (case.findtext("system-out") or "")
        if case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
            skipped += 1
            # The reason as the test printed it (SKIPPED ..., a gtest skip message), else ctest's.
            # gtest prints "file:line: Skipped" and the message on the next line.
            all_lines = [l.strip(" #") for l in out.splitlines()]
            lines = []
            for i, l in enumerate(all_lines):
                if re.search(r"SKIPP?ED|[Ss]kipp", l) and l:
                    if l.endswith("Skipped") and i + 1 < len(all_lines) and all_lines[i + 1]:
                        l += ": " + all_lines[i + 1]
                    lines.append(l)
            reason = lines[0] if lines else (case.find("skipped").get("message")
                                             if case.find("skipped") is not None else "not run")
            reason = ": ".join(part for part in reason.splitlines() if part)
            skips.append(f"{run}: {name}: {reason[:300]}")
        elif case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            failures.append(f"{run}: {name}")
        else:
            passed += 1
print()
print(f"=== skipped tests: {len(skips)}")
for s in skips:
    print("  SKIPPED " + s)
if failures:
    print(f"=== failed tests: {len(failures)}")
    for f in failures:
        print("  FAILED " + f)
print()
print(f"suite: {passed} passed, {failed} failed, {skipped} skipped")
EOF
exit $failed
