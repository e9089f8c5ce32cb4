"""Shared pieces of the end-to-end tests: a TAP runner, real servers, and a way to start
sockferry and watch its file descriptors, memory and log.

Only the standard library: the tests must run on a fresh Debian machine."""

import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

SOCKFERRY = os.environ.get("SOCKFERRY", "sockferry")
SOURCE_ROOT = os.environ.get("SF_SOURCE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
# Under valgrind (SF_VALGRIND=1) every relay runs under memcheck and must exit clean.
VALGRIND = os.environ.get("SF_VALGRIND") == "1"
# The relay's engine (relay/engine/engine.h), set by meson: "linux" (epoll, splice, seccomp) or
# "portable" (libuv streams, what macOS runs). Tests of one engine's mechanism check the other
# engine's behaviour instead.
ENGINE = os.environ.get("SF_ENGINE", "linux")


def mount_dir(src, target):
    """Makes the directory target a mount point, as a failed socket bind mount leaves it: a bind
    mount of src; in the portable build a tmpfs instead, since its mount-point check is the
    POSIX one (a device change, as on macOS), which a bind mount within one filesystem does not
    show. Undo with umount."""
    if ENGINE == "portable":
        subprocess.run(["mount", "-t", "tmpfs", "sf-e2e", target], check=True)
    else:
        subprocess.run(["mount", "--bind", src, target], check=True)


def netns_up(ns, host_if, cont_if, host_ip, cont_ip):
    """A "container" network: namespace ns joined to this one by a veth pair (/30, addresses
    from 198.18.0.0/15), with an /etc/hosts where host.docker.internal is the host end, as
    Docker Desktop has it (`ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts)."""
    if os.geteuid() != 0:
        raise Skip("needs root to create a network namespace")

    def sh(*args):
        subprocess.run(args, check=True, capture_output=True)
    sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", cont_if)
    sh("ip", "link", "set", cont_if, "netns", ns)
    sh("ip", "addr", "add", host_ip + "/30", "dev", host_if)
    sh("ip", "link", "set", host_if, "up")
    sh("ip", "netns", "exec", ns, "ip", "addr", "add", cont_ip + "/30", "dev", cont_if)
    sh("ip", "netns", "exec", ns, "ip", "link", "set", cont_if, "up")
    sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
    os.makedirs("/etc/netns/" + ns, exist_ok=True)
    with open("/etc/netns/%s/hosts" % ns, "w") as f:
        f.write("127.0.0.1 localhost\n%s host.docker.internal\n" % host_ip)


def netns_down(ns, host_if):
    subprocess.run(["ip", "link", "del", host_if], capture_output=True)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    shutil.rmtree("/etc/netns/" + ns, ignore_errors=True)


class Skip(Exception):
    pass


class Tap:
    """Runs test functions and prints TAP; a failing assertion fails one test, not the run."""

    def __init__(self, tests):
        self.tests = tests
        self.failed = 0

    def run(self):
        only = os.environ.get("SF_ONLY")
        tests = [t for t in self.tests if not only or only in t.__name__]
        print("TAP version 13")
        print("1..%d" % len(tests), flush=True)
        for i, t in enumerate(tests, 1):
            name = t.__name__.replace("test_", "").replace("_", " ")
            start = time.monotonic()
            try:
                t()
            except Skip as e:
                print("ok %d - %s # SKIP %s" % (i, name, e), flush=True)
                continue
            except Exception:
                self.failed += 1
                print("not ok %d - %s" % (i, name))
                for line in traceback.format_exc().splitlines():
                    print("# " + line)
                sys.stdout.flush()
                continue
            print("ok %d - %s (%.1fs)" % (i, name, time.monotonic() - start), flush=True)
        return 1 if self.failed else 0


def tmpdir():
    d = tempfile.mkdtemp(prefix="sf-e2e-")
    return d


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
    s.connect(addr)
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


class Relay:
    """A sockferry process; its stderr goes to a file so tests can read the log."""

    def __init__(self, args, cwd=None, env=None, wait_ready=True, preexec=None, prefix=None, program=None):
        self.dir = tmpdir()
        self.log_path = os.path.join(self.dir, "log")
        self.log = open(self.log_path, "wb")
        cmd = list(prefix or [])
        if VALGRIND:
            cmd += ["valgrind", "-q", "--leak-check=full", "--errors-for-leak-kinds=all",
                    "--error-exitcode=99", "--track-fds=no"]
        cmd += [program or SOCKFERRY] + args
        e = dict(os.environ)
        # readiness comes over the sd_notify protocol, whatever the log level
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(os.path.join(self.dir, "notify"))
        e["NOTIFY_SOCKET"] = os.path.join(self.dir, "notify")
        if env:
            e.update(env)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     cwd=cwd, env=e, preexec_fn=preexec)
        self.pid = self.proc.pid
        if wait_ready:
            try:
                self.wait_notify(b"READY=1", timeout=60 if VALGRIND else 10)
            except Exception:
                self.kill()
                raise

    def wait_notify(self, what, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("sockferry exited with %s:\n%s" % (self.proc.returncode, self.text()))
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
                return
        raise AssertionError("sockferry did not send %s within %ss:\n%s" % (what, timeout, self.text()))

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

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

    def stop(self, expect=0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60 if VALGRIND else 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("relay did not stop on SIGTERM:\n" + self.text())
        self.log.close()
        self.notify.close()
        rc = self.proc.returncode
        text = self.text()
        shutil.rmtree(self.dir, ignore_errors=True)
        if expect is not None and rc != expect:
            raise AssertionError("relay exited %s, expected %s; log:\n%s" % (rc, expect, text))
        # the sandbox lets a relay live on after a call outside its allowlist (ENOSYS, logged):
        # in the suites that is an allowlist gap, as a SIGSYS was before
        if "seccomp sandbox: refused system call" in text:
            raise AssertionError("the seccomp sandbox refused a system call; log:\n" + text)
        return text

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.notify.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_sockferry(args, timeout=20, env=None, input=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([SOCKFERRY] + args, capture_output=True, timeout=timeout, env=e, input=input)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


SERVER_CODE = r'''
import os, socket, sys, selectors, threading, hashlib
mode, where = sys.argv[1], sys.argv[2]
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
    except OSError:
        pass
    finally:
        c.close()

while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


class Server:
    """A real server in its own process (python3), on a unix path or tcp:HOST:PORT."""

    def __init__(self, mode, where):
        self.where = where
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER_CODE, mode, where],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline()
        if b"listening" not in line:
            raise AssertionError("test server did not start")

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        if not self.where.startswith("tcp:"):
            try:
                os.unlink(self.where)
            except FileNotFoundError:
                pass


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
