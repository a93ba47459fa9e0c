#!/bin/bash
# ondemand_repo.sh: a stand-in for OSC's Open OnDemand apt repository (unreachable here), for
# the tests that go through the image build's own trust path (image-build/apt-source.sh):
# sourced, it defines
#   ondemand_repo DIR FINGERPRINT [GENERATOR]
# which makes DIR an apt repository of one suite, bookworm (DIR is what a site passes as
# <ondemand_repo>/<release>/web/apt), signed (InRelease) by the key FINGERPRINT of the
# caller's GNUPGHOME, serving one package named `ondemand`, a stand-in made here. Without
# GENERATOR it is empty (version 4.0.0~standin); with GENERATOR (the program
# update-ood-portal-standin, tests/fakes/ood_portal_generator_main.cc) it installs it as
# /opt/ood/ood-portal-generator/sbin/update_ood_portal, where Open OnDemand has its generator,
# with a page standing for the dashboard under /opt/ood/one-hpc-stand-in, and is version
# 4.0.0~one-hpc-stand-in, which an image's /etc/one-hpc/image.json then names. Needs gpg and
# dpkg-deb.
ondemand_repo() {
    local dir=$1 signer=$2 generator=${3:-} pkgroot version pkg sha size packages
    pkgroot=$(mktemp -d)
    mkdir -p "$dir/pool" "$dir/dists/bookworm/main/binary-amd64" "$pkgroot/DEBIAN"
    if [ -n "$generator" ]; then
        version=4.0.0~one-hpc-stand-in
        install -D -m 0755 "$generator" "$pkgroot/opt/ood/ood-portal-generator/sbin/update_ood_portal"
        mkdir -p "$pkgroot/opt/ood/one-hpc-stand-in/pun/sys/dashboard"
        echo "Open OnDemand dashboard (one-hpc's stand-in, tests/fakes/ondemand_repo.sh)" \
            > "$pkgroot/opt/ood/one-hpc-stand-in/pun/sys/dashboard/index.html"
        printf '%s\n' 'Package: ondemand' "Version: $version" 'Architecture: amd64' \
            'Depends: apache2, libyaml-cpp0.7, libfmt9, libssl3' \
            'Maintainer: one-hpc tests <tests@example.org>' \
            "Description: stand-in for OSC's ondemand (one-hpc's tests/fakes/ondemand_repo.sh)" \
            ' Open OnDemand is not in it: only a stand-in of its portal generator.' \
            > "$pkgroot/DEBIAN/control"
    else
        version=4.0.0~standin
        printf '%s\n' 'Package: ondemand' "Version: $version" 'Architecture: all' \
            'Maintainer: one-hpc tests <tests@example.org>' \
            "Description: stand-in for OSC's ondemand (one-hpc's tests/fakes/ondemand_repo.sh)" \
            > "$pkgroot/DEBIAN/control"
    fi
    pkg=$dir/pool/ondemand_${version}.deb
    dpkg-deb --root-owner-group -Zgzip --build "$pkgroot" "$pkg" >/dev/null || return 1
    rm -rf "$pkgroot"
    packages=$dir/dists/bookworm/main/binary-amd64/Packages
    sha=$(sha256sum "$pkg" | cut -d' ' -f1) size=$(stat -c %s "$pkg")
    { dpkg-deb -f "$pkg"; echo "Filename: pool/${pkg##*/}"; echo "Size: $size"; echo "SHA256: $sha"; echo; } \
        > "$packages"
    sha=$(sha256sum "$packages" | cut -d' ' -f1) size=$(stat -c %s "$packages")
    printf '%s\n' 'Origin: one-hpc tests' 'Suite: bookworm' 'Codename: bookworm' \
        "Date: $(LC_ALL=C date -Ru)" 'Architectures: amd64 all' 'Components: main' 'SHA256:' \
        " $sha $size main/binary-amd64/Packages" > "$dir/dists/bookworm/Release"
    gpg --batch --yes --local-user "$signer" --clearsign -o "$dir/dists/bookworm/InRelease" \
        "$dir/dists/bookworm/Release"
}
