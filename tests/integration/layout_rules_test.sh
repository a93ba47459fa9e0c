#!/bin/bash
# The rules that keep the source tree's layout (docs/architecture.md), checked on the text:
#   1. a role module includes no other role's header (only the dispatcher lists the roles);
#   2. no building block under roles/*/ includes a role module or the frame above it;
#   3. common/ and context/ never include roles/; roles/os/ includes only common/ and itself;
#   4. no fake in the product (fakes live in tests/fakes/);
#   5. a role module is at most 220 lines and none of its functions is over 80 lines;
#   6. role, service and OneGate attribute names are spelled only in roles/names.h;
#   7. product comments cite only what is in the repository;
#   8. every tests/unit/**/X_test.cc tests a product file X.cc or X.h at the mirrored path;
#   9. no function of the product is over 80 lines, but those listed in long_functions.txt, each
#      at most as long as listed (tests/integration/function_lengths.py, itself checked on
#      planted violations);
#  10. the programs that timers and hooks run (roles/timers/) are included only by cli/,
#      roles/status and each other: the building blocks they use never depend on them.
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

check "roles/timers/ is included only by cli/, roles/status and roles/timers/" \
    "$(grep -rn '#include "roles/timers/' common context roles | grep -vE '^roles/(timers/[^:]*|status\.(h|cc)):')"

check "no fake in the product (tests/fakes/ holds them)" \
    "$(grep -rnE '^\s*(class|struct) (Fake|Stub)[A-Za-z]*' cli common context roles)"

out=""
for f in "${role_files[@]}"; do
    [[ $f == *.cc ]] || continue
    n=$(wc -l < "$f")
    [ "$n" -le 220 ] || out+="$f: $n lines (at most 220)"$'\n'
done
cc_files=()
for f in "${role_files[@]}"; do [[ $f == *.cc ]] && cc_files+=("$f"); done
out+=$(python3 tests/integration/function_lengths.py 80 "${cc_files[@]}")
check "role modules read like their documentation (<= 220 lines, functions <= 80 lines)" "$out"

# Every function of the product: at most 80 lines, but for those listed in long_functions.txt
# (each at most its listed length, the list only shrinking).
mapfile -t product_sources < <(find cli common context roles -name '*.cc' -o -name '*.h' | sort)
check "no function of the product over 80 lines but the listed ones, none longer than listed" \
    "$(python3 tests/integration/function_lengths.py 80 --allow tests/integration/long_functions.txt "${product_sources[@]}")"

# The scanner itself, on planted violations: a long function after one whose signature wraps
# (the case the earlier scanner skipped), a listed function that grew, an unlisted long one.
plant=$(mktemp -d)
{
    printf 'int Wrapped(int a,\n            int b) {\n  return a + b;\n}\n\n'
    printf 'void Long() {\n'; for i in $(seq 85); do printf '  Step(%d);  // "}" and { in text\n' "$i"; done; printf '}\n'
    printf 'auto kLambda = [] {\n  return 1;\n};\n'
} > "$plant/a.cc"
printf '%s\n' "$plant/a.cc Long 50" > "$plant/allow.txt"
out=""
got=$(python3 tests/integration/function_lengths.py 80 "$plant/a.cc")
grep -q "a.cc:6: 87 lines: Long" <<<"$got" || out+="a long function after a wrapped signature not seen: '$got'"$'\n'
got=$(python3 tests/integration/function_lengths.py 80 --allow "$plant/allow.txt" "$plant/a.cc")
grep -q "Long (listed at 50: it grew)" <<<"$got" || out+="a listed function that grew not seen: '$got'"$'\n'
got=$(python3 tests/integration/function_lengths.py 90 "$plant/a.cc")
[ -z "$got" ] || out+="a function under the limit reported: '$got'"$'\n'
rm -rf "$plant"
check "the function-length scanner sees planted violations (wrapped signature, listed and grown)" "$out"

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
