#!/bin/bash
# CI stage (issue 14): the code macOS runs, built on Linux with -Dportable=true (the portable
# engine on libuv streams, the POSIX fallbacks, no splice, no seccomp), through the whole relay,
# auth, faults, attach, link and ops end-to-end suites, the platform-names check, and the relay
# suite with every relay under valgrind.
#
#   tests/ci/portable.sh [BUILDDIR] [build|test]     (default build-portable; both)
#
# build: the portable build (tests/ci.sh builds beside the end-to-end lane); test: the suites,
# two logs in BUILDDIR (suites.json, valgrind.json) for CI's closing count.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" portable
build=$(realpath -m "${1:-$src/build-portable}")
what=${2:-all}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
procs=${SF_TEST_PROCESSES:-2}

build_all() {
        local engine
        if ! meson setup "$build" "$src" --wipe -Dwerror=true -Dportable=true >/dev/null 2>&1; then
                meson setup "$build" "$src" -Dwerror=true -Dportable=true || fail "meson setup -Dportable=true"
        fi
        ninja -C "$build" || fail "build with -Dportable=true -Dwerror=true"
        engine=$(meson introspect --buildoptions "$build" |
                python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "portable"][0])')
        [ "$engine" = "True" ] || fail "$build is not a portable build"
}

test_all() {
        [ -f "$build/build.ninja" ] || fail "$build is not built: tests/ci/portable.sh $build build"
        $SUDO meson test -C "$build" --no-rebuild --print-errorlogs --num-processes "$procs" --logbase suites \
                --suite relay --suite auth --suite faults --suite attach --suite link --suite ops --suite portable ||
                fail "end-to-end suites on the portable engine"
        if command -v valgrind >/dev/null; then
                $SUDO meson test -C "$build" --no-rebuild --print-errorlogs --num-processes "$procs" --logbase valgrind \
                        relay-valgrind || fail "relay suite under valgrind"
                say "relay, auth, faults, attach, link, ops, platform-names; relay under valgrind"
        else
                say "relay, auth, faults, attach, link, ops, platform-names; valgrind SKIP: not installed"
        fi
}

case $what in
build) build_all ;;
test) test_all ;;
all) build_all && test_all ;;
*) fail "usage: tests/ci/portable.sh [BUILDDIR] [build|test]" ;;
esac
