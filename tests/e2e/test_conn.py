#!/usr/bin/env python3
"""End-to-end tests of one connection's way through the relay (relay/conn/): a candidate that
fails its handshake hands the client to the next one, a fake server that holds no token gets
at most the bytes sent with the client frame, a refused peer that keeps pushing cannot stall
the relay, and a client that hangs up while its upstream is dialled frees its descriptors.

Everything runs on loopback: the relays, real sockferry host relays with auth = token, and
small fake servers written here."""

import hashlib
import os
import re
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import (Scene, Skip, connect, echo_once, free_port, keygen, recv_all, run_sockferry,  # noqa: E402
                       wait_for, ENGINE, LINK_MODE, SANITIZED, VALGRIND)

# What the relay lets through to the peer before the status frame verified (relay/conn/state.h,
# SF_EARLY_MAX, doc/SECURITY.md): the client frame (with the service extension naming "cont":
# length, name, MAC) and at most 16 KiB of the client's bytes.
CLIENT_FRAME = 70 + 1 + len("cont") + 32
EARLY_MAX = 16384


def host_relay(sc, d, port, token, name="host"):
    """A host relay with auth = token on 127.0.0.1:port in front of d/service.sock."""
    return sc.relay(["relay", "-F", "%s:tcp:127.0.0.1:%d=unix:%s/service.sock,auth=token,token-file=%s"
                     % (name, port, d, token)])


def test_silent_candidate_falls_through_to_the_next(sc):
    """The issue's reproduction: connect = A B C where A accepts and says nothing. Clients are
    served by B after A's handshake-timeout, and check shows A failing and B answering."""
    d = sc.tmpdir()
    token = keygen(d)
    pa, pb, pc = free_port(), free_port(), free_port()
    sc.server("sink", "tcp:127.0.0.1:%d" % pa)
    sc.server("echo", d + "/service.sock")
    host_relay(sc, d, pb, token, "b")
    host_relay(sc, d, pc, token, "c")
    # Under valgrind or ASan, or on a loaded machine, the good relays greet slowly too: the
    # silent one is told by a longer wait.
    hs = "2000ms" if VALGRIND else "1000ms" if SANITIZED else "500ms"
    spec = "cont:unix:%s/c.sock=tcp:127.0.0.1:%d|tcp:127.0.0.1:%d|tcp:127.0.0.1:%d,auth=token,token-file=%s," \
        "handshake-timeout=%s" % (d, pa, pb, pc, token, hs)
    cont = sc.relay(["relay", "-F", spec])
    for i in range(3):
        msg = b"ping%d" % i
        assert echo_once(d + "/c.sock", msg) == msg, "client %d was not served:\n%s" % (i, cont.text())
    log = cont.text()
    assert "wrong peer: tcp:127.0.0.1:%d sent nothing within %s" % (pa, hs) in log, log
    # B worked and is tried first from then on: A's failure is logged once, not per client (over
    # the shared link: once as A's link going down, once as the first client moving on)
    if LINK_MODE == "per-connection":
        assert log.count("sent nothing within") == 1, log
    else:
        assert log.count("link to tcp:127.0.0.1:%d down (" % pa) == 1, log
        assert log.count("sent nothing within") == 2, log
    assert "upstream unavailable" not in log, log

    rc, out, err = run_sockferry(["check", "--link-only", "-F", spec])
    assert rc == 0, (rc, out, err)
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert lines[0].startswith("cont: FAIL wrong peer: tcp:127.0.0.1:%d sent nothing within %s" % (pa, hs)), out
    if LINK_MODE == "per-connection":
        assert re.fullmatch(r"cont: OK \(tcp:127\.0\.0\.1:%d, upstream answers, \d+ ms\)" % pb, lines[1]), out
    else:
        assert re.fullmatch(r"cont: OK \(tcp:127\.0\.0\.1:%d, shared link up, RTT [\d.]+ ms, service cont: upstream "
                            r"answers, \d+ ms\)" % pb, lines[1]), out


def test_auth_rejected_candidate_falls_through_with_the_early_bytes(sc):
    """A is a relay with another token: it refuses us after it got our frame and the client's
    first bytes; the same client connection goes on to B, which gets those bytes again."""
    d = sc.tmpdir()
    token, other = keygen(d), keygen(d, "other")
    pa, pb = free_port(), free_port()
    sc.server("after-eof", d + "/service.sock")
    a = host_relay(sc, d, pa, other, "a")
    host_relay(sc, d, pb, token, "b")
    spec = "cont:unix:%s/c.sock=tcp:127.0.0.1:%d|tcp:127.0.0.1:%d,auth=token,token-file=%s" % (d, pa, pb, token)
    cont = sc.relay(["relay", "-F", spec])
    payload = os.urandom(5000)
    s = connect(d + "/c.sock")
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    reply = recv_all(s)
    s.close()
    assert reply == b"%d %s\n" % (len(payload), hashlib.sha256(payload).hexdigest().encode()), \
        "%r\n%s" % (reply, cont.text())
    log = cont.text()
    assert "auth rejected: tcp:127.0.0.1:%d does not accept our token" % pa in log, log
    wait_for(lambda: "auth rejected" in a.text(), what="A's log naming the refusal")
    rc, out, err = run_sockferry(["check", "--link-only", "-F", spec])
    assert rc == 0, (rc, out, err)
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("cont: FAIL auth rejected: tcp:127.0.0.1:%d" % pa), out
    assert lines[1].startswith("cont: OK (tcp:127.0.0.1:%d, %s" % (
        pb, "upstream answers" if LINK_MODE == "per-connection" else "shared link up, RTT ")), out


def test_every_candidate_failing_is_one_line_and_reaches_a_chained_client(sc):
    """A silent, B refused: the client is closed and one line names both causes; a relay chained
    in front (we are its link server) gets that line as the reason of its status."""
    d = sc.tmpdir()
    token = keygen(d)
    pa, pb, pj = free_port(), free_port(), free_port()
    sc.server("sink", "tcp:127.0.0.1:%d" % pa)
    jump = sc.relay(["relay", "-F", "jump:tcp:127.0.0.1:%d=tcp:127.0.0.1:%d|tcp:127.0.0.1:%d,auth=token,"
                     "connect-auth=token,token-file=%s,handshake-timeout=300ms,connect-timeout=1s"
                     % (pj, pa, pb, token)])
    cont = sc.relay(["relay", "-F", "cont:unix:%s/c.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s"
                     % (d, pj, token)])
    got = echo_once(d + "/c.sock", b"request", to_end=True)
    assert got == b"", got
    # Over the shared link each candidate is its link, and its cause the link's
    a_cause = "wrong peer: tcp:127.0.0.1:%d sent nothing within 300ms" % pa
    first = a_cause if LINK_MODE == "per-connection" else "link to tcp:127.0.0.1:%d down since " % pa
    want = "upstream unavailable: every candidate failed: " + first
    wait_for(lambda: want in jump.text(), what="the summary in the jump relay's log")
    line = [ln for ln in jump.text().splitlines() if want in ln]
    assert len(line) == 1 and a_cause in line[0], jump.text()
    assert "connect tcp:127.0.0.1:%d: Connection refused" % pb in line[0], jump.text()
    wait_for(lambda: "every candidate failed: " + first in cont.text(),
             what="the summary as the reason the container relay got")
    rc, out, err = run_sockferry(["check", "--link-only", "-F", "x:unix:%s/x.sock=tcp:127.0.0.1:%d|"
                                  "tcp:127.0.0.1:%d,auth=token,token-file=%s,handshake-timeout=300ms"
                                  % (d, pa, pb, token)])
    lines = out.splitlines()
    assert rc == 1 and len(lines) == 2, (rc, out, err)
    assert lines[0].startswith("x: FAIL wrong peer: tcp:127.0.0.1:%d" % pa), out
    assert lines[1].startswith("x: FAIL connect tcp:127.0.0.1:%d: Connection refused" % pb), out


def greet_and_count(got, done):
    """A connection handler that sends a valid-looking sockferry/1 hello, never a status, and
    counts what arrives until the relay closes the link."""
    def handle(c):
        c.settimeout(30)
        c.sendall(b"SFRY\x01" + os.urandom(32))
        try:
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                got[0] += len(b)
        finally:
            done.set()
    return handle


def test_a_fake_server_gets_at_most_the_early_bytes(sc):
    """Finding b: a peer that greets as a relay but holds no token, and never sends a status,
    gets the client frame and at most 16 KiB of the client's stream, however much it sends."""
    d = sc.tmpdir()
    token = keygen(d)
    got, done = [0], threading.Event()
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    sc.serve(ls, greet_and_count(got, done))
    # Both bounds end the test (the fake server never answers; per connection the relay waits for
    # their sum), they are not what it tests: with 500 ms the dial, or the fake server's greeting
    # from its Python thread, came late on a loaded machine in every build (CI's run of 0795e2e:
    # the fake server got nothing); under memcheck or ASan the dial has taken seconds.
    slow = VALGRIND or SANITIZED
    cont = sc.relay(["relay", "-F", "cont:unix:%s/c.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s,"
                     "handshake-timeout=2s,connect-timeout=%s" % (d, ls.getsockname()[1], token, "5s" if slow else "2s")])
    s = sc.closing(connect(d + "/c.sock", timeout=30))
    sent = 0
    chunk = b"s" * 65536
    s.settimeout(0.2)
    # The client writes as long as the relay takes its bytes, and until the link is gone.
    while not done.is_set():
        try:
            sent += s.send(chunk)
        except socket.timeout:
            continue
        except OSError:
            break
    print("# the client wrote %d bytes, the fake server received %d" % (sent, got[0]))
    assert got[0] <= CLIENT_FRAME + EARLY_MAX, "the fake server got %d bytes" % got[0]
    assert got[0] >= 70, "not even the client frame arrived: %d" % got[0]
    # The fake server saw the close before the relay's line reached its log (seen under
    # valgrind): waited for, not read at once.
    wait_for(lambda: "did not confirm the link in time" in cont.text(), timeout=5,
             what="the relay to say why it closed the link", detail=cont.text)


# Connects to 127.0.0.1:argv[1] as a peer without the token again and again for argv[2]
# seconds from argv[3] threads: each reads the hello, sends a client frame with a wrong MAC
# (the relay answers AUTH_REJECTED and lingers) and pushes bytes as fast as it can until the
# relay closes the link. Prints "flooding" once the first refusal came back, "done" at the end.
FLOODER = r"""
import os, socket, sys, threading, time
port, seconds, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
end = time.monotonic() + seconds
started = threading.Event()
junk = b"j" * (1 << 20)
def flood():
    while time.monotonic() < end:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.recv(37, socket.MSG_WAITALL)
            s.sendall(b"SFRY\x01\x00" + os.urandom(64))
            s.recv(34, socket.MSG_WAITALL)
            started.set()
            s.settimeout(1)
            while time.monotonic() < end:
                s.sendall(junk)
        except OSError:
            pass
        finally:
            s.close()
ts = [threading.Thread(target=flood) for _ in range(n)]
for t in ts:
    t.start()
started.wait(30)
print("flooding", flush=True)
for t in ts:
    t.join()
print("done", flush=True)
"""


def test_a_refused_peer_pushing_data_does_not_stall_other_clients(sc):
    """Finding a: after its refused handshake a peer without the token keeps pushing. The
    relay drains it in bounded turns, so 400 round trips of a good client through the same
    relay finish while the flood still runs (measured on a 2-core machine: about 3 s; before
    the fix each drain held the loop while the flooder kept up, and the flood ended first)."""
    if VALGRIND:
        raise Skip("compares the progress of two clients: under valgrind the flood alone saturates the relay")
    d = sc.tmpdir()
    token = keygen(d)
    port = free_port()
    sc.server("echo", d + "/service.sock")
    host = host_relay(sc, d, port, token)
    sc.relay(["relay", "-F", "cont:unix:%s/c.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s" % (d, port, token)])
    # 60 s of flood (the scene kills it once the test ends): a loaded CI machine once took more
    # than 20 s for them on the portable engine (a stall holds for the whole flood, whatever its
    # length).
    flood = sc.popen([sys.executable, "-c", FLOODER, str(port), "60", "8"], stdout=subprocess.PIPE)
    sc.closing(flood.stdout)
    assert flood.stdout.readline() == b"flooding\n", "the flooder never got its refusal"
    s = sc.closing(connect(d + "/c.sock", timeout=60))
    for i in range(400):
        msg = b"round trip %03d" % i
        s.sendall(msg)
        assert s.recv(len(msg), socket.MSG_WAITALL) == msg
    assert flood.poll() is None, "the flood ended before 400 round trips of a good client did"
    assert "auth rejected" in host.text()


def full_backlog_listener(sc):
    """A TCP listener whose accept queue is full: a new connect to it stays in progress (the
    kernel drops its SYNs). Returns its port."""
    ls = sc.closing(socket.socket())
    ls.bind(("127.0.0.1", 0))
    ls.listen(0)
    port = ls.getsockname()[1]
    for _ in range(4):
        c = sc.closing(socket.socket())
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
    return port


def test_a_client_that_hangs_up_drops_its_dial(sc):
    """Finding k: a client that sent a byte and then closed fully no longer holds its dial
    (and two descriptors) until connect-timeout."""
    if ENGINE == "portable":
        raise Skip("libuv reports a client's full hang-up as an EOF only, which a half-close gives too: "
                   "the portable engine keeps the dial until it connects or connect-timeout")
    d = sc.tmpdir()
    port = full_backlog_listener(sc)
    r = sc.relay(["relay", "-v", "-F", "k:unix:%s/k.sock=tcp:127.0.0.1:%d,connect-timeout=120s" % (d, port)])
    base = r.fds()
    for i in range(3):
        s = connect(d + "/k.sock")
        s.sendall(b"x")
        wait_for(lambda: r.fds() == base + 2, what="the relay dialling for client %d" % i)
        s.close()
        wait_for(lambda: r.fds() == base, what="the dial dropped after client %d hung up" % i)
    assert r.text().count("the client hung up while its upstream was being dialed") == 3, r.text()


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
