#!/bin/bash
# The static binaries (packaging/linux/build-static.sh) each in an empty chroot that holds only
# the binary, /etc/hosts and /tmp: --version, then one real forward whose connect endpoint is a
# name that only /etc/hosts knows (host.docker.internal), to a server outside the chroot (the
# chroot shares the network namespace). A binary of another architecture runs under Debian's
# qemu-ARCH-static, copied into the chroot with it (a static emulator: it needs nothing else
# there); without that emulator it is a failure, not a skip: the release ships it.
# Needs root (chroot), python3 and curl.
# Usage: tests/ci/static-chroot.sh OUTDIR        (build-static.sh's OUTDIR: every
#        OUTDIR/linux-ARCH/sockferry)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" static-chroot
dir=$(realpath "${1:?usage: static-chroot.sh OUTDIR (of packaging/linux/build-static.sh)}")
version=$(meson introspect --projectinfo "$src/meson.build" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
bins=("$dir"/linux-*/sockferry)
[ -e "${bins[0]}" ] || fail "no $dir/linux-*/sockferry"

# The current chroot's processes and directories; safe to call twice.
pids=() root="" www=""
chroot_done() {
        local p
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
        wait 2>/dev/null
        pids=()
        [ -z "$root" ] || rm -rf "$root" "$root.relay.log"
        [ -z "$www" ] || rm -rf "$www"
        root="" www=""
}
cleanup chroot_done

# check_binary BIN: BIN (linux-ARCH/sockferry) in a chroot of its own.
check_binary() {
        local bin=$1 arch run how qemu v port got
        arch=$(basename "$(dirname "$bin")")
        arch=${arch#linux-}
        if readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
                fail "$bin has a program interpreter: not a static binary"
        fi
        if readelf -d "$bin" | grep -q NEEDED; then
                readelf -d "$bin" | grep NEEDED
                fail "$bin needs shared libraries (above)"
        fi
        say "$bin: static ($(readelf -h "$bin" | awk '/Type:/ {print $2}'), no interpreter, no NEEDED), $(stat -c %s "$bin") bytes"
        root=$(mktemp -d /tmp/sockferry-chroot.XXXXXX)
        mkdir -p "$root/etc" "$root/tmp"
        chmod 1777 "$root/tmp"
        cp "$bin" "$root/sockferry"
        printf '127.0.0.1\tlocalhost\n127.0.0.1\thost.docker.internal\n' >"$root/etc/hosts"
        run=(/sockferry)
        how=
        if [ "$arch" != "$(uname -m)" ]; then
                qemu=$(command -v "qemu-$arch-static") ||
                        fail "$bin is $arch: qemu-$arch-static is needed to run it (apt-get install qemu-user-static)"
                cp "$qemu" "$root/qemu"
                run=(/qemu /sockferry)
                how=" under $(basename "$qemu")"
                # qemu-user cannot install a seccomp filter for its guest: the relay would say so at
                # every start; the sandbox itself is tested natively.
                printf '[sockferry]\nseccomp = no\n' >"$root/etc/sockferry.conf"
        else
                printf '[sockferry]\n' >"$root/etc/sockferry.conf"
        fi

        v=$(chroot "$root" "${run[@]}" --version)
        [ "$v" = "sockferry $version" ] || fail "--version printed '$v'"
        say "chroot$how: $v"

        # A real HTTP server outside the chroot, on a free loopback port.
        www="$root.www"
        mkdir -p "$www"
        echo "served from outside the chroot" >"$www/index.html"
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        python3 -m http.server --bind 127.0.0.1 --directory "$www" "$port" >/dev/null 2>&1 &
        pids+=($!)

        # The relay in the chroot: unix socket inside, tcp:host.docker.internal (from /etc/hosts) out.
        chroot "$root" "${run[@]}" relay -c /etc/sockferry.conf -F "web:unix:/tmp/web.sock=tcp:host.docker.internal:$port" \
                2>"$root.relay.log" &
        pids+=($!)
        for _ in $(seq 100); do
                [ -S "$root/tmp/web.sock" ] && curl -s -o /dev/null "http://127.0.0.1:$port/" && break
                sleep 0.1
        done
        got=$(curl -sS --max-time 10 --unix-socket "$root/tmp/web.sock" http://sockferry/index.html) || true
        if [ "$got" != "served from outside the chroot" ]; then
                cat "$root.relay.log"
                fail "the forward did not work (the relay's log above)"
        fi
        if grep -qi 'error\|warn' "$root.relay.log"; then
                cat "$root.relay.log"
                fail "the relay logged errors or warnings (above)"
        fi
        say "$arch$how: forward unix:/tmp/web.sock -> tcp:host.docker.internal:$port (resolved from /etc/hosts in the chroot): OK"
        chroot_done
}
for bin in "${bins[@]}"; do
        check_binary "$bin"
done
