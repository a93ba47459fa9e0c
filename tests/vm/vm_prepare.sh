#!/bin/bash
# vm_prepare.sh APPLIANCE - builds the VM lab's caches that do not depend on the .deb: the
# base image of APPLIANCE's Debian release (vm_suite: 13 for oneslurm, 12 for open-ondemand),
# the build root of that release's .deb when it is not the host's (and that .deb compiled
# once beside the layer, for its compiler cache), and APPLIANCE's packages layer. `make test`
# runs it in the background while the program compiles (tests/suite.sh); the VM smoke then
# finds them cached and builds only the .deb (from a warm compiler cache) and the image. The
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
# The .deb of another release than the host's compiles meanwhile (the layer's build VM keeps one
# core): the VM smoke's own build of it then finds the compiler cache warm (about a minute
# instead of eight on a cold machine). Its output is thrown away; the smoke builds its own.
warm_pid=""
if [ "$suite" != "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" ]; then
    # Under the "deb" lock: a VM test that wants its .deb meanwhile waits, then compiles from
    # the warm cache instead of compiling everything a second time beside this.
    (vm_lock deb
     bash "$VM_SRC/image-build/build-deb.sh" --suite "$suite" --source "$VM_SRC" \
         --output "$work/deb-warm" --cache "$vm_cache" --jobs 2 >"$work/deb-warm.log" 2>&1) &
    warm_pid=$!
fi
vm_lock "image-$1"
vm_packages_layer "$1"
vm_unlock
if [ -n "$warm_pid" ]; then
    if wait "$warm_pid"; then
        pass "the Debian $release .deb compiled beside the layer (the compiler cache is warm)"
    else
        fail "the Debian $release .deb compiled beside the layer" "$(tail -n 20 "$work/deb-warm.log")"
    fi
fi
echo "$passed passed, $failed failed"
