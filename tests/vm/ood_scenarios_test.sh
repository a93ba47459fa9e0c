#!/bin/bash
# The Open OnDemand service on real VMs (tests/vm/vm_lib.sh), with the kernel NFS server and
# virtio disks: the storage, portal and worker roles on the open-ondemand image (with the
# stand-in of Open OnDemand, scenario 12), one NIC each
# on a private bridge (10.79.1.0/24), the OneGate simulator, a CONTEXT CD per VM.
#
# Scenarios, in this order, each a PASS/FAIL line:
#   8. a storage VM whose second disk is ext4 labelled `data` stops with the ERROR naming the
#      device and its content; the disk's bytes are unchanged (sha256 before and after); it
#      boots beside the storage VM of 6;
#   6. a storage VM with a blank second disk formats it `ood-home`, mounts it at /export/home
#      and exports it with the kernel NFS server; the portal and 2 workers mount /home, the
#      Slurm state (portal) and the software export over NFS; `one-hpc home-create alice`, then
#      a job of alice on both workers writes into her home (seen on the storage VM's disk);
#      the timers' commands read the CD-only context (exports refresher on the storage VM,
#      portal-following on the workers);
#  12. the portal serves Open OnDemand: the image is built with the stand-in of OSC's `ondemand`
#      package (vm_lib.sh's VM_OOD_STANDIN: the image build's own path from the lab's repository,
#      signed by a key whose fingerprint is passed as a site passes OSC's; the package's
#      update_ood_portal is tests/fakes' stand-in of the generator, and a static page stands for
#      the dashboard). The role enabled and started Apache (OOD_PORTAL=installed, OOD_URL);
#      HTTPS on 443 with the role's certificate and the login form; plain HTTP on any name
#      redirected to the HTTPS name; a wrong password slowed; alice logs in with the form,
#      reaches the dashboard, logs out; both workers' names resolve on the portal, LLMNR and
#      mDNS off; update_ood_portal's exit codes at reconfigures: 0 (Apache not restarted), 4 (a
#      hand-edited virtual host: ERROR, the file left, the new one beside it), 3 (the file
#      removed: a new one, Apache restarted, READY again); ONEAPP_PORTAL_LOGIN=basic then: 401
#      without credentials, alice admitted; 10 failures from one address get that address
#      refused on 443 by fail2ban while alice logs in from a worker, unbanip lets it in;
#   9. the storage VM's qemu is stopped (SIGSTOP) for 33 s while a job runs: `sinfo` on the
#      portal answers, slurmctld stays active, and after SIGCONT the job finishes and its
#      output is in the home;
#  10. (first half) the portal reboots with a job running and a job pending: both are there
#      afterwards, the running one with the same start time;
#  10. (second half) the portal is killed (SIGKILL of its qemu), terminated, and replaced by a
#      new VM with a new address: the same munge key, the pending job still queued, a job
#      finished before found by sacct (restored from the dump), the workers follow the new
#      address (both idle in its sinfo) and a job of alice runs on both;
#   7. the storage VM is powered off, terminated and re-created (a new VM, a new root disk,
#      the same address) with the same home disk: it is mounted, not formatted, every file of
#      the homes has the same sha256 as before, and the portal reads alice's home again. The
#      Slurm state lives on the same disk (.one-hpc-state/slurm, bind-mounted on
#      /export/slurm): the new storage VM serves the same munge key, and the portal's state
#      mount works again (an accounting dump succeeds, a job of alice runs).
# Scenario 11 (the site's own NFS server with root_squash) is tests/vm/ood_site_nfs_test.sh.
#
# Label vm-scenarios: `make test-vm` runs it, `make test` does not. Figures in
# $ONEHPC_BINARY_DIR/ood_scenarios-results.txt. Exit 77 (skipped) as vm_lib.sh says.
# shellcheck disable=SC2317  # the predicates are called through wait_until
set -uo pipefail

# shellcheck source=SCRIPTDIR/vm_lib.sh
. "$(dirname "$0")/vm_lib.sh"
vm_begin ood_scenarios
VM_OOD_STANDIN=yes  # the image with the stand-in of Open OnDemand (vm_lib.sh, vm_ood_repo_up)

# bob's password travels pre-hashed (openssl passwd -6 bobpass12): installed as it is.
# shellcheck disable=SC2016  # a crypt hash: no expansion meant
BOB_HASH='$6$oodscenarios11$VIaGIDbz6M3/f.EHAZ/eu9ldPyXEwWd/rcIfmdkQzWBx6vSz/CimB4lGGsSZjzoj94rWNAq9UUrzavj8.eRwb.'
USERS="alice:alicepass1 bob:$BOB_HASH:20001"
NET=10.79.1
STO_IP=$NET.11 PORTAL_IP=$NET.12 FOREIGN_IP=$NET.20
declare -A wip=([w1]=$NET.13 [w2]=$NET.14) wnode=()

vm_lab open-ondemand "$NET"

PORTAL=portal  # the VM that is the portal now (10 replaces it)
P() { vm_ssh "$PORTAL" "$@"; }
as_alice() { P "runuser -u alice -- $*"; }
tree_sums() {  # tree_sums NAME DIR: sha256 and path of every file under DIR, sorted (the
    # Slurm state that the portal keeps writing, .one-hpc-state, left out)
    vm_ssh "$1" "cd $2 && find . -path ./.one-hpc-state -prune -o -type f -print0 | sort -z | xargs -0 -r sha256sum"
}

# ---- 8. a foreign filesystem on the second disk: ERROR, nothing written -------------------------
# The refused storage VM boots beside the storage VM of scenario 6 (a VM of its own, another
# address; nothing in the storage role looks at other storage VMs) and is checked once that
# one is READY.
data_disk=$work/data.raw
mkdir -p "$work/data-files"
echo "a site's data that one-hpc must not touch" > "$work/data-files/keep.txt"
truncate -s 256M "$data_disk"
mkfs.ext4 -q -F -L data -d "$work/data-files" "$data_disk"
data_sum=$(sha256sum < "$data_disk" | cut -d' ' -f1)
vm_new foreign open-ondemand storage "$FOREIGN_IP" || vm_report
log "booting foreign (storage, VM ${vm_id[foreign]}) with an ext4 'data' disk"
vm_boot foreign 1024 "$data_disk"

# ---- 6. storage formats a blank disk; portal and workers on NFS; alice's job on both workers -----
home_disk=$work/home.raw
truncate -s 2G "$home_disk"
vm_start storage open-ondemand storage "$STO_IP" 1024 "$home_disk" || vm_report

# ---- 8 (continued). the refused storage VM, checked once scenario 6's storage VM is READY --------
why=$(vm_wait_ready foreign "$ready_timeout"); rc=$?
if [ "$rc" = 1 ] && grep -q '/dev/vdb' <<<"$why" && grep -q 'ext4' <<<"$why" && grep -q "data" <<<"$why"; then
    pass "storage with an ext4 'data' disk stops with an ERROR naming /dev/vdb and its content: ${why#ERROR=}"
else
    fail "storage with an ext4 'data' disk stops with an ERROR naming /dev/vdb and its content" \
        "rc=$rc: $why"
fi
vm_wait_ssh foreign 120
out=$(vm_ssh foreign 'findmnt -rn -S /dev/vdb; echo ssh-ok')
if [ "$(tail -n1 <<<"$out")" = ssh-ok ] && ! grep -q '^/' <<<"$out"; then pass "the 'data' disk is not mounted on the refused storage VM"; else
    fail "the 'data' disk is not mounted on the refused storage VM" "$out"
fi
vm_ssh foreign 'systemctl poweroff' >/dev/null 2>&1
vm_wait_down foreign 120 || vm_forget foreign
sim POST "/_sim/vms/${vm_id[foreign]}/terminate" '{}' >/dev/null
if [ "$(sha256sum < "$data_disk" | cut -d' ' -f1)" = "$data_sum" ]; then
    pass "the 'data' disk's bytes are unchanged (sha256 $data_sum)"
else
    fail "the 'data' disk's bytes are unchanged" "sha256 before $data_sum, after $(sha256sum < "$data_disk")"
fi

# ---- 6 (continued). the blank disk formatted and exported; portal and workers on NFS -----------
# The refused VM was in the service until its termination: the refresher drops it.
foreign_unexported() { ! vm_ssh storage 'exportfs -s' | grep -qF "$FOREIGN_IP("; }
wait_until 60 foreign_unexported || true
out=$(vm_ssh storage 'blkid -o export /dev/vdb; findmnt -rn -o SOURCE,FSTYPE /export/home; systemctl is-active nfs-server.service; exportfs -s')
# Exported to the service's VMs by address (the storage VM alone so far: the refused VM is
# terminated), never to the compute network's CIDR (review M5).
if grep -q '^LABEL=ood-home$' <<<"$out" && grep -q '^/dev/vdb ' <<<"$out" && grep -qx active <<<"$out" &&
   grep -q "^/export/home  *$STO_IP(" <<<"$out" && ! grep -q "/24(" <<<"$out" &&
   ! grep -qF "$FOREIGN_IP(" <<<"$out"; then
    pass "storage: /dev/vdb formatted 'ood-home', mounted at /export/home, exported by the kernel NFS server to the service's VMs ($STO_IP), not to $NET.0/24 nor the terminated $FOREIGN_IP"
else
    fail "storage: /dev/vdb formatted 'ood-home', mounted at /export/home, exported by the kernel NFS server to the service's VMs" "$out"
fi
home_uuid=$(vm_ssh storage 'blkid -s UUID -o value /dev/vdb')

vm_start portal open-ondemand portal "$PORTAL_IP" 2048 "" "ONEAPP_NFS_HOST=$STO_IP" \
    "ONEAPP_AUTH_LOCAL_USERS=$USERS" || vm_report
for w in w1 w2; do
    # No ONEAPP_AUTH_LOCAL_USERS: the portal's only (a worker refuses it); the workers take the
    # users from the portal's OOD_USERS.
    vm_new "$w" open-ondemand worker "${wip[$w]}" "ONEAPP_NFS_HOST=$STO_IP" || vm_report
    log "booting $w (ood-worker, VM ${vm_id[$w]}, ${wip[$w]})"
    vm_boot "$w" 1536
done
for w in w1 w2; do
    if why=$(vm_wait_ready "$w" "$ready_timeout"); then
        ready_seconds[$w]=$(secs_since_ms "${boot_ms[$w]}")
        vm_result "${w}_boot_to_ready_seconds" "${ready_seconds[$w]}"
        pass "$w (ood-worker) boots and publishes READY=YES (${ready_seconds[$w]} s, both booted together)"
    else
        fail "$w (ood-worker) boots and publishes READY=YES" "$why
$(vm_diagnose "$w")"
        vm_report
    fi
    wnode[$w]=ood-worker-${vm_id[$w]}
done

mounts_ok() {  # mounts_ok NAME MOUNTPOINT...: each an NFS mount from the storage VM
    local name=$1 m out; shift
    for m in "$@"; do
        out=$(vm_ssh "$name" "findmnt -rn -o SOURCE,FSTYPE --mountpoint $m")
        case $out in "$STO_IP:"*" nfs"*) ;; *) echo "$m: '$out'"; return 1;; esac
    done
}
out=$(vm_ssh storage 'exportfs -s' 2>&1)
exported=$(grep -c "^/export/home  *\($PORTAL_IP\|${wip[w1]}\|${wip[w2]}\|$STO_IP\)(" <<<"$out")
if [ "$exported" = 4 ] && grep -q "^/export/home  *$PORTAL_IP(.*no_root_squash" <<<"$out" &&
   [ "$(grep -c '^/export/home ' <<<"$out")" = 4 ]; then
    pass "storage: /export/home exported to the 4 VMs of the service by address alone (the portal with no_root_squash)"
else fail "storage: /export/home exported to the 4 VMs of the service by address alone" "$out"; fi
if why=$(mounts_ok portal /home /var/lib/one-hpc/portal-state /opt/software); then
    pass "portal: /home, the Slurm state and /opt/software are NFS mounts from $STO_IP"
else fail "portal: /home, the Slurm state and /opt/software are NFS mounts from $STO_IP" "$why"; fi
for w in w1 w2; do
    if why=$(mounts_ok "$w" /home /opt/software); then
        pass "$w: /home and /opt/software are NFS mounts from $STO_IP"
    else fail "$w: /home and /opt/software are NFS mounts from $STO_IP" "$why"; fi
    # slurmd never starts without the homes and the software tree
    # (RequiresMountsFor also lists /run/slurm, from RuntimeDirectory=, in no fixed order)
    out=$(vm_ssh "$w" 'systemctl show -P RequiresMountsFor slurmd.service; systemctl show -P After slurmd.service' 2>&1)
    if head -n1 <<<"$out" | grep -qw /home && head -n1 <<<"$out" | grep -qw /opt/software &&
       grep -qw home.mount <<<"$out" &&
       grep -qw opt-software.mount <<<"$out"; then
        pass "$w: slurmd.service requires and follows the mounts of /home and /opt/software"
    else fail "$w: slurmd.service requires and follows the mounts of /home and /opt/software" "$out"; fi
done

both_idle() {
    local w
    for w in w1 w2; do
        [ "$(P "sinfo -h -N -n ${wnode[$w]} -o %t" 2>/dev/null | head -n1)" = idle ] || return 1
    done
}
if wait_until 120 both_idle; then pass "sinfo on the portal: ${wnode[w1]} and ${wnode[w2]} idle (${waited} s after READY)"
else fail "sinfo on the portal: both workers idle" "$(P 'sinfo -N' 2>&1)"; vm_report; fi

out=$(P 'getent shadow bob' | cut -d: -f2)
if [ "$out" = "$BOB_HASH" ]; then pass "portal: bob's pre-hashed password (SHA-512) is in /etc/shadow as given"
else fail "portal: bob's pre-hashed password (SHA-512) is in /etc/shadow as given" "shadow field '${out:0:4}...'"; fi

if out=$(P 'one-hpc home-create alice' 2>&1); then pass "portal: one-hpc home-create alice"; else
    fail "portal: one-hpc home-create alice" "$out"; fi
uid=$(P 'id -u alice')
# shellcheck disable=SC2016  # expanded by the job's shell
out=$(as_alice "timeout 120 srun -N2 -D /home/alice bash -c 'id -un; hostname > vm-\$SLURMD_NODENAME'" 2>&1 | sort | paste -sd' ')
if [ "$out" = "alice alice" ]; then pass "srun -N2 as alice runs as alice on both workers"; else
    fail "srun -N2 as alice runs as alice on both workers" "$out"; fi
out=$(vm_ssh storage "stat -c '%u %n' /export/home/alice/vm-${wnode[w1]} /export/home/alice/vm-${wnode[w2]}" 2>&1)
if [ "$(grep -c "^$uid " <<<"$out")" = 2 ]; then
    pass "the job's files are on the storage VM's ood-home disk, owned by alice ($uid)"
else fail "the job's files are on the storage VM's ood-home disk, owned by alice ($uid)" "$out"; fi

# The timers' commands on CD-only VMs: the exports refresher (storage) names the portal, the
# portal-following (workers) ran; each loaded the context from the CD.
journal_has_cd() {  # journal_has_cd NAME UNIT
    local j
    j=$(vm_ssh "$1" "journalctl -b -u $2 -o cat --no-pager" 2>/dev/null)
    grep -q 'loaded from the context CD-ROM' <<<"$j" && ! grep -q 'no context found' <<<"$j"
}
refresher_ok() {
    vm_ssh storage "grep -qF '$PORTAL_IP(' /etc/exports.d/one-hpc.exports" &&
        journal_has_cd storage one-hpc-exports-refresh.service
}
if wait_until 150 refresher_ok; then
    pass "storage: the exports refresher timer loads the CD-only context and exports to the portal $PORTAL_IP"
else fail "storage: the exports refresher timer loads the CD-only context and exports to the portal" \
    "$(vm_ssh storage 'cat /etc/exports.d/one-hpc.exports; journalctl -b -u one-hpc-exports-refresh.service -o cat --no-pager | tail -n 8')"; fi
if wait_until 150 journal_has_cd w1 one-hpc-follow-portal.service; then
    pass "w1: one-hpc-follow-portal.timer's runs load the CD-only context"
else fail "w1: one-hpc-follow-portal.timer's runs load the CD-only context" \
    "$(vm_ssh w1 'systemctl list-timers --all --no-pager; journalctl -b -u one-hpc-follow-portal.service -o cat --no-pager | tail -n 8')"; fi

# ---- 12. the portal serves Open OnDemand (the stand-in of OSC's package) ------------------------
# The image has the stand-in `ondemand` (tests/fakes/ondemand_repo.sh: Open OnDemand's generator
# replaced by update-ood-portal-standin, a static page for the dashboard), installed by the
# image build's own path (install-appliance.sh, apt-source.sh) from the lab's repository signed
# by a key whose fingerprint was passed as a site passes OSC's. Everything around it is real:
# the role's ood_portal.yml, certificate and login files, Debian's Apache, pwauth and PAM.
out=$(P 'cat /etc/one-hpc/image.json; grep -h "^URIs:\|^Signed-By:" /etc/apt/sources.list.d/one-hpc-ondemand-web.sources' 2>&1)
if grep -q '"open_ondemand": true' <<<"$out" && grep -q 'Open OnDemand 4.0.0~one-hpc-stand-in' <<<"$out" &&
   grep -q '^URIs: http://10.0.2.2:[0-9]*/4.0/web/apt$' <<<"$out" &&
   grep -q '^Signed-By: /usr/share/keyrings/one-hpc-ondemand-web.gpg$' <<<"$out"; then
    pass "portal image: Open OnDemand (the stand-in, 4.0.0~one-hpc-stand-in) from the lab's repository, trusted through the pinned key alone"
else fail "portal image: the stand-in Open OnDemand from the lab's signed repository" "$out"; fi
ut=$(sim GET "/_sim/vms/${vm_id[portal]}/user_template")
out=$(P 'systemctl is-enabled apache2; systemctl is-active apache2; one-hpc status' 2>&1)
if [ "$(json_get 'd.get("OOD_PORTAL")' <<<"$ut")" = installed ] &&
   [ "$(json_get 'd.get("OOD_URL")' <<<"$ut")" = "https://$PORTAL_IP/" ] &&
   [ "$(sed -n 1,2p <<<"$out" | paste -sd' ')" = "enabled active" ] && grep -q 'installed' <<<"$out"; then
    pass "portal: Apache enabled and started by the role; OneGate OOD_PORTAL=installed, OOD_URL=https://$PORTAL_IP/"
else fail "portal: Apache enabled and started by the role, OOD_PORTAL=installed" "$ut
$out"; fi
out=$(P 'journalctl -b -u one-hpc-configure.service -o cat --no-pager | grep update_ood_portal' 2>&1)
if grep -q 'wrote a new virtual host' <<<"$out"; then
    pass "portal: the first configure ran update_ood_portal --detailed-exitcodes (3: wrote the virtual host)"
else fail "portal: the first configure ran update_ood_portal (3)" "$out"; fi

P "cat /etc/ood/ssl/$PORTAL_IP.crt" >"$work/portal.crt" 2>/dev/null
web() {  # web URL [CURL-ARGS...]: "HTTP-code redirect-url", the body in $work/web-body
    local url=$1; shift
    in_ns curl -sS --max-time 30 --cacert "$work/portal.crt" -b "$work/jar" -c "$work/jar" \
        -o "$work/web-body" -w '%{http_code} %{redirect_url}' "$@" "$url" 2>&1
}
rm -f "$work/jar"
out=$(web "https://$PORTAL_IP/" -L)
if [ "${out%% *}" = 200 ] && grep -q 'name="httpd_password"' "$work/web-body"; then
    pass "HTTPS on 443 with the role's certificate (curl trusts only it): the front page leads to the login form"
else fail "HTTPS on 443: the front page leads to the login form" "$out $(head -c 300 "$work/web-body")"; fi
out=$(web "http://$PORTAL_IP/pun/sys/dashboard/" -H 'Host: another-name.example')
if [ "$out" = "301 https://$PORTAL_IP:443/pun/sys/dashboard/" ] && ! grep -q 'It works' "$work/web-body"; then
    pass "plain HTTP, whatever the name, is redirected to the portal's HTTPS name (never Debian's default page)"
else fail "plain HTTP is redirected to the portal's HTTPS name" "$out $(head -c 300 "$work/web-body")"; fi
t1=$(now_ms)
out=$(web "https://$PORTAL_IP/one-hpc/login-check" --data-urlencode httpd_username=alice --data-urlencode httpd_password=not-hers)
secs=$(secs_since_ms "$t1")
if [ "$out" = "302 https://$PORTAL_IP/one-hpc/login?failed" ] && awk -v s="$secs" 'BEGIN{exit !(s >= 1.5)}'; then
    pass "a wrong password leads back to the login form, slowed ($secs s)"
else fail "a wrong password leads back to the login form, slowed" "$out in $secs s"; fi
out=$(web "https://$PORTAL_IP/one-hpc/login-check" -L --data-urlencode httpd_username=alice --data-urlencode httpd_password=alicepass1)
out2=$(web "https://$PORTAL_IP/pun/sys/dashboard/")
if [ "${out%% *}" = 200 ] && [ "${out2%% *}" = 200 ] && grep -q "one-hpc's stand-in" "$work/web-body" &&
   grep -q 'onehpc_session' "$work/jar"; then
    pass "alice logs in with the form: a session cookie, and the dashboard (the stand-in's page) answers"
else fail "alice logs in with the form and reaches the dashboard" "$out / $out2 $(head -c 300 "$work/web-body")
$(P 'tail -n 5 /var/log/apache2/error.log' 2>&1)"; fi
out=$(web "https://$PORTAL_IP/logout" -L)
form=no; if grep -q 'name="httpd_password"' "$work/web-body"; then form=yes; fi
out2=$(web "https://$PORTAL_IP/pun/sys/dashboard/")
if [ "${out%% *}" = 200 ] && [ "$form" = yes ] && [ "$out2" = "302 https://$PORTAL_IP/one-hpc/login" ]; then
    pass "alice logs out (/logout): the login form, and the dashboard sends to it again"
else fail "alice logs out and the dashboard sends to the login form again" "$out / $out2"; fi

# The workers' names on the portal (for /node and /rnode), never from LLMNR or mDNS. The
# reconciler writes them (oneslurm-reconcile.timer, every 60 s): its first pass after both
# workers registered may still be ahead.
names_resolve() {
    out=$(P "getent hosts ${wnode[w1]} ${wnode[w2]}; resolvectl status --no-pager 2>&1 | grep -m1 'Protocols:'" 2>&1)
    grep -q "^${wip[w1]} *${wnode[w1]}$" <<<"$out" && grep -q "^${wip[w2]} *${wnode[w2]}$" <<<"$out" &&
        grep -q -- '-LLMNR' <<<"$out" && grep -q -- '-mDNS' <<<"$out"
}
if wait_until 150 names_resolve; then
    pass "portal: both workers' node names resolve to their addresses (/etc/hosts, ${waited} s); LLMNR and mDNS off"
else fail "portal: both workers' names resolve to their addresses; LLMNR and mDNS off" "$out
$(P 'journalctl -u oneslurm-reconcile.service -o cat --no-pager | tail -n 8' 2>&1)"; fi

# update_ood_portal's exit codes, at reconfigures. 0: nothing changed, Apache not restarted.
apache_pid() { P 'systemctl show -P MainPID apache2' 2>/dev/null; }
configured_since() {  # configured_since CURSOR: the reconfigure's journal lines after it
    P "journalctl -u one-hpc-reconfigure.service -o cat --no-pager --after-cursor='$1'" 2>&1
}
reconfigure() { P 'systemctl start one-hpc-reconfigure.service' >/dev/null 2>&1; }
cursor() { P 'journalctl -n 0 --show-cursor -q | sed -n "s/^-- cursor: //p"' 2>/dev/null; }
pid0=$(apache_pid) c=$(cursor)
if reconfigure && grep -q 'found the virtual host up to date' <<<"$(configured_since "$c")" &&
   [ "$(apache_pid)" = "$pid0" ]; then
    pass "a reconfigure with nothing changed: update_ood_portal answers 0, Apache is not restarted (pid $pid0)"
else fail "a reconfigure with nothing changed: 0, Apache not restarted" "pid $pid0 -> $(apache_pid)
$(configured_since "$c" | tail -n 15)"; fi
# 4: the virtual host edited by hand; the operator switches to HTTP Basic meanwhile.
P "echo 'ServerSignature Off' >> /etc/apache2/sites-available/ood-portal.conf"
edited=$(P 'sha256sum < /etc/apache2/sites-available/ood-portal.conf')
vm_forget_status portal
c=$(cursor)
vm_change_cd portal open-ondemand portal "ONEAPP_NFS_HOST=$STO_IP" "ONEAPP_AUTH_LOCAL_USERS=$USERS" \
    ONEAPP_PORTAL_LOGIN=basic >/dev/null 2>&1
status_set() {  # the portal published READY or ERROR, and no reconfigure runs any more
    local ut
    ut=$(sim GET "/_sim/vms/${vm_id[portal]}/user_template" 2>/dev/null) || return 1
    [ -n "$(json_get 'd.get("READY") or d.get("ERROR") or ""' <<<"$ut")" ] &&
        ! P 'systemctl -q is-active one-hpc-reconfigure.service' 2>/dev/null
}
wait_until 600 status_set  # udev starts the reconfigure on the CD's change event
why=$(json_get 'd.get("ERROR") or ""' <<<"$(sim GET "/_sim/vms/${vm_id[portal]}/user_template")")
if grep -q 'edited by hand' <<<"$why" && [ "$(P 'sha256sum < /etc/apache2/sites-available/ood-portal.conf')" = "$edited" ] &&
   P 'grep -q "AuthType Basic" /etc/apache2/sites-available/ood-portal.conf.new'; then
    pass "a virtual host edited by hand: update_ood_portal answers 4, the portal stops with an ERROR saying how to resolve it, the file is left as it is (${why:0:90}...)"
else fail "a virtual host edited by hand: 4, an ERROR, the file left" "ERROR='$why'
$(configured_since "$c" | tail -n 15)"; fi
# 3: the hand-edited file removed, as the ERROR says: a new virtual host, Apache restarted.
P 'rm /etc/apache2/sites-available/ood-portal.conf'
pid0=$(apache_pid) c=$(cursor)
reconfigure
ut=$(sim GET "/_sim/vms/${vm_id[portal]}/user_template")
if grep -q 'wrote a new virtual host' <<<"$(configured_since "$c")" && [ "$(json_get 'd.get("READY")' <<<"$ut")" = YES ] &&
   [ -z "$(json_get 'd.get("ERROR")' <<<"$ut")" ] && [ "$(apache_pid)" != "$pid0" ]; then
    pass "the file removed, the next reconfigure: update_ood_portal answers 3, Apache restarted, READY=YES and the ERROR erased"
else fail "the file removed: 3, Apache restarted, READY=YES" "pid $pid0 -> $(apache_pid) $ut
$(configured_since "$c" | tail -n 15)"; fi
basic() {  # basic USER PASSWORD: the dashboard's HTTP code with HTTP Basic
    printf 'user = "%s:%s"\n' "$1" "$2" | in_ns curl -sS --max-time 30 --cacert "$work/portal.crt" \
        -o /dev/null -w '%{http_code}' -K - "https://$PORTAL_IP/pun/sys/dashboard/" 2>&1
}
out="$(web "https://$PORTAL_IP/pun/sys/dashboard/") $(basic alice alicepass1) $(basic alice not-hers)"
if [ "$out" = "401  200 401" ]; then
    pass "ONEAPP_PORTAL_LOGIN=basic (the opt-in): no credentials 401, alice's password 200, a wrong one 401"
else fail "ONEAPP_PORTAL_LOGIN=basic: 401, 200, 401" "$out"; fi
# Guessing is stopped per source address (fail2ban, nftables), never per user (review N8):
# this host ($NET.1) guesses until it is refused on 443; alice, from a worker, still logs in.
for i in 2 3 4 5 6 7 8 9 10; do basic alice "guess-$i" >/dev/null; done  # 10 with the one above
banned() { P 'fail2ban-client status one-hpc-portal' 2>/dev/null | grep -q "Banned IP list:.*$NET\.1\b"; }
wait_until 30 banned || true
out="$(printf 'user = "alice:alicepass1"\n' | in_ns curl -sS --max-time 30 --cacert "$work/portal.crt" \
    -o /dev/null -w '%{http_code}' -K - "https://$PORTAL_IP/pun/sys/dashboard/" 2>/dev/null)"
out="$out $(printf 'user = "alice:alicepass1"\n' | vm_ssh w1 "curl -sS -k --max-time 30 -o /dev/null -w '%{http_code}' -K - https://$PORTAL_IP/pun/sys/dashboard/" 2>&1)"
P "fail2ban-client set one-hpc-portal unbanip $NET.1" >/dev/null 2>&1
out="$out $(basic alice alicepass1)"
if [ "$out" = "000 200 200" ]; then pass "after 10 wrong passwords from $NET.1 that address is refused on 443 even with alice's right one, while alice logs in from ${wip[w1]}; unbanip lets $NET.1 in again"
else fail "10 wrong passwords: $NET.1 refused, alice not locked out, unbanip" "$out
$(P 'fail2ban-client status one-hpc-portal; systemctl is-active fail2ban; nft list ruleset' 2>&1 | tail -n 20)"; fi

# ---- 9. the NFS server paused for 33 s while a job runs ------------------------------------------
job_state() { P "squeue -h -j $1 -o %T" 2>/dev/null; }
running() { [ "$(job_state "$1")" = RUNNING ]; }
finished() { [ -z "$(job_state "$1")" ]; }
job=$(as_alice "sbatch --parsable -D /home/alice -o /dev/null --wrap 'echo before > pause-before; sleep 45; echo after > pause-after'" 2>&1)
if wait_until 60 running "$job"; then pass "job $job runs"; else fail "job ${job:-?} runs" "$(job_state "$job")"; fi
log "SIGSTOP to the storage VM's qemu for 33 s"
kill -STOP "${qemu_pid[storage]}"
t0=$(date +%s) answered=0 asked=0 slow=""
while [ $(( $(date +%s) - t0 )) -lt 33 ]; do
    asked=$((asked + 1)); t1=$(now_ms)
    if P 'timeout 10 sinfo -h -o %D' >/dev/null 2>&1; then answered=$((answered + 1)); else slow="$slow $(secs_since_ms "$t1")s"; fi
    sleep 4
done
ctld=$(P 'systemctl is-active slurmctld.service' 2>&1)
kill -CONT "${qemu_pid[storage]}"
log "SIGCONT to the storage VM's qemu"
if [ "$answered" = "$asked" ]; then pass "sinfo on the portal answered $answered/$asked times while the NFS server was stopped"
else fail "sinfo on the portal answered while the NFS server was stopped" "$answered/$asked answered; failed after:$slow"; fi
if [ "$ctld" = active ]; then pass "slurmctld stayed active while the NFS server was stopped"
else fail "slurmctld stayed active while the NFS server was stopped" "$ctld"; fi
if wait_until 180 finished "$job" &&
   [ "$(vm_ssh storage 'cat /export/home/alice/pause-after' 2>/dev/null)" = after ]; then
    pass "job $job finished after the pause and wrote its output into the home (${waited} s after SIGCONT)"
    vm_result job_done_after_nfs_pause_seconds "$waited"
else
    fail "job $job finished after the pause and wrote its output into the home" \
        "state '$(job_state "$job")'; $(P "sacct -n -X -j $job -o State,ExitCode" 2>&1)"
fi

# ---- 10 (first half). the portal reboots with a job running and one pending ---------------------
run_job=$(as_alice "sbatch --parsable -N1 --exclusive -w ${wnode[w1]} -D /home/alice -o /dev/null --wrap 'sleep 600'" 2>&1)
wait_until 60 running "$run_job"
pend_job=$(as_alice "sbatch --parsable -N2 -D /home/alice -o /dev/null --wrap 'sleep 5'" 2>&1)
start_before=$(P "squeue -h -j $run_job -o %S" 2>/dev/null)
pend_before=$(job_state "$pend_job")
log "rebooting the portal (job $run_job ${start_before:+started $start_before}, job $pend_job $pend_before)"
t0=$(now_ms)
P 'systemctl reboot' >/dev/null 2>&1
sleep 10
ctld_up() { [ "$(P 'systemctl is-active slurmctld.service' 2>/dev/null)" = active ] && P 'scontrol ping' 2>/dev/null | grep -q UP; }
if wait_until 600 ctld_up; then
    vm_result portal_reboot_to_slurmctld_seconds "$(secs_since_ms "$t0")"
    pass "portal rebooted, slurmctld answers ($(secs_since_ms "$t0") s)"
else fail "portal rebooted, slurmctld answers" "$(tail -n 20 "$work/portal.console")"; fi
state_after=$(P "squeue -h -j $run_job -o %T:%S" 2>&1)
if [ "$state_after" = "RUNNING:$start_before" ]; then pass "job $run_job still RUNNING after the portal's reboot, same start $start_before"
else fail "job $run_job still RUNNING after the portal's reboot, same start" "before RUNNING:$start_before, after '$state_after'"; fi
if [ "$(job_state "$pend_job")" = PENDING ] && [ "$pend_before" = PENDING ]; then pass "job $pend_job still PENDING after the portal's reboot"
else fail "job $pend_job still PENDING after the portal's reboot" "before '$pend_before', after '$(job_state "$pend_job")'"; fi
P "scancel $run_job $pend_job" >/dev/null 2>&1

# ---- 10 (second half). the portal replaced by a new VM with a new address -----------------------
PORTAL2_IP=$NET.15
done_job=$(as_alice "sbatch --parsable --wait -D /home/alice -o /dev/null --wrap true" 2>&1 | tail -n1)
later_job=$(as_alice "sbatch --parsable --begin=now+1hour -D /home/alice -o /dev/null --wrap true" 2>&1)
in_sacct() { P "sacct -n -X -j $1 -o JobID" 2>/dev/null | grep -qw "$1"; }
wait_until 60 in_sacct "$done_job"
if out=$(P 'systemctl start one-hpc-accounting-dump.service' 2>&1); then
    pass "old portal: accounting dumped by hand (job $done_job in sacct)"
else fail "old portal: accounting dumped by hand" "$out"; fi
key_before=$(P 'sha256sum /etc/munge/munge.key' | cut -d' ' -f1)
log "SIGKILL to the portal's qemu; terminated in OneGate; a new portal VM at $PORTAL2_IP"
vm_forget portal
sim POST "/_sim/vms/${vm_id[portal]}/terminate" '{"hard":true}' >/dev/null
t0=$(now_ms)
vm_start portal2 open-ondemand portal "$PORTAL2_IP" 2048 "" "ONEAPP_NFS_HOST=$STO_IP" \
    "ONEAPP_AUTH_LOCAL_USERS=$USERS" || vm_report
PORTAL=portal2
if [ "$(P 'sha256sum /etc/munge/munge.key' | cut -d' ' -f1)" = "$key_before" ]; then
    pass "new portal: the same munge key (from the state export)"
else fail "new portal: the same munge key (from the state export)"; fi
if [ "$(P "squeue -h -j $later_job -o %T" 2>/dev/null)" = PENDING ]; then
    pass "new portal: job $later_job still PENDING (the queue kept)"
else fail "new portal: job $later_job still PENDING" "$(P 'squeue' 2>&1)"; fi
if wait_until 60 in_sacct "$done_job"; then pass "new portal: sacct shows job $done_job (accounting restored from the dump)"
else fail "new portal: sacct shows job $done_job (accounting restored from the dump)" "$(P "sacct -X -j $done_job" 2>&1)"; fi
# Followed: each worker's slurmd runs towards the new portal (the follow pass restarted it and
# checked its registration). A node can read idle from the restored state before that, and a
# step launched while its slurmd restarts fails ("Communication connection failure").
followed() {
    local w
    for w in w1 w2; do
        vm_ssh "$w" "systemctl is-active -q slurmd.service && grep -q -- '--conf-server $PORTAL2_IP:' /etc/systemd/system/slurmd.service && ! systemctl is-active -q one-hpc-follow-portal.service" 2>/dev/null || return 1
    done
}
if wait_until 180 followed && wait_until 180 both_idle; then
    vm_result workers_follow_new_portal_seconds "$(secs_since_ms "$t0")"
    pass "the workers follow the new portal: both idle in its sinfo ($(secs_since_ms "$t0") s after it started)"
else fail "the workers follow the new portal: both idle in its sinfo" "$(P 'sinfo -N' 2>&1)"; fi
out=$(as_alice "timeout 120 srun -N2 -D /home/alice id -un" 2>&1 | paste -sd' ')
if [ "$out" = "alice alice" ]; then pass "srun -N2 as alice from the new portal"; else
    fail "srun -N2 as alice from the new portal" "$out
$(for w in w1 w2; do echo "== $w"; vm_ssh "$w" 'journalctl -b -u slurmd -u one-hpc-follow-portal.service -o short-monotonic --no-pager | tail -n 25' 2>&1; done)
== portal2 slurmctld
$(P 'journalctl -b -u slurmctld -o short-monotonic --no-pager | tail -n 25' 2>&1)"; fi
# The munge key: boxed for each worker by the portal's key server, never published (the first
# portal and the new one, every worker, every CONTEXT CD so far).
vm_check_key_secret "$PORTAL"
# The passwords: only the portals' CDs carry ONEAPP_AUTH_LOCAL_USERS (a role input of the
# portal alone); bob's clear password is nowhere, since it travels as a hash.
leaks=""
for iso in "$work"/*-context.iso*; do
    [ -e "$iso" ] || continue
    case ${iso##*/} in portal*) continue;; esac
    grep -aq 'ONEAPP_AUTH_LOCAL_USERS\|alicepass1' "$iso" && leaks+=" ${iso##*/}"
done
if [ -z "$leaks" ]; then pass "no CONTEXT CD but the portals' holds ONEAPP_AUTH_LOCAL_USERS"
else fail "no CONTEXT CD but the portals' holds ONEAPP_AUTH_LOCAL_USERS" "found on:$leaks"; fi
docs=$(sim GET /_sim/vms; for n in "${!vm_id[@]}"; do sim GET "/_sim/vms/${vm_id[$n]}"; done)
if ! grep -qF bobpass12 <<<"$docs" && ! grep -aqF bobpass12 "$work"/*-context.iso*; then
    pass "bob's clear password is in no OneGate document and on no CONTEXT CD (it travels as a hash)"
else fail "bob's clear password is in no OneGate document and on no CONTEXT CD"; fi
for w in w1 w2; do
    if [ "$(vm_ssh "$w" 'sha256sum /etc/munge/munge.key' | cut -d' ' -f1)" = "$key_before" ]; then
        pass "$w: the portal's munge key (from its key server)"
    else fail "$w: the portal's munge key (from its key server)"; fi
done
served=$(P "journalctl -o cat --no-pager -u 'one-hpc-key-server@*' | grep -c 'sent the munge key, boxed for VM'" 2>/dev/null)
if [ "$served" = 0 ]; then pass "the new portal's key server had nothing to send (the workers' keys have the published id)"
else fail "the new portal's key server had nothing to send" "$served answers"; fi

# ---- 7. the storage VM re-created with the same home disk ---------------------------------------
sums_before=$(tree_sums storage /export/home)
files=$(wc -l <<<"$sums_before")
log "powering off the storage VM ($files files in the homes), then a new VM with the same disk"
vm_ssh storage 'systemctl poweroff' >/dev/null 2>&1
if vm_wait_down storage 180; then pass "storage powers off"; else fail "storage powers off within 180 s"; vm_forget storage; fi
sim POST "/_sim/vms/${vm_id[storage]}/terminate" '{}' >/dev/null
vm_forget storage
# storage2: a new VM (new id, token and root disk) with the same address and the same disk
if vm_start storage2 open-ondemand storage "$STO_IP" 1024 "$home_disk"; then
    out=$(vm_ssh storage2 "blkid -s UUID -o value /dev/vdb; journalctl -b -u one-hpc-configure.service -o cat --no-pager | grep -ci 'mkfs\|formatting'")
    if [ "$(head -n1 <<<"$out")" = "$home_uuid" ] && [ "$(tail -n1 <<<"$out")" = 0 ]; then
        pass "new storage VM ${vm_id[storage2]} (was ${vm_id[storage]}) mounted the same ood-home ($home_uuid) without formatting"
    else fail "new storage VM mounted the same ood-home without formatting" "$out"; fi
    sums_after=$(tree_sums storage2 /export/home)
    if [ "$sums_after" = "$sums_before" ] && [ "$files" -ge 4 ]; then
        pass "every file of the homes ($files) has the same sha256 on the re-created storage VM"
    else fail "every file of the homes has the same sha256 on the re-created storage VM" \
        "$(diff <(echo "$sums_before") <(echo "$sums_after"))"; fi
    reads() { [ "$(P 'timeout 20 cat /home/alice/pause-after' 2>/dev/null)" = after ]; }
    if wait_until 240 reads; then pass "the portal reads alice's home again from the new storage VM (${waited} s)"
    else fail "the portal reads alice's home again from the new storage VM" "$(P 'findmnt /home; dmesg | tail -n 5' 2>&1)"; fi
    out=$(vm_ssh storage2 'findmnt -rn -o SOURCE /export/slurm; sha256sum /export/slurm/munge.key')
    if grep -qF '/dev/vdb[/.one-hpc-state/slurm]' <<<"$out" && grep -q "^$key_before " <<<"$out"; then
        pass "the new storage VM serves the Slurm state from the disk: the same munge key"
    else fail "the new storage VM serves the Slurm state from the disk: the same munge key" "$out"; fi
    if out=$(P 'timeout 120 systemctl start one-hpc-accounting-dump.service' 2>&1); then
        pass "the portal's state mount works again: an accounting dump to the new storage VM"
    else fail "the portal's state mount works again: an accounting dump to the new storage VM" "$out"; fi
    after_job=$(as_alice "timeout 300 sbatch --parsable --wait -D /home/alice -o after-storage.out --wrap hostname" 2>&1 | tail -n1)
    if [ -n "$(P 'cat /home/alice/after-storage.out' 2>/dev/null)" ]; then
        pass "a job of alice runs after the storage VM was re-created (job $after_job)"
    else fail "a job of alice runs after the storage VM was re-created" "$after_job"; fi
fi
vm_report
