#!/bin/bash
# The Open OnDemand portal with the homes on the site's own NFS server, on real VMs
# (tests/vm/vm_lib.sh): a storage VM (state and software only, ONEAPP_HOME_NFS_ENABLED=YES), a
# portal, and a fourth VM outside the service that plays the site's NFS server (the
# open-ondemand image's kernel NFS server, set up by hand over SSH as a site administrator
# would; one-hpc's own configure there fails, having no role, and touches nothing). One NIC
# each on a private bridge (10.79.2.0/24), the OneGate simulator, a CONTEXT CD per VM; the
# storage VM has a management NIC first (10.79.12.0/24, ETH0) and its compute NIC second
# (ETH1, named "compute" as the service template names it).
#
# The compute NIC is named, never the last NIC; PASS/FAIL lines:
#   - the storage VM exports to and lets Squid serve the compute network, not the management
#     network of its first NIC;
#   - a third NIC is hot-plugged (qemu monitor, as onevm nic-attach does) with a new CONTEXT CD
#     (ETH2 now the last NIC): the reconfigure that udev starts keeps the exports and Squid's
#     localnet byte for byte and names the NIC it chose.
#
# Scenario 11, each a PASS/FAIL line:
#   - the site server exports /srv/homes with root_squash to the whole network: the portal
#     stops with an ERROR that names the exact address the server must grant no_root_squash
#     to (the portal's own, the source address of its route to the server);
#   - the administrator exports /srv/homes with no_root_squash to exactly that address, and the
#     operator reconfigures the portal the way OpenNebula does (a new CONTEXT CD put into the
#     running VM's drive): the udev rule starts one-hpc-reconfigure.service, the configure
#     succeeds (READY=YES, the ERROR erased);
#   - alice's home is created at her first login (the Open OnDemand hook
#     /usr/libexec/one-hpc/one-hpc-home-create --user alice) on the site's server, owned by
#     her uid, mode 0700.
#
# The portal, booted from the image built without Open OnDemand (the lab's open-ondemand image):
# Apache disabled and stopped, nothing on 443, READY=YES with OneGate's OOD_PORTAL saying
# "absent: no Open OnDemand in this image ...", `one-hpc status` and the journal saying so;
# pwauth root:www-data 4750. (The portal that serves Open OnDemand, its stand-in, is
# ood_scenarios_test.sh's scenario 12.)
#
# The portal boots with UEFI (OVMF, as FIRMWARE="UEFI" gives it), the other VMs with BIOS, from
# the same image.
#
# Against the OneGate of OpenNebula 6.10 (the simulator's 6.10 mode, vm_opennebula): every VM's
# GET /vm carries an extra NIC entry holding only an external IP (198.51.100.x); the storage
# VM's exports and Squid never name it, and the portal reaches the storage and site servers as
# under 7.x. The other VM tests run against 7.x.
#
# Label vm-scenarios: `make test-vm` runs it, `make test` does not. Figures in
# $ONEHPC_BINARY_DIR/ood_site_nfs-results.txt. Exit 77 (skipped) as vm_lib.sh says.
# shellcheck disable=SC2317  # the predicates are called through wait_until
set -uo pipefail

# shellcheck source=SCRIPTDIR/vm_lib.sh
. "$(dirname "$0")/vm_lib.sh"
vm_begin ood_site_nfs

NET=10.79.2 MGMT=10.79.12 HOT=10.79.22
STO_IP=$NET.11 PORTAL_IP=$NET.12 SITE_IP=$NET.30
SITE_EXPORT=/srv/homes
HOME_NFS=("ONEAPP_HOME_NFS_ENABLED=YES" "ONEAPP_HOME_NFS_SERVER=$SITE_IP"
          "ONEAPP_HOME_NFS_EXPORT=$SITE_EXPORT")
PORTAL_CTX=("ONEAPP_NFS_HOST=$STO_IP" "ONEAPP_AUTH_LOCAL_USERS=alice:alicepass1" "${HOME_NFS[@]}")

vm_lab open-ondemand "$NET"
vm_opennebula 6.10

# ---- the site's NFS server (outside the service) and the storage VM, booted together ------------
in_service=$service_id
service_id=-1  # vm_new: a VM of no service
vm_new site open-ondemand storage "$SITE_IP" "ONEAPP_ROLE=" || vm_report
service_id=$in_service
log "booting site (the site's NFS server, VM ${vm_id[site]}, outside the service, $SITE_IP)"
vm_boot site 768
vm_mgmt[storage]=$MGMT.11  # NIC0 management, NIC1 (the lab's) named compute
vm_new storage open-ondemand storage "$STO_IP" "ONEAPP_HOME_NFS_ENABLED=YES" || vm_report
log "booting storage (storage, VM ${vm_id[storage]}, $STO_IP)"
vm_boot storage 1024
if why=$(vm_wait_ready storage "$ready_timeout"); then
    vm_result storage_boot_to_ready_seconds "$(secs_since_ms "${boot_ms[storage]}")"
    pass "storage (homes elsewhere) boots and publishes READY=YES ($(secs_since_ms "${boot_ms[storage]}") s, with the site VM)"
else
    fail "storage (homes elsewhere) boots and publishes READY=YES" "$why
$(vm_diagnose storage)"
    vm_report
fi
# sshd may still be starting (READY comes from one-hpc, not from sshd)
vm_wait_ssh storage 120 || fail "storage: sshd answers within 120 s of READY"
vm_check_external_nic storage
if ! vm_wait_ssh site 300; then fail "site: sshd answers"; vm_report; fi
out=$(vm_ssh storage 'exportfs -s' 2>&1)
# (the Slurm state export waits for a portal to export to)
if grep -q '^/export/software ' <<<"$out" && ! grep -q '^/export/home ' <<<"$out"; then
    pass "storage exports the software tree, not /export/home (ONEAPP_HOME_NFS_ENABLED=YES)"
else fail "storage exports the software tree, not /export/home" "$out"; fi

# ---- the compute NIC is named: a NIC attached later moves nothing ----------------------
trusted() {  # what the storage VM trusts: its exports file and Squid's localnet
    vm_ssh storage 'cat /etc/exports.d/one-hpc.exports; grep "^acl localnet" /etc/squid/squid.conf'
}
before=$(trusted 2>&1)
if grep -q "^/export/software  *$NET.0/24(" <<<"$before" && grep -qx "acl localnet src $NET.0/24" <<<"$before" &&
   ! grep -q "$MGMT\." <<<"$before" && ! grep -q "198\.51\.100\." <<<"$before"; then
    pass "storage with a management NIC first: exports and Squid's localnet on the compute NIC's network $NET.0/24, never $MGMT.0/24 nor 6.10's external IP"
else fail "storage with a management NIC first: exports and Squid's localnet on the compute network $NET.0/24" "$before"; fi
reconfigure_log() {
    vm_ssh storage 'journalctl -b -u one-hpc-reconfigure.service -o cat --no-pager' 2>/dev/null
}
runs_before=$(reconfigure_log | grep -c 'one-hpc configure finished')
reconfigured() {  # one more configure of one-hpc-reconfigure.service finished (the guest's clock is not used)
    [ "$(vm_ssh storage 'systemctl is-active one-hpc-reconfigure.service' 2>/dev/null)" != activating ] &&
        [ "$(reconfigure_log | grep -c 'one-hpc configure finished')" -gt "$runs_before" ]
}
log "a third NIC hot-plugged into storage ($HOT.11), then its new CONTEXT CD (ETH2, the last NIC)"
t0=$(now_ms)
if vm_attach_nic storage "$HOT.11" Backup 9 >"$work/attach.log" 2>&1 && out=$(cat "$work/attach.log") &&
   out=$(vm_change_cd storage open-ondemand storage "ONEAPP_HOME_NFS_ENABLED=YES" "ETH2_IP=$HOT.11" \
             "ETH2_MAC=$(mac_of "$HOT.11")" "ETH2_MASK=255.255.255.0" "ETH2_NETWORK=$HOT.0" 2>&1); then
    pass "qemu: a NIC hot-plugged into storage and its new CONTEXT CD in the drive"
else fail "qemu: a NIC hot-plugged into storage and its new CONTEXT CD in the drive" "$(cat "$work/attach.log") $out"; fi
if wait_until 300 reconfigured; then
    out=$(vm_ssh storage "ip -o link | grep -ci $(mac_of "$HOT.11")" 2>&1; reconfigure_log | grep 'compute network' | tail -n1)
    after=$(trusted 2>&1)
    if [ "$after" = "$before" ] && grep -q "(the NIC named 'compute', ETH1)" <<<"$out" && ! grep -q "$HOT\." <<<"$after"; then
        pass "after the NIC attach, the reconfigure ($(secs_since_ms "$t0") s) kept the exports and Squid's localnet byte for byte: $(tail -n1 <<<"$out")"
    else fail "after the NIC attach, the reconfigure kept the exports and Squid's localnet" "$out
before: $before
after: $after"; fi
else
    fail "after the NIC attach, one-hpc-reconfigure.service reconfigures storage" \
        "$(vm_ssh storage 'journalctl -b -u one-hpc-reconfigure.service -o cat --no-pager | tail -n 20' 2>&1)"
fi

site_exports() {  # site_exports LINE: /etc/exports.d/site.exports on the site VM, then exportfs -ra
    vm_ssh site "mkdir -p $SITE_EXPORT /etc/exports.d && printf '%s\n' '$1' > /etc/exports.d/site.exports &&
                 systemctl start nfs-server.service && exportfs -ra && exportfs -s"
}
if out=$(site_exports "$SITE_EXPORT $NET.0/24(rw,sync,no_subtree_check,root_squash)" 2>&1) &&
   grep -q "^$SITE_EXPORT .*root_squash" <<<"$out"; then
    pass "site: $SITE_EXPORT exported with root_squash to $NET.0/24"
else fail "site: $SITE_EXPORT exported with root_squash to $NET.0/24" "$out"; vm_report; fi

# ---- the portal against root_squash: the ERROR names the address to trust -----------------------
vm_new portal open-ondemand portal "$PORTAL_IP" "${PORTAL_CTX[@]}" || vm_report
log "booting portal (portal, VM ${vm_id[portal]}, $PORTAL_IP, UEFI), homes on $SITE_IP:$SITE_EXPORT"
vm_firmware[portal]=uefi
vm_boot portal 2048
why=$(vm_wait_ready portal "$ready_timeout"); rc=$?
vm_result portal_boot_to_root_squash_error_seconds "$(secs_since_ms "${boot_ms[portal]}")"
grant=$(sed -n 's/.*no_root_squash to \([0-9.]*\).*/\1/p' <<<"$why")
if [ "$rc" = 1 ] && [ "$grant" = "$PORTAL_IP" ] && grep -qF "$SITE_IP:$SITE_EXPORT" <<<"$why"; then
    pass "portal stops with an ERROR naming $SITE_IP:$SITE_EXPORT and the address to grant no_root_squash to, $grant ($(secs_since_ms "${boot_ms[portal]}") s): ${why#ERROR=}"
else
    fail "portal stops with an ERROR naming $SITE_IP:$SITE_EXPORT and the address to grant no_root_squash to ($PORTAL_IP)" \
        "rc=$rc, address '$grant': $why"
    [ -n "$grant" ] || grant=$PORTAL_IP
fi
vm_wait_ssh portal 120 || fail "portal: sshd answers after the failed configure"
vm_check_external_nic portal
vm_check_firmware portal

# ---- the export fixed, the portal reconfigured through a new CONTEXT CD -------------------------
if out=$(site_exports "$SITE_EXPORT $grant(rw,sync,no_subtree_check,no_root_squash) $NET.0/24(rw,sync,no_subtree_check,root_squash)" 2>&1) &&
   grep -q "^$SITE_EXPORT  *$grant(.*no_root_squash" <<<"$out"; then
    pass "site: $SITE_EXPORT exported with no_root_squash to $grant alone"
else fail "site: $SITE_EXPORT exported with no_root_squash to $grant alone" "$out"; fi

ready_again() {  # READY=YES and no ERROR in the portal's user template
    local ut
    ut=$(sim GET "/_sim/vms/${vm_id[portal]}/user_template" 2>/dev/null) || return 1
    [ "$(json_get 'd.get("READY")' <<<"$ut")" = YES ] && [ -z "$(json_get 'd.get("ERROR")' <<<"$ut")" ]
}
log "a new CONTEXT CD into the portal's drive (qemu monitor), as onevm updateconf does"
t0=$(now_ms)
if out=$(vm_change_cd portal open-ondemand portal "${PORTAL_CTX[@]}" 2>&1); then
    pass "qemu: the portal's CD drive holds the new CONTEXT ISO"
else fail "qemu: the portal's CD drive holds the new CONTEXT ISO" "$out"; fi
if wait_until 600 ready_again; then
    vm_result portal_reconfigure_to_ready_seconds "$(secs_since_ms "$t0")"
    pass "portal reconfigured by the new CD: READY=YES and the ERROR erased ($(secs_since_ms "$t0") s after the CD change)"
else
    fail "portal reconfigured by the new CD: READY=YES and the ERROR erased" \
        "$(sim GET "/_sim/vms/${vm_id[portal]}/user_template")
$(vm_ssh portal 'systemctl status --no-pager one-hpc-reconfigure.service; journalctl -b -u one-hpc-reconfigure.service -o cat --no-pager | tail -n 20' 2>&1)"
fi
out=$(vm_ssh portal 'journalctl -b -u one-hpc-reconfigure.service -o cat --no-pager' 2>&1)
if grep -q 'entry: reconfigure' <<<"$out" && grep -q 'loaded from the context CD-ROM' <<<"$out"; then
    pass "the configure ran from one-hpc-reconfigure.service (udev, the CD's change event) on the new CD"
else fail "the configure ran from one-hpc-reconfigure.service on the new CD" "$(tail -n 20 <<<"$out")"; fi
out=$(vm_ssh portal "findmnt -rn -o SOURCE,FSTYPE --mountpoint /home" 2>&1)
case $out in
    "$SITE_IP:$SITE_EXPORT nfs"*) pass "portal: /home is the NFS mount $SITE_IP:$SITE_EXPORT";;
    *) fail "portal: /home is the NFS mount $SITE_IP:$SITE_EXPORT" "$out";;
esac

# ---- alice's first login creates her home on the site's server ----------------------------------
if out=$(vm_ssh portal '/usr/libexec/one-hpc/one-hpc-home-create --user alice' 2>&1); then
    pass "portal: the Open OnDemand hook one-hpc-home-create --user alice"
else fail "portal: the Open OnDemand hook one-hpc-home-create --user alice" "$out"; fi
uid=$(vm_ssh portal 'id -u alice' 2>/dev/null)
out=$(vm_ssh site "stat -c '%u %a' $SITE_EXPORT/alice" 2>&1)
if [ -n "$uid" ] && [ "$out" = "$uid 700" ]; then
    pass "alice's home is on the site's server ($SITE_IP:$SITE_EXPORT/alice), owned by her uid $uid, mode 0700"
else fail "alice's home is on the site's server, owned by her uid, mode 0700" "uid '$uid', stat '$out'"; fi

# ---- the portal booted from the image built without Open OnDemand ------------------------------
# (open-ondemand-without-ood: build-image.sh --ondemand-release none). It serves Slurm, the homes
# and its users, starts no Apache, and says why: the journal, `one-hpc status`, OneGate.
out=$(vm_ssh portal 'stat -c "%U %G %a" /usr/sbin/pwauth' 2>&1)
if [ "$out" = "root www-data 4750" ]; then
    pass "portal: pwauth is setuid root and executable by root and www-data only ($out)"
else fail "portal: pwauth is root www-data 4750" "$out"; fi
ut=$(sim GET "/_sim/vms/${vm_id[portal]}/user_template")
oodp=$(json_get 'd.get("OOD_PORTAL") or ""' <<<"$ut")
out=$(vm_ssh portal 'cat /etc/one-hpc/image.json; systemctl is-enabled apache2; systemctl is-active apache2; ss -Htln "sport = :443" | wc -l' 2>&1)
if grep -q '"open_ondemand": false' <<<"$out" && grep -qx disabled <<<"$out" && grep -qx inactive <<<"$out" &&
   [ "$(tail -n1 <<<"$out")" = 0 ] && [ "$(json_get 'd.get("READY")' <<<"$ut")" = YES ] &&
   [[ $oodp == "absent: no Open OnDemand in this image (without Open OnDemand);"* ]] &&
   [ -z "$(json_get 'd.get("OOD_URL") or ""' <<<"$ut")" ]; then
    pass "portal without Open OnDemand: Apache disabled and stopped, nothing on 443, READY=YES with OOD_PORTAL='$oodp' and no OOD_URL"
else fail "portal without Open OnDemand: no Apache, OOD_PORTAL=absent: ..." "OOD_PORTAL='$oodp'
$out"; fi
out=$(vm_ssh portal 'one-hpc status 2>&1 | grep -i "no Open OnDemand"; journalctl -b -o cat --no-pager -t one-hpc | grep -m1 "no Open OnDemand in this image"' 2>&1)
if [ "$(grep -c 'no Open OnDemand in this image' <<<"$out")" -ge 2 ]; then
    pass "portal without Open OnDemand: one-hpc status and the journal say so"
else fail "portal without Open OnDemand: one-hpc status and the journal say so" "$out"; fi
vm_report
