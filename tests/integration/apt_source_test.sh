#!/bin/bash
# image-build/apt-source.sh (how the Open OnDemand image trusts OSC's and NodeSource's
# repositories) and the image build's checks of its Open OnDemand options, with real gpg and
# real apt, no network: a test key pair, and a local apt repository (file:) signed with it that
# serves a stand-in `ondemand` package (an empty package of that name made here: OSC's
# repository cannot be reached from this machine).
#   - a key with the pinned fingerprint: the keyring (that key alone) and the deb822 source are
#     written, without a gpg-agent (gpg cannot start one here, as in the image); a second run
#     changes nothing;
#   - a key with another fingerprint, two keys in one file, a file that is no key, an address
#     that does not answer: refused with the reason, nothing written; malformed arguments:
#     usage errors naming the argument;
#   - apt itself, with the written source and keyring: the repository signed by the pinned key
#     is read and its package downloaded; the same repository signed by another key is refused;
#   - install-appliance.sh and build-image.sh refuse incomplete or misplaced Open OnDemand
#     options before touching anything, naming the Packer variables.
set -uo pipefail
SRC=${ONEHPC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
IB=$SRC/image-build
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; [ $# -lt 2 ] || printf '%s\n' "$2" | sed 's/^/    /'; failed=$((failed + 1)); }
for tool in gpg gpg-agent dpkg-deb apt-get; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not found (apt-get install gpg gpg-agent)"; exit 77; }
done

work=$(mktemp -d)
export GNUPGHOME=$work/gnupg
cleanup() { gpgconf --kill gpg-agent 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir -m 0700 "$GNUPGHOME"

# ---- two signing keys, as a publisher makes them ------------------------------------------
newkey() {  # newkey NAME: prints the new key's fingerprint
    gpg --batch --quiet --passphrase '' --quick-gen-key "$1 <$1@example.org>" ed25519 sign never 2>/dev/null
    gpg --batch --with-colons --list-keys "$1@example.org" | awk -F: '$1 == "fpr" {print $10; exit}'
}
good=$(newkey publisher) other=$(newkey stranger)
gpg --batch --armor --export "$good" > "$work/good.asc"
gpg --batch --armor --export "$other" > "$work/other.asc"
gpg --batch --armor --export "$good" "$other" > "$work/two.asc"
echo "not a key" > "$work/garbage.asc"
if [ ${#good} -ne 40 ] || [ ${#other} -ne 40 ]; then echo "FAIL test keys: '$good' '$other'"; exit 1; fi

# ---- a local repository serving a stand-in ondemand package --------------------------------
# shellcheck source=SCRIPTDIR/../fakes/ondemand_repo.sh
. "$SRC/tests/fakes/ondemand_repo.sh"
ondemand_repo "$work/repo" "$good"
ondemand_repo "$work/repo-other" "$other"

# ---- apt-source.sh: accepted, and idempotent ----------------------------------------------
R=$work/root
keyring=$R/usr/share/keyrings/one-hpc-ondemand-web.gpg
source=$R/etc/apt/sources.list.d/one-hpc-ondemand-web.sources
# As install-appliance.sh runs it (dash), and with gpg unable to start gpg-agent: the image
# has gpg alone (its first build failed on an import that starts the agent).
mkdir -p "$work/no-agent"
printf '#!/bin/sh\nexec %s --agent-program /nonexistent/gpg-agent "$@"\n' "$(command -v gpg)" >"$work/no-agent/gpg"
chmod 0755 "$work/no-agent/gpg"
run() { PATH=$work/no-agent:$PATH sh "$IB/apt-source.sh" "$@" 2>&1; }
# The fingerprint as a publisher prints it: groups of four, lower case.
spaced=""
for ((i = 0; i < 40; i += 4)); do spaced+="${good:i:4} "; done
spaced=${spaced,,}
out=$(run --root "$R" ondemand-web "file://$work/repo" bookworm "file://$work/good.asc" "$spaced"); rc=$?
if [ $rc -eq 0 ] && [ -s "$keyring" ] && [ -s "$source" ]; then
    pass "the key with the pinned fingerprint: keyring and source written"
else fail "the key with the pinned fingerprint: keyring and source written" "rc=$rc $out"; fi
listed=$(gpg --batch --with-colons --show-keys "$keyring" 2>/dev/null | awk -F: '$1 == "fpr" {print $10}' | head -n1)
keys=$(gpg --batch --with-colons --show-keys "$keyring" 2>/dev/null | grep -c '^pub:')
if [ "$listed" = "$good" ] && [ "$keys" = 1 ]; then pass "the keyring holds the pinned key alone"
else fail "the keyring holds the pinned key alone" "keys=$keys first=$listed"; fi
expected="Types: deb
URIs: file://$work/repo
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/one-hpc-ondemand-web.gpg"
if [ "$(grep -v '^#' "$source")" = "$expected" ]; then pass "the deb822 source: this repository, signed by that keyring only"
else fail "the deb822 source: this repository, signed by that keyring only" "$(cat "$source")"; fi
before=$(stat -c '%i %Y' "$keyring" "$source")
sleep 1
out=$(run --root "$R" ondemand-web "file://$work/repo" bookworm "file://$work/good.asc" "$good"); rc=$?
if [ $rc -eq 0 ] && [ "$(stat -c '%i %Y' "$keyring" "$source")" = "$before" ] && grep -q unchanged <<<"$out"; then
    pass "a second run changes nothing"
else fail "a second run changes nothing" "rc=$rc $out"; fi

# ---- refusals: nothing written ------------------------------------------------------------
refused() {  # refused NAME EXPECTED-EXIT TEXT ARGS...: the run exits so, says TEXT, writes nothing
    local name=$1 want=$2 text=$3 r=$work/refused; shift 3
    rm -rf "$r"
    out=$(run --root "$r" "$@"); rc=$?
    if [ $rc -eq "$want" ] && grep -qF -- "$text" <<<"$out" && [ ! -e "$r" ]; then pass "$name"
    else fail "$name" "rc=$rc (expected $want), expected '$text'; output: $out; written: $(find "$r" -type f 2>/dev/null)"; fi
}
refused "another key than the pinned one: refused, both fingerprints named" 1 \
    "has the fingerprint $other, not the pinned $good" \
    ondemand-web "file://$work/repo" bookworm "file://$work/other.asc" "$good"
refused "two keys in the file: refused" 1 "holds 2 primary keys" \
    ondemand-web "file://$work/repo" bookworm "file://$work/two.asc" "$good"
refused "a file that is no key: refused" 1 "is not an OpenPGP key" \
    ondemand-web "file://$work/repo" bookworm "file://$work/garbage.asc" "$good"
refused "a key address that does not answer: refused, the address named" 1 \
    "cannot download the signing key file://$work/missing.asc" \
    ondemand-web "file://$work/repo" bookworm "file://$work/missing.asc" "$good"
refused "a fingerprint of 39 digits: usage error" 2 "FINGERPRINT '${good:1}': expected 40 hexadecimal digits" \
    ondemand-web "file://$work/repo" bookworm "file://$work/good.asc" "${good:1}"
refused "a repository address with a space: usage error" 2 "URI=file://$work/a b: an address has no spaces" \
    ondemand-web "file://$work/a b" bookworm "file://$work/good.asc" "$good"
refused "a key address that is not a URL: usage error" 2 "KEY_URL=$work/good.asc: expected an https://" \
    ondemand-web "file://$work/repo" bookworm "$work/good.asc" "$good"
refused "a name with a slash: usage error" 2 "NAME '../x': expected letters" \
    ../x "file://$work/repo" bookworm "file://$work/good.asc" "$good"

# ---- apt itself, with what apt-source.sh wrote ----------------------------------------------
# A private apt (its own lists, cache and sources) over the written source; only the keyring's
# path is moved under the test root (the image has it at /usr/share/keyrings).
apt_private() {  # apt_private DIR SOURCE-FILE apt-get|apt-cache ARGS...
    local dir=$1 src=$2 tool=$3; shift 3
    mkdir -p "$dir/sources" "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/prefs"
    sed "s#^Signed-By: #Signed-By: $R#" "$src" > "$dir/sources/test.sources"
    "$tool" -q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$dir/sources" \
        -o Dir::Etc::PreferencesParts="$dir/prefs" -o Dir::State::Lists="$dir/lists" \
        -o Dir::Cache="$dir/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root \
        -o Acquire::Languages=none "$@"
}
A=$work/apt-good
if out=$(apt_private "$A" "$source" apt-get update 2>&1) && ! grep -q '^[WE]:' <<<"$out"; then
    pass "apt reads the repository signed by the pinned key"
else fail "apt reads the repository signed by the pinned key" "$out"; fi
cand=$(apt_private "$A" "$source" apt-cache policy ondemand 2>&1 | sed -n 's/^ *Candidate: //p')
if [ "$cand" = "4.0.0~standin" ]; then pass "its ondemand is apt's candidate ($cand)"
else fail "its ondemand is apt's candidate" "candidate '$cand'"; fi
if out=$(cd "$work" && apt_private "$A" "$source" apt-get download ondemand 2>&1) &&
   [ -s "$work/ondemand_4.0.0~standin_all.deb" ]; then
    pass "apt downloads it, checked against the signed index"
else fail "apt downloads it, checked against the signed index" "$out"; fi
sed "s#file://$work/repo\$#file://$work/repo-other#" "$source" > "$work/other.sources"
B=$work/apt-other
out=$(apt_private "$B" "$work/other.sources" apt-get update 2>&1); rc=$?
cand=$(apt_private "$B" "$work/other.sources" apt-cache policy ondemand 2>&1 | sed -n 's/^ *Candidate: //p')
if grep -q "NO_PUBKEY\|not signed\|signatures couldn't be verified" <<<"$out" &&
   { [ -z "$cand" ] || [ "$cand" = "(none)" ]; }; then
    pass "the same repository signed by another key is refused (rc=$rc, no candidate)"
else fail "the same repository signed by another key is refused" "rc=$rc candidate '$cand': $out"; fi

# ---- the image build's own checks of its Open OnDemand options ---------------------------
ia() { sh "$IB/install-appliance.sh" "$@" 2>&1; }
out=$(ia --role-packages ood --ondemand-repo "file://$work/repo"); rc=$?
if [ $rc -ne 0 ] && grep -q "go together (Packer variables ondemand_repo" <<<"$out"; then
    pass "install-appliance.sh: the repository without its key is refused, naming the Packer variables"
else fail "install-appliance.sh: the repository without its key is refused" "rc=$rc $out"; fi
out=$(ia --role-packages slurm --ondemand-repo "file://$work/repo" --ondemand-key "file://$work/good.asc" \
         --ondemand-fingerprint "$good"); rc=$?
if [ $rc -ne 0 ] && grep -q "needs --role-packages ood or all, not 'slurm'" <<<"$out"; then
    pass "install-appliance.sh: Open OnDemand for the Slurm appliance is refused"
else fail "install-appliance.sh: Open OnDemand for the Slurm appliance is refused" "rc=$rc $out"; fi
out=$(ia --role-packages ood --nodejs-repo "file://$work/repo" --nodejs-key "file://$work/good.asc" \
         --nodejs-fingerprint "$good"); rc=$?
if [ $rc -ne 0 ] && grep -q "needs --ondemand-repo" <<<"$out"; then
    pass "install-appliance.sh: Node.js without Open OnDemand is refused"
else fail "install-appliance.sh: Node.js without Open OnDemand is refused" "rc=$rc $out"; fi
: > "$work/base.qcow2"
out=$(bash "$IB/build-image.sh" --appliance open-ondemand --ondemand-release 4 --base "$work/base.qcow2" \
          --packages-only --output "$work/out" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "ondemand-release must be a release such as 4.0, or none, not '4'" <<<"$out" &&
   [ ! -e "$work/out" ]; then
    pass "build-image.sh: a malformed Open OnDemand release is refused before anything is built"
else fail "build-image.sh: a malformed Open OnDemand release is refused" "rc=$rc $out"; fi
out=$(bash "$IB/build-image.sh" --appliance oneslurm --ondemand-release 4.0 --base "$work/base.qcow2" \
          --packages-only --output "$work/out" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "is for the open-ondemand appliance, not oneslurm" <<<"$out"; then
    pass "build-image.sh: an Open OnDemand release for the Slurm appliance is refused"
else fail "build-image.sh: an Open OnDemand release for the Slurm appliance is refused" "rc=$rc $out"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
