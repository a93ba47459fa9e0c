#!/bin/bash
# The .deb built by CPack (`make package`): what it installs and what it depends on. Its
# maintainer scripts run for real when the lab installs it into the booted image.
set -uo pipefail
BUILD=${ONEHPC_BINARY_DIR:?}
command -v dpkg-deb >/dev/null || { echo "no dpkg-deb: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passes=0 fails=0
ok() { passes=$((passes+1)); }
bad() { fails=$((fails+1)); echo "FAIL $*"; }

(cd "$BUILD" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; echo "0 passed, 1 failed"; exit 1; }
deb=$(find "$tmp/pkg" -maxdepth 1 -name "*.deb" | head -1)
if [ -n "$deb" ]; then ok; else bad "no .deb produced"; echo "0 passed, 1 failed"; exit 1; fi
dpkg-deb -c "$deb" >"$tmp/contents"
for path in ./usr/sbin/one-hpc ./usr/lib/systemd/system/one-hpc-configure.service \
    ./usr/lib/systemd/system/one-hpc-exports-refresh.service \
    ./usr/lib/systemd/system/one-hpc-exports-refresh.timer \
    ./usr/lib/systemd/system/one-hpc-accounting-dump.service \
    ./usr/lib/systemd/system/one-hpc-accounting-dump.timer \
    ./usr/lib/systemd/system/one-hpc-reconfigure.service \
    ./usr/lib/systemd/system/one-hpc-key-server.socket \
    ./usr/lib/systemd/system/one-hpc-key-server@.service \
    ./usr/lib/udev/rules.d/65-one-hpc-context.rules; do
  if grep -q "^-.* $path\$" "$tmp/contents"; then ok; else bad "missing $path"; fi
done
# Open OnDemand's pun_pre_hook_root_cmd: a symlink (a file of the package, so dpkg removes it)
# to the binary, which reads a link of this name as `one-hpc home-create`.
hook=./usr/libexec/one-hpc/one-hpc-home-create
if grep -q "^l.* $hook -> /usr/sbin/one-hpc\$" "$tmp/contents"; then ok
else bad "$hook is not a symlink to /usr/sbin/one-hpc: $(grep " $hook" "$tmp/contents")"; fi
if [ -n "${ONEHPC_BIN:-}" ] && [ -x "$ONEHPC_BIN" ]; then
  ln -s "$ONEHPC_BIN" "$tmp/one-hpc-home-create"
  if "$tmp/one-hpc-home-create" --help 2>&1 | grep -q 'Usage: one-hpc home-create'; then ok
  else bad "a link named one-hpc-home-create does not run home-create"; fi
fi
dpkg-deb -f "$deb" Package Depends >"$tmp/fields"
if grep -q '^Package: one-hpc' "$tmp/fields"; then ok; else bad "package name"; fi
if grep -q 'libcurl' "$tmp/fields"; then ok; else bad "Depends lacks libcurl (shlibdeps)"; fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
