#!/usr/bin/env python3
"""sockferry.exe under Wine, end to end, against the Linux build.

    client (python, in a network namespace: the "container", an empty directory bind-mounted
    where the socket goes)
      -> Linux `sockferry relay` in that namespace: unix -> tcp:HOST:PORT, auth = token
      -> `sockferry.exe relay` (Wine): tcp:HOST:PORT -> npipe:NAME, auth = token
      -> the named-pipe service: `sockferry.exe relay` listening on npipe:NAME -> a python
         server on this machine's loopback (Wine's processes are Linux processes), or
         tests/windows/npipe-service.exe for a pipe whose every instance is busy.

Environment (tests/ci/windows.sh sets it): SOCKFERRY (the Linux build), SF_EXE
(sockferry.exe), SF_WINE (wine64), WINEPREFIX (a throw-away prefix, booted), SF_NPIPE_SERVICE
(npipe-service.exe; the busy-pipe test skips without it, saying so). HOST is the host end of
the namespace's veth pair, from this program's /24 of 198.18.0.0/15 (sfharness.Net). Each test
gets a Scene (tests/lib/sfharness.py) for what it starts; the namespace lives for the whole run."""

import contextlib
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Net, Relay, Scene, Skip, free_port, run_sockferry, wait_for  # noqa: E402

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")
WINE = os.environ.get("SF_WINE", "/usr/lib/wine/wine64")
EXE = os.environ.get("SF_EXE", "")
NPIPE_SERVICE = os.environ.get("SF_NPIPE_SERVICE", "")
NET = Net()
HOST_IP = NET.host
MIB = 1 << 20


def winpath(path):
    """Wine's Z: drive is the Linux root."""
    return "Z:" + path.replace("/", "\\")


def wine_run(args, timeout=60, env=None):
    e = dict(os.environ, WINEDEBUG="-all")
    if env:
        e.update(env)
    p = subprocess.run([WINE, EXE] + args, capture_output=True, timeout=timeout, env=e)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


class WinRelay(Relay):
    """sockferry.exe relay under Wine: no sd_notify there, so ready is its "listening on" line
    (one per forward). Stopped with Ctrl+C, which Wine delivers to a console program as on
    Windows: the relay drains and exits 0, saying so."""

    stop_signal = signal.SIGINT
    stop_timeout = 20

    def __init__(self, args, listening=1):
        self.listening = listening
        super().__init__([EXE] + args, program=WINE, env={"WINEDEBUG": "-all"})

    def wait_ready(self):
        wait_for(lambda: self.text().count("listening on") >= self.listening or self.proc.poll() is not None,
                 timeout=60, what="sockferry.exe listening")
        if self.proc.poll() is not None:
            raise AssertionError("sockferry.exe exited %s:\n%s" % (self.proc.returncode, self.text()))

    def problems(self, rc, expect, text):
        out = super().problems(rc, expect, text)
        if expect == 0 and not ("Interrupt (Ctrl+C) received: stopping" in text and text.rstrip().endswith("stopped")):
            out.append("it did not say it stopped on Ctrl+C")
        return out


class Chain:
    """Service, Windows-side relays, the container relay, in the scene sc; tokens per side."""

    def __init__(self, sc, service="echo", win_token=None, cont_token=None, win_extra="", upstream=None):
        self.d = sc.tmpdir()
        self.pipe = "sf-wine-%d-%d" % (os.getpid(), int(time.monotonic() * 1000) % 100000)
        self.port = free_port()
        self.win_token = win_token or self.keygen_windows("win.token")
        self.cont_token = cont_token or self.copy_token(self.win_token, "cont.token")
        self.srv = self.pipe_svc = None
        if upstream is None:
            sport = free_port()
            self.srv = sc.server(service, "tcp:127.0.0.1:%d" % sport)
            self.pipe_svc = sc.enter_context(WinRelay(["relay", "-F", "svc:npipe:%s=tcp:127.0.0.1:%d"
                                                       % (self.pipe, sport)]))
            upstream = "npipe:" + self.pipe
        self.win = sc.enter_context(WinRelay(["relay", "-F", "host:tcp:%s:%d=%s,auth=token,token-file=%s%s"
                                              % (HOST_IP, self.port, upstream, winpath(self.win_token), win_extra)]))
        # The container: the namespace's network and a mount namespace of its own where an
        # empty directory is bind-mounted at the socket's directory, as Docker Desktop
        # leaves a host socket's bind mount. Clients reach the socket at its path in
        # there through /proc/PID/root.
        empty, target = os.path.join(self.d, "empty"), os.path.join(self.d, "run")
        os.makedirs(empty)
        os.makedirs(target)
        path = os.path.join(target, "agent.sock")
        self.cont = sc.relay(["relay", "-F", "cont:unix:%s=tcp:host.docker.internal:%d,auth=token,token-file=%s"
                              % (path, self.port, self.cont_token)],
                             prefix=["ip", "netns", "exec", NET.ns, "unshare", "-m", "--propagation", "private",
                                     "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
                                     empty, target],
                             expect=None)
        self.sock = "/proc/%d/root%s" % (self.cont.pid, path)

    def keygen_windows(self, name):
        path = os.path.join(self.d, name)
        rc, out, err = wine_run(["keygen", "-o", winpath(path)])
        assert rc == 0, (rc, out, err)
        return path

    def copy_token(self, src, name):
        """The Linux side reads the same token from a file of its own (mode 0600)."""
        path = os.path.join(self.d, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(src, "rb") as f:
            os.write(fd, f.read())
        os.close(fd)
        return path


def in_ns_python(code, *args, timeout=120):
    """Python code in the namespace, tests/lib on its path."""
    code = "import sys; sys.path.insert(0, %r)\n" % LIB + code
    p = subprocess.run(["ip", "netns", "exec", NET.ns, sys.executable, "-c", code] + list(args),
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


ROUND_TRIP = r'''
import hashlib, os, socket, sys, threading
path, size = sys.argv[1], int(sys.argv[2])
data = os.urandom(size)
s = socket.socket(socket.AF_UNIX)
s.settimeout(60)
s.connect(path)
got = bytearray()
def reader():
    while len(got) < size:
        b = s.recv(1 << 20)
        if not b:
            return
        got.extend(b)
t = threading.Thread(target=reader); t.start()
s.sendall(data)
t.join()
s.close()
print(len(got), hashlib.sha256(bytes(got)).hexdigest() == hashlib.sha256(data).hexdigest())
'''


def test_data_both_ways_through_a_named_pipe(sc):
    c = Chain(sc)
    # 8 MiB up while the echo comes back down, through both relays and the pipe.
    rc, out, err = in_ns_python(ROUND_TRIP, c.sock, str(8 * MIB))
    assert rc == 0 and out.split() == [str(8 * MIB), "True"], (rc, out, err, c.win.text(), c.cont.text())
    assert "listening on tcp:%s:%d" % (HOST_IP, c.port) in c.win.text()
    assert "listening on npipe:%s" % c.pipe in c.pipe_svc.text()


def test_half_close_keeps_the_late_answer_and_its_end(sc):
    """The client sends its request and shuts its side: a named pipe has no half-close, so the
    end of the request must neither reach the pipe as the end of the connection (libuv's own
    shutdown closes a pipe after 50 ms of silence) nor be lost for the answer's way back: the
    answer, 1.5 s later, arrives whole, and the service's close comes back as EOF."""
    c = Chain(sc, service="late")
    code = r'''
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sys.argv[1])
s.sendall(b"request"); s.shutdown(socket.SHUT_WR)
start = time.monotonic()
r = b""
while True:
    b = s.recv(65536)
    if not b: break
    r += b
print(r.decode(), round(time.monotonic() - start, 1))
'''
    rc, out, err = in_ns_python(code, c.sock)
    words = out.split()
    assert rc == 0 and words[0] == "late:request" and float(words[1]) >= 1.4, (rc, out, err, c.win.text())


def test_check_on_windows(sc):
    """sockferry.exe check probes the Windows relay through its authenticated link, as a
    HEALTHCHECK does on Linux; a forward whose pipe does not exist is unhealthy, in plain
    words."""
    c = Chain(sc)
    spec = "host:tcp:%s:%d=npipe:%s,auth=token,token-file=%s" % (HOST_IP, c.port, c.pipe, winpath(c.win_token))
    rc, out, err = wine_run(["check", "-F", spec])
    assert rc == 0 and "host: OK" in out, (rc, out, err)
    rc, out, err = wine_run(["check", "-F", "bad:tcp:%s:%d=npipe:%s-missing,auth=token,token-file=%s"
                             % (HOST_IP, c.port, c.pipe, winpath(c.win_token))])
    assert rc == 1 and "bad: FAIL connect npipe:%s-missing: No such file or directory — no such pipe: is the " \
        "service running" % c.pipe in out, (rc, out, err)


def test_wrong_token_refused_in_plain_words_on_both_sides(sc):
    d = sc.tmpdir()
    other = os.path.join(d, "other.token")
    rc, _, err = run_sockferry(["keygen", "-o", other])
    assert rc == 0, err
    c = Chain(sc, cont_token=other)
    code = r'''
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sys.argv[1])
try:
    s.sendall(b"hello"); print(repr(s.recv(100)))
except OSError as e:
    print("error", e)
'''
    rc, out, err = in_ns_python(code, c.sock)
    assert rc == 0 and out.strip() in ("b''", ) or out.startswith("error"), (rc, out, err)
    wait_for(lambda: "auth rejected" in c.cont.text(), what="auth rejected in the Linux relay's log")
    wait_for(lambda: "auth rejected" in c.win.text(), what="auth rejected in sockferry.exe's log")


def stats(c):
    """(handles, active connections) of the Windows relay, from sockferry.exe stats."""
    rc, out, err = wine_run(["stats", "--control", "npipe:" + c.control])
    assert rc == 0, (rc, out, err)
    handles = active = None
    for line in out.splitlines():
        if line.startswith("process:"):
            handles = int(line.split(",")[1].split()[0])
        if line.startswith("host:"):
            active = int(line.split(",")[1].split()[0])
    assert handles is not None and active is not None, out
    return handles, active


def settled(c):
    """The handle count once every connection is gone: a client that closed reads as the end of
    its request, which a byte-mode pipe learns only by the relay closing it after 2 s of
    silence (relay/engine/uv_win.c)."""
    wait_for(lambda: stats(c)[1] == 0, timeout=30, what="no active connection")
    return stats(c)[0]


def test_a_thousand_sequential_connections_leave_no_handle_behind(sc):
    c = Chain(sc)
    # The Windows relay under test gets a control pipe: stats reports its handle count.
    c.win.stop()
    c.control = c.pipe + "-control"
    conf = os.path.join(c.d, "win.conf")
    with open(conf, "w") as f:
        f.write("[sockferry]\ncontrol = npipe:%s\n[host]\nlisten = tcp:%s:%d\nconnect = npipe:%s\n"
                "auth = token\ntoken-file = %s\n" % (c.control, HOST_IP, c.port, c.pipe, winpath(c.win_token)))
    c.win = sc.enter_context(WinRelay(["relay", "-c", winpath(conf)], listening=1))
    code = r'''
from sfharness import echo_once
n = int(sys.argv[2])
for i in range(n):
    want = b"ping %d" % i
    got = echo_once(sys.argv[1], want, timeout=30)
    assert got == want, (i, got)
print("ok")
'''
    rc, out, err = in_ns_python(code, c.sock, "50")
    assert rc == 0 and out.strip() == "ok", (rc, out, err)
    before = settled(c)
    rc, out, err = in_ns_python(code, c.sock, "1000", timeout=600)
    assert rc == 0 and out.strip() == "ok", (rc, out, err)
    after = settled(c)
    # A leaked socket, pipe or event per connection would show as 1 000 more.
    assert before > 0 and after - before <= 4, (before, after)
    print("# sockferry.exe: %d handles after 50 connections, %d after 1 050" % (before, after), flush=True)


BURST = r'''
import threading
from sfharness import echo_once
n, ok = int(sys.argv[2]), []
def one(i):
    want = b"burst %d " % i * 1000
    ok.append(echo_once(sys.argv[1], want, timeout=60) == want)
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
[t.start() for t in ts]
[t.join() for t in ts]
print(len(ok), all(ok))
'''


def test_a_burst_of_clients_on_the_pipe_listener(sc):
    """64 clients at once: sockferry.exe dials its own pipe listener (16 instances pending,
    libuv makes the next as each is taken) 64 times in a burst; a dial that finds every
    instance taken retries within connect-timeout, so none is refused."""
    c = Chain(sc)
    rc, out, err = in_ns_python(BURST, c.sock, "64")
    assert rc == 0 and out.split() == ["64", "True"], (rc, out, err, c.win.text()[-2000:])
    assert "upstream unavailable" not in c.win.text() + c.cont.text()


class HeldPipe:
    """npipe-service hold: a pipe of ONE instance that a Windows client holds for seconds, so
    that every other client gets ERROR_PIPE_BUSY; it serves the next ones afterwards. Both
    processes end with the scene sc."""

    def __init__(self, sc, seconds):
        self.name = "sf-wine-held-%d-%d" % (os.getpid(), int(time.monotonic() * 1000) % 100000)
        env = dict(os.environ, WINEDEBUG="-all")
        self.svc = sc.popen([WINE, NPIPE_SERVICE, "hold", self.name, str(seconds)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)
        assert b"ready" in self.svc.stdout.readline(), "npipe-service hold did not start"
        self.holder = sc.popen([WINE, NPIPE_SERVICE, "client", self.name], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.holder.stdin.write(b"holder")
        self.holder.stdin.close()
        assert b"holding" in self.svc.stdout.readline(), "the holder did not connect"
        self.since = time.monotonic()


ASK = r'''
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.settimeout(60); s.connect(sys.argv[1])
start = time.monotonic()
s.sendall(b"busy?")
r = b""
try:
    while len(r) < 5:
        b = s.recv(100)
        if not b: break
        r += b
except OSError as e:
    r = str(e).encode()
print(repr(r), round(time.monotonic() - start, 1))
'''


def test_busy_pipe_is_waited_for_within_connect_timeout(sc):
    if not NPIPE_SERVICE:
        raise Skip("SF_NPIPE_SERVICE (tests/windows/npipe-service.exe) is not set")
    with Scene() as waited:
        held = HeldPipe(waited, 6)
        c = Chain(waited, upstream="npipe:" + held.name, win_extra=",connect-timeout=20s")
        rc, out, err = in_ns_python(ASK, c.sock)
        words = out.split()
        # Answered once the holder let go: the relay retried the busy pipe meanwhile.
        assert rc == 0 and words[0] == "b'busy?'", (rc, out, err, c.win.text())
        assert time.monotonic() - held.since >= 5, (out, held.since)
        assert "upstream unavailable" not in c.win.text(), c.win.text()
    with Scene() as timed_out:
        held = HeldPipe(timed_out, 8)
        c = Chain(timed_out, upstream="npipe:" + held.name, win_extra=",connect-timeout=1s")
        rc, out, err = in_ns_python(ASK, c.sock)
        assert rc == 0 and out.split()[0] == "b''", (rc, out, err)
        wait_for(lambda: "every instance of the pipe stayed busy" in c.win.text(), what="the busy pipe's words")
        assert "timed out after 1000ms" in c.win.text(), c.win.text()
        wait_for(lambda: "upstream unavailable" in c.cont.text(), what="upstream unavailable in the Linux log")


def test_config_errors_name_windows(sc):
    for args, words in (
            (["relay", "-t", "-F", "a:unix:/run/a.sock=tcp:127.0.0.1:1"], "unix sockets are not supported on Windows"),
            (["relay", "-t", "-F", "a:tcp:127.0.0.1:1=vsock:host:1"], "vsock is Linux's"),
            (["relay", "-t", "-F", "a:npipe:x=tcp:127.0.0.1:1,group=users"], "not supported on Windows"),
            (["relay", "-t", "-F", "a:npipe:\\\\server\\pipe\\x=tcp:127.0.0.1:1"], "only pipes on this machine"),
            (["relay", "-t", "-F", "a:tcp:0.0.0.0:1=npipe:x"], "accepts connections from the network without "
             "authentication"),
            (["relay", "-t", "-F", "a:tcp:127.0.0.1:1=npipe:x,auth=token,token-file=tok"], "is not an absolute path, "
             "expected an absolute path such as C:\\Users\\NAME\\AppData\\Roaming\\sockferry\\token")):
        rc, out, err = wine_run(args)
        assert rc == 78 and words in err, (args, rc, err)
    rc, out, err = wine_run(["relay", "-t", "-F", "a:npipe:x=tcp:127.0.0.1:1"])
    assert rc == 0, (rc, err)
    rc, out, err = wine_run(["probe", "/run/x.sock"])
    assert rc == 64 and "not built on Windows" in err, (rc, err)
    rc, out, err = wine_run(["run", "--", "true"])
    assert rc == 64, (rc, err)


@contextlib.contextmanager
def wine_run_setup():
    """The run: sockferry.exe there, and the namespace for its whole length."""
    if not EXE or not os.path.exists(EXE):
        raise Skip("SF_EXE (sockferry.exe) is not set")
    with NET.namespace():
        yield


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene, setup=wine_run_setup)
