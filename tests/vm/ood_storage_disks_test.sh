#!/bin/bash
# The storage role's home disk when it changes underneath, on one real storage VM
# of the open-ondemand image (tests/vm/vm_lib.sh): virtio disks, one hot-plugged through
# qemu's monitor as `onevm disk-attach` does, a CONTEXT CD, the OneGate simulator.
#
# Each a PASS/FAIL line:
#   1. a storage VM started without its datablock keeps the homes in /export/home on the root
#      disk; alice's home is made there;
#   2. two blank disks are attached later, with other names in the guest than OpenNebula's:
#      a volatile virtio disk that OneGate lists as TARGET vdc and the guest calls vdb (as after
#      a detach: the guest takes the lowest free name), and the persistent image ood-home on
#      the SCSI bus, TARGET sdb (SCSI target 1, as OpenNebula's KVM driver pins it), which the
#      guest calls sda; the VM reconfigured: refused (exit 4, an ERROR that lists the homes
#      that would be hidden), both disks' bytes unchanged, nothing mounted;
#   3. the operator moves the homes away: the next configure formats sda (the datablock
#      OneGate names, found by its SCSI address, not by a name) ood-home and mounts it on
#      /export/home; the volatile vdb (OpenNebula's vdc, found by its size) is untouched;
#   4. the VM boots with another ood-home disk (another service's, another copy) instead: it
#      stops with an ERROR naming both UUIDs, that disk's bytes unchanged, export-home.mount
#      unchanged;
#   5. booted with its own disk again: READY, the disk mounted as it is.
#   The Slurm state: in step 3 the portal's state that the root disk's /export/slurm
#   held (a key 0400, a state directory of the slurm uid 0700) is copied onto the disk, owners
#   and modes kept, and bind-mounted back on /export/slurm; in step 5 export-slurm.mount
#   mounts it at boot;
#   6. the storage VM is replaced (a new root disk, the same datablocks): READY, and the portal
#      reads the same key and queue over NFS from /export/slurm (a real NFS mount from the
#      portal's address, which the simulator lists); a compute-network address is not served
#      /export/slurm.
#
# Label vm-scenarios: `make test-vm` runs it, `make test` does not. Figures in
# $ONEHPC_BINARY_DIR/ood_storage_disks-results.txt. Exit 77 (skipped) as vm_lib.sh says.
set -uo pipefail

# shellcheck source=SCRIPTDIR/vm_lib.sh
. "$(dirname "$0")/vm_lib.sh"
vm_begin ood_storage_disks

NET=10.79.4
STO_IP=$NET.11
vm_lab open-ondemand "$NET"
sum() { sha256sum < "$1" | cut -d' ' -f1; }

# ---- 1. no datablock: homes on the root disk ------------------------------------------------------
vm_start late open-ondemand storage "$STO_IP" 1024 "" || vm_report
out=$(vm_ssh late 'findmnt -rn /export/home; echo mounts-end; mkdir -p /export/home/alice && echo "alice thesis" > /export/home/alice/thesis.txt && chown -R 10001:10001 /export/home/alice && echo made')
if grep -q '^mounts-end$' <<<"$out" && ! grep -q '^/export/home' <<<"$out" && grep -q '^made$' <<<"$out"; then
    pass "without a datablock the homes are in /export/home on the root disk (alice's made there)"
else fail "without a datablock the homes are in /export/home on the root disk" "$out"; fi

# ---- 2. blank disks attached later: refused, untouched ----------------------------------------------
# OpenNebula's view of the disks (TEMPLATE.DISK in the extended service document).
vm_sim_disk late '{"TARGET":"vda","IMAGE":"open-ondemand","PERSISTENT":"NO","TYPE":"FILE"}' ||
    fail "the simulator lists the root disk"
scratch_disk=$work/scratch.raw home_disk=$work/home.raw
truncate -s 1G "$scratch_disk" "$home_disk"
blank_sum=$(sum "$home_disk")
if vm_attach_disk late "$scratch_disk" && vm_attach_scsi_disk late "$home_disk" 1; then
    pass "a volatile virtio disk and a persistent blank disk on the SCSI bus (target 1) are hot-plugged (qemu monitor)"
else fail "a volatile virtio disk and a persistent blank SCSI disk are hot-plugged (qemu monitor)"; vm_report; fi
if ! { vm_sim_disk late '{"TARGET":"vdc","TYPE":"fs","SIZE":"1024"}' &&
       vm_sim_disk late '{"TARGET":"sdb","IMAGE":"ood-home","PERSISTENT":"YES","TYPE":"FILE","SIZE":"1024"}'; }; then
    fail "the simulator lists the attached disks"
fi
wait_until 60 vm_ssh late 'test -b /dev/vdb && test -b /dev/sda' || fail "the guest sees /dev/vdb and /dev/sda within 60 s"
out=$(vm_ssh late 'ls /dev/vdc /dev/sdb 2>&1; readlink -f /sys/block/sda/device')
if grep -q 'vdc.*No such file' <<<"$out" && grep -q 'sdb.*No such file' <<<"$out" && grep -q ':0:1:0$' <<<"$out"; then
    pass "the guest's names are not OpenNebula's: no /dev/vdc, no /dev/sdb; sda is at SCSI target 1"
else fail "the guest's names are not OpenNebula's (no /dev/vdc, no /dev/sdb; sda at SCSI target 1)" "$out"; fi
out=$(vm_ssh late 'one-hpc configure 2>&1; echo "rc=$?"; findmnt -rn -o SOURCE /export/home; ls /export/home')
why=$(sim GET "/_sim/vms/${vm_id[late]}/user_template" | json_get 'd.get("ERROR", "")')
if grep -q '^rc=4$' <<<"$out" && grep -q 'holds 1 entries (alice)' <<<"$out" &&
   grep -q 'holds 1 entries (alice)' <<<"$why"; then
    pass "disks attached over root-disk homes are refused (exit 4, ERROR: ${why:0:160})"
else fail "disks attached over root-disk homes are refused with exit 4 and an ERROR" "$out
ERROR=$why"; fi
if ! grep -q '^/dev/vd' <<<"$out" && grep -qx alice <<<"$out"; then
    pass "nothing is mounted over /export/home; alice's home is still in view"
else fail "nothing is mounted over /export/home" "$out"; fi
if [ "$(sum "$home_disk")" = "$blank_sum" ] && [ "$(sum "$scratch_disk")" = "$blank_sum" ]; then
    pass "the attached disks' bytes are unchanged"
else fail "the attached disks' bytes are unchanged"; fi

# ---- 3. the homes moved away: the datablock is formatted and mounted --------------------------------
# What a portal kept on the root disk's /export/slurm before this version.
vm_ssh late 'mkdir -p /export/slurm/state && echo "the queue" > /export/slurm/state/job_state && chown -R 64030:64030 /export/slurm/state && chmod 0700 /export/slurm/state && printf "the cluster key" > /export/slurm/munge.key && chmod 0400 /export/slurm/munge.key' ||
    fail "the root disk's /export/slurm is given a portal's state"
# shellcheck disable=SC2016  # PIPESTATUS of the guest's shell
out=$(vm_ssh late 'mv /export/home/alice /root/alice-moved && one-hpc configure 2>&1 | grep -o "TARGET [a-z]* is /dev/[a-z]* ([^)]*)"; echo "rc=${PIPESTATUS[0]}"; blkid -o export /dev/sda; findmnt -rn -o SOURCE /export/home; ls /var/lib/one-hpc/home-mkfs.json 2>&1; tail -c 512 /dev/sda | head -c 60; echo; findmnt -rn /export/home >/dev/null && cp -a /root/alice-moved /export/home/alice && cat /export/home/alice/thesis.txt')
if grep -q '^rc=0$' <<<"$out" && grep -q '^LABEL=ood-home$' <<<"$out" && grep -q '^/dev/sda$' <<<"$out" &&
   grep -q '^alice thesis$' <<<"$out" && grep -qF 'TARGET sdb is /dev/sda (SCSI target 1)' <<<"$out" &&
   grep -qF 'TARGET vdc is /dev/vdb (its size, 1024 MiB; the guest names it otherwise)' <<<"$out"; then
    pass "once /export/home is empty, sda (OpenNebula's sdb, found by its SCSI address) is formatted ood-home and mounted (alice's home copied onto it); vdb is OpenNebula's vdc, found by its size"
else fail "once /export/home is empty, sda (OpenNebula's sdb) is formatted ood-home and mounted" "$out"; fi
if grep -q 'home-mkfs.json.*No such file' <<<"$out" && grep -q 'one-hpc: mkfs of the ood-home disk begun by this VM' <<<"$out"; then
    pass "the format record is gone after mkfs; the marker written before mkfs is still at the disk's end (mkfs -E nodiscard)"
else fail "the format record is gone after mkfs and the marker is at the disk's end" "$out"; fi
if [ "$(sum "$scratch_disk")" = "$blank_sum" ]; then pass "the volatile vdb (OpenNebula's vdc) is untouched"
else fail "the volatile vdb (OpenNebula's vdc) is untouched"; fi
out=$(vm_ssh late 'findmnt -rn -o SOURCE,TARGET /export/slurm; stat -c "%n %a %u" /export/home/.one-hpc-state /export/slurm/munge.key /export/slurm/state; cat /export/slurm/state/job_state; systemctl is-active nfs-server export-slurm.mount; systemctl is-enabled export-slurm.mount')
if grep -qF '/dev/sda[/.one-hpc-state/slurm] /export/slurm' <<<"$out" &&
   grep -qx '/export/home/.one-hpc-state 700 0' <<<"$out" && grep -qx '/export/slurm/munge.key 400 0' <<<"$out" &&
   grep -qx '/export/slurm/state 700 64030' <<<"$out" && grep -qx 'the queue' <<<"$out" &&
   [ "$(grep -c '^active$' <<<"$out")" = 2 ] && grep -qx enabled <<<"$out"; then
    pass "the root disk's Slurm state is copied onto sda (owners and modes kept) and bind-mounted on /export/slurm; nfs-server runs again"
else fail "the root disk's Slurm state is copied onto sda and bind-mounted on /export/slurm" "$out"; fi
our_uuid=$(vm_ssh late 'blkid -s UUID -o value /dev/sda')
unit_before=$(vm_ssh late 'sha256sum /etc/systemd/system/export-home.mount' | cut -d' ' -f1)

# ---- 4. another ood-home disk instead: refused naming both UUIDs -----------------------------------
vm_ssh late 'systemctl poweroff' >/dev/null 2>&1
vm_wait_down late 180 || { fail "late powers off within 180 s"; vm_forget late; vm_report; }
other_disk=$work/other.raw
mkdir -p "$work/other-files"; echo "another service's homes" > "$work/other-files/README"
truncate -s 256M "$other_disk"
mkfs.ext4 -q -F -L ood-home -d "$work/other-files" "$other_disk"
other_uuid=$(blkid -s UUID -o value "$other_disk")
other_sum=$(sum "$other_disk")
log "booting late again with another ood-home disk (UUID $other_uuid; its own is $our_uuid)"
vm_forget_status late
vm_boot late 1024 "$other_disk"
why=$(vm_wait_ready late "$ready_timeout"); rc=$?
if [ "$rc" = 1 ] && grep -q "$other_uuid" <<<"$why" && grep -q "$our_uuid" <<<"$why"; then
    pass "another ood-home disk stops the VM with an ERROR naming both UUIDs ($(secs_since_ms "${boot_ms[late]}") s): ${why:0:200}"
else fail "another ood-home disk stops the VM with an ERROR naming both UUIDs" "rc=$rc: $why"; fi
vm_wait_ssh late 120
out=$(vm_ssh late 'findmnt -rn -S /dev/vdb; sha256sum /etc/systemd/system/export-home.mount; echo ssh-ok')
if [ "$(tail -n1 <<<"$out")" = ssh-ok ] && ! grep -q '^/' <<<"$out" && grep -q "^$unit_before " <<<"$out"; then
    pass "the other disk is not mounted and export-home.mount is unchanged"
else fail "the other disk is not mounted and export-home.mount is unchanged" "$out"; fi
vm_ssh late 'systemctl poweroff' >/dev/null 2>&1
vm_wait_down late 180 || { fail "late powers off within 180 s"; vm_forget late; vm_report; }
if [ "$(sum "$other_disk")" = "$other_sum" ]; then pass "the other disk's bytes are unchanged"
else fail "the other disk's bytes are unchanged"; fi

# ---- 5. its own disk again -------------------------------------------------------------------------
log "booting late with its own disk again"
vm_forget_status late
vm_boot late 1024 "$scratch_disk" "$home_disk"
if why=$(vm_wait_ready late "$ready_timeout"); then
    vm_result late_own_disk_again_seconds "$(secs_since_ms "${boot_ms[late]}")"
    vm_wait_ssh late 120
    out=$(vm_ssh late 'findmnt -rn -o SOURCE /export/home; cat /export/home/alice/thesis.txt; findmnt -rn -o SOURCE /export/slurm')
    if grep -q '^/dev/vdc$' <<<"$out" && grep -q '^alice thesis$' <<<"$out"; then
        pass "with its own disk again: READY, the disk mounted as it is, alice's file there"
    else fail "with its own disk again: the disk mounted as it is, alice's file there" "$out"; fi
    if grep -qF '/dev/vdc[/.one-hpc-state/slurm]' <<<"$out"; then
        pass "export-slurm.mount mounts the disk's Slurm state at boot"
    else fail "export-slurm.mount mounts the disk's Slurm state at boot" "$out"; fi
else fail "with its own disk again: READY" "$why
$(vm_diagnose late)"; fi

# ---- 6. the storage VM replaced, the same datablocks: the portal finds its state ------------------
vm_ssh late 'systemctl poweroff' >/dev/null 2>&1
vm_wait_down late 180 || fail "late powers off within 180 s"
vm_forget late
PORTAL_IP=$NET.20
reply=$(sim POST /_sim/vms "{\"service_id\":$service_id,\"role\":\"portal\",\"name\":\"portal_0_(service_$service_id)\",\"nics\":[{\"ip\":\"$PORTAL_IP\",\"mac\":\"$(mac_of "$PORTAL_IP")\",\"network\":\"Service\",\"network_id\":\"0\"}]}")
[ -n "$(json_get 'd.get("id")' <<<"$reply")" ] || fail "the simulator lists a portal at $PORTAL_IP" "$reply"
if vm_start again open-ondemand storage "$NET.12" 1024 "$scratch_disk $home_disk"; then
    # The portal's NFS mount, from the portal's address (added to this VM for the test, with
    # a local route whose source is that address: without it the kernel would send from this
    # VM's own, compute-network, address). First the compute network's view: no state export.
    out=$(vm_ssh again "mkdir -p /mnt/compute-state /mnt/portal-state; timeout 30 mount -t nfs4 $NET.12:/export/slurm /mnt/compute-state 2>&1 && echo compute-mounted; dev=\$(ip -o -4 addr show | awk '/ $NET.12\\//{print \$2}'); ip addr add $PORTAL_IP/32 dev \$dev && ip route replace local $PORTAL_IP dev \$dev table local proto kernel scope host src $PORTAL_IP && timeout 30 mount -t nfs4 $PORTAL_IP:/export/slurm /mnt/portal-state && cat /mnt/portal-state/munge.key; echo; cat /mnt/portal-state/state/job_state; touch /mnt/portal-state/written-as-root && ls -n /export/home/.one-hpc-state/slurm/written-as-root; umount /mnt/portal-state; exportfs -v | tr -s ' \t\n' ' '")
    if grep -qx 'the cluster key' <<<"$out" && grep -qx 'the queue' <<<"$out" &&
       grep -q ' 0 0 .*written-as-root' <<<"$out" && grep -q "/export/slurm $PORTAL_IP(.*mountpoint" <<<"$out"; then
        pass "the replaced storage VM serves the same munge key and queue to the portal over NFS (root writes land on the disk; /export/slurm exported with mountpoint)"
    else fail "the replaced storage VM serves the same munge key and queue to the portal over NFS" "$out"; fi
    if ! grep -q compute-mounted <<<"$out" && grep -q 'No such file or directory' <<<"$out"; then
        pass "a compute-network address is not served /export/slurm (NFSv4 hides it)"
    else fail "a compute-network address is not served /export/slurm" "$out"; fi
fi

vm_report
