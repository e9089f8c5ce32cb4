#!/usr/bin/env python3
"""End-to-end tests of `sockferry check`: a health probe through an authenticated link, its
plain words for each way a link fails, and its exit status over several forwards and
candidates. Each test gets a Scene (tests/lib/sfharness.py) for what it starts."""

import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import SOCKFERRY, Link, Scene, check, free_port, keygen, wait_for, write_conf  # noqa: E402


def test_check_ok_through_an_authenticated_link(sc):
    ln = Link(sc)
    # nothing listens on the forward's own socket: clients would fail, so check does too
    rc, out, err = check("-F", ln.spec())
    assert rc == 1, (rc, out, err)
    assert re.fullmatch(r"c: FAIL listen unix:%s/c\.sock is missing: the relay for this forward is not running "
                        r"\(sockferry probe %s/c\.sock says more; --link-only checks the link alone\); the link: "
                        r"OK \(tcp:127\.0\.0\.1:%d, shared link up, RTT [\d.]+ ms, service c: upstream answers, \d+ ms\)\n"
                        % (ln.d, ln.d, ln.port), out), out
    # --link-only asks for the link alone: then it is a warning
    rc, out, err = check("--link-only", "-F", ln.spec())
    assert rc == 0, (rc, out, err)
    assert re.fullmatch(r"c: OK \(tcp:127\.0\.0\.1:%d, shared link up, RTT [\d.]+ ms, service c: upstream answers, "
                        r"\d+ ms\)\n" % ln.port, out), out
    # link = per-connection keeps the probe of sockferry/1: one handshake with the probe flag
    rc, out, err = check("--link-only", "-F", ln.spec(extra=",link=per-connection"))
    assert rc == 0, (rc, out, err)
    assert re.fullmatch(r"c: OK \(tcp:127\.0\.0\.1:%d, upstream answers, \d+ ms\)\n" % ln.port, out), out
    assert "warning" in err and "is missing" in err and "relay for this forward is not running" in err, err
    # -t checks the configuration and connects nowhere
    rc, out, err = check("-t", "-F", ln.spec())
    assert rc == 0 and out == "c: listen unix:%s/c.sock -> connect tcp:127.0.0.1:%d, auth = token (token-file %s)\n" \
        "configuration OK: 1 forward, nothing bound\n" % (ln.d, ln.port, ln.token), (rc, out, err)
    # with the container-side relay running the warning goes away
    sc.relay(["relay", "-F", ln.spec()])
    rc, out, err = check("-F", ln.spec())
    assert rc == 0 and "warning" not in err, (rc, out, err)


def test_check_plain_words_for_each_failure(sc):
    ln = Link(sc)
    other = keygen(ln.d, "other")
    banner_port, silent_port, dead_port = free_port(), free_port(), free_port()
    sc.server("banner", "tcp:127.0.0.1:%d" % banner_port)
    sc.server("sink", "tcp:127.0.0.1:%d" % silent_port)
    rc, out, _ = check("--link-only", "-F", ln.spec(token=other))
    assert rc == 1 and out.startswith("c: FAIL auth rejected: tcp:127.0.0.1:%d" % ln.port) and other in out, out

    rc, out, _ = check("--link-only", "-F", "b:unix:%s/b.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s"
                       % (ln.d, banner_port, ln.token))
    assert rc == 1 and 'b: FAIL wrong peer' in out and '"SSH-2.0-OpenSSH_9.2p1' in out, out

    start = time.monotonic()
    rc, out, _ = check("--link-only", "--timeout", "500ms", "-F", "s:unix:%s/s.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s"
                       % (ln.d, silent_port, ln.token))
    assert rc == 1 and "sent nothing within 500ms" in out, out
    assert time.monotonic() - start < 3, "the timeout was not kept"

    rc, out, _ = check("--link-only", "-F", "d:unix:%s/d.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s"
                       % (ln.d, dead_port, ln.token))
    assert rc == 1 and "d: FAIL connect tcp:127.0.0.1:%d: Connection refused" % dead_port in out, out

    ln.srv.stop()
    rc, out, _ = check("--link-only", "-F", ln.spec())
    assert rc == 1 and "c: FAIL upstream unavailable: the host relay at tcp:127.0.0.1:%d could not reach its " \
        "upstream: connect unix:%s/service.sock" % (ln.port, ln.d) in out, out

    # a version this build does not speak
    vs = sc.enter_context(socket.socket())
    vs.bind(("127.0.0.1", 0))
    vs.listen(1)
    vport = vs.getsockname()[1]
    p = sc.popen([SOCKFERRY, "check", "--link-only", "-F",
                  "v:unix:%s/v.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s" % (ln.d, vport, ln.token)],
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    c = sc.enter_context(vs.accept()[0])
    c.sendall(b"SFRY\x02" + b"\0" * 32)
    out = p.communicate(timeout=10)[0].decode()
    c.close()
    vs.close()
    assert p.returncode == 1 and "version mismatch" in out and "sockferry/2" in out, out


def test_check_several_forwards_and_candidates_exit_status(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/svc.sock")
    dead = free_port()
    good = "good:unix:%s/g.sock=unix:%s/svc.sock" % (d, d)
    fallback = "fb:unix:%s/f.sock=tcp:127.0.0.1:%d|unix:%s/svc.sock" % (d, dead, d)
    bad = "bad:unix:%s/b.sock=unix:%s/nothing.sock" % (d, d)
    rc, out, err = check("--link-only", "-F", good, "-F", fallback)
    assert rc == 0, (rc, out, err)
    # one line per candidate tried: fb's first one fails, its second one answers
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("good: OK (unix:%s/svc.sock, connected" % d), out
    assert lines[1].startswith("fb: FAIL connect tcp:127.0.0.1:%d: Connection refused" % dead), out
    assert lines[2].startswith("fb: OK (unix:%s/svc.sock" % d), out
    rc, out, err = check("--link-only", "-F", good, "-F", bad)
    assert rc == 1 and "good: OK" in out and "bad: FAIL connect unix:%s/nothing.sock: No such file" % d in out, out
    # usage and configuration errors
    assert check("--timeout", "soon", "-F", good)[0] == 64
    rc, _, err = check("-t", "5s", "-F", good)
    assert rc == 64 and "unexpected argument '5s' (-t is --test, as in relay and run; the timeout is " \
        "--timeout DUR)" in err, (rc, err)
    assert check("extra")[0] == 64
    assert check()[0] == 78
    assert check("-F", "x:unix:%s/x.sock=tcp:127.0.0.1:1,auth=token,token-file=%s/none" % (d, d))[0] == 78


def test_check_opens_a_stream_to_each_service_over_the_shared_link(sc):
    """Three services on one host port: check opens a probe stream over the shared link for
    each forward's service, and says per forward whether the host reached its upstream; the
    host relay sees one link per check, as a container relay would open it."""
    d = sc.tmpdir()
    token = keygen(d)
    port = free_port()
    sc.server("echo", d + "/a.sock")
    sc.server("echo", d + "/b.sock")
    host_conf = write_conf(d, "".join(
        "[{n}]\nlisten = tcp:127.0.0.1:{p}\nconnect = unix:{d}/{n}.sock\nauth = token\ntoken-file = {t}\n\n"
        .format(n=n, p=port, d=d, t=token) for n in ("a", "b", "gone")), "host.conf")
    host = sc.relay(["relay", "-v", "-c", host_conf])

    def spec(name, service, extra=""):
        return "%s:unix:%s/c-%s.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s,service=%s%s" % (
            name, d, name, port, token, service, extra)
    rc, out, err = check("--link-only", "-F", spec("x", "a"), "-F", spec("y", "b"))
    assert rc == 0, (rc, out, err)
    lines = out.splitlines()
    assert len(lines) == 2, out
    for name, service in (("x", "a"), ("y", "b")):
        assert any(re.fullmatch(r"%s: OK \(tcp:127\.0\.0\.1:%d, shared link up, RTT [\d.]+ ms, service %s: "
                                r"upstream answers, \d+ ms\)" % (name, port, service), ln) for ln in lines), out

    # a service whose upstream is gone, and one the host does not offer: exit 1, and the
    # healthy one is still OK on its own line
    rc, out, err = check("--link-only", "-F", spec("x", "a"), "-F", spec("z", "gone"), "-F", spec("u", "nosuch"))
    assert rc == 1, (rc, out, err)
    lines = out.splitlines()
    assert len(lines) == 3, out
    assert lines[0].startswith("x: OK (tcp:127.0.0.1:%d, shared link up" % port), out
    assert lines[1].startswith("z: FAIL upstream unavailable: the host relay at tcp:127.0.0.1:%d could not reach "
                               "its upstream: connect unix:%s/gone.sock" % (port, d)), out
    assert lines[2].startswith("u: FAIL upstream unavailable: the host relay at tcp:127.0.0.1:%d refused the "
                               "stream: " % port) and "nosuch" in lines[2] and "a, b, gone" in lines[2], out
    # the host relay took each check's link as a link for a check (logged at debug level)
    wait_for(lambda: host.text().count("for sockferry check") == 5, what="five checks' links in the host's log")
    assert "probe" not in out


def test_check_over_the_shared_link_with_its_relay_running(sc):
    """A container relay keeps its shared link; check opens its own next to it and reports
    the same host, healthy; stopping the host relay makes check fail with the cause."""
    ln = Link(sc)
    sc.relay(["relay", "-F", ln.spec()])
    rc, out, err = check("-F", ln.spec())
    assert rc == 0 and re.fullmatch(r"c: OK \(tcp:127\.0\.0\.1:%d, shared link up, RTT [\d.]+ ms, service c: "
                                    r"upstream answers, \d+ ms\)\n" % ln.port, out), (rc, out, err)
    # at the host's default log level a health check is no news: the relay's own link is
    wait_for(lambda: "shared link from" in ln.host.text(), what="the container relay's link in the host's log")
    assert ln.host.text().count("shared link from") == 1 and "link from" not in ln.host.text().replace(
        "shared link from", ""), ln.host.text()
    ln.host.stop()
    rc, out, err = check("-F", ln.spec())
    assert rc == 1 and out.startswith("c: FAIL connect tcp:127.0.0.1:%d: Connection refused" % ln.port), (rc, out, err)


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
