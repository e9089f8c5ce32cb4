#!/usr/bin/env python3
"""The host's service for tests/ci/containers-images.sh: HTTP on a unix socket, answering
"host service: <path>" so a client in a container can tell which request reached it.
/slow... answers after 2 s and says on stderr when such a request starts (a drain test)."""
import http.server
import os
import socketserver
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/slow"):
            sys.stderr.write("host-service: started %s\n" % self.path)
            sys.stderr.flush()
            time.sleep(2)
        body = ("host service: %s\n" % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self):
        return "unix"

    def log_message(self, fmt, *args):
        sys.stderr.write("host-service: " + fmt % args + "\n")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


path = sys.argv[1]
if os.path.exists(path):
    os.unlink(path)
with Server(path, Handler) as srv:
    srv.serve_forever()
