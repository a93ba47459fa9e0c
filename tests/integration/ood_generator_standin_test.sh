#!/bin/bash
# The stand-in of Open OnDemand's update_ood_portal (tests/fakes/ood_portal_generator_main.cc,
# which the VM lab's stand-in `ondemand` package installs) behaves as its header says OSC's
# does (ood-portal-generator's application.rb), on files in a temporary directory (APACHE, SUM,
# -c): the first run writes the virtual host and its checksum (3 with --detailed-exitcodes), a
# second finds it unchanged (0); a comment added by hand does not count, another line does: the
# file is left and the new one written beside it (4); --force replaces it (3), keeping the old
# one with a time stamp; without --detailed-exitcodes a change is 0; a bad option exits 1.
set -uo pipefail
BIN=${ONEHPC_BINARY_DIR:-build}/tests/update-ood-portal-standin
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; [ $# -lt 2 ] || printf '%s\n' "$2" | sed 's/^/    /'; failed=$((failed + 1)); }
[ -x "$BIN" ] || { echo "FAIL $BIN is not built (make build-asan builds it)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export APACHE=$work/ood-portal.conf SUM=$work/ood_portal.sha256sum
printf '%s\n' 'servername: portal.example.org' 'port: 443' 'ssl:' '  - SSLEngine On' \
    'auth:' '  - AuthType Basic' > "$work/ood_portal.yml"
gen() { "$BIN" -c "$work/ood_portal.yml" "$@" >"$work/out" 2>&1; echo $?; }
expect() {  # expect NAME WANT-EXIT GOT-EXIT [CONDITION-COMMAND...]
    local name=$1 want=$2 got=$3; shift 3
    if [ "$got" = "$want" ] && { [ $# -eq 0 ] || "$@"; }; then pass "$name"
    else fail "$name" "exit $got (want $want): $(cat "$work/out")"; fi
}
expect "the first run writes the virtual host and its checksum: 3" 3 "$(gen --detailed-exitcodes)" \
    grep -q 'ServerName portal.example.org' "$APACHE"
if grep -q "^[0-9a-f]\{64\} $APACHE\$" "$SUM"; then pass "the checksum file: a SHA-256 and the virtual host's path"
else fail "the checksum file: a SHA-256 and the virtual host's path" "$(cat "$SUM")"; fi
expect "a second run: unchanged, 0" 0 "$(gen --detailed-exitcodes)" grep -q 'No change' "$work/out"
echo '# a comment' >> "$APACHE"
sed -i 's/port: 443/port: 8443/' "$work/ood_portal.yml"
expect "a comment added by hand does not count: replaced, 3" 3 "$(gen --detailed-exitcodes)" \
    grep -q ':8443>' "$APACHE"
echo 'ServerSignature Off' >> "$APACHE"
before=$(sha256sum < "$APACHE")
sed -i 's/port: 8443/port: 443/' "$work/ood_portal.yml"
expect "a line added by hand: the file left as it is, the new one beside it: 4" 4 "$(gen --detailed-exitcodes)" \
    test "$(sha256sum < "$APACHE")" = "$before" -a -s "$APACHE.new"
expect "the same without --detailed-exitcodes: 0" 0 "$(gen)"
expect "--force replaces it: 3, the old one kept with a time stamp" 3 "$(gen --detailed-exitcodes --force)" \
    bash -c "! grep -q ServerSignature '$APACHE' && ls '$APACHE'.2* >/dev/null"
expect "a bad option: 1, the reason and the help hint" 1 "$(gen --bogus)" grep -q "update_ood_portal --help" "$work/out"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
