#!/bin/bash
# vm_lib.sh - the VM lab shared by tests/vm/*_test.sh (source it; bash).
#
# Real VMs as OpenNebula runs them: qemu (KVM when /dev/kvm boots the base image's kernel, else
# TCG, chosen at run time and printed) on copy-on-write overlays of the image that
# image-build/build-image.sh makes from the .deb, a private bridge in a network namespace of
# its own, the OneGate simulator on that bridge (operator API on), one CONTEXT ISO per VM
# (context.sh and token.txt exactly as OpenNebula writes them, made with
# `xorriso -as mkisofs -V CONTEXT -J -R`) and extra virtio disks where a test asks for them.
# The images have no one-context: a VM's context exists only on its CD.
#
# Caches (ONEHPC_IMAGE_CACHE, default /var/cache/one-hpc-image): the base image (rebuilt when
# its scripts change) and one appliance image per appliance, rebuilt when what goes into it
# changes (what the .deb installs, the install steps, the Packer template, the base image).
# ONEHPC_KVM_IMAGE=FILE reuses a built image; ONEHPC_DEB=FILE uses that .deb;
# ONEHPC_KVM_ACCEL=kvm|tcg forces the accelerator; ONEHPC_VM_TESTS=0 skips (exit 77).
# ONEHPC_VM_CPUS: vCPUs per VM (default 1, as `make test` and `make test-vm` set it too).
# `make test-vm` runs two VM tests at once, often 6 VMs on 2 cores, and under TCG a guest's
# second vCPU then mostly waits for the first (spinlocks, IPIs) while it is not running.
# Measured under TCG on this 2-core host: 3
# workers booted together reached READY in 122 s with 1 vCPU each, 150 s with 2; a lone
# controller takes 54 s with 1, 38 s with 2 (`make test` sets 1 too: the smoke runs beside a
# build). A Debian 13 guest (kernel 6.12) with 2 vCPUs under TCG once died 1 s into its boot
# with an "Oops: int3" in the kernel's own code (2026-12-07, once in about ten such boots, and
# again in a direct run of oneslurm_scenarios the same day; not seen with 1 vCPU): a direct run
# of a VM test therefore gets 1 vCPU per VM too.
# Packer's build VM gets as many (PKR_VAR_cpus, the template's `cpus`; not part of the image
# key: the image does not depend on it): a build VM with 2 vCPUs built beside another VM test
# once hung in the guest kernel (a soft lockup of ksoftirqd in virtio-net's receive path).
#
# Clean-up on any exit: every qemu this test started (TERM, then KILL), the simulator, the
# network namespace with its bridge and taps, the work directory (consoles and logs are copied
# to $ONEHPC_BINARY_DIR/<test>-logs first). Nothing it did not start is touched.
#
# Use:  . vm_lib.sh; vm_begin NAME; [VM_OOD_STANDIN=yes;] vm_lab APPLIANCE 10.79.N (or its steps: vm_suite; vm_deb;
#       vm_base_image; vm_pick_accel; vm_image; vm_net_up; vm_service); vm_new ...; vm_boot ...;
#       vm_wait_ready ...;
#       pass/fail ...; vm_result KEY VALUE; vm_report.

VM_SRC=${ONEHPC_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
VM_BIN_DIR=${ONEHPC_BINARY_DIR:-$VM_SRC/build}
# shellcheck source=SCRIPTDIR/../../image-build/lib.sh
. "$VM_SRC/image-build/lib.sh"

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

vm_test="" work="" ns="" net="" sim_pid="" watchdog_pid="" accel="" accel_why="" repo_pid=""
ready_timeout=900 image="" deb="" base="" base_seconds="" build_seconds="" service_id=""
passed=0 failed=0 test_t0=$(date +%s)
declare -A qemu_pid=() vm_id=() vm_token=() vm_ip=() vm_mac=() vm_tap=() boot_ms=() ready_seconds=() vm_role=()
# vm_mgmt[NAME]=IP before vm_new: the VM gets a management NIC first (NIC0/ETH0, network
# "Management", IP/24 on the same bridge, nobody else on it) and its lab NIC becomes NIC1/ETH1,
# named "compute" as the Open OnDemand template names it.
declare -A vm_mgmt=() vm_mgmt_mac=() vm_mgmt_tap=()
# vm_disk_size[NAME]=SIZE before vm_boot: the root disk is SIZE (qemu-img's 12G) instead of the
# image's 8 GiB, as a template's DISK SIZE makes it; the image's grow-root fills it at boot.
declare -A vm_disk_size=()
# vm_firmware[NAME]=uefi before vm_boot: the VM boots with UEFI, OVMF's code read-only and a
# copy of its empty variable store of its own, as OpenNebula's FIRMWARE="UEFI" gives a KVM VM
# (no boot entry: the firmware finds the image's \EFI\BOOT\BOOTX64.EFI itself). Else BIOS.
declare -A vm_firmware=()
OVMF_CODE=/usr/share/OVMF/OVMF_CODE_4M.fd OVMF_VARS=/usr/share/OVMF/OVMF_VARS_4M.fd
ntaps=0 tap_made=""
declare -a vm_results=()

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; [ $# -lt 2 ] || printf '%s\n' "$2" | sed 's/^/    /'; failed=$((failed + 1)); }
log() { echo "--- $(date +%T) $*"; }
secs_since_ms() { awk -v ms=$(( $(now_ms) - $1 )) 'BEGIN{printf "%.1f", ms/1000}'; }
json_get() {  # json_get EXPR < json   (EXPR in Python on `d`)
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); v=eval(sys.argv[1]); print(v if v is not None else "")' "$1"
}

vm_skip() {
    echo "###########################################################################"
    echo "### ${vm_test:-vm test} SKIPPED: $*"
    echo "###########################################################################"
    exit 77
}

# vm_begin NAME: skip unless it can run; the work directory, the clean-up trap, the watchdog.
vm_begin() {
    vm_test=$1
    case ${ONEHPC_VM_TESTS:-${ONEHPC_KVM_TESTS:-1}} in
        0|no|NO|false) vm_skip "ONEHPC_VM_TESTS=0";;
    esac
    [ "$(id -u)" = 0 ] || vm_skip "needs root (network namespace, taps)"
    local tool
    for tool in packer qemu-system-x86_64 qemu-img mmdebstrap extlinux xorriso ssh ssh-keygen curl ip mkfs.ext4; do
        command -v "$tool" >/dev/null || vm_skip "tool $tool is missing: make image-deps installs the image tools"
    done
    case ${ONEHPC_KVM_ACCEL:-} in
        ""|kvm|tcg) ;;
        *) vm_skip "ONEHPC_KVM_ACCEL must be kvm or tcg, not '$ONEHPC_KVM_ACCEL'";;
    esac
    vm_cpus=${ONEHPC_VM_CPUS:-1}
    case $vm_cpus in
        [1-8]) ;;
        *) echo "FAIL ONEHPC_VM_CPUS must be a number of vCPUs from 1 to 8, not '$ONEHPC_VM_CPUS'"; exit 1;;
    esac
    work=$(mktemp -d "${TMPDIR:-/tmp}/one-hpc-$vm_test.XXXXXX")
    ns=onehpc-vm-$$
    ssh-keygen -q -t ed25519 -N '' -C "one-hpc-$vm_test" -f "$work/ssh-key"
    trap vm_cleanup EXIT
    trap 'exit 1' HUP INT TERM
    # VM_TIMEOUT=SECONDS (set by ctest): stop, cleaning up, before ctest's TIMEOUT kills us.
    # TERM to the children too: a command substitution would keep the trap waiting. Only a
    # sleep that ran out stops the test (a killed one, at clean-up, does nothing).
    if [ "${VM_TIMEOUT:-0}" -gt 0 ]; then
        (sleep "$VM_TIMEOUT" && { echo "### $vm_test: VM_TIMEOUT=$VM_TIMEOUT s reached, stopping"
         kill -TERM $$; pkill -TERM -P $$; }) &
        watchdog_pid=$!
    fi
}

# shellcheck disable=SC2317  # called by the EXIT trap
vm_cleanup() {
    local name pid logs=$VM_BIN_DIR/$vm_test-logs
    trap '' HUP INT TERM  # a signal now (the watchdog's) must not cut the clean-up short
    if [ -n "$watchdog_pid" ]; then
        # Its sleep first (by parent PID: once the subshell is gone the sleep would be
        # orphaned and keep ctest's pipe open); a killed sleep ends the subshell by itself.
        pkill -TERM -P "$watchdog_pid" 2>/dev/null
        kill -TERM "$watchdog_pid" 2>/dev/null
    fi
    for name in "${!qemu_pid[@]}"; do
        pid=${qemu_pid[$name]}
        kill -CONT "$pid" 2>/dev/null  # a stopped qemu does not act on TERM
        if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null; fi
    done
    sleep 1
    for name in "${!qemu_pid[@]}"; do
        pid=${qemu_pid[$name]}
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; fi
    done
    if [ -n "$sim_pid" ] && kill -0 "$sim_pid" 2>/dev/null; then kill -TERM "$sim_pid"; fi
    vm_ood_repo_down
    wait 2>/dev/null
    if [ -n "$ns" ] && ip netns list | grep -qw "$ns"; then ip netns del "$ns"; fi
    [ -n "$work" ] || return 0
    rm -rf "$logs"
    mkdir -p "$logs"
    cp "$work"/*.console "$work"/*.log "$work"/image/build-console.log "$logs"/ 2>/dev/null
    rm -rf "$work"
}

vm_result() { vm_results+=("$1=$2"); }

# vm_report: the figures (also to $ONEHPC_BINARY_DIR/<test>-results.txt), the count, and exit
# 0 when no check failed.
vm_report() {
    local line
    {
        echo "accelerator=$accel ($accel_why)"
        echo "image: $image"
        echo "base_build_seconds=$base_seconds"
        echo "image_build_seconds=$build_seconds"
        for line in "${vm_results[@]}"; do echo "$line"; done
        echo "total_seconds=$(( $(date +%s) - test_t0 ))"
    } | tee "$VM_BIN_DIR/$vm_test-results.txt"
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}
vm_abort() { echo "$passed passed, $failed failed"; exit 1; }

# wait_until SECONDS COMMAND...: true as soon as COMMAND succeeds (tried every 3 s), false
# when SECONDS ran out; $waited is the time it took.
# shellcheck disable=SC2034  # $waited is read by the tests
waited=0
# shellcheck disable=SC2034
wait_until() {
    local limit=$1 t0; shift
    t0=$(date +%s)
    while ! "$@"; do
        if [ $(( $(date +%s) - t0 )) -ge "$limit" ]; then waited=$(( $(date +%s) - t0 )); return 1; fi
        sleep 3
    done
    waited=$(( $(date +%s) - t0 ))
}

# vm_suite APPLIANCE: the Debian suite its image is built on, into $suite and $release:
# OneSlurm on Debian 13 (trixie, Slurm 24.11), Open OnDemand on Debian 12 (bookworm: the
# release OSC publishes Open OnDemand for). ONEHPC_VM_SUITE=bookworm|trixie chooses for OneSlurm.
suite="" release=""
vm_suite() {
    if [ "$1" = oneslurm ]; then suite=${ONEHPC_VM_SUITE:-trixie}; else suite=bookworm; fi
    release=$(debian_release "$suite")
    if [ -z "$release" ] || { [ "$1" != oneslurm ] && [ -n "${ONEHPC_VM_SUITE:-}" ]; }; then
        echo "FAIL ONEHPC_VM_SUITE='${ONEHPC_VM_SUITE:-}': bookworm or trixie, for the oneslurm appliance only"; exit 1
    fi
}

# vm_deb: the one-hpc .deb ($ONEHPC_DEB, or built in the binary directory) into $deb. For
# another release than the host's ($suite, vm_suite), built against that release's libraries
# by image-build/build-deb.sh (its build root and compiler cache in the image cache).
vm_deb() {
    local host
    host=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ -n "${ONEHPC_DEB:-}" ]; then
        deb=$ONEHPC_DEB
    elif [ "$suite" != "$host" ]; then
        log "building the .deb for Debian $release ($suite) in its build root"
        rm -rf "$VM_BIN_DIR/deb-$suite"
        bash "$VM_SRC/image-build/build-deb.sh" --suite "$suite" --source "$VM_SRC" \
            --output "$VM_BIN_DIR/deb-$suite" --cache "$vm_cache" --jobs 2 >"$work/deb.log" 2>&1
        deb=$(find "$VM_BIN_DIR/deb-$suite" -maxdepth 1 -name 'one-hpc_*.deb' 2>/dev/null | head -n1)
    else
        log "building the .deb in $VM_BIN_DIR"
        cmake --build "$VM_BIN_DIR" --target one-hpc onegate-sim update-ood-portal-standin -j2 >"$work/deb.log" 2>&1 &&
            (cd "$VM_BIN_DIR" && cpack -G DEB >>"$work/deb.log" 2>&1)
        deb=$(find "$VM_BIN_DIR" -maxdepth 1 -name 'one-hpc_*.deb' -printf '%T@ %p\n' | sort -rn |
              head -n1 | cut -d' ' -f2-)
    fi
    if [ -f "$deb" ]; then pass "the one-hpc .deb ($deb)"; else
        fail "the one-hpc .deb" "$(tail -n 20 "$work/deb.log" 2>/dev/null)"; vm_abort
    fi
    # A package built here for another release: the checks of the host's package (contents,
    # dependencies, hardening, debug symbols, manual page, lintian) on it too.
    if [ -z "${ONEHPC_DEB:-}" ] && [ "$suite" != "$host" ]; then
        if ONEHPC_PACKAGE_DEB=$deb ONEHPC_SOURCE_DIR=$VM_SRC bash "$VM_SRC/tests/integration/package_test.sh" \
               >"$work/package-check.log" 2>&1; then
            pass "the Debian $release package's checks (package_test.sh, host lintian): $(tail -n1 "$work/package-check.log")"
        else
            fail "the Debian $release package's checks (package_test.sh)" "$(tail -n 20 "$work/package-check.log")"
        fi
    fi
    # This test's own copy: a test running beside it may run cpack again meanwhile.
    cp "$deb" "$work/$(basename "$deb")" && deb=$work/$(basename "$deb")
    if [ ! -x "$VM_BIN_DIR/tests/onegate-sim" ] ||
       [ ! -x "$VM_BIN_DIR/tests/update-ood-portal-standin" ]; then
        cmake --build "$VM_BIN_DIR" --target onegate-sim update-ood-portal-standin -j2 >/dev/null 2>&1
    fi
}

vm_cache=${ONEHPC_IMAGE_CACHE:-/var/cache/one-hpc-image}

# vm_deb_build_root: for another release than the host's, the build root vm_deb builds the
# .deb in (build-deb.sh --bootstrap-only: the cached tarball), made ahead of the compile.
vm_deb_build_root() {
    local host
    host=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ "$suite" != "$host" ] || return 0
    if bash "$VM_SRC/image-build/build-deb.sh" --suite "$suite" --bootstrap-only --cache "$vm_cache" \
           >"$work/build-root.log" 2>&1; then
        pass "the Debian $release build root ($(tail -n1 "$work/build-root.log"))"
    else
        fail "the Debian $release build root (build-deb.sh --bootstrap-only)" "$(tail -n 20 "$work/build-root.log")"
    fi
}

# vm_base_image: the base image of $suite (vm_suite), built once per change of its scripts,
# into $base.
vm_base_image() {
    local stamp t0
    mkdir -p "$vm_cache"
    base=$vm_cache/debian-$release-base.qcow2
    stamp=$({ echo "$suite"; cat "$VM_SRC/image-build/make-base-image.sh" "$VM_SRC/image-build/lib.sh" \
                "$VM_SRC"/image-build/base/*; } | sha256sum | cut -c1-16)
    base_seconds=cached
    if [ ! -s "$base" ] || [ "$(cat "$base.stamp" 2>/dev/null)" != "$stamp" ]; then
        log "building the base image"
        t0=$(date +%s)
        if bash "$VM_SRC/image-build/make-base-image.sh" --suite "$suite" --output "$base" --cache "$vm_cache" \
               >"$work/base.log" 2>&1; then
            echo "$stamp" > "$base.stamp"
            base_seconds=$(( $(date +%s) - t0 ))
        else
            fail "make-base-image.sh" "$(tail -n 30 "$work/base.log")"; vm_abort
        fi
    fi
    if [ "$base_seconds" = cached ]; then pass "base image $base (cached)"; else
        pass "base image $base (built in $base_seconds s)"; fi
}

# vm_pick_accel: KVM when it boots the base image's kernel, else TCG; printed.
vm_pick_accel() {
    if [ -n "${ONEHPC_KVM_ACCEL:-}" ]; then
        accel=$ONEHPC_KVM_ACCEL accel_why="ONEHPC_KVM_ACCEL=$ONEHPC_KVM_ACCEL"
    elif ! kvm_usable; then
        accel=tcg accel_why="no usable /dev/kvm"
    elif ! kvm_boots_bios 20; then
        accel=tcg accel_why="/dev/kvm cannot boot a BIOS boot sector"
    elif ! kvm_boots_image "$base" 60; then
        accel=tcg accel_why="/dev/kvm boots a boot sector but not the base image's kernel (nested PVM?)"
    else
        accel=kvm accel_why="/dev/kvm boots the base image's kernel"
    fi
    if [ "$accel" = kvm ]; then ready_timeout=600; else ready_timeout=900; fi
    echo "### $vm_test: accelerator $accel ($accel_why)"
}

# vm_image APPLIANCE (oneslurm|open-ondemand): the appliance image into $image, from the cache
# when nothing that goes into it changed, else built by Packer (and cached) from the
# appliance's packages layer (vm_packages_layer), as `make image` builds it. With
# VM_OOD_STANDIN=yes (set before vm_lab), the open-ondemand image is the one with Open OnDemand,
# installed by the build's own path from the lab's stand-in of OSC's repository (vm_ood_repo_up).
vm_image() {
    local appliance=$1 variant key cached layer
    if [ -n "${ONEHPC_KVM_IMAGE:-}" ]; then
        image=$ONEHPC_KVM_IMAGE build_seconds="(reused $image)"
        return 0
    fi
    variant=$(vm_variant "$appliance")
    # The .deb by what it installs (file contents and maintainer scripts), not by its bytes:
    # a rebuild with the same content has new timestamps.
    key=$({ dpkg-deb --fsys-tarfile "$deb" | tar -xO; dpkg-deb --ctrl-tarfile "$deb" | tar -xO
            vm_image_inputs; } | sha256sum | cut -c1-16)
    cached=$vm_cache/$variant-$key.qcow2
    if [ -s "$cached" ]; then
        image=$cached build_seconds="(cached $variant-$key)"
        pass "the $variant image, cached: nothing that goes into it changed ($cached)"
        return 0
    fi
    vm_packages_layer "$appliance"
    log "building the $variant image with Packer on its packages layer"
    vm_ood_repo_up
    # shellcheck disable=SC2046  # vm_build_args: words
    if PKR_VAR_cpus=$vm_cpus bash "$VM_SRC/image-build/build-image.sh" --appliance "$appliance" --base "$layer" --deb "$deb" \
           --output "$work/image" --packer-log "$work/packer.log" --accel "$accel" $(vm_build_args "$appliance") \
           >"$work/build.log" 2>&1; then
        vm_ood_repo_down
        build_seconds=$(sed -n 's/^build_seconds=//p' "$work/image/build-stats")
        pass "packer build of the $variant image on its packages layer (${build_seconds} s)"
        # One cached image per variant (named by a 16-digit key, unlike the layers): the new
        # one replaces the old (atomically).
        rm -f "$vm_cache/$variant"-????????????????.qcow2
        cp "$work/image/$(vm_image_file "$appliance")" "$cached.tmp" && mv "$cached.tmp" "$cached"
        image=$cached
    else
        vm_ood_repo_down
        fail "packer build of the $variant image" "$(tail -n 40 "$work/build.log")"; vm_abort
    fi
    vm_result "${variant//-/_}_image_bytes" "$(du -b "$image" | cut -f1)"
}

# What goes into an image besides the .deb: the install steps, the Packer files, the base (and
# for the stand-in of Open OnDemand, its sources).
vm_image_inputs() {
    cat "$VM_SRC/image-build/install-appliance.sh" "$VM_SRC/image-build/apt-source.sh" \
        "$VM_SRC/image-build/appliance.pkr.hcl" "$VM_SRC/image-build/build-image.sh" \
        "$VM_SRC/image-build/lib.sh" "$base.stamp"
    if [ "${VM_OOD_STANDIN:-}" = yes ]; then
        cat "$VM_SRC/tests/fakes/ondemand_repo.sh" "$VM_SRC/tests/fakes/ood_portal_generator.h" \
            "$VM_SRC/tests/fakes/ood_portal_generator_main.cc"
    fi
}

# The name of what vm_image builds, in the cache and the results: the appliance (or
# open-ondemand-standin for the image with the stand-in of Open OnDemand) and its Debian
# release: oneslurm-deb13, open-ondemand-deb12.
vm_variant() {
    if [ "$1" = open-ondemand ] && [ "${VM_OOD_STANDIN:-}" = yes ]; then echo "open-ondemand-standin-deb$release"
    else echo "$1-deb$release"; fi
}

# OSC's repository is out of reach here: the lab's Open OnDemand appliance is the image built
# without Open OnDemand (build-image.sh --ondemand-release none), which is named so, or, with
# VM_OOD_STANDIN=yes, the image built with release 4.0 from the lab's stand-in repository.
vm_build_args() {
    if [ "$1" != open-ondemand ]; then return 0; fi
    if [ "${VM_OOD_STANDIN:-}" = yes ]; then echo "--ondemand-release 4.0"; else echo "--ondemand-release none"; fi
}
vm_image_file() {
    if [ "$1" = open-ondemand ] && [ "${VM_OOD_STANDIN:-}" != yes ]; then echo open-ondemand-without-ood.qcow2
    else echo "$1.qcow2"; fi
}

# vm_ood_repo_up: with VM_OOD_STANDIN=yes, the stand-in of OSC's repository for the image
# build: a key pair made here, the stand-in `ondemand` package (tests/fakes/ondemand_repo.sh,
# with update-ood-portal-standin) in an apt repository signed by it under
# <root>/4.0/web/apt and the public key at <root>/key.asc, served over HTTP on the host's
# loopback, which Packer's VM reaches at 10.0.2.2 (qemu's user network). The build gets them as a
# site passes OSC's: PKR_VAR_ondemand_repo, _key_url and _key_fingerprint (no Node.js repository:
# the stand-in needs none). Cached beside the layers, so that the layer and the image trust
# the same key.
vm_ood_repo_up() {
    local root fpr port
    [ "${VM_OOD_STANDIN:-}" = yes ] || return 0
    root=$vm_cache/ondemand-standin-repo
    if [ ! -s "$root/fingerprint" ] ||
       ! cmp -s "$VM_BIN_DIR/tests/update-ood-portal-standin" "$root/update_ood_portal"; then
        rm -rf "$root" && mkdir -p "$root/gnupg" && chmod 0700 "$root/gnupg"
        fpr=$(GNUPGHOME=$root/gnupg bash -c '
            gpg --batch --quiet --passphrase "" --quick-gen-key "one-hpc lab <lab@example.org>" ed25519 sign never 2>/dev/null
            gpg --batch --with-colons --list-keys lab@example.org 2>/dev/null | awk -F: "\$1 == \"fpr\" {print \$10; exit}"')
        # shellcheck source=SCRIPTDIR/../fakes/ondemand_repo.sh
        if [ ${#fpr} -eq 40 ] &&
           GNUPGHOME=$root/gnupg gpg --batch --armor --export "$fpr" >"$root/key.asc" &&
           (. "$VM_SRC/tests/fakes/ondemand_repo.sh" && GNUPGHOME=$root/gnupg \
                ondemand_repo "$root/4.0/web/apt" "$fpr" "$VM_BIN_DIR/tests/update-ood-portal-standin") \
               >"$work/ondemand-repo.log" 2>&1; then
            cp "$VM_BIN_DIR/tests/update-ood-portal-standin" "$root/update_ood_portal"
            echo "$fpr" >"$root/fingerprint"
        else
            GNUPGHOME=$root/gnupg gpgconf --kill gpg-agent 2>/dev/null
            fail "the stand-in of OSC's repository" "$(cat "$work/ondemand-repo.log" 2>/dev/null)"; vm_abort
        fi
        GNUPGHOME=$root/gnupg gpgconf --kill gpg-agent 2>/dev/null
    fi
    fpr=$(cat "$root/fingerprint")
    "$PY" -c '
import functools, http.server, sys
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
print(s.server_address[1], flush=True)
s.serve_forever()' "$root" >"$work/ondemand-repo.port" 2>"$work/ondemand-repo-http.log" &
    repo_pid=$!
    for _ in $(seq 50); do [ -s "$work/ondemand-repo.port" ] && break; sleep 0.1; done
    port=$(head -n1 "$work/ondemand-repo.port")
    [ -n "$port" ] || { fail "the stand-in repository is served" "$(cat "$work/ondemand-repo-http.log")"; vm_abort; }
    export PKR_VAR_ondemand_repo=http://10.0.2.2:$port PKR_VAR_ondemand_key_url=http://10.0.2.2:$port/key.asc \
           PKR_VAR_ondemand_key_fingerprint=$fpr PKR_VAR_nodejs_repo=
    pass "the stand-in of OSC's repository, signed by the lab's key $fpr, served on 127.0.0.1:$port"
}
vm_ood_repo_down() {
    if [ -n "$repo_pid" ]; then kill "$repo_pid" 2>/dev/null; wait "$repo_pid" 2>/dev/null; repo_pid=""; fi
}

# vm_packages_layer APPLIANCE: the appliance's packages layer (build-image.sh --packages-only:
# the role packages on the base image) into $layer, cached while vm_image_inputs are the same.
vm_packages_layer() {
    local appliance=$1 variant key layer_seconds
    variant=$(vm_variant "$appliance")
    key=$({ echo "$variant"; vm_image_inputs; } | sha256sum | cut -c1-16)
    layer=$vm_cache/$variant-packages-$key.qcow2
    if [ -s "$layer" ]; then
        pass "the $variant packages layer, cached ($layer)"
        return 0
    fi
    log "building the $variant packages layer with Packer"
    vm_ood_repo_up
    # shellcheck disable=SC2046  # vm_build_args: words
    if PKR_VAR_cpus=$vm_cpus bash "$VM_SRC/image-build/build-image.sh" --appliance "$appliance" --base "$base" --packages-only \
           --output "$work/layer" --packer-log "$work/packer-layer.log" --accel "$accel" $(vm_build_args "$appliance") \
           >"$work/build-layer.log" 2>&1; then
        vm_ood_repo_down
        layer_seconds=$(sed -n 's/^build_seconds=//p' "$work/layer/build-stats")
        pass "packer build of the $variant packages layer (${layer_seconds} s)"
        vm_result "${variant//-/_}_packages_layer_build_seconds" "$layer_seconds"
        rm -f "$vm_cache/$variant"-packages-*.qcow2
        mv "$work/layer/$(vm_image_file "$appliance")" "$layer.tmp" && mv "$layer.tmp" "$layer"
        rm -rf "$work/layer"
    else
        vm_ood_repo_down
        fail "packer build of the $variant packages layer" "$(tail -n 40 "$work/build-layer.log")"; vm_abort
    fi
}

in_ns() { ip netns exec "$ns" "$@"; }
sim() {  # sim METHOD PATH [JSON]
    in_ns curl -sS --max-time 10 -X "$1" -H 'Content-Type: application/json' \
        ${3:+--data "$3"} "http://$net.1:5030$2"
}

# vm_net_up PREFIX: a network namespace with a bridge on PREFIX.0/24 (PREFIX.1 is the host
# side) and the OneGate simulator on PREFIX.1:5030.
vm_net_up() {
    net=$1
    ip netns add "$ns"
    in_ns ip link set lo up
    in_ns ip link add br0 type bridge
    in_ns ip addr add "$net.1/24" dev br0
    in_ns ip link set br0 up
    # Not through in_ns: $! must be the process itself (ip netns exec execs it), not a subshell.
    ip netns exec "$ns" "$VM_BIN_DIR/tests/onegate-sim" --listen "$net.1:5030" --operator-api \
        >"$work/sim.log" 2>&1 &
    sim_pid=$!
    for _ in $(seq 50); do sim GET /_sim/health >/dev/null 2>&1 && break; sleep 0.2; done
    if sim GET /_sim/health >/dev/null 2>&1; then pass "onegate-sim on $net.1:5030 in netns $ns"; else
        fail "onegate-sim starts" "$(cat "$work/sim.log")"; vm_abort
    fi
}

# vm_service APPLIANCE: the service as templates/oneflow/APPLIANCE.json describes it (roles,
# parents, max, cooldown) in the simulator, into $service_id. VMs are added one by one, so
# every role starts with cardinality 0.
vm_service() {
    local json
    json=$("$PY" - "$VM_SRC/templates/oneflow/$1.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
roles = [{"name": r["name"], "cardinality": 0, "min_vms": 0, "max_vms": r.get("max_vms", 100),
          "cooldown": r.get("cooldown", 30), "parents": r.get("parents", [])} for r in t["roles"]]
print(json.dumps({"name": t["name"], "roles": roles}))
EOF
)
    service_id=$(sim POST /_sim/services "$json" | json_get 'd.get("id")')
    if [ -z "$service_id" ]; then fail "the simulator creates the $1 service"; vm_abort; fi
}

# vm_lock NAME / vm_unlock: an exclusive lock on $vm_cache/.NAME.lock, around what tests
# running side by side (make test-vm runs two at a time) share: "deb" around the .deb (the
# build directory's cpack output) and the base image, "image-APPLIANCE" around that appliance's
# image in the cache. The second test waits while the first builds, then finds it cached.
lock_fd=""
vm_lock() {
    local t0
    mkdir -p "$vm_cache"
    exec {lock_fd}>"$vm_cache/.$1.lock"
    if ! flock -n "$lock_fd"; then
        t0=$(date +%s)
        flock "$lock_fd"
        log "waited $(( $(date +%s) - t0 )) s for another VM test's $1"
    fi
}
vm_unlock() {
    [ -n "$lock_fd" ] || return 0
    flock -u "$lock_fd"
    exec {lock_fd}>&-
    lock_fd=""
}

# vm_lab APPLIANCE PREFIX: the usual start of a test: the Debian suite, the .deb, the base image, the
# accelerator, the APPLIANCE image, the network PREFIX.0/24 with the simulator, the service.
vm_lab() {
    vm_suite "$1"
    vm_lock deb
    vm_deb
    vm_base_image
    vm_unlock
    vm_pick_accel
    vm_lock "image-$1"
    vm_image "$1"
    vm_unlock
    vm_net_up "$2"
    vm_service "$1"
}

SSH_OPTS=()
vm_ssh() {  # vm_ssh NAME COMMAND...   (one string is best: ssh joins its arguments with blanks)
    local ip=${vm_ip[$1]}; shift
    SSH_OPTS=(-i "$work/ssh-key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
              -o ConnectTimeout=5 -o BatchMode=yes -o LogLevel=ERROR)
    in_ns timeout 60 ssh "${SSH_OPTS[@]}" "root@$ip" "$@"
}

# vm_host_name NAME: the VM's short host name (a worker's Slurm node name), asked until SSH
# answers (a VM just READY may still refuse a connection; an empty name would make every later
# check on it fail). Prints "" after 180 s (sshd makes its host keys at the first boot: slow
# when many VMs share 2 cores under TCG).
vm_host_name() {
    local n="" try=0 t0
    t0=$(date +%s)
    while :; do
        n=$(vm_ssh "$1" 'hostname -s' 2>/dev/null) && [ -n "$n" ] && break
        try=$((try + 1))
        [ $(( $(date +%s) - t0 )) -lt 180 ] || break
        log "no host name from $1 yet (try $try)" >&2; sleep 3
    done
    echo "$n"
}

# make_context NAME APPLIANCE ROLE [KEY=VALUE...]: the CONTEXT ISO of one VM, from
# templates/vm/APPLIANCE.tmpl and the role's wiring in templates/oneflow/APPLIANCE.json, the
# network and OneGate of this lab, then the KEY=VALUE overrides (user inputs, wiring that
# OneFlow would resolve).
make_context() {
    local name=$1 appliance=$2 role=$3 dir=$work/$1-context; shift 3
    rm -rf "$dir"; mkdir -p "$dir"
    if [ -n "${vm_mgmt[$name]:-}" ]; then  # management on ETH0, the lab NIC on ETH1
        set -- "ETH0_IP=${vm_mgmt[$name]}" "ETH0_MAC=${vm_mgmt_mac[$name]}" \
            "ETH0_NETWORK=${vm_mgmt[$name]%.*}.0" "ETH1_IP=${vm_ip[$name]}" \
            "ETH1_MAC=${vm_mac[$name]}" "ETH1_MASK=255.255.255.0" "ETH1_NETWORK=$net.0" "$@"
    fi
    "$PY" - "$VM_SRC" "$appliance" "$role" "${vm_ip[$name]}" "${vm_mac[$name]}" "${vm_id[$name]}" \
        "$net" "$(cat "$work/ssh-key.pub")" "$dir" "$@" <<'EOF'
import json, os, sys
sys.dont_write_bytecode = True
src, appliance, role, ip, mac, vmid, net, key, out = sys.argv[1:10]
overrides = dict(a.split("=", 1) for a in sys.argv[10:])
sys.path.insert(0, os.path.join(src, "tests", "integration"))
from templates_test import parse_one_template  # the same parser the template test uses
tmpl = dict(parse_one_template(open(os.path.join(src, f"templates/vm/{appliance}.tmpl")).read()))
service = json.load(open(os.path.join(src, f"templates/oneflow/{appliance}.json")))
wiring = {k: v for r in service["roles"] if r["name"] == role
          for k, v in r["template_contents"].items() if k != "NIC"}
ctx = {}
for k, v in tmpl["CONTEXT"]:
    if k in wiring:
        v = wiring[k]
    if v.startswith("$USER["):
        v = key if k == "SSH_PUBLIC_KEY" else ""
    elif v.startswith("$"):
        v = ""                              # blank user inputs arrive as ''
    ctx[k] = v
ctx.update({"DISK_ID": "1", "TARGET": "hdb", "VMID": vmid,
            "ONEGATE_ENDPOINT": f"http://{net}.1:5030",
            "ETH0_IP": ip, "ETH0_MAC": mac, "ETH0_MASK": "255.255.255.0",
            "ETH0_NETWORK": f"{net}.0", "ETH0_GATEWAY": "", "ETH0_DNS": "",
            "ETH0_MTU": "", "ETH0_VLAN_ID": "", "ETH0_SEARCH_DOMAIN": ""})
ctx.update(overrides)
# OpenNebula: a header, NAME='value' sorted by name (byte order), only ' escaped.
lines = ["# Context variables generated by OpenNebula"]
for k in sorted(ctx, key=lambda s: s.encode()):
    lines.append(f"{k}='" + ctx[k].replace("'", "'\\''") + "'")
open(os.path.join(out, "context.sh"), "w").write("\n".join(lines) + "\n")
EOF
    printf '%s\n' "${vm_token[$name]}" > "$dir/token.txt"
    xorriso -as mkisofs -quiet -V CONTEXT -J -R -o "$work/$name-context.iso" "$dir" 2>>"$work/xorriso.log"
}

# vm_check_key_secret KEYVM: the munge key of VM KEYVM (base64) appears in no OneGate document
# (every VM's USER_TEMPLATE and CONTEXT as the operator sees them, the extended service document
# every VM reads) and in no CONTEXT CD made so far; a pass or fail line.
vm_check_key_secret() {
    local key64 docs n found=""
    key64=$(vm_ssh "$1" 'base64 -w0 /etc/munge/munge.key' 2>/dev/null)
    if [ ${#key64} -lt 40 ]; then fail "the munge key of $1 is readable for the check" "got '${key64:0:8}...'"; return; fi
    docs=$(sim GET /_sim/vms)
    for n in "${!vm_id[@]}"; do
        docs+=$(sim GET "/_sim/vms/${vm_id[$n]}")
        docs+=$(in_ns curl -sS --max-time 10 -H "X-ONEGATE-TOKEN: ${vm_token[$n]}" \
            -H "X-ONEGATE-VMID: ${vm_id[$n]}" "http://$net.1:5030/service?extended=true")
    done
    grep -qF -- "$key64" <<<"$docs" && found="a OneGate document"
    for n in "$work"/*-context.iso*; do
        [ -e "$n" ] && grep -aqF -- "$key64" "$n" && found+=" ${n##*/}"
    done
    if [ -z "$found" ] && [ ${#docs} -gt 1000 ]; then
        pass "the munge key is in no OneGate document (${#docs} bytes read) and on no CONTEXT CD"
    else
        fail "the munge key is in no OneGate document and on no CONTEXT CD" "found in: ${found:-nothing read (${#docs} bytes)}"
    fi
}

mac_of() {  # mac_of IP: the lab's MAC for an address, 02:00 and the four octets
    local octets
    IFS=. read -r -a octets <<<"$1"
    printf '02:00:%02x:%02x:%02x:%02x' "${octets[@]}"
}

new_tap() {  # new_tap: a new tap on the lab's bridge, named in $tap_made
    # The first free name: a call in a subshell ($(...)) does not advance the parent's count.
    while in_ns ip link show "tap$ntaps" >/dev/null 2>&1; do ntaps=$((ntaps + 1)); done
    tap_made=tap$ntaps
    ntaps=$((ntaps + 1))
    in_ns ip tuntap add dev "$tap_made" mode tap
    in_ns ip link set "$tap_made" master br0 up
}

# vm_opennebula VERSION: the simulator answers as the OneGate of OpenNebula VERSION: "7" (what
# every VM test gets) or "6.10", whose GET /vm and GET /vms/:id append each of a VM's external
# IPs (MONITORING's GUEST_IP, AWS_*, ...) to NIC as an entry holding an IP alone. Under 6.10
# vm_new gives every VM such an address (198.51.100.<last octet of its own>): a role that took
# the last NIC, or any NIC without a network, would take it.
vm_opennebula_version=7
vm_opennebula() {
    local reply
    reply=$(sim PUT /_sim/config "{\"opennebula_version\":\"$1\"}")
    if [ "$reply" = "{}" ]; then vm_opennebula_version=$1; pass "the OneGate simulator answers as OpenNebula $1's"
    else fail "the OneGate simulator answers as OpenNebula $1's" "$reply"; vm_abort; fi
}

# vm_check_external_nic NAME: under OpenNebula 6.10, NAME's own GET /vm (its token) carries the
# external-IP entry in NIC: the mode is in effect for what the VM reads.
vm_check_external_nic() {
    local doc
    doc=$(in_ns curl -sS --max-time 10 -H "X-ONEGATE-TOKEN: ${vm_token[$1]}" \
        -H "X-ONEGATE-VMID: ${vm_id[$1]}" "http://$net.1:5030/vm")
    if json_get '[n for n in d["VM"]["TEMPLATE"]["NIC"] if list(n) == ["IP"] and n["IP"].startswith("198.51.100.")][0]["IP"]' <<<"$doc" >/dev/null 2>&1; then
        pass "$1's GET /vm has OpenNebula 6.10's NIC entry of an external IP alone"
    else fail "$1's GET /vm has OpenNebula 6.10's NIC entry of an external IP alone" "${doc:0:400}"; fi
}

# vm_check_firmware NAME: NAME runs on the firmware vm_firmware[NAME] asked for (the kernel
# was started by UEFI when /sys/firmware/efi exists), its root on the image's partition 1.
vm_check_firmware() {
    local want=${vm_firmware[$1]:-bios} out
    out=$(vm_ssh "$1" 'if [ -d /sys/firmware/efi ]; then echo uefi; else echo bios; fi; findmnt -n -o SOURCE /' 2>&1)
    if [ "$(head -n 1 <<<"$out")" = "$want" ] && grep -qx '/dev/vda1' <<<"$out"; then
        pass "$1 booted with ${want^^} from the image (root /dev/vda1)"
    else fail "$1 booted with ${want^^} from the image (root /dev/vda1)" "$out"; fi
}

# vm_new NAME APPLIANCE ROLE IP [KEY=VALUE...]: the VM in the simulated service (a new VM id
# and token), its MAC (from the IP), tap and CONTEXT ISO; not booted. NAME may be used again
# for a new VM (a re-created one): it gets a new id, token and overlay.
vm_new() {
    local name=$1 appliance=$2 role=$3 ip=$4 reply mac; shift 4
    local idx=${name//[!0-9]/} nics
    mac=$(mac_of "$ip")
    nics="{\"ip\":\"$ip\",\"mac\":\"$mac\",\"network\":\"Service\",\"network_id\":\"0\"}"
    if [ -n "${vm_mgmt[$name]:-}" ]; then
        vm_mgmt_mac[$name]=$(mac_of "${vm_mgmt[$name]}")
        nics="{\"ip\":\"${vm_mgmt[$name]}\",\"mac\":\"${vm_mgmt_mac[$name]}\",\"network\":\"Management\",\"network_id\":\"1\"},${nics%\}},\"name\":\"compute\"}"
        [ -n "${vm_mgmt_tap[$name]:-}" ] || { new_tap; vm_mgmt_tap[$name]=$tap_made; }
    fi
    local external=""
    [ "$vm_opennebula_version" != 6.10 ] || external=",\"external_ips\":[\"198.51.100.${ip##*.}\"]"
    reply=$(sim POST /_sim/vms "{\"service_id\":$service_id,\"role\":\"$role\",\"name\":\"${role}_${idx:-0}_(service_$service_id)\",\"nics\":[$nics]$external}")
    vm_id[$name]=$(json_get 'd.get("id")' <<<"$reply")
    vm_token[$name]=$(json_get 'd.get("token")' <<<"$reply")
    if [ -z "${vm_id[$name]}" ] || [ -z "${vm_token[$name]}" ]; then
        fail "$name: the simulator creates the VM" "$reply"
        return 1
    fi
    vm_ip[$name]=$ip vm_mac[$name]=$mac
    [ -n "${vm_tap[$name]:-}" ] || { new_tap; vm_tap[$name]=$tap_made; }
    make_context "$name" "$appliance" "$role" "$@"
}

# vm_boot NAME [MEMORY_MB [DISK_FILE...]]: qemu on a new copy-on-write overlay of $image (the
# root disk), the CONTEXT CD, the extra DISK_FILEs (raw, virtio: vdb, vdc, ...), the tap;
# serial console to $work/NAME.console. Also used to boot the same VM again (reboot after a
# poweroff): the overlay is kept when it exists. Its size: vm_disk_size[NAME], else the image's.
vm_boot() {
    local name=$1 mem=${2:-1536} d
    shift; [ $# -eq 0 ] || shift
    local -a disks=()
    for d in "$@"; do disks+=(-drive "file=$d,if=virtio,format=raw,cache=none"); done
    local -a mgmt=()
    [ -z "${vm_mgmt_tap[$name]:-}" ] ||
        mgmt=(-netdev "tap,id=n1,ifname=${vm_mgmt_tap[$name]},script=no,downscript=no"
              -device "virtio-net-pci,netdev=n1,mac=${vm_mgmt_mac[$name]}")
    [ -f "$work/$name.qcow2" ] ||
        qemu-img create -q -f qcow2 -b "$image" -F qcow2 "$work/$name.qcow2" ${vm_disk_size[$name]:+"${vm_disk_size[$name]}"}
    local -a firmware=()
    if [ "${vm_firmware[$name]:-bios}" = uefi ]; then
        if [ ! -f "$OVMF_CODE" ] || [ ! -f "$OVMF_VARS" ]; then
            fail "$name: UEFI firmware $OVMF_CODE and $OVMF_VARS (apt-get install ovmf)"; vm_abort
        fi
        [ -f "$work/$name-vars.fd" ] || cp "$OVMF_VARS" "$work/$name-vars.fd"
        firmware=(-drive "if=pflash,format=raw,readonly=on,file=$OVMF_CODE"
                  -drive "if=pflash,format=raw,file=$work/$name-vars.fd")
    fi
    boot_ms[$name]=$(now_ms)
    ip netns exec "$ns" qemu-system-x86_64 -name "$name" -accel "$accel" -smp "$vm_cpus" -m "$mem" \
        "${firmware[@]}" \
        -drive "file=$work/$name.qcow2,if=virtio,format=qcow2,discard=unmap" \
        "${disks[@]}" \
        -drive "file=$work/$name-context.iso,media=cdrom,if=ide,readonly=on,id=cd0" \
        "${mgmt[@]}" \
        -netdev "tap,id=n0,ifname=${vm_tap[$name]},script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=${vm_mac[$name]}" \
        -display none -monitor "unix:$work/$name.monitor,server=on,wait=off" \
        -serial "file:$work/$name.console" 2>>"$work/$name.qemu.log" &
    qemu_pid[$name]=$!
}

# vm_monitor NAME COMMAND: one command on the VM's qemu monitor; an error message fails (a CD
# drive that is locked is retried for 60 s).
vm_monitor() {
    "$PY" - "$work/$1.monitor" "$2" <<'EOF'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
cmd = sys.argv[2]
def until_prompt():
    out = b""
    while not out.endswith(b"(qemu) "):
        chunk = s.recv(4096)
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace")
until_prompt()
deadline = time.monotonic() + 60
while True:
    s.sendall(cmd.encode() + b"\n")
    reply = until_prompt()
    # The monitor echoes the command; anything else before the prompt is an error message.
    # drive_add answers "OK" on success.
    lines = [l for l in reply.replace("\r", "").split("\n")
             if l.strip() and l.strip() != "OK" and "(qemu)" not in l
             and cmd.split(",")[0] not in l]
    if not lines:
        break
    if "locked" not in lines[0] or time.monotonic() > deadline:  # a CD in use: retried
        sys.exit("qemu monitor: " + " ".join(lines))
    time.sleep(1)
EOF
}

# vm_attach_nic NAME IP NETWORK NETWORK_ID: onevm nic-attach on the running VM: a new tap, a
# virtio NIC hot-plugged through qemu's monitor (MAC from the IP), the NIC in OneGate (the VM's
# last). The caller then gives the VM its new CD (vm_change_cd with the ETHn_* variables).
vm_attach_nic() {
    local name=$1 ip=$2 mac id
    mac=$(mac_of "$ip") id=hot$ntaps
    new_tap
    vm_monitor "$name" "netdev_add tap,id=$id,ifname=$tap_made,script=no,downscript=no" &&
        vm_monitor "$name" "device_add virtio-net-pci,netdev=$id,mac=$mac,id=dev$id" &&
        [ "$(sim POST "/_sim/vms/${vm_id[$name]}/nics" "{\"ip\":\"$ip\",\"mac\":\"$mac\",\"network\":\"$3\",\"network_id\":\"$4\"}")" = "{}" ]
}

# vm_attach_disk NAME FILE: onevm disk-attach on the running VM: FILE (raw) hot-plugged as a
# virtio disk through qemu's monitor (the guest names it vdb, vdc, ... in order).
vm_attach_disk() {
    local id=hd$(( ntaps + ${#vm_results[@]} + $(now_ms) % 100000 ))
    vm_monitor "$1" "drive_add 0 if=none,id=$id,file=$2,format=raw,cache=none" &&
        vm_monitor "$1" "device_add virtio-blk-pci,drive=$id,id=dev$id"
}

# vm_attach_scsi_disk NAME FILE TARGET_NUMBER: onevm disk-attach of a disk with TARGET sd<x> on
# the running VM: FILE (raw) hot-plugged as a SCSI disk at SCSI target TARGET_NUMBER of a
# virtio-scsi controller (added on the first call), where OpenNebula's KVM driver puts TARGET
# sd<'a' + TARGET_NUMBER> (controller 0, bus 0, unit 0). The guest names it sda, sdb, ... in
# the order it finds it.
declare -A vm_scsi_controller=()
vm_attach_scsi_disk() {
    local id=hd$(( ntaps + ${#vm_results[@]} + $(now_ms) % 100000 ))
    if [ -z "${vm_scsi_controller[$1]:-}" ]; then
        vm_monitor "$1" "device_add virtio-scsi-pci,id=scsi0" || return 1
        vm_scsi_controller[$1]=scsi0
    fi
    vm_monitor "$1" "drive_add 0 if=none,id=$id,file=$2,format=raw,cache=none" &&
        vm_monitor "$1" "device_add scsi-hd,drive=$id,id=dev$id,bus=scsi0.0,channel=0,scsi-id=$3,lun=0"
}

# vm_sim_disk NAME JSON: the disk in OneGate's view of the VM (its TEMPLATE.DISK, the last one).
vm_sim_disk() {
    local reply
    reply=$(sim POST "/_sim/vms/${vm_id[$1]}/disks" "$2")
    [ "$reply" = "{}" ] || { echo "simulator: $reply"; return 1; }
}

# vm_forget_status NAME: READY and ERROR erased in OneGate before the VM boots again (both
# persist across a reboot, as in OpenNebula; configure erases READY only once it runs, so a
# wait right after the boot would read the last boot's answer).
vm_forget_status() {
    sim DELETE "/_sim/vms/${vm_id[$1]}/user_template/READY" >/dev/null 2>&1
    sim DELETE "/_sim/vms/${vm_id[$1]}/user_template/ERROR" >/dev/null 2>&1
    return 0
}

# vm_change_cd NAME APPLIANCE ROLE [KEY=VALUE...]: a new CONTEXT ISO for the running VM (the
# same VM id and token, the KEY=VALUE overrides given again) put into its CD drive through
# qemu's monitor, as OpenNebula swaps the CD of a running VM on `onevm updateconf` (libvirt's
# change-media): the guest sees a media change. systemd's udev locks the tray of a drive with
# media so that an eject request reaches it (60-cdrom_id.rules); qemu then refuses the first
# `change` ("locked"), passes the eject request to the guest, and the change is retried until
# the guest has opened the tray (60 s) — libvirt waits the same way. A CD the guest keeps
# mounted is never released: that is a failure. The old ISO is renamed first, so qemu never
# reads a half-written file.
vm_change_cd() {
    local name=$1; shift
    mv "$work/$name-context.iso" "$work/$name-context.iso.$(now_ms)"
    make_context "$name" "$@"
    vm_monitor "$name" "change cd0 $work/$name-context.iso"
}

# vm_forget NAME: the VM is gone for good (its qemu killed or exited): a new vm_new NAME makes
# a new VM with a new root disk.
vm_forget() {
    local pid=${qemu_pid[$1]:-}
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
    [ -z "$pid" ] || wait "$pid" 2>/dev/null
    unset "qemu_pid[$1]"
    rm -f "$work/$1.qcow2"
}

# vm_wait_down NAME SECONDS: its qemu exited (after a poweroff) within SECONDS.
vm_wait_down() {
    local i
    for ((i = 0; i < $2; i++)); do kill -0 "${qemu_pid[$1]}" 2>/dev/null || break; sleep 1; done
    if kill -0 "${qemu_pid[$1]}" 2>/dev/null; then return 1; fi
    wait "${qemu_pid[$1]}" 2>/dev/null
    return 0
}

# vm_wait_ssh NAME SECONDS: sshd answers (it may start after a configure that failed).
vm_wait_ssh() {
    local i
    for ((i = 0; i < $2; i += 3)); do vm_ssh "$1" true 2>/dev/null && return 0; sleep 3; done
    return 1
}

# vm_wait_ready NAME SECONDS [since_ms]: READY=YES (0), ERROR published or configure failed
# without publishing (1: the reason printed), or timeout (2).
vm_wait_ready() {
    local name=$1 vmid=${vm_id[$1]} deadline=$(( $(date +%s) + $2 )) ut status next_ssh=0
    while [ "$(date +%s)" -lt "$deadline" ]; do
        ut=$(sim GET "/_sim/vms/$vmid/user_template" 2>/dev/null)
        if [ "$(json_get 'd.get("READY")' <<<"$ut" 2>/dev/null)" = YES ]; then return 0; fi
        if [ -n "$(json_get 'd.get("ERROR")' <<<"$ut" 2>/dev/null)" ]; then
            echo "ERROR=$(json_get 'd.get("ERROR")' <<<"$ut")"; return 1
        fi
        if ! kill -0 "${qemu_pid[$name]}" 2>/dev/null; then echo "qemu exited"; return 2; fi
        if grep -q 'KVM internal error' "$work/$name.qemu.log" 2>/dev/null; then
            echo "qemu: $(head -n 3 "$work/$name.qemu.log")"; return 2
        fi
        # A configure that failed before it could reach OneGate publishes nothing: ask the VM.
        if [ "$(date +%s)" -ge "$next_ssh" ]; then
            next_ssh=$(( $(date +%s) + 30 ))
            if status=$(vm_ssh "$name" 'if systemctl is-failed -q one-hpc-configure.service; then journalctl -b -u one-hpc-configure.service --no-pager | tail -n 4; cat /run/one-hpc/status.json 2>/dev/null; fi' 2>/dev/null) &&
               [ -n "$status" ]; then
                # The ERROR may have reached OneGate while the SSH check ran: it wins.
                ut=$(sim GET "/_sim/vms/$vmid/user_template" 2>/dev/null)
                if [ -n "$(json_get 'd.get("ERROR")' <<<"$ut" 2>/dev/null)" ]; then
                    echo "ERROR=$(json_get 'd.get("ERROR")' <<<"$ut")"; return 1
                fi
                echo "one-hpc-configure.service failed without publishing to OneGate:"
                echo "$status"
                return 1
            fi
        fi
        sleep 2
    done
    echo "no READY nor ERROR after $2 s"
    return 2
}

vm_diagnose() {  # vm_diagnose NAME
    echo "== $1: last console lines"; tail -n 25 "$work/$1.console" 2>/dev/null
    echo "== $1: one-hpc journal (over SSH)"
    vm_ssh "$1" 'systemctl --no-pager status one-hpc-configure.service context-lite.service; journalctl --no-pager -b -u one-hpc-configure.service | tail -n 40' 2>&1
}

# vm_start NAME APPLIANCE ROLE IP MEMORY_MB "DISK..." [KEY=VALUE...]: vm_launch, then
# vm_await.
vm_start() {
    vm_launch "$@" || return 1
    vm_await "$1"
}

# vm_launch NAME APPLIANCE ROLE IP MEMORY_MB "DISK..." [KEY=VALUE...]: vm_new + vm_boot, without
# waiting (VMs of one role boot together, as OneFlow deploys them).
vm_launch() {
    local name=$1 appliance=$2 role=$3 ip=$4 mem=$5 disk_list=$6; shift 6
    vm_new "$name" "$appliance" "$role" "$ip" "$@" || return 1
    vm_role[$name]=$role
    log "booting $name ($role, VM ${vm_id[$name]}, $ip)"
    # shellcheck disable=SC2086  # the disk list is split on blanks
    vm_boot "$name" "$mem" $disk_list
}

# vm_await NAME: waits for the launched VM's READY=YES (a PASS with the time from qemu's start,
# or a FAIL with a diagnosis).
vm_await() {
    local name=$1 role=${vm_role[$1]} why
    if why=$(vm_wait_ready "$name" "$ready_timeout"); then
        ready_seconds[$name]=$(secs_since_ms "${boot_ms[$name]}")
        pass "$name ($role) boots and publishes READY=YES (${ready_seconds[$name]} s)"
        vm_result "${name}_boot_to_ready_seconds" "${ready_seconds[$name]}"
        # sshd may still be starting (READY comes from one-hpc, not from sshd)
        vm_wait_ssh "$name" 120 || fail "$name: sshd answers within 120 s of READY"
        return 0
    fi
    fail "$name ($role) boots and publishes READY=YES" "$why
$(vm_diagnose "$name")"
    vm_result "${name}_boot_to_ready_seconds" "not reached"
    return 1
}
