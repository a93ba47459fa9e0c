#!/bin/bash
# Every shipped unit passes `systemd-analyze verify` with no output at all (an unknown key is
# only a warning with exit 0, so any output fails the test).
set -uo pipefail
SRC=${ONEHPC_SOURCE_DIR:?} BIN=${ONEHPC_BIN:?}
command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# ExecStart paths are checked: render the units with the built binary's path.
mkdir -p "$tmp/units"
for unit in "$SRC"/install/systemd/*.service "$SRC"/install/systemd/*.timer \
    "$SRC"/install/systemd/*.socket "$SRC"/install/systemd/*.path; do
  [ -e "$unit" ] || continue
  sed "s#/usr/sbin/one-hpc#$BIN#g" "$unit" >"$tmp/units/$(basename "$unit")"
done
passes=0 fails=0
for unit in "$tmp"/units/*; do
  out=$(cd "$tmp/units" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no "$(basename "$unit")" 2>&1); rc=$?
  # The units name units of packages that are not installed here (slurmd, munge, one-context):
  # ordering on a missing unit is fine and systemd-analyze does not complain about it.
  if [ $rc -ne 0 ] || [ -n "$out" ]; then
    fails=$((fails+1)); echo "FAIL $(basename "$unit") (exit $rc):"
    while IFS= read -r line; do echo "  | $line"; done <<<"$out"
  else passes=$((passes+1)); fi
done
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
