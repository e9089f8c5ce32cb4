#!/bin/bash
# CI stage (issue 18): the Windows host side without Windows.
#   1. packaging/windows/build.sh builds sockferry.exe (it checks: PE32+ x86-64, only DLLs that
#      Windows ships imported, so libuv, libsodium and inih are linked in);
#   2. tests/windows/npipe-service.c is built with the same compiler (a test program, not shipped);
#   3. in a throw-away Wine prefix (Debian's wine64), the ground the end-to-end tests stand on:
#      a named-pipe echo service and a Windows-side client (one at a time, four at once, 1 MiB);
#      a client waiting on a busy pipe (ERROR_PIPE_BUSY) until the single instance is free;
#      TCP on 127.0.0.1 both ways between a Wine process and Linux (socat); AF_UNIX refused
#      (WSAEAFNOSUPPORT: Wine has none, so unix sockets on Windows are compile-only here); a
#      process's handle count readable, and unchanged after 50 connections to the echo service;
#   4. tests/windows/tokenfile.sh (the token file's owner and DACL checks) and
#      tests/windows/test_wine.py: sockferry.exe under Wine end to end (its environment: SF_EXE,
#      SF_WINE, WINEPREFIX, SF_NPIPE_SERVICE, SOCKFERRY).
# Usage: tests/ci/windows.sh [LINUX_BUILD_DIR]  (default build-ci: the Linux sockferry the
# end-to-end tests talk to; SF_WINDOWS_OUT=DIR keeps the sockferry.exe it tested there, for
# packaging/release.sh). Exit 0 passed, 77 skipped (the reason is printed), 1 failed
# (tests/lib/stage.sh); one closing line "windows-wine: PASS|SKIP|FAIL ...".
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$root/tests/lib/stage.sh" windows-wine
linux_build=$(cd "${1:-$root/build-ci}" 2>/dev/null && pwd || echo "${1:-$root/build-ci}")
wine=/usr/lib/wine/wine64
wineserver=/usr/lib/wine/wineserver # not on PATH in Debian's wine64
tmp=$(mktemp -d /tmp/sockferry-wine.XXXXXX)
export WINEPREFIX=$tmp/prefix WINEDEBUG=-all
# No Mono or Gecko installer at prefix creation (nothing here runs .NET or HTML), and no menu
# entries or file associations written to $HOME (winemenubuilder).
export WINEDLLOVERRIDES="mscoree,mshtml=,winemenubuilder.exe=d"
unset DISPLAY WAYLAND_DISPLAY
pids=()
cleanup 'rm -rf "$tmp"'
# -w: the server writes the prefix's registry files as it exits, after -k returned
cleanup 'if [ -x "$wineserver" ] && [ -d "$WINEPREFIX" ]; then "$wineserver" -k 2>/dev/null; timeout 30 "$wineserver" -w; fi; true'
cleanup 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done'
elapsed() { echo $(($(date +%s%N) / 1000000 - $1)); }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

if [ ! -x "$wine" ]; then
        [ "$(id -u)" = 0 ] || skip "$wine is missing and installing wine64 needs root (packaging/install-deps.sh installs it)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wine64 >/dev/null ||
                fail "apt-get install wine64"
fi

# ---- 1. sockferry.exe ---------------------------------------------------------------------
t0=$(now_ms)
win_out=${SF_WINDOWS_OUT:-$tmp/out}
"$root/packaging/windows/build.sh" --source "$root" "$win_out" || fail "packaging/windows/build.sh exited $? (its output is above)"
build_ms=$(elapsed "$t0")
exe=$win_out/sockferry.exe

# ---- 2. the test program ------------------------------------------------------------------------
cache=${SF_WINDOWS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sockferry-windows}
export ZIG_GLOBAL_CACHE_DIR=$cache/zig-cache ZIG_LOCAL_CACHE_DIR=$cache/zig-cache
svc=$tmp/test/npipe-service.exe
mkdir -p "$tmp/test"
"$cache/bin/x86_64-w64-mingw32-cc" -std=c11 -O2 -Wall -Wextra -Werror -o "$svc" \
        "$root/tests/windows/npipe-service.c" -lws2_32 >"$tmp/test/cc.log" 2>&1 ||
        { cat "$tmp/test/cc.log"; fail "tests/windows/npipe-service.c does not build"; }

# ---- 3. Wine ------------------------------------------------------------------------------
t0=$(now_ms)
"$wine" wineboot --init >"$tmp/wineboot.log" 2>&1 || { cat "$tmp/wineboot.log"; fail "wineboot --init"; }
boot_ms=$(elapsed "$t0")
say "wine: $("$wine" --version 2>/dev/null), prefix created in ${boot_ms} ms"

# start NAME ARGS...: a Wine process in the background, its output in $tmp/NAME.out; waits for
# its "ready" line.
start() {
        local name=$1 i
        shift
        "$wine" "$@" >"$tmp/$name.out" 2>&1 &
        pids+=($!)
        for ((i = 0; i < 200; i++)); do
                grep -qsx ready "$tmp/$name.out" && return 0
                kill -0 "${pids[-1]}" 2>/dev/null || break
                sleep 0.1
        done
        cat "$tmp/$name.out"
        fail "$name ($*) did not print ready"
}

# talk WHAT INPUT ARGS...: a Windows-side client (npipe-service ARGS) sends the file INPUT and
# must get it back; otherwise fails naming WHAT, the client's exit status and its message.
talk() {
        local what=$1 in=$2 rc=0
        shift 2
        "$wine" "$svc" "$@" <"$in" >"$tmp/talk.out" 2>"$tmp/talk.err" || rc=$?
        ((rc == 0)) || fail "$what: npipe-service $* exited $rc: $(tr -d '\r' <"$tmp/talk.err")"
        cmp -s "$tmp/talk.out" "$in" ||
                fail "$what: $(stat -c %s "$tmp/talk.out") bytes came back, not the $(stat -c %s "$in") sent"
}
# msg TEXT: a file holding the line TEXT (a word), one per text, for talk.
msg() { printf '%s\n' "$1" >"$tmp/msg.$1" && echo "$tmp/msg.$1"; }

head -c 1048576 /dev/urandom >"$tmp/mib"
pipe=sockferry-ci-$$
start echo "$svc" echo "$pipe" --instances 4
talk "named pipe: echo through \\\\.\\pipe\\$pipe" "$(msg hello)" client "$pipe"
talk "named pipe: 1 MiB" "$tmp/mib" client "$pipe"
para=()
for i in 1 2 3 4; do
        "$wine" "$svc" client "$pipe" <"$tmp/mib" >"$tmp/para.$i" 2>"$tmp/para.$i.err" &
        para+=($!)
done
for i in 1 2 3 4; do
        wait "${para[i - 1]}" || fail "named pipe: client $i of 4 at once exited $?: $(tr -d '\r' <"$tmp/para.$i.err")"
        cmp -s "$tmp/para.$i" "$tmp/mib" || fail "named pipe: client $i of 4 at once got a different reply"
done

# Handle counts: Wine answers GetProcessHandleCount with 0; npipe-service reads the count from
# the system handle table (NtQuerySystemInformation) then.
handles() { "$wine" "$svc" handles "$1" | awk -v p="$1" '{n++; c = $2; s = $3 " " $4 " " $5} END {
        if (n == 1) print c, s; else { print "npipe-service handles " p ": " n " processes" > "/dev/stderr"; exit 1 } }'; }
before=$(handles npipe-service.exe) || fail "handle count of the echo service"
source=${before#* }
before=${before%% *}
for i in $(seq 50); do
        talk "named pipe: sequential client $i" "$(msg "$i")" client "$pipe"
done
after=$(handles npipe-service.exe) || fail "handle count of the echo service"
after=${after%% *}
((before > 0)) || fail "handle count of the echo service read as $before"
((after == before)) || fail "the echo service holds $after handles after 50 connections, $before before"
say "named pipes: echo, 4 clients at once, 1 MiB; the echo service holds $before handles ($source) before and after 50 connections"

busy=sockferry-busy-$$
start hold "$svc" hold "$busy" 2
"$wine" "$svc" client "$busy" <"$(msg first)" >"$tmp/first.out" 2>&1 &
pids+=($!)
for ((i = 0; i < 100; i++)); do
        grep -q holding "$tmp/hold.out" && break
        sleep 0.1
done
grep -q holding "$tmp/hold.out" || fail "busy pipe: the first client did not connect"
t0=$(now_ms)
talk "busy pipe: the waiting client" "$(msg second)" client "$busy"
waited=$(elapsed "$t0")
wait "${pids[-1]}"
[ "$(cat "$tmp/first.out")" = first ] || fail "busy pipe: the held client got no echo: $(cat "$tmp/first.out")"
((waited >= 1000)) || fail "busy pipe: the second client was answered after $waited ms, while the only instance was held"
say "busy pipe: the second client waited ${waited} ms (ERROR_PIPE_BUSY, WaitNamedPipe) and was served"

port=$(free_port)
start tcp-echo "$svc" tcp-echo "$port"
[ "$(echo from-linux | socat -t 5 - "TCP:127.0.0.1:$port")" = from-linux ] || fail "TCP: socat to a Wine listener on 127.0.0.1:$port"
lport=$(free_port)
socat "TCP-LISTEN:$lport,bind=127.0.0.1,reuseaddr,fork" PIPE &
pids+=($!)
for ((i = 0; i < 50; i++)); do
        socat -u /dev/null "TCP:127.0.0.1:$lport" 2>/dev/null && break
        sleep 0.1
done
talk "TCP: a Wine client to socat on 127.0.0.1:$lport" "$(msg from-wine)" tcp-client "$lport"
say "TCP: Linux client to a Wine listener and Wine client to a Linux listener on 127.0.0.1"

afunix=$("$wine" "$svc" afunix)
rc=$?
echo "$afunix"
[ "$rc" = 2 ] && grep -q WSAEAFNOSUPPORT <<<"$afunix" ||
        fail "AF_UNIX: expected WSAEAFNOSUPPORT from Wine, got exit $rc: $afunix (if Wine gained AF_UNIX, the unix-socket tests can run here)"

# ---- 4. sockferry.exe end to end ----------------------------------------------------------------
# The token file's checks (relay/link/tokenfile_win.c) in a harness of their own and through
# sockferry.exe, then the relay end to end. Network namespaces and 198.18.x.x addresses: one
# end-to-end suite at a time on this machine.
WIN_CC="$cache/bin/x86_64-w64-mingw32-cc" SF_EXE="$exe" "$root/tests/windows/tokenfile.sh" ||
        fail "tests/windows/tokenfile.sh exited $? (its TAP is above)"
linux_exe=$linux_build/shim/sockferry
[ -x "$linux_exe" ] || fail "$linux_exe missing: build the Linux tree first (tests/ci.sh builds build-ci)"
SF_WINE="$wine" SF_EXE="$exe" SF_NPIPE_SERVICE="$svc" SOCKFERRY="$linux_exe" \
        flock /tmp/sf-e2e.lock python3 "$root/tests/windows/test_wine.py" || fail "tests/windows/test_wine.py (its TAP is above)"

say "sockferry.exe built in $((build_ms / 1000)) s, Wine prefix in ${boot_ms} ms;" \
        "named pipes, busy-pipe wait, TCP both ways, handle counts; AF_UNIX refused; token files; sockferry.exe end to end"
