#!/bin/bash
# The operator guide's ONEAPP_* table (docs/operator-guide.md) is exactly what
# `one-hpc settings --all --markdown` prints.
set -euo pipefail
BIN=${ONEHPC_BIN:?} SRC=${ONEHPC_SOURCE_DIR:?}
doc=$SRC/docs/operator-guide.md
want=$("$BIN" settings --all --markdown)
have=$(sed -n '/<!-- settings:begin -->/,/<!-- settings:end -->/p' "$doc" | sed '1d;$d')
if [ -z "$have" ]; then
  echo "docs/operator-guide.md has no table between <!-- settings:begin --> and <!-- settings:end -->"
  echo "0 passed, 1 failed"; exit 1
fi
if [ "$want" != "$have" ]; then
  echo "docs/operator-guide.md's settings table is out of date; regenerate it with:"
  echo "  one-hpc settings --all --markdown   (between the settings:begin/end markers)"
  diff <(echo "$have") <(echo "$want") || true
  echo "0 passed, 1 failed"; exit 1
fi
echo "1 passed, 0 failed"
