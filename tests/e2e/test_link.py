#!/usr/bin/env python3
"""The proof of the shared link (issue 24 item 6): services on one port and the multiplexed
sockferry/2 link between a container relay and a host relay, end to end.

The "container" is a network namespace joined to the host by a veth pair (addresses from this
program's /24 of 198.18.0.0/15: sfharness.Net; `ip netns exec` gives it an /etc/hosts where
host.docker.internal is the host end). The host relays listen on the host end. Faults come
from a TCP proxy of the test's own between the two relays (Proxy: resets, stalls, delays,
repeated drops), from signals to the host relay, and from restarting it. The interop test
builds the previous release's binary from its commit (tests/lib/build-prev-release.sh, cached
under the build directory), unless SF_PREV_SOCKFERRY names one built already.

Timing numbers (round trips during a bulk transfer) are printed as comments for the benchmark's
readers, never asserted."""

import contextlib
import hashlib
import json
import os
import queue
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import (Net, Scene, Session, Skip, accept_queue, closed_without_answer, connect,  # noqa: E402
                       echo_once, fds_back, fwd, keygen, need, recv_all, served, sessions, steady, token_relay,
                       transfer_both_ways, unread, wait_for, write_conf, ENGINE, SANITIZED, VALGRIND,
                       WAIT_SCALE)

NET = Net()
HOST_IP, CONT_IP = NET.host, NET.container
IN_NS = ["ip", "netns", "exec", NET.ns]
# The host relays' ports (on HOST_IP, this program's own address) and the proxies' (PROXY_BASE
# and up).
PORT, PORT_B = 7811, 7812
PROXY_BASE = 7830
MIB = 1 << 20
# Builds the previous release (before services and the shared link) once.
BUILD_PREV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib", "build-prev-release.sh")


# ---- pieces ---------------------------------------------------------------------------------

def host_relay(sc, d, sections, name="host.conf", **kw):
    """A host relay of the forwards in sections (INI text), its token d/token."""
    return token_relay(sc, d, sections, name, **kw)


def cont_relay(sc, d, sections, name="cont.conf", prefix=None, **kw):
    """A container relay (in the namespace) of the forwards in sections."""
    return token_relay(sc, d, sections, name, prefix=prefix or IN_NS, **kw)


def established(port):
    """The established TCP connections of this (the host's) namespace whose local end is
    HOST_IP:port: what the host sees of the container's relay."""
    out = subprocess.run(["ss", "-tnH", "state", "established", "( sport = :%d and src %s )" % (port, HOST_IP)],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def count(text, needle):
    return text.count(needle)


class Proxy:
    """A TCP proxy of the test's own between the container relay and the host relay, one
    thread with a selector: it listens on (HOST_IP, port) and connects each connection to
    target. reset() cuts every connection with RSTs both ways; stall(True) stops carrying bytes
    (the connections stay open and the bytes wait, as on a path that stalls); delay (seconds)
    holds each chunk that long each way; refuse(True) cuts new connections at once;
    drop_after (seconds) cuts each connection that long after the target's first bytes (the
    host's greeting: a link that went up, then drops, again and again). accepted and cuts count."""

    def __init__(self, port, target, delay=0.0, drop_after=None):
        self.target = target
        self.delay = delay
        self.drop_after = drop_after
        self.stalled = False
        self.refusing = False
        self.accepted = 0
        self.cuts = 0
        self.sel = selectors.DefaultSelector()
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((HOST_IP, port))
        self.ls.listen(128)
        self.ls.setblocking(False)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.sel.register(self.ls, selectors.EVENT_READ, None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.cmds = queue.Queue()
        self.pairs = []
        self.done = False
        self.error = None
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    # -- the test's side --

    def _call(self, fn):
        ev = threading.Event()
        self.cmds.put((fn, ev))
        self.wake_w.send(b"x")
        if not ev.wait(10):
            raise AssertionError("the proxy did not answer: %s" % self.error)

    def reset(self):
        self._call(lambda: [self._cut(p) for p in list(self.pairs)])

    def stall(self, on):
        def set_():
            self.stalled = on
            for p in self.pairs:
                self._interest(p)
        self._call(set_)

    def refuse(self, on):
        def set_():
            self.refusing = on
        self._call(set_)

    def open_pairs(self):
        n = []
        self._call(lambda: n.append(len(self.pairs)))
        return n[0]

    def close(self):
        if self.done:
            return
        self._call(lambda: [self._cut(p) for p in list(self.pairs)])
        self.done = True
        self.wake_w.send(b"x")
        self.t.join(10)
        self.ls.close()
        self.wake_r.close()
        self.wake_w.close()
        if self.error:
            raise AssertionError("the proxy failed: %s" % self.error)

    # -- the loop --

    class Pair:
        def __init__(self, a, b, born):
            self.socks = [a, b]
            self.born = born
            self.answered = None  # when the target's first bytes came
            self.out = [[], []]  # per socket: (due, bytes) chunks waiting to go to it
            self.eof = [False, False]  # read EOF from socket i
            self.shut = [False, False]  # shut down socket i's writing
            self.reg = [None, None]

    def _interest(self, p):
        for i in (0, 1):
            ev = 0
            if not self.stalled and not p.eof[i]:
                ev |= selectors.EVENT_READ
            if p.out[i] and p.out[i][0][0] <= time.monotonic():
                ev |= selectors.EVENT_WRITE
            if ev != p.reg[i]:
                if p.reg[i]:
                    self.sel.unregister(p.socks[i])
                if ev:
                    self.sel.register(p.socks[i], ev, (p, i))
                p.reg[i] = ev or None

    def _cut(self, p):
        if p not in self.pairs:
            return
        self.pairs.remove(p)
        self.cuts += 1
        for i in (0, 1):
            if p.reg[i]:
                self.sel.unregister(p.socks[i])
            with contextlib.suppress(OSError):
                p.socks[i].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            p.socks[i].close()

    def _end(self, p):
        """Both ways ended cleanly: close without a reset."""
        self.pairs.remove(p)
        for i in (0, 1):
            if p.reg[i]:
                self.sel.unregister(p.socks[i])
            p.socks[i].close()

    def _accept(self):
        try:
            a, _ = self.ls.accept()
        except BlockingIOError:
            return
        self.accepted += 1
        if self.refusing:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            a.close()
            return
        try:
            b = socket.create_connection(self.target, timeout=2)
        except OSError:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            a.close()
            return
        for s in (a, b):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        p = self.Pair(a, b, time.monotonic())
        self.pairs.append(p)
        self._interest(p)

    def _readable(self, p, i):
        try:
            data = p.socks[i].recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._cut(p)
            return
        other = 1 - i
        if i == 1 and data and p.answered is None:
            p.answered = time.monotonic()
        if not data:
            p.eof[i] = True
            p.out[other].append((time.monotonic() + self.delay, None))
        else:
            p.out[other].append((time.monotonic() + self.delay, data))
        self._interest(p)

    def _writable(self, p, i):
        now = time.monotonic()
        while p.out[i] and p.out[i][0][0] <= now:
            due, data = p.out[i][0]
            if data is None:
                with contextlib.suppress(OSError):
                    p.socks[i].shutdown(socket.SHUT_WR)
                p.shut[i] = True
                p.out[i].pop(0)
                continue
            try:
                n = p.socks[i].send(data)
            except BlockingIOError:
                break
            except OSError:
                self._cut(p)
                return
            if n < len(data):
                p.out[i][0] = (due, data[n:])
                break
            p.out[i].pop(0)
        if p.shut[0] and p.shut[1]:
            self._end(p)
            return
        self._interest(p)

    def _loop(self):
        try:
            while not self.done:
                now = time.monotonic()
                timeout = 0.05
                for p in self.pairs:
                    for i in (0, 1):
                        if p.out[i]:
                            timeout = min(timeout, max(0.0, p.out[i][0][0] - now))
                    if self.drop_after is not None and p.answered is not None:
                        timeout = min(timeout, max(0.0, p.answered + self.drop_after - now))
                for key, ev in self.sel.select(timeout):
                    if key.fileobj is self.ls:
                        self._accept()
                    elif key.fileobj is self.wake_r:
                        with contextlib.suppress(BlockingIOError):
                            self.wake_r.recv(4096)
                        while not self.cmds.empty():
                            fn, done = self.cmds.get()
                            fn()
                            done.set()
                    else:
                        p, i = key.data
                        if p not in self.pairs:
                            continue
                        if ev & selectors.EVENT_READ:
                            self._readable(p, i)
                        if p in self.pairs and ev & selectors.EVENT_WRITE:
                            self._writable(p, i)
                now = time.monotonic()
                for p in list(self.pairs):
                    if self.drop_after is not None and p.answered is not None and \
                            now >= p.answered + self.drop_after:
                        self._cut(p)
                    elif any(p.out[i] and p.out[i][0][0] <= now for i in (0, 1)):
                        for i in (0, 1):
                            if p in self.pairs and p.out[i] and p.out[i][0][0] <= now:
                                self._writable(p, i)
                    elif p in self.pairs:
                        self._interest(p)
        except Exception as e:  # the test sees it in close()
            self.error = repr(e)
            raise


def proxy(sc, port, target, **kw):
    p = Proxy(port, target, **kw)
    sc.callback(p.close)
    return p


# The clients of the three services test, run inside the container's namespaces (network and
# mount): python socket clients of the echo service, curl of the web service, socat of the
# socat one, n in all, 8 at a time, each given w seconds to be answered. Prints one JSON line:
# per kind, the good answers and the first bad ones.
CLIENTS_CODE = r'''
import concurrent.futures, json, socket, subprocess, sys
d, n, w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def echo(i):
    s = socket.socket(socket.AF_UNIX); s.settimeout(w); s.connect(d + "/echo.sock")
    msg = b"echo %d" % i
    s.sendall(msg); s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = s.recv(65536)
        if not b: break
        got += b
    s.close()
    return got == msg, got
def web(i):
    p = subprocess.run(["curl", "-sS", "--max-time", str(w), "--unix-socket", d + "/web.sock", "http://host/req%d" % i],
                       capture_output=True)
    return p.stdout == b"web: /req%d\n" % i, p.stdout + p.stderr
def upper(i):
    p = subprocess.run(["socat", "-t", str(w), "-", "UNIX-CONNECT:" + d + "/upper.sock"], input=b"socat %d" % i,
                       capture_output=True, timeout=2 * w)
    return p.stdout == b"SOCAT %d" % i, p.stdout + p.stderr
kinds = {"echo": echo, "web": web, "upper": upper}
jobs = [(k, i) for i in range(n) for k in kinds][:n]
res = {k: {"good": 0, "bad": []} for k in kinds}
def one(job):
    k, i = job
    try:
        return k, kinds[k](i)
    except Exception as e:
        return k, (False, repr(e).encode())
with concurrent.futures.ThreadPoolExecutor(8) as ex:
    for k, (good, got) in ex.map(one, jobs):
        if good: res[k]["good"] += 1
        elif len(res[k]["bad"]) < 3: res[k]["bad"].append(got.decode(errors="replace"))
print(json.dumps(res), flush=True)
'''


def container_prefix(d, sockdir):
    """The container relay's namespaces: the network namespace, then a mount namespace of its
    own where an empty directory is bind-mounted on sockdir, where its sockets go (the host's
    sockets of the same names are not there)."""
    os.makedirs(d + "/empty", exist_ok=True)
    return IN_NS + ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount --bind "$0" "$1" && shift && exec "$@"', d + "/empty", sockdir]


def test_three_services_on_one_port_share_one_tcp_connection(sc):
    """An echo server, an HTTP server and socat behind one host port, each a service; 200
    client connections in the container's namespaces across them; the host sees one TCP
    connection from the container the whole time."""
    need("socat", "curl", "nsenter", "unshare", "ss")
    d = sc.tmpdir(mode=0o755)
    keygen(d)
    sock = d + "/sock"
    os.makedirs(sock)
    sc.server("echo", sock + "/echo.sock")
    sc.server("http", sock + "/web.sock", "web")
    # -t 10: after the client's half-close, socat's default is to give tr 0.5 s to answer before
    # it closes (an empty answer, "tr: write error: Broken pipe", on a loaded machine)
    sc.popen(["socat", "-t", "10", "UNIX-LISTEN:%s/upper.sock,fork" % sock, "EXEC:tr a-z A-Z"])
    wait_for(lambda: os.path.exists(sock + "/upper.sock"), what="socat's socket")
    listen = "tcp:%s:%d" % (HOST_IP, PORT)
    host = host_relay(sc, d, fwd("echo", listen, "unix:%s/echo.sock" % sock)
                      + fwd("web", listen, "unix:%s/web.sock" % sock)
                      + fwd("shout", listen, "unix:%s/upper.sock" % sock, service="upper"))
    remote = "tcp:host.docker.internal:%d" % PORT
    cont = cont_relay(sc, d, fwd("e", "unix:%s/echo.sock" % sock, remote, service="echo")
                      + fwd("w", "unix:%s/web.sock" % sock, remote, service="web")
                      + fwd("u", "unix:%s/upper.sock" % sock, remote, service="upper"),
                      prefix=container_prefix(d, sock))
    wait_for(lambda: "link to %s up" % remote in cont.text(), what="the link up")
    seen = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            seen.append(established(PORT))
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    # socat's -t 5 (how long after its half-close it waits for the answer) once ran out under
    # valgrind on a loaded machine (two empty answers of 66; the answer is tr's, forked per client)
    try:
        p = subprocess.run(["nsenter", "-t", str(cont.pid), "-m", "-n", sys.executable, "-c", CLIENTS_CODE, sock,
                            "200", str(int(10 * WAIT_SCALE))], capture_output=True, text=True,
                           timeout=120 * WAIT_SCALE)
    finally:
        stop.set()
        t.join()
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert sum(r["good"] for r in res.values()) == 200, res
    assert res["echo"]["good"] and res["web"]["good"] and res["upper"]["good"], res
    # the container's own sockets took the clients: the host's upstreams of the same names are
    # not visible in its mount namespace
    assert os.path.exists(d + "/empty/echo.sock"), "the container relay's socket is not in its mount"
    counts = sorted(set(len(s) for s in seen))
    assert counts == [1], "TCP connections on the host port over the run: %s; last: %s" % (counts, seen[-1])
    conn = established(PORT)
    assert len(conn) == 1 and CONT_IP in conn[0], conn
    assert count(host.text(), "shared link from %s:" % CONT_IP) == 1, host.text()
    assert count(cont.text(), "link to %s up" % remote) == 1, cont.text()
    print("# %d samples of ss during the 200 connections, each saw one connection" % len(seen), flush=True)


def test_unknown_service_is_refused_with_the_offered_names(sc):
    """A container forward that asks for a service the host does not offer: its client is
    closed without a byte, both logs name what was asked and what is offered, and the link
    (and a good service on it) is unharmed."""
    d = sc.tmpdir()
    keygen(d)
    sc.server("echo", d + "/echo.sock")
    sc.server("echo", d + "/other.sock")
    listen = "tcp:%s:%d" % (HOST_IP, PORT)
    host = host_relay(sc, d, fwd("echo", listen, "unix:%s/echo.sock" % d)
                      + fwd("other", listen, "unix:%s/other.sock" % d))
    remote = "tcp:host.docker.internal:%d" % PORT
    cont = cont_relay(sc, d, fwd("bad", "unix:%s/bad.sock" % d, remote, service="nope")
                      + fwd("good", "unix:%s/good.sock" % d, remote, service="echo"))
    wait_for(lambda: "link to %s up" % remote in cont.text(), what="the link up")
    assert closed_without_answer(d + "/bad.sock")
    words = "unknown service nope: this listener offers echo, other"
    wait_for(lambda: words in cont.text(), what="the container log naming the offered services")
    wait_for(lambda: words in host.text(), what="the host log naming the offered services")
    assert echo_once(d + "/good.sock", b"still here") == b"still here"
    assert count(cont.text(), "link to %s up" % remote) == 1, "the refusal cost the link:\n" + cont.text()
    # the same refusal without the shared link (sockferry/1, the name in the handshake)
    cont1 = cont_relay(sc, d, fwd("bad1", "unix:%s/bad1.sock" % d, remote, service="nope", link="per-connection"),
                       name="cont1.conf")
    assert closed_without_answer(d + "/bad1.sock")
    wait_for(lambda: words in cont1.text(), what="the per-connection container log naming the offered services")


def swap_scene(sc, link):
    """Two host forwards with one token, a on PORT and b on PORT_B, each answering with its
    name; a squatter that took the port the container expects for a (PROXY_BASE) relays to b's
    port. Returns the directory, the container relay and the squatter."""
    d = sc.tmpdir()
    keygen(d)
    for name in ("a", "b"):
        sc.server("tagged", "%s/%s.sock" % (d, name), "service-" + name)
    host_relay(sc, d, fwd("a", "tcp:%s:%d" % (HOST_IP, PORT), "unix:%s/a.sock" % d)
               + fwd("b", "tcp:%s:%d" % (HOST_IP, PORT_B), "unix:%s/b.sock" % d))
    squatter = proxy(sc, PROXY_BASE, (HOST_IP, PORT_B))
    cont = cont_relay(sc, d, fwd("a", "unix:%s/a-client.sock" % d, "tcp:host.docker.internal:%d" % PROXY_BASE,
                                 service="a", link=link, connect_timeout="2s"))
    return d, cont, squatter


def swap_attack(sc, link):
    d, cont, squatter = swap_scene(sc, link)
    for _ in range(3):
        s = connect(d + "/a-client.sock", timeout=5)
        got = b""
        try:
            s.sendall(b"for a\n")
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
        except (ConnectionResetError, BrokenPipeError):
            pass
        except socket.timeout:
            got += b" (and then nothing for 5 s, not closed)"
        s.close()
        assert b"service-b" not in got, "forward a's client was answered by service b: %r" % got
        assert got == b"", "forward a's client got bytes through the squatter: %r" % got
    assert squatter.accepted >= 1, "the squatter saw no connection: the test proved nothing"
    wait_for(lambda: "unknown service a: this listener offers b" in cont.text(),
             what="the container log saying which service the squatter's listener offers")
    return cont


def test_port_squatter_cannot_swap_services_on_the_shared_link(sc):
    swap_attack(sc, "shared")


def test_port_squatter_cannot_swap_services_per_connection(sc):
    swap_attack(sc, "per-connection")


def old_sockferry():
    """The previous release's sockferry: SF_PREV_SOCKFERRY (CI builds it once), else the one
    tests/lib/build-prev-release.sh builds into the build directory once (later runs reuse it).
    Skip when it cannot be built here, saying why (a tool or the commit missing, a dependency
    its build wants)."""
    exe = os.environ.get("SF_PREV_SOCKFERRY")
    if exe:
        assert os.access(exe, os.X_OK), "SF_PREV_SOCKFERRY=%s is not an executable" % exe
        return exe
    build_root = os.environ.get("SF_BUILD_ROOT")
    if not build_root:
        raise Skip("neither SF_PREV_SOCKFERRY nor SF_BUILD_ROOT is set (run it through meson test)")
    p = subprocess.run(["sh", BUILD_PREV, os.path.join(build_root, "tests", "e2e")], capture_output=True, text=True)
    if p.returncode == 77:
        raise Skip(p.stderr.strip())
    assert p.returncode == 0 and p.stdout.strip(), "tests/lib/build-prev-release.sh failed:\n" + p.stderr
    return p.stdout.strip()


def test_old_container_relay_to_new_host_relay(sc):
    """The previous release in the container, this one on the host: sockferry/1, data both
    ways, no shared link on the host."""
    old = old_sockferry()
    d = sc.tmpdir()
    keygen(d)
    sc.server("sink-source", d + "/svc.sock")
    host = host_relay(sc, d, fwd("svc", "tcp:%s:%d" % (HOST_IP, PORT), "unix:%s/svc.sock" % d))
    conf = write_conf(d, "[sockferry]\ntoken-file = %s/token\n\n%s" % (
        d, fwd("svc", "unix:%s/old.sock" % d, "tcp:host.docker.internal:%d" % PORT)), "old.conf")
    sc.relay(["relay", "-c", conf], prefix=IN_NS, program=old)
    for _ in range(3):
        transfer_both_ways(d + "/old.sock", (1 if VALGRIND else 8) * MIB)
    assert "shared link" not in host.text(), "a shared link with a relay from before it:\n" + host.text()


def test_new_container_relay_to_old_host_relay(sc):
    """This release in the container (link = shared, the default), the previous one on the
    host: the link falls back to sockferry/1, said once, data both ways."""
    old = old_sockferry()
    d = sc.tmpdir()
    keygen(d)
    sc.server("sink-source", d + "/svc.sock")
    conf = write_conf(d, "[sockferry]\ntoken-file = %s/token\n\n%s" % (
        d, fwd("svc", "tcp:%s:%d" % (HOST_IP, PORT), "unix:%s/svc.sock" % d)), "old.conf")
    sc.relay(["relay", "-c", conf], program=old)
    remote = "tcp:host.docker.internal:%d" % PORT
    cont = cont_relay(sc, d, fwd("svc", "unix:%s/new.sock" % d, remote))
    wait_for(lambda: "does not offer a shared link" in cont.text(), what="the fallback in the container log")
    for _ in range(3):
        transfer_both_ways(d + "/new.sock", (1 if VALGRIND else 8) * MIB)
    text = cont.text()
    assert count(text, "does not offer a shared link") == 1, text
    assert "link to %s up" % remote not in text, text


# The keepalive of the tests about pings: 1 s, longer where the relays run slower (valgrind: a
# relay under it on a loaded machine missed two pings of 1 s in CI and ended a link while the
# test set up); their bounds grow with it.
KEEPALIVE_S = max(1, int(round(WAIT_SCALE)))


def fault_scene(sc, through_proxy=True, keepalive="1h", connect_timeout="2s", **proxy_kw):
    """An echo service behind a host relay on PORT, a container relay in front of it through
    a Proxy on PROXY_BASE (or straight to PORT); returns a namespace of the pieces. No pings
    unless the test is about them (KEEPALIVE_S): two missed pings end a link, and a relay
    under valgrind on a loaded machine missed two in CI, a drop that such a test counted."""
    e = types.SimpleNamespace()
    e.d = sc.tmpdir()
    keygen(e.d)
    sc.server("echo", e.d + "/echo.sock")
    e.host_conf = fwd("echo", "tcp:%s:%d" % (HOST_IP, PORT), "unix:%s/echo.sock" % e.d)
    e.host = host_relay(sc, e.d, e.host_conf)
    port = PORT
    e.proxy = None
    if through_proxy:
        e.proxy = proxy(sc, PROXY_BASE, (HOST_IP, PORT), **proxy_kw)
        port = PROXY_BASE
    e.remote = "tcp:host.docker.internal:%d" % port
    e.cont = cont_relay(sc, e.d, fwd("echo", "unix:%s/c.sock" % e.d, e.remote, keepalive=keepalive,
                                     connect_timeout=connect_timeout))
    e.path = e.d + "/c.sock"
    wait_for(lambda: "link to %s up" % e.remote in e.cont.text(), what="the link up")
    return e


def test_link_reset_fails_open_streams_with_the_cause_and_comes_back(sc):
    e = fault_scene(sc)
    open_ = sessions(sc, e.path, 3)
    # What the log says from the reset on: a slow start (valgrind on a busy machine) may have
    # logged a first attempt timing out before the link came up.
    before = len(e.cont.text())
    e.proxy.reset()
    for s in open_:
        took = s.ended(timeout=5)
        assert took < 3, "an open stream took %.1f s to end after its link was reset" % took
    cause = "the link to %s went down: reading from it: connection reset by peer" % e.remote
    wait_for(lambda: count(e.cont.text(), "upstream unavailable: " + cause) == 3,
             what="each open stream's end with the cause in the container log")
    wait_for(lambda: "link to %s down (" % e.remote in e.cont.text(), what="the link down in the log")
    served(e.path, timeout=5)
    assert count(e.cont.text()[before:], "link to %s down (" % e.remote) == 1, e.cont.text()
    assert count(e.cont.text()[before:], "link to %s up" % e.remote) == 1, e.cont.text()
    # the link cannot come back for a while: a new client waits connect-timeout (2 s), then
    # is closed with the link's state, since when and why
    e.proxy.refuse(True)
    e.proxy.reset()
    wait_for(lambda: count(e.cont.text(), "link to %s down (" % e.remote) == 2, what="the second drop logged")
    start = time.monotonic()
    assert closed_without_answer(e.path)
    took = time.monotonic() - start
    assert took < 4, "a client waited %.1f s for a link that was down (connect-timeout = 2s)" % took
    wait_for(lambda: "upstream unavailable: link to %s down since " % e.remote in e.cont.text(),
             what="the down-since words in the container log")
    e.proxy.refuse(False)
    served(e.path, timeout=10)
    # the host relay let go of every link the proxy cut
    wait_for(lambda: count(e.host.text(), ") ended: ") == count(e.host.text(), "shared link from ") - 1,
             what="the host relay ending the links that were cut")


def test_a_client_that_waits_on_a_redial_hears_the_link_is_down(sc):
    """A re-dial is connecting too, but the link has been down since its first failure: a
    client whose connect-timeout (2 s) ends while a re-dial's handshake waits (the path stalls
    after the TCP connect, handshake-timeout 5 s) hears "down since", with the cause, not the
    words of a first attempt. CI's test_auth met it when its timeout fell during a re-dial."""
    e = fault_scene(sc)
    served(e.path)
    e.proxy.refuse(True)
    e.proxy.reset()
    wait_for(lambda: "link to %s down (" % e.remote in e.cont.text(), what="the link down in the log")
    e.proxy.stall(True)
    e.proxy.refuse(False)
    wait_for(lambda: e.proxy.open_pairs() == 1, what="a re-dial that reached the stalled path")
    start = time.monotonic()
    assert closed_without_answer(e.path)
    took = time.monotonic() - start
    assert 1.5 < took < 4, "a client waited %.1f s for a re-dial (connect-timeout = 2s)" % took
    text = e.cont.text()
    assert "upstream unavailable: link to %s down since " % e.remote in text, text
    assert "not up within" not in text, text
    e.proxy.stall(False)
    served(e.path, timeout=15)


def test_host_relay_stopped_then_continued(sc):
    """SIGSTOP (a host that sleeps): the container relay declares the link dead after two
    missed pings (KEEPALIVE_S: 1 s, 3 s under valgrind), ends its open streams with that
    cause, turns new clients away after connect-timeout with the link's state, and dials again
    and again: the stopped host's kernel takes each dial into its listener's queue, where the
    handshake waits until the container gives up on it. Once three dials wait there (two the
    container gave up on), SIGCONT: the link comes back and the host relay holds no more
    descriptors than before."""
    e = fault_scene(sc, through_proxy=False, keepalive="%ds" % KEEPALIVE_S)
    served(e.path)
    host_fds = e.host.fds()
    open_ = sessions(sc, e.path, 2)
    e.host.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        for s in open_:
            took = s.ended(timeout=10)
        took = time.monotonic() - stopped
        assert took < 2 * KEEPALIVE_S + 3, "the open streams ended %.1f s after the host stopped (keepalive = %ds)" % (
            took, KEEPALIVE_S)
        wait_for(lambda: "link to %s down (no answer to 2 pings" % e.remote in e.cont.text(), what="the link down")
        text = e.cont.text()
        assert "upstream unavailable: the link to %s went down: no answer to 2 pings" % e.remote in text, text
        start = time.monotonic()
        assert closed_without_answer(e.path)
        assert time.monotonic() - start < 4, "a client waited longer than connect-timeout"
        wait_for(lambda: "upstream unavailable: link to %s " % e.remote in e.cont.text(),
                 what="the link's state in the words of a turned-away client")
        # two handshakes the container gave up on, and the dial under way
        wait_for(lambda: (accept_queue((HOST_IP, PORT)) or 0) >= 3, timeout=60,
                 what="three dials of the container in the stopped host's queue")
    finally:
        e.host.signal(signal.SIGCONT)
    served(e.path, timeout=15)
    assert count(e.cont.text(), "link to %s up" % e.remote) == 2, e.cont.text()
    # the handshakes the container gave up on while the host slept are closed, not kept
    wait_for(lambda: e.host.fds() <= host_fds, timeout=15,
             what="the host relay's descriptors back to %d (now %d)" % (host_fds, e.host.fds()))


def test_host_relay_restarted(sc):
    """The host relay killed and started again: the open stream ends with the cause; a client
    that comes while nothing listens is closed at once with the refused dial's cause (its dial
    starts when it comes, as one connection per client would: no waiting out the backoff, nor
    connect-timeout = 5s); one that comes once the host is back is served at once."""
    e = fault_scene(sc, through_proxy=False, connect_timeout="5s")
    open_ = sessions(sc, e.path, 1)
    e.host.kill()
    open_[0].ended(timeout=5)
    wait_for(lambda: "link to %s down (" % e.remote in e.cont.text(), what="the link down")
    for _ in range(3):
        start = time.monotonic()
        assert closed_without_answer(e.path), e.cont.text()
        # (the bound well under connect-timeout, however slow the build: WAIT_SCALE <= 3)
        assert time.monotonic() - start < 1.5 * WAIT_SCALE, "a client waited %.1f s for a host that refuses" % (
            time.monotonic() - start)
    # (the clients may see their close before the line is in the log)
    wait_for(lambda: "Connection refused" in e.cont.text(), timeout=5, what="the cause in the container relay's log",
             detail=e.cont.text)
    host = host_relay(sc, e.d, e.host_conf)
    start = time.monotonic()
    served(e.path)
    assert time.monotonic() - start < 2.5 * WAIT_SCALE, "the first client after the restart waited out the backoff"
    assert count(e.cont.text(), "link to %s up" % e.remote) == 2, e.cont.text()
    assert count(host.text(), "shared link from %s:" % CONT_IP) == 1, host.text()


def test_host_relay_drains_its_link_on_sigterm(sc):
    """SIGTERM to the host relay: the open stream goes on until its client is done; the
    container takes a new link for new clients at once (GOAWAY), whose dial the stopped
    listener refuses, so a new client is turned away at once with that cause, never with "the
    host relay is shutting down"; the host relay exits 0 once the open stream ended."""
    # connect-timeout far above the bound below, which grows with the build's slowness
    e = fault_scene(sc, through_proxy=False, connect_timeout="10s")
    s = sessions(sc, e.path, 1)[0]
    e.host.signal(signal.SIGTERM)
    wait_for(lambda: "stopping: no new connections, draining the open ones" in e.host.text(),
             what="the host relay draining")
    for _ in range(5):
        s.round_trip()
    start = time.monotonic()
    assert closed_without_answer(e.path)
    assert time.monotonic() - start < 1.5 * WAIT_SCALE, "a new client waited for a draining host relay"
    wait_for(lambda: "Connection refused" in e.cont.text(), what="the turned-away client's cause")
    text = e.cont.text()
    assert "shutting down" not in text and "takes no new streams" not in text, text
    s.round_trip()
    s.close()
    assert e.host.wait(timeout=5) == 0, e.host.text()


def test_stalled_path_is_declared_dead_and_comes_back(sc):
    """A path that stops carrying bytes (the connection stays open): two missed pings end
    the link and its open stream with the cause; once the path carries again the link comes
    back."""
    e = fault_scene(sc, keepalive="%ds" % KEEPALIVE_S)
    open_ = sessions(sc, e.path, 1)
    e.proxy.stall(True)
    stalled = time.monotonic()
    took = open_[0].ended(timeout=10)
    assert time.monotonic() - stalled < 2 * KEEPALIVE_S + 3, (
        "the open stream ended %.1f s after the path stalled" % took)
    wait_for(lambda: "link to %s down (no answer to 2 pings" % e.remote in e.cont.text(), what="the link down")
    text = e.cont.text()
    assert "upstream unavailable: the link to %s went down: no answer to 2 pings" % e.remote in text, text
    e.proxy.stall(False)
    served(e.path, timeout=15)


def test_slow_path_keeps_the_link(sc):
    """100 ms more round trip on the path (a delay proxy): the link stays up (KEEPALIVE_S)
    and carries every round trip."""
    e = fault_scene(sc, keepalive="%ds" % KEEPALIVE_S, delay=0.05)
    # From the link up on: a slow start (valgrind on a busy machine) may have logged a first
    # attempt timing out.
    before = len(e.cont.text())
    s = sessions(sc, e.path, 1)[0]
    start = time.monotonic()
    for _ in range(20):
        s.round_trip()
    took = time.monotonic() - start
    assert took >= 20 * 0.1, "20 round trips in %.2f s: the proxy's delay did not act" % took
    # idle for more than two keepalives (the link is dead after two missed pings): the idle
    # time is what is tested
    time.sleep(2.5 * KEEPALIVE_S)
    s.round_trip()
    assert "down" not in e.cont.text()[before:], e.cont.text()


def test_1000_link_drops_leave_descriptors_and_memory_flat(sc):
    """20 links (20 forwards, each through its own proxy) cut again and again, 1 000 links cut
    (200 under valgrind) after 100 to warm up, while a client keeps connecting: afterwards the
    container relay has the descriptors it had after the warm-up, and about the same memory."""
    n_links = 20
    # under valgrind fewer: each drop costs a handshake at a fraction of the speed
    warm, n_drops = (40, 200) if VALGRIND else (100, 1000)
    d = sc.tmpdir()
    keygen(d)
    sc.server("echo", d + "/echo.sock")
    host = host_relay(sc, d, fwd("echo", "tcp:%s:%d" % (HOST_IP, PORT), "unix:%s/echo.sock" % d))
    proxies = [proxy(sc, PROXY_BASE + i, (HOST_IP, PORT)) for i in range(n_links)]
    cont = cont_relay(sc, d, "".join(fwd("f%d" % i, "unix:%s/c%d.sock" % (d, i),
                                         "tcp:host.docker.internal:%d" % (PROXY_BASE + i),
                                         service="echo", connect_timeout="1s") for i in range(n_links)))
    paths = ["%s/c%d.sock" % (d, i) for i in range(n_links)]
    for p in paths:
        served(p)

    stop = threading.Event()
    tries = [0, 0]

    def client():
        i = 0
        while not stop.is_set():
            i += 1
            try:
                served = echo_once(paths[i % n_links], b"x" * 100, timeout=5) == b"x" * 100
            except OSError:
                served = False
            tries[0 if served else 1] += 1

    # The links that came up, from the container relay's log as it grows (read from where the
    # last look ended: the log is thousands of lines by the end, and this is polled).
    up_line = re.compile(rb"link to tcp:host\.docker\.internal:\d+ up( again after .*)?$")
    log = {"pos": 0, "rest": b"", "ups": 0}

    def ups():
        with open(cont.log_path, "rb") as f:
            f.seek(log["pos"])
            new = f.read()
        log["pos"] += len(new)
        lines = (log["rest"] + new).split(b"\n")
        log["rest"] = lines.pop()
        log["ups"] += sum(1 for line in lines if up_line.search(line))
        return log["ups"]

    def drops(total):
        for p in proxies:
            # long enough for most links to come up before their cut, however slow the build
            p.drop_after = 0.3 if VALGRIND else 0.15 if SANITIZED else 0.05
        # Cut until total links that had come up were cut, not total cuts: on a loaded machine
        # a handshake can outlast drop_after, and a cut that lands on it drops no link (989 links
        # up for 1 102 cuts, once, beside the rest of CI).
        wait_for(lambda: ups() >= n_links + total, timeout=120, what="%d link drops" % total,
                 detail=lambda: "%d links up, %d cuts" % (ups(), sum(p.cuts for p in proxies)))
        for p in proxies:
            p.drop_after = None
        # every link up again, each carrying a client
        for p in paths:
            served(p)

    t = threading.Thread(target=client, daemon=True)
    t.start()
    try:
        drops(warm)
        stop.set()
        t.join()
        fds0, host_fds0 = steady(cont.fds, "the container relay's descriptors"), steady(host.fds, "the host's")
        rss0 = cont.rss_kib()
        stop.clear()
        t = threading.Thread(target=client, daemon=True)
        t.start()
        drops(warm + n_drops)
    finally:
        stop.set()
        t.join()
    # steady() is not enough here: a loaded machine may not run a relay for longer than its
    # 100 ms while the last clients' closes are on their way.
    fds_back(cont, fds0, "container relay")
    fds_back(host, host_fds0, "host relay")
    fds1, host_fds1 = cont.fds(), host.fds()
    rss1 = cont.rss_kib()
    cuts = sum(p.cuts for p in proxies)
    print("# %d cuts, %d links up; container relay: %d -> %d descriptors, %d -> %d KiB RSS; host relay: %d -> %d "
          "descriptors; clients served %d, failed %d" % (cuts, ups(), fds0, fds1, rss0, rss1, host_fds0, host_fds1,
                                                          tries[0], tries[1]), flush=True)
    # (memcheck keeps freed blocks a while and checks for leaks itself at the end)
    if not VALGRIND and not SANITIZED:
        assert rss1 - rss0 < 4096, "the container relay's RSS grew from %d to %d KiB over %d link drops" % (rss0, rss1,
                                                                                                          cuts)
    assert tries[0] > 0, "no client was served while the links dropped"


def test_bulk_stream_next_to_an_interactive_one(sc):
    """A bulk stream up the link for 2 s (x WAIT_SCALE) while an interactive client on
    another stream of the same link keeps getting its answers: no round trip waits a second or
    more (issue 33: no stall >= 1 s), and they average a quarter of that or less; then a
    stalled reader of a big download stalls only its own stream. Round-trip times go to the
    log as comments (the benchmark's business), not into asserts."""
    d = sc.tmpdir()
    keygen(d)
    sc.server("after-eof", d + "/bulk.sock")
    sc.server("echo", d + "/echo.sock")
    sc.server("sink-source", d + "/source.sock")
    listen = "tcp:%s:%d" % (HOST_IP, PORT)
    host = host_relay(sc, d, fwd("bulk", listen, "unix:%s/bulk.sock" % d)
                      + fwd("echo", listen, "unix:%s/echo.sock" % d)
                      + fwd("source", listen, "unix:%s/source.sock" % d))
    remote = "tcp:host.docker.internal:%d" % PORT
    cont = cont_relay(sc, d, fwd("bulk", "unix:%s/c-bulk.sock" % d, remote)
                      + fwd("echo", "unix:%s/c-echo.sock" % d, remote)
                      + fwd("source", "unix:%s/c-source.sock" % d, remote))
    wait_for(lambda: "link to %s up" % remote in cont.text(), what="the link up")
    # The bulk stream lasts a time, not a size: 100 MiB took 0.2 s on a fast machine, over
    # before a starved stream's one round trip could show as a stall. A starved stream waits
    # the whole bulk_seconds, longer than the bound (stall_s); a loaded CI machine was seen to
    # hold one round trip for 0.54 s, well under it.
    bulk_seconds, stall_s = 2.0 * WAIT_SCALE, 1.0 * WAIT_SCALE
    sent = [0]
    result = {}
    under_way = threading.Event()
    done = threading.Event()

    def bulk():
        s = connect(d + "/c-bulk.sock", timeout=120)
        h = hashlib.sha256()
        chunk = os.urandom(256 * 1024)
        try:
            end = time.monotonic() + bulk_seconds
            while sent[0] < 2 * MIB or time.monotonic() < end:
                s.sendall(chunk)
                h.update(chunk)
                sent[0] += len(chunk)
                if sent[0] >= 2 * MIB:
                    under_way.set()
            s.shutdown(socket.SHUT_WR)
            result["sending_done"] = time.monotonic()
            result["reply"] = recv_all(s)
            result["expect"] = b"%d %s\n" % (sent[0], h.hexdigest().encode())
        except OSError as e:
            result["error"] = repr(e)
        finally:
            done.set()
            under_way.set()
            s.close()

    inter = Session(d + "/c-echo.sock")
    sc.closing(inter)
    t = threading.Thread(target=bulk, daemon=True)
    start = time.monotonic()
    t.start()
    under_way.wait(60)
    times = []
    sending = 0
    while not done.is_set():
        t0 = time.monotonic()
        inter.round_trip()
        times.append(time.monotonic() - t0)
        if "sending_done" not in result:
            sending += 1
    took = time.monotonic() - start
    t.join(120)
    assert "error" not in result, result.get("error")
    assert result.get("reply") == result.get("expect"), (result.get("reply"), result.get("expect"))
    longest = max(times) if times else took
    times.sort()
    print("# %d round trips (%d while the client was still sending) during a %d MiB bulk stream of %.2f s: "
          "p50 %.2f ms, max %.2f ms" % (len(times), sending, sent[0] // MIB, took,
                                        times[len(times) // 2] * 1e3 if times else 0, longest * 1e3),
          flush=True)
    assert longest < stall_s, ("a round trip on the interactive stream took %.2f s while the %d MiB bulk one ran "
                               "(%.2f s): a stall (%.0f s at most)" % (longest, sent[0] // MIB, took, stall_s))
    # Nor slow all along: its round trips average a quarter of the bound or less. A count, not a
    # mean of the times: a starved stream's last round trip may end with the bulk. Measured:
    # hundreds in 2 s on a quiet machine; 49 in 7.6 s (155 ms each) under valgrind in a cold CI
    # run, where a fixed 50 had failed.
    rounds = max(5, int(took / (stall_s / 4)))
    assert len(times) >= rounds, ("%d round trips on the interactive stream while the %d MiB bulk one ran (%.2f s), "
                                  "expected %d at least (%.2f s each)" % (len(times), sent[0] // MIB, took, rounds,
                                                                          stall_s / 4))

    # a reader that stalls: 64 MiB asked for, nothing read for a while; the link's other
    # streams go on, then the stalled one gets every byte
    want = (16 if VALGRIND else 64) * MIB
    stalled = connect(d + "/c-source.sock", timeout=60)
    sc.closing(stalled)
    stalled.sendall(want.to_bytes(8, "big") + b"12345678")
    # its window fills: the bytes wait in its socket, unread
    wait_for(lambda: unread(stalled) > 0, what="the stalled reader's first bytes")
    steady(lambda: unread(stalled), "the stalled reader's unread bytes", interval=0.1)
    for _ in range(50):
        inter.round_trip()
    assert echo_once(d + "/c-echo.sock", b"a new stream too") == b"a new stream too"
    stalled.shutdown(socket.SHUT_WR)
    got = len(recv_all(stalled))
    assert got == want + 32, "the stalled reader got %d of %d bytes (and the digest)" % (got, want + 32)
    assert count(cont.text(), "link to %s up" % remote) == 1, cont.text()
    assert count(host.text(), "shared link from %s:" % CONT_IP) == 1, host.text()


def link_writes(relay):
    """The write(2) calls relay has made (/proc/PID/io's syscw). The relay writes its links
    with write/writev, which count, and its clients with send, which does not."""
    with open("/proc/%d/io" % relay.pid) as f:
        return int(re.search(r"^syscw: (\d+)$", f.read(), re.M).group(1))


def test_a_streams_opening_and_its_answer_each_take_one_write(sc):
    """A client that writes right after its connect (HTTP, ssh-agent) has its bytes in the
    same write to the link as its stream's HEADERS, and the host relay's answer (sf-status 0)
    goes in the write of the upstream's first bytes: one segment each way across the VM's
    network stack, not two. Made certain with the container relay stopped (SIGSTOP) while the
    client connects and writes, so that its bytes are there when the relay accepts. A service
    that speaks first (a banner, as an SSH server's) still reaches a client that waits for it."""
    d = sc.tmpdir()
    keygen(d)
    sc.server("echo", d + "/echo.sock")
    sc.server("banner", d + "/banner.sock")
    listen = "tcp:%s:%d" % (HOST_IP, PORT)
    host = host_relay(sc, d, fwd("echo", listen, "unix:%s/echo.sock" % d) + fwd("banner", listen, "unix:%s/banner.sock" % d))
    remote = "tcp:host.docker.internal:%d" % PORT
    # keepalive: no ping while the test counts
    cont = cont_relay(sc, d, fwd("echo", "unix:%s/c-echo.sock" % d, remote, keepalive="1h")
                      + fwd("banner", "unix:%s/c-banner.sock" % d, remote, keepalive="1h"))
    wait_for(lambda: "link to %s up" % remote in cont.text(), what="the link up")
    assert echo_once(d + "/c-echo.sock") == b"ping"  # the link's first exchanges are over

    s = connect(d + "/c-banner.sock")
    sc.closing(s)
    banner = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"
    got = recv_all(s, len(banner))
    assert got == banner, "the banner service's client got %r" % got

    # The portable engine (a macOS or Windows host's) writes its sockets with write(2) too
    # (uv_try_write): one more for the host relay, the echo's bytes to its upstream. It reads
    # a client in libuv's read callback, a loop turn after the accept, so its HEADERS go
    # alone; container relays run on Linux, whose engine reads at the accept.
    portable = int(ENGINE == "portable")
    for attempt in range(3):
        before, host_before = link_writes(cont), link_writes(host)
        cont.signal(signal.SIGSTOP)
        try:
            c = connect(d + "/c-echo.sock")  # a unix connect completes in the backlog
            sc.closing(c)
            c.sendall(b"first bytes")
        finally:
            cont.signal(signal.SIGCONT)
        got = recv_all(c, len(b"first bytes"))
        assert got == b"first bytes", "the client got %r" % got
        writes, host_writes = link_writes(cont) - before, link_writes(host) - host_before
        if VALGRIND:
            # valgrind's scheduler hands its lock over a pipe: its own writes count in syscw
            print("# the writes are counted in the run without valgrind", flush=True)
            return
        if (writes == 1 or portable) and host_writes == 1 + portable:
            break
        # anything else a relay wrote meanwhile (a log line) is told apart by trying again
        print("# attempt %d: %d writes for the stream's opening and first bytes, %d for its answer and the "
              "upstream's first bytes" % (attempt + 1, writes, host_writes), flush=True)
    assert writes == 1 or portable, ("the container relay made %d writes to open a stream whose client's bytes "
                                     "were there at the accept (the HEADERS alone, then the bytes?)" % writes)
    assert host_writes == 1 + portable, ("the host relay made %d writes for a stream's answer and its upstream's "
                                         "first bytes (the answer alone, then the bytes?)" % (host_writes - portable))


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene,
               setup=NET.namespace)
