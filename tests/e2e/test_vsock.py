#!/usr/bin/env python3
"""End-to-end tests of vsock endpoints: an authenticated link through vsock loopback, the
plain words when socket(AF_VSOCK) is denied as Docker's default seccomp profile denies it (and
the portable build's, which has no vsock), and a vsock listener that holds its port and stops
clean. Each test gets a Scene (tests/lib/sfharness.py) for what it starts.

argv[1]: the sf-deny-vsock helper (tests/relay), which runs a command with socket(AF_VSOCK)
denied the way Docker's default seccomp profile denies it."""

import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import (SOCKFERRY, Scene, Skip, check, connect, keygen, recv_all, run_sockferry,  # noqa: E402
                       vsock_loopback, wait_for, ENGINE)

DENY_VSOCK = sys.argv[1] if len(sys.argv) > 1 else None


def vsock_port():
    return 20000 + os.getpid() % 20000


def test_vsock_link_with_auth_through_loopback(sc):
    if ENGINE == "portable":
        raise Skip("portable build: no vsock, as on macOS (test_vsock_denied... checks its error)")
    why = vsock_loopback()
    if why:
        raise Skip("no vsock loopback: " + why)
    d = sc.tmpdir()
    token = keygen(d)
    port = vsock_port()
    sc.server("echo", d + "/svc.sock")
    sc.relay(["relay", "-F", "h:vsock:any:%d=unix:%s/svc.sock,auth=token,token-file=%s" % (port, d, token)])
    spec = "c:unix:%s/c.sock=vsock:1:%d,auth=token,token-file=%s" % (d, port, token)
    sc.relay(["relay", "-F", spec])
    s = connect(d + "/c.sock")
    data = os.urandom(1 << 20)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    assert recv_all(s) == data
    s.close()
    rc, out, err = check("-F", spec)
    assert rc == 0 and "upstream answers" in out, (rc, out, err)


def test_vsock_denied_by_seccomp_points_to_tcp(sc):
    if not DENY_VSOCK or not os.path.exists(DENY_VSOCK):
        raise Skip("the sf-deny-vsock helper was not built")
    if not hasattr(socket, "AF_VSOCK"):
        raise Skip("no AF_VSOCK on this platform")
    d = sc.tmpdir()
    port = vsock_port()
    if ENGINE == "portable":
        # What macOS says: no vsock at all, in one line that points to tcp:.
        rc, out, err = run_sockferry(["relay", "-F", "v:vsock:any:%d=unix:%s/svc.sock,allow-insecure=yes" % (port, d)])
        assert rc == 1 and "vsock exists on Linux only; use a tcp: endpoint" in err, (rc, err)
        rc, out, err = run_sockferry(["check", "-F", "v:unix:%s/v.sock=vsock:host:%d" % (d, port)])
        assert rc == 1 and "vsock exists on Linux only; use a tcp: endpoint" in out, (rc, out)
        return
    p = subprocess.run([DENY_VSOCK, SOCKFERRY, "relay", "-F", "v:vsock:any:%d=unix:%s/svc.sock,allow-insecure=yes"
                        % (port, d)], capture_output=True, timeout=20)
    err = p.stderr.decode()
    if p.returncode == 77:
        raise Skip("seccomp filters are not available: " + err.strip())
    assert p.returncode == 1, (p.returncode, err)
    assert "AF_VSOCK sockets are denied here" in err and "seccomp" in err and "tcp:" in err, err

    p = subprocess.run([DENY_VSOCK, SOCKFERRY, "check", "--link-only", "-F", "v:unix:%s/v.sock=vsock:host:%d"
                        % (d, port)], capture_output=True, timeout=20)
    out = p.stdout.decode()
    assert p.returncode == 1 and "v: FAIL connect vsock:host:%d: AF_VSOCK sockets are denied" % port in out \
        and "use a tcp: endpoint" in out, (p.returncode, out)

    r = sc.relay(["relay", "-F", "v:unix:%s/v.sock=vsock:host:%d" % (d, port)], prefix=[DENY_VSOCK])
    s = connect(d + "/v.sock")
    assert recv_all(s) == b""
    s.close()
    wait_for(lambda: "AF_VSOCK sockets are denied here" in r.text(), what="the relay's diagnosis")
    assert "use a tcp: endpoint" in r.text()


def test_vsock_listener_binds_and_stops_clean(sc):
    if ENGINE == "portable":
        raise Skip("portable build: no vsock, as on macOS (test_vsock_denied... checks its error)")
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    except (AttributeError, OSError) as e:
        raise Skip("no AF_VSOCK here: %s" % e)
    d = sc.tmpdir()
    port = vsock_port() + 1
    r = sc.relay(["relay", "-F", "v:vsock:any:%d=unix:%s/svc.sock,allow-insecure=yes" % (port, d)])
    assert "listening on vsock:any:%d" % port in r.text()
    # the port is taken while the relay runs
    s = sc.enter_context(socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM))
    try:
        s.bind((socket.VMADDR_CID_ANY, port))
        raise AssertionError("the relay does not hold vsock port %d" % port)
    except OSError:
        pass
    s.close()


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
