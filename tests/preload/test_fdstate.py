#!/usr/bin/python3
"""What the client can observe about its fd: flags, timeouts, family and number after a
redirect, no temporary fd left behind, kernel errnos on every path, and which socket a mapped
path reaches (a live socket is used as is; a directory, stale socket or missing path is
redirected). sfp-fdcheck (tests/preload/sfp_fdcheck.c) checks the fd from inside the client and
says "ok - ..." or "not ok - ..." for each check. Each test gets a Lab (tests/lib/sfharness.py)."""
import os
import socket
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import (Lab, Scene, Skip, build_paths, free_port, helper_passed, ipv6_loopback,  # noqa: E402
                       preload_setup, vsock_loopback)

ARGS = build_paths("lib", "client", "fdcheck")


def tcp(lab):
    return lab.server("tagged", "tcp:127.0.0.1:0", "tcp")


def refused():
    """A loopback port nothing listens on (bound, then released)."""
    return f"tcp:127.0.0.1:{free_port()}"


def fdcheck(lab, *args, mapping, **kw):
    r = lab.run([ARGS.fdcheck, *args], env=lab.env(mapping), **kw)
    helper_passed(r.stdout, r)


def test_unix_target_keeps_the_fd_state(lab):
    fdcheck(lab, "flags", lab.mapped, "unix", mapping=f"{lab.mapped}={lab.server('tagged', 'line.sock', 'unix')}")


def test_tcp_target_keeps_the_fd_state(lab):
    fdcheck(lab, "flags", lab.mapped, "inet", mapping=f"{lab.mapped}={tcp(lab)}")


def test_ipv6_tcp_target_keeps_the_fd_state(lab):
    if not ipv6_loopback():
        raise Skip("no IPv6 loopback (::1) here")
    fdcheck(lab, "flags", lab.mapped, "inet6", mapping=f"{lab.mapped}={lab.server('tagged', 'tcp:[::1]:0', 'tcp6')}")


def test_vsock_target_flags_timeouts_and_echo(lab):
    why = vsock_loopback()
    if why:
        raise Skip(why)
    fdcheck(lab, "flags", lab.mapped, "vsock", mapping=f"{lab.mapped}={lab.server('tagged', 'vsock:any:0', 'vsock')}")


def test_vsock_swap_without_a_peer(lab):
    # without vsock loopback there is no peer, but the swap itself can still be watched
    if not vsock_loopback():
        raise Skip("vsock loopback works here: the vsock target test checks the swap with a peer")
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    except (OSError, AttributeError):
        raise Skip("socket(AF_VSOCK) is not available")
    fdcheck(lab, "swap", lab.mapped, "vsock", mapping=f"{lab.mapped}=vsock:1:9")


def test_no_fd_leak(lab):
    other = lab.path("run", "refused.sock")
    os.makedirs(other)
    fdcheck(lab, "leak", lab.mapped, other, "200", mapping=f"{lab.mapped}={tcp(lab)};{other}={refused()}", timeout=120)


def test_second_connect_on_a_tcp_redirected_fd(lab):
    ep = tcp(lab)
    fdcheck(lab, "reconnect", lab.mapped, ep.rsplit(":", 1)[1], mapping=f"{lab.mapped}={ep}")


def test_refused_target(lab):
    fdcheck(lab, "refused", lab.mapped, mapping=f"{lab.mapped}={refused()}")


def test_datagram_client(lab):
    fdcheck(lab, "dgram", lab.mapped, mapping=f"{lab.mapped}={tcp(lab)}")


def test_a_live_socket_at_the_mapped_path_is_used_directly_the_bind_mount_worked(lab):
    live = lab.path("live.sock")
    lab.server("tagged", live, "live")
    r = lab.run([ARGS.client, live, "who"], env=lab.env(f"{live}={tcp(lab)}"), mount=False)
    assert r.returncode == 0 and r.stdout == "live:who\n", r


def test_a_stale_socket_at_the_mapped_path_is_redirected(lab):
    stale = lab.path("stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(stale)
    s.close()
    r = lab.run([ARGS.client, stale, "who"], env=lab.env(f"{stale}={tcp(lab)}"), mount=False)
    assert r.returncode == 0 and r.stdout == "tcp:who\n", r


def test_a_missing_mapped_path_is_redirected(lab):
    missing = lab.path("missing.sock")
    r = lab.run([ARGS.client, missing, "who"], env=lab.env(f"{missing}={tcp(lab)}"), mount=False)
    assert r.returncode == 0 and r.stdout == "tcp:who\n", r


def test_a_refused_redirect_returns_econnrefused_and_says_once_which_target_refused(lab):
    ep = refused()
    r = lab.run([ARGS.client, lab.mapped, "who"], env=lab.env(f"{lab.mapped}={ep}"))
    assert r.returncode == 2 and r.stdout == "errno=111\n", r
    assert "is mapped to " + ep in r.stderr and r.stderr.count("sockferry-preload") == 1, r


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene.of(lambda sc: Lab(sc, ARGS.lib)), setup=preload_setup)
