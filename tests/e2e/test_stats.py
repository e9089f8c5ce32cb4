#!/usr/bin/env python3
"""End-to-end tests of `sockferry stats` and the control socket: counters that agree with
what happened, errors in the right counter, bad requests and other users refused, `run`
serving stats too, and a hostile control socket's answer capped and cleaned. Each test gets
a Scene (tests/lib/sfharness.py) for what it starts."""

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import (Link, Scene, Skip, connect, echo_once, free_port, keygen, recv_all, run_measured,  # noqa: E402
                       run_sockferry, steady, wait_for, write_conf)


def control_conf(d, name):
    """A config with a control socket and one forward NAME: in.sock -> svc.sock."""
    return write_conf(d, "[sockferry]\ncontrol = unix:%s/control.sock\n\n[%s]\nlisten = unix:%s/in.sock\n"
                      "connect = unix:%s/svc.sock\n" % (d, name, d, d))


def stats(args, fmt="json"):
    rc, out, err = run_sockferry(["stats"] + args + ["--format", fmt])
    assert rc == 0, "stats exited %d: %s%s" % (rc, out, err)
    return json.loads(out) if fmt == "json" else out


def fwd(st, name):
    return [f for f in st["forwards"] if f["name"] == name][0]


def test_stats_counters_agree_with_reality(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/svc.sock")
    conf = control_conf(d, "echo")
    r = sc.relay(["relay", "-c", conf])
    assert stat.S_IMODE(os.stat(d + "/control.sock").st_mode) == 0o600
    base = stats(["-c", conf])
    # the server counts the control connection that asks, the outside view does not (once
    # the server has seen the asking client go)
    wait_for(lambda: r.fds() == base["process"]["open_fds"] - 1,
             what="the relay's fds (%d) to be those it reported less the control connection" % r.fds())
    assert base["process"]["pid"] == r.pid and base["process"]["rss_bytes"] > 1 << 20
    e = fwd(base, "echo")
    assert (e["active"], e["total"], e["bytes_up"], e["bytes_down"]) == (0, 0, 0, 0), e
    assert e["candidate"] is None and e["last_error"] is None

    n, size = 10, 1000
    conns = sc.closing([])
    for i in range(n):
        s = connect(d + "/in.sock")
        conns.append(s)
        s.sendall(bytes([i]) * size)
        got = b""
        while len(got) < size:
            got += s.recv(size - len(got))
        assert got == bytes([i]) * size
    st = stats(["--control", d + "/control.sock"])
    e = fwd(st, "echo")
    assert (e["active"], e["total"], e["bytes_up"], e["bytes_down"]) == (n, n, n * size, n * size), e
    assert e["candidate"] == "unix:%s/svc.sock" % d
    assert st["process"]["open_fds"] == base["process"]["open_fds"] + 2 * n, st["process"]
    assert st["process"]["uptime_seconds"] >= 0

    for s in conns:
        s.close()
    wait_for(lambda: fwd(stats(["-c", conf]), "echo")["active"] == 0, what="active back to 0")
    wait_for(lambda: r.fds() == base["process"]["open_fds"] - 1, what="fds back to the baseline")
    st = stats(["-c", conf])
    e = fwd(st, "echo")
    assert e["total"] == n and e["bytes_up"] == n * size and sum(e["errors"].values()) == 0, e
    assert st["process"]["open_fds"] == base["process"]["open_fds"], (st["process"], base["process"])

    text = stats(["-c", conf], "text")
    assert "echo: unix:%s/in.sock, 0 active, %d total, %d bytes up, %d bytes down" % (d, n, n * size, n * size) \
        in text, text
    assert re.search(r"process: pid %d, \d+ open fds, RSS [\d.]+ MiB, up \d+h\d\dm\d\ds" % r.pid, text), text

    samples = prom_samples(stats(["-c", conf], "prometheus"))
    assert samples['sockferry_connections_active{forward="echo"}'] == 0
    assert samples['sockferry_connections_total{forward="echo"}'] == n
    assert samples['sockferry_bytes_total{forward="echo",direction="up"}'] == n * size
    assert samples['sockferry_errors_total{forward="echo",kind="connect_refused"}'] == 0
    assert samples['sockferry_candidate_info{forward="echo",candidate="unix:%s/svc.sock"}' % d] == 1
    assert samples["process_open_fds"] == base["process"]["open_fds"]
    r.stop()
    assert not os.path.exists(d + "/control.sock"), "the control socket was left behind"


def test_stats_errors_land_in_the_right_counter(sc):
    ln = Link(sc)
    other = keygen(ln.d, "other")
    banner_port = free_port()
    sc.server("banner", "tcp:127.0.0.1:%d" % banner_port)
    conf = write_conf(ln.d, """[sockferry]
control = unix:{d}/control.sock
[refused]
listen = unix:{d}/refused.sock
connect = unix:{d}/nothing.sock
[denied]
listen = unix:{d}/denied.sock
connect = unix:{d}/service.sock
allow-uid = 54321
[badtoken]
listen = unix:{d}/badtoken.sock
connect = tcp:127.0.0.1:{port}
auth = token
token-file = {other}
[peer]
listen = unix:{d}/peer.sock
connect = tcp:127.0.0.1:{banner}
auth = token
token-file = {token}
[upstream]
listen = unix:{d}/upstream.sock
connect = tcp:127.0.0.1:{port}
auth = token
token-file = {token}
""".format(d=ln.d, port=ln.port, other=other, token=ln.token, banner=banner_port))
    sc.relay(["relay", "-c", conf])

    def poke(name):
        s = connect("%s/%s.sock" % (ln.d, name))
        try:
            s.sendall(b"x")
            recv_all(s)
        except OSError:
            pass
        s.close()

    for name in ("refused", "denied", "badtoken", "peer"):
        poke(name)
    ln.srv.stop()
    poke("upstream")

    def errors_now():
        st = stats(["-c", conf])
        return {f["name"]: f["errors"] for f in st["forwards"]}, st

    def settled():
        errs, _ = errors_now()
        return all(sum(errs[n].values()) >= 1 for n in ("refused", "denied", "badtoken", "peer", "upstream"))

    wait_for(settled, what="every forward to count its error")
    errs, st = errors_now()
    expect = {"refused": "connect_refused", "denied": "peer_denied", "badtoken": "auth_rejected",
              "peer": "wrong_peer", "upstream": "upstream_unavailable"}
    for name, kind in expect.items():
        assert errs[name][kind] == 1, (name, errs[name])
        assert sum(errs[name].values()) == 1, (name, errs[name])
        last = fwd(st, name)["last_error"]
        assert last and last["unix_time"] > 0 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", last["time"])
    assert "not in allow-uid" in fwd(st, "denied")["last_error"]["message"]
    assert fwd(st, "refused")["active"] == 0 and fwd(st, "denied")["total"] == 0
    # the host relay saw the same two failures from its side
    # (its lines may reach its log after the container relay has counted the failures)
    wait_for(lambda: "auth rejected" in ln.host.text() and "upstream unavailable" in ln.host.text(), timeout=5,
             what="the host relay's lines of both failures", detail=ln.host.text)


def test_control_socket_rejects_bad_requests_and_stays_healthy(sc):
    d = sc.tmpdir()
    conf = control_conf(d, "x")
    r = sc.relay(["relay", "-c", conf])
    base = r.fds()

    def ask(data, shut=True):
        s = connect(d + "/control.sock")
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        out = recv_all(s)
        s.close()
        return out

    assert ask(b"hello\n").startswith(b"error: unknown request"), "garbage answered"
    assert ask(b"stats xml\n").startswith(b"error: unknown request")
    assert ask(b"a" * 1000, shut=False).startswith(b"error: request longer than")
    assert b'"forwards"' in ask(b"stats json\n")
    # a client that says nothing is cut off, and holds nothing once gone
    start = time.monotonic()
    s = connect(d + "/control.sock")
    assert s.recv(10) == b""
    assert time.monotonic() - start < 5
    s.close()
    # more clients at once than the server serves: the extra ones are closed, none hang
    many = sc.closing([connect(d + "/control.sock") for _ in range(20)])
    answered = 0
    for s in many:
        try:
            s.sendall(b"stats\n")
            answered += recv_all(s).startswith(b"process:")
        except OSError:
            pass
        s.close()
    # 8 at a time; a connection from above may still hold a slot until the server sees it go
    assert answered >= 4, answered
    wait_for(lambda: r.fds() == base, what="fds back to the baseline (%d, now %d)" % (base, r.fds()))

    rc, out, err = run_sockferry(["stats", "--control", d + "/nothing.sock"])
    assert rc == 1 and "is the relay running" in err, (rc, err)
    assert run_sockferry(["stats"])[0] == 64
    assert run_sockferry(["stats", "--control", d + "/c", "--format", "xml"])[0] == 64
    nocontrol = write_conf(d, "[x]\nlisten = unix:%s/in2.sock\nconnect = unix:%s/svc.sock\n" % (d, d), "c2")
    rc, out, err = run_sockferry(["stats", "-c", nocontrol])
    assert rc == 78 and "no control socket" in err, (rc, err)


def test_run_serves_stats_and_notifies(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/svc.sock")
    conf = control_conf(d, "x")
    r = sc.relay(["run", "--no-preload", "-c", conf, "--", "sleep", "60"], expect=128 + signal.SIGTERM)
    s = connect(d + "/in.sock")
    s.sendall(b"ping")
    assert s.recv(4) == b"ping"
    s.close()
    wait_for(lambda: fwd(stats(["-c", conf]), "x")["total"] == 1, what="run's counters")
    r.signal(signal.SIGTERM)
    r.notified(b"STOPPING=1")
    assert r.wait() == 128 + signal.SIGTERM
    r.stop()
    assert not os.path.exists(d + "/control.sock")


def one_answer(sc, path, send):
    """A control socket at path that answers each request with send(conn), until the with
    block ends (a scene of its own: the caller's Scene() as sc)."""
    ls = socket.socket(socket.AF_UNIX)
    ls.bind(path)
    ls.listen(1)

    def serve(c):
        c.recv(100)
        send(c)
        c.close()
    sc.serve(ls, serve, threaded=False)


def test_stats_caps_the_answer_and_prints_only_text(sc):
    """`stats --control` against a socket that kept sending grew to 4.2 GB and copied terminal
    escape sequences to stdout."""
    d = sc.tmpdir()

    def endless(c):
        chunk = b"A" * 65536
        while True:
            c.sendall(chunk)
    with Scene() as fake:
        one_answer(fake, d + "/endless.sock", endless)
        rc, out, err, peak_kib = run_measured(["stats", "--control", d + "/endless.sock"])
    assert rc == 1 and "goes on past 1048576 bytes" in err and out == "", (rc, err)
    assert peak_kib < 32 * 1024, peak_kib

    evil = b"process: pid 1\x1b]0;owned\x07\x1b[2J\x9b31m \xc2\x9b1m caf\xc3\xa9\r\x00\n"
    for fmt in ("text", "json", "prometheus"):
        with Scene() as fake:
            one_answer(fake, d + "/escapes.sock", lambda c: c.sendall(evil))
            rc, out, err, _ = run_measured(["stats", "--control", d + "/escapes.sock", "--format", fmt])
        os.unlink(d + "/escapes.sock")
        assert rc == 0, (rc, err)
        assert out == "process: pid 1?]0;owned??[2J?31m ??1m caf\u00e9??\n", repr(out)
        assert "8 bytes that were not printable text replaced with '?'" in err, err


def test_control_socket_refuses_other_users(sc):
    """An abstract control socket (unix:@NAME) has no file mode: before, any local user read the
    stats with the last error (peer addresses, token paths). Only root and the relay's user."""
    if os.geteuid() != 0:
        raise Skip("needs root to connect as another uid")
    d = sc.tmpdir()
    name = "sf-test-control-%d" % os.getpid()
    conf = write_conf(d, "[sockferry]\ncontrol = unix:@%s\n\n[x]\nlisten = unix:%s/in.sock\n"
                      "connect = unix:%s/svc.sock\n" % (name, d, d))
    r = sc.relay(["relay", "-c", conf])
    # what the child prints: the answer, or "closed" when the relay closed without one
    ask = ("import socket, sys\n"
           "s = socket.socket(socket.AF_UNIX)\n"
           "s.connect('\\0%s')\n"
           "out = b''\n"
           "try:\n"
           "    s.sendall(b'stats json\\n')\n"
           "    while True:\n"
           "        b = s.recv(65536)\n"
           "        if not b:\n"
           "            break\n"
           "        out += b\n"
           "except (BrokenPipeError, ConnectionResetError):\n"
           "    pass\n"
           "sys.stdout.write(out.decode() or 'closed')\n" % name)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

    def as_uid(uid):
        def drop():
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        p = subprocess.run([python, "-c", ask], capture_output=True, timeout=10, cwd="/",
                           preexec_fn=drop if uid else None)
        assert p.returncode == 0, p.stderr.decode()
        return p.stdout.decode()
    for _ in range(3):
        got = as_uid(65534)
        assert got == "closed", "uid 65534 read the stats: " + got
    assert '"forwards"' in as_uid(0), "root was refused"
    assert fwd(stats(["--control", "unix:@" + name]), "x")["active"] == 0
    log = r.text()
    assert log.count("refused a connection from uid 65534: only root and uid 0 may read the stats") == 1, log
    assert "1 refused in all" in log, log


def link_confs(d, port, token):
    """A host relay's and a container relay's configurations, each with its control socket, the
    container's forward c reaching the host's echo service over the shared link."""
    host = write_conf(d, "[sockferry]\ncontrol = unix:{d}/host-control.sock\n\n[host]\nlisten = tcp:127.0.0.1:{p}\n"
                      "connect = unix:{d}/service.sock\nauth = token\ntoken-file = {t}\n".format(d=d, p=port, t=token),
                      "host.conf")
    cont = write_conf(d, "[sockferry]\ncontrol = unix:{d}/cont-control.sock\n\n[c]\nlisten = unix:{d}/c.sock\n"
                      "connect = tcp:127.0.0.1:{p}\nauth = token\ntoken-file = {t}\nlink = shared\n".format(d=d, p=port, t=token),
                      "cont.conf")
    return host, cont


def prom_samples(text):
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) (sockferry|process)_\w+ .+", line), line
            continue
        m = re.fullmatch(r'((sockferry|process)_\w+)(\{(\w+="[^"]*")(,\w+="[^"]*")*\})? (-?[\d.]+)', line)
        assert m, "not a Prometheus sample: %r" % line
        samples[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return samples


def echoes(path, data):
    """One client of the echo service: data, half-closed, comes back and nothing more."""
    got = echo_once(path, data, half_close=True)
    assert got == data, (got, data)


def test_stats_per_shared_link_both_ends(sc):
    """Both relays of a shared link report it: role, peer, state and since, the pings' round
    trip, open and total streams, reconnects and bytes, in text, json and prometheus; the link
    going down and coming back is logged once each, however many dials it took."""
    d = sc.tmpdir()
    token = keygen(d)
    port = free_port()
    sc.server("echo", d + "/service.sock")
    host_conf, cont_conf = link_confs(d, port, token)
    host = sc.relay(["relay", "-c", host_conf])
    cont = sc.relay(["relay", "-c", cont_conf])
    ep = "tcp:127.0.0.1:%d" % port

    def links(conf):
        return stats(["-c", conf])["links"]
    wait_for(lambda: [x["state"] for x in links(cont_conf)] == ["up"], what="the container's link up")
    n = 5
    for i in range(n):
        echoes(d + "/c.sock", bytes([i]) * 1000)
    cl = links(cont_conf)
    assert len(cl) == 1, cl
    c = cl[0]
    assert (c["role"], c["endpoint"], c["token_file"], c["forward"], c["cause"]) == ("client", ep, token, None, None), c
    # (a sanity bound: one late loop turn of a relay under ASan on a loaded machine is a second)
    assert c["rtt_seconds"] is not None and 0 < c["rtt_seconds"] < 5, c
    assert abs(c["since_unix"] - time.time()) < 60 and c["since"].endswith("Z"), c
    assert (c["streams_total"], c["reconnects"]) == (n, 0), c
    # each stream's 1000 bytes each way, with their frames
    assert c["bytes_out"] > n * 1000 and c["bytes_in"] > n * 1000, c
    wait_for(lambda: links(cont_conf)[0]["streams_open"] == 0, what="the streams closed on the container side")
    hl = links(host_conf)
    assert len(hl) == 1, hl
    h = hl[0]
    assert (h["role"], h["forward"], h["state"], h["token_file"]) == ("server", "host", "up", None), h
    assert re.fullmatch(r"127\.0\.0\.1:\d+ \(tcp:127\.0\.0\.1:%d\)" % port, h["peer"]), h
    assert h["rtt_seconds"] is not None and h["streams_total"] == n, h
    # the host's bytes in are the container's bytes out, but for frames still on their way
    assert n * 1000 < h["bytes_in"] <= c["bytes_out"] and n * 1000 < h["bytes_out"], (h, c)

    # a stream open right now is counted as open on both ends
    held = connect(d + "/c.sock")
    sc.closing(held)
    held.sendall(b"x")
    assert held.recv(1) == b"x"
    wait_for(lambda: links(cont_conf)[0]["streams_open"] == 1, what="one stream open on the container side")
    wait_for(lambda: links(host_conf)[0]["streams_open"] == 1, what="one stream open on the host side")
    text = stats(["-c", cont_conf], "text")
    assert re.search(r"^link to %s \(token-file %s\): up since \S+Z, RTT [\d.]+ ms, 1 streams open, %d total, "
                     r"0 reconnects, \d+ bytes in, \d+ bytes out$" % (re.escape(ep), re.escape(token), n + 1),
                     text, re.M), text
    text = stats(["-c", host_conf], "text")
    assert re.search(r"^link from 127\.0\.0\.1:\d+ \(%s\) \(forward host\): up since \S+Z, RTT [\d.]+ ms, "
                     r"1 streams open, %d total" % (re.escape(ep), n + 1), text, re.M), text
    prom = prom_samples(stats(["-c", cont_conf], "prometheus"))
    lab = 'role="client",peer="%s",token_file="%s"' % (ep, token)
    assert prom['sockferry_link_up{%s}' % lab] == 1, prom
    assert prom['sockferry_link_state{%s,state="up"}' % lab] == 1
    assert prom['sockferry_link_state{%s,state="down"}' % lab] == 0
    assert prom['sockferry_link_streams_open{%s}' % lab] == 1
    assert prom['sockferry_link_streams_total{%s}' % lab] == n + 1
    assert prom['sockferry_link_reconnects_total{%s}' % lab] == 0
    assert 0 < prom['sockferry_link_rtt_seconds{%s}' % lab] < 5
    assert prom['sockferry_link_bytes_total{%s,direction="in"}' % lab] > n * 1000
    assert abs(prom['sockferry_link_state_since_timestamp_seconds{%s}' % lab] - time.time()) < 60
    prom = prom_samples(stats(["-c", host_conf], "prometheus"))
    assert [k for k in prom if k.startswith('sockferry_link_up{role="server",peer="127.0.0.1:')] != [], prom
    held.close()

    # the host relay goes away for a while: the link is down with its cause, dialled again and
    # again with backoff, logged once; when the host is back it is up again, logged once
    host.stop()
    wait_for(lambda: links(cont_conf)[0]["state"] in ("down", "connecting"), what="the container's link down")
    c = links(cont_conf)[0]
    assert c["cause"], c
    text = stats(["-c", cont_conf], "text")
    assert re.search(r"^link to %s \(token-file %s\): (down|connecting) since \S+Z \(.+\), " % (re.escape(ep),
                     re.escape(token)), text, re.M), text
    prom = prom_samples(stats(["-c", cont_conf], "prometheus"))
    assert prom['sockferry_link_up{%s}' % lab] == 0
    # away for a while, the point of the test: some five dials (100 ms doubling) while it is down
    time.sleep(2.5)
    # down since it went, not since the last dial
    assert links(cont_conf)[0]["since_unix"] == c["since_unix"], (links(cont_conf), c)
    host = sc.relay(["relay", "-c", host_conf])
    wait_for(lambda: links(cont_conf)[0]["state"] == "up", what="the container's link up again")
    c = links(cont_conf)[0]
    assert (c["reconnects"], c["cause"], c["streams_open"]) == (1, None, 0), c
    assert c["streams_total"] == n + 1, c
    echoes(d + "/c.sock", b"again")
    log = cont.text()
    down = re.findall(r"link to %s down \((.*)\); retrying" % re.escape(ep), log)
    up = re.findall(r"link to %s up again after ([\d.]+) s \((\d+) attempts\)" % re.escape(ep), log)
    assert len(down) == 1 and len(up) == 1, log
    assert float(up[0][0]) >= 2 and int(up[0][1]) >= 3, (up, log)
    assert "still down" not in log, log


def test_a_stream_flood_is_bounded_by_max_conns(sc):
    """Two services on one port, a with max-conns = 1: of 20 clients of a at once through the
    shared link one is served and the others are refused as streams (busy, in the host's words
    on the container side), the link stays up for b, and once they are gone the host relay
    holds what it held before: descriptors, open streams."""
    d = sc.tmpdir()
    token = keygen(d)
    port = free_port()
    sc.server("echo", d + "/a.sock")
    sc.server("echo", d + "/b.sock")
    host_conf = write_conf(d, "[sockferry]\ncontrol = unix:{d}/host-control.sock\n\n".format(d=d) + "".join(
        "[{n}]\nlisten = tcp:127.0.0.1:{p}\nconnect = unix:{d}/{n}.sock\nauth = token\ntoken-file = {t}\n"
        "max-conns = {m}\npreauth-max = 64\n\n".format(n=n, p=port, d=d, t=token, m=m) for n, m in (("a", 1), ("b", 5))),
        "host.conf")
    cont_conf = write_conf(d, "[sockferry]\ncontrol = unix:{d}/cont-control.sock\n\n".format(d=d) + "".join(
        "[c{n}]\nlisten = unix:{d}/c{n}.sock\nconnect = tcp:127.0.0.1:{p}\nauth = token\ntoken-file = {t}\nlink = shared\n"
        "service = {n}\n\n".format(n=n, p=port, d=d, t=token) for n in ("a", "b")), "cont.conf")
    host = sc.relay(["relay", "-c", host_conf])
    cont = sc.relay(["relay", "-c", cont_conf])
    echoes(d + "/cb.sock", b"warm")
    wait_for(lambda: stats(["-c", host_conf])["links"][0]["streams_open"] == 0, what="the warm-up stream closed")
    # once the last control connection closed
    base = steady(host.fds, "the host relay's descriptors", times=2, interval=0.3, timeout=30)

    held = sc.closing(connect(d + "/ca.sock"))
    held.sendall(b"x")
    assert held.recv(1) == b"x"
    flood = sc.closing([connect(d + "/ca.sock") for _ in range(19)])
    for s in flood:
        try:
            s.sendall(b"y")
        except (BrokenPipeError, ConnectionResetError):
            pass
    for s in flood:
        s.settimeout(10)
        try:
            assert s.recv(1) == b"", "a client beyond max-conns was served"
        except ConnectionResetError:
            pass
    # in the container's words (its log lines are rate-limited: the counter has them all)
    wait_for(lambda: fwd(stats(["-c", cont_conf]), "ca")["errors"]["upstream_unavailable"] == 19,
             what="19 refusals counted on the container side")
    assert "upstream unavailable: the host relay at tcp:127.0.0.1:%d refused the stream: service a serves " \
        "max-conns = 1 connections already" % port in cont.text(), cont.text()
    # b is not held up by a's flood, on the same link
    echoes(d + "/cb.sock", b"neighbour")
    st = stats(["-c", host_conf])
    assert [x for x in st["forwards"] if x["name"] == "a"][0]["errors"]["other"] == 19, st
    assert len(st["links"]) == 1 and st["links"][0]["state"] == "up", st["links"]
    held.close()
    wait_for(lambda: stats(["-c", host_conf])["links"][0]["streams_open"] == 0, what="no stream open on the host")
    wait_for(lambda: host.fds() == base, what="the host relay's descriptors back to %d (%d)" % (base, host.fds()))
    echoes(d + "/ca.sock", b"after the flood")


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
