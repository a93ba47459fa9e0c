#!/bin/sh
# apt-source.sh - adds a third-party apt repository to the system being built, trusted through
# one signing key pinned by its fingerprint: never a key taken as it comes. install-appliance.sh
# uses it for Open OnDemand (OSC's repository) and Node.js (NodeSource's).
#
# Usage: apt-source.sh [--root DIR] NAME URI SUITE KEY_URL FINGERPRINT
#   NAME         the source's name: [a-z0-9-], e.g. ondemand-web
#   URI          the repository (https://, http:// or file:/; apt checks every index it
#                reads against the key, so a mirror over plain HTTP is safe)
#   SUITE        its suite (bookworm, or NodeSource's nodistro); component main
#   KEY_URL      where the signing key is published (https://, http:// or file:/)
#   FINGERPRINT  the key's fingerprint as its publisher gives it (40 hex digits; spaces and
#                the case do not matter)
#   --root DIR   write under DIR instead of / (the tests)
#
# Downloads KEY_URL with apt's own downloader (bounded: 30 s a connection, 2 retries, 2 min in
# all) and refuses it unless it holds exactly one primary key, whose fingerprint is
# FINGERPRINT. Then writes that key alone (re-exported: nothing else the file carried) to
# DIR/usr/share/keyrings/one-hpc-NAME.gpg and the deb822 source
# DIR/etc/apt/sources.list.d/one-hpc-NAME.sources whose Signed-By names that keyring, so that
# the key signs this repository and no other. Each file is replaced atomically, and only when
# its content changes.
# Exit 0: written or already so; 1: refused (the message says why; nothing written); 2: usage.
# Needs gpg and apt.
set -eu

die() { echo "apt-source: $*" >&2; exit 1; }
usage() { sed -n '6,15s/^# \{0,1\}//p' "$0" >&2; exit 2; }

root=""
if [ "${1:-}" = --root ]; then
    [ $# -ge 2 ] || usage
    root=$2
    shift 2
fi
[ $# -eq 5 ] || usage
name=$1 uri=$2 suite=$3 key_url=$4
fingerprint=$(printf '%s' "$5" | tr -d ' ' | tr 'a-f' 'A-F')

case $name in
    ''|*[!a-z0-9-]*) echo "apt-source: NAME '$name': expected letters a-z, digits and '-'" >&2; exit 2;;
esac
for pair in "URI=$uri" "KEY_URL=$key_url"; do
    case ${pair#*=} in
        https://?*|http://?*|file:/?*) ;;
        *) echo "apt-source: $pair: expected an https://, http:// or file:/ address" >&2; exit 2;;
    esac
    case ${pair#*=} in
        *[[:space:]]*) echo "apt-source: $pair: an address has no spaces" >&2; exit 2;;
    esac
done
case $suite in
    ''|*[!A-Za-z0-9._/-]*) echo "apt-source: SUITE '$suite': expected a suite name such as bookworm" >&2; exit 2;;
esac
case $fingerprint in
    *[!0-9A-F]*) echo "apt-source: FINGERPRINT '$5': expected 40 hexadecimal digits" >&2; exit 2;;
esac
[ ${#fingerprint} -eq 40 ] || { echo "apt-source: FINGERPRINT '$5': expected 40 hexadecimal digits" >&2; exit 2; }
command -v gpg >/dev/null || die "gpg not found (apt-get install gpg)"
helper=/usr/lib/apt/apt-helper
[ -x "$helper" ] || die "$helper not found (the apt package)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 1' HUP INT TERM
mkdir -m 0700 "$work/gnupg"

# ---- the key, as published ----------------------------------------------------------------
# The sandbox user of apt's methods cannot write into this root-only directory: download as root.
if ! timeout 120 "$helper" -o Acquire::Retries=2 -o Acquire::http::Timeout=30 \
        -o Acquire::https::Timeout=30 -o APT::Sandbox::User=root \
        download-file "$key_url" "$work/key" >"$work/download.log" 2>&1; then
    die "cannot download the signing key $key_url: $(tail -n 3 "$work/download.log" | tr '\n' ' ')"
fi
gpg() { command gpg --batch --no-tty --quiet --homedir "$work/gnupg" "$@"; }
if ! gpg --with-colons --show-keys "$work/key" >"$work/keys" 2>"$work/gpg.log"; then
    die "$key_url is not an OpenPGP key: $(head -n 3 "$work/gpg.log" | tr '\n' ' ')"
fi
# The fingerprint of each primary key: the first fpr record after each pub record.
found=$(awk -F: '$1 == "pub" {want = 1; next} $1 == "fpr" && want {print $10; want = 0}' "$work/keys")
count=$(printf '%s\n' "$found" | grep -c . || true)
if [ "$count" -ne 1 ]; then
    die "$key_url holds $count primary keys ($(printf '%s\n' "$found" | tr '\n' ' ')); expected exactly one, $fingerprint"
fi
if [ "$found" != "$fingerprint" ]; then
    die "the key at $key_url has the fingerprint $found, not the pinned $fingerprint: not trusted"
fi
# The key rewritten in OpenPGP's binary form without a keyring (import-export): no gpg-agent is
# needed (the image has gpg alone, and a plain --import starts the agent).
gpg --import-options import-export --output "$work/keyring" --import "$work/key" 2>"$work/gpg.log" ||
    die "gpg cannot read $key_url: $(head -n 3 "$work/gpg.log" | tr '\n' ' ')"
[ -s "$work/keyring" ] || die "gpg wrote nothing for $fingerprint"

# ---- the keyring and the source, written only when they change ----------------------------
keyring=/usr/share/keyrings/one-hpc-$name.gpg
source=/etc/apt/sources.list.d/one-hpc-$name.sources
{
    echo "# apt-source.sh (one-hpc image build): $name, signed by $fingerprint only"
    echo "Types: deb"
    echo "URIs: $uri"
    echo "Suites: $suite"
    echo "Components: main"
    echo "Signed-By: $keyring"
} >"$work/source"

put() {  # put FILE TARGET: TARGET (under the root) becomes FILE, mode 0644, if it differs
    target=$root$2
    if cmp -s "$1" "$target"; then
        echo "apt-source: $2 unchanged"
        return 0
    fi
    mkdir -p "$(dirname "$target")"
    cp "$1" "$target.tmp.$$"
    chmod 0644 "$target.tmp.$$"
    mv -f "$target.tmp.$$" "$target"
    echo "apt-source: wrote $2"
}
put "$work/keyring" "$keyring"
put "$work/source" "$source"
