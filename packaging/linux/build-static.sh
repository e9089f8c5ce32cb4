#!/bin/bash
# Builds the static Linux binaries (-Dstatic=true, static-pie against glibc) for x86_64 and
# aarch64 on Debian: OUTDIR/linux-x86_64/sockferry and OUTDIR/linux-aarch64/sockferry, with
# the architecture as `uname -m` prints it. These are the binaries `attach --inject` copies
# into containers (the .deb and the Homebrew formula install them in
# LIBEXECDIR/sockferry/linux-ARCH/) and the release's sockferry-VERSION-linux-ARCH.
#
#   packaging/linux/build-static.sh [--source DIR] OUTDIR
#
# --source: the sockferry tree to build (default: the one holding this script).
# Environment: SF_STATIC_TARGETS (default "x86_64 aarch64"); SF_STATIC_CACHE (default
# ~/.cache/sockferry-linux) keeps the build directories, so a second run rebuilds only what
# changed, and the foreign architecture's libraries; SF_STATIC_JOBS (default: nproc).
#
# The machine's own architecture is built with the system's compiler and -dev packages. The
# other one is cross-built with Debian's cross compiler (gcc-aarch64-linux-gnu and
# libc6-dev-arm64-cross, or the x86-64 ones on an arm64 machine) against the static archives
# of that architecture's -dev packages (libuv1-dev, libsodium-dev, libnghttp2-dev,
# libinih-dev, libcap-ng-dev, libseccomp-dev), downloaded from the system's own Debian mirror through a private apt state
# and unpacked into a sysroot: the system's dpkg architectures and apt configuration are not
# touched.
#
# Checks: file(1) says a static-pie ELF of the architecture, no program interpreter and no
# NEEDED entry; each binary prints its version, the foreign one under qemu-ARCH-static
# (Debian's qemu-user-static) when it is installed. Options: --prefix /usr --libdir lib
# (sockferry run looks for the preload library in /usr/lib/sockferry/, where the images keep
# it), buildtype release, stripped.
set -euo pipefail

usage() { echo "usage: $0 [--source DIR] OUTDIR" >&2; exit 64; }
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=
while (($#)); do
        case $1 in
        --source) (($# >= 2)) || usage; src=$(cd "$2" 2>/dev/null && pwd) || { echo "$0: --source $2: no such directory" >&2; exit 64; }; shift 2 ;;
        -h|--help) usage ;;
        -*) echo "$0: unknown option $1" >&2; usage ;;
        *) [ -z "$out" ] || usage; out=$1; shift ;;
        esac
done
[ -n "$out" ] || usage
[ -f "$src/meson.build" ] || { echo "$0: $src: no meson.build; --source names the sockferry tree" >&2; exit 64; }
read -ra targets <<<"${SF_STATIC_TARGETS:-x86_64 aarch64}"
# Debian's names of each architecture, and what file(1) says.
declare -A debarch=([x86_64]=amd64 [aarch64]=arm64) gnu_pkg=([x86_64]=x86-64 [aarch64]=aarch64)
declare -A file_arch=([x86_64]=x86-64 [aarch64]="ARM aarch64")
for t in "${targets[@]}"; do
        [ -n "${debarch[$t]:-}" ] || { echo "$0: SF_STATIC_TARGETS: $t is not x86_64 or aarch64" >&2; exit 64; }
done
((${#targets[@]})) || { echo "$0: SF_STATIC_TARGETS is empty" >&2; exit 64; }
native=$(uname -m)
jobs=${SF_STATIC_JOBS:-$(nproc)}
cache=${SF_STATIC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sockferry-linux}
mkdir -p "$out" "$cache"
out=$(cd "$out" && pwd)
cache=$(cd "$cache" && pwd)
exec 9>"$cache/.lock"
flock 9
say() { printf '%s  build-static: %s\n' "$(date -u +%T)" "$*"; }
source "$(dirname "${BASH_SOURCE[0]}")/../cross/debian-sources.sh"

setup_opts=(-Dstatic=true -Dwerror=true -Dbuildtype=release --prefix=/usr --libdir=lib)
# One build directory per source tree, options and target: a second run is incremental.
key=$(printf '%s\n' "$src" "${setup_opts[@]}" | sha256sum | cut -c1-12)
dev_pkgs=(libuv1-dev libsodium-dev libnghttp2-dev libinih-dev libcap-ng-dev libseccomp-dev)

# sysroot T: the target's -dev packages from the system's mirror, unpacked in $cache/T/sysroot,
# again only when the package list or a version changed.
sysroot() {
        local t=$1 a=${debarch[$1]} d=$cache/$1/apt root=$cache/$1/sysroot want
        local opts=(-o "Dir::State=$d/state" -o "Dir::Cache=$d/cache" -o "Dir::Etc::SourceList=$d/sources.list"
                -o "Dir::Etc::SourceParts=$d/parts" -o "APT::Architecture=$a" -o "APT::Architectures::=$a"
                -o "APT::Sandbox::User=$(id -un)" -q)
        mkdir -p "$d/state/lists/partial" "$d/cache/archives/partial" "$d/parts" "$d/debs"
        debian_sources deb >"$d/sources.list"
        [ -s "$d/sources.list" ] || { echo "$0: apt-cache policy lists no Debian repository: run apt-get update first" >&2; exit 1; }
        # Lists younger than an hour are used as they are (CI builds twice in one run).
        if ! find "$d/state/lists" -name '*_Packages*' -mmin -60 | grep -q . || ! cmp -s "$d/sources.list" "$d/sources.list.used"; then
                apt-get "${opts[@]}" update >"$d/update.log" 2>&1 || {
                        cat "$d/update.log" >&2; echo "$0: apt-get update for $a failed" >&2; exit 1; }
                cp "$d/sources.list" "$d/sources.list.used"
        fi
        want=$(apt-cache "${opts[@]}" policy "${dev_pkgs[@]/%/:$a}" | awk '/^[^ ]/ {p=$1} /Candidate:/ {print p, $2}')
        if [ "$want" != "$(cat "$root/.packages" 2>/dev/null)" ]; then
                say "$t: ${dev_pkgs[*]} ($a) from $(awk '{print $(NF-2)}' "$d/sources.list" | sort -u | paste -sd, -)"
                rm -rf "$d/debs" "$root"
                mkdir -p "$d/debs" "$root"
                (cd "$d/debs" && apt-get "${opts[@]}" download "${dev_pkgs[@]/%/:$a}" >"$d/download.log" 2>&1) || {
                        cat "$d/download.log" >&2; echo "$0: apt-get download for $a failed" >&2; exit 1; }
                for deb in "$d"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
                printf '%s\n' "$want" >"$root/.packages"
        fi
}

# cross_file T: meson's cross file for Debian's T-linux-gnu toolchain and the sysroot's
# pkg-config files (pkg-config prefixes their paths with sys_root).
cross_file() {
        local t=$1 h=$1-linux-gnu root=$cache/$1/sysroot
        cat <<EOF
[binaries]
c = '$h-gcc'
ar = '$h-ar'
strip = '$h-strip'
pkgconfig = 'pkg-config'

[properties]
sys_root = '$root'
pkg_config_libdir = ['$root/usr/lib/$h/pkgconfig', '$root/usr/share/pkgconfig']

[host_machine]
system = 'linux'
cpu_family = '$t'
cpu = '$t'
endian = 'little'
EOF
}

for t in "${targets[@]}"; do
        b=$cache/$t/build-$key
        mkdir -p "$cache/$t"
        setup=("${setup_opts[@]}")
        strip=strip
        if [ "$t" != "$native" ]; then
                command -v "$t-linux-gnu-gcc" >/dev/null || {
                        echo "$0: $t-linux-gnu-gcc not found: install gcc-${gnu_pkg[$t]}-linux-gnu and libc6-dev-${debarch[$t]}-cross (packaging/install-deps.sh)" >&2
                        exit 1; }
                sysroot "$t"
                cross_file "$t" >"$cache/$t/cross.ini.new"
                if ! cmp -s "$cache/$t/cross.ini.new" "$cache/$t/cross.ini"; then
                        mv "$cache/$t/cross.ini.new" "$cache/$t/cross.ini"
                        rm -rf "$b"
                else
                        rm -f "$cache/$t/cross.ini.new"
                fi
                setup+=(--cross-file "$cache/$t/cross.ini")
                strip=$t-linux-gnu-strip
        fi
        if [ ! -f "$b/build.ninja" ]; then
                rm -rf "$b"
                meson setup "$b" "$src" "${setup[@]}" >"$cache/$t/setup.log" 2>&1 || {
                        tail -n 30 "$cache/$t/setup.log" >&2; echo "$0: $t: meson setup failed (log: $cache/$t/setup.log)" >&2; exit 1; }
        fi
        say "$t: ninja (log: $cache/$t/build.log)"
        ninja -C "$b" -j "$jobs" shim/sockferry >"$cache/$t/build.log" 2>&1 || {
                tail -n 30 "$cache/$t/build.log" >&2; echo "$0: $t: the build failed" >&2; exit 1; }
        mkdir -p "$out/linux-$t"
        "$strip" -o "$out/linux-$t/sockferry.new" "$b/shim/sockferry"
        exe=$out/linux-$t/sockferry.new

        desc=$(file -b "$exe")
        case $desc in
        "ELF 64-bit LSB pie executable, ${file_arch[$t]},"*"static-pie linked"*) ;;
        *) echo "$0: $exe is not a static-pie $t executable: $desc" >&2; exit 1 ;;
        esac
        if readelf -lW "$exe" | grep -q 'Requesting program interpreter' || readelf -dW "$exe" | grep -q NEEDED; then
                echo "$0: $exe has a program interpreter or NEEDED entries: not static" >&2; exit 1
        fi
        if [ "$t" = "$native" ]; then
                runner=()
        elif command -v "qemu-$t-static" >/dev/null; then
                runner=("qemu-$t-static")
        else
                runner=(none)
        fi
        version=$(meson introspect --projectinfo "$b" | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
        if [ "${runner[*]}" = none ]; then
                ran="not run (no qemu-$t-static: apt-get install qemu-user-static)"
        else
                got=$("${runner[@]}" "$exe" --version)
                [ "$got" = "sockferry $version" ] || { echo "$0: $exe --version printed '$got'" >&2; exit 1; }
                ran="--version: $got${runner[*]:+ (under ${runner[*]})}"
        fi
        mv "$exe" "$out/linux-$t/sockferry"
        say "$out/linux-$t/sockferry: $(stat -c %s "$out/linux-$t/sockferry") bytes, $desc; $ran"
done
