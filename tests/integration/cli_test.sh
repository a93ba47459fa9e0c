#!/bin/bash
# The one-hpc program as a user runs it: commands, --help, exit codes, context --json against
# bash as the oracle, plan on the sample context.
set -uo pipefail
BIN=${ONEHPC_BIN:?} SRC=${ONEHPC_SOURCE_DIR:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0
check() {  # check NAME EXPECTED_RC CMD...
  local name=$1 want=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ "$rc" -eq "$want" ]; then passes=$((passes+1)); else
    fails=$((fails+1)); echo "FAIL $name: exit $rc, want $want"; sed 's/^/  | /' "$tmp/out" "$tmp/err" | head -20; fi
}
expect_out() {  # expect_out NAME FIXED_STRING
  if grep -qF -- "$2" "$tmp/out" "$tmp/err"; then passes=$((passes+1)); else
    fails=$((fails+1)); echo "FAIL $1: output lacks '$2'"; sed 's/^/  | /' "$tmp/out" "$tmp/err" | head -20; fi
}

check version 0 "$BIN" version;                 expect_out version "one-hpc "
check no-command 2 "$BIN"
check bad-command 2 "$BIN" frobnicate
check help 0 "$BIN" --help;                      expect_out help "configure"
for cmd in configure plan settings context version reconcile self-drain; do
  check "help-$cmd" 0 "$BIN" "$cmd" --help;      expect_out "help-$cmd" "Usage"
done
check bad-entry 2 "$BIN" configure --entry bogus

# context --json is exactly what bash sees.
ctx=$SRC/tests/data/context/sample.sh
check context-json 0 "$BIN" context --json --show-secrets --context "$ctx"
cp "$tmp/out" "$tmp/ours.json"
# shellcheck disable=SC2016  # $1 is expanded by the inner bash
env -i /bin/bash -c 'set -a; . "$1"; unset PWD SHLVL _ OLDPWD; python3 -c "import json,os; print(json.dumps(dict(os.environ)))"' _ "$ctx" >"$tmp/bash.json"
if python3 - "$tmp/ours.json" "$tmp/bash.json" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1])); bash = json.load(open(sys.argv[2]))
bash = {k: v for k, v in bash.items() if k not in ("LC_CTYPE", "SHLVL", "_")}
if ours != bash:
    for k in sorted(set(ours) | set(bash)):
        if ours.get(k) != bash.get(k): print("differs:", k, repr(ours.get(k)), repr(bash.get(k)))
    sys.exit(1)
PY
then passes=$((passes+1)); else fails=$((fails+1)); echo "FAIL context-json differs from bash"; fi

# Secrets are masked unless asked for.
printf "ONEAPP_LDAP_ADMIN_PASSWORD='hunter2hunter2'\nONEGATE_TOKEN='tok-secret-1234'\nONEAPP_ROLE='controller'\n" >"$tmp/secret.sh"
check context-masked 0 "$BIN" context --json --context "$tmp/secret.sh"
if grep -q hunter2hunter2 "$tmp/out" || grep -q tok-secret-1234 "$tmp/out"; then
  fails=$((fails+1)); echo "FAIL context-masked: a secret was printed"; else passes=$((passes+1)); fi
check context-shown 0 "$BIN" context --json --show-secrets --context "$tmp/secret.sh"
expect_out context-shown hunter2hunter2

# A malformed context is exit 3 with the line number.
printf "A='ok'\nB='unterminated\n" >"$tmp/bad.sh"
check bad-context 3 "$BIN" context --context "$tmp/bad.sh";  expect_out bad-context "line 2"
check missing-context 3 "$BIN" context --context "$tmp/nope.sh"

# Unknown role: exit 3 naming the known roles.
printf "ONEAPP_ROLE='frontend'\n" >"$tmp/role.sh"
check unknown-role 3 "$BIN" plan --context "$tmp/role.sh" --root "$tmp/root";  expect_out unknown-role "unknown role 'frontend'"

# The example of the docs: a readable plan for the sample context.
mkdir -p "$tmp/root"
"$BIN" plan --context "$ctx" --root "$tmp/root" >"$tmp/out" 2>"$tmp/err"
expect_out plan-sample "Plan for role"
if [ -n "$(find "$tmp/root" -type f)" ]; then fails=$((fails+1)); echo "FAIL plan wrote files:"; find "$tmp/root" -type f; else passes=$((passes+1)); fi

# A typo in the context is not ignored silently: plan (and configure) name the closest setting.
printf "ONEAPP_ROLE='controller'\nONEAPP_SLURM_MAX_NODE='5'\n" >"$tmp/typo.sh"
"$BIN" plan --context "$tmp/typo.sh" --root "$tmp/root" >"$tmp/out" 2>"$tmp/err"
expect_out plan-typo "warning: ONEAPP_SLURM_MAX_NODE is not a setting of one-hpc and is ignored: did you mean ONEAPP_SLURM_MAX_NODES?"

# --root never touches this machine: a storage configure under a root looks at no block device
# (they are this machine's) and stops at the first runtime operation instead of running it.
mkdir -p "$tmp/sroot/etc/systemd/system"
printf "ONEAPP_ROLE='storage'\nETH0_IP='10.1.0.3'\nETH0_MASK='255.255.255.0'\n" >"$tmp/storage.sh"
"$BIN" configure --context "$tmp/storage.sh" --root "$tmp/sroot" >"$tmp/out" 2>"$tmp/err"
expect_out storage-under-root "under --root $tmp/sroot: no block device is looked at"
if grep -q "mkfs\|formatted" "$tmp/out" "$tmp/err"; then fails=$((fails+1)); echo "FAIL storage under --root formatted"; else passes=$((passes+1)); fi

# settings --all --markdown is a table with every common setting.
check settings-all 0 "$BIN" settings --all --markdown
# shellcheck disable=SC2016  # literal backticks
expect_out settings-all '| `ONEAPP_ROLE` |'
check settings-json 0 "$BIN" settings --all;            expect_out settings-json '"name": "REPORT_READY"'

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
