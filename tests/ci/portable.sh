#!/bin/bash
# CI stage (issue 14): the code macOS runs, built on Linux with -Dportable=true (the portable
# engine on libuv streams, the POSIX fallbacks, no splice, no seccomp), through the whole relay,
# auth, faults, attach, link and ops end-to-end suites, the platform-names check, and the relay suite with
# every relay under valgrind. Usage: tests/ci/portable.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-portable}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

fail() {
        echo "portable: FAIL: $*"
        exit 1
}

if ! meson setup "$build" --wipe -Dwerror=true -Dportable=true >/dev/null 2>&1; then
        meson setup "$build" -Dwerror=true -Dportable=true || fail "meson setup -Dportable=true"
fi
ninja -C "$build" || fail "build with -Dportable=true -Dwerror=true"
engine=$(meson introspect --buildoptions "$build" |
        python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "portable"][0])')
[ "$engine" = "True" ] || fail "$build is not a portable build"

# Two logs (suites.json, valgrind.json): CI's closing line counts both.
$SUDO meson test -C "$build" --print-errorlogs --logbase suites --suite relay --suite auth --suite faults --suite attach \
        --suite link --suite ops --suite portable || fail "end-to-end suites on the portable engine"
if command -v valgrind >/dev/null; then
        $SUDO meson test -C "$build" --print-errorlogs --logbase valgrind relay-valgrind || fail "relay suite under valgrind"
        echo "portable: PASS (relay, auth, faults, attach, link, ops, platform-names; relay under valgrind)"
else
        echo "portable: PASS (relay, auth, faults, attach, link, ops, platform-names); valgrind SKIP: not installed"
fi
