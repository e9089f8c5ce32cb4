#!/usr/bin/env python3
"""End-to-end tests of the operations commands: `sockferry check`, `probe`, `stats` with the
control socket, socket activation (systemd-socket-activate) with sd_notify, and vsock.

argv[1]: the sf-deny-vsock helper (tests/relay), which runs a command with socket(AF_VSOCK)
denied the way Docker's default seccomp profile denies it."""

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfharness import (SOCKFERRY, Relay, Server, Skip, Tap, connect, free_port, recv_all,  # noqa: E402
                       run_sockferry, mount_dir, tmpdir, wait_for, ENGINE)

DENY_VSOCK = sys.argv[1] if len(sys.argv) > 1 else None


def keygen(d, name="token"):
    path = os.path.join(d, name)
    rc, _, err = run_sockferry(["keygen", "-o", path])
    assert rc == 0, err
    return path


def write_conf(d, text, name="conf"):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def control_conf(d, name):
    """A config with a control socket and one forward NAME: in.sock -> svc.sock."""
    return write_conf(d, "[sockferry]\ncontrol = unix:%s/control.sock\n\n[%s]\nlisten = unix:%s/in.sock\n"
                      "connect = unix:%s/svc.sock\n" % (d, name, d, d))


def stats(args, fmt="json"):
    rc, out, err = run_sockferry(["stats"] + args + ["--format", fmt])
    assert rc == 0, "stats exited %d: %s%s" % (rc, out, err)
    return json.loads(out) if fmt == "json" else out


def notified(r, what, timeout=10):
    """Waits for an sd_notify message, also after the process exited (run exits at once)."""
    deadline = time.monotonic() + timeout
    r.notify.settimeout(0.1)
    while time.monotonic() < deadline:
        try:
            if what in r.notify.recv(4096):
                return
        except socket.timeout:
            pass
    raise AssertionError("no %s from sockferry:\n%s" % (what, r.text()))


def fwd(st, name):
    return [f for f in st["forwards"] if f["name"] == name][0]


# ---- probe ---------------------------------------------------------------------------------

def probe(path):
    rc, out, err = run_sockferry(["probe", path])
    return rc, out + err


def test_probe_exit_codes_and_advice():
    d = tmpdir()
    srv = Server("echo", d + "/live.sock")
    try:
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
    finally:
        srv.stop()
        shutil.rmtree(d)


def test_probe_names_a_failed_socket_bind_mount():
    """What Docker Desktop leaves at the target of -v /host.sock:/run/x.sock: an empty
    directory that is a mount point."""
    if os.geteuid() != 0:
        raise Skip("needs root to bind-mount a directory")
    d = tmpdir()
    os.mkdir(d + "/src")
    os.mkdir(d + "/x.sock")
    mount_dir(d + "/src", d + "/x.sock")
    try:
        rc, out = probe(d + "/x.sock")
        assert rc == 3, (rc, out)
        assert "mount point" in out and "bind mount" in out and "alias = %s/x.sock" % d in out, out
        # a relay that connects there says the same in its own words
        r = Relay(["relay", "-F", "m:unix:%s/in.sock=unix:%s/x.sock" % (d, d)])
        try:
            s = connect(d + "/in.sock")
            assert recv_all(s) == b""
            s.close()
            wait_for(lambda: "is a directory, not a socket" in r.text(), what="the relay's diagnosis")
        finally:
            r.stop()
    finally:
        subprocess.run(["umount", d + "/x.sock"], check=True)
        shutil.rmtree(d)


# ---- check ---------------------------------------------------------------------------------

class Link:
    """A unix service behind a host relay on tcp with auth = token."""

    def __init__(self, service="echo"):
        self.d = tmpdir()
        self.token = keygen(self.d)
        self.port = free_port()
        self.srv = Server(service, self.d + "/service.sock") if service else None
        self.host = Relay(["relay", "-F", "host:tcp:127.0.0.1:%d=unix:%s/service.sock,auth=token,token-file=%s"
                           % (self.port, self.d, self.token)])

    def spec(self, name="c", token=None, extra=""):
        return "%s:unix:%s/%s.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s%s" % (
            name, self.d, name, self.port, token or self.token, extra)

    def close(self):
        self.host.stop()
        if self.srv:
            self.srv.stop()
        shutil.rmtree(self.d)


def check(*args):
    rc, out, err = run_sockferry(["check"] + list(args))
    return rc, out, err


def test_check_ok_through_an_authenticated_link():
    ln = Link()
    try:
        # nothing listens on the forward's own socket: clients would fail, so check does too
        rc, out, err = check("-F", ln.spec())
        assert rc == 1, (rc, out, err)
        assert re.fullmatch(r"c: FAIL listen unix:%s/c\.sock is missing: the relay for this forward is not running "
                            r"\(sockferry probe %s/c\.sock says more; --link-only checks the link alone\); the link: "
                            r"OK \(tcp:127\.0\.0\.1:%d, upstream answers, \d+ ms\)\n" % (ln.d, ln.d, ln.port), out), out
        # --link-only asks for the link alone: then it is a warning
        rc, out, err = check("--link-only", "-F", ln.spec())
        assert rc == 0, (rc, out, err)
        assert re.fullmatch(r"c: OK \(tcp:127\.0\.0\.1:%d, upstream answers, \d+ ms\)\n" % ln.port, out), out
        assert "warning" in err and "is missing" in err and "relay for this forward is not running" in err, err
        # -t checks the configuration and connects nowhere
        rc, out, err = check("-t", "-F", ln.spec())
        assert rc == 0 and out == "c: listen unix:%s/c.sock -> connect tcp:127.0.0.1:%d, auth = token (token-file %s)\n" \
            "configuration OK: 1 forward, nothing bound\n" % (ln.d, ln.port, ln.token), (rc, out, err)
        # with the container-side relay running the warning goes away
        cont = Relay(["relay", "-F", ln.spec()])
        try:
            rc, out, err = check("-F", ln.spec())
            assert rc == 0 and "warning" not in err, (rc, out, err)
        finally:
            cont.stop()
    finally:
        ln.close()


def test_check_plain_words_for_each_failure():
    ln = Link()
    other = keygen(ln.d, "other")
    banner_port, silent_port, dead_port = free_port(), free_port(), free_port()
    banner = Server("banner", "tcp:127.0.0.1:%d" % banner_port)
    silent = Server("silent", "tcp:127.0.0.1:%d" % silent_port)
    try:
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
        ln.srv = None
        rc, out, _ = check("--link-only", "-F", ln.spec())
        assert rc == 1 and "c: FAIL upstream unavailable: the host relay at tcp:127.0.0.1:%d could not reach its " \
            "upstream: connect unix:%s/service.sock" % (ln.port, ln.d) in out, out

        # a version this build does not speak
        vs = socket.socket()
        vs.bind(("127.0.0.1", 0))
        vs.listen(1)
        vport = vs.getsockname()[1]
        rc = None
        p = subprocess.Popen([os.environ.get("SOCKFERRY", "sockferry"), "check", "--link-only", "-F",
                              "v:unix:%s/v.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s" % (ln.d, vport, ln.token)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        c, _ = vs.accept()
        c.sendall(b"SFRY\x02" + b"\0" * 32)
        out = p.communicate(timeout=10)[0].decode()
        c.close()
        vs.close()
        assert p.returncode == 1 and "version mismatch" in out and "sockferry/2" in out, out
    finally:
        banner.stop()
        silent.stop()
        ln.close()


def test_check_several_forwards_and_candidates_exit_status():
    d = tmpdir()
    srv = Server("echo", d + "/svc.sock")
    dead = free_port()
    try:
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
    finally:
        srv.stop()
        shutil.rmtree(d)


# ---- stats and the control socket --------------------------------------------------------

def test_relay_test_mode_binds_nothing():
    d = tmpdir()
    try:
        token = keygen(d)
        port = free_port()
        spec = "c:unix:%s/c.sock=tcp:localhost:%d|unix:%s/svc.sock,auth=token,token-file=%s" % (d, port, d, token)
        for flag in ("-t", "--test"):
            rc, out, err = run_sockferry(["relay", flag, "-F", spec, "-F", "h:tcp:127.0.0.1:%d=unix:%s/svc.sock" % (port, d)])
            assert rc == 0, (rc, out, err)
            assert out == ("c: listen unix:%s/c.sock -> connect tcp:localhost:%d (127.0.0.1) | unix:%s/svc.sock, "
                           "auth = token (token-file %s)\n"
                           "h: listen tcp:127.0.0.1:%d -> connect unix:%s/svc.sock, auth = none\n"
                           "configuration OK: 2 forwards, nothing bound\n" % (d, port, d, token, port, d)), out
            assert not os.path.exists(d + "/c.sock")
            s = socket.socket()
            assert s.connect_ex(("127.0.0.1", port)) != 0, "-t bound the TCP port"
            s.close()
        # a token file that cannot be used and a name that does not resolve here
        rc, out, err = run_sockferry(["relay", "-t", "-F", "c:unix:%s/c.sock=tcp:nosuch.invalid:1,auth=token,token-file=%s/none"
                                      % (d, d)])
        assert rc == 78 and "cannot open token file %s/none" % d in err, (rc, out, err)
        assert "connect tcp:nosuch.invalid:1: nosuch.invalid does not resolve here" in err, err
        assert "configuration OK" not in out, out
    finally:
        shutil.rmtree(d)


def test_cli_conventions_across_commands():
    version = run_sockferry(["--version"])[1]
    assert re.fullmatch(r"sockferry \S+\n", version), version
    for args in (["relay", "--version"], ["run", "-V"], ["check", "-c", "/nonexistent", "-V"], ["stats", "--version"],
                 ["probe", "--version"], ["keygen", "-V"]):
        rc, out, err = run_sockferry(args)
        assert rc == 0 and out == version, (args, rc, out, err)
    for cmd in ("relay", "run", "check", "stats", "probe"):
        rc, out, _ = run_sockferry(["help", cmd])
        assert rc == 0 and out == run_sockferry([cmd, "--help"])[1], cmd
        assert "Exit status" in out, "%s --help lists no exit status" % cmd
        rc, out, err = run_sockferry([cmd, "--bogus"] + (["--", "true"] if cmd == "run" else []))
        assert rc == 64 and err.startswith("sockferry %s: unknown option '--bogus'" % cmd), (cmd, rc, err)
    for cmd in ("relay", "run", "check"):
        rc, _, err = run_sockferry([cmd, "-vZ"])
        assert rc == 64 and err.startswith("sockferry %s: unknown option '-Z'\n" % cmd), (cmd, rc, err)
        rc, _, err = run_sockferry([cmd, "-c"])
        assert rc == 64 and err.startswith("sockferry %s: option '-c' needs a value\n" % cmd), (cmd, rc, err)
        rc, _, err = run_sockferry([cmd, "--log-format", "xml"])
        assert rc == 64 and "--log-format xml: expected text or json" in err, (cmd, rc, err)
        rc, _, err = run_sockferry([cmd, "--log-format", "json", "-F", "x"] + (["--", "true"] if cmd == "run" else []))
        assert rc == 78 and json.loads(err.splitlines()[0])["level"] == "error", (cmd, rc, err)


def test_journal_priority_prefixes():
    d = tmpdir()
    try:
        with open(d + "/err", "wb") as f:
            st = os.fstat(f.fileno())
            journal = {"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}
            p = subprocess.run([os.environ.get("SOCKFERRY", "sockferry"), "relay", "-v", "-t", "-F",
                                "c:unix:%s/c.sock=tcp:nosuch.invalid:1" % d, "-F", "x"], stderr=f,
                               stdout=subprocess.DEVNULL, env=dict(os.environ, **journal), timeout=20)
        err = open(d + "/err").read()
        assert p.returncode == 78, err
        assert err.startswith("<3>sockferry error: -F 'x': missing ':'"), err
        # stderr elsewhere than the stream JOURNAL_STREAM names: an inherited variable, ignored
        rc, _, err = run_sockferry(["relay", "-F", "x"], env=journal)
        assert rc == 78 and re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z sockferry error: ", err), err
        with open(d + "/err", "wb") as f:
            st = os.fstat(f.fileno())
            journal = {"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}
            subprocess.run([os.environ.get("SOCKFERRY", "sockferry"), "relay", "-v", "-t", "-F",
                            "c:unix:%s/c.sock=tcp:nosuch.invalid:1" % d], stderr=f, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, **journal), timeout=20)
        err = open(d + "/err").read()
        assert err.startswith("<4>sockferry warn [c]: connect tcp:nosuch.invalid:1"), err
    finally:
        shutil.rmtree(d)


def test_stats_counters_agree_with_reality():
    d = tmpdir()
    srv = Server("echo", d + "/svc.sock")
    conf = control_conf(d, "echo")
    r = Relay(["relay", "-c", conf])
    try:
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
        conns = []
        for i in range(n):
            s = connect(d + "/in.sock")
            s.sendall(bytes([i]) * size)
            got = b""
            while len(got) < size:
                got += s.recv(size - len(got))
            assert got == bytes([i]) * size
            conns.append(s)
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

        prom = stats(["-c", conf], "prometheus")
        samples = {}
        for line in prom.splitlines():
            if line.startswith("#"):
                assert re.fullmatch(r"# (HELP|TYPE) (sockferry|process)_\w+ .+", line), line
                continue
            m = re.fullmatch(r'((sockferry|process)_\w+)(\{(\w+="[^"]*")(,\w+="[^"]*")*\})? (-?[\d.]+)', line)
            assert m, "not a Prometheus sample: %r" % line
            samples[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
        assert samples['sockferry_connections_active{forward="echo"}'] == 0
        assert samples['sockferry_connections_total{forward="echo"}'] == n
        assert samples['sockferry_bytes_total{forward="echo",direction="up"}'] == n * size
        assert samples['sockferry_errors_total{forward="echo",kind="connect_refused"}'] == 0
        assert samples['sockferry_candidate_info{forward="echo",candidate="unix:%s/svc.sock"}' % d] == 1
        assert samples["process_open_fds"] == base["process"]["open_fds"]
    finally:
        r.stop()
        srv.stop()
    assert not os.path.exists(d + "/control.sock"), "the control socket was left behind"
    shutil.rmtree(d)


def test_stats_errors_land_in_the_right_counter():
    ln = Link()
    other = keygen(ln.d, "other")
    banner_port = free_port()
    banner = Server("banner", "tcp:127.0.0.1:%d" % banner_port)
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
    r = Relay(["relay", "-c", conf])
    try:
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
        ln.srv = None
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
        assert "auth rejected" in ln.host.text() and "upstream unavailable" in ln.host.text()
    finally:
        r.stop()
        banner.stop()
        ln.close()


def test_control_socket_rejects_bad_requests_and_stays_healthy():
    d = tmpdir()
    conf = control_conf(d, "x")
    r = Relay(["relay", "-c", conf])
    try:
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
        many = [connect(d + "/control.sock") for _ in range(20)]
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
    finally:
        r.stop()
        shutil.rmtree(d)


def test_run_serves_stats_and_notifies():
    d = tmpdir()
    srv = Server("echo", d + "/svc.sock")
    conf = control_conf(d, "x")
    r = Relay(["run", "--no-preload", "-c", conf, "--", "sleep", "60"])
    try:
        s = connect(d + "/in.sock")
        s.sendall(b"ping")
        assert s.recv(4) == b"ping"
        s.close()
        wait_for(lambda: fwd(stats(["-c", conf]), "x")["total"] == 1, what="run's counters")
        r.signal(signal.SIGTERM)
        notified(r, b"STOPPING=1")
        assert r.wait() == 128 + signal.SIGTERM
    finally:
        r.stop(expect=None)
        srv.stop()
    assert not os.path.exists(d + "/control.sock")
    shutil.rmtree(d)


# ---- socket activation ---------------------------------------------------------------------

def activated(d, listen, spec, fdname=None):
    prefix = ["systemd-socket-activate", "-l", listen, "-E", "NOTIFY_SOCKET"]
    if fdname:
        prefix.append("--fdname=" + fdname)
    r = Relay(["relay", "-F", spec], prefix=prefix, wait_ready=False)
    # systemd-socket-activate starts sockferry on the first connection, which then waits in
    # the backlog of the passed socket
    first = wait_for(lambda: try_connect(listen), what="the activation socket")
    return r, first


def try_connect(path):
    try:
        return connect(path)
    except OSError:
        return None


def test_socket_activation_by_name_and_by_fd():
    if not shutil.which("systemd-socket-activate"):
        raise Skip("systemd-socket-activate is not installed")
    d = tmpdir()
    srv = Server("echo", d + "/svc.sock")
    try:
        for how, spec, fdname in (("name", "a:systemd:web=unix:%s/svc.sock" % d, "web"),
                                  ("fd", "a:fd:3=unix:%s/svc.sock" % d, None)):
            r, first = activated(d, d + "/act.sock", spec, fdname)
            try:
                first.sendall(b"hello " + how.encode())
                assert first.recv(100) == b"hello " + how.encode()
                first.close()
                r.wait_notify(b"READY=1")
                s = connect(d + "/act.sock")
                s.sendall(b"again")
                assert s.recv(100) == b"again"
                s.close()
                r.signal(signal.SIGTERM)
                notified(r, b"STOPPING=1")
                assert r.wait() == 0
            finally:
                r.stop()
            # a passed socket belongs to the unit: sockferry never removes it
            assert os.path.exists(d + "/act.sock"), how
            os.unlink(d + "/act.sock")
    finally:
        srv.stop()
        shutil.rmtree(d)


def test_socket_activation_wrong_name_or_none():
    if not shutil.which("systemd-socket-activate"):
        raise Skip("systemd-socket-activate is not installed")
    d = tmpdir()
    try:
        r, first = activated(d, d + "/act.sock", "a:systemd:api=unix:%s/svc.sock" % d, "web")
        rc = r.wait()
        text = r.text()
        r.kill()
        first.close()
        assert rc == 1 and 'no passed socket is named "api" (LISTEN_FDNAMES=web)' in text \
            and "FileDescriptorName=api" in text, (rc, text)

        rc, out, err = run_sockferry(["relay", "-F", "a:systemd:api=unix:%s/svc.sock" % d])
        assert rc == 1 and "no sockets were passed" in err and "systemd-socket-activate" in err, (rc, err)
        rc, out, err = run_sockferry(["relay", "-F", "a:fd:0=unix:%s/svc.sock" % d])
        assert rc == 1 and "fd 0 is not a listening socket" in err, (rc, err)
    finally:
        shutil.rmtree(d)


# ---- vsock ---------------------------------------------------------------------------------

def vsock_loopback():
    """None when a vsock connection to this machine (CID 1) works, else the reason it does not."""
    if not hasattr(socket, "AF_VSOCK"):
        return "this Python has no AF_VSOCK"
    try:
        ls = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    except OSError as e:
        return "socket(AF_VSOCK): %s" % e.strerror
    try:
        ls.bind((socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY))
        ls.listen(1)
        port = ls.getsockname()[1]
        c = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        c.settimeout(2)
        try:
            c.connect((1, port))
        except OSError as e:
            return "connect to CID 1 (VMADDR_CID_LOCAL) failed: %s — the vsock_loopback module is not loaded " \
                   "(modprobe vsock_loopback)" % (e.strerror or e)
        finally:
            c.close()
        return None
    except OSError as e:
        return "bind vsock:any: %s" % e.strerror
    finally:
        ls.close()


def vsock_port():
    return 20000 + os.getpid() % 20000


def test_vsock_link_with_auth_through_loopback():
    if ENGINE == "portable":
        raise Skip("portable build: no vsock, as on macOS (test_vsock_denied... checks its error)")
    why = vsock_loopback()
    if why:
        raise Skip("no vsock loopback: " + why)
    d = tmpdir()
    token = keygen(d)
    port = vsock_port()
    srv = Server("echo", d + "/svc.sock")
    host = Relay(["relay", "-F", "h:vsock:any:%d=unix:%s/svc.sock,auth=token,token-file=%s" % (port, d, token)])
    spec = "c:unix:%s/c.sock=vsock:1:%d,auth=token,token-file=%s" % (d, port, token)
    cont = Relay(["relay", "-F", spec])
    try:
        s = connect(d + "/c.sock")
        data = os.urandom(1 << 20)
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == data
        s.close()
        rc, out, err = check("-F", spec)
        assert rc == 0 and "upstream answers" in out, (rc, out, err)
    finally:
        cont.stop()
        host.stop()
        srv.stop()
        shutil.rmtree(d)


def test_vsock_denied_by_seccomp_points_to_tcp():
    if not DENY_VSOCK or not os.path.exists(DENY_VSOCK):
        raise Skip("the sf-deny-vsock helper was not built")
    if not hasattr(socket, "AF_VSOCK"):
        raise Skip("no AF_VSOCK on this platform")
    d = tmpdir()
    sf = os.environ.get("SOCKFERRY", "sockferry")
    port = vsock_port()
    if ENGINE == "portable":
        # What macOS says: no vsock at all, in one line that points to tcp:.
        try:
            rc, out, err = run_sockferry(["relay", "-F", "v:vsock:any:%d=unix:%s/svc.sock,allow-insecure=yes" % (port, d)])
            assert rc == 1 and "vsock exists on Linux only; use a tcp: endpoint" in err, (rc, err)
            rc, out, err = run_sockferry(["check", "-F", "v:unix:%s/v.sock=vsock:host:%d" % (d, port)])
            assert rc == 1 and "vsock exists on Linux only; use a tcp: endpoint" in out, (rc, out)
        finally:
            shutil.rmtree(d)
        return
    try:
        p = subprocess.run([DENY_VSOCK, sf, "relay", "-F", "v:vsock:any:%d=unix:%s/svc.sock,allow-insecure=yes" % (port, d)],
                           capture_output=True, timeout=20)
        err = p.stderr.decode()
        if p.returncode == 77:
            raise Skip("seccomp filters are not available: " + err.strip())
        assert p.returncode == 1, (p.returncode, err)
        assert "AF_VSOCK sockets are denied here" in err and "seccomp" in err and "tcp:" in err, err

        p = subprocess.run([DENY_VSOCK, sf, "check", "--link-only", "-F", "v:unix:%s/v.sock=vsock:host:%d" % (d, port)],
                           capture_output=True, timeout=20)
        out = p.stdout.decode()
        assert p.returncode == 1 and "v: FAIL connect vsock:host:%d: AF_VSOCK sockets are denied" % port in out \
            and "use a tcp: endpoint" in out, (p.returncode, out)

        r = Relay(["relay", "-F", "v:unix:%s/v.sock=vsock:host:%d" % (d, port)], prefix=[DENY_VSOCK])
        try:
            s = connect(d + "/v.sock")
            assert recv_all(s) == b""
            s.close()
            wait_for(lambda: "AF_VSOCK sockets are denied here" in r.text(), what="the relay's diagnosis")
            assert "use a tcp: endpoint" in r.text()
        finally:
            r.stop()
    finally:
        shutil.rmtree(d)


def test_vsock_listener_binds_and_stops_clean():
    if ENGINE == "portable":
        raise Skip("portable build: no vsock, as on macOS (test_vsock_denied... checks its error)")
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    except (AttributeError, OSError) as e:
        raise Skip("no AF_VSOCK here: %s" % e)
    d = tmpdir()
    port = vsock_port() + 1
    r = Relay(["relay", "-F", "v:vsock:any:%d=unix:%s/svc.sock,allow-insecure=yes" % (port, d)])
    try:
        assert "listening on vsock:any:%d" % port in r.text()
        # the port is taken while the relay runs
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        try:
            s.bind((socket.VMADDR_CID_ANY, port))
            raise AssertionError("the relay does not hold vsock port %d" % port)
        except OSError:
            pass
        finally:
            s.close()
    finally:
        r.stop()


# ---- bounds on what a config file and a control socket can make us hold -------------------

def run_measured(args, timeout=20):
    """Runs sockferry; returns (exit status, stdout, stderr, peak RSS in KiB). Fails the test
    if it is still running after timeout seconds."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([SOCKFERRY] + args, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                raise AssertionError("sockferry %s still running after %d s" % (" ".join(args), timeout))
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (p.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                usage.ru_maxrss)


def test_check_refuses_non_regular_and_oversized_config_files():
    """/dev/zero used to grow to 2.3 GB, a FIFO hung for ever, a 300 MB one-line file peaked
    at 309 MB: each is refused with exit 78 at once, in a few MiB."""
    d = tmpdir()
    try:
        fifo = d + "/fifo"
        os.mkfifo(fifo)
        huge = d + "/huge.conf"
        with open(huge, "wb") as f:  # one line, 300 MB (sparse)
            f.truncate(300 * 1000 * 1000)
        long_line = write_conf(d, "[x]\nlisten = unix:/" + "a" * (1000 * 1000) + "\n", "long.conf")
        cases = [("/dev/zero", "it is a character device, expected a regular file"),
                 (fifo, "it is a FIFO (named pipe), expected a regular file"),
                 (d, "it is a directory, expected a regular file"),
                 (huge, "300000000 bytes, expected a config file of at most 1048576 bytes"),
                 (long_line, "long.conf:2: line is longer than 4096 bytes")]
        for path, why in cases:
            rc, out, err, peak_kib = run_measured(["check", "-c", path], timeout=10)
            assert rc == 78 and why in err and path in err, (path, rc, err)
            # a resource bound, not a speed test: tens of MiB would mean the file was read whole
            assert peak_kib < 32 * 1024, (path, peak_kib)
    finally:
        shutil.rmtree(d)


def fake_control(path, send):
    """A control socket that answers one request with send(conn); returns the thread."""
    ls = socket.socket(socket.AF_UNIX)
    ls.bind(path)
    ls.listen(1)

    def serve():
        c, _ = ls.accept()
        try:
            c.recv(100)
            send(c)
        except OSError:
            pass
        finally:
            c.close()
            ls.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_stats_caps_the_answer_and_prints_only_text():
    """`stats --control` against a socket that kept sending grew to 4.2 GB and copied terminal
    escape sequences to stdout."""
    d = tmpdir()
    try:
        def endless(c):
            chunk = b"A" * 65536
            while True:
                c.sendall(chunk)
        t = fake_control(d + "/endless.sock", endless)
        rc, out, err, peak_kib = run_measured(["stats", "--control", d + "/endless.sock"])
        t.join(5)
        assert rc == 1 and "goes on past 1048576 bytes" in err and out == "", (rc, err)
        assert peak_kib < 32 * 1024, peak_kib

        evil = b"process: pid 1\x1b]0;owned\x07\x1b[2J\x9b31m \xc2\x9b1m caf\xc3\xa9\r\x00\n"
        for fmt in ("text", "json", "prometheus"):
            t = fake_control(d + "/escapes.sock", lambda c: c.sendall(evil))
            rc, out, err, _ = run_measured(["stats", "--control", d + "/escapes.sock", "--format", fmt])
            t.join(5)
            os.unlink(d + "/escapes.sock")
            assert rc == 0, (rc, err)
            assert out == "process: pid 1?]0;owned??[2J?31m ??1m caf\u00e9??\n", repr(out)
            assert "8 bytes that were not printable text replaced with '?'" in err, err
    finally:
        shutil.rmtree(d)


def test_control_socket_refuses_other_users():
    """An abstract control socket (unix:@NAME) has no file mode: before, any local user read the
    stats with the last error (peer addresses, token paths). Only root and the relay's user."""
    if os.geteuid() != 0:
        raise Skip("needs root to connect as another uid")
    d = tmpdir()
    name = "sf-test-control-%d" % os.getpid()
    conf = write_conf(d, "[sockferry]\ncontrol = unix:@%s\n\n[x]\nlisten = unix:%s/in.sock\n"
                      "connect = unix:%s/svc.sock\n" % (name, d, d))
    r = Relay(["relay", "-c", conf])
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
    try:
        for _ in range(3):
            got = as_uid(65534)
            assert got == "closed", "uid 65534 read the stats: " + got
        assert '"forwards"' in as_uid(0), "root was refused"
        assert fwd(stats(["--control", "unix:@" + name]), "x")["active"] == 0
        log = r.text()
        assert log.count("refused a connection from uid 65534: only root and uid 0 may read the stats") == 1, log
        assert "1 refused in all" in log, log
    finally:
        r.stop()
        shutil.rmtree(d)


def test_named_pipes_are_a_config_error_off_windows():
    """npipe: endpoints are Windows' (sockferry.exe): here every place one can go is refused
    before anything is bound, with exit 78 and a sentence that names this system."""
    d = tmpdir()
    try:
        for args in (["relay", "-t", "-F", "a:npipe:openssh-ssh-agent=tcp:127.0.0.1:1"],
                     ["relay", "-t", "-F", "a:tcp:127.0.0.1:1=npipe:////./pipe/docker_engine"],
                     ["check", "-F", "a:unix:%s/a.sock=tcp:127.0.0.1:1|npipe:\\\\.\\pipe\\x" % d]):
            rc, _, err = run_sockferry(args)
            assert rc == 78, (args, rc, err)
            assert "named pipes are Windows' (sockferry.exe); on Linux use unix:/path or tcp:HOST:PORT" in err, err
        conf = os.path.join(d, "sf.conf")
        with open(conf, "w") as f:
            f.write("[sockferry]\ncontrol = npipe:sockferry-control\n[a]\nlisten = unix:%s/a.sock\n"
                    "connect = tcp:127.0.0.1:1\n" % d)
        rc, _, err = run_sockferry(["relay", "-t", "-c", conf])
        assert rc == 78 and "sf.conf:2: [sockferry] control: npipe:sockferry-control: named pipes are Windows'" in err, \
            (rc, err)
        assert not os.path.exists(os.path.join(d, "a.sock"))
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    sys.exit(Tap([
        test_probe_exit_codes_and_advice,
        test_probe_names_a_failed_socket_bind_mount,
        test_check_ok_through_an_authenticated_link,
        test_check_plain_words_for_each_failure,
        test_check_several_forwards_and_candidates_exit_status,
        test_relay_test_mode_binds_nothing,
        test_cli_conventions_across_commands,
        test_journal_priority_prefixes,
        test_stats_counters_agree_with_reality,
        test_stats_errors_land_in_the_right_counter,
        test_control_socket_rejects_bad_requests_and_stays_healthy,
        test_run_serves_stats_and_notifies,
        test_socket_activation_by_name_and_by_fd,
        test_socket_activation_wrong_name_or_none,
        test_vsock_link_with_auth_through_loopback,
        test_vsock_denied_by_seccomp_points_to_tcp,
        test_vsock_listener_binds_and_stops_clean,
        test_check_refuses_non_regular_and_oversized_config_files,
        test_stats_caps_the_answer_and_prints_only_text,
        test_control_socket_refuses_other_users,
        test_named_pipes_are_a_config_error_off_windows,
    ]).run())
