#!/bin/bash
# Build libuv from Debian 13 (trixie)'s source package and install it into PREFIX, without
# touching the system's apt configuration: a private sources list, state and cache directory.
# The mirror is the one the system's own sources use. Needs dpkg-dev, cmake, ninja-build.
# usage: build-libuv.sh PREFIX WORKDIR
set -euo pipefail
prefix=$1
work=$2
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/parts" "$work/src"

mirror=$( (grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ \
        2>/dev/null || true) | head -1 | tr -d ' ')
mirror=${mirror:-http://deb.debian.org/debian}
printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s trixie main\n' \
        "${mirror%/}" >"$work/apt/sources.list"

apt_private=(-o Dir::State="$work/apt" -o Dir::State::status=/var/lib/dpkg/status
        -o Dir::Etc::SourceList="$work/apt/sources.list" -o Dir::Etc::SourceParts="$work/apt/parts"
        -o Dir::Cache="$work/apt/cache" -o APT::Sandbox::User=root)
apt-get "${apt_private[@]}" -qq update
(cd "$work/src" && apt-get "${apt_private[@]}" -qq --download-only source libuv1 >/dev/null &&
        dpkg-source -x --no-copy "$(ls libuv1_*.dsc | head -1)" libuv >/dev/null 2>&1)

cmake -S "$work/src/libuv" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_TESTING=OFF -DLIBUV_BUILD_SHARED=ON -DCMAKE_INSTALL_PREFIX="$prefix" \
        -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
ninja -C "$work/build" >/dev/null
ninja -C "$work/build" install >/dev/null
echo "libuv $(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/libuv.pc") installed in $prefix"
