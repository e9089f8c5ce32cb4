#!/bin/bash
# CI stage: the relay's seccomp sandbox against libuv 1.50 (Debian 13's), whose io_uring ring
# and named threadpool threads killed the relay before (issue 15). Builds libuv from trixie's
# source package into a private prefix beside the build directory (tests/ci/build-libuv.sh:
# private apt state, the system's apt configuration untouched), builds sockferry against it
# with an rpath, and runs what starts a sandboxed relay against it.
#
#   tests/ci/libuv150.sh BUILDDIR [build|test]     (as root, like tests/ci.sh; default: both)
#
# build: libuv and sockferry, in BUILDDIR and BUILDDIR-libuv (tests/ci.sh builds beside the
# end-to-end lane); test: the tests below, in BUILDDIR (their log stays for CI's closing count).
#
# What runs, and why only that: only `sockferry relay` installs the sandbox (shim/cmd_relay.c),
# so a libuv that makes another system call can only break a relay process. Tests that start
# relays and drive them through each kind of work libuv does for them:
#   relay-sandbox  the filter itself (unit test: allowed, refused with ENOSYS, killed)
#   relay, conn    every endpoint kind, names resolved at connect time (the threadpool's
#                  getaddrinfo), half-close, candidates, the linger drain
#   auth, link     token handshakes and the shared link: timers, keep-alives, re-dials
#   reload         SIGHUP under the sandbox: files re-read, sockets bound and closed
#   stats, check, cli   the control socket and its /proc reads
#   faults         the sandbox's own checks, 10 000 concurrent connections, resets, peer creds
#   policy, activation, vsock   relays that drop privileges, take systemd's sockets, vsock
# Left to the main build (libuv 1.44), which runs them all: the unit tests (no relay process),
# shim-run and attach (`run`, `attach` and `link --stdio` apply no sandbox), the valgrind twins
# (no sandbox under valgrind), the sockferry/1 twins (the same system calls as the shared
# link's dial and the relay suite's plain forwards), the soak (its mixed load takes the paths
# the suites above take one by one), docs, packaging, hardening, usage, probe and the preload
# library (disabled in this build).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" libuv-1.50
build=$(realpath -m "${1:-$src/build-libuv150}")
what=${2:-all}
prefix=$build-libuv/prefix
tests=(relay-sandbox relay conn auth link reload stats check cli faults policy activation vsock)

build_all() {
        local work=$build-libuv/work version
        rm -rf "$build-libuv" "$build"
        mkdir -p "$work"
        if ! "$src/tests/ci/build-libuv.sh" "$prefix" "$work" >"$work/libuv.log" 2>&1; then
                if grep -qiE 'Failed to fetch|Temporary failure resolving|Could not resolve|Unable to (connect|locate)' \
                        "$work/libuv.log"; then
                        skip "trixie's libuv1 source package could not be fetched: $(grep -m1 -iE 'fetch|resolv|connect|locate' "$work/libuv.log")"
                fi
                cat "$work/libuv.log"
                fail "building libuv from trixie's source package"
        fi
        version=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion libuv)
        say "libuv $version built in $(stage_seconds) s"
        PKG_CONFIG_PATH="$prefix/lib/pkgconfig" meson setup "$build" "$src" -Dwerror=true \
                -Dbuildtype=debugoptimized -Dpreload=disabled -Dc_link_args="-Wl,-rpath,$prefix/lib" \
                >"$work/meson.log" 2>&1 || { cat "$work/meson.log"; fail "meson setup (libuv $version)"; }
        ninja -C "$build" >"$work/ninja.log" 2>&1 || { cat "$work/ninja.log"; fail "build (libuv $version)"; }
        rm -rf "$work"
}

test_all() {
        local linked version
        [ -f "$build/build.ninja" ] || fail "$build is not built: tests/ci/libuv150.sh $build build"
        linked=$(ldd "$build/shim/sockferry" | awk '/libuv/ {print $3}')
        [ "$linked" = "$prefix/lib/libuv.so.1" ] || fail "sockferry links $linked, not the libuv built in $prefix"
        version=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion libuv)
        meson test -C "$build" --no-rebuild --print-errorlogs --num-processes "${SF_TEST_PROCESSES:-2}" "${tests[@]}" ||
                fail "the tests on libuv $version"
        say "${tests[*]} on libuv $version"
}

case $what in
build) build_all ;;
test) test_all ;;
all) build_all && test_all ;;
*) fail "usage: tests/ci/libuv150.sh BUILDDIR [build|test]" ;;
esac
