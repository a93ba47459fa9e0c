#!/bin/bash
# lab_package_order_test.sh - one-hpc's .deb and OpenNebula's one-context, installed in both
# orders, with their real maintainer scripts, in clones of the lab's Debian template (chroot,
# nothing booted). Whatever the order: the hook /etc/one-context.d/net-90-one-hpc is there,
# one-context's net-99-report-ready is diverted out of the hook directory (it would report READY
# for a VM whose configure failed), and one-hpc-configure.service is enabled. Removing one-hpc
# gives one-context its file back; purging forgets the enable link.
#
# one-context is not in Debian and this machine cannot download it: a stand-in package with
# its name and the files this test looks at (net-99-report-ready, loc-10-network, one-contextd)
# is built here. one-hpc's library dependencies are not installed into the clone
# (dpkg --force-depends): what is tested is the maintainer scripts and the file layout; the lab
# and VM tests install the package with its dependencies.
#
# Exit status: 0 all checks passed, 1 a check failed, 77 skipped (not root, no lab host).

set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
BIN_DIR=${ONEHPC_BINARY_DIR:-$SRC/build}

[ "$(id -u)" = 0 ] || { echo "SKIPPED: the lab needs root"; exit 77; }
OWN_LAB_DIR=yes; [ -n "${BOOTLAB_DIR:-}" ] && OWN_LAB_DIR=no
# shellcheck source-path=SCRIPTDIR source=bootlab.sh
. "$HERE/bootlab.sh"
# shellcheck source-path=SCRIPTDIR source=lab_lib.sh
. "$HERE/lab_lib.sh"
LAB_TIMEOUT=${LAB_TIMEOUT:-600}
lab_begin lab_package_order_test

find_product || exit 1
[ -n "$DEB" ] || { echo "FAIL: this test needs the .deb (cmake --build $BIN_DIR --target package)"; exit 1; }

step "the template and a stand-in one-context package"
# shellcheck disable=SC2119  # no argument: the cached template when its stamp matches
bl_rootfs || { echo "FAIL: no template"; exit 1; }
work=$BOOTLAB_DIR/pkg
mkdir -p "$work/one-context/DEBIAN" "$work/one-context/etc/one-context.d" "$work/one-context/usr/sbin"
cat > "$work/one-context/DEBIAN/control" <<'EOF'
Package: one-context
Version: 6.10.0-1
Architecture: all
Maintainer: lab stand-in <lab@example.org>
Description: stand-in for OpenNebula's one-context (lab_package_order_test)
EOF
printf '#!/bin/sh\n# one-context net-99-report-ready (stand-in)\necho READY=YES\n' \
    > "$work/one-context/etc/one-context.d/net-99-report-ready"
printf '#!/bin/sh\n# one-context loc-10-network (stand-in)\n' > "$work/one-context/etc/one-context.d/loc-10-network"
printf '#!/bin/sh\n# one-contextd (stand-in)\n' > "$work/one-context/usr/sbin/one-contextd"
chmod 0755 "$work/one-context/etc/one-context.d/"* "$work/one-context/usr/sbin/one-contextd"
check "the stand-in one-context .deb builds" \
    dpkg-deb --root-owner-group --build "$work/one-context" "$work/one-context.deb" >/dev/null
reporter=$(cat "$work/one-context/etc/one-context.d/net-99-report-ready")

# in_clone NAME COMMAND...: run in the clone's root (chroot, the package files under /tmp).
in_clone() { local n=$1; shift; chroot "$(bl_root "$n")" "$@"; }
# shellcheck disable=SC2317  # called through check
install_pkg() {   # install_pkg NAME one-hpc|one-context
    local file
    if [ "$2" = one-hpc ]; then file=$DEB; else file=$work/one-context.deb; fi
    cp "$file" "$(bl_root "$1")/tmp/$2.deb"
    in_clone "$1" dpkg --force-depends -i "/tmp/$2.deb" >>"$work/$1.log" 2>&1
}

# The state every order must end in.
expect_hooked() {
    local n=$1 r; r=$(bl_root "$n")
    check "$n: the hook net-90-one-hpc links to the binary" \
        eq "$(readlink "$r/etc/one-context.d/net-90-one-hpc")" /usr/sbin/one-hpc
    check "$n: no net-99-report-ready in the hook directory" test ! -e "$r/etc/one-context.d/net-99-report-ready"
    check "$n: one-context's reporter is kept at the diverted path" \
        eq "$(cat "$r/usr/share/one-hpc/diverted/net-99-report-ready" 2>/dev/null)" "$reporter"
    check "$n: dpkg knows the diversion (one-hpc's)" \
        contains "$(in_clone "$n" dpkg-divert --list /etc/one-context.d/net-99-report-ready)" "by one-hpc"
    check "$n: one-context's other hooks are in place" test -x "$r/etc/one-context.d/loc-10-network"
    check "$n: one-hpc-configure.service is enabled" \
        test -L "$r/etc/systemd/system/multi-user.target.wants/one-hpc-configure.service"
}

for order in "one-hpc one-context" "one-context one-hpc"; do
    n=order-${order%% *}-first
    step "install order: $order (first to last)"
    bl_clone "$n" || { echo "FAIL: clone $n"; exit 1; }
    for p in $order; do check "$n: dpkg -i $p" install_pkg "$n" "$p" || tail -n 20 "$work/$n.log"; done
    expect_hooked "$n"
done

n="order-one-hpc-first"
step "remove and purge one-hpc ($n)"
r=$(bl_root "$n")
check "$n: dpkg --remove one-hpc" in_clone "$n" dpkg --remove one-hpc >>"$work/$n.log" 2>&1 || tail -n 20 "$work/$n.log"
check "$n: one-context's reporter is back in the hook directory" \
    eq "$(cat "$r/etc/one-context.d/net-99-report-ready" 2>/dev/null)" "$reporter"
check "$n: no diversion left" eq "$(in_clone "$n" dpkg-divert --list /etc/one-context.d/net-99-report-ready)" ""
check "$n: the hook is gone" test ! -e "$r/etc/one-context.d/net-90-one-hpc"
check "$n: nothing left in /usr/share/one-hpc" test ! -e "$r/usr/share/one-hpc"
check "$n: dpkg --purge one-hpc" in_clone "$n" dpkg --purge one-hpc >>"$work/$n.log" 2>&1 || tail -n 20 "$work/$n.log"
check "$n: purge removed the enable link of one-hpc-configure.service" \
    test ! -e "$r/etc/systemd/system/multi-user.target.wants/one-hpc-configure.service"
check "$n: one-context is still installed and whole" \
    eq "$(in_clone "$n" dpkg-query -W -f="\${Status}" one-context)" "install ok installed"

step "install again over a removed one-context ($n)"
check "$n: dpkg --purge one-context" in_clone "$n" dpkg --purge one-context >>"$work/$n.log" 2>&1
check "$n: dpkg -i one-hpc without one-context" install_pkg "$n" one-hpc
check "$n: the hook is there without one-context" test -L "$r/etc/one-context.d/net-90-one-hpc"
check "$n: one-context installed afterwards keeps its reporter out of the hook directory" \
    install_pkg "$n" one-context
expect_hooked "$n"

for n in order-one-hpc-first order-one-context-first; do bl_unclone "$n"; done
# shellcheck disable=SC2119  # no stop command: nothing was booted
lab_end
