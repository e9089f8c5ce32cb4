#!/bin/bash
# The whole test suite, as CI runs it: install dependencies, build with warnings as errors and
# hardening, run every test; then the same suite in an ASan+UBSan build.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's time, so that a run near CI's limit shows where its time went.
lap_at=$SECONDS
lap() {
        echo "ci: $1: $((SECONDS - lap_at)) s (at $SECONDS s)"
        lap_at=$SECONDS
}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO packaging/install-deps.sh
lap "packages"

meson setup build-ci --wipe -Dwerror=true -Dbuildtype=debugoptimized >/dev/null 2>&1 ||
        meson setup build-ci -Dwerror=true -Dbuildtype=debugoptimized
ninja -C build-ci
$SUDO meson test -C build-ci --print-errorlogs --num-processes 2
lap "main build and tests"

meson setup build-asan --wipe -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false \
        -Dpreload=disabled >/dev/null 2>&1 ||
        meson setup build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dpreload=disabled
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        SF_BIG_MIB=16 ${SUDO:+$SUDO -E} meson test -C build-asan --print-errorlogs --num-processes 2 \
        --no-suite preload
lap "ASan+UBSan build and tests"

# libFuzzer smoke run of every parser that takes outside input, from the committed corpora.
tests/fuzz/run.sh 10 "$PWD/build-fuzz"
lap "fuzz"

# Packaging: meson install into a staging tree and meson dist (then a build of the release
# tarball); the static binaries (-Dstatic=true) for x86_64 and aarch64, each in an empty
# chroot holding only it and /etc/hosts (aarch64 under qemu-aarch64-static); the .deb, with
# those binaries, built (lintian errors fail), installed, used for one forward and removed;
# the RPM spec parsed. Each is built once: the release stage below takes them.
tests/ci/install-dist.sh build-ci
packaging/linux/build-static.sh "$PWD/build-static"
$SUDO tests/ci/static-chroot.sh "$PWD/build-static"
SF_STATIC_DIR=$PWD/build-static $SUDO ${SUDO:+-E} tests/ci/deb-install.sh "$PWD/build-deb"
rpmspec -P packaging/rpm/sockferry.spec >/dev/null && echo "rpm: packaging/rpm/sockferry.spec parses"

# Hardening of the installed binaries, as packaged (PIE, full RELRO, NX stack, stack protector,
# FORTIFY): meson test --suite hardening checked the build tree; this checks what meson installs.
hstage=$(mktemp -d /tmp/sockferry-hardening.XXXXXX)
DESTDIR="$hstage" meson install -C build-ci --no-rebuild --quiet >/dev/null
hargs=("exe:$(find "$hstage" -path '*/bin/sockferry' -type f)" "lib:$(find "$hstage" -name sockferry-preload.so -type f)")
hmusl=$(find "$hstage" -name sockferry-preload-musl.so -type f)
[ -z "$hmusl" ] || hargs+=("musl-lib:$hmusl")
tests/hardening/check_hardening.sh "${hargs[@]}"
rm -rf "$hstage"
lap "packaging, static binaries, .deb and hardening"

# Stages outside the main build. Each exits 0 (passed), 77 (skipped: it says why) or anything
# else (failed: CI stops). The closing line counts them beside the meson tests.
stages_passed=0
stages_skipped=0
stage() {
        local rc=0
        "$@" || rc=$?
        case $rc in
        0) stages_passed=$((stages_passed + 1)) ;;
        77) stages_skipped=$((stages_skipped + 1)) ;;
        *) echo "CI stage failed (exit $rc): $*" >&2; exit 1 ;;
        esac
        local a
        for a in "$@"; do
                [[ $a != *.sh ]] || break
        done
        lap "stage $a"
}
# The seccomp sandbox on libuv 1.50 (built from trixie's source package) as well as 1.44 (issue 15).
stage $SUDO tests/ci/libuv150.sh "$PWD/build-libuv150"
# The code macOS runs (-Dportable=true) through the e2e suites and valgrind (issue 14).
stage $SUDO tests/ci/portable.sh "$PWD/build-portable"
# macOS host side without a Mac: Mach-O cross-build (x86_64, arm64, universal), checked for
# undefined symbols; kept in build-macos for the release stage.
stage tests/ci/macos-cross.sh "$PWD/build-macos"
# Windows host side without Windows: sockferry.exe cross-built (PE32+, only Windows DLLs), named
# pipes, TCP and the end-to-end tests under Wine (issue 18); the exe kept in build-windows.
SF_WINDOWS_OUT=$PWD/build-windows stage $SUDO ${SUDO:+-E} tests/ci/windows.sh "$PWD/build-ci"
# The release (issue 26): packaging/release.sh VERSION OUTDIR with the builds above (static,
# macOS, Windows, .deb), every artifact checked, the Homebrew formula built and tested from the
# release tarball under a stand-in for Homebrew (tests/ci/release.sh).
# A stage that was skipped left no build to reuse: release.sh then makes its own.
release_env=(SF_RELEASE_STATIC="$PWD/build-static" SF_RELEASE_DEB="$(ls "$PWD"/build-deb/sockferry_*.deb)")
[ ! -f "$PWD/build-macos/sockferry-universal" ] || release_env+=(SF_RELEASE_MACOS="$PWD/build-macos")
[ ! -f "$PWD/build-windows/sockferry.exe" ] || release_env+=(SF_RELEASE_WINDOWS="$PWD/build-windows")
stage env "${release_env[@]}" tests/ci/release.sh "$PWD/build-release"
# Containers (tests/ci/containers.sh, one private dockerd for both parts): the images built and
# run in Debian's docker.io against a host relay, compose and the Kubernetes sidecar's settings;
# attach (issue 25) with images imported from this machine's binaries, one without sockferry
# for --inject (exit 77: skipped, dockerd cannot start here; it says why).
stage $SUDO tests/ci/containers.sh "$PWD/build-ci"

# One closing line for the whole run, counted from meson's test logs (the main, ASan, libuv 1.50
# and portable builds) and the stages above.
python3 - "$stages_passed" "$stages_skipped" build-ci build-asan build-libuv150 build-portable <<'PY'
import glob, json, sys
passed, skipped, failed = int(sys.argv[1]), int(sys.argv[2]), 0
for path in (p for d in sys.argv[3:] for p in sorted(glob.glob(d + "/meson-logs/*.json"))):
    with open(path) as f:
        for line in f:
            r = json.loads(line)["result"]
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed else 0)
PY
