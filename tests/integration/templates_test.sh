#!/bin/bash
# The OneFlow service templates and VM templates under templates/: JSON, the OneFlow 7.x
# JSON Schema, role graph, ${role...} references, inputs against `one-hpc settings --all`,
# and byte-identical regeneration. The checks are in templates_test.py (Debian's python3,
# which has python3-jsonschema).
set -euo pipefail
: "${ONEHPC_BIN:?}" "${ONEHPC_SOURCE_DIR:?}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
exec "$py" "$ONEHPC_SOURCE_DIR/tests/integration/templates_test.py"
