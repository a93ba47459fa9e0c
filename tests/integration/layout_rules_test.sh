#!/bin/bash
# The rules that keep the source tree's layout (docs/architecture.md), checked on the text:
#   1. a role module includes no other role's header (only the dispatcher lists the roles);
#   2. no building block under roles/*/ includes a role module or the frame above it;
#   3. common/ and context/ never include roles/; roles/os/ includes only common/ and itself;
#   4. no fake in the product (fakes live in tests/fakes/);
#   5. a role module is at most 220 lines and none of its functions is over 80 lines;
#   6. role, service and OneGate attribute names are spelled only in roles/names.h;
#   7. product comments cite only what is in the repository;
#   8. every tests/unit/**/X_test.cc tests a product file X.cc or X.h at the mirrored path.
# Prints PASS/FAIL per rule and "N passed, N failed".
set -uo pipefail
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$SRC" || exit 1

passed=0 failed=0
check() {  # check NAME OUTPUT: passes when OUTPUT is empty
    if [ -z "$2" ]; then
        echo "PASS $1"; passed=$((passed + 1))
    else
        echo "FAIL $1"; printf '%s\n' "$2" | sed 's/^/    /'; failed=$((failed + 1))
    fi
}

roles="controller worker storage portal ood_worker"
role_files=()
for r in $roles; do role_files+=("roles/$r.h" "roles/$r.cc"); done
role_include_re='#include "roles/(controller|worker|storage|portal|ood_worker)\.h"'

out=""
for r in $roles; do
    for f in "roles/$r.h" "roles/$r.cc"; do
        hits=$(grep -nE "$role_include_re" "$f" | grep -v "\"roles/$r\.h\"")
        [ -z "$hits" ] || out+="$f: $hits"$'\n'
    done
done
hits=$(grep -rlE "$role_include_re" roles cli | grep -vE "^roles/(controller|worker|storage|portal|ood_worker|dispatcher)\.(h|cc)$|^cli/")
[ -z "$hits" ] || out+="role headers included by: $hits"$'\n'
check "no role module includes another role (only roles/dispatcher.cc lists them)" "$out"

check "no part under roles/*/ includes a role module, the dispatcher or configure" \
    "$(grep -rnE '#include "roles/(controller|worker|storage|portal|ood_worker|dispatcher|configure)\.h"' roles/*/)"

out=$(grep -rn '#include "roles/' common context)
out+=$(grep -rn '#include "' roles/os | grep -vE '#include "(common|roles/os)/')
check "common/ and context/ include no roles/; roles/os/ only common/ and roles/os/" "$out"

check "no fake in the product (tests/fakes/ holds them)" \
    "$(grep -rnE '^\s*(class|struct) (Fake|Stub)[A-Za-z]*' cli common context roles)"

out=""
for f in "${role_files[@]}"; do
    [[ $f == *.cc ]] || continue
    n=$(wc -l < "$f")
    [ "$n" -le 220 ] || out+="$f: $n lines (at most 220)"$'\n'
done
out+=$(python3 - "${role_files[@]}" <<'EOF'
import re, sys
start = re.compile(r'^( *)(?!//)(?!(if|for|while|switch|namespace|class|struct|enum)\b)\S.*\)\s*'
                   r'(const)?\s*(override)?\s*(->\s*\S+)?\s*\{\s*$')
for f in sys.argv[1:]:
    if not f.endswith('.cc'):
        continue
    lines = open(f).read().split('\n')
    i = 0
    while i < len(lines):
        m = start.match(lines[i])
        if m:
            indent = m.group(1)
            j = i + 1
            while j < len(lines) and lines[j] != indent + '}':
                j += 1
            if j - i + 1 > 80:
                print(f'{f}:{i + 1}: {j - i + 1} lines: {lines[i].strip()[:70]}')
            i = j
        i += 1
EOF
)
check "role modules read like their documentation (<= 220 lines, functions <= 80 lines)" "$out"

names='"(controller|worker|storage|portal|ood-worker|OneSlurm|Open OnDemand|READY|OOD_USERS|SLURM_CONTROLLER_ADDR|SLURM_CONTROLLER_HOST|SLURM_MUNGE_KEY_BASE64|SLURM_NODENAME)"'
check "role, service and OneGate attribute names only in roles/names.h" \
    "$(grep -rnE "$names" cli common context roles | grep -v '^roles/names.h:' |
        sed -E 's#//.*$##' | grep -E "$names")"

check "product comments cite only what is in the repository" \
    "$(grep -rnE 'shared/reference|\.\./shared|[Ii]ssue #[0-9]|\b[Tt]rap [0-9]' cli common context roles)"

out=""
while IFS= read -r t; do
    rel=${t#tests/unit/}
    base=${rel%_test.cc}
    case $rel in
        simulator/*) product="tests/$base";;
        *) product=$base;;
    esac
    [ -e "$product.cc" ] || [ -e "$product.h" ] || out+="$t: no $product.cc or .h"$'\n'
done < <(find tests/unit -name '*_test.cc' | sort)
leftover=$(find tests/unit -maxdepth 1 -name '*.cc' -o -maxdepth 1 -name '*.h')
[ -z "$leftover" ] || out+="flat files left at the top of tests/unit: $leftover"$'\n'
check "tests/unit mirrors the product tree (X_test.cc beside the mirrored X.cc)" "$out"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
