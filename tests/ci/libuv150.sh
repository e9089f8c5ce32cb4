#!/bin/bash
# CI stage: the relay's seccomp sandbox against libuv 1.50 (Debian 13's), whose io_uring ring
# and named threadpool threads killed the relay before (issue 15). Builds libuv from trixie's
# source package into a private prefix (tests/ci/build-libuv.sh: private apt state, the
# system's apt configuration untouched), builds sockferry against it with an rpath, and runs the
# whole test suite against it but the valgrind reruns and the minute-long soak (which the main
# build runs, on Debian 12's libuv 1.44, with everything else: the soak's mixed load takes the
# paths the e2e suites take one by one, so it adds no system call the sandbox has to allow).
# usage: tests/ci/libuv150.sh [BUILDDIR]   (run as root, like tests/ci.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-$PWD/build-libuv150}
work=$(mktemp -d /tmp/sockferry-libuv150.XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$SECONDS

if ! tests/ci/build-libuv.sh "$work/prefix" "$work/build" >"$work/libuv.log" 2>&1; then
        if grep -qiE 'Failed to fetch|Temporary failure resolving|Could not resolve|Unable to (connect|locate)' \
                "$work/libuv.log"; then
                echo "libuv-1.50 stage: SKIP (trixie's libuv1 source package could not be fetched:" \
                        "$(grep -m1 -iE 'fetch|resolv|connect|locate' "$work/libuv.log"))"
                exit 77
        fi
        cat "$work/libuv.log"
        echo "libuv-1.50 stage: FAIL (building libuv from trixie's source package)"
        exit 1
fi
version=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --modversion libuv)
libuv_s=$((SECONDS - start))

fail() {
        echo "libuv-1.50 stage: FAIL ($1; libuv $version)"
        exit 1
}
rm -rf "$build"
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" meson setup "$build" -Dwerror=true \
        -Dbuildtype=debugoptimized -Dpreload=disabled -Dc_link_args="-Wl,-rpath,$work/prefix/lib" \
        >"$work/meson.log" 2>&1 || { cat "$work/meson.log"; fail "meson setup"; }
ninja -C "$build" >"$work/ninja.log" 2>&1 || { cat "$work/ninja.log"; fail "build"; }
linked=$(ldd "$build/shim/sockferry" | awk '/libuv/ {print $3}')
[ "$linked" = "$work/prefix/lib/libuv.so.1" ] || fail "sockferry links $linked, not the libuv just built"

# The whole suite but the valgrind reruns and the soak (the main build has those, on 1.44); its
# log stays for CI's closing count.
meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 2 --no-suite valgrind --no-suite soak ||
        fail "the test suite on this libuv"
echo "libuv-1.50 stage: PASS (libuv $version built in ${libuv_s} s; whole stage $((SECONDS - start)) s)"
