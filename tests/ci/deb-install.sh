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
. "$src/tests/lib/stage.sh" deb
out=$(realpath -m "${1:-$src/build-deb}")

if dpkg-query -W -f='${Status}' sockferry 2>/dev/null | grep -q "install ok installed"; then
        fail "a sockferry package is installed already; not touching it"
fi
DEB_BUILD_OPTIONS=nocheck "$src/packaging/build-deb.sh" "$out"
deb=$(ls "$out"/sockferry_*.deb | head -n 1)

tmp=$(mktemp -d /tmp/sockferry-deb-test.XXXXXX)
pids=()
cleanup 'dpkg -P sockferry >/dev/null 2>&1'
cleanup 'rm -rf "$tmp"'
cleanup 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null'

# dpkg leaves the mode of a directory that exists already alone.
etc_before=0
[ -e /etc/sockferry ] && etc_before=1
dpkg -i "$deb" >/dev/null
say "installed $(dpkg-query -W -f='${Package} ${Version}' sockferry)"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for f in /usr/bin/sockferry "/usr/lib/$multiarch/sockferry/sockferry-preload.so" \
        /usr/share/man/man1/sockferry.1.gz /usr/share/man/man5/sockferry.conf.5.gz \
        /usr/share/man/man8/sockferry-preload.8.gz /usr/share/bash-completion/completions/sockferry \
        /usr/share/zsh/vendor-completions/_sockferry /usr/share/fish/vendor_completions.d/sockferry.fish \
        /usr/libexec/sockferry/linux-x86_64/sockferry /usr/libexec/sockferry/linux-aarch64/sockferry \
        /lib/systemd/system/sockferry@.socket /lib/systemd/system/sockferry@.service \
        /usr/share/doc/sockferry/examples/sockferry.conf.example; do
        [ -e "$f" ] || fail "$f is not installed"
done
if [ $etc_before = 0 ]; then
        mode=$(stat -c '%a %U' /etc/sockferry)
        [ "$mode" = "700 root" ] || fail "/etc/sockferry is '$mode', expected mode 700 owned by root"
        say "/etc/sockferry: mode 700, root's"
fi
v=$(sockferry --version)
[ "$v" = "sockferry $(dpkg-query -W -f='${Version}' sockferry)" ] || fail "--version says '$v'"
say "$(command -v sockferry): $v"
# The binaries for attach --inject: static, of their architecture, and they run.
for arch in x86_64 aarch64; do
        bin=/usr/libexec/sockferry/linux-$arch/sockferry
        run=("$bin")
        [ "$arch" = "$(uname -m)" ] || run=("qemu-$arch-static" "$bin")
        command -v "${run[0]}" >/dev/null || fail "${run[0]} is needed to run $bin (apt-get install qemu-user-static)"
        got=$("${run[@]}" --version)
        [ "$got" = "$v" ] || fail "${run[*]} --version says '$got'"
        file -b "$bin" | grep -q "static-pie linked" || fail "$bin: $(file -b "$bin")"
        say "$bin: static, ${run[*]} --version: $got"
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
[ "$got" = "hello through the installed sockferry" ] || { cat "$tmp/relay.log"; fail "forward failed (the relay's log above)"; }
say "forward unix -> tcp with /usr/bin/sockferry: OK"

# The installed units, with the binary now at its real path.
mkdir -p /etc/sockferry
made_conf=""
if [ ! -e /etc/sockferry/debtest.conf ]; then
        printf '[debtest]\nlisten = systemd:debtest\nconnect = unix:/run/x.sock\n' >/etc/sockferry/debtest.conf
        made_conf=1
fi
remove_conf() {
        [ -z "$made_conf" ] || { rm -f /etc/sockferry/debtest.conf; rmdir --ignore-fail-on-non-empty /etc/sockferry; }
        made_conf=""
}
cleanup remove_conf
out=$(systemd-analyze verify --man=no sockferry@debtest.socket sockferry@debtest.service 2>&1) && [ -z "$out" ] ||
        { echo "$out"; fail "systemd-analyze verify complains about the installed units (above)"; }
say "systemd-analyze verify of the installed units: OK"
remove_conf

for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
dpkg -r sockferry >/dev/null
dpkg -P sockferry >/dev/null 2>&1 || true
[ ! -e /usr/bin/sockferry ] || fail "/usr/bin/sockferry is still there after dpkg -r"
say "removed again"
