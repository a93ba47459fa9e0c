#!/bin/bash
# build-deb.sh - builds one-hpc's .deb for another Debian release than the host's, against
# that release's libraries: a build root of the release (mmdebstrap, the tool the base image
# is made with, from the same mirror), the source bound into it read-only, the program built
# and packaged there (cmake, cpack) with the build's date fixed, so that the same source gives
# the same package.
#
# Usage: build-deb.sh --suite SUITE (--output DIR | --bootstrap-only) [--source DIR] [--cache DIR]
#                     [--jobs N]
#   --suite SUITE   trixie (Debian 13) or bookworm (Debian 12: the host's own `make package`
#                   gives the same package faster on a Debian 12 host)
#   --output DIR    gets one-hpc_<version>+deb<release>_amd64.deb and its -dbgsym package
#   --bootstrap-only  only make (or find) the build root's cached tarball: make test does it
#                   early, while the machine waits on the network, not on its cores
#   --source DIR    the one-hpc checkout (default: this script's)
#   --cache DIR     keeps the build root's tarball and its compiler cache between runs
#                   (default: $ONEHPC_IMAGE_CACHE or /var/cache/one-hpc-image)
#   --jobs N        parallel compile jobs (default: nproc)
#
# The package's version is the project's with "+deb<release>" appended (0.1.0+deb13): the
# packages of two releases never share a name. The build's date (SOURCE_DATE_EPOCH) is the
# last commit's when the source is a git checkout, else the newest source file's.
#
# Needs root (chroot, mounts in a mount namespace of its own) and mmdebstrap. The first run
# bootstraps the build root (2-4 minutes); then a build is a compile (ccache, kept in --cache).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$HERE/lib.sh"
# Bump when the build root (not the build) changes, to invalidate the cached tarball.
BUILDROOT_VERSION=1
PACKAGES="g++,cmake,make,pkg-config,dpkg-dev,file,gzip,ccache,ca-certificates,\
libcurl4-openssl-dev,libssl-dev,nlohmann-json3-dev,libspdlog-dev,libfmt-dev,libexpected-dev,\
libcli11-dev,libblkid-dev,libmount-dev,libyaml-cpp-dev,libsodium-dev,libcrypt-dev"
suite=""
output=""
bootstrap_only=no
source=$(cd "$HERE/.." && pwd)
cache=${ONEHPC_IMAGE_CACHE:-/var/cache/one-hpc-image}
jobs=$(nproc)

die() { echo "build-deb: $*" >&2; exit 1; }
log() { echo "build-deb: $*"; }
usage() { sed -n '8,18s/^# \{0,1\}//p' "$0" >&2; exit 2; }

# Mounts in a namespace of this script's own: they vanish with it, whatever happens.
if [ "$(id -u)" = 0 ] && [ "${ONEHPC_BUILD_DEB_NS:-}" != private ]; then
    command -v unshare >/dev/null || die "unshare not found (apt-get install util-linux)"
    ONEHPC_BUILD_DEB_NS=private exec unshare --mount --propagation private -- "$BASH" "$0" "$@"
fi
while [ $# -gt 0 ]; do
    case $1 in
        --suite) [ $# -ge 2 ] || usage; suite=$2; shift 2;;
        --output) [ $# -ge 2 ] || usage; output=$2; shift 2;;
        --bootstrap-only) bootstrap_only=yes; shift;;
        --source) [ $# -ge 2 ] || usage; source=$2; shift 2;;
        --cache) [ $# -ge 2 ] || usage; cache=$2; shift 2;;
        --jobs) [ $# -ge 2 ] || usage; jobs=$2; shift 2;;
        -h|--help) usage;;
        *) echo "build-deb: unknown argument '$1'" >&2; usage;;
    esac
done
[ "$(id -u)" = 0 ] || die "must run as root (chroot and mounts)"
release=$(debian_release "$suite")
[ -n "$release" ] || die "--suite '$suite': expected trixie (Debian 13) or bookworm (Debian 12)"
[ -n "$output" ] || [ "$bootstrap_only" = yes ] || die "--output DIR (or --bootstrap-only) is required"
[ -f "$source/CMakeLists.txt" ] || die "--source $source: no CMakeLists.txt there"
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs '$jobs': expected a whole number of 1 or more"
command -v mmdebstrap >/dev/null || die "mmdebstrap not found (apt-get install mmdebstrap)"
source=$(cd "$source" && pwd)
mkdir -p "$cache"
if [ "$bootstrap_only" = no ]; then mkdir -p "$output" && output=$(cd "$output" && pwd); fi

# ---- the build root (cached tarball) -------------------------------------------------------
mirror=$(debian_mirror "$suite")
[ -n "$mirror" ] || die "no apt source for $suite (or the host's release) on this host"
security=$(debian_mirror "$suite-security")
key=$(printf '%s\n' "$BUILDROOT_VERSION" "$suite" "$mirror" "$security" "$PACKAGES" | sha256sum | cut -c1-16)
tarball=$cache/$suite-buildroot-$key.tar
if [ ! -s "$tarball" ]; then
    log "bootstrapping the $suite build root from $mirror (mmdebstrap)"
    sources=("deb $mirror $suite main" "deb $mirror $suite-updates main")
    if [ -n "$security" ]; then sources+=("deb $security $suite-security main"); fi
    mmdebstrap --mode=root --variant=minbase --include="$PACKAGES" --format=tar \
        --aptopt='Acquire::Retries "3"' "$suite" "$tarball.tmp" "${sources[@]}"
    rm -f "$cache/$suite"-buildroot-????????????????.tar
    mv -f "$tarball.tmp" "$tarball"
else
    log "reusing the build root $tarball"
fi
[ "$bootstrap_only" = no ] || exit 0

# ---- the build -------------------------------------------------------------------------------
work=$(mktemp -d /var/tmp/one-hpc-build-deb.XXXXXX)
root=$work/root
# The source and the compiler cache are mounted under $root: nothing is deleted while anything
# is still mounted there, and the deletion never crosses into a mount.
cleanup() {
    set +e
    if mountpoint -q "$root"; then umount -R "$root" || umount -R -l "$root"; fi
    if awk -v r="$root" '$2 == r || index($2, r "/") == 1 {found = 1} END {exit !found}' /proc/self/mounts; then
        echo "build-deb: $root still has mounts: left in place" >&2
        return
    fi
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
mkdir -p "$root"
mount --bind "$root" "$root"   # a mount point of its own, so that umount -R takes everything
tar -C "$root" --numeric-owner -xpf "$tarball"
mkdir -p "$root/src" "$root/build" "$root/ccache" "$cache/ccache-$suite"
mount --bind "$source" "$root/src"
mount -o remount,bind,ro "$root/src"
mount --bind "$cache/ccache-$suite" "$root/ccache"
mount -t proc proc "$root/proc"
for node in null zero urandom; do
    [ -c "$root/dev/$node" ] || { touch "$root/dev/$node" && mount --bind "/dev/$node" "$root/dev/$node"; }
done

if git -C "$source" rev-parse --git-dir >/dev/null 2>&1; then
    epoch=$(git -C "$source" log -1 --format=%ct)
else
    epoch=$(find "$source" -path "$source/build*" -prune -o -type f -printf '%T@\n' | sort -n | tail -n1 | cut -d. -f1)
fi
log "building one-hpc for Debian $release ($suite) from $source (SOURCE_DATE_EPOCH=$epoch)"
in_root() {
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
        SOURCE_DATE_EPOCH="$epoch" CCACHE_DIR=/ccache CCACHE_BASEDIR=/src CCACHE_NOHASHDIR=1 \
        CCACHE_MAXSIZE=2G "$@"
}
in_root cmake -S /src -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONEHPC_TESTS=OFF \
    -DONEHPC_DEB_REVISION="+deb$release" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache >/dev/null
in_root cmake --build /build -j"$jobs"
# The program starts against the release's libraries and builds its whole command line (every
# command and option: a library that refuses one fails it here, not in a VM at boot).
in_root /build/one-hpc --help >/dev/null || die "the built one-hpc does not start in the $suite build root"
in_root /bin/sh -c 'cd /build && cpack -G DEB' >/dev/null
found=no
for deb in "$root"/build/one-hpc*_*.deb "$root"/build/one-hpc*_*.ddeb; do
    [ -f "$deb" ] || continue
    cp "$deb" "$output/" && found=yes
    log "wrote $output/$(basename "$deb")"
done
[ "$found" = yes ] || die "cpack made no package in the build root"
