#!/bin/bash
# The README's ONEAPP_* table is exactly what `one-hpc settings --all --markdown` prints.
set -euo pipefail
BIN=${ONEHPC_BIN:?} SRC=${ONEHPC_SOURCE_DIR:?}
want=$("$BIN" settings --all --markdown)
have=$(sed -n '/<!-- settings:begin -->/,/<!-- settings:end -->/p' "$SRC/README.md" | sed '1d;$d')
if [ "$want" != "$have" ]; then
  echo "README.md's settings table is out of date; regenerate it with:"
  echo "  one-hpc settings --all --markdown   (between the settings:begin/end markers)"
  diff <(echo "$have") <(echo "$want") || true
  echo "0 passed, 1 failed"; exit 1
fi
echo "1 passed, 0 failed"
