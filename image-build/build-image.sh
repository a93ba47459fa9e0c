#!/bin/bash
# build-image.sh - builds one appliance image with Packer (appliance.pkr.hcl) under KVM.
#
# Usage: build-image.sh --appliance oneslurm|open-ondemand --base BASE.qcow2
#                       (--deb ONE-HPC.deb | --packages-only) --output DIR
#                       [--one-context-deb FILE] [--packer-log FILE] [--accel kvm|tcg]
#                       [--ondemand-release REL|none] [--image-url URL]
#   --packages-only the appliance's packages layer: the role packages on BASE, not sealed, not
#                   compressed; an image build then takes it as --base with the --deb
#   --image-url URL where the image will be downloaded from, for its marketplace metadata
#                   (<appliance>.yaml beside it, marketplace-metadata.sh; default: its file name)
#   --output DIR    gets <appliance>.qcow2, its .sha256, .yaml and build-console.log; DIR must not
#                   exist or be empty (Packer's rule)
#   --accel tcg     build without KVM, by emulation (5-10 times slower); for hosts whose
#                   /dev/kvm cannot run an ordinary BIOS guest
#   --ondemand-release  open-ondemand: the Open OnDemand release installed from OSC's apt
#                   repository (default 4.0; the repositories, keys and fingerprints are the
#                   template's variables, PKR_VAR_ondemand_repo and the like), or none: an image
#                   without Open OnDemand, named open-ondemand-without-ood.qcow2
#
# Makes a throwaway SSH key, writes the build-time context.sh that carries its public key
# (OpenNebula's format), and runs `packer build`; then zeroes the image's free blocks and
# compresses it (compact_image in lib.sh). Needs packer, qemu-system-x86, qemu-utils, xorriso
# (or genisoimage) for the CONTEXT CD, openssh-client, fdisk and e2fsprogs, and a /dev/kvm that
# runs BIOS guests (checked by booting a 512-byte boot sector), unless --accel tcg.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$HERE/lib.sh"

appliance=""
base=""
deb=""
packages_only=no
output=""
one_context_deb=""
packer_log=""
accel=kvm
ondemand_release=""
image_url=""

die() { echo "build-image: $*" >&2; exit 1; }
log() { echo "build-image: $*"; }
usage() { sed -n '4,20s/^# \{0,1\}//p' "$0" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        --appliance) [ $# -ge 2 ] || usage; appliance=$2; shift 2;;
        --base) [ $# -ge 2 ] || usage; base=$2; shift 2;;
        --deb) [ $# -ge 2 ] || usage; deb=$2; shift 2;;
        --packages-only) packages_only=yes; shift;;
        --output) [ $# -ge 2 ] || usage; output=$2; shift 2;;
        --one-context-deb) [ $# -ge 2 ] || usage; one_context_deb=$2; shift 2;;
        --packer-log) [ $# -ge 2 ] || usage; packer_log=$2; shift 2;;
        --accel) [ $# -ge 2 ] || usage; accel=$2; shift 2;;
        --ondemand-release) [ $# -ge 2 ] || usage; ondemand_release=$2; shift 2;;
        --image-url) [ $# -ge 2 ] || usage; image_url=$2; shift 2;;
        -h|--help) usage;;
        *) echo "build-image: unknown argument '$1'" >&2; usage;;
    esac
done

case $appliance in
    oneslurm|open-ondemand) ;;
    *) die "--appliance must be oneslurm or open-ondemand, not '$appliance'";;
esac
# The image's name, as the template makes it (local.image_name).
name=$appliance
if [ "$appliance" = open-ondemand ]; then
    ondemand_release=${ondemand_release:-4.0}
    [[ $ondemand_release =~ ^(none|[0-9]+[.][0-9]+)$ ]] ||
        die "--ondemand-release must be a release such as 4.0, or none, not '$ondemand_release'"
    if [ "$ondemand_release" = none ]; then name=open-ondemand-without-ood; fi
elif [ -n "$ondemand_release" ]; then
    die "--ondemand-release is for the open-ondemand appliance, not $appliance"
else
    ondemand_release=none
fi
[ -f "$base" ] || die "--base: no such image '$base' (make-base-image.sh makes it)"
if [ "$packages_only" = yes ]; then
    [ -z "$deb" ] || die "--packages-only builds the layer without the .deb: drop --deb"
else
    [ -n "$deb" ] || die "--deb ONE-HPC.deb is required (or --packages-only)"
    [ -f "$deb" ] || die "--deb: no such file '$deb' (make package makes it)"
fi
[ -n "$output" ] || die "--output DIR is required"
if [ -n "$one_context_deb" ] && [ ! -f "$one_context_deb" ]; then
    die "--one-context-deb: no such file '$one_context_deb'"
fi
for tool in packer qemu-system-x86_64 qemu-img ssh-keygen sha256sum sfdisk e2fsck; do
    command -v "$tool" >/dev/null || die "$tool not found (apt-get install packer qemu-system-x86 qemu-utils openssh-client xorriso fdisk e2fsprogs)"
done
command -v xorriso >/dev/null || command -v genisoimage >/dev/null || command -v mkisofs >/dev/null ||
    die "Packer needs xorriso, genisoimage or mkisofs for the CONTEXT CD (apt-get install xorriso)"
case $accel in
    kvm)
        kvm_boots_bios 20 || die "/dev/kvm cannot boot an ordinary BIOS guest here (missing, no permission, or a nested hypervisor such as PVM that runs no real-mode code); use --accel tcg to build by emulation"
        ssh_timeout=15m;;
    tcg) ssh_timeout=45m;;
    *) die "--accel must be kvm or tcg, not '$accel'";;
esac
if [ -e "$output" ] && [ -n "$(ls -A "$output")" ]; then
    die "--output $output exists and is not empty"
fi
rmdir "$output" 2>/dev/null || true

abs() { case $1 in /*) printf '%s\n' "$1";; *) printf '%s\n' "$PWD/$1";; esac; }
base=$(abs "$base"); output=$(abs "$output")
if [ -n "$deb" ]; then deb=$(abs "$deb"); fi
if [ -n "$one_context_deb" ]; then one_context_deb=$(abs "$one_context_deb"); fi

work=$(mktemp -d "${TMPDIR:-/tmp}/one-hpc-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/context" "$work/packer-cache"
ssh-keygen -q -t ed25519 -N '' -C "one-hpc image build" -f "$work/build-key"
# OpenNebula's context.sh format: a header line, NAME='value' lines sorted by name.
{
    echo "# Context variables generated by OpenNebula"
    printf "SSH_PUBLIC_KEY='%s'\n" "$(cat "$work/build-key.pub")"
} > "$work/context/context.sh"

checksum="sha256:$(sha256sum "$base" | cut -d' ' -f1)"
mkdir -p "$(dirname "$output")"
console=$output.console.log
if [ "$packages_only" = yes ]; then what="the $name packages layer"; else what=$name; fi
log "building $what from $base with $accel (console: $console)"
start=$(date +%s)
export CHECKPOINT_DISABLE=1 PACKER_CACHE_DIR="$work/packer-cache"
if [ -n "$packer_log" ]; then export PACKER_LOG=1 PACKER_LOG_PATH="$packer_log"; fi
packer build -color=false \
    -var "appliance=$appliance" \
    -var "base_image=$base" \
    -var "base_image_checksum=$checksum" \
    -var "deb=$deb" \
    -var "one_context_deb=$one_context_deb" \
    -var "context_dir=$work/context" \
    -var "ssh_private_key_file=$work/build-key" \
    -var "output_dir=$output" \
    -var "serial_log=$console" \
    -var "accelerator=$accel" \
    -var "ssh_timeout=$ssh_timeout" \
    -var "ondemand_release=$ondemand_release" \
    "$HERE/appliance.pkr.hcl"
mv -f "$console" "$output/build-console.log" 2>/dev/null || true
image=$output/$name.qcow2
[ -s "$image" ] || die "packer finished but $image is missing"
if [ "$packages_only" = no ]; then
    compact_image "$image" "$work" || die "the free blocks of $image could not be zeroed"
    (cd "$output" && sha256sum "$name.qcow2" > "$name.qcow2.sha256")
fi
elapsed=$(( $(date +%s) - start ))
size=$(du -b "$image" | cut -f1)
log "done in ${elapsed}s: $image ($((size / 1048576)) MiB, $(qemu-img info --output=json "$image" | sed -n 's/.*"virtual-size": \([0-9]*\).*/\1/p' | awk '{print int($1/1073741824)}') GiB virtual)"
printf 'build_seconds=%s\nimage_bytes=%s\n' "$elapsed" "$size" > "$output/build-stats"
# The marketplace metadata of an image (not of a packages layer). Its Debian release is the
# .deb's: build-deb.sh versions a package for another release than the host's "+deb<N>",
# `make package` on the Debian 12 host none.
if [ "$packages_only" = no ]; then
    deb_version=$(dpkg-deb -f "$deb" Version)
    case $deb_version in *+deb13*) release=13;; *) release=12;; esac
    bash "$HERE/marketplace-metadata.sh" --appliance "$appliance" --image "$image" \
        --release "$release" --version "$deb_version-$(date -u +%Y%m%d)" \
        ${image_url:+--url "$image_url"} --output "$output/$name.yaml" ||
        die "the marketplace metadata of $image could not be written"
fi
