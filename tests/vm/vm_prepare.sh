#!/bin/bash
# vm_prepare.sh APPLIANCE - builds the VM lab's caches that do not depend on the .deb: the
# base image of APPLIANCE's Debian release (vm_suite: 13 for oneslurm, 12 for open-ondemand),
# the build root of that release's .deb when it is not the host's, and APPLIANCE's packages
# layer. `make test` runs it in the background while the program compiles (tests/suite.sh);
# the VM smoke then finds them cached and builds only the .deb and the image from it. The
# steps are vm_lab's own, under the same locks ("deb" around the base image, "image-APPLIANCE"
# around the layer), so a VM test started meanwhile waits and reuses them. Not a test: prints
# what it built and exits 0, 1 when a step failed, 77 when the VM lab cannot run here (the
# reason is printed).
set -uo pipefail

case ${1:-} in
    oneslurm|open-ondemand) ;;
    *) echo "usage: $0 oneslurm|open-ondemand" >&2; exit 2;;
esac
# shellcheck source=SCRIPTDIR/vm_lib.sh
. "$(dirname "$0")/vm_lib.sh"
vm_begin vm_prepare
vm_suite "$1"
vm_lock deb
vm_base_image
vm_deb_build_root
vm_unlock
vm_pick_accel
vm_lock "image-$1"
vm_packages_layer "$1"
vm_unlock
echo "$passed passed, $failed failed"
