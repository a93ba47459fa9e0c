#!/bin/bash
# Runs `shellcheck -x` over every shell script outside the C++ tree: the suite's driver, the lab
# and VM tests and their libraries, the benchmark, the Debian maintainer scripts, image-build/ and these integration
# tests. One PASS/FAIL per file. shellcheck is a test dependency (the Makefile's DEPS_TEST):
# missing fails.
set -uo pipefail
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; [ $# -lt 2 ] || printf '%s\n' "$2" | sed 's/^/    /'; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

if ! command -v shellcheck >/dev/null; then
    fail "shellcheck is installed" "apt-get install shellcheck"
    finish
fi

scripts=("$SRC"/tests/*.sh "$SRC"/tests/lab/*.sh "$SRC"/tests/vm/*.sh "$SRC"/tests/bench/*.sh
         "$SRC"/install/debian/preinst "$SRC"/install/debian/postinst
         "$SRC"/install/debian/prerm "$SRC"/install/debian/postrm
         "$SRC"/image-build/*.sh "$SRC"/image-build/base/context-lite
         "$SRC"/tests/integration/*.sh)
checked=0
for s in "${scripts[@]}"; do
    [ -f "$s" ] || continue
    rel=${s#"$SRC"/}
    checked=$((checked + 1))
    # From the top of the tree, as image_validate_test.sh does; `source` directives name their
    # files relative to the script (SCRIPTDIR), so -x follows them from anywhere.
    if out=$(cd "$SRC" && shellcheck -x "$rel" 2>&1); then
        pass "shellcheck $rel"
    else
        fail "shellcheck $rel" "$out"
    fi
done
[ "$checked" -gt 0 ] || fail "found shell scripts under $SRC"
finish
