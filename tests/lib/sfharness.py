"""The one library of the Python tests (e2e, preload, shim, docs, packaging, windows): the
pieces a test is made of, each a context manager: sockferry processes (Relay), the test
servers (Server: tests/lib/sfservers.py), temporary directories, mounts, a network of the test
program's own (Net), the preload's "container" (Lab) and helper processes. tests/lib/sftap.py
runs the test functions and prints TAP; tests/README.md says how to write a test.

A test composes the pieces in a Scene (a contextlib.ExitStack): what it set up is torn down in
reverse order when it ends, whatever happened. Every piece keeps three rules:
* a failed start leaks nothing: the constructor undoes what it had done before it raises, so
  a relay that does not become ready leaves no process, log, socket or directory behind;
* a teardown never stops half way: each step is a callback of an ExitStack, and a step that
  fails does not skip the ones after it;
* a relay's bad exit status (a valgrind error or leak, a sanitizer report, a system call the
  seccomp sandbox refused) is an AssertionError raised once its own teardown is done; in a
  Scene the other teardowns still run, and the test fails with that error.

Tests run two at a time (meson test's is_parallel): nothing here is fixed that another test
program could take too. Directories, ports and names are fresh; a test program's addresses
come from a /24 of its own (Net).

Only the standard library: the tests must run on a fresh Debian machine."""

import argparse
import contextlib
import fcntl
import functools
import hashlib
import ipaddress
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

import sfservers
from sftap import Skip  # noqa: F401  (tests take Skip from here with the rest)

# Every test process imports this module before it prints or starts anything.
sfservers.without_malloc_perturb()

# The test servers' program.
SERVERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sfservers.py")
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


# A wait's timeout is a ceiling, not what is tested: under valgrind, and where CI runs several
# test runs beside each other (SF_WAIT_SCALE), it is that many times longer.
WAIT_SCALE = float(os.environ.get("SF_WAIT_SCALE") or (3 if VALGRIND else 1))


def wait_for(pred, timeout=10.0, what="condition", detail=None):
    """pred()'s first true value, polled until timeout; detail(), if given, says in the failure
    what was there instead."""
    timeout *= WAIT_SCALE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError("timed out after %.1fs waiting for %s%s" % (timeout, what, "\n" + detail() if detail else ""))


def connect(addr, timeout=10.0 * WAIT_SCALE):
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


def round_trip(s, data):
    """Sends data on the connected socket s and reads as many bytes back (an echo server
    behind it); returns what came, fewer bytes when the peer ended first."""
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        b = s.recv(len(data) - len(got))
        if not b:
            break
        got += b
    return got


def echo_once(addr, data=b"ping", timeout=10 * WAIT_SCALE, half_close=False, to_end=False):
    """One client of an echo service at addr: sends data and returns what came back, as many
    bytes as it sent, or with to_end (and always with half_close, which half-closes after
    sending) everything until the other side ended. A reset or a closed pipe ends it: what
    came until then is returned (b"" for a client turned away)."""
    s = connect(addr, timeout=timeout)
    try:
        if not (half_close or to_end):
            return round_trip(s, data)
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return recv_all(s)
    except (ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        s.close()


def accept_queue(where, prefix=None, pid=None):
    """How many connections wait in the accept queue of a listener (ss): where is a TCP port,
    (host, port), or a unix path, whose listener process pid holds (a relay names its socket
    relative to the directory it holds open); in this network namespace or the one prefix runs
    in. None when nothing listens there."""
    if isinstance(where, str):
        out = subprocess.run(list(prefix or []) + ["ss", "-Hxlp"], capture_output=True, text=True).stdout
        rows = [line.split() for line in out.splitlines()
                if "pid=%d," % pid in line and line.split()[4] in (where, os.path.basename(where))]
        return sum(int(r[2]) for r in rows) if rows else None
    argv = ["ss", "-Hltn", "sport = :%d" % where if isinstance(where, int) else
            "sport = :%d and src %s" % (where[1], where[0])]
    out = subprocess.run(list(prefix or []) + argv, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return sum(int(r[1]) for r in rows) if rows else None


def steady(value, what, times=3, interval=0.05, timeout=10.0):
    """Waits until value() gives the same answer times in a row (interval apart): a count that
    settled (descriptors once the last connection closed, bytes once a window filled); returns it."""
    seen = []

    def same():
        seen.append(value())
        time.sleep(interval)
        return len(seen) >= times and len(set(seen[-times:])) == 1
    wait_for(same, timeout=timeout, what="%s to settle" % what)
    return seen[-1]


def fds_back(r, before, what, timeout=10.0):
    """Waits until the relay r holds before descriptors again (the last connections' closes
    may still be on their way, on a machine that does not run the relay for a while); fails
    naming what it holds if they never come back (a leak)."""
    try:
        wait_for(lambda: r.fds() == before, timeout=timeout, what="%s fds back to %d" % (what, before))
    except AssertionError as e:
        raise AssertionError("%s; it holds %d:\n%s" % (e, r.fds(), r.fds_described())) from None


def unread(s):
    """The bytes waiting in the socket s that its reader has not taken (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def need(*tools):
    """Skips the test unless every program named is installed."""
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        raise Skip("needs %s (not installed)" % ", ".join(missing))


def need_root(why="it makes namespaces"):
    if os.geteuid() != 0:
        raise Skip("needs root: " + why)


@functools.lru_cache(maxsize=None)
def vsock_loopback():
    """None when a vsock connection to this machine (CID 1, vsock_loopback) works, else why not
    (asked once: without the module a connect takes its 2 s to fail)."""
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
                   "(modprobe vsock_loopback)" % (e.strerror or "timed out")
        finally:
            c.close()
        return None
    except OSError as e:
        return "bind vsock:any: %s" % e.strerror
    finally:
        ls.close()


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def helper_passed(output, diag=""):
    """A test helper program's "ok - ..." / "not ok - ..." lines: every one must be ok, and
    there must be some. Prints them as TAP comments."""
    lines = [line for line in output.splitlines() if line.startswith(("ok - ", "not ok - "))]
    for line in lines:
        print("# " + line, flush=True)
    failed = [line for line in lines if line.startswith("not ok - ")]
    assert lines, "the helper reported nothing:\n%s" % diag
    assert not failed, "the helper failed: %s\n%s" % ("; ".join(failed), diag)


def yaml_module():
    """python3-yaml (the packaging tests read manifests with it); Skip when it is not installed."""
    try:
        import yaml
    except ImportError:
        raise Skip("python3-yaml is not installed (packaging/install-deps.sh installs it)")
    return yaml


def build_paths(*names):
    """The build outputs meson passes as --NAME PATH options (relative to the build directory,
    made absolute: the clients run from other directories); a namespace of them."""
    p = argparse.ArgumentParser()
    for name in names:
        p.add_argument("--" + name, type=os.path.abspath)
    return p.parse_args()


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


# ---- a network of the test program's own ---------------------------------------------------

# The tests' addresses come from 198.18.0.0/15 (RFC 2544's, for benchmarks: never routed), one
# /24 per test program. Left out: 198.18.0.0/20, for addresses someone picks by hand, and
# bench/vm.sh's 198.19.240.0/24.
TEST_NET = ipaddress.IPv4Network("198.18.0.0/15")
NET_FIRST_BLOCK = 16
NET_BENCH_BLOCK = 496
# Where the blocks' locks are: one file a block, held (flock) for as long as a program uses it.
NET_LOCKS = "/run/lock" if os.access("/run/lock", os.W_OK) else "/tmp"


def program_key():
    """What names this test program among those that may run at once: its file's name, and the
    variant meson runs it as (the valgrind and sockferry/1 twins run the same file)."""
    key = os.path.basename(sys.argv[0])
    if VALGRIND:
        key += "+valgrind"
    if LINK_MODE:
        key += "+" + LINK_MODE
    return key


def _block_in_use(net):
    """Whether an address of net is on an interface here (someone who takes no lock)."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return False
    return any(ipaddress.IPv4Address(a) in net for a in re.findall(r"\binet (\d+\.\d+\.\d+\.\d+)/", out))


class Net:
    """The /24 of 198.18.0.0/15 this test program has to itself: the block its name (program_key)
    hashes to, or the next free one when another program holds that (a second run of the same
    test, say). Held until the program ends. The names that go with it are this process's:
    ns (a network namespace), host_if and cont_if (a veth pair; 15 characters at most).

    host and container are the two ends of the namespace's veth pair (.1 and .2, a /30);
    addr(N) is the block's address N, for anything else the program needs."""

    def __init__(self, key=None):
        key = key or program_key()
        first = int(hashlib.sha256(key.encode()).hexdigest(), 16)
        blocks = list(TEST_NET.subnets(new_prefix=24))
        span = len(blocks) - NET_FIRST_BLOCK
        for i in range(span):
            n = NET_FIRST_BLOCK + (first + i) % span
            if n == NET_BENCH_BLOCK:
                continue
            lock = open(os.path.join(NET_LOCKS, "sockferry-test-net-%s.lock" % blocks[n].network_address), "a")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                continue
            if _block_in_use(blocks[n]):
                lock.close()
                continue
            self._lock = lock
            self.block = blocks[n]
            break
        else:
            raise Skip("every /24 of %s is taken by other tests" % TEST_NET)
        self.key = key
        self.host, self.container = self.addr(1), self.addr(2)
        pid = os.getpid()
        self.ns = "sf-%s-%d" % (re.sub(r"^test_|\.py$", "", os.path.basename(key.split("+")[0])), pid)
        self.host_if, self.cont_if = "sfh%d" % pid, "sfc%d" % pid

    def addr(self, n):
        return str(self.block.network_address + n)

    def namespace(self):
        """The "container" network: the namespace ns, its veth pair host_if/cont_if with host
        and container on it (netns())."""
        return netns(self.ns, self.host_if, self.cont_if, self.host, self.container)


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
        self.ready_timeout = ready_timeout or (60 if VALGRIND else 10 * WAIT_SCALE)
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


class Server:
    """A test server (tests/lib/sfservers.py: echo, tagged, http, sink, banner, after-eof,
    sink-source, late) at where (a unix path, @NAME, tcp:HOST:PORT, tcp:[V6]:PORT or
    vsock:CID:PORT; port 0 takes a free one). tag names it in its answers (tagged, http). In a
    process of its own, or with thread in threads of this one (no interpreter to start: for
    the many small servers of quick tests; one a test kills must be a process). Listening
    when the constructor returns, or nothing left behind: endpoint is what reaches it (its
    port included), port its port. stop() (or the end of a with block, safe to repeat) ends
    it and removes its socket file."""

    def __init__(self, mode, where, tag=None, stderr=None, thread=False):
        self.where = where
        self.proc = None
        with contextlib.ExitStack() as st:
            if thread:
                ls, self.endpoint = sfservers.listen(where)
                context = sfservers.HttpServer(tag or mode) if mode == "http" else tag or mode
                st.enter_context(serving(ls, lambda c: sfservers.serve(c, mode, context)))
            else:
                # (MALLOC_PERTURB_=0: see sfservers.without_malloc_perturb, without its new start)
                self.proc = subprocess.Popen([sys.executable, SERVERS, mode, where] + ([tag] if tag else []),
                                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=stderr,
                                             env=dict(os.environ, MALLOC_PERTURB_="0"))
                st.callback(reap, self.proc)
                said, _, self.endpoint = self.proc.stdout.readline().decode(errors="replace").rstrip("\n").partition(" ")
                if said != "listening" or not self.endpoint:
                    raise AssertionError("the %s test server did not start on %s" % (mode, where))
            self.port = int(self.endpoint.rsplit(":", 1)[1]) if not self.endpoint.startswith("unix:") else None
            # the socket file is ours once it listened there, not before
            if self.endpoint.startswith("unix:/"):
                st.callback(self._unlink)
            self._teardown = st.pop_all()

    def _unlink(self):
        try:
            os.unlink(self.endpoint[5:])
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
    The runner gives each test a fresh one: sftap.main(TESTS, fixture=Scene), or with
    fixture=Scene.of(MAKE) each test gets MAKE(sc) built in its fresh Scene sc."""

    @classmethod
    def of(cls, make):
        """A fixture: each test gets make(sc), sc a fresh Scene that ends with the test."""
        @contextlib.contextmanager
        def fixture():
            with cls() as sc:
                yield make(sc)
        return fixture

    def tmpdir(self, prefix="sf-e2e-", mode=None, dir=None):
        return self.enter_context(tmpdir(prefix, mode, dir))

    def relay(self, args, **kw):
        """A Relay (its keywords), stopped at the end with its exit status checked."""
        return self.enter_context(Relay(args, **kw))

    def server(self, mode, where, tag=None, **kw):
        """A Server (tests/lib/sfservers.py; its keywords), stopped at the end."""
        return self.enter_context(Server(mode, where, tag, **kw))

    def popen(self, argv, **kw):
        return self.enter_context(popen(argv, **kw))

    def mount_point(self, src, target):
        return self.enter_context(mount_point(src, target))

    def mount(self, argv, target, required=True):
        return self.enter_context(mounted(argv, target, required))

    def serve(self, ls, handle, threaded=True):
        """A listener of the test's own whose connections handle(conn) takes (serving()), for
        a peer that misbehaves on purpose; a service that behaves is a server()."""
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


# ---- an authenticated link ------------------------------------------------------------------

class Link:
    """A service behind a host relay on loopback TCP with auth = token, in the scene sc: the
    other end for container relays and `sockferry check` (service: a Server mode, or None for
    none)."""

    def __init__(self, sc, service="echo"):
        self.d = sc.tmpdir()
        self.token = keygen(self.d)
        self.port = free_port()
        self.srv = sc.server(service, self.d + "/service.sock") if service else None
        self.host = sc.relay(["relay", "-F", "host:tcp:127.0.0.1:%d=unix:%s/service.sock,auth=token,token-file=%s"
                              % (self.port, self.d, self.token)])

    def spec(self, name="c", token=None, extra=""):
        """A container forward NAME (unix d/NAME.sock) to the host relay, as a -F spec."""
        return "%s:unix:%s/%s.sock=tcp:127.0.0.1:%d,auth=token,token-file=%s%s" % (
            name, self.d, name, self.port, token or self.token, extra)


def check(*args):
    """`sockferry check ARGS...`: (exit status, stdout, stderr)."""
    return run_sockferry(["check"] + list(args))


# ---- the preload's container ----------------------------------------------------------------

# What the preload says about a directory in the place of a socket.
PRELOAD_DIAGNOSTIC = ("sockferry-preload: {} is a directory, not a socket: the host socket bind mount "
                      "did not carry a socket (Docker Desktop?). Map it with alias= in sockferry's config.")
# The interpreter of the clients (one another user can run), and the python3 client.
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
PYCLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload", "pyclient.py")


class Result:
    """A finished client: exit status, stdout, stderr (its str() is all three, for a failure's
    message)."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def __str__(self):
        return "exit %s\nstdout: %r\nstderr: %r" % (self.returncode, self.stdout, self.stderr)


@contextlib.contextmanager
def preload_setup(missing=None):
    """The preload tests' run (sftap.main's setup): skipped unless mount namespaces and bind
    mounts work here, or with missing, the reason something the program needs is not here;
    the clients see only what each test sets of the preload's variables."""
    if missing:
        raise Skip(missing)
    need_root("for a mount namespace and a bind mount")
    try:
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Skip("unshare --mount does not work here: %s" % e)
    if r.returncode != 0:
        raise Skip("unshare --mount does not work here: %s" % r.stderr.strip())
    for k in list(os.environ):
        if k.startswith("SOCKFERRY_PRELOAD") or k == "LD_PRELOAD":
            del os.environ[k]
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    yield


def asan_runtime(lib):
    """An AddressSanitizer build of the library needs the runtime loaded before it, since the
    clients (curl, python3) are not instrumented. Returns its path, or None."""
    try:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if "libasan.so" in line and "=>" in line:
            return line.split("=>")[1].split("(")[0].strip()
    return None


class Lab:
    """The preload tests' "container", in the scene sc: a private mount namespace per client in
    which an empty directory is bind-mounted over the socket path the client expects (mapped),
    what Docker Desktop leaves when a host socket cannot cross into the VM. Servers run outside
    it (sc.server), on unix sockets in the lab's directory, on 127.0.0.1 or on vsock; only the
    client runs inside, with the preload library lib loaded."""

    TIMEOUT = 30

    def __init__(self, sc, lib):
        self.sc = sc
        self.lib = lib
        self.asan = asan_runtime(lib) if lib else None
        self.tmp = sc.tmpdir(prefix="sfp.", mode=0o755, dir="/tmp")
        self.empty = self.path("empty")
        self.mapped = self.path("run", "x.sock")
        os.makedirs(self.empty)
        os.makedirs(self.mapped)
        os.chmod(self.path("run"), 0o755)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def server(self, mode, where, tag=None):
        """A Server in threads of this process (where: a name in the lab's directory, or
        tcp:/vsock:/@); its endpoint."""
        if not where.startswith(("tcp:", "vsock:", "@", "/")):
            where = self.path(where)
        return self.sc.server(mode, where, tag, thread=True).endpoint

    def env(self, mapping=None, lib=None, **extra):
        """The client's environment: the preload (after the ASan runtime in a sanitizer build),
        SOCKFERRY_PRELOAD_MAP=mapping, and extra."""
        lib = lib or self.lib
        e = {"LD_PRELOAD": "%s:%s" % (self.asan, lib) if self.asan and lib == self.lib else lib}
        if self.asan:
            e["ASAN_OPTIONS"] = "detect_leaks=0"
        if mapping is not None:
            e["SOCKFERRY_PRELOAD_MAP"] = mapping
        e.update({k: str(v) for k, v in extra.items()})
        return e

    def run(self, cmd, env=None, mount=True, setup="", user=None, cwd=None, stdin=None, timeout=TIMEOUT):
        """Runs cmd in a fresh mount namespace; with mount, the empty directory is first
        bind-mounted over mapped, then the shell code setup runs (exit 125 if either fails).
        env is added for cmd alone (not unshare, sh, mount or setpriv). Returns a Result."""
        script = ('mount --bind "$1" "$2" || exit 125; ' if mount else "") + \
            ("{ %s; } || exit 125; " % setup if setup else "") + 'shift 2; exec "$@"'
        argv = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script,
                "sh", self.empty, self.mapped]
        if user is not None:
            argv += ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"]
        argv += ["env"] + ["%s=%s" % kv for kv in (env or {}).items()] + list(cmd)
        try:
            r = subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=cwd, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return Result(-1, e.stdout or "", "timed out after %ss; %s" % (timeout, e.stderr or ""))
        return Result(r.returncode, r.stdout, r.stderr)

    def python(self, mode, *args, **kw):
        """tests/preload/pyclient.py MODE ARGS in the container."""
        return self.run([PYTHON, PYCLIENT, mode] + list(args), **kw)


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


def closed_without_answer(path, timeout=10 * WAIT_SCALE):
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

    def __init__(self, path, timeout=10 * WAIT_SCALE):
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
