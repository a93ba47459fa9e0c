#!/bin/bash
# Every C++ file of the tree is formatted as .clang-format says (Google style, 100 columns).
# Prints one FAIL per file that differs (with the first lines of the diff) and
# "N passed, N failed".
set -uo pipefail
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$SRC" || exit 1
if ! command -v clang-format >/dev/null; then
    echo "FAIL clang-format is installed (make deps installs it)"
    echo "0 passed, 1 failed"
    exit 1
fi
passed=0 failed=0
while IFS= read -r f; do
    if diff=$(clang-format --style=file "$f" | diff -u "$f" - | head -n 12) && [ -z "$diff" ]; then
        passed=$((passed + 1))
    else
        echo "FAIL $f is formatted (clang-format -i $f)"
        printf '%s\n' "$diff" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
done < <(find cli common context roles tests -name '*.cc' -o -name '*.h' | grep -v '/corpus/' | sort)
echo "PASS $passed files formatted as .clang-format says"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
