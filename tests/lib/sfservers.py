#!/usr/bin/env python3
"""The test servers every test uses: one program, one process per server (sfharness.Server
starts it; tests/containers/host_service.py is the http one for the container stages).

    sfservers.py MODE WHERE [TAG]

WHERE: a unix path (or unix:PATH), @NAME (an abstract socket), tcp:HOST:PORT, tcp:[V6]:PORT
or vsock:CID:PORT (CID any or a number); port 0 takes a free one. Once it listens it prints
"listening ENDPOINT", ENDPOINT being what a client (sockferry's connect) names it by, the port
it got included. One thread per connection. MODE:

  echo         sends back what it reads; half-closes at the client's end
  tagged TAG   answers every line with TAG:LINE (and the piece of a line a read ends with,
               for clients that send no newline); half-closes at the client's end
  http TAG     HTTP/1.0: answers every request with 200 and the body "TAG: PATH\\n"; a path
               that starts with /slow is answered after 2 s and said on stderr when it starts
               ("started PATH", a drain test waits for it); with LOG_REQUESTS every request is
               logged on stderr (tests/containers/host_service.py)
  sink         reads everything, answers nothing
  banner       greets with an SSH server's banner line, then reads everything
  after-eof    a request/response server: answers "SIZE SHA256\\n" of what it read, at its end
  sink-source  the first 8 bytes say how many pseudo-random bytes to send back (seeded by the
               next 8) while it reads the rest; at the end it answers the SHA-256 of what it read
  late         answers one read with "late:" and it 1.5 s later, then closes (a slow service
               behind a pipe)
  source       sends pseudo-random bytes for as long as the client takes them (a download, a
               log follower); reads nothing
  blackhole    accepts and never reads: an upload that never drains

Only the standard library: the tests must run on a fresh Debian machine."""

import hashlib
import os
import random
import socket
import sys
import threading
import time

# http: log every request on stderr (a program that imports this module sets it).
LOG_REQUESTS = False
MODES = ("echo", "tagged", "http", "sink", "banner", "after-eof", "sink-source", "late", "source", "blackhole")
BANNER = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"


def without_malloc_perturb():
    """Starts this Python process again without glibc's MALLOC_PERTURB_, and gives it back to
    what the process starts. meson test sets it (a random byte) so that the C under test has
    the memory it mallocs and frees filled, and a read of memory not yet written or already
    freed shows. Python pays it on every buffer: each recv(1 MiB) fills 1 MiB at the malloc and
    1 MiB at the free, whatever came in; the 1 000-connection echo of test_relay.py took 9.6 s
    instead of 0.7. glibc reads the variable once, at the start, so it takes a new start. The
    relays, the clients a test runs and the programs a preload test loads into are C, and are
    started with it as meson chose it (SF_MALLOC_PERTURB holds it across the new start)."""
    held = os.environ.pop("SF_MALLOC_PERTURB", None)
    if held is not None:
        os.environ["MALLOC_PERTURB_"] = held
        return
    perturb = os.environ.get("MALLOC_PERTURB_", "")
    if perturb in ("", "0"):
        return
    os.environ["SF_MALLOC_PERTURB"] = perturb
    os.environ["MALLOC_PERTURB_"] = "0"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable] + sys.orig_argv[1:])


def listen(where):
    """A listening socket at where; returns (socket, the endpoint that reaches it)."""
    if where.startswith("tcp:"):
        host, port = where[4:].rsplit(":", 1)
        v6 = host.startswith("[")
        ls = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host.strip("[]"), int(port)))
        endpoint = "tcp:%s:%d" % (host, ls.getsockname()[1])
    elif where.startswith("vsock:"):
        cid, port = where[6:].rsplit(":", 1)
        ls = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        ls.bind((socket.VMADDR_CID_ANY if cid == "any" else int(cid),
                 int(port) or socket.VMADDR_PORT_ANY))
        # CID 1 is this machine (vsock_loopback)
        endpoint = "vsock:1:%d" % ls.getsockname()[1]
    else:
        path = where[5:] if where.startswith("unix:") else where
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ls.bind("\0" + path[1:] if path.startswith("@") else path)
        endpoint = "unix:" + path
    ls.listen(4096)
    return ls, endpoint


def answer_pieces(c, tag):
    """tagged: TAG:LINE for every line, and for the piece of one a read ended with."""
    prefix = tag.encode() + b":"
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b"".join(prefix + piece for piece in b.splitlines(keepends=True)))
    c.shutdown(socket.SHUT_WR)


def http_handler():
    """http's request handler (http.server, imported by the servers of that mode alone: it
    takes a tenth of a second)."""
    import http.server

    class Http(http.server.BaseHTTPRequestHandler):
        """One connection's requests (HTTP/1.0: one)."""

        def do_GET(self):
            if self.path.startswith("/slow"):
                sys.stderr.write("http: started %s\n" % self.path)
                sys.stderr.flush()
                time.sleep(2)
            body = ("%s: %s\n" % (self.server.tag, self.path)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_HEAD = do_GET

        def address_string(self):
            # a unix or vsock peer has no address tuple
            return "client"

        def log_message(self, fmt, *args):
            if LOG_REQUESTS:
                sys.stderr.write("http: " + fmt % args + "\n")
                sys.stderr.flush()
    return Http


class HttpServer:
    """What http.server's handler asks of its server: the tag to answer with."""

    def __init__(self, tag):
        self.tag = tag
        self.handler = http_handler()


def sink_source(c):
    want = int.from_bytes(c.recv(8, socket.MSG_WAITALL), "big")
    rnd = random.Random(c.recv(8, socket.MSG_WAITALL))
    h = hashlib.sha256()
    sent = [0]

    def writer():
        while sent[0] < want:
            chunk = rnd.randbytes(min(1 << 20, want - sent[0]))
            c.sendall(chunk)
            sent[0] += len(chunk)
    t = threading.Thread(target=writer)
    t.start()
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        h.update(b)
    t.join()
    c.sendall(h.digest())
    c.shutdown(socket.SHUT_WR)


def pump(src, dst):
    """Copies what src sends to dst until src's end, then ends dst's sending side: an echo is
    pump(c, c), a proxy one pump each way."""
    while True:
        b = src.recv(1 << 20)
        if not b:
            break
        dst.sendall(b)
    dst.shutdown(socket.SHUT_WR)


def serve(c, mode, tag):
    """One connection in mode; tag is the TAG (tagged), or the HttpServer (http)."""
    try:
        if mode == "echo":
            pump(c, c)
        elif mode == "tagged":
            answer_pieces(c, tag)
        elif mode == "http":
            tag.handler(c, ("client", 0), tag)
        elif mode == "after-eof":
            h, n = hashlib.sha256(), 0
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                h.update(b)
                n += len(b)
            c.sendall(("%d %s\n" % (n, h.hexdigest())).encode())
            c.shutdown(socket.SHUT_WR)
        elif mode == "sink-source":
            sink_source(c)
        elif mode == "late":
            # longer than libuv's 50 ms guess at the end of a named pipe
            b = c.recv(65536)
            time.sleep(1.5)
            c.sendall(b"late:" + b)
            c.shutdown(socket.SHUT_WR)
        elif mode == "source":
            chunk = random.Random(1).randbytes(1 << 16)
            while True:
                c.sendall(chunk)
        elif mode == "blackhole":
            threading.Event().wait()
        else:
            if mode == "banner":
                c.sendall(BANNER)
            while c.recv(65536):
                pass
    except OSError:
        pass  # a client gone mid-test: its own test says what it expected
    finally:
        c.close()


def main():
    without_malloc_perturb()
    mode, where = sys.argv[1], sys.argv[2]
    tag = sys.argv[3] if len(sys.argv) > 3 else mode
    if mode not in MODES:
        sys.exit("sfservers.py: unknown mode %r (one of %s)" % (mode, ", ".join(MODES)))
    if mode == "http":
        tag = HttpServer(tag)
    ls, endpoint = listen(where)
    print("listening " + endpoint, flush=True)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c, mode, tag), daemon=True).start()


if __name__ == "__main__":
    main()
