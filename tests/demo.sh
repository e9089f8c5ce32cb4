#!/bin/bash
# A self-contained demo of the real deployment: a unix-socket HTTP service on the "host",
# reached from a "container" through two sockferry relays over TCP with auth = token.
# Installs the dependencies and builds first. Run from anywhere; root (or sudo) for apt.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO packaging/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
SF=$PWD/build/shim/sockferry

demo=$(mktemp -d /tmp/sockferry-demo.XXXXXX)
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        wait 2>/dev/null || true
        rm -rf "$demo"
}
trap cleanup EXIT
mkdir -p "$demo/host" "$demo/container"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

echo "== 1. the host service: HTTP on the unix socket $demo/host/service.sock"
python3 - "$demo/host/service.sock" <<'PY' &
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def address_string(self): return "unix"
    def do_GET(self):
        body = b"hello from the host service, reached through sockferry\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(socketserver.UnixStreamServer): pass
S(sys.argv[1], H).serve_forever()
PY
pids+=($!)

echo "== 2. a shared token (sockferry keygen)"
"$SF" keygen -o "$demo/token"

echo "== 3. host relay: tcp:127.0.0.1:$port (auth = token) -> unix:$demo/host/service.sock"
"$SF" relay -F "host:tcp:127.0.0.1:$port=unix:$demo/host/service.sock,auth=token,token-file=$demo/token" &
pids+=($!)

echo "== 4. container relay: unix:$demo/container/service.sock -> tcp:127.0.0.1:$port (auth = token)"
"$SF" relay -F "cont:unix:$demo/container/service.sock=tcp:127.0.0.1:$port,auth=token,token-file=$demo/token" &
pids+=($!)

for _ in $(seq 100); do [ -S "$demo/container/service.sock" ] && [ -S "$demo/host/service.sock" ] && break; sleep 0.05; done
sleep 0.2
echo "== 5. an unmodified client in the container: curl --unix-socket $demo/container/service.sock"
curl -sS --max-time 10 --unix-socket "$demo/container/service.sock" http://localhost/
echo "== 6. a client with the wrong token is refused, and the log says why"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$demo/wrong"; echo >> "$demo/wrong"; chmod 600 "$demo/wrong"
"$SF" relay -F "bad:unix:$demo/container/bad.sock=tcp:127.0.0.1:$port,auth=token,token-file=$demo/wrong" &
pids+=($!)
for _ in $(seq 100); do [ -S "$demo/container/bad.sock" ] && break; sleep 0.05; done
curl -sS --max-time 10 --unix-socket "$demo/container/bad.sock" http://localhost/ || true
sleep 0.2
echo "== done"
