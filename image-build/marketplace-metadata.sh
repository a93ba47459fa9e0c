#!/bin/bash
# marketplace-metadata.sh - writes the appliance metadata an OpenNebula marketplace serves for
# an image (the YAML of OpenNebula's public marketplace repository, read by its appmarket-simple
# server): name, version, publisher, descriptions, tags, the OS, the OpenNebula versions, a VM
# template without disks, and the image's entry with its URL, bus, format, virtual size and
# checksums. build-image.sh writes it beside each image it builds.
#
# Usage: marketplace-metadata.sh --appliance oneslurm|open-ondemand --image FILE.qcow2
#                                --release 12|13 --version VERSION --output FILE.yaml
#                                [--url URL] [--publisher NAME] [--creation-time EPOCH]
#   --release    the Debian release inside the image
#   --version    the appliance's version (build-image.sh: the .deb's version and the date)
#   --url        where the operator will serve the image from (default: its file name: set
#                it to the address the marketplace's users download from)
#   --creation-time  seconds since the epoch (default: now)
set -euo pipefail

appliance="" image="" release="" version="" output="" url="" publisher="one-hpc maintainers"
created=$(date +%s)

die() { echo "marketplace-metadata: $*" >&2; exit 1; }
usage() { sed -n '8,15s/^# \{0,1\}//p' "$0" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        --appliance) [ $# -ge 2 ] || usage; appliance=$2; shift 2;;
        --image) [ $# -ge 2 ] || usage; image=$2; shift 2;;
        --release) [ $# -ge 2 ] || usage; release=$2; shift 2;;
        --version) [ $# -ge 2 ] || usage; version=$2; shift 2;;
        --output) [ $# -ge 2 ] || usage; output=$2; shift 2;;
        --url) [ $# -ge 2 ] || usage; url=$2; shift 2;;
        --publisher) [ $# -ge 2 ] || usage; publisher=$2; shift 2;;
        --creation-time) [ $# -ge 2 ] || usage; created=$2; shift 2;;
        -h|--help) usage;;
        *) echo "marketplace-metadata: unknown argument '$1'" >&2; usage;;
    esac
done

case $appliance in
    oneslurm)
        name="OneSlurm"
        slurm=$([ "$release" = 13 ] && echo 24.11 || echo 22.05)
        short="Slurm $slurm cluster for OneFlow: a controller and workers that join as dynamic nodes"
        long="The one-hpc OneSlurm appliance (Debian $release, Slurm $slurm). Instantiated through its
OneFlow service template (one-hpc's templates/oneflow/oneslurm.json, or oneflow-6.10/ for
OpenNebula 6.10), a VM becomes the Slurm controller or a worker: workers join Slurm as dynamic
nodes, leave it cleanly when they shut down, and the controller's reconciler removes the nodes
of VMs that vanished. Elastic mode grows and shrinks the worker role with the queue."
        tags="slurm hpc debian";;
    open-ondemand)
        name="Open OnDemand"
        short="Open OnDemand portal with Slurm and shared homes for OneFlow: storage, portal and workers"
        long="The one-hpc Open OnDemand appliance (Debian $release, Slurm 22.05, Open OnDemand from OSC's
repository). Instantiated through its OneFlow service template (one-hpc's
templates/oneflow/open-ondemand.json), a VM becomes the storage (homes on an ood-home disk,
served over NFS), the portal (Slurm, accounting, the users, Open OnDemand over HTTPS) or a
worker."
        tags="open-ondemand slurm hpc debian";;
    *) die "--appliance must be oneslurm or open-ondemand, not '$appliance'";;
esac
case $release in
    12|13) ;;
    *) die "--release must be 12 or 13 (the Debian release in the image), not '$release'";;
esac
[ -f "$image" ] || die "--image: no such file '$image'"
[[ $version =~ ^[A-Za-z0-9.+~_-]+$ ]] || die "--version '$version': expected letters, digits and .+~_-"
[[ $created =~ ^[0-9]+$ ]] || die "--creation-time '$created': expected seconds since the epoch"
[ -n "$output" ] || die "--output FILE.yaml is required"
command -v qemu-img >/dev/null || die "qemu-img not found (apt-get install qemu-utils)"
url=${url:-$(basename "$image")}
case $url in *[\"\\]*|*$'\n'*) die "--url must not hold a quote, a backslash or a newline";; esac
case $publisher in *[\"\\]*|*$'\n'*) die "--publisher must not hold a quote, a backslash or a newline";; esac

info=$(qemu-img info --output=json "$image") || die "qemu-img info $image failed"
format=$(printf '%s' "$info" | sed -n 's/.*"format": *"\([a-z0-9]*\)".*/\1/p' | head -n1)
size=$(printf '%s' "$info" | sed -n 's/.*"virtual-size": *\([0-9]*\).*/\1/p' | head -n1)
[ "$format" = qcow2 ] || die "$image is $format, not qcow2"
[ -n "$size" ] || die "no virtual size in qemu-img info $image"
md5=$(md5sum "$image" | cut -d' ' -f1)
sha256=$(sha256sum "$image" | cut -d' ' -f1)

tmp=$(mktemp "$output.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
    echo "---"
    echo "# Written by one-hpc's image-build/marketplace-metadata.sh for $(basename "$image")."
    echo "name: \"$name (one-hpc)\""
    echo "version: \"$version\""
    echo "publisher: \"$publisher\""
    echo "description: |-"
    printf '%s\n' "$long" | sed 's/^/  /'
    echo "short_description: \"$short\""
    echo "tags:"
    for t in $tags; do echo "- $t"; done
    echo "- '$release'"
    echo "- '6.10'"
    echo "- '7.0'"
    echo "format: qcow2"
    echo "creation_time: $created"
    echo "os-id: Debian"
    echo "os-release: '$release'"
    echo "os-arch: x86_64"
    echo "hypervisor: KVM"
    echo "opennebula_version: 6.10, 7.0"
    echo "opennebula_template:"
    echo "  context:"
    echo "    network: 'YES'"
    echo "    report_ready: 'YES'"
    echo "    token: 'YES'"
    echo "    ssh_public_key: \"\$USER[SSH_PUBLIC_KEY]\""
    echo "  cpu: '1'"
    echo "  vcpu: '2'"
    echo "  memory: '2048'"
    echo "  graphics:"
    echo "    listen: 0.0.0.0"
    echo "    type: vnc"
    echo "  os:"
    echo "    arch: x86_64"
    echo "logo: debian.png"
    echo "images:"
    echo "- name: \"$name\""
    echo "  url: \"$url\""
    echo "  type: OS"
    echo "  dev_prefix: vd"
    echo "  driver: qcow2"
    echo "  size: $size"
    echo "  checksum:"
    echo "    md5: $md5"
    echo "    sha256: $sha256"
} >"$tmp"
mv -f "$tmp" "$output"
trap - EXIT
echo "marketplace-metadata: wrote $output ($name, Debian $release, $size bytes virtual)"
