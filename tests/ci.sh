#!/bin/bash
# The whole test suite, as CI runs it: install dependencies, build with warnings as errors and
# hardening, run every test; then the same suite in an ASan+UBSan build.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO packaging/install-deps.sh

meson setup build-ci --wipe -Dwerror=true -Dbuildtype=debugoptimized >/dev/null 2>&1 ||
        meson setup build-ci -Dwerror=true -Dbuildtype=debugoptimized
ninja -C build-ci
$SUDO meson test -C build-ci --print-errorlogs --num-processes 2

meson setup build-asan --wipe -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false \
        -Dpreload=disabled >/dev/null 2>&1 ||
        meson setup build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dpreload=disabled
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        SF_BIG_MIB=16 $SUDO -E meson test -C build-asan --print-errorlogs --num-processes 2 \
        --no-suite preload

# libFuzzer smoke run of every parser that takes outside input, from the committed corpora.
tests/fuzz/run.sh 10 "$PWD/build-fuzz"
