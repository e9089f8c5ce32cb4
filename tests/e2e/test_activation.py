#!/usr/bin/env python3
"""End-to-end tests of socket activation: `sockferry relay` started by systemd-socket-activate
on the first connection, its socket found by name (LISTEN_FDNAMES) or number, sd_notify's
READY=1 and STOPPING=1, and the plain words when the passed sockets do not match. Each test
gets a Scene (tests/lib/sfharness.py) for what it starts."""

import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Scene, Skip, connect, run_sockferry, wait_for  # noqa: E402


def activated(sc, listen, spec, fdname=None, expect=0):
    prefix = ["systemd-socket-activate", "-l", listen, "-E", "NOTIFY_SOCKET"]
    if fdname:
        prefix.append("--fdname=" + fdname)
    r = sc.relay(["relay", "-F", spec], prefix=prefix, wait_ready=False, expect=expect)
    # systemd-socket-activate starts sockferry on the first connection, which then waits in
    # the backlog of the passed socket
    first = sc.enter_context(wait_for(lambda: try_connect(listen), what="the activation socket"))
    return r, first


def try_connect(path):
    try:
        return connect(path)
    except OSError:
        return None


def test_socket_activation_by_name_and_by_fd(sc):
    if not shutil.which("systemd-socket-activate"):
        raise Skip("systemd-socket-activate is not installed")
    d = sc.tmpdir()
    sc.server("echo", d + "/svc.sock")
    for how, spec, fdname in (("name", "a:systemd:web=unix:%s/svc.sock" % d, "web"),
                              ("fd", "a:fd:3=unix:%s/svc.sock" % d, None)):
        with Scene() as once:
            r, first = activated(once, d + "/act.sock", spec, fdname)
            first.sendall(b"hello " + how.encode())
            assert first.recv(100) == b"hello " + how.encode()
            first.close()
            r.wait_notify(b"READY=1")
            s = connect(d + "/act.sock")
            s.sendall(b"again")
            assert s.recv(100) == b"again"
            s.close()
            r.signal(signal.SIGTERM)
            r.notified(b"STOPPING=1")
            assert r.wait() == 0
        # a passed socket belongs to the unit: sockferry never removes it
        assert os.path.exists(d + "/act.sock"), how
        os.unlink(d + "/act.sock")


def test_socket_activation_wrong_name_or_none(sc):
    if not shutil.which("systemd-socket-activate"):
        raise Skip("systemd-socket-activate is not installed")
    d = sc.tmpdir()
    r, first = activated(sc, d + "/act.sock", "a:systemd:api=unix:%s/svc.sock" % d, "web", expect=1)
    rc = r.wait()
    text = r.stop()
    first.close()
    assert rc == 1 and 'no passed socket is named "api" (LISTEN_FDNAMES=web)' in text \
        and "FileDescriptorName=api" in text, (rc, text)

    rc, out, err = run_sockferry(["relay", "-F", "a:systemd:api=unix:%s/svc.sock" % d])
    assert rc == 1 and "no sockets were passed" in err and "systemd-socket-activate" in err, (rc, err)
    rc, out, err = run_sockferry(["relay", "-F", "a:fd:0=unix:%s/svc.sock" % d])
    assert rc == 1 and "fd 0 is not a listening socket" in err, (rc, err)


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
