#!/bin/sh
# install-appliance.sh - the install steps of the one-hpc appliance image (Debian 12 or 13).
#
# The Packer build runs this inside the image, and the test lab runs it inside its rootfs
# layer, so the lab boots what the image ships. Run as root on the target system itself
# (a VM being built, a chroot or a non-booting container); it never starts a daemon.
#
# Usage: install-appliance.sh [--role-packages slurm|ood|all|none] [--deb PATH] [--clean-image]
#                             [--ondemand-repo URI --ondemand-key URL --ondemand-fingerprint FPR
#                              [--nodejs-repo URI --nodejs-key URL --nodejs-fingerprint FPR]]
#
#   --role-packages SET  Debian packages of the roles (--no-install-recommends):
#                          slurm: munge slurmd slurmctld slurm-client, and slurmdbd
#                                 mariadb-server for the controller's optional accounting
#                          ood:   the Debian parts of the Open OnDemand roles: the Slurm set
#                                 plus nfs-kernel-server, nfs-common,
#                                 squid (the storage role's CernVM-FS proxy), apache2 with
#                                 libapache2-mod-authnz-external and pwauth (the portal's
#                                 login; pwauth is then executable by root and www-data only),
#                                 libapache2-mod-auth-openidc (the OIDC login), fail2ban
#                                 and nftables (a source address that keeps guessing
#                                 passwords is refused for a while)
#                                 (OnDemand itself comes from OSC's apt repository, not here)
#                          all:   both;  none (default): no role packages
#   --ondemand-repo URI  install Open OnDemand (the package ondemand) from this apt repository
#                        of one release (OSC's: https://apt.osc.edu/ondemand/4.0/web/apt),
#                        suite bookworm, trusted through the key at --ondemand-key URL only if
#                        its fingerprint is --ondemand-fingerprint (apt-source.sh, next to this
#                        script; gpg is installed for the check)
#   --nodejs-repo URI    and Node.js from this repository first (NodeSource's node_20.x, suite
#                        nodistro: Open OnDemand 4 needs Node.js 20, Debian 12 has 18), with
#                        --nodejs-key and --nodejs-fingerprint likewise
#   --deb PATH           install one-hpc's .deb (apt-get install PATH, so its dependencies
#                        come from the archive)
#   --clean-image        seal the image for distribution: no machine identity (machine-id
#                        truncated, SSH host keys and the package-made munge key removed),
#                        no logs, no apt lists. The lab does not use it.
#
# Always: systemd preset files under /etc/systemd/system-preset/ keep every role daemon
# disabled (one-hpc enables them per role at configure time) and enable one-hpc-configure;
# the presets are applied to the installed units, so links made by package scripts are
# removed by systemd's own preset logic, and the first boot's preset-all cannot re-enable
# them. Idempotent: running it again changes nothing more.
set -eu

PRESET_DIR=/etc/systemd/system-preset
OOD_GENERATOR=/opt/ood/ood-portal-generator/sbin/update_ood_portal
PRESET_FILE=$PRESET_DIR/20-one-hpc.preset
POLICY_RC=/usr/sbin/policy-rc.d

SLURM_PACKAGES="munge slurmd slurmctld slurm-client slurmdbd mariadb-server"
OOD_PACKAGES="$SLURM_PACKAGES nfs-kernel-server nfs-common squid apache2 libapache2-mod-authnz-external pwauth libapache2-mod-auth-openidc fail2ban nftables"

# Units one-hpc starts per role; they stay off in the image. Names that are not installed
# are harmless in a preset file.
ROLE_UNITS="munge.service slurmctld.service slurmd.service slurmdbd.service mariadb.service
nfs-server.service squid.service apache2.service apache-htcacheclean.service fail2ban.service
nftables.service"
# one-hpc's own per-role units (reconcile timers, shutdown hooks, ...) are matched by the name
# patterns one-hpc-* and oneslurm-* below; every unit the one-hpc package ships is also
# listed by name once it is installed.
UNIT_DIRS="/etc/systemd/system /lib/systemd/system /usr/lib/systemd/system"

die() { echo "install-appliance: $*" >&2; exit 1; }
log() { echo "install-appliance: $*"; }
usage() {
    sed -n '8,36s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

role_packages=none
deb=""
clean_image=no
ood_repo="" ood_key="" ood_fpr=""
node_repo="" node_key="" node_fpr=""
while [ $# -gt 0 ]; do
    case $1 in
        --role-packages) [ $# -ge 2 ] || usage; role_packages=$2; shift 2;;
        --role-packages=*) role_packages=${1#*=}; shift;;
        --deb) [ $# -ge 2 ] || usage; deb=$2; shift 2;;
        --deb=*) deb=${1#*=}; shift;;
        --clean-image) clean_image=yes; shift;;
        --ondemand-repo) [ $# -ge 2 ] || usage; ood_repo=$2; shift 2;;
        --ondemand-key) [ $# -ge 2 ] || usage; ood_key=$2; shift 2;;
        --ondemand-fingerprint) [ $# -ge 2 ] || usage; ood_fpr=$2; shift 2;;
        --nodejs-repo) [ $# -ge 2 ] || usage; node_repo=$2; shift 2;;
        --nodejs-key) [ $# -ge 2 ] || usage; node_key=$2; shift 2;;
        --nodejs-fingerprint) [ $# -ge 2 ] || usage; node_fpr=$2; shift 2;;
        -h|--help) usage;;
        *) echo "install-appliance: unknown argument '$1'" >&2; usage;;
    esac
done

case $role_packages in
    slurm) packages=$SLURM_PACKAGES;;
    ood|all) packages=$OOD_PACKAGES;;
    none) packages="";;
    *) die "--role-packages must be slurm, ood, all or none, not '$role_packages'";;
esac
if [ -n "$deb" ]; then
    [ -f "$deb" ] || die "--deb $deb: no such file"
    case $deb in
        *.deb) ;;
        *) die "--deb $deb: expected a .deb file";;
    esac
    # apt-get treats an argument as a file only when it contains a slash
    case $deb in /*|./*|../*) ;; *) deb=./$deb;; esac
fi
if [ -n "$ood_repo$ood_key$ood_fpr" ]; then
    if [ -z "$ood_repo" ] || [ -z "$ood_key" ] || [ -z "$ood_fpr" ]; then
        die "--ondemand-repo, --ondemand-key and --ondemand-fingerprint go together (Packer variables ondemand_repo, ondemand_release, ondemand_key_url, ondemand_key_fingerprint)"
    fi
    case $role_packages in
        ood|all) ;;
        *) die "--ondemand-repo installs Open OnDemand for the Open OnDemand roles: it needs --role-packages ood or all, not '$role_packages'";;
    esac
fi
if [ -n "$node_repo$node_key$node_fpr" ]; then
    if [ -z "$node_repo" ] || [ -z "$node_key" ] || [ -z "$node_fpr" ]; then
        die "--nodejs-repo, --nodejs-key and --nodejs-fingerprint go together (Packer variables nodejs_repo, nodejs_key_url, nodejs_key_fingerprint)"
    fi
    [ -n "$ood_repo" ] || die "--nodejs-repo is for Open OnDemand: it needs --ondemand-repo"
fi
APT_SOURCE=$(dirname "$0")/apt-source.sh
if [ -n "$ood_repo" ] && [ ! -f "$APT_SOURCE" ]; then die "$APT_SOURCE not found (it ships next to this script)"; fi
[ "$(id -u)" = 0 ] || die "must run as root"
command -v apt-get >/dev/null || die "apt-get not found: this is for Debian images"

export DEBIAN_FRONTEND=noninteractive
# --force-unsafe-io: no fsync per unpacked file (an image build, or a lab layer, is thrown away
# whole if it breaks; the image's own writes are flushed when it is shut down).
APT_OPTS="-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -o Dpkg::Options::=--force-unsafe-io"

policy_added=no
tmp=$PRESET_FILE.tmp.$$
cleanup() {
    rm -f "$tmp"
    if [ "$policy_added" = yes ]; then rm -f "$POLICY_RC"; fi
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

# Unit files shipped by the one-hpc package, if it is installed (one name a line).
package_units() {
    dpkg-query -L one-hpc 2>/dev/null |
        sed -n 's#^/\(usr/\)\{0,1\}lib/systemd/system/\([^/]*\.\(service\|timer\|socket\|path\|mount\)\)$#\2#p' |
        sort -u
}

# The preset file. First match wins: one-hpc-configure is enabled, everything else of one-hpc
# and every role daemon is disabled. Rewritten only when its content changes.
write_presets() {
    mkdir -p "$PRESET_DIR"
    {
        echo "# one-hpc appliance (written by image-build/install-appliance.sh)."
        echo "# Role daemons and one-hpc's per-role units stay disabled until one-hpc enables"
        echo "# them for this VM's role; only the configure unit runs at every boot."
        echo "enable one-hpc-configure.service"
        for u in $(package_units); do
            [ "$u" = one-hpc-configure.service ] || echo "disable $u"
        done
        printf 'disable %s\n' 'one-hpc-*' 'oneslurm-*'
        for u in $ROLE_UNITS; do echo "disable $u"; done
    } > "$tmp"
    chmod 0644 "$tmp"
    if cmp -s "$tmp" "$PRESET_FILE"; then rm -f "$tmp"; else mv "$tmp" "$PRESET_FILE"; fi
}

# Open OnDemand from its publisher's repository (and Node.js from NodeSource's when asked), each
# trusted through its own pinned key; a refusal stops the build, naming the Packer variable.
install_ondemand() {
    if ! command -v gpg >/dev/null; then
        log "installing gpg (to check the repositories' keys)"
        apt_install gpg
    fi
    if [ -n "$node_repo" ]; then
        sh "$APT_SOURCE" nodesource "$node_repo" nodistro "$node_key" "$node_fpr" ||
            die "Node.js's repository refused (Packer variables nodejs_repo, nodejs_key_url, nodejs_key_fingerprint)"
    fi
    sh "$APT_SOURCE" ondemand-web "$ood_repo" bookworm "$ood_key" "$ood_fpr" ||
        die "Open OnDemand's repository refused (Packer variables ondemand_repo, ondemand_release, ondemand_key_url, ondemand_key_fingerprint)"
    log "apt-get update (with Open OnDemand's repository $ood_repo)"
    apt-get update -q || die "apt-get update failed with $ood_repo (Packer variables ondemand_repo, ondemand_release)"
    log "installing Open OnDemand (ondemand) from $ood_repo"
    apt_install ondemand ||
        die "cannot install the package ondemand from $ood_repo (Packer variable ondemand_release; nodejs_repo if Node.js is what is missing)"
    [ -x "$OOD_GENERATOR" ] ||
        die "the package ondemand is installed but $OOD_GENERATOR is not: not an Open OnDemand this image can serve"
}

# apt_install PACKAGE...: apt-get install, downloads first. Where systemd runs (a build VM),
# the packages are then unpacked and configured in a private mount namespace that hides
# /run/systemd, as in a chroot: their scripts skip the `systemctl daemon-reload` and the start
# they ask for each daemon (policy-rc.d refuses the start anyway; a reload took 30 to 90 s in a
# build VM under emulation, two per daemon), and one reload follows. Without such a namespace
# (no unshare, a container that may not mount), or in a chroot, a plain install.
apt_install() {
    # shellcheck disable=SC2086  # word splitting wanted
    apt-get install $APT_OPTS --download-only "$@"
    # shellcheck disable=SC2016  # expanded by the inner shell
    hide='mount -t tmpfs -o mode=0755,size=1m one-hpc-install /run/systemd && exec "$@"'
    if [ -d /run/systemd/system ] && unshare --mount --propagation private sh -c "$hide" hide true 2>/dev/null; then
        # shellcheck disable=SC2086
        unshare --mount --propagation private sh -c "$hide" hide apt-get install $APT_OPTS "$@"
        systemctl daemon-reload
    else
        # shellcheck disable=SC2086
        apt-get install $APT_OPTS "$@"
    fi
}

# ---- presets first, so that nothing installed below is enabled behind our back --------------
write_presets

# ---- packages, with daemons kept from starting (a VM build would otherwise start them) ---
if [ -n "$packages" ] || [ -n "$deb" ]; then
    if [ ! -e "$POLICY_RC" ]; then
        printf '#!/bin/sh\n# install-appliance.sh: no daemon starts during the image build\nexit 101\n' > "$POLICY_RC"
        chmod 0755 "$POLICY_RC"
        policy_added=yes
    fi
    log "apt-get update"
    apt-get update -q
    if [ -n "$packages" ]; then
        log "installing role packages ($role_packages): $packages"
        # shellcheck disable=SC2086  # word splitting wanted
        apt_install $packages
    fi
    if [ -n "$ood_repo" ]; then
        install_ondemand
    fi
    if [ -n "$deb" ]; then
        log "installing $deb"
        apt_install "$deb"
    fi
fi

# ---- what the image is, for the portal (roles/ood/portal_web.h): with Open OnDemand (its
# version) when the package and its generator are installed, else "without Open OnDemand", so
# that a portal booted from such an image says so instead of serving nothing in silence.
if [ "$role_packages" = ood ] || [ "$role_packages" = all ]; then
    mkdir -p /etc/one-hpc
    ood_version=$(dpkg-query -W -f='${Status} ${Version}' ondemand 2>/dev/null |
                  sed -n 's/^install ok installed //p')
    if [ -n "$ood_version" ] && [ -x "$OOD_GENERATOR" ]; then
        info="{\"open_ondemand\": true, \"variant\": \"Open OnDemand $ood_version\"}"
    else
        info='{"open_ondemand": false, "variant": "without Open OnDemand"}'
    fi
    if [ "$(cat /etc/one-hpc/image.json 2>/dev/null)" != "$info" ]; then
        log "/etc/one-hpc/image.json: $info"
        printf '%s\n' "$info" > /etc/one-hpc/image.json.tmp
        chmod 0644 /etc/one-hpc/image.json.tmp
        mv /etc/one-hpc/image.json.tmp /etc/one-hpc/image.json
    fi
fi

# ---- pwauth checks any local user's password as root: only Apache (group www-data) may run
# it, so that no local user can use it to guess another's password. A statoverride survives
# upgrades of the package.
if [ -e /usr/sbin/pwauth ] && ! dpkg-statoverride --list /usr/sbin/pwauth >/dev/null 2>&1; then
    log "pwauth: root:www-data 4750"
    dpkg-statoverride --update --add root www-data 4750 /usr/sbin/pwauth
fi

# ---- apply the presets to what is installed ----------------------------------------------
write_presets   # now with the package's own unit list
# systemctl works offline here (image build, chroot, container without systemd): it edits
# the links itself. Only units that exist are named; templates are left alone (one-hpc
# enables their instances).
units=""
add_unit() {
    case $1 in *@*|*'*'*) return 0;; esac
    case " $units " in *" $1 "*) return 0;; esac
    units="$units $1"
}
for u in one-hpc-configure.service $ROLE_UNITS $(package_units); do
    for d in $UNIT_DIRS; do
        if [ -e "$d/$u" ]; then add_unit "$u"; break; fi
    done
done
for d in $UNIT_DIRS; do
    for f in "$d"/one-hpc-* "$d"/oneslurm-*; do
        if [ -f "$f" ] && [ ! -L "$f" ]; then add_unit "${f##*/}"; fi
    done
done
if [ -n "$units" ]; then
    log "applying presets to:$units"
    # shellcheck disable=SC2086
    systemctl preset $units
fi

# ---- sealing the image -------------------------------------------------------------------
if [ "$clean_image" = yes ]; then
    log "cleaning the image"
    apt-get clean
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
    # Machine identity. An empty (not missing) machine-id: systemd writes a new one at boot.
    # The random seed and the credential secret must not be shared by every VM either.
    : > /etc/machine-id
    rm -f /var/lib/systemd/random-seed /var/lib/systemd/credential.secret
    if [ -e /var/lib/dbus/machine-id ] || [ -L /var/lib/dbus/machine-id ]; then
        rm -f /var/lib/dbus/machine-id
        ln -s /etc/machine-id /var/lib/dbus/machine-id
    fi
    # SSH host keys: generated again at the first start of sshd.
    rm -f /etc/ssh/ssh_host_*
    if [ -e /lib/systemd/system/ssh.service ]; then
        mkdir -p /etc/systemd/system/ssh.service.d
        # An empty ExecStartPre= resets the list, so the keys exist before "sshd -t" runs.
        printf '%s\n' '# install-appliance.sh: host keys are removed from the image' \
            '[Service]' 'ExecStartPre=' 'ExecStartPre=/usr/bin/ssh-keygen -A' \
            'ExecStartPre=/usr/sbin/sshd -t' > /etc/systemd/system/ssh.service.d/10-one-hpc-host-keys.conf
    fi
    # The munge package makes a key at install: every VM of the image would share it. one-hpc
    # installs the cluster's key at configure time.
    rm -f /etc/munge/munge.key
    # Logs and leftovers of the build.
    rm -rf /var/log/journal/*
    find /var/log -type f \( -name '*.gz' -o -name '*.[0-9]' -o -name '*.old' \) -delete
    find /var/log -type f -exec truncate -s 0 {} +
    rm -f /root/.bash_history
    # (not the private /tmp of services running during a VM build)
    find /tmp /var/tmp -mindepth 1 -maxdepth 1 ! -name 'systemd-private-*' -exec rm -rf {} +
fi
log "done"
