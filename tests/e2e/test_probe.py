#!/usr/bin/env python3
"""End-to-end tests of `sockferry probe`: its exit status and advice for each thing that can
be at a socket path, the failed socket bind mount Docker Desktop leaves among them. Each test
gets a Scene (tests/lib/sfharness.py) for what it starts."""

import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Scene, Skip, connect, recv_all, run_sockferry, wait_for  # noqa: E402


def probe(path):
    rc, out, err = run_sockferry(["probe", path])
    return rc, out + err


def test_probe_exit_codes_and_advice(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/live.sock")
    rc, out = probe(d + "/live.sock")
    assert rc == 0 and "live socket" in out, (rc, out)

    s = socket.socket(socket.AF_UNIX)
    s.bind(d + "/stale.sock")
    s.close()
    rc, out = probe(d + "/stale.sock")
    assert rc == 1 and "stale socket" in out and "not running" in out, (rc, out)

    rc, out = probe(d + "/missing.sock")
    assert rc == 2 and "missing" in out, (rc, out)

    os.mkdir(d + "/empty")
    rc, out = probe(d + "/empty")
    assert rc == 3 and "empty directory" in out and "alias" in out, (rc, out)

    with open(d + "/file", "w") as f:
        f.write("x")
    rc, out = probe(d + "/file")
    assert rc == 4 and "regular file" in out, (rc, out)

    os.mkdir(d + "/full")
    open(d + "/full/x", "w").close()
    rc, out = probe(d + "/full")
    assert rc == 4 and "directory with content" in out, (rc, out)

    rc, out = probe("")
    assert rc == 64, (rc, out)
    rc, out, _ = run_sockferry(["probe", "--help"])
    for code in ("0  a live socket", "1  a stale socket", "2  nothing", "3  an empty directory", "4  anything"):
        assert code in out, out


def test_probe_names_a_failed_socket_bind_mount(sc):
    """What Docker Desktop leaves at the target of -v /host.sock:/run/x.sock: an empty
    directory that is a mount point."""
    if os.geteuid() != 0:
        raise Skip("needs root to bind-mount a directory")
    d = sc.tmpdir()
    os.mkdir(d + "/src")
    os.mkdir(d + "/x.sock")
    sc.mount_point(d + "/src", d + "/x.sock")
    rc, out = probe(d + "/x.sock")
    assert rc == 3, (rc, out)
    assert "mount point" in out and "bind mount" in out and "alias = %s/x.sock" % d in out, out
    # a relay that connects there says the same in its own words
    r = sc.relay(["relay", "-F", "m:unix:%s/in.sock=unix:%s/x.sock" % (d, d)])
    s = connect(d + "/in.sock")
    assert recv_all(s) == b""
    s.close()
    wait_for(lambda: "is a directory, not a socket" in r.text(), what="the relay's diagnosis")


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
