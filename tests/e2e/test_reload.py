#!/usr/bin/env python3
"""End-to-end tests of reload (SIGHUP and `sockferry reload`): forwards added, removed, changed
and unchanged with real clients on them; a bad file changes nothing and the log says file:line;
a rotated token; services whose listener changes owner over a shared link; the control socket
moved; and 200 reloads in a row with no descriptor left behind. Each test gets a Scene
(tests/lib/sfharness.py) for what it starts."""

import json
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import (SANITIZED, VALGRIND, Scene, Skip, connect, echo_once, free_port, keygen,  # noqa: E402
                       fds_back, recv_all, round_trip, run_sockferry, steady, wait_for, write_conf)


def forward(name, listen, connect_to, extra=""):
    return "[%s]\nlisten = %s\nconnect = %s\n%s\n" % (name, listen, connect_to, extra)


def echoed(s, data):
    """data sent on s comes back (an echo server behind it)."""
    got = round_trip(s, data)
    assert got == data, "closed after %r of %r" % (got, data)


def echoes(path, data=b"ping"):
    got = echo_once(path, data)
    assert got == data, "closed after %r of %r" % (got, data)
    return True


def after_eof_answer(path, data=b"abc"):
    """What an after-eof server says behind path: the byte count and digest, once data ended."""
    return echo_once(path, data, half_close=True)


def reloaded(r, before, summary, timeout=10):
    """Waits until the relay's log has one more reload summary than before; returns it."""
    def got():
        lines = re.findall(r"reload: \d+ added, \d+ removed, \d+ changed, \d+ unchanged", r.text())
        return lines[before] if len(lines) > before else None
    line = wait_for(got, timeout, "the reload summary in the log")
    assert line == summary, (line, summary, r.text())
    return line


def summaries(r):
    return len(re.findall(r"reload: \d+ added", r.text()))


def test_added_removed_changed_unchanged(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/echo.sock")
    sc.server("after-eof", d + "/count.sock")
    head = "[sockferry]\ndrain-timeout = 2s\n\n"
    conf = write_conf(d, head + forward("keep", "unix:%s/keep.sock" % d, "unix:%s/echo.sock" % d) +
                      forward("gone", "unix:%s/gone.sock" % d, "unix:%s/echo.sock" % d) +
                      forward("edit", "unix:%s/edit.sock" % d, "unix:%s/echo.sock" % d))
    r = sc.relay(["relay", "-c", conf, "-F", "cli:unix:%s/cli.sock=unix:%s/echo.sock" % (d, d)])
    keep_ino = os.stat(d + "/keep.sock").st_ino
    cli_ino = os.stat(d + "/cli.sock").st_ino
    keep, gone, edit = sc.closing([connect(d + "/%s.sock" % n) for n in ("keep", "gone", "edit")])
    for s in (keep, gone, edit):
        echoed(s, b"before")

    write_conf(d, head + forward("keep", "unix:%s/keep.sock" % d, "unix:%s/echo.sock" % d) +
               forward("edit", "unix:%s/edit.sock" % d, "unix:%s/count.sock" % d) +
               forward("new", "unix:%s/new.sock" % d, "unix:%s/echo.sock" % d))
    n = summaries(r)
    # The removed forward's drain-timeout counts from the reload, not from when the checks
    # below are done: on a busy machine they take longer than the 2 s themselves.
    hup = time.monotonic()
    r.signal(signal.SIGHUP)
    reloaded(r, n, "reload: 1 added, 1 removed, 1 changed, 2 unchanged")
    # removed: its socket is gone at once, its open connection drains (asked first: the checks
    # below may take longer than drain-timeout on a busy machine) and is closed at drain-timeout
    assert not os.path.exists(d + "/gone.sock"), "the removed forward's socket is still there"
    echoed(gone, b"draining")

    # unchanged: the same listening socket, its open connection goes on, new ones served
    assert os.stat(d + "/keep.sock").st_ino == keep_ino, "keep's socket was bound again"
    assert os.stat(d + "/cli.sock").st_ino == cli_ino, "the -F forward's socket was bound again"
    echoed(keep, b"after the reload")
    assert echoes(d + "/keep.sock") and echoes(d + "/cli.sock")
    # added: serves
    assert echoes(d + "/new.sock")
    # changed: new connections use the new connect, the open one keeps the old
    assert after_eof_answer(d + "/edit.sock").startswith(b"3 "), "edit's new connection did not use count.sock"
    echoed(edit, b"still the echo")
    checked = time.monotonic() - hup
    gone.settimeout(10)
    assert recv_all(gone) == b"", "the removed forward's connection got data"
    closed = time.monotonic() - hup
    # Not before drain-timeout, and not long after it (or at once, when the checks above
    # already took longer than that).
    assert 1.9 < closed < max(6, checked + 1), "closed %.1fs after the reload (checks done at %.1fs), " \
        "drain-timeout is 2s" % (closed, checked)
    assert "drain timeout: closing 1 connection of this removed forward" in r.text(), r.text()
    # the changed forward's old connection is not cut by the removed one's drain
    echoed(edit, b"after the drain")
    echoed(keep, b"after the drain")
    for s in (keep, edit):
        s.close()
    r.stop()
    for name in ("keep", "edit", "new", "cli"):
        assert not os.path.exists("%s/%s.sock" % (d, name)), name + ".sock left behind"


def test_listen_endpoint_changed_rebinds(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/echo.sock")
    port_a, port_b = free_port(), free_port()
    conf = write_conf(d, forward("t", "tcp:127.0.0.1:%d" % port_a, "unix:%s/echo.sock" % d) +
                      forward("u", "unix:%s/u1.sock" % d, "unix:%s/echo.sock" % d))
    r = sc.relay(["relay", "-c", conf])
    old_t = sc.closing(connect(("127.0.0.1", port_a)))
    old_u = sc.closing(connect(d + "/u1.sock"))
    echoed(old_t, b"t")
    echoed(old_u, b"u")
    write_conf(d, forward("t", "tcp:127.0.0.1:%d" % port_b, "unix:%s/echo.sock" % d) +
               forward("u", "unix:%s/u2.sock" % d, "unix:%s/echo.sock" % d))
    n = summaries(r)
    r.signal(signal.SIGHUP)
    reloaded(r, n, "reload: 0 added, 0 removed, 2 changed, 0 unchanged")
    assert not os.path.exists(d + "/u1.sock") and echoes(d + "/u2.sock")
    s = connect(("127.0.0.1", port_b))
    echoed(s, b"new port")
    s.close()
    try:
        connect(("127.0.0.1", port_a), timeout=2).close()
        raise AssertionError("the old port still accepts")
    except ConnectionRefusedError:
        pass
    # the connections of before keep going on their forward's old settings
    echoed(old_t, b"still here")
    echoed(old_u, b"still here")


def test_bad_file_changes_nothing(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/echo.sock")
    good = "[sockferry]\ncontrol = unix:%s/control.sock\n\n" % d + \
        forward("a", "unix:%s/a.sock" % d, "unix:%s/echo.sock" % d)
    conf = write_conf(d, good)
    r = sc.relay(["relay", "-c", conf])
    held = sc.closing(connect(d + "/a.sock"))
    echoed(held, b"x")
    ino = os.stat(d + "/a.sock").st_ino
    # line 12: a key the loader does not know, and a forward b that would have been added
    write_conf(d, good + "\n" + forward("b", "unix:%s/b.sock" % d, "unix:%s/echo.sock" % d, "colour = red"))
    r.signal(signal.SIGHUP)
    wait_for(lambda: "reload: nothing changed" in r.text(), what="the failed reload in the log")
    log = r.text()
    assert re.search(r"error: %s:12: \[b\] colour: unknown key" % re.escape(conf), log), log
    assert not os.path.exists(d + "/b.sock"), "a forward of the bad file was bound"
    assert os.stat(d + "/a.sock").st_ino == ino
    echoed(held, b"still")
    assert echoes(d + "/a.sock")
    # the same through the control socket: the error, file:line, and exit status 1
    rc, out, err = run_sockferry(["reload", "--control", d + "/control.sock"])
    assert rc == 1, (rc, out, err)
    assert "nothing changed" in err and "%s:12: [b] colour: unknown key" % conf in err, err
    # a token file that cannot be read is an error of the reload too
    write_conf(d, good + forward("c", "unix:%s/c.sock" % d, "tcp:127.0.0.1:1", "auth = token\ntoken-file = %s/none"
                                 % d))
    rc, out, err = run_sockferry(["reload", "--control", d + "/control.sock"])
    assert rc == 1 and "nothing changed" in err and "%s/none" % d in err, (rc, out, err)
    assert not os.path.exists(d + "/c.sock")
    # fixed: it applies
    write_conf(d, good + forward("b", "unix:%s/b.sock" % d, "unix:%s/echo.sock" % d))
    rc, out, err = run_sockferry(["reload", "-c", conf])
    assert rc == 0 and out == "reload: 1 added, 0 removed, 0 changed, 1 unchanged\n", (rc, out, err)
    assert echoes(d + "/b.sock")
    echoed(held, b"and still")


def test_token_rotation(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/echo.sock")
    token = keygen(d, "token")
    fresh = keygen(d, "fresh")
    port = free_port()
    conf = write_conf(d, forward("host", "tcp:127.0.0.1:%d" % port, "unix:%s/echo.sock" % d,
                                 "auth = token\ntoken-file = %s" % token))
    host = sc.relay(["relay", "-c", conf])
    spec = "c:unix:%s/%%s.sock=tcp:127.0.0.1:%d,auth=token,token-file=%%s" % (d, port)
    old = sc.relay(["relay", "-F", spec % ("old", token)])
    new = sc.relay(["relay", "-F", spec % ("new", fresh)])
    assert echoes(d + "/old.sock")
    held = sc.closing(connect(d + "/old.sock"))
    echoed(held, b"before")
    # rotation: the host's token file gets the fresh token's content
    with open(fresh) as f:
        content = f.read()
    with open(token, "w") as f:
        f.write(content)
    n = summaries(host)
    host.signal(signal.SIGHUP)
    reloaded(host, n, "reload: 0 added, 0 removed, 1 changed, 0 unchanged")
    # the stream opened with the old token goes on; new connections need the new token
    echoed(held, b"after")

    def served(path):
        try:
            return echoes(path)
        except OSError:
            return False
        except AssertionError:
            return False
    wait_for(lambda: served(d + "/new.sock"), timeout=20, what="the new token to be served")
    # the old token's link takes no new stream (GOAWAY)...
    assert not served(d + "/old.sock"), "a new connection with the old token was served"
    echoed(held, b"and still")
    # ...and once its last stream ended the host closes it: dialled again, the old token is refused
    held.close()
    wait_for(lambda: "auth rejected" in old.text(), timeout=20, what="the old token to be rejected")
    assert not served(d + "/old.sock"), "a new connection with the old token was served"
    new.stop()
    old.stop()


def test_services_follow_their_listener(sc):
    """Two services on one host port; the owner of the listener (the first) is removed: the other
    one takes the listener and the container's shared link, its open stream goes on."""
    d = sc.tmpdir()
    sc.server("echo", d + "/echo.sock")
    sc.server("after-eof", d + "/count.sock")
    token = keygen(d)
    port = free_port()
    svc = "auth = token\ntoken-file = %s" % token
    agent = forward("agent", "tcp:127.0.0.1:%d" % port, "unix:%s/echo.sock" % d, svc)
    docker = forward("docker", "tcp:127.0.0.1:%d" % port, "unix:%s/count.sock" % d, svc)
    conf = write_conf(d, agent + docker)
    host = sc.relay(["relay", "-c", conf])
    cont = write_conf(d, "".join(forward(n, "unix:%s/c-%s.sock" % (d, n), "tcp:127.0.0.1:%d" % port,
                                         svc + "\nservice = %s" % n) for n in ("agent", "docker")), "cont")
    sc.relay(["relay", "-c", cont])
    held = sc.closing(connect(d + "/c-agent.sock"))
    echoed(held, b"agent")
    assert after_eof_answer(d + "/c-docker.sock").startswith(b"3 ")
    links_before = host.text().count("shared link from")
    write_conf(d, docker)
    n = summaries(host)
    host.signal(signal.SIGHUP)
    reloaded(host, n, "reload: 0 added, 1 removed, 0 changed, 1 unchanged")
    # the listener and the link moved to docker: served on the same link, no new one
    assert after_eof_answer(d + "/c-docker.sock").startswith(b"3 ")
    assert host.text().count("shared link from") == links_before, host.text()
    echoed(held, b"draining")
    s = connect(d + "/c-agent.sock")
    s.settimeout(15)
    try:
        s.sendall(b"x")
        got = recv_all(s)
    except (BrokenPipeError, ConnectionResetError):  # refused before or after the byte: an end either way
        got = b""
    assert got == b"", "the removed service answered a new connection"
    s.close()
    held.close()


def test_control_socket_moves_and_goes(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/echo.sock")
    fwd = forward("a", "unix:%s/a.sock" % d, "unix:%s/echo.sock" % d)
    conf = write_conf(d, fwd)
    r = sc.relay(["relay", "-c", conf])
    rc, out, err = run_sockferry(["reload", "-c", conf])
    assert rc == 78 and "no control socket" in err, (rc, out, err)
    # turned on by a SIGHUP
    write_conf(d, "[sockferry]\ncontrol = unix:%s/one.sock\n" % d + fwd)
    n = summaries(r)
    r.signal(signal.SIGHUP)
    reloaded(r, n, "reload: 0 added, 0 removed, 0 changed, 1 unchanged")
    assert "control socket on unix:%s/one.sock" % d in r.text()
    # moved by a reload asked on the old one, which still gets the answer
    write_conf(d, "[sockferry]\ncontrol = unix:%s/two.sock\n" % d + fwd)
    rc, out, err = run_sockferry(["reload", "--control", d + "/one.sock"])
    assert rc == 0 and out.startswith("reload: 0 added"), (rc, out, err)
    wait_for(lambda: not os.path.exists(d + "/one.sock"), what="the old control socket to go")
    rc, out, err = run_sockferry(["stats", "-c", conf])
    assert rc == 0 and "a: unix:%s/a.sock" % d in out, (rc, out, err)
    # turned off
    write_conf(d, fwd)
    rc, out, err = run_sockferry(["reload", "--control", d + "/two.sock"])
    assert rc == 0, (rc, out, err)
    wait_for(lambda: not os.path.exists(d + "/two.sock"), what="the control socket to go")
    assert echoes(d + "/a.sock")


def test_reload_200_times_leaves_nothing(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/echo.sock")
    token = keygen(d)
    port = free_port()
    head = "[sockferry]\ncontrol = unix:%s/control.sock\n\n" % d
    base = head + forward("keep", "unix:%s/keep.sock" % d, "unix:%s/echo.sock" % d) + \
        forward("host", "tcp:127.0.0.1:%d" % port, "unix:%s/echo.sock" % d, "auth = token\ntoken-file = %s" % token)
    # the other configuration: keep unchanged, host changed (max-conns), one forward more (a
    # container-side one with its shared link to host)
    other = head + forward("keep", "unix:%s/keep.sock" % d, "unix:%s/echo.sock" % d) + \
        forward("host", "tcp:127.0.0.1:%d" % port, "unix:%s/echo.sock" % d,
                "auth = token\ntoken-file = %s\nmax-conns = 99" % token) + \
        forward("extra", "unix:%s/extra.sock" % d, "tcp:127.0.0.1:%d" % port, "auth = token\ntoken-file = %s" % token)
    conf = write_conf(d, base)
    r = sc.relay(["relay", "-c", conf])
    held = sc.closing(connect(d + "/keep.sock"))
    echoed(held, b"x")

    def reload_to(text):
        write_conf(d, text)
        rc, out, err = run_sockferry(["reload", "-c", conf])
        assert rc == 0, (rc, out, err)
        return out

    def no_links():
        rc, out, err = run_sockferry(["stats", "-c", conf, "--format", "json"])
        return rc == 0 and json.loads(out)["links"] == []

    # once to the other and back: the first reload sets up what every later one reuses
    reload_to(other)
    assert echoes(d + "/extra.sock")
    reload_to(base)
    # The count to come back to, once the removed forward's shared link is closed at both of
    # its ends (this relay is both): under valgrind on a loaded machine that outlasted
    # steady()'s 100 ms, and the count taken then held its two descriptors.
    wait_for(no_links, what="the removed forward's shared link closed at both ends")
    fds = steady(r.fds, "the relay's descriptors")
    rss = r.rss_kib()
    # 200 reloads where RSS is judged; under a sanitizer or memcheck, whose leak checks find what
    # a single reload leaves and whose RSS says nothing, 20 (under ASan 200 took 98 s).
    rounds = 10 if VALGRIND or SANITIZED else 100
    for i in range(rounds):
        assert reload_to(other) == "reload: 1 added, 0 removed, 1 changed, 1 unchanged\n"
        if i % 10 == 0:
            assert echoes(d + "/extra.sock")
        assert reload_to(base) == "reload: 0 added, 1 removed, 1 changed, 1 unchanged\n"
    echoed(held, b"after %d reloads" % (2 * rounds))
    wait_for(no_links, what="the last removed forward's shared link closed at both ends")
    fds_back(r, fds, "relay")
    # (memcheck keeps freed blocks aside: its RSS says nothing; its leak check at the end does)
    assert VALGRIND or SANITIZED or r.rss_kib() < rss + 8 * 1024, "RSS grew from %d to %d KiB" % (rss, r.rss_kib())
    assert echoes(d + "/keep.sock")
    held.close()


def test_sandbox_new_directory_is_refused(sc):
    """Under the seccomp sandbox with Landlock a reload binds only where the relay had sockets
    at start: a socket in another directory fails the reload, plainly, and changes nothing."""
    rc, out, _ = run_sockferry(["version"])
    if "applies here; Landlock ABI" not in out:
        raise Skip("no seccomp sandbox with Landlock here: %s" % " ".join(out.split()))
    if VALGRIND:
        raise Skip("the sandbox is not applied under valgrind")
    d = sc.tmpdir()
    other = sc.tmpdir()
    sc.server("echo", d + "/echo.sock")
    head = "[sockferry]\ncontrol = unix:%s/control.sock\n\n" % d + \
        forward("a", "unix:%s/a.sock" % d, "unix:%s/echo.sock" % d)
    conf = write_conf(d, head)
    r = sc.relay(["relay", "-c", conf])
    write_conf(d, head + forward("b", "unix:%s/b.sock" % other, "unix:%s/echo.sock" % d))
    rc, out, err = run_sockferry(["reload", "-c", conf])
    assert rc == 1 and "nothing changed" in err, (rc, out, err)
    assert "the sandbox lets the relay create sockets only in the directories it had at start" in r.text(), r.text()
    assert not os.path.exists(other + "/b.sock")
    # in the directory it has, the same forward is bound
    write_conf(d, head + forward("b", "unix:%s/b.sock" % d, "unix:%s/echo.sock" % d))
    rc, out, err = run_sockferry(["reload", "-c", conf])
    assert rc == 0 and echoes(d + "/b.sock"), (rc, out, err)


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
