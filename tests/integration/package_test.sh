#!/bin/bash
# The .deb built by CPack (`make package`): what it installs, what it depends on, lintian with
# no error or warning (the overrides are reviewed, install/debian/lintian-overrides), the
# hardening of the binary, the debug symbols in one-hpc-dbgsym, and the manual page against
# the program's own help. Its maintainer scripts run for real in the lab
# (tests/lab/lab_package_order_test.sh: both install orders with one-context, remove, purge).
# ONEHPC_PACKAGE_DEB=FILE checks that package (and the -dbgsym .ddeb beside it) instead of
# one made from the build: the VM smoke checks so the package built for Debian 13
# (image-build/build-deb.sh), with the host's lintian.
set -uo pipefail
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
given=${ONEHPC_PACKAGE_DEB:-}
[ -n "$given" ] || BUILD=${ONEHPC_BINARY_DIR:?}
command -v dpkg-deb >/dev/null || { echo "no dpkg-deb: skipped"; exit 77; }
# The package is made from the normal build (`make package`); a sanitizer build (build-asan,
# where `make test` runs the integration label again) has no hardening flags by design.
if [ -z "$given" ] && grep -Eq '^ONEHPC_SANITIZE:[A-Z]+=.+' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "a sanitizer build ($BUILD): the package is checked on the normal build; skipped"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passes=0 fails=0
ok() { passes=$((passes+1)); }
bad() { fails=$((fails+1)); echo "FAIL $*"; }

if [ -n "$given" ]; then
  mkdir -p "$tmp/pkg" && cp "$given" "$(dirname "$given")"/one-hpc-dbgsym_*.ddeb "$tmp/pkg/" 2>/dev/null
else
  (cd "$BUILD" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; echo "0 passed, 1 failed"; exit 1; }
fi
deb=$(find "$tmp/pkg" -maxdepth 1 -name "one-hpc_*.deb" | head -1)
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
    ./usr/lib/systemd/system/oneslurm-elastic.path ./usr/lib/systemd/system/oneslurm-elastic.service \
    ./usr/lib/udev/rules.d/65-one-hpc-context.rules ./usr/lib/systemd/system-preset/80-one-hpc.preset \
    ./usr/share/doc/one-hpc/copyright ./usr/share/doc/one-hpc/changelog.gz \
    ./usr/share/man/man8/one-hpc.8.gz ./usr/share/lintian/overrides/one-hpc; do
  if grep -q "^-.* $path\$" "$tmp/contents"; then ok; else bad "missing $path"; fi
done
# Open OnDemand's pun_pre_hook_root_cmd: a symlink (a file of the package, so dpkg removes it)
# to the binary, which reads a link of this name as `one-hpc home-create`; relative, as both
# ends are under /usr.
hook=./usr/libexec/one-hpc/one-hpc-home-create
if grep -q "^l.* $hook -> \.\./\.\./sbin/one-hpc\$" "$tmp/contents"; then ok
else bad "$hook is not a relative symlink to ../../sbin/one-hpc: $(grep " $hook" "$tmp/contents")"; fi
# The one-context hook is a file of the package (whatever the installation order).
if grep -q "^l.* ./etc/one-context.d/net-90-one-hpc -> /usr/sbin/one-hpc\$" "$tmp/contents"; then ok
else bad "no /etc/one-context.d/net-90-one-hpc link in the package"; fi
if [ -n "${ONEHPC_BIN:-}" ] && [ -x "$ONEHPC_BIN" ]; then
  ln -s "$ONEHPC_BIN" "$tmp/one-hpc-home-create"
  if "$tmp/one-hpc-home-create" --help 2>&1 | grep -q 'Usage: one-hpc home-create'; then ok
  else bad "a link named one-hpc-home-create does not run home-create"; fi
fi
dpkg-deb -f "$deb" Package Depends Maintainer Description >"$tmp/fields"
if grep -q '^Package: one-hpc' "$tmp/fields"; then ok; else bad "package name"; fi
if grep -q 'libcurl' "$tmp/fields"; then ok; else bad "Depends lacks libcurl (shlibdeps)"; fi
if grep -q 'init-system-helpers' "$tmp/fields"; then ok; else bad "Depends lacks init-system-helpers (deb-systemd-helper)"; fi
if [ "$(sed -n '/^Description:/,$p' "$tmp/fields" | wc -l)" -gt 3 ]; then ok; else bad "no extended description"; fi

# ---- the binary: stripped, hardened, its symbols in the dbgsym package
dpkg-deb -x "$deb" "$tmp/root"
bin=$tmp/root/usr/sbin/one-hpc
if ! readelf -S "$bin" | grep -qE '\.debug_|\.symtab'; then ok; else bad "the packaged binary is not stripped"; fi
readelf -d "$bin" >"$tmp/dynamic"; readelf -lW "$bin" >"$tmp/segments"; readelf -h "$bin" >"$tmp/header"
if grep -q 'FLAGS_1.*NOW' "$tmp/dynamic" || grep -q '(BIND_NOW)' "$tmp/dynamic"; then ok; else bad "not linked with -z now"; fi
if grep -q GNU_RELRO "$tmp/segments"; then ok; else bad "no RELRO segment"; fi
if grep -q 'DYN (Position-Independent Executable' "$tmp/header"; then ok; else bad "not a PIE: $(grep Type: "$tmp/header")"; fi
nm -D "$bin" >"$tmp/dynsyms" 2>/dev/null
if grep -q ' __stack_chk_fail' "$tmp/dynsyms"; then ok; else bad "no stack protector (__stack_chk_fail)"; fi
if grep -E ' U __[a-z0-9_]+_chk' "$tmp/dynsyms" | grep -vq '__stack_chk_fail'; then ok; else bad "no fortified libc call (_FORTIFY_SOURCE)"; fi
ddeb=$(find "$tmp/pkg" -maxdepth 1 -name "one-hpc-dbgsym_*.ddeb" | head -1)
if [ -n "$ddeb" ]; then
  ok
  build_id=$(readelf -n "$bin" | sed -n 's/.*Build ID: //p')
  if dpkg-deb -c "$ddeb" | grep -q "usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug"; then ok
  else bad "one-hpc-dbgsym has no symbols for build id $build_id"; fi
else
  bad "no one-hpc-dbgsym .ddeb beside the .deb: $(ls "$tmp/pkg")"
fi

# ---- the manual page: rendered without a warning, every command and exit code in it
man8=$tmp/root/usr/share/man/man8/one-hpc.8.gz
if command -v man >/dev/null; then
  warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$man8" 2>&1 >/dev/null)
  if [ -z "$warnings" ]; then ok; else bad "man --warnings: $warnings"; fi
fi
zcat "$man8" >"$tmp/one-hpc.8"
if [ -n "${ONEHPC_BIN:-}" ] && [ -x "$ONEHPC_BIN" ]; then
  # The commands of `one-hpc --help` (CLI11: "Subcommands:" then "  name   description").
  commands=$("$ONEHPC_BIN" --help | sed -n '/^Subcommands:/,$p' | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p')
  [ -n "$commands" ] || bad "no command found in one-hpc --help"
  for c in $commands; do
    roff=${c//-/\\-}
    if grep -qE "^\.BR? ${roff//\\/\\\\}( |$)" "$tmp/one-hpc.8"; then ok; else bad "one-hpc(8) has no entry for '$c'"; fi
  done
  if grep -q "one-hpc $("$ONEHPC_BIN" version | awk '{print $2}')" "$tmp/one-hpc.8"; then ok
  else bad "one-hpc(8) does not carry the program's version"; fi
fi
for code in 0 1 2 3 4 5; do
  if sed -n '/^\.SH EXIT STATUS/,/^\.SH /p' "$tmp/one-hpc.8" | grep -qx "\.B $code"; then ok
  else bad "one-hpc(8) EXIT STATUS lacks $code"; fi
done
for section in NAME SYNOPSIS DESCRIPTION COMMANDS OPTIONS "EXIT STATUS" FILES "SEE ALSO"; do
  if grep -qx "\.SH $section" "$tmp/one-hpc.8"; then ok; else bad "one-hpc(8) has no $section section"; fi
done
# The changelog's version is the package's.
version=$(dpkg-deb -f "$deb" Version)
if zcat "$tmp/root/usr/share/doc/one-hpc/changelog.gz" | head -1 | grep -qF "one-hpc ($version)"; then ok
else bad "changelog.gz does not start with version $version"; fi

# ---- lintian: no error and no warning (the reviewed overrides are in the package)
if command -v lintian >/dev/null; then
  lintian --tag-display-limit 0 --fail-on error,warning "$deb" >"$tmp/lintian" 2>&1
  rc=$?
  grep -v 'running with root privileges' "$tmp/lintian" >"$tmp/tags"
  if [ "$rc" = 0 ] && ! grep -qE '^(E|W): ' "$tmp/tags"; then ok; else bad "lintian (exit $rc):"; sed 's/^/  | /' "$tmp/tags"; fi
else
  bad "lintian is not installed (make deps installs it)"
fi
# The maintainer scripts are the reviewed ones (what lintian and the lab saw).
for script in preinst postinst prerm postrm; do
  if cmp -s <(dpkg-deb --ctrl-tarfile "$deb" | tar -xO "./$script") "$SRC/install/debian/$script"; then ok
  else bad "the package's $script is not install/debian/$script"; fi
done

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
