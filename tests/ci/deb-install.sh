#!/bin/bash
# Builds the .deb (packaging/build-deb.sh, lintian errors fail), installs it, checks the
# installed files, runs `sockferry --version` and one real forward with the installed
# binary, runs the static binaries for `attach --inject` (aarch64 under qemu-aarch64-static),
# verifies the installed systemd units, then removes the package again.
# Needs root, dpkg-dev, debhelper, fakeroot, lintian, python3, curl, qemu-user-static.
# Usage: tests/ci/deb-install.sh [OUTDIR]      (default: ./build-deb; SF_STATIC_DIR: the
#        static binaries to package, packaging/linux/build-static.sh's OUTDIR; else built)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$(realpath -m "${1:-$src/build-deb}")
step() { printf 'deb: %s\n' "$*"; }

if dpkg-query -W -f='${Status}' sockferry 2>/dev/null | grep -q "install ok installed"; then
        echo "deb: a sockferry package is installed already; not touching it" >&2
        exit 1
fi
DEB_BUILD_OPTIONS=nocheck "$src/packaging/build-deb.sh" "$out"
deb=$(ls "$out"/sockferry_*.deb | head -n 1)

tmp=$(mktemp -d /tmp/sockferry-deb-test.XXXXXX)
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        wait 2>/dev/null || true
        rm -rf "$tmp"
        dpkg -P sockferry >/dev/null 2>&1 || true
}
trap cleanup EXIT

# dpkg leaves the mode of a directory that exists already alone.
etc_before=0
[ -e /etc/sockferry ] && etc_before=1
dpkg -i "$deb" >/dev/null
step "installed $(dpkg-query -W -f='${Package} ${Version}' sockferry)"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for f in /usr/bin/sockferry "/usr/lib/$multiarch/sockferry/sockferry-preload.so" \
        /usr/share/man/man1/sockferry.1.gz /usr/share/man/man5/sockferry.conf.5.gz \
        /usr/share/man/man8/sockferry-preload.8.gz /usr/share/bash-completion/completions/sockferry \
        /usr/share/zsh/vendor-completions/_sockferry /usr/share/fish/vendor_completions.d/sockferry.fish \
        /usr/libexec/sockferry/linux-x86_64/sockferry /usr/libexec/sockferry/linux-aarch64/sockferry \
        /lib/systemd/system/sockferry@.socket /lib/systemd/system/sockferry@.service \
        /usr/share/doc/sockferry/examples/sockferry.conf.example; do
        [ -e "$f" ] || { echo "deb: $f is not installed" >&2; exit 1; }
done
if [ $etc_before = 0 ]; then
        mode=$(stat -c '%a %U' /etc/sockferry)
        [ "$mode" = "700 root" ] || { echo "deb: /etc/sockferry is '$mode', expected mode 700 owned by root" >&2; exit 1; }
        step "/etc/sockferry: mode 700, root's"
fi
v=$(sockferry --version)
[ "$v" = "sockferry $(dpkg-query -W -f='${Version}' sockferry)" ] || { echo "deb: --version says '$v'" >&2; exit 1; }
step "$(command -v sockferry): $v"
# The binaries for attach --inject: static, of their architecture, and they run.
for arch in x86_64 aarch64; do
        bin=/usr/libexec/sockferry/linux-$arch/sockferry
        run=("$bin")
        [ "$arch" = "$(uname -m)" ] || run=("qemu-$arch-static" "$bin")
        command -v "${run[0]}" >/dev/null || { echo "deb: ${run[0]} is needed to run $bin (apt-get install qemu-user-static)" >&2; exit 1; }
        got=$("${run[@]}" --version)
        [ "$got" = "$v" ] || { echo "deb: ${run[*]} --version says '$got'" >&2; exit 1; }
        file -b "$bin" | grep -q "static-pie linked" || { echo "deb: $bin: $(file -b "$bin")" >&2; exit 1; }
        step "$bin: static, ${run[*]} --version: $got"
done

# One forward through the installed binary: unix socket -> TCP, a real server and client.
mkdir -p "$tmp/www"
echo "hello through the installed sockferry" >"$tmp/www/index.html"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$tmp/www" "$port" >/dev/null 2>&1 &
pids+=($!)
/usr/bin/sockferry relay -q -F "web:unix:$tmp/web.sock=tcp:127.0.0.1:$port" 2>"$tmp/relay.log" &
pids+=($!)
for _ in $(seq 100); do
        [ -S "$tmp/web.sock" ] && curl -s -o /dev/null "http://127.0.0.1:$port/" && break
        sleep 0.1
done
got=$(curl -sS --max-time 10 --unix-socket "$tmp/web.sock" http://sockferry/index.html) || true
[ "$got" = "hello through the installed sockferry" ] || { echo "deb: forward failed:" >&2; cat "$tmp/relay.log" >&2; exit 1; }
step "forward unix -> tcp with /usr/bin/sockferry: OK"

# The installed units, with the binary now at its real path.
mkdir -p /etc/sockferry
created_etc=0
[ -e /etc/sockferry/debtest.conf ] || { printf '[debtest]\nlisten = systemd:debtest\nconnect = unix:/run/x.sock\n' >/etc/sockferry/debtest.conf; created_etc=1; }
if out=$(systemd-analyze verify --man=no sockferry@debtest.socket sockferry@debtest.service 2>&1) && [ -z "$out" ]; then
        step "systemd-analyze verify of the installed units: OK"
else
        echo "$out" >&2
        echo "deb: systemd-analyze verify complains about the installed units" >&2
        [ $created_etc = 1 ] && rm -f /etc/sockferry/debtest.conf && rmdir --ignore-fail-on-non-empty /etc/sockferry
        exit 1
fi
[ $created_etc = 1 ] && rm -f /etc/sockferry/debtest.conf && rmdir --ignore-fail-on-non-empty /etc/sockferry

for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
dpkg -r sockferry >/dev/null
dpkg -P sockferry >/dev/null 2>&1 || true
[ ! -e /usr/bin/sockferry ] || { echo "deb: /usr/bin/sockferry is still there after dpkg -r" >&2; exit 1; }
step "removed again"
