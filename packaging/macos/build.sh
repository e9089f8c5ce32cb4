#!/bin/bash
# Cross-builds the macOS host side on Linux: OUTDIR/sockferry-x86_64 and OUTDIR/sockferry-arm64,
# Mach-O executables linked statically against libuv, libsodium and inih built for the target,
# and OUTDIR/sockferry-universal, the two joined into one file by LLVM's lipo (Debian's llvm).
#
#   packaging/macos/build.sh [--source DIR] OUTDIR
#
# --source: the sockferry tree to build (default: the one holding this script).
# Environment: SF_MACOS_CACHE (default ~/.cache/sockferry-macos) keeps the builds of the
# dependencies and sockferry, and SF_CROSS_CACHE (default ~/.cache/sockferry-cross) the toolchain
# and the dependency sources both cross-builds use, so a second run rebuilds only sockferry;
# SF_MACOS_JOBS (default: nproc); SF_MACOS_SOURCES=DIR, files to use before downloading.
#
# Toolchain and dependency sources: packaging/cross/common.sh (zig 0.11 from npm, Debian's
# source packages). `zig cc -target ARCH-macos.11.0` carries the macOS libc headers and
# libSystem stubs and links Mach-O: no Apple SDK is needed. macOS 11 is the deployment target,
# the first release that runs on arm64.
set -euo pipefail

cross_os=macos cross_env=SF_MACOS
cross_targets=(x86_64 aarch64)
# llvm-lipo: Debian's llvm package has it versioned only (llvm-lipo-14).
lipo=$(command -v llvm-lipo || command -v llvm-lipo-14 || echo llvm-lipo)
cross_tools=(llvm-nm "$lipo")
# meson knows a Mach-O linker by ld64's answers (an unknown --version, then a PROJECT:ld line
# for -v) and then passes it ld64's options, which zig's linker takes; zig answers "zig ld
# 0.11.0" instead, which meson 1.0 rejects, so the wrapper answers for it.
cross_cc_case='-Wl,--version) echo "ld: unknown option: --version" >&2; exit 1 ;;
-Wl,-v) echo "@(#)PROGRAM:ld  PROJECT:ld-0.11.0 (zig ld)" >&2; exit 0 ;;'
cross_triplet_vendor_os=-apple-darwin cross_zig_os=macos.11.0 cross_system=darwin
# Darwin architecture names (file(1), lipo, Homebrew) by zig's target names.
declare -A cross_cpu=([x86_64]=x86_64 [aarch64]=arm64)
source "$(dirname "${BASH_SOURCE[0]}")/../cross/common.sh"

# libuv: the file list and defines of its CMakeLists.txt for APPLE. zig's macOS headers lack
# <paths.h> (used by process.c, core.c, fs.c); the values are macOS's own.
uv_sources=(src/fs-poll.c src/idna.c src/inet.c src/random.c src/strscpy.c src/strtok.c src/threadpool.c
        src/timer.c src/uv-common.c src/uv-data-getter-setters.c src/version.c
        src/unix/async.c src/unix/core.c src/unix/dl.c src/unix/fs.c src/unix/getaddrinfo.c
        src/unix/getnameinfo.c src/unix/loop-watcher.c src/unix/loop.c src/unix/pipe.c
        src/unix/poll.c src/unix/process.c src/unix/random-devurandom.c src/unix/signal.c
        src/unix/stream.c src/unix/tcp.c src/unix/thread.c src/unix/tty.c src/unix/udp.c
        src/unix/proctitle.c src/unix/bsd-ifaddrs.c src/unix/kqueue.c src/unix/random-getentropy.c
        src/unix/darwin-proctitle.c src/unix/darwin.c src/unix/fsevents.c)
uv_cflags=(-D_DARWIN_UNLIMITED_SELECT=1 -D_DARWIN_USE_64_BIT_INODE=1 -D_FILE_OFFSET_BITS=64
        -D_LARGEFILE_SOURCE -I"$cache/stub")
uv_libs=
mkdir -p "$cache/stub"
cat >"$cache/stub/paths.h" <<'EOF'
#pragma once
#define _PATH_BSHELL "/bin/sh"
#define _PATH_DEVNULL "/dev/null"
#define _PATH_TMP "/tmp/"
#define _PATH_DEFPATH "/usr/bin:/bin:/usr/sbin:/sbin"
EOF

cross_toolchain
cross_sources
cross_build_all

# ---- checks and output ----------------------------------------------------------------------
# file(1) says Mach-O and the architecture; NOUNDEFS is set only when every undefined symbol
# is bound to a library the executable loads (no -undefined dynamic_lookup). llvm-nm lists
# them with the library each is bound to (an unbound one fails the build) and shows that the
# three dependencies were linked in.
for t in "${cross_targets[@]}"; do
        a=${cross_cpu[$t]}
        exe=$(cross_exe "$t")
        desc=$(file -b "$exe")
        case $desc in
        "Mach-O 64-bit $a executable"*NOUNDEFS*) ;;
        *) echo "$0: $exe is not a Mach-O $a executable without unbound symbols: $desc" >&2; exit 1 ;;
        esac
        undefined=$(llvm-nm -m -u "$exe")
        unbound=$(grep -v ' (from ' <<<"$undefined" || true)
        [ -z "$unbound" ] || { echo "$0: $exe: undefined symbols bound to no library:" >&2; echo "$unbound" >&2; exit 1; }
        defined=$(llvm-nm -m --defined-only "$exe")
        for sym in _uv_run _sodium_init _crypto_auth_hmacsha256_final _ini_parse_stream; do
                grep -q " $sym\$" <<<"$defined" || {
                        echo "$0: $exe: $sym not linked in statically" >&2; exit 1; }
        done
        cp "$exe" "$out/sockferry-$a.new"
        mv "$out/sockferry-$a.new" "$out/sockferry-$a"
        say "$out/sockferry-$a: $desc"
done

# The universal file: both slices byte for byte (so the arm64 one keeps its signature), each at
# the alignment its architecture's pages need (lipo: 2^12 for x86_64, 2^14 for arm64).
"$lipo" -create "$out/sockferry-x86_64" "$out/sockferry-arm64" -output "$out/sockferry-universal.new"
"$lipo" "$out/sockferry-universal.new" -verify_arch x86_64 arm64
for a in x86_64 arm64; do
        "$lipo" "$out/sockferry-universal.new" -thin "$a" -output "$out/sockferry-universal.$a"
        cmp -s "$out/sockferry-universal.$a" "$out/sockferry-$a" || {
                echo "$0: the $a slice of the universal file differs from sockferry-$a" >&2; exit 1; }
        rm -f "$out/sockferry-universal.$a"
done
mv "$out/sockferry-universal.new" "$out/sockferry-universal"
say "$out/sockferry-universal: $(file -b "$out/sockferry-universal" | sed 's/\\012- //g')"
