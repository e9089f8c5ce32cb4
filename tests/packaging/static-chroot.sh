#!/bin/bash
# The static binary (-Dstatic=true) in an empty chroot that holds only the binary, /etc/hosts
# and /tmp: --version, then one real forward whose connect endpoint is a name that only
# /etc/hosts knows (host.docker.internal), to a server outside the chroot (the chroot shares
# the network namespace). Needs root (chroot), python3 and curl.
# Usage: tests/packaging/static-chroot.sh [BUILDDIR]     (default: ./build-static)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath -m "${1:-$src/build-static}")
step() { printf 'static-chroot: %s\n' "$*"; }

if [ ! -f "$build/build.ninja" ]; then
        meson setup "$build" "$src" -Dstatic=true -Dwerror=true -Dbuildtype=release >/dev/null
fi
ninja -C "$build" shim/sockferry >/dev/null
bin="$build/shim/sockferry"
if readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
        echo "static-chroot: $bin has a program interpreter: not a static binary" >&2
        exit 1
fi
if readelf -d "$bin" | grep -q NEEDED; then
        echo "static-chroot: $bin needs shared libraries:" >&2
        readelf -d "$bin" | grep NEEDED >&2
        exit 1
fi
step "$bin: static ($(readelf -h "$bin" | awk '/Type:/ {print $2}'), no interpreter, no NEEDED), $(stat -c %s "$bin") bytes"

root=$(mktemp -d /tmp/sockferry-chroot.XXXXXX)
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        wait 2>/dev/null || true
        rm -rf "$root"
}
trap cleanup EXIT
mkdir -p "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$bin" "$root/sockferry"
printf '127.0.0.1\tlocalhost\n127.0.0.1\thost.docker.internal\n' >"$root/etc/hosts"

v=$(chroot "$root" /sockferry --version)
[ "$v" = "sockferry $(meson introspect --projectinfo "$build" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')" ] ||
        { echo "static-chroot: --version printed '$v'" >&2; exit 1; }
step "chroot: $v"

# A real HTTP server outside the chroot, on a free loopback port.
www="$root.www"
mkdir -p "$www"
trap 'cleanup; rm -rf "$www"' EXIT
echo "served from outside the chroot" >"$www/index.html"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$www" "$port" >/dev/null 2>&1 &
pids+=($!)

# The relay in the chroot: unix socket inside, tcp:host.docker.internal (from /etc/hosts) out.
chroot "$root" /sockferry relay -F "web:unix:/tmp/web.sock=tcp:host.docker.internal:$port" \
        2>"$root.relay.log" &
pids+=($!)
for _ in $(seq 100); do
        [ -S "$root/tmp/web.sock" ] && curl -s -o /dev/null "http://127.0.0.1:$port/" && break
        sleep 0.1
done
got=$(curl -sS --max-time 10 --unix-socket "$root/tmp/web.sock" http://sockferry/index.html) || true
if [ "$got" != "served from outside the chroot" ]; then
        echo "static-chroot: the forward did not work; relay log:" >&2
        cat "$root.relay.log" >&2
        rm -f "$root.relay.log"
        exit 1
fi
rm -f "$root.relay.log"
step "forward unix:/tmp/web.sock -> tcp:host.docker.internal:$port (resolved from /etc/hosts in the chroot): OK"
