"""The pieces end-to-end tests are made of: sockferry processes, real servers, temporary
directories, mounts, network namespaces and helper processes, each a context manager.

A test composes them in a Scene (a contextlib.ExitStack): what it set up is torn down in reverse
order when it ends, whatever happened. Every piece keeps three rules:
* a failed start leaks nothing: the constructor undoes what it had done before it raises, so
  a relay that does not become ready leaves no process, log, socket or directory behind;
* a teardown never stops half way: each step is a callback of an ExitStack, and a step that
  fails does not skip the ones after it;
* a relay's bad exit status (a valgrind error or leak, a sanitizer report, a system call the
  seccomp sandbox refused) is an AssertionError raised once its own teardown is done; in a
  Scene the other teardowns still run, and the test fails with that error.

Only the standard library: the tests must run on a fresh Debian machine."""

import contextlib
import hashlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from sftap import Skip  # noqa: F401  (tests take Skip from here with the rest)

SOCKFERRY = os.environ.get("SOCKFERRY", "sockferry")
# Under valgrind (SF_VALGRIND=1) every relay runs under memcheck and must exit clean.
VALGRIND = os.environ.get("SF_VALGRIND") == "1"
# memcheck's exit status when it found a memory error or a leak (--error-exitcode).
VALGRIND_STATUS = 99
# The relay's engine (relay/engine/engine.h), set by meson: "linux" (epoll, splice, seccomp) or
# "portable" (libuv streams, what macOS runs). Tests of one engine's mechanism check the other
# engine's behaviour instead.
ENGINE = os.environ.get("SF_ENGINE", "linux")
# A sanitizer build (SF_SANITIZE, meson's b_sanitize): ASan keeps freed memory in quarantine, so
# RSS is not judged there (as under memcheck); ASan finds leaks itself at exit.
SANITIZED = os.environ.get("SF_SANITIZE", "none") not in ("", "none")
# The link mode the suites run their auth = token forwards in (SF_LINK, set by meson for the
# "-per-connection" twins of the suites): unset, the default (the shared link); "per-connection",
# sockferry/1. Added to every -F spec and config section with auth = token that names none.
LINK_MODE = os.environ.get("SF_LINK", "")
# What a relay's log may not contain, whatever its exit status: the sandbox lets a relay live on
# after a call outside its allowlist (ENOSYS, logged), which in the suites is an allowlist gap,
# as a SIGSYS was before; and the reports of the sanitizers (CI's ASan+UBSan build).
LOG_FAILURES = (
    ("seccomp sandbox: refused system call", "the seccomp sandbox refused a system call"),
    ("ERROR: AddressSanitizer", "AddressSanitizer reported an error"),
    ("ERROR: LeakSanitizer", "LeakSanitizer reported a leak"),
    (": runtime error: ", "UndefinedBehaviorSanitizer reported an error"),
)


# ---- small things ---------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


def connect(addr, timeout=10.0):
    """addr: a unix path or (host, port)."""
    if isinstance(addr, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(addr)
    except BaseException:
        s.close()
        raise
    return s


def recv_all(s, limit=1 << 62):
    chunks = []
    n = 0
    while n < limit:
        b = s.recv(min(1 << 20, limit - n))
        if not b:
            break
        chunks.append(b)
        n += len(b)
    return b"".join(chunks)


def run_sockferry(args, timeout=20, env=None, input=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([SOCKFERRY] + with_link_mode(args), capture_output=True, timeout=timeout, env=e, input=input)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


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


def keygen(d, name="token"):
    """A new token file d/name (sockferry keygen); returns its path."""
    path = os.path.join(d, name)
    rc, _, err = run_sockferry(["keygen", "-o", path])
    assert rc == 0, err
    return path


def with_link_mode(args):
    """args with LINK_MODE's link = key on each -F spec that has auth = token and no link key."""
    if not LINK_MODE:
        return list(args)
    out = list(args)
    for i in range(1, len(out)):
        if out[i - 1] == "-F" and "auth=token" in out[i] and "link=" not in out[i]:
            out[i] += ",link=" + LINK_MODE
    return out


def conf_with_link_mode(text):
    """The configuration text with LINK_MODE's link = line in each section that has
    auth = token and no link key."""
    if not LINK_MODE:
        return text
    sections = re.split(r"(?m)^(?=\[)", text)
    out = []
    for sec in sections:
        if re.search(r"(?m)^\s*auth\s*=\s*token\s*$", sec) and not re.search(r"(?m)^\s*link\s*=", sec):
            head, _, body = sec.partition("\n")
            sec = head + "\nlink = " + LINK_MODE + "\n" + body
        out.append(sec)
    return "".join(out)


def wait_link_up(port, prefix=None, timeout=None, host=None):
    """Over the shared link, waits until a container relay's link to TCP port is established
    (ss, in the namespace prefix runs in), and with host (its Relay) until the host relay's
    descriptors settled: a test that counts them takes its baseline with the link in it.
    Nothing to wait for in sockferry/1."""
    if LINK_MODE == "per-connection":
        return

    def up():
        # Up once more than the host's 37-byte hello came back: its status follows our client
        # frame, so the host relay has accepted the connection (and holds its fd).
        out = subprocess.run(list(prefix or []) + ["ss", "-Htni", "state", "established", "( dport = :%d )" % port],
                             capture_output=True, text=True).stdout
        return any(int(n) > 37 for n in re.findall(r"bytes_received:(\d+)", out))
    wait_for(up, timeout=timeout or (60 if VALGRIND else 10), what="the shared link to port %d" % port)
    if host is None:
        return
    # After the status the host hands the socket to libuv, whose first stream handle of the
    # loop opens a spare descriptor (/dev/null, kept for accept's EMFILE trick): a baseline taken
    # in between is one short (faults-valgrind failed so, 1 run in 15). Settled: the same count
    # three times in a row.
    counts = []

    def settled():
        counts.append(host.fds())
        time.sleep(0.05)
        return len(counts) >= 3 and len(set(counts[-3:])) == 1
    wait_for(settled, timeout=10 * (5 if VALGRIND else 1), what="the host relay's descriptors to settle")


def write_conf(d, text, name="conf"):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(conf_with_link_mode(text))
    return path


# ---- directories, mounts, namespaces --------------------------------------------------------

@contextlib.contextmanager
def tmpdir(prefix="sf-e2e-", mode=None, dir=None):
    """A fresh directory (0700 unless mode; in dir, else tempfile's), removed with everything
    in it at the end; a directory that cannot be removed fails the teardown."""
    d = tempfile.mkdtemp(prefix=prefix, dir=dir)
    try:
        if mode is not None:
            os.chmod(d, mode)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if os.path.lexists(d):
            raise AssertionError("could not remove the test directory %s" % d)


def _undo(*argv):
    """A teardown command: a failure fails the teardown (after the other steps ran)."""
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError("%s failed (exit %d): %s" % (" ".join(argv), p.returncode, p.stderr.strip()))


@contextlib.contextmanager
def mounted(argv, target, required=True):
    """Runs `mount ARGV... TARGET` and unmounts TARGET at the end. Without required, a mount
    that fails is left out (yields False) instead of failing."""
    p = subprocess.run(["mount"] + list(argv) + [target], capture_output=True, text=True)
    if p.returncode != 0:
        if required:
            raise AssertionError("mount %s %s failed: %s" % (" ".join(argv), target, p.stderr.strip()))
        yield False
        return
    try:
        yield True
    finally:
        _undo("umount", target)


def mount_point(src, target):
    """Makes the directory target a mount point, as a failed socket bind mount leaves it: a bind
    mount of src; in the portable build a tmpfs instead, since its mount-point check is the
    POSIX one (a device change, as on macOS), which a bind mount within one filesystem does not
    show. Unmounted at the end."""
    if ENGINE == "portable":
        return mounted(["-t", "tmpfs", "sf-e2e"], target)
    return mounted(["--bind", src], target)


@contextlib.contextmanager
def netns(ns, host_if, cont_if, host_ip, cont_ip):
    """A "container" network: namespace ns joined to this one by a veth pair (/30, addresses
    from 198.18.0.0/15), with an /etc/hosts where host.docker.internal is the host end, as
    Docker Desktop has it (`ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts).
    Skip when it cannot be made here; whatever part was made is removed again."""
    if os.geteuid() != 0:
        raise Skip("needs root to create a network namespace")

    def sh(*argv):
        subprocess.run(argv, check=True, capture_output=True)

    with contextlib.ExitStack() as undo:
        try:
            sh("ip", "netns", "add", ns)
            undo.callback(_undo, "ip", "netns", "del", ns)
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", cont_if)
            undo.callback(_undo, "ip", "link", "del", host_if)
            sh("ip", "link", "set", cont_if, "netns", ns)
            sh("ip", "addr", "add", host_ip + "/30", "dev", host_if)
            sh("ip", "link", "set", host_if, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", cont_ip + "/30", "dev", cont_if)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", cont_if, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            raise Skip("cannot create a network namespace here: %s: %s"
                       % (" ".join(e.cmd), e.stderr.decode(errors="replace").strip()))
        except FileNotFoundError as e:
            raise Skip("cannot create a network namespace here: %s" % e)
        etc = "/etc/netns/" + ns
        os.makedirs(etc, exist_ok=True)
        undo.callback(shutil.rmtree, etc)
        with open(etc + "/hosts", "w") as f:
            f.write("127.0.0.1 localhost\n%s host.docker.internal\n" % host_ip)
        yield ns


# ---- processes ------------------------------------------------------------------------------

def reap(p):
    """Kills p unless it exited, waits for it and closes its pipes."""
    if p.poll() is None:
        p.kill()
    p.wait()
    for f in (p.stdin, p.stdout, p.stderr):
        if f:
            try:
                f.close()
            except OSError:
                pass  # a stdin the process never read: the flush on close fails


@contextlib.contextmanager
def popen(argv, **kw):
    """subprocess.Popen(argv, **kw), killed (unless it exited) and waited for at the end."""
    p = subprocess.Popen(argv, **kw)
    try:
        yield p
    finally:
        reap(p)


@contextlib.contextmanager
def serving(ls, handle, threaded=True):
    """Accepts on the listening socket ls for the length of the with block and hands each
    connection to handle(conn): in a thread of its own when threaded, else one after another
    in the accepting thread. At the end: stops accepting, closes ls and every connection a
    handler left open."""
    stop = threading.Event()
    conns = []

    def one(c):
        try:
            handle(c)
        except OSError:
            pass  # a peer gone mid-test: its own test says what it expected

    def loop():
        ls.settimeout(0.1)
        while not stop.is_set():
            try:
                c, _ = ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conns.append(c)
            if threaded:
                threading.Thread(target=one, args=(c,), daemon=True).start()
            else:
                one(c)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield ls
    finally:
        stop.set()
        t.join(timeout=10)
        ls.close()
        for c in conns:
            c.close()


class Relay:
    """A sockferry process; stdout and stderr go to a log file the test reads (text()), and
    readiness comes over the sd_notify protocol. The constructor returns once it is ready
    (READY=1), or raises with nothing left behind. stop(), kill() or the end of a with block
    ends it and removes what it had; stop() then fails if the exit status is not expect (None:
    any) or the log shows an error (LOG_FAILURES; under valgrind, memcheck's status). Both are
    safe to call again: later calls return the log and check nothing."""

    stop_signal = signal.SIGTERM
    stop_timeout = 60 if VALGRIND else 15

    def __init__(self, args, cwd=None, env=None, wait_ready=True, preexec=None, prefix=None, program=None,
                 expect=0, ready_timeout=None):
        self.expect = expect
        self.what = " ".join([os.path.basename(program or SOCKFERRY)] + list(args))[:300]
        self.ready_timeout = ready_timeout or (60 if VALGRIND else 10)
        self.returncode = None
        self._stopped = False
        self._final_text = ""
        with contextlib.ExitStack() as st:
            self.dir = st.enter_context(tmpdir())
            self.log_path = os.path.join(self.dir, "log")
            self.log = st.enter_context(open(self.log_path, "wb"))
            self.notify = st.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
            self.notify.bind(os.path.join(self.dir, "notify"))
            cmd = list(prefix or [])
            if VALGRIND:
                # --vgdb=no: valgrind's gdbserver opens its FIFO (/tmp/vgdb-pipe-...) at some
                # point after the start, an fd in the relay's count that a test's baseline may
                # or may not hold (faults-valgrind failed so, 1 run in 30).
                cmd += ["valgrind", "-q", "--vgdb=no", "--leak-check=full", "--errors-for-leak-kinds=all",
                        "--error-exitcode=%d" % VALGRIND_STATUS, "--track-fds=no"]
            cmd += [program or SOCKFERRY] + with_link_mode(args)
            e = dict(os.environ, NOTIFY_SOCKET=os.path.join(self.dir, "notify"))
            if env:
                e.update(env)
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                         cwd=cwd, env=e, preexec_fn=preexec)
            st.callback(reap, self.proc)
            self.pid = self.proc.pid
            if wait_ready:
                self.wait_ready()
            self._teardown = st.pop_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- readiness --

    def wait_ready(self):
        """Waits until the process says it is ready; fails if it exits first."""
        self.wait_notify(b"READY=1", timeout=self.ready_timeout)

    def _await_notify(self, what, timeout):
        """Returns "sent", "exited" (before it sent what) or "timeout"."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return "exited"
            self.notify.settimeout(0.05)
            try:
                msg = self.notify.recv(4096)
            except socket.timeout:
                continue
            if what in msg:
                # sd_notify closes its socket right after sending: let the fd count settle so
                # tests that compare it see the steady state
                last, stable = -1, 0
                while stable < 5 and time.monotonic() < deadline:
                    n = len(os.listdir("/proc/%d/fd" % self.pid))
                    stable = stable + 1 if n == last else 0
                    last = n
                    time.sleep(0.01)
                return "sent"
        return "timeout"

    def wait_notify(self, what, timeout=10):
        got = self._await_notify(what, timeout)
        if got == "exited":
            raise AssertionError("sockferry exited with %s:\n%s" % (self.proc.returncode, self.text()))
        if got == "timeout":
            raise AssertionError("sockferry did not send %s within %ss:\n%s" % (what, timeout, self.text()))

    def notified(self, what, timeout=10):
        """Waits for an sd_notify message, also after the process exited (run exits at once)."""
        deadline = time.monotonic() + timeout
        self.notify.settimeout(0.1)
        while time.monotonic() < deadline:
            try:
                if what in self.notify.recv(4096):
                    return
            except socket.timeout:
                pass
        raise AssertionError("no %s from sockferry:\n%s" % (what, self.text()))

    def started(self, timeout=10):
        """True once the process is ready, False when it exited before that (a refused
        configuration, say); fails when it is neither within timeout."""
        got = self._await_notify(b"READY=1", timeout * (6 if VALGRIND else 1))
        if got == "timeout":
            raise AssertionError("sockferry neither became ready nor exited within %ss:\n%s"
                                 % (timeout, self.text()))
        return got == "sent"

    # -- what a test looks at --

    def text(self):
        if self._stopped:
            return self._final_text
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def fds_described(self):
        """What the descriptors are, for a failure's message: each fd's target, and ss's line
        for each of its sockets (state, addresses, queues)."""
        lines = []
        for fd in sorted(os.listdir("/proc/%d/fd" % self.pid), key=int):
            try:
                lines.append("%s -> %s" % (fd, os.readlink("/proc/%d/fd/%s" % (self.pid, fd))))
            except OSError:
                pass
        ss = subprocess.run(["ss", "-anp"], capture_output=True, text=True).stdout
        lines += [line for line in ss.splitlines() if "pid=%d," % self.pid in line]
        return "\n".join(lines)

    def status(self, key):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise KeyError(key)

    def rss_kib(self):
        return self.status("VmRSS")

    def cpu_seconds(self):
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=20):
        return self.proc.wait(timeout=timeout * (5 if VALGRIND else 1))

    # -- the end --

    def _end(self):
        """Asks the process to stop and waits; kills it when it does not. Returns the problems."""
        if self.proc.poll() is not None:
            return []
        self.proc.send_signal(self.stop_signal)
        try:
            self.proc.wait(timeout=self.stop_timeout)
            return []
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return ["it did not stop within %ds of %s: killed" % (self.stop_timeout,
                                                                  signal.Signals(self.stop_signal).name)]

    def problems(self, rc, expect, text):
        """What is wrong with how the process ended (a subclass adds its own)."""
        out = []
        if expect is not None and rc != expect:
            out.append("it exited %s, expected %s" % (rc, expect))
        if VALGRIND and rc == VALGRIND_STATUS and expect != VALGRIND_STATUS:
            out.append("valgrind found memory errors or leaks (exit %d)" % VALGRIND_STATUS)
        out += [why for needle, why in LOG_FAILURES if needle in text]
        return out

    def stop(self, expect=...):
        """Ends the process (stop_signal, then SIGKILL), removes its files, then checks how it
        ended against expect (default: the constructor's); returns the log."""
        if self._stopped:
            return self._final_text
        expect = self.expect if expect is ... else expect
        problems = []
        with self._teardown:
            self._stopped = True
            problems += self._end()
            with open(self.log_path, "rb") as f:
                self._final_text = f.read().decode(errors="replace")
        self.returncode = self.proc.returncode
        problems += self.problems(self.returncode, expect, self._final_text)
        if problems:
            raise AssertionError("%s: %s; log:\n%s" % (self.what, "; ".join(problems), self._final_text))
        return self._final_text

    def kill(self):
        """SIGKILL and the same teardown; the exit status is not checked (the test ended it on
        purpose, or it already exited), the log is."""
        if not self._stopped:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.stop(expect=None)
        return self._final_text


SERVER_CODE = r'''
import os, socket, sys, selectors, threading, hashlib
mode, where = sys.argv[1], sys.argv[2]
mode, _, tag = mode.partition(":")  # tagged:TAG
if where.startswith("tcp:"):
    host, port = where[4:].rsplit(":", 1)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, int(port)))
else:
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(where)
ls.listen(4096)
print("listening", flush=True)

def serve(c):
    try:
        if mode == "echo":
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                c.sendall(b)
            c.shutdown(socket.SHUT_WR)
        elif mode == "after-eof":
            # a request/response server that answers only once the request is complete
            h = hashlib.sha256(); n = 0
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                h.update(b); n += len(b)
            c.sendall(("%d %s\n" % (n, h.hexdigest())).encode())
            c.shutdown(socket.SHUT_WR)
        elif mode == "sink-source":
            # first 8 bytes: how many bytes to send back; then read the rest to EOF and reply
            # with a digest of what was received after the payload
            want = int.from_bytes(c.recv(8, socket.MSG_WAITALL), "big")
            seed = c.recv(8, socket.MSG_WAITALL)
            import random
            rnd = random.Random(seed)
            h = hashlib.sha256(); n = 0
            sent = 0
            c.setblocking(True)
            def writer():
                nonlocal sent
                while sent < want:
                    chunk = rnd.randbytes(min(1 << 20, want - sent))
                    c.sendall(chunk); sent += len(chunk)
            t = threading.Thread(target=writer); t.start()
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                h.update(b); n += len(b)
            t.join()
            c.sendall(h.digest())
            c.shutdown(socket.SHUT_WR)
        elif mode == "late":
            # answers one request well after it came (longer than libuv's 50 ms guess at the
            # end of a named pipe), then closes: a request/response service behind a pipe
            import time
            b = c.recv(65536)
            time.sleep(1.5)
            c.sendall(b"late:" + b)
            c.shutdown(socket.SHUT_WR)
        elif mode == "silent":
            while c.recv(65536):
                pass
        elif mode == "banner":
            c.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n")
            while c.recv(65536):
                pass
        elif mode == "source":
            # pseudo-random bytes for as long as the client takes them (a download, a log)
            import random
            chunk = random.Random(1).randbytes(1 << 16)
            while True:
                c.sendall(chunk)
        elif mode == "blackhole":
            # accepts and never reads: an upload that never drains
            threading.Event().wait()
        elif mode == "tagged":
            # each line answered with the server's tag: which upstream a client reached
            f = c.makefile("rb")
            for _ in f:
                c.sendall(tag.encode() + b"\n")
    except OSError:
        pass
    finally:
        c.close()

while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


class Server:
    """A real server in its own process (python3), on a unix path or tcp:HOST:PORT: echo,
    after-eof, sink-source, late, silent, banner, source, blackhole or tagged:TAG (SERVER_CODE). Listening when the
    constructor returns, or nothing left behind; stop() (or the end of a with block, safe to
    repeat) kills it and removes its socket file."""

    def __init__(self, mode, where, stderr=None):
        self.where = where
        with contextlib.ExitStack() as st:
            self.proc = subprocess.Popen([sys.executable, "-c", SERVER_CODE, mode, where],
                                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=stderr)
            st.callback(reap, self.proc)
            if b"listening" not in self.proc.stdout.readline():
                raise AssertionError("the %s test server did not start on %s" % (mode, where))
            # the socket file is ours once it listened there, not before
            if not where.startswith("tcp:"):
                st.callback(self._unlink)
            self._teardown = st.pop_all()

    def _unlink(self):
        try:
            os.unlink(self.where)
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        self._teardown.close()


class Scene(contextlib.ExitStack):
    """What one test sets up, torn down in reverse order at the end (see the module's text).
    The runner gives each test a fresh one (sftap.main(TESTS, fixture=Scene))."""

    def tmpdir(self, prefix="sf-e2e-", mode=None, dir=None):
        return self.enter_context(tmpdir(prefix, mode, dir))

    def relay(self, args, **kw):
        """A Relay (its keywords), stopped at the end with its exit status checked."""
        return self.enter_context(Relay(args, **kw))

    def server(self, mode, where, **kw):
        return self.enter_context(Server(mode, where, **kw))

    def popen(self, argv, **kw):
        return self.enter_context(popen(argv, **kw))

    def mount_point(self, src, target):
        return self.enter_context(mount_point(src, target))

    def mount(self, argv, target, required=True):
        return self.enter_context(mounted(argv, target, required))

    def serve(self, ls, handle, threaded=True):
        return self.enter_context(serving(ls, handle, threaded))

    def closing(self, thing):
        """thing (anything with close(), or a list of such, closed as it is then) is closed at
        the end; returns it."""
        if isinstance(thing, list):
            self.callback(lambda: [x.close() for x in thing])
        else:
            self.callback(thing.close)
        return thing


def transfer_both_ways(addr, size):
    """Sends size random bytes up and receives size random bytes down at the same time through
    addr to a sink-source server; returns True when both digests match."""
    s = connect(addr, timeout=120)
    seed = os.urandom(8)
    s.sendall(size.to_bytes(8, "big") + seed)
    rnd = random.Random(seed)
    expect_down = hashlib.sha256()
    up = hashlib.sha256()
    received = hashlib.sha256()
    got = [0]

    def reader():
        while got[0] < size:
            b = s.recv(1 << 20)
            if not b:
                break
            received.update(b)
            got[0] += len(b)

    t = threading.Thread(target=reader)
    t.start()
    sent = 0
    while sent < size:
        chunk = os.urandom(min(1 << 20, size - sent))
        up.update(chunk)
        s.sendall(chunk)
        sent += len(chunk)
    t.join(timeout=120)
    # the down stream is a seeded pseudo-random sequence: regenerate it to compare
    n = 0
    while n < size:
        expect_down.update(rnd.randbytes(min(1 << 20, size - n)))
        n += min(1 << 20, size - n)
    s.shutdown(socket.SHUT_WR)
    digest = recv_all(s)
    s.close()
    assert got[0] == size, "received %d of %d bytes" % (got[0], size)
    assert received.digest() == expect_down.digest(), "downstream bytes differ"
    assert digest == up.digest(), "upstream bytes differ (server saw another digest)"
    return True


# ---- the shared link's tests (test_link.py, test_link_life.py) ----------------------------------

def fwd(name, listen, connect_, **keys):
    """An INI section of a forward with auth = token; keys with _ for -."""
    lines = ["[%s]" % name, "listen = %s" % listen, "connect = %s" % connect_, "auth = token"]
    lines += ["%s = %s" % (k.replace("_", "-"), v) for k, v in keys.items()]
    return "\n".join(lines) + "\n\n"


def token_relay(sc, d, sections, name="relay.conf", head="", **kw):
    """A relay in the scene sc of the forwards in sections (INI text), its token d/token, with
    head's lines in [sockferry]."""
    conf = write_conf(d, "[sockferry]\ntoken-file = %s/token\n%s\n%s" % (d, head, sections), name)
    return sc.relay(["relay", "-c", conf], **kw)


def need(*tools):
    """Skip when a program the test runs is not installed."""
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        raise Skip("needs %s (not installed)" % ", ".join(missing))


def echo_once(path, payload=b"ping", timeout=10):
    """One client connection: payload up, the echo back, then half-close; returns what came."""
    s = connect(path, timeout=timeout)
    try:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            b = s.recv(65536)
            if not b:
                break
            got += b
        return got
    finally:
        s.close()


def closed_without_answer(path, timeout=10):
    """A client that connects and asks: True when the relay closed it without a byte."""
    s = connect(path, timeout=timeout)
    try:
        try:
            s.sendall(b"hello?")
            return s.recv(100) == b""
        except (BrokenPipeError, ConnectionResetError):
            return True
    finally:
        s.close()


class Session:
    """An interactive client: one connection to an echo service, one round trip at a time."""

    def __init__(self, path, timeout=10):
        self.s = connect(path, timeout=timeout)
        self.n = 0

    def round_trip(self, payload=None):
        payload = payload or b"round trip %d\n" % self.n
        self.s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            b = self.s.recv(65536)
            if not b:
                raise ConnectionError("closed after %d round trips (got %r)" % (self.n, got))
            got += b
        assert got == payload, (got, payload)
        self.n += 1
        return got

    def ended(self, timeout=10):
        """Waits until the relay ends this connection; returns how long that took. A reset and
        an EOF both count: the cause is in the relay's log."""
        start = time.monotonic()
        self.s.settimeout(timeout)
        try:
            while True:
                if not self.s.recv(65536):
                    break
        except ConnectionResetError:
            pass
        except socket.timeout:
            raise AssertionError("the connection was still open %.0f s after its link went" % timeout)
        return time.monotonic() - start

    def close(self):
        self.s.close()


def sessions(sc, path, n):
    """n Sessions through path, each with one round trip done, closed at the end of the scene."""
    out = [Session(path) for _ in range(n)]
    sc.closing(out)
    for s in out:
        s.round_trip()
    return out


def served(path, timeout=15):
    """Waits until a new client through path gets its echo (the link came back)."""
    def ok():
        try:
            return echo_once(path, b"are you back?", timeout=5) == b"are you back?"
        except OSError:
            return False
    wait_for(ok, timeout=timeout, what="a new client served through %s" % path)
