#!/usr/bin/env python3
"""The shared link's life (issue 33): what a link must survive and what it must never cost the
other clients, each defect of the issue as the behaviour the fixed code keeps.

* isolation: stalled readers and uploads that never drain stall only their own streams;
* clients that go away mid-stream (100 000 of them) never end the link; a token holder that
  resets streams as fast as it can leaves the host bounded; a GOAWAY is a link replaced at once;
* links count: max-links per listener;
* a stream beyond the host's limits waits at most connect-timeout; stream ids running out;
* a refused stream moves on to the next candidate;
* the host down: clients closed at once, a host coming back serves them;
* reload reaches open links (max-conns), and keeps a changed forward's counters;
* SIGTERM ends a host relay within drain-timeout in every mix of clients and services;
* `sockferry check` agrees with what a client gets;
* refusals logged at most 5 a second.

Both relays run on this machine's loopback (the host relay on 127.0.0.1 and a free port, the
"container" relay's sockets in a test directory): these are properties of the two relays, not
of a network. Timings (round trips, rates) are printed as comments; the asserted bounds are
the issue's (a round trip under 1 s, a client closed within connect-timeout), ten times looser
under valgrind and ASan."""

import argparse
import contextlib
import json
import math
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "auth"))
import protocol_vectors as pv  # noqa: E402
import sftap  # noqa: E402
from sfharness import (Scene, Session, Skip, closed_without_answer, connect, echo_once, free_port,  # noqa: E402
                       fwd, keygen, need, run_sockferry, token_relay, wait_for, write_conf, SANITIZED, VALGRIND)

try:
    import h2.config
    import h2.connection
    import h2.errors
    import h2.events
    import h2.exceptions
except ImportError:  # packaging/install-deps.sh installs python3-h2
    h2 = None

ap = argparse.ArgumentParser()
ap.add_argument("--churn", required=True)
CHURN = ap.parse_args().churn

MIB = 1 << 20
# Bounds on time are ten times looser where every instruction is slower.
SLOW = 10 if VALGRIND or SANITIZED else 1
RSS_MEANINGFUL = not VALGRIND and not SANITIZED
STREAM_WINDOW = 256 * 1024
# A connection's copy buffer (relay/engine/bufpool.h), full while its destination takes nothing.
COPY_BUFFER = 256 * 1024
FLAG_LINK = 0x02


# ---- pieces ---------------------------------------------------------------------------------

def world(sc):
    """A test directory with a token, and the host relay's port (free, nothing on it yet)."""
    e = types.SimpleNamespace()
    e.d = sc.tmpdir()
    keygen(e.d)
    e.port = free_port()
    e.listen = e.remote = "tcp:127.0.0.1:%d" % e.port
    return e


def relay_of(sc, e, sections, name, head="", **kw):
    """A relay of sections with a control socket (stats of it: stats(e, name)) and, unless head
    sets another, a 2 s drain."""
    if "drain-timeout" not in head:
        head += "drain-timeout = 2s\n"
    head = "control = unix:%s/%s.ctl\n%s" % (e.d, name, head)
    return token_relay(sc, e.d, sections, name, head=head, **kw)


def stats(e, name):
    # The instrument, not the test: under ASan on a loaded machine, with every stream of the
    # link kept full, a relay's loop turn has taken longer than the client's 5 s; ask again
    # (three times at most) rather than fail the test for it.
    for _ in range(3):
        rc, out, err = run_sockferry(["stats", "-c", os.path.join(e.d, name), "--format", "json"])
        if rc == 0 or "no answer within" not in err:
            break
    assert rc == 0, "sockferry stats -c %s exited %d: %s%s" % (name, rc, out, err)
    return json.loads(out)


def forward_stats(st, name):
    return [f for f in st["forwards"] if f["name"] == name][0]


def link_up(cont, e, n=1):
    wait_for(lambda: cont.text().count("link to %s up" % e.remote) >= n, timeout=10 * SLOW,
             what="the link to %s up in the container relay's log" % e.remote)


def churn(*args, timeout=900):
    """Runs sf-churn; returns its last line's key=value pairs as numbers."""
    p = subprocess.run([CHURN] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    out = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}
    assert "n" in out, "sf-churn %s printed nothing (exit %d): %s" % (" ".join(map(str, args)), p.returncode, p.stderr)
    out["stderr"] = p.stderr
    return out


def churn_server(sc, mode, path):
    p = sc.popen([CHURN, mode, path], stdout=subprocess.PIPE)
    assert b"listening" in p.stdout.readline(), "sf-churn %s did not start" % mode
    return p


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


class Pinger:
    """An interactive client in a thread: round trips one after another through an echo
    service until stop(); each one's time, and the first failure, are kept."""

    def __init__(self, path, timeout):
        self.s = Session(path, timeout=timeout)
        self.timeout = timeout
        self.times = []
        self.error = None
        self.halt = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.halt.is_set():
            t0 = time.monotonic()
            try:
                self.s.round_trip()
            except Exception as ex:  # noqa: BLE001 - the test reports it
                self.error = "round trip %d failed after %.2f s: %r" % (len(self.times) + 1, time.monotonic() - t0,
                                                                         ex)
                return
            self.times.append(time.monotonic() - t0)

    def stop(self):
        self.halt.set()
        self.t.join(self.timeout + 5)
        self.s.close()

    def summary(self):
        return "%d round trips, p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (
            len(self.times), percentile(self.times, 0.5) * 1e3, percentile(self.times, 0.99) * 1e3,
            max(self.times, default=0) * 1e3)


def key_of(e):
    with open(e.d + "/token") as f:
        return bytes.fromhex(f.read().strip())


def recv_exact(s, n):
    got = b""
    while len(got) < n:
        b = s.recv(n - len(got))
        if not b:
            break
        got += b
    return got


def link_handshake(e, flags=FLAG_LINK, timeout=5 * SLOW):
    """A sockferry/1 handshake of the test's own (doc/PROTOCOL.md) with flags, to the host
    relay: returns (socket, outcome), outcome "ok", "status N: REASON" or "closed (...)". The
    socket is left open (None when it is closed)."""
    key = key_of(e)
    s = socket.create_connection(("127.0.0.1", e.port), timeout=timeout)
    try:
        hello = recv_exact(s, 37)
        if len(hello) < 37:
            s.close()
            return None, "closed (%d bytes of the hello)" % len(hello)
        assert hello[:5] == pv.MAGIC + bytes([pv.VERSION]), hello
        snonce, cnonce = hello[5:], os.urandom(32)
        s.sendall(pv.client_frame(key, snonce, cnonce, flags))
        head = recv_exact(s, 2)
        if len(head) < 2:
            s.close()
            return None, "closed (no status frame)"
        rest = recv_exact(s, head[1] + 32)
        reason = rest[:head[1]]
        assert rest[head[1]:] == pv.mac(key, pv.LABEL_SERVER, snonce, cnonce, head + reason), "bad status MAC"
    except (ConnectionResetError, BrokenPipeError, socket.timeout) as ex:
        s.close()
        return None, "closed (%r)" % ex
    if head[0] != 0:
        s.close()
        return None, "status %d: %s" % (head[0], reason.decode(errors="replace"))
    return s, "ok"


# An HTTP/2 client's connection preface and an empty SETTINGS frame (RFC 9113 3.4, 6.5).
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def rss_sampler(relays):
    """A thread that keeps the highest RSS (KiB) of each relay until the returned stop()."""
    peak = [0] * len(relays)
    halt = threading.Event()

    def run():
        while not halt.is_set():
            for i, r in enumerate(relays):
                with contextlib.suppress(OSError, KeyError):
                    peak[i] = max(peak[i], r.rss_kib())
            time.sleep(0.05)
    t = threading.Thread(target=run, daemon=True)
    t.start()

    def stop():
        halt.set()
        t.join(5)
        return peak
    return stop


# ---- 1. isolation ---------------------------------------------------------------------------

def test_stalled_readers_and_uploads_stall_only_their_own_streams(sc):
    """200 clients of a service that writes forever read nothing, 200 uploads go to a service
    that never reads, and an interactive client of a third service on the same link keeps
    getting its answers, none of them waiting on the stalled streams. Then the stalled readers read: each stream's bytes flow
    again. Both relays' RSS stays within doc/PROTOCOL.md's bound: 512 KiB per open stream (its
    buffer in the link, and its connection's copy buffer) + 64 MiB."""
    n = 50 if VALGRIND else 200
    e = world(sc)
    sc.server("source", e.d + "/a.sock")
    sc.server("echo", e.d + "/b.sock")
    sc.server("blackhole", e.d + "/c.sock")
    host = relay_of(sc, e, "".join(fwd(x, e.listen, "unix:%s/%s.sock" % (e.d, x.lower())) for x in "ABC"),
                    "host.conf")
    cont = relay_of(sc, e, "".join(fwd(x.lower(), "unix:%s/c-%s.sock" % (e.d, x), e.remote, service=x)
                                   for x in "ABC"), "cont.conf")
    link_up(cont, e)
    peak = rss_sampler([host, cont])
    readers = sc.closing([connect("%s/c-A.sock" % e.d, timeout=10 * SLOW) for _ in range(n)])
    uploads = sc.closing([connect("%s/c-C.sock" % e.d, timeout=10 * SLOW) for _ in range(n)])
    halt = threading.Event()
    chunk = os.urandom(64 * 1024)

    def push():
        """Keeps every upload's socket full."""
        sel = selectors.DefaultSelector()
        for s in uploads:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_WRITE)
        while not halt.is_set():
            for key, _ in sel.select(0.1):
                with contextlib.suppress(BlockingIOError):
                    try:
                        key.fileobj.send(chunk)
                    except OSError:
                        sel.unregister(key.fileobj)
        sel.close()
    pusher = threading.Thread(target=push, daemon=True)
    pusher.start()
    sc.callback(lambda: (halt.set(), pusher.join(10)))

    # until the link carries no more: every stalled stream holds what its windows let through
    last, same = None, 0
    deadline = time.monotonic() + 30 * SLOW
    while same < 3 and time.monotonic() < deadline:
        link = stats(e, "cont.conf")["links"][0]
        now = (link["bytes_in"], link["bytes_out"])
        same = same + 1 if now == last else 0
        last = now
        time.sleep(0.2)
    print("# the link carried %.1f MiB in, %.1f MiB out before the stalled streams settled"
          % (last[0] / MIB, last[1] / MIB), flush=True)

    pinger = Pinger("%s/c-B.sock" % e.d, timeout=10 * SLOW)
    try:
        wait_for(lambda: pinger.error or sum(pinger.times) >= 5, timeout=60 * SLOW,
                 what="5 s of round trips next to the stalled streams")
    finally:
        pinger.stop()
    print("# next to %d stalled readers and %d stalled uploads: %s" % (n, n, pinger.summary()), flush=True)
    assert not pinger.error, ("the interactive client next to %d stalled readers and %d stalled uploads: %s "
                              "(%s)" % (n, n, pinger.error, pinger.summary()))
    # What is tested is that no round trip waits on the stalled streams: before, they froze for
    # good. How long one takes beside them is bench/vm.sh's to measure (p99 and the longest,
    # against issue 33's "no stall of 1 s"): on a loaded machine a round trip waits for a CPU
    # (1.03 s seen once, and 2.03 s with two busy loops beside a full CI run, p99 4.7 ms), so
    # the bound here is one no CPU wait comes near.
    assert max(pinger.times) < 5.0 * SLOW, "a round trip took %.2f s next to the stalled streams (%s)" % (
        max(pinger.times), pinger.summary())

    # the stalled readers read: each stream's bytes come again
    want = (64 * 1024) if VALGRIND else MIB
    got = {s: 0 for s in readers}
    sel = selectors.DefaultSelector()
    for s in readers:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    start = time.monotonic()
    ended = []
    while sel.get_map() and time.monotonic() - start < 60 * SLOW:
        for key, _ in sel.select(1):
            s = key.fileobj
            try:
                b = s.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError as ex:
                b = b""
                ended.append(repr(ex))
            if not b:
                ended.append("EOF after %d bytes" % got[s])
                sel.unregister(s)
                continue
            got[s] += len(b)
            if got[s] >= want:
                sel.unregister(s)
    short = sum(1 for v in got.values() if v < want)
    print("# %d stalled readers read %d KiB each in %.2f s" % (n, want // 1024, time.monotonic() - start), flush=True)
    assert not ended, "%d stalled readers' streams ended when they read again: %s" % (len(ended), ended[:3])
    assert short == 0, "%d of %d stalled readers got less than %d bytes" % (short, n, want)
    host_peak, cont_peak = peak()
    bound = ((STREAM_WINDOW + COPY_BUFFER) * (2 * n + 1) + 64 * MIB) // 1024
    print("# peak RSS: host relay %d KiB, container relay %d KiB (bound %d KiB)" % (host_peak, cont_peak, bound),
          flush=True)
    if RSS_MEANINGFUL:
        assert host_peak < bound and cont_peak < bound, (
            "RSS beyond 512 KiB per open stream + 64 MiB (%d KiB): host relay %d KiB, container relay %d KiB"
            % (bound, host_peak, cont_peak))


# ---- 2. aborts are normal -------------------------------------------------------------------

def test_clients_that_go_away_mid_stream_never_end_the_link(sc):
    """100 000 clients (20 000 under ASan, 2 000 under valgrind) read a few bytes of a download
    and close with the rest unread, as fast as 8 processes manage, while an interactive client
    of another service keeps round-tripping on the same link: it never fails, the link stays the
    same one (no reconnect), neither log has a GOAWAY or the link ending. libnghttp2's default
    limit (1 000 resets, then 33 a second) ends a link after 1 000 + 33 x its seconds of them:
    20 000 is far past it at ASan's rate (870 a second in a full run). The sanitizers look for
    what one abort leaves, not for a count (100 000 took 115 s of the ASan build's 294)."""
    n = 2000 if VALGRIND else 20000 if SANITIZED else 100000
    e = world(sc)
    churn_server(sc, "source-server", e.d + "/src.sock")
    sc.server("echo", e.d + "/echo.sock")
    host = relay_of(sc, e, fwd("src", e.listen, "unix:%s/src.sock" % e.d)
                    + fwd("echo", e.listen, "unix:%s/echo.sock" % e.d), "host.conf")
    cont = relay_of(sc, e, fwd("src", "unix:%s/c-src.sock" % e.d, e.remote)
                    + fwd("echo", "unix:%s/c-echo.sock" % e.d, e.remote), "cont.conf")
    link_up(cont, e)
    pinger = Pinger(e.d + "/c-echo.sock", timeout=10 * SLOW)
    try:
        res = churn("abort", e.d + "/c-src.sock", n, 8)
    finally:
        pinger.stop()
    rate = n / res["seconds"]
    print("# %d aborts in %.1f s (%.0f a second): %d read their bytes, %d were closed first, %d could not connect; "
          "interactive client: %s" % (n, res["seconds"], rate, res["served"], res["closed"], res["errors"],
                                      pinger.summary()), flush=True)
    assert not pinger.error, "the interactive client during %d aborts: %s" % (n, pinger.error)
    assert pinger.times, "the interactive client made no round trip during the aborts"
    for who, text in (("host", host.text()), ("container", cont.text())):
        bad = [line for line in text.splitlines()
               if re.search(r"goaway|link (to|from) \S+ (\(\S+\) )?(ended|down)|shutting down|takes no new streams",
                            line, re.I)]
        assert not bad, "the %s relay's log after %d aborts (%d lines like these):\n%s" % (
            who, n, len(bad), "\n".join(bad[:3] + ["..."] + bad[-3:]))
    link = stats(e, "cont.conf")["links"]
    assert len(link) == 1 and link[0]["state"] == "up" and link[0]["reconnects"] == 0, (
        "the container relay's link after %d aborts: %s" % (n, link))
    assert res["served"] == n, "%d of %d aborting clients got no byte first (%s); container log:\n%s" % (
        n - res["served"], n, res["stderr"][-500:], cont.text()[-2000:])


def h2_config():
    # HTTP's messaging rules off, as on our side: no pseudo-header fields.
    return h2.config.H2Configuration(client_side=True, header_encoding=None, validate_inbound_headers=False,
                                     validate_outbound_headers=False, normalize_inbound_headers=False,
                                     normalize_outbound_headers=False)


def reset_flood(e, until):
    """One link of the attacker's: streams opened and reset at once, 100 a write, until the
    time until or the host relay ends the link. Returns (streams, how the link ended)."""
    s, outcome = link_handshake(e)
    if not s:
        return 0, "refused: " + outcome
    opened = 0
    with s:
        s.settimeout(2)
        conn = h2.connection.H2Connection(config=h2_config())
        conn.initiate_connection()
        try:
            s.sendall(conn.data_to_send())
            while time.monotonic() < until:
                for _ in range(100):
                    sid = conn.get_next_available_stream_id()
                    conn.send_headers(sid, [(b"sf-service", b"echo")])
                    conn.reset_stream(sid, error_code=h2.errors.ErrorCodes.CANCEL)
                    opened += 1
                s.sendall(conn.data_to_send())
                s.setblocking(False)
                try:
                    data = s.recv(1 << 20)
                    if not data:
                        return opened, "closed by the host relay"
                    events = conn.receive_data(data)
                except BlockingIOError:
                    events = []
                finally:
                    s.settimeout(2)
                gone = [ev for ev in events if isinstance(ev, h2.events.ConnectionTerminated)]
                if gone:
                    code = gone[0].error_code
                    return opened, "GOAWAY %s" % (code.name if hasattr(code, "name") else code)
        except (OSError, h2.exceptions.ProtocolError) as ex:
            return opened, "failed: %s" % type(ex).__name__
    return opened, "open at the end"


def test_a_token_holder_resetting_streams_leaves_the_host_bounded(sc):
    """The attack: a token holder's own link (the handshake and HTTP/2 from Python's h2) opens
    and at once resets streams as fast as it can for 3 s. The host relay's RSS stays within
    64 MiB of where it started and its descriptors come back to the baseline; an honest
    container relay's interactive client keeps getting its answers. The attacker's link may
    be ended (GOAWAY ENHANCE_YOUR_CALM): what happened is printed."""
    if h2 is None:
        raise Skip("python3-h2 is not installed (packaging/install-deps.sh installs it)")
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    host = relay_of(sc, e, fwd("echo", e.listen, "unix:%s/echo.sock" % e.d), "host.conf")
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c-echo.sock" % e.d, e.remote), "cont.conf")
    link_up(cont, e)
    assert echo_once(e.d + "/c-echo.sock") == b"ping"
    fds0 = host.fds()
    rss0 = host.rss_kib()
    peak = rss_sampler([host])
    pinger = Pinger(e.d + "/c-echo.sock", timeout=5 * SLOW)
    opened, ends = 0, []
    start = time.monotonic()
    while time.monotonic() - start < 3:
        n, how = reset_flood(e, start + 3)
        opened += n
        ends.append(how)
    took = time.monotonic() - start
    pinger.stop()
    wait_for(lambda: host.fds() <= fds0, timeout=10 * SLOW,
             what="the host relay's descriptors back to %d after the attack and the honest client (now %d)"
             % (fds0, host.fds()))
    peak_rss = peak()[0]
    kinds = {}
    for how in ends:
        kinds[how] = kinds.get(how, 0) + 1
    print("# the attacker opened and reset %d streams in %.2f s (%.0f a second) over %d links, which ended so: %s; "
          "host RSS %d -> peak %d KiB; honest client: %s" % (
              opened, took, opened / took, len(ends), "; ".join("%d x %s" % (v, k) for k, v in kinds.items()), rss0,
              peak_rss, pinger.summary()), flush=True)
    assert not pinger.error, "the honest client during the attack: %s" % pinger.error
    assert pinger.times, "the honest client made no round trip during the attack"
    if RSS_MEANINGFUL:
        assert peak_rss - rss0 < 64 * 1024, "the host relay's RSS grew from %d to %d KiB under the attack" % (
            rss0, peak_rss)
    assert cont.text().count("link to %s up" % e.remote) == 1, "the honest link went down:\n" + cont.text()


def test_a_link_whose_host_sent_goaway_is_replaced_at_once(sc):
    """The host relay H1 drains on SIGTERM (GOAWAY, its listener closed) with a long download
    open through it, and H2 starts on the same port at once: every new client of the container
    relay is served by H2 within 2 s, none is turned away with "takes no new streams" or
    "shutting down", and the download through H1 finishes."""
    e = world(sc)
    sc.server("sink-source", e.d + "/dl.sock")
    sc.server("echo", e.d + "/echo.sock")
    sections = fwd("dl", e.listen, "unix:%s/dl.sock" % e.d) + fwd("echo", e.listen, "unix:%s/echo.sock" % e.d)
    first = relay_of(sc, e, sections, "h1.conf", head="drain-timeout = 120s\n")
    cont = relay_of(sc, e, fwd("dl", "unix:%s/c-dl.sock" % e.d, e.remote)
                    + fwd("echo", "unix:%s/c-echo.sock" % e.d, e.remote), "cont.conf")
    link_up(cont, e)
    size = (8 if VALGRIND else 64) * MIB
    dl = connect(e.d + "/c-dl.sock", timeout=30 * SLOW)
    sc.closing(dl)
    dl.sendall(size.to_bytes(8, "big") + b"12345678")
    got = len(recv_exact(dl, MIB))
    first.signal(signal.SIGTERM)
    wait_for(lambda: "stopping: no new connections" in first.text(), what="H1 draining")
    second = relay_of(sc, e, sections, "h2.conf")
    times = []
    for i in range(5):
        t0 = time.monotonic()
        payload = b"new client %d\n" % i
        try:
            answer = echo_once(e.d + "/c-echo.sock", payload, timeout=5 * SLOW)
        except OSError as ex:
            answer = repr(ex).encode()
        times.append(time.monotonic() - t0)
        assert answer == payload, "new client %d after H1's GOAWAY got %r in %.2f s; container log:\n%s" % (
            i, answer, times[-1], cont.text()[-3000:])
        assert times[-1] < 2 * SLOW, "new client %d after H1's GOAWAY waited %.2f s" % (i, times[-1])
    print("# new clients after the GOAWAY served in %s s" % ", ".join("%.3f" % t for t in times), flush=True)
    text = cont.text()
    for words in ("takes no new streams", "shutting down"):
        assert words not in text, "a client was turned away with %r:\n%s" % (words, text[-3000:])
    assert "shared link from" in second.text(), "H2 served no link:\n" + second.text()
    while got < size:
        b = dl.recv(min(1 << 20, size - got))
        assert b, "the download through the draining H1 ended after %d of %d bytes" % (got, size)
        got += len(b)
    dl.shutdown(socket.SHUT_WR)
    assert len(recv_exact(dl, 32)) == 32, "the download's server did not answer its end"
    dl.close()
    assert first.wait(timeout=10) == 0, first.text()


# ---- 3. links count -------------------------------------------------------------------------

def test_links_are_counted_against_max_links(sc):
    """A host relay with 64 descriptors (prlimit), max-links = 4 on its token listener and an
    unrelated local forward: of 20 links a token holder opens and keeps, 4 are taken, the rest
    refused (a status, or the connection closed) with max-links in the log, and the local
    forward still answers."""
    need("prlimit")
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    sc.server("echo", e.d + "/local-up.sock")
    sections = fwd("svc", e.listen, "unix:%s/echo.sock" % e.d, max_conns=2, max_links=4)
    sections += "[local]\nlisten = unix:%s/local.sock\nconnect = unix:%s/local-up.sock\n\n" % (e.d, e.d)
    host = relay_of(sc, e, sections, "host.conf", prefix=["prlimit", "--nofile=64"])
    links = sc.closing([])
    outcomes = []
    for _ in range(20):
        s, outcome = link_handshake(e)
        outcomes.append(outcome)
        if s:
            links.append(s)
            s.sendall(H2_PREFACE)
    print("# the 20 links: %s" % "; ".join(outcomes), flush=True)
    assert outcomes[:4] == ["ok"] * 4, "the first 4 links: %s" % outcomes[:4]
    assert "ok" not in outcomes[4:], "links beyond max-links = 4 taken: %s" % outcomes
    wait_for(lambda: "max-links" in host.text(), what="max-links named in the host relay's log")
    assert echo_once(e.d + "/local.sock", b"still here") == b"still here"


# ---- 4. a stream beyond the limits ------------------------------------------------------------

def beyond_the_limit(sc, two_services):
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    # (preauth-max, by default max-conns', is one per listener)
    sections = fwd("echo", e.listen, "unix:%s/echo.sock" % e.d, max_conns=1, preauth_max=64)
    if two_services:
        sections += fwd("other", e.listen, "unix:%s/echo.sock" % e.d, max_conns=10, preauth_max=64)
    relay_of(sc, e, sections, "host.conf")
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c-echo.sock" % e.d, e.remote, connect_timeout="2s"), "cont.conf")
    link_up(cont, e)
    held = Session(e.d + "/c-echo.sock")
    sc.closing(held)
    held.round_trip()
    t0 = time.monotonic()
    s = connect(e.d + "/c-echo.sock", timeout=10 * SLOW)
    sc.closing(s)
    try:
        s.sendall(b"one too many\n")
        got = s.recv(100)
    except (ConnectionResetError, BrokenPipeError):
        got = b""
    except socket.timeout:
        raise AssertionError("the client beyond the host's max-conns = 1 was still open %.0f s later "
                             "(connect-timeout = 2s); container log:\n%s" % (10 * SLOW, cont.text()[-2000:]))
    took = time.monotonic() - t0
    print("# the client beyond the limit was closed after %.2f s" % took, flush=True)
    assert got == b"", "the client beyond max-conns = 1 got %r" % got
    assert took < 2 + 1.5 * SLOW, "the client beyond the limit was closed after %.2f s (connect-timeout = 2s)" % took
    wait_for(lambda: [line for line in cont.text().splitlines() if "upstream unavailable" in line
                      and "max-conns" in line],
             what="the container log saying why, in words with max-conns")
    held.round_trip()


def test_a_stream_beyond_the_links_stream_limit_waits_at_most_connect_timeout(sc):
    """One service with max-conns = 1 (the link's SETTINGS allow one stream): a second client
    is closed within connect-timeout (2 s) with the reason in plain words."""
    beyond_the_limit(sc, two_services=False)


def test_a_stream_beyond_a_services_max_conns_is_refused_at_once(sc):
    """Two services, the first with max-conns = 1 (the link allows more streams): a second
    client of it is refused within connect-timeout with the reason in plain words."""
    beyond_the_limit(sc, two_services=True)


def test_stream_ids_running_out_take_a_new_link(sc):
    """With SF_TEST_STREAM_ID_START = 2^31 - 21 (a test hook: new links' streams start there)
    a link has 11 stream ids: 30 clients one after another are all served, by a new link once
    the ids ran out (the container log has "link to ... up" more than once)."""
    rc, out, _ = run_sockferry(["version"])
    if "test-hooks=yes" not in out:
        raise Skip("this build has no test hooks (meson setup -Dtest_hooks=true): SF_TEST_STREAM_ID_START is not "
                   "honoured")
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    relay_of(sc, e, fwd("echo", e.listen, "unix:%s/echo.sock" % e.d), "host.conf")
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c-echo.sock" % e.d, e.remote), "cont.conf",
                    env={"SF_TEST_STREAM_ID_START": str(2**31 - 21)})
    link_up(cont, e)
    for i in range(30):
        payload = b"client %d\n" % i
        got = echo_once(e.d + "/c-echo.sock", payload, timeout=5 * SLOW)
        assert got == payload, "client %d (of 30) got %r; container log:\n%s" % (i, got, cont.text()[-3000:])
    ups = cont.text().count("link to %s up" % e.remote)
    assert ups >= 2, "30 streams from id 2^31 - 21 on %d link(s):\n%s" % (ups, cont.text()[-3000:])


# ---- 5. no fall-through on the default link ---------------------------------------------------

def test_a_refused_stream_moves_on_to_the_next_candidate(sc):
    """connect = the host relay (whose upstream is down) | a local socket, link = shared (the
    default): each of 3 clients is served by the local socket, stats name it as the candidate
    that works, and `sockferry check` exits 0 naming it OK."""
    e = world(sc)
    sc.server("tagged", e.d + "/local.sock", tag="local")
    relay_of(sc, e, fwd("echo", e.listen, "unix:%s/nothing.sock" % e.d), "host.conf")
    local = "unix:%s/local.sock" % e.d
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c.sock" % e.d, "%s|%s" % (e.remote, local), connect_timeout="2s"),
                    "cont.conf")
    link_up(cont, e)
    for i in range(3):
        s = connect(e.d + "/c.sock", timeout=5 * SLOW)
        with s:
            s.sendall(b"hello\n")
            got = s.recv(100)
        assert got == b"local:hello\n", "client %d of 3 got %r; container log:\n%s" % (i + 1, got, cont.text()[-2000:])
    st = forward_stats(stats(e, "cont.conf"), "echo")
    assert st["candidate"] == local, "stats name %r as the candidate that works, not %s" % (st["candidate"], local)
    rc, out, err = run_sockferry(["check", "-c", e.d + "/cont.conf"])
    lines = [line for line in out.splitlines() if line.startswith("echo: ")]
    assert rc == 0 and lines and lines[-1].startswith("echo: OK (%s" % local), (rc, out, err)


# ---- 6. the host down -----------------------------------------------------------------------

def test_clients_are_closed_at_once_while_nothing_listens_on_the_host_port(sc):
    """Nothing listens on the host port (connect-timeout = 5s): 10 clients, 100 ms apart, are
    each closed within 2 s, and the log says the link is down and that it was refused."""
    e = world(sc)
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c.sock" % e.d, e.remote, connect_timeout="5s"), "cont.conf")
    wait_for(lambda: "link to %s down" % e.remote in cont.text(), what="the link down in the log")
    took = [None] * 10

    def client(i):
        t0 = time.monotonic()
        assert closed_without_answer(e.d + "/c.sock", timeout=10 * SLOW)
        took[i] = time.monotonic() - t0
    threads = []
    for i in range(10):
        threads.append(threading.Thread(target=client, args=(i,), daemon=True))
        threads[-1].start()
        time.sleep(0.1)
    for t in threads:
        t.join(20 * SLOW)
    print("# 10 clients closed after %s s" % ", ".join("%.2f" % t if t is not None else "?" for t in took), flush=True)
    assert None not in took, "a client was not closed: %s" % took
    # (under valgrind still well below connect-timeout: the wait is what is tested)
    assert max(took) < min(2.0 * SLOW, 4), "clients waited up to %.2f s for a host port nobody listens on" % max(took)
    lines = [line for line in cont.text().splitlines() if "upstream unavailable" in line]
    assert any("link to %s down" % e.remote in line and "refused" in line for line in lines), \
        "no client's line says the link is down and refused:\n" + "\n".join(lines[-5:])


def test_a_host_started_after_a_long_outage_serves_a_new_client(sc):
    """The host relay away long enough for the backoff to grow to seconds (its port refusing
    the dials), then started: a client that connects at once is served (connect-timeout 5 s),
    and how long it took is printed. That the client brought the link's next dial forward rather
    than waited out the backoff is judged by test_faults.py's outage test, where the client comes
    right after a failed dial and the relay is already up: here the backoff's next dial may be due
    at any moment, and a loaded machine took 1.97 s to start a host relay and serve the client
    through it (this test judged < 1.5 s until then)."""
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c.sock" % e.d, e.remote, connect_timeout="5s"), "cont.conf")
    wait_for(lambda: "link to %s down" % e.remote in cont.text(), what="the link down in the log")
    down = time.monotonic()
    # 100 ms doubling: after 4 s the next dial is 1.6 to 3.2 s away
    wait_for(lambda: time.monotonic() - down >= 4, what="the backoff grown")
    relay_of(sc, e, fwd("echo", e.listen, "unix:%s/echo.sock" % e.d), "host.conf")
    t0 = time.monotonic()
    got = echo_once(e.d + "/c.sock", b"back?", timeout=10 * SLOW)
    took = time.monotonic() - t0
    print("# the client was served %.2f s after the host came back" % took, flush=True)
    assert got == b"back?", "the client got %r; container log:\n%s" % (got, cont.text()[-2000:])


def test_a_host_that_stalls_the_handshake_then_is_replaced_serves_the_waiting_client(sc):
    """A listener that accepts and says nothing holds the link's handshake; a client waits;
    within its connect-timeout (5 s) the listener gives way to a real host relay: the waiting
    client is served. (Under valgrind and ASan 5 s x SLOW: there the host relay's own start
    took more than 5 s on a loaded CI machine. The handshake-timeout is as long: a handshake
    that times out is a wrong peer, and the clients waiting for it are told so at once.)"""
    e = world(sc)
    ct = 5 * SLOW
    sc.server("echo", e.d + "/echo.sock")
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", e.port))
    ls.listen(16)
    sc.closing(ls)
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c.sock" % e.d, e.remote, connect_timeout="%ds" % ct,
                                     handshake_timeout="%ds" % ct), "cont.conf")
    ls.settimeout(10 * SLOW)
    stalled, _ = ls.accept()
    sc.closing(stalled)
    t0 = time.monotonic()
    c = connect(e.d + "/c.sock", timeout=10 * SLOW)
    sc.closing(c)
    c.sendall(b"waited")
    wait_for(lambda: forward_stats(stats(e, "cont.conf"), "echo")["active"] == 1,
             what="the client waiting on the stalled handshake")
    ls.close()
    relay_of(sc, e, fwd("echo", e.listen, "unix:%s/echo.sock" % e.d), "host.conf")
    stalled.close()
    try:
        got = recv_exact(c, 6)
    except (ConnectionResetError, socket.timeout) as ex:
        got = repr(ex).encode()
    took = time.monotonic() - t0
    print("# the waiting client got its answer after %.2f s" % took, flush=True)
    assert got == b"waited", "the client that waited for the link got %r after %.2f s; container log:\n%s" % (
        got, took, cont.text()[-2000:])
    assert took < ct + SLOW, "the waiting client took %.2f s (connect-timeout = %ds)" % (took, ct)


# It ends with the relay: started by the shell that then becomes the relay (exec), it asks to be
# killed when that process ends. Before, it outlived the test by its hour of sleep, and kept
# the test's network namespace with it.
UDP_SINK = """
import ctypes, signal, socket, time
PR_SET_PDEATHSIG = 1
ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
print("sink", flush=True)
time.sleep(3600)
"""


def test_a_resolve_slower_than_connect_timeout_is_never_started_twice(sc):
    """The host's name resolves only after 2 s (a DNS server that never answers; glibc gives up
    after its timeout) and connect-timeout is 300 ms: each attempt times out while its resolve
    still runs on libuv's thread pool, and the next attempt (the backoff's, or a client's) must
    not start that request again before its callback (a request queued twice: a jump to
    address 0 in a pool thread, seen under valgrind). Clients are closed with the cause, the
    relay lives and ends clean (no leak, under valgrind and ASan too)."""
    e = world(sc)
    d = sc.tmpdir(mode=0o755)
    resolv = os.path.join(d, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:2 attempts:1\n")
    os.chmod(resolv, 0o644)
    # A network namespace of its own: a DNS "server" on 127.0.0.1:53 that reads nothing, and a
    # non-loopback address so that AI_ADDRCONFIG asks for IPv4 at all.
    prefix = ["unshare", "-m", "-n", "sh", "-c",
              'ip link set lo up && ip link add sf-d0 type veth peer name sf-d1 && ip addr add 198.18.0.1/32 dev sf-d0 && '
              'ip link set sf-d1 up && ip link set sf-d0 up && mount --bind "$0" /etc/resolv.conf && '
              '{ python3 -c "$1" & } && sleep 0.5 && shift && exec "$@"', resolv, UDP_SINK]
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c.sock" % e.d, "tcp:sf-slow-resolve.test:%d" % e.port,
                               connect_timeout="300ms"), "cont.conf", prefix=prefix,
                    # before the relay: a namespace, a veth, a Python DNS sink and 0.5 s of sleep
                    # (a loaded CI machine once took more than the usual 10 s for them all)
                    ready_timeout=30 * SLOW)
    wait_for(lambda: "link to tcp:sf-slow-resolve.test:%d down" % e.port in cont.text(), timeout=10 * SLOW,
             what="the link down in the log")
    t_end = time.monotonic() + 5
    n = 0
    while time.monotonic() < t_end:
        assert closed_without_answer(e.d + "/c.sock", timeout=10 * SLOW), "a client got an answer from nowhere"
        n += 1
        time.sleep(0.2)
    print("# %d clients closed during 5 s of 2 s resolves and 300 ms attempts" % n, flush=True)
    st = forward_stats(stats(e, "cont.conf"), "echo")
    assert st["active"] == 0, "clients still open: %s" % st
    cont.stop()


# ---- 7. reload reaches links ----------------------------------------------------------------

def test_a_reload_that_raises_max_conns_reaches_the_open_link(sc):
    """The host serves max-conns = 2 and the container holds 2 streams open; the host's reload
    raises it to 4: a 3rd and a 4th client are served over the same link (no reconnect)."""
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    host = relay_of(sc, e, fwd("echo", e.listen, "unix:%s/echo.sock" % e.d, max_conns=2), "host.conf")
    cont = relay_of(sc, e, fwd("echo", "unix:%s/c.sock" % e.d, e.remote, connect_timeout="2s"), "cont.conf")
    link_up(cont, e)
    held = sc.closing([Session(e.d + "/c.sock", timeout=5 * SLOW) for _ in range(2)])
    for s in held:
        s.round_trip()
    write_conf(e.d, open(e.d + "/host.conf").read().replace("max-conns = 2", "max-conns = 4"), "host.conf")
    host.signal(signal.SIGHUP)
    wait_for(lambda: re.search(r"reload: \d+ added, \d+ removed, 1 changed", host.text()),
             what="the host relay's reload")
    for i in (3, 4):
        s = Session(e.d + "/c.sock", timeout=5 * SLOW)
        held.append(s)
        try:
            s.round_trip()
        except (OSError, ConnectionError) as ex:
            raise AssertionError("client %d after the reload to max-conns = 4: %r; container log:\n%s"
                                 % (i, ex, cont.text()[-2000:]))
    for s in held:
        s.round_trip()
    link = stats(e, "cont.conf")["links"]
    assert len(link) == 1 and link[0]["reconnects"] == 0, link


def test_a_reload_that_changes_a_forward_keeps_its_counters(sc):
    """16 connections open through a forward, clients coming and going in a thread, a reload
    that changes its idle-timeout: in every sample of `sockferry stats` total = closed +
    active and total never goes back; once all are closed, bytes up are every byte sent."""
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    section = "[f]\nlisten = unix:%s/f.sock\nconnect = unix:%s/echo.sock\nidle-timeout = 1h\n\n" % (e.d, e.d)
    r = relay_of(sc, e, section, "relay.conf")
    sent = [0]
    lock = threading.Lock()

    def trip(s, payload):
        s.round_trip(payload)
        with lock:
            sent[0] += len(payload)
    held = sc.closing([Session(e.d + "/f.sock") for _ in range(16)])
    for s in held:
        trip(s, b"x" * 100)
    halt = threading.Event()
    errors = []

    def churner():
        while not halt.is_set():
            try:
                payload = b"y" * 10
                assert echo_once(e.d + "/f.sock", payload) == payload
                with lock:
                    sent[0] += len(payload)
            except (OSError, AssertionError) as ex:
                errors.append(repr(ex))
                return
    t = threading.Thread(target=churner, daemon=True)
    t.start()
    samples = []

    def sample(n):
        for _ in range(n):
            samples.append(forward_stats(stats(e, "relay.conf"), "f"))
    try:
        sample(5)
        write_conf(e.d, open(e.d + "/relay.conf").read().replace("idle-timeout = 1h", "idle-timeout = 2h"),
                   "relay.conf")
        r.signal(signal.SIGHUP)
        sample(10)
        wait_for(lambda: re.search(r"reload: \d+ added, \d+ removed, 1 changed", r.text()), what="the reload")
        sample(10)
    finally:
        halt.set()
        t.join(10)
    assert not errors, "a client during the reload: %s" % errors[0]
    for s in held:
        trip(s, b"z" * 1000)
        s.close()
    wait_for(lambda: forward_stats(stats(e, "relay.conf"), "f")["active"] == 0, what="every connection closed")
    sample(1)
    bad = [x for x in samples if x["total"] != x["closed"] + x["active"]]
    assert not bad, "samples where total != closed + active: %s" % [(x["total"], x["closed"], x["active"])
                                                                   for x in bad[:5]]
    back = [(a["total"], b["total"]) for a, b in zip(samples, samples[1:]) if b["total"] < a["total"]]
    assert not back, "total went back: %s" % back[:5]
    last = samples[-1]
    assert last["bytes_up"] == sent[0] and last["bytes_down"] == sent[0], (
        "after the reload the forward counted %d bytes up, %d down of the %d sent both ways (the 16 old "
        "connections' bytes?)" % (last["bytes_up"], last["bytes_down"], sent[0]))


# ---- 8. a clean life ------------------------------------------------------------------------

# The drain of the SIGTERM tests: the open connections' round trips after SIGTERM must fit in
# it, through two relays that may each be under valgrind on a loaded machine.
DRAIN = 2 if SLOW == 1 else 6


def sigterm_scene(sc, modes, services, drain="%ds" % DRAIN):
    """A host relay of services (1 or 2) on one port, a container relay with a forward per link
    mode in modes to the last service, one connection open through each; returns (e, host, the
    connections)."""
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    names = ["one", "two"][:services]
    host = relay_of(sc, e, "".join(fwd(n, e.listen, "unix:%s/echo.sock" % e.d) for n in names), "host.conf",
                    head="drain-timeout = %s\n" % drain)
    cont = relay_of(sc, e, "".join(fwd("c-" + m, "unix:%s/c-%s.sock" % (e.d, m), e.remote, service=names[-1], link=m)
                                   for m in modes), "cont.conf")
    if "shared" in modes:
        link_up(cont, e)
    held = sc.closing([Session("%s/c-%s.sock" % (e.d, m), timeout=5 * SLOW) for m in modes])
    for s in held:
        s.round_trip()
    return e, host, held


def stopped_within(host, seconds, what):
    t0 = time.monotonic()
    try:
        rc = host.proc.wait(timeout=seconds * SLOW + 5)
    except subprocess.TimeoutExpired:
        raise AssertionError("the host relay was still running %.0f s after %s:\n%s" % (
            seconds * SLOW + 5, what, host.text()[-3000:]))
    took = time.monotonic() - t0
    return rc, took


def sigterm_test(modes, services):
    def test(sc):
        e, host, held = sigterm_scene(sc, modes, services)
        host.signal(signal.SIGTERM)
        t0 = time.monotonic()
        for m, s in zip(modes, held):
            try:
                s.round_trip()
            except (OSError, ConnectionError) as ex:
                raise AssertionError("the open %s connection failed %.2f s into the drain: %r; host log:\n%s" % (
                    m, time.monotonic() - t0, ex, host.text()[-2000:]))
        rc, took = stopped_within(host, DRAIN + 1, "SIGTERM (drain-timeout = %ds)" % DRAIN)
        print("# the host relay exited %d %.2f s after SIGTERM" % (rc, took), flush=True)
        assert rc == 0, "the host relay exited %d:\n%s" % (rc, host.text()[-3000:])
        # (under valgrind its exit, the leak check, takes seconds of its own)
        assert took < (DRAIN + 1 if SLOW == 1 else DRAIN + 3 * SLOW), \
            "the host relay took %.2f s to end after SIGTERM (drain-timeout = %ds)" % (took, DRAIN)
        # the restart that follows is not refused by a process still there
        relay_of(sc, e, "".join(fwd(n, e.listen, "unix:%s/echo.sock" % e.d) for n in ["one", "two"][:services]),
                 "host.conf")
    test.__name__ = "test_sigterm_ends_the_host_relay_%s_%s" % ("_and_".join(m.replace("-", "_") for m in modes),
                                                               "one_service" if services == 1 else "two_services")
    test.__doc__ = ("SIGTERM to a host relay with %s on %s, a connection open: the connection goes on in the "
                    "drain, the relay exits 0 within drain-timeout (2 s; 6 s under valgrind and ASan) + 1 s, and a "
                    "restart on the same configuration comes up."
                    % (" and ".join("a %s client" % m for m in modes), "one service" if services == 1 else
                       "two services (the clients' is the second)"))
    return test


for _modes in (["shared"], ["per-connection"], ["shared", "per-connection"]):
    for _services in (1, 2):
        _t = sigterm_test(_modes, _services)
        globals()[_t.__name__] = _t


def test_a_second_sigterm_ends_the_host_relay_at_once(sc):
    """Both kinds of client on the second of two services, drain-timeout = 60s: a second
    SIGTERM right after the first ends the host relay within 1 s."""
    e, host, _ = sigterm_scene(sc, ["shared", "per-connection"], 2, drain="60s")
    host.signal(signal.SIGTERM)
    wait_for(lambda: "stopping" in host.text(), what="the host relay stopping")
    host.signal(signal.SIGTERM)
    rc, took = stopped_within(host, 1, "a second SIGTERM")
    print("# the host relay exited %d %.2f s after the second SIGTERM" % (rc, took), flush=True)
    assert took < 1 * SLOW, "the host relay took %.2f s to end after a second SIGTERM" % took
    assert rc == 0, "the host relay exited %d:\n%s" % (rc, host.text()[-3000:])


# ---- 9. check tells the truth ---------------------------------------------------------------

def check_cell_test(mode, services, service_set):
    def test(sc):
        e = world(sc)
        sc.server("tagged", e.d + "/docker.sock", tag="docker")
        sc.server("tagged", e.d + "/other.sock", tag="other")
        names = ["docker", "other"][:services]
        relay_of(sc, e, "".join(fwd(n, e.listen, "unix:%s/%s.sock" % (e.d, n)) for n in names), "host.conf")
        keys = {"link": mode}
        if service_set:
            keys["service"] = "docker"
        # the forward's own name is not a service: by default it asks for "dk"
        # (refusals are statuses, so the timeouts, longer in slow builds, are never waited out)
        cont = relay_of(sc, e, fwd("dk", "unix:%s/c.sock" % e.d, e.remote, connect_timeout="%ds" % (2 * SLOW),
                                   **keys), "cont.conf")
        if mode == "shared":
            link_up(cont, e)
        s = connect(e.d + "/c.sock", timeout=5 * SLOW)
        with s:
            try:
                s.sendall(b"hello\n")
                got = s.recv(100)
            except (ConnectionResetError, BrokenPipeError):
                got = b""
        served = got == b"docker:hello\n"
        rc, out, err = run_sockferry(["check", "--timeout", "%ds" % (5 * min(SLOW, 3)), "-c", e.d + "/cont.conf"])
        print("# client %s; check exit %d: %s" % ("served" if served else "got %r" % got, rc, out.strip()),
              flush=True)
        # what the design says a client gets: a named service is served; no name is served by a
        # listener of one service and refused by one of several
        expect = service_set or services == 1
        assert served == expect, "the client %s (expected %s); container log:\n%s" % (
            "was served" if served else "got %r" % got, "served" if expect else "refused", cont.text()[-2000:])
        assert (rc == 0) == served, "the client was %s, but sockferry check exited %d:\n%s%s" % (
            "served" if served else "refused", rc, out, err)
    test.__name__ = "test_check_agrees_with_the_client_%s_%s_%s" % (
        mode.replace("-", "_"), "one_service" if services == 1 else "two_services",
        "service_set" if service_set else "no_service")
    test.__doc__ = ("link = %s, a host offering %s, the container forward %s: `sockferry check`'s exit status "
                    "agrees with whether a real client was served." % (
                        mode, "one service" if services == 1 else "two", "with service = docker" if service_set
                        else "without service ="))
    return test


for _mode in ("shared", "per-connection"):
    for _services in (1, 2):
        for _set in (True, False):
            _t = check_cell_test(_mode, _services, _set)
            globals()[_t.__name__] = _t


# ---- 10. log floods -------------------------------------------------------------------------

def log_time(line):
    """The time of a log line (its ISO 8601 stamp with milliseconds), in seconds."""
    m = re.match(r"\d{4}-\d\d-\d\dT(\d\d):(\d\d):(\d\d\.\d+)Z", line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else None


def test_stream_refusals_are_logged_at_most_5_a_second(sc):
    """5 000 streams (1 000 under valgrind) ask for a service the host does not offer: each
    relay logs at most 5 lines a second about it (10 in a calendar second that two of the
    limit's 1 s windows share), and once a refusal comes after the flood a summary line counts
    the ones not shown ("N similar messages suppressed")."""
    n = 1000 if VALGRIND else 5000
    e = world(sc)
    sc.server("echo", e.d + "/echo.sock")
    host = relay_of(sc, e, fwd("echo", e.listen, "unix:%s/echo.sock" % e.d), "host.conf")
    cont = relay_of(sc, e, fwd("nope", "unix:%s/c.sock" % e.d, e.remote, service="nope"), "cont.conf")
    link_up(cont, e)
    res = churn("abort", e.d + "/c.sock", n, 4)
    assert res["closed"] == n, "of %d clients asking for an unknown service %d were not refused: %s" % (
        n, n - res["closed"], res)
    print("# %d refused streams in %.2f s" % (n, res["seconds"]), flush=True)
    # one more refusal after the limit's window: the summary of the flood comes with it
    after = time.monotonic()
    wait_for(lambda: time.monotonic() - after > 1.2, what="the rate limit's window over")
    assert closed_without_answer(e.d + "/c.sock")
    problems = []
    for who, r in (("host", host), ("container", cont)):
        with contextlib.suppress(AssertionError):
            wait_for(lambda: re.search(r"\d+ similar messages suppressed", r.text()), timeout=5 * SLOW,
                     what="the %s relay's summary of the lines not shown" % who)
        lines = [line for line in r.text().splitlines() if "unknown service" in line]
        stamps = [t for t in map(log_time, lines) if t is not None]
        span = max(stamps) - min(stamps) if stamps else 0.0
        per_second = {}
        for line in lines:
            per_second[line[:19]] = per_second.get(line[:19], 0) + 1
        most = max(per_second.values(), default=0)
        summaries = [int(x) for x in re.findall(r"(\d+) similar messages suppressed", r.text())]
        print("# the %s relay's log: %d lines about the unknown service over %.1f s, at most %d in one second; "
              "summaries count %d not shown" % (who, len(lines), span, most, sum(summaries)), flush=True)
        if most > 10:
            problems.append("the %s relay logged %d lines in one second, e.g. %s" % (who, most, lines[0]))
        if len(lines) > 5 * (math.ceil(span) + 1):
            problems.append("the %s relay logged %d lines in %.1f s" % (who, len(lines), span))
        if sum(summaries) == 0:
            problems.append("the %s relay's log has no summary (\"N similar messages suppressed\") of the lines "
                            "not shown" % who)
    assert not problems, "; ".join(problems)


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
