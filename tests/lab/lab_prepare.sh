#!/bin/bash
# lab_prepare.sh - builds the lab's caches that do not depend on the product: the template
# rootfs (debootstrap) and the role-package layers appliance-slurm and appliance-ood
# (install-appliance.sh --role-packages). `make test` runs it in the background while the
# program compiles (tests/suite.sh): it waits on the archive and dpkg, not on the CPU, and the
# lab tests then find these layers cached. Each step is the one the lab tests call, under the
# same cache lock, so a test running beside it waits and then reuses what it built.
#
# Exit status: 0 done (or nothing to do), 1 a step failed (the lab tests would then build the
# same step themselves and report it), 77 this host cannot run the lab (printed).
# Environment: BOOTLAB_CACHE (default /var/cache/one-hpc-bootlab), ONEHPC_SOURCE_DIR.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$HERE/../.." && pwd)}
export BOOTLAB_CACHE=${BOOTLAB_CACHE:-/var/cache/one-hpc-bootlab}
if [ "$(id -u)" != 0 ]; then echo "SKIPPED: the lab needs root"; exit 77; fi
# shellcheck source-path=SCRIPTDIR source=bootlab.sh
. "$HERE/bootlab.sh"
# shellcheck source-path=SCRIPTDIR source=lab_lib.sh
. "$HERE/lab_lib.sh"
# The lab's own clean-up: a layer build mounts a tmpfs on /run/systemd/nspawn (on hosts whose
# /run is not one), which the lab tests' clean-up check would otherwise find left behind.
trap 'bl_cleanup --purge' EXIT
if ! bl_host_check; then echo "SKIPPED: this host cannot run the lab (see above)"; exit 77; fi
bl_host_setup
for step in rootfs slurm ood; do
    t0=$(_bl_now)
    # shellcheck disable=SC2119  # bl_rootfs takes no argument here (not --fresh)
    if [ "$step" = rootfs ]; then bl_rootfs >/dev/null; else build_role_layer "$step" >/dev/null; fi
    rc=$?
    if [ $rc != 0 ]; then
        echo "lab_prepare: $step failed (exit status $rc)"
        tail -n 20 "$BOOTLAB_DIR"/logs/*.log 2>/dev/null
        exit 1
    fi
    echo "lab_prepare: $step ${BL_LAYER_RESULT:-${BL_ROOTFS_RESULT:-}} in $(_bl_dt "$t0" "$(_bl_now)") s"
    BL_LAYER_RESULT="" BL_ROOTFS_RESULT=""
done
