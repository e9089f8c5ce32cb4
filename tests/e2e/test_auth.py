#!/usr/bin/env python3
"""End-to-end tests of the authenticated link (auth = token, sockferry/1).

The "container" is a network namespace joined to the host by a veth pair (198.18.0.0/15
addresses only); `ip netns exec` gives it an /etc/hosts where host.docker.internal is the
host end, as Docker Desktop does."""

import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sfharness  # noqa: E402
from sfharness import (Relay, Server, Skip, Tap, connect, free_port, recv_all, run_sockferry,  # noqa: E402
                       tmpdir, transfer_both_ways, wait_for, VALGRIND)

NS = "sf-auth-%d" % os.getpid()
HOST_IF, CONT_IF = "sfh%d" % (os.getpid() % 100000), "sfc%d" % (os.getpid() % 100000)
HOST_IP, CONT_IP = "198.18.0.1", "198.18.0.2"
PORT = 7777
MIB = 1 << 20


def netns_up():
    sfharness.netns_up(NS, HOST_IF, CONT_IF, HOST_IP, CONT_IP)


def netns_down():
    sfharness.netns_down(NS, HOST_IF)


class Env:
    """A host service, a token, a host relay and a container relay in the namespace."""

    def __init__(self, host_token=None, cont_token=None, service="sink-source", host_relay=True,
                 cont_extra="", host_extra=""):
        self.d = tmpdir()
        self.token = self.keygen("token")
        self.srv = Server(service, self.d + "/service.sock") if service else None
        self.host = None
        if host_relay:
            self.host = Relay(["relay", "-F", "host:tcp:%s:%d=unix:%s/service.sock,auth=token,token-file=%s%s"
                               % (HOST_IP, PORT, self.d, host_token or self.token, host_extra)])
        self.cont = Relay(["relay", "-F", "cont:unix:%s/container.sock=tcp:host.docker.internal:%d,auth=token,"
                           "token-file=%s%s" % (self.d, PORT, cont_token or self.token, cont_extra)],
                          prefix=["ip", "netns", "exec", NS])

    def keygen(self, name):
        path = os.path.join(self.d, name)
        rc, out, err = run_sockferry(["keygen", "-o", path])
        assert rc == 0, err
        return path

    def close(self, expect=0):
        self.cont.stop(expect)
        if self.host:
            self.host.stop(expect)
        if self.srv:
            self.srv.stop()
        shutil.rmtree(self.d, ignore_errors=True)


def client_fails_with(env, words, timeout=10):
    s = connect(env.d + "/container.sock", timeout=timeout)
    start = time.monotonic()
    try:
        # A failure that comes back fast may close the client before it writes.
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = s.recv(100)
    except (BrokenPipeError, ConnectionResetError):
        data = b""
    s.close()
    assert data == b"", "the client got bytes from a failed link: %r" % data
    wait_for(lambda: words in env.cont.text(), timeout=timeout, what=repr(words) + " in the container log")
    return time.monotonic() - start


def test_service_through_container_relay_tcp_auth_host_relay():
    e = Env()
    try:
        transfer_both_ways(e.d + "/container.sock", (4 if VALGRIND else 32) * MIB)
        # the listening side bound a non-loopback address: allowed because auth = token
        assert "listening on tcp:%s:%d" % (HOST_IP, PORT) in e.host.text()
    finally:
        e.close()


def test_half_close_crosses_the_authenticated_link():
    e = Env(service="after-eof")
    try:
        s = connect(e.d + "/container.sock")
        s.sendall(b"x" * 100000)
        s.shutdown(socket.SHUT_WR)
        reply = recv_all(s)
        s.close()
        assert reply.startswith(b"100000 "), reply
    finally:
        e.close()


def test_wrong_token_is_auth_rejected_on_both_sides():
    e = Env()
    try:
        wrong = e.keygen("wrong")
        bad = Relay(["relay", "-F", "bad:unix:%s/bad.sock=tcp:host.docker.internal:%d,auth=token,token-file=%s"
                     % (e.d, PORT, wrong)], prefix=["ip", "netns", "exec", NS])
        try:
            s = connect(e.d + "/bad.sock")
            s.sendall(b"secret request")
            assert s.recv(10) == b""
            s.close()
            wait_for(lambda: "auth rejected" in bad.text(), what="auth rejected in the container log")
            text = bad.text()
            assert "tcp:host.docker.internal:%d does not accept our token (%s)" % (PORT, wrong) in text, text
            with open(wrong) as f:
                assert f.read().strip() not in text, "the token leaked into the log"
            wait_for(lambda: "auth rejected: %s:" % CONT_IP in e.host.text(), what="host log names the peer")
        finally:
            bad.stop()
        # a good client still works afterwards
        s = connect(e.d + "/container.sock")
        s.sendall((5).to_bytes(8, "big") + b"12345678")
        assert len(s.recv(5, socket.MSG_WAITALL)) == 5
        s.close()
    finally:
        e.close()


def banner_server(port, banner):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((HOST_IP, port))
    ls.listen(16)
    stop = threading.Event()

    def loop():
        ls.settimeout(0.1)
        conns = []
        while not stop.is_set():
            try:
                c, _ = ls.accept()
            except socket.timeout:
                continue
            if banner:
                c.sendall(banner)
            conns.append(c)
        for c in conns:
            c.close()
        ls.close()

    t = threading.Thread(target=loop)
    t.start()
    return stop, t


def test_relay_chained_between_two_links():
    """container relay -> jump relay (its listen and its connect both auth = token) -> last
    relay -> service: the jump relay runs two handshakes on one connection, each with its own
    nonces, and a failure behind it reaches the container relay as a status, not a hang-up."""
    e = Env(host_relay=False)
    inner = free_port()
    jump = last = None
    try:
        last = Relay(["relay", "-F", "last:tcp:127.0.0.1:%d=unix:%s/service.sock,auth=token,token-file=%s"
                      % (inner, e.d, e.token)])
        jump = Relay(["relay", "-F", "jump:tcp:%s:%d=tcp:127.0.0.1:%d,auth=token,token-file=%s"
                      % (HOST_IP, PORT, inner, e.token)])
        for _ in range(3):
            transfer_both_ways(e.d + "/container.sock", (1 if VALGRIND else 8) * MIB)
        last.stop()
        wrong = e.keygen("wrong")
        last = Relay(["relay", "-F", "last:tcp:127.0.0.1:%d=unix:%s/service.sock,auth=token,token-file=%s"
                      % (inner, e.d, wrong)])
        client_fails_with(e, "could not reach its upstream")
        text = e.cont.text()
        assert "auth rejected: tcp:127.0.0.1:%d does not accept our token" % inner in text, text
    finally:
        for r in (jump, last):
            if r:
                r.stop()
        e.close()


def test_banner_server_is_a_wrong_peer_and_quoted():
    e = Env(host_relay=False, service=None)
    stop, t = banner_server(PORT, b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n")
    try:
        took = client_fails_with(e, "is not a sockferry relay")
        assert 'tcp:host.docker.internal:%d is not a sockferry relay: it sent "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3"'\
            % PORT in e.cont.text(), e.cont.text()
        assert took < 3, "took %.1fs" % took
    finally:
        stop.set()
        t.join()
        e.close()


def test_silent_server_is_a_wrong_peer_after_handshake_timeout():
    e = Env(host_relay=False, service=None, cont_extra=",handshake-timeout=500ms")
    stop, t = banner_server(PORT, None)
    try:
        took = client_fails_with(e, "sent nothing within 500ms")
        text = e.cont.text()
        assert "wrong peer" in text and "auth = none" in text, text
        assert took < 3, "took %.1fs" % took
    finally:
        stop.set()
        t.join()
        e.close()


def test_auth_token_only_on_the_host_is_named_on_the_container_side():
    e = Env()
    plain = Relay(["relay", "-F", "plain:unix:%s/plain.sock=tcp:host.docker.internal:%d" % (e.d, PORT)],
                  prefix=["ip", "netns", "exec", NS])
    try:
        s = connect(e.d + "/plain.sock", timeout=10)
        try:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = recv_all(s)
        except (BrokenPipeError, ConnectionResetError):
            data = b""
        s.close()
        # the host relay's greeting used to reach the client as data (curl: "Received HTTP/0.9")
        assert b"SFRY" not in data, data
        wait_for(lambda: "is a sockferry relay with auth = token" in plain.text(), timeout=10,
                 what="the diagnosis in the container log")
        assert "wrong peer: tcp:host.docker.internal:%d is a sockferry relay with auth = token (it sent the "\
            "sockferry/1 greeting), and this forward has auth = none: set auth = token and token-file (the same "\
            "token as that relay's) in [plain] here" % PORT in plain.text(), plain.text()
    finally:
        plain.stop()
        e.close()


def test_auth_token_only_in_the_container_names_both_causes():
    e = Env(host_relay=False, cont_extra=",handshake-timeout=500ms")
    host = Relay(["relay", "-F", "host:tcp:%s:%d=unix:%s/service.sock,allow-insecure=yes" % (HOST_IP, PORT, e.d)])
    try:
        client_fails_with(e, "sent nothing within 500ms")
        text = e.cont.text()
        assert "wrong peer: tcp:host.docker.internal:%d sent nothing within 500ms: it may be a plain TCP service "\
            "(then auth = none here) or, the usual case, a sockferry relay with auth = none: set auth = token and "\
            "the same token-file on that relay" % PORT in text, text
    finally:
        host.stop()
        e.close()


def test_host_relay_down_is_reported_promptly():
    e = Env(host_relay=False, service=None)
    try:
        took = client_fails_with(e, "Connection refused")
        assert "connect tcp:host.docker.internal:%d: Connection refused — is the host-side relay" % PORT in e.cont.text()
        assert took < 3
    finally:
        e.close()


def test_host_upstream_down_reason_travels_in_the_status_frame():
    e = Env(service=None)
    try:
        client_fails_with(e, "could not reach its upstream")
        text = e.cont.text()
        assert "upstream unavailable: the host relay at tcp:host.docker.internal:%d could not reach its upstream: "\
            "connect unix:%s/service.sock: No such file or directory" % (PORT, e.d) in text, text
        # the host's hint crosses the link readably: its em dash was "???" on the container side
        assert "No such file or directory - is the service running, and is the path right?" in text, text
        assert "???" not in text, text
    finally:
        e.close()


def test_version_mismatch_is_named():
    e = Env(host_relay=False, service=None)
    stop, t = banner_server(PORT, b"SFRY\x07" + b"\x00" * 32)
    try:
        client_fails_with(e, "version mismatch")
        assert "speaks sockferry/7, we speak sockferry/1" in e.cont.text(), e.cont.text()
    finally:
        stop.set()
        t.join()
        e.close()


def test_replayed_client_handshake_is_rejected():
    """Capture a good client's handshake with a recording proxy, then replay it byte for byte
    on a new connection: the host relay's fresh nonce makes the old MAC worthless."""
    e = Env(host_relay=True, service="echo")
    proxy_port = PORT + 1
    captured = []
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((HOST_IP, proxy_port))
    ls.listen(1)
    rec = Relay(["relay", "-F", "rec:unix:%s/rec.sock=tcp:host.docker.internal:%d,auth=token,token-file=%s"
                 % (e.d, proxy_port, e.token)], prefix=["ip", "netns", "exec", NS])

    def proxy():
        c, _ = ls.accept()
        u = socket.create_connection((HOST_IP, PORT), timeout=10)
        c.settimeout(10)
        hello = u.recv(37, socket.MSG_WAITALL)
        c.sendall(hello)
        frame = c.recv(70, socket.MSG_WAITALL)
        captured.append(frame)
        u.sendall(frame)
        status = u.recv(34, socket.MSG_WAITALL)
        c.sendall(status)
        u.sendall(c.recv(5, socket.MSG_WAITALL))
        c.sendall(u.recv(5, socket.MSG_WAITALL))
        c.close()
        u.close()

    t = threading.Thread(target=proxy)
    t.start()
    try:
        s = connect(e.d + "/rec.sock")
        s.sendall(b"hello")
        assert s.recv(5, socket.MSG_WAITALL) == b"hello"
        s.close()
        t.join(10)
        assert captured and len(captured[0]) == 70
        # replay
        u = socket.create_connection((HOST_IP, PORT), timeout=5)
        hello = u.recv(37, socket.MSG_WAITALL)
        assert hello[:4] == b"SFRY"
        u.sendall(captured[0] + b"replayed request")
        status = u.recv(34, socket.MSG_WAITALL)
        assert status[0] == 1, "status %r: the replayed handshake was not rejected" % status[:2]
        assert u.recv(100) == b""
        u.close()
        wait_for(lambda: "auth rejected" in e.host.text(), what="host log")
    finally:
        ls.close()
        rec.stop()
        e.close()


def test_slowloris_does_not_delay_a_good_client():
    # a client stuck behind the silent ones would wait for their handshake timeout (10s)
    e = Env(service="echo", host_extra=",handshake-timeout=10s")
    idle = []
    try:
        n = 100 if VALGRIND else 500
        for i in range(n):
            s = socket.socket()
            s.connect((HOST_IP, PORT))  # opens and says nothing
            idle.append(s)
        start = time.monotonic()
        c = connect(e.d + "/container.sock")
        c.sendall(b"ping")
        assert c.recv(4, socket.MSG_WAITALL) == b"ping"
        took = time.monotonic() - start
        c.close()
        assert took < 5, "a good client waited %.2fs behind %d silent connections" % (took, n)
    finally:
        for s in idle:
            s.close()
        e.close()


def test_slowloris_connections_are_closed_after_handshake_timeout():
    e = Env(service="echo", host_extra=",handshake-timeout=300ms")
    try:
        before = e.host.fds()
        idle = [socket.create_connection((HOST_IP, PORT)) for _ in range(20)]
        for s in idle:
            s.settimeout(3)
            hello = s.recv(37, socket.MSG_WAITALL)
            assert hello[:4] == b"SFRY"
            assert s.recv(1) == b"", "the host relay kept a silent connection open"
            s.close()
        wait_for(lambda: e.host.fds() == before, what="host relay fds back to %d" % before)
    finally:
        e.close()


# Opens argv[1] TCP connections to argv[2]:argv[3] without waiting for any, says nothing on
# them, prints how many were established, and holds them all until its stdin closes.
FLOODER = r"""
import resource, select, socket, sys, time
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
ep = select.epoll()
socks = {}
for _ in range(n):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((host, port))
    socks[s.fileno()] = s
    ep.register(s.fileno(), select.EPOLLOUT)
pending, up = n, 0
deadline = time.monotonic() + 30
while pending and time.monotonic() < deadline:
    for fd, _ in ep.poll(0.5):
        ep.unregister(fd)
        pending -= 1
        up += socks[fd].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
print(up, flush=True)
sys.stdin.read()
"""


def test_preauth_flood_does_not_starve_authenticated_clients():
    # One address floods the listener with connections that never authenticate; the good
    # clients come from the same address (the container's), as they would from a VM's NAT
    # address. A long handshake-timeout keeps the flood in place for the whole test.
    n = 2000 if VALGRIND else 8000
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < n + 256:
        raise Skip("the hard RLIMIT_NOFILE (%d) does not allow %d connections" % (hard, n))
    e = Env(service="echo", host_extra=",handshake-timeout=30s")
    flood = None
    try:
        base = e.host.fds()
        flood = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-c", FLOODER, str(n), HOST_IP,
                                  str(PORT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        up = int(flood.stdout.readline() or 0)
        print("# %d of %d idle connections established" % (up, n))

        results = [None] * 20

        def client(i):
            start = time.monotonic()
            try:
                c = connect(e.d + "/container.sock", timeout=20)
                msg = b"ping%02d" % i
                c.sendall(msg)
                got = c.recv(len(msg), socket.MSG_WAITALL)
                c.close()
                results[i] = (got == msg, time.monotonic() - start)
            except OSError as err:
                results[i] = (False, repr(err))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [r for r in results if not r[0]]
        took = sorted(r[1] for r in results if r[0])
        if took:
            print("# handshake and echo behind %d idle connections: max %.0f ms, p50 %.0f ms"
                  % (up, took[-1] * 1000, took[len(took) // 2] * 1000))
        assert not failed, "%d of 20 clients failed: %r\n%s" % (len(failed), failed, e.cont.text()[-2000:])
        assert "pre-auth budget full" in e.host.text(), e.host.text()[-2000:]
        if not VALGRIND:
            rss, hwm = e.host.rss_kib(), e.host.status("VmHWM")
            print("# host relay VmRSS %.1f MiB, VmHWM %.1f MiB" % (rss / 1024, hwm / 1024))
            assert hwm < 64 * 1024, "host relay peaked at %d KiB" % hwm
        flood.stdin.close()
        flood.wait(timeout=30)
        flood = None
        wait_for(lambda: e.host.fds() == base, timeout=30, what="host relay fds back to %d" % base)
    finally:
        if flood:
            flood.kill()
            flood.wait()
        e.close()


def test_preauth_max_evicts_the_oldest_of_a_source_at_its_bound():
    # preauth-max = 8: 2 per source. Ten silent connections from the host's address leave the
    # newest two; the eight before them were greeted and then closed, oldest first.
    e = Env(service="echo", host_extra=",preauth-max=8,handshake-timeout=30s")
    idle = []
    try:
        base = e.host.fds()
        for _ in range(10):
            s = socket.create_connection((HOST_IP, PORT))
            s.settimeout(10)
            assert s.recv(37, socket.MSG_WAITALL)[:4] == b"SFRY"
            idle.append(s)
        for i, s in enumerate(idle[:8]):
            assert s.recv(1) == b"", "silent connection %d was not evicted" % i
        for s in idle[8:]:
            s.settimeout(0.2)
            try:
                s.recv(1)
                raise AssertionError("one of the two newest was closed")
            except socket.timeout:
                pass
        wait_for(lambda: e.host.fds() == base + 2, what="host relay holding the two newest")
        # a client from another address is not affected, and authenticates past the budget
        c = connect(e.d + "/container.sock")
        c.sendall(b"ping")
        assert c.recv(4, socket.MSG_WAITALL) == b"ping"
        c.close()
        assert "pre-auth budget full (8 unauthenticated connections in all, 2 per source" in e.host.text()
    finally:
        for s in idle:
            s.close()
        e.close()


def test_preauth_budget_leaves_descriptors_for_authenticated_clients():
    # With 64 descriptors the budget is 16, whatever max-conns says: a hundred silent
    # connections cannot take the descriptors a good client and its upstream socket need.
    e = Env(service="echo", host_relay=False)
    idle = []
    try:
        e.host = Relay(["relay", "-F", "host:tcp:%s:%d=unix:%s/service.sock,auth=token,token-file=%s,"
                        "handshake-timeout=30s" % (HOST_IP, PORT, e.d, e.token)],
                       preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
        for _ in range(100):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((HOST_IP, PORT))
            idle.append(s)
        time.sleep(0.5)
        for i in range(3):
            c = connect(e.d + "/container.sock")
            c.settimeout(10)
            c.sendall(b"ping")
            assert c.recv(4, socket.MSG_WAITALL) == b"ping", "client %d got nothing" % i
            c.close()
        assert e.host.fds() <= 64
    finally:
        for s in idle:
            s.close()
        e.close()


def test_non_loopback_listener_without_auth_is_refused_unless_allowed():
    d = tmpdir()
    rc, out, err = run_sockferry(["relay", "-F", "open:tcp:%s:%d=unix:%s/x.sock" % (HOST_IP, PORT, d)])
    assert rc == 78, (rc, err)
    assert "without authentication" in err and "auth = token" in err, err
    r = Relay(["relay", "-F", "open:tcp:%s:%d=unix:%s/x.sock,allow-insecure=yes" % (HOST_IP, PORT, d)])
    text = r.stop()
    assert text.count("allow-insecure") == 1 and "warn" in text, text
    shutil.rmtree(d)


def test_bad_token_files_refuse_to_start_with_the_fix():
    d = tmpdir()
    tok = d + "/tok"
    with open(tok, "w") as f:
        f.write("00" * 32 + "\n")
    os.chmod(tok, 0o644)
    rc, out, err = run_sockferry(["relay", "-F", "t:unix:%s/t.sock=tcp:127.0.0.1:9,auth=token,token-file=%s" % (d, tok)])
    assert rc == 78, (rc, err)
    assert "chmod 600 %s" % tok in err, err
    assert not os.path.exists(d + "/t.sock"), "bound before the config was known to be good"
    os.chmod(tok, 0o600)
    with open(tok, "w") as f:
        f.write("abcd\n")
    rc, out, err = run_sockferry(["relay", "-F", "t:unix:%s/t.sock=tcp:127.0.0.1:9,auth=token,token-file=%s" % (d, tok)])
    assert rc == 78 and "sockferry keygen" in err, (rc, err)
    shutil.rmtree(d)


if __name__ == "__main__":
    try:
        netns_up()
    except Skip as e:
        print("1..0 # SKIP %s" % e)
        sys.exit(0)
    except subprocess.CalledProcessError as e:
        netns_down()
        print("1..0 # SKIP cannot create a network namespace here: %s" % e.stderr.decode().strip())
        sys.exit(0)
    try:
        rc = Tap([v for k, v in list(globals().items()) if k.startswith("test_")]).run()
    finally:
        netns_down()
    sys.exit(rc)
