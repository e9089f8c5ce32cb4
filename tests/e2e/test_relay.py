#!/usr/bin/env python3
"""End-to-end tests of `sockferry relay` with real processes, sockets and servers.

Each test gets a Scene (tests/lib/sfharness.py): what it starts is stopped, and its exit
status checked, when it ends."""

import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import (Scene, connect, free_port, recv_all, run_sockferry, transfer_both_ways,  # noqa: E402
                       wait_for, ENGINE, SANITIZED, SOCKFERRY, VALGRIND, WAIT_SCALE)

MIB = 1 << 20
BIG = int(os.environ.get("SF_BIG_MIB", "64")) * MIB
if VALGRIND:
    BIG = 4 * MIB


def test_unix_tcp_unix_through_two_relays_64mib_each_way(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("sink-source", d + "/service.sock")
    sc.relay(["relay", "-F", "host:tcp:127.0.0.1:%d=unix:%s/service.sock" % (port, d)])
    sc.relay(["relay", "-F", "cont:unix:%s/container.sock=tcp:127.0.0.1:%d" % (d, port)])
    transfer_both_ways(d + "/container.sock", BIG)


def test_tcp_to_unix_with_a_real_server_64mib_each_way(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("sink-source", d + "/service.sock")
    sc.relay(["relay", "-F", "t:tcp:127.0.0.1:%d=unix:%s/service.sock" % (port, d)])
    transfer_both_ways(("127.0.0.1", port), BIG)


def test_half_close_reply_after_eof(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("after-eof", "tcp:127.0.0.1:%d" % port)
    sc.relay(["relay", "-F", "h:unix:%s/h.sock=tcp:127.0.0.1:%d" % (d, port)])
    for size in (0, 1, 100000, 3 * MIB):
        s = connect(d + "/h.sock")
        payload = os.urandom(size)
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        reply = recv_all(s)
        s.close()
        assert reply == ("%d %s\n" % (size, hashlib.sha256(payload).hexdigest())).encode(), reply


def test_slow_reader_keeps_relay_memory_bounded(sc):
    """1 GiB pushed by a fast writer to a slow reader: backpressure must stop the relay from
    buffering it; its RSS may grow by a few MiB at most."""
    d = sc.tmpdir()
    total = (64 if VALGRIND else 1024) * MIB
    ls = sc.enter_context(socket.socket(socket.AF_UNIX))
    ls.bind(d + "/slow.sock")
    ls.listen(1)
    r = sc.relay(["relay", "-F", "s:unix:%s/in.sock=unix:%s/slow.sock" % (d, d)])
    base = r.rss_kib()
    peak = [base]
    done = threading.Event()

    def writer():
        s = connect(d + "/in.sock", timeout=120)
        chunk = b"x" * MIB
        for _ in range(total // MIB):
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
        s.close()

    def sampler():
        while not done.is_set():
            peak[0] = max(peak[0], r.rss_kib())
            time.sleep(0.02)

    wt = threading.Thread(target=writer)
    st = threading.Thread(target=sampler)
    wt.start()
    st.start()
    # the sampler stops before the relay does (the scene ends in reverse order)
    sc.callback(st.join)
    sc.callback(done.set)
    c = sc.enter_context(ls.accept()[0])
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    got = 0
    start = time.monotonic()
    while True:
        b = c.recv(4 * MIB)
        if not b:
            break
        got += len(b)
        # slow for the first part: the writer must be held back, not buffered
        if time.monotonic() - start < 3:
            time.sleep(0.01)
    wt.join()
    done.set()
    st.join()
    assert got == total, "reader got %d of %d bytes" % (got, total)
    growth = peak[0] - base
    print("# relay RSS %d KiB at start, peak %d KiB (+%d KiB) for %d MiB" % (base, peak[0], growth, total // MIB))
    assert growth < 4 * 1024, "relay RSS grew by %d KiB" % growth


def test_a_slow_reader_gets_every_byte_of_a_download_that_ends_with_its_upstream(sc):
    """A client that asked and half-closed, then reads slowly, while its upstream sends 4 MiB
    and closes: both directions end while the relay still has the last bytes for the client.
    The connection may end only once they are out (the portable engine's outbox dropped up to
    256 KiB of them when the connection closed: CI lost 37 475 bytes of a 64 MiB stream)."""
    d = sc.tmpdir()
    total = 4 * MIB
    data = os.urandom(total)
    ls = sc.enter_context(socket.socket(socket.AF_UNIX))
    ls.bind(d + "/source.sock")
    ls.listen(1)
    sc.relay(["relay", "-F", "s:unix:%s/in.sock=unix:%s/source.sock" % (d, d)])
    served = {}

    def upstream():
        try:
            u = ls.accept()[0]
            with u:
                served["request"] = recv_all(u)
                u.sendall(data)
        except OSError as e:
            served["error"] = repr(e)

    t = threading.Thread(target=upstream, daemon=True)
    t.start()
    c = connect(d + "/in.sock", timeout=60)
    sc.closing(c)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    c.sendall(b"send it all")
    c.shutdown(socket.SHUT_WR)
    chunks = []
    while True:
        b = c.recv(16 * 1024)
        if not b:
            break
        chunks.append(b)
        time.sleep(0.002)  # slower than the upstream: the relay's last bytes wait for room
    t.join(60)
    got = b"".join(chunks)
    assert "error" not in served, served["error"]
    assert served.get("request") == b"send it all", served
    assert len(got) == total, "the client got %d of %d bytes, then the end" % (len(got), total)
    assert got == data, "the bytes came changed"


def test_20000_sequential_connections_leave_no_fd_behind(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("echo", "tcp:127.0.0.1:%d" % port)
    r = sc.relay(["relay", "-q", "-F", "seq:unix:%s/s.sock=tcp:127.0.0.1:%d" % (d, port)])
    n = 2000 if VALGRIND else 20000
    before = r.fds()
    for i in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.connect(d + "/s.sock")
        s.sendall(b"p")
        assert s.recv(1) == b"p"
        s.close()
    wait_for(lambda: r.fds() == before, timeout=10, what="fd count back to %d (now %d)" % (before, r.fds()))
    print("# %d connections: relay fds %d before, %d after" % (n, before, r.fds()))


def bulk_echo_pipe_fds(d, where, n, size):
    """Echoes `size` bytes each way over `n` connections through a relay to an echo server at
    `where` (tcp:HOST:PORT or a unix path) and leaves them open and idle; returns the pipe
    descriptors the relay holds then beyond its baseline. Checks that idle connections hold only
    their two sockets and that the relay is back to its baseline once they close."""
    upstream = where if where.startswith("tcp:") else "unix:" + where
    with Scene() as sc:
        sc.server("echo", where)
        r = sc.relay(["relay", "-q", "-F", "bulk:unix:%s/b.sock=%s" % (d, upstream)])

        def kinds():
            links = [os.readlink("/proc/%d/fd/%s" % (r.pid, f)) for f in os.listdir("/proc/%d/fd" % r.pid)]
            return sum(x.startswith("socket:") for x in links), sum(x.startswith("pipe:") for x in links)

        socks = sc.closing([])
        before = r.fds()
        sockets0, pipes0 = kinds()
        for _ in range(n):
            s = connect(d + "/b.sock", timeout=30)
            socks.append(s)
            data = os.urandom(size)
            t = threading.Thread(target=s.sendall, args=(data,))
            t.start()
            got = bytearray()
            while len(got) < size:
                b = s.recv(1 << 20)
                assert b, "echo ended after %d of %d bytes" % (len(got), size)
                got += b
            t.join()
            assert bytes(got) == data, "echoed bytes differ"
        sockets1, pipes1 = kinds()
        print("# %s: %d idle connections after %d MiB each way: +%d sockets, +%d pipe fds"
              % (upstream.split(":")[0], n, size // MIB, sockets1 - sockets0, pipes1 - pipes0))
        assert sockets1 - sockets0 == 2 * n, (sockets0, sockets1)
        for s in socks:
            s.close()
        wait_for(lambda: r.fds() == before, timeout=10, what="fd count back to %d (now %d)" % (before, r.fds()))
        return pipes1 - pipes0


def test_bulk_transfers_splice_and_idle_connections_hold_no_pipe(sc):
    """Bulk data read from a network socket splices through a pooled pipe, held only while
    bytes sit in it: after the transfers the pool keeps a few spare pipes and no idle
    direction holds one. Data read from a unix socket is copied (splicing out of one measured
    slower, bench/RESULTS.md), so a unix-to-unix relay never opens a pipe. The portable engine
    has no splice: it never opens a pipe at all."""
    d = sc.tmpdir()
    n, size = (4, MIB) if VALGRIND else (20, 4 * MIB)
    spliced = bulk_echo_pipe_fds(d, "tcp:127.0.0.1:%d" % free_port(), n, size)
    if ENGINE == "portable":
        assert spliced == 0, spliced
    else:
        # Spare pipes prove the splice path ran; a pipe held per idle direction would be 2n more.
        assert 2 <= spliced <= 32, spliced
    assert bulk_echo_pipe_fds(d, d + "/echo.sock", n, size) == 0


def test_1000_concurrent_connections(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("echo", "tcp:127.0.0.1:%d" % port)
    r = sc.relay(["relay", "-q", "-F", "many:unix:%s/m.sock=tcp:127.0.0.1:%d" % (d, port)])
    n = 200 if VALGRIND else 1000
    socks = sc.closing([])
    before = r.fds()
    for i in range(n):
        socks.append(connect(d + "/m.sock"))
    for i, s in enumerate(socks):
        s.sendall(b"%08d" % i)
    for i, s in enumerate(socks):
        assert s.recv(8, socket.MSG_WAITALL) == b"%08d" % i
    # Ceilings for a loaded machine: the echo server is a Python thread per connection, and
    # the pairs close only as fast as its 1000 threads see their ends.
    wait_for(lambda: r.fds() >= before + 2 * n, timeout=30, what="%d relayed pairs" % n, detail=r.fds_described)
    for s in socks:
        s.close()
    wait_for(lambda: r.fds() == before, timeout=30, what="fds back to %d" % before, detail=r.fds_described)


def test_upstream_down_closes_client_promptly_and_logs_why(sc):
    d = sc.tmpdir()
    port = free_port()  # nobody listens here
    r = sc.relay(["relay", "-F", "down:unix:%s/d.sock=tcp:127.0.0.1:%d" % (d, port)])
    s = connect(d + "/d.sock")
    start = time.monotonic()
    s.settimeout(5 * WAIT_SCALE)
    assert s.recv(1) == b""
    took = time.monotonic() - start
    s.close()
    # (well under connect-timeout, 5 s, in every build: WAIT_SCALE <= 3)
    assert took < max(2, 1.5 * WAIT_SCALE), "client waited %.1fs" % took
    log = r.text()
    assert "connect tcp:127.0.0.1:%d: Connection refused" % port in log, log
    assert "is the host-side relay" in log, log


def test_candidate_fallback_from_empty_directory_to_tcp(sc):
    d = sc.tmpdir()
    os.mkdir(d + "/host.sock")  # what Docker Desktop leaves for a host socket bind mount
    sc.mount(["--bind", d + "/host.sock"], d + "/host.sock", required=False)
    port = free_port()
    sc.server("echo", "tcp:127.0.0.1:%d" % port)
    r = sc.relay(["relay", "-F", "fb:unix:%s/c.sock=unix:%s/host.sock|tcp:127.0.0.1:%d" % (d, d, port)])
    for i in range(5):
        s = connect(d + "/c.sock")
        s.sendall(b"hello")
        assert s.recv(5, socket.MSG_WAITALL) == b"hello"
        s.close()
    log = r.text()
    assert "connect unix:%s/host.sock: is a directory, not a socket" % d in log, log
    # logged once per state change, not per connection
    assert log.count("host.sock: is a directory") == 1, log


def test_stale_socket_is_replaced(sc):
    d = sc.tmpdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(d + "/x.sock")
    stale.close()  # the file stays, nobody accepts: a stale socket
    port = free_port()
    sc.server("echo", "tcp:127.0.0.1:%d" % port)
    r = sc.relay(["relay", "-F", "st:unix:%s/x.sock=tcp:127.0.0.1:%d" % (d, port)])
    s = connect(d + "/x.sock")
    s.sendall(b"a")
    assert s.recv(1) == b"a"
    s.close()
    assert "removed a stale socket" in r.text()
    r.stop()
    assert not os.path.exists(d + "/x.sock"), "relay left its socket behind"


def test_live_socket_is_not_stolen(sc):
    d = sc.tmpdir()
    live = socket.socket(socket.AF_UNIX)
    live.bind(d + "/x.sock")
    live.listen(1)
    rc, out, err = run_sockferry(["relay", "-F", "lv:unix:%s/x.sock=tcp:127.0.0.1:9" % d])
    live.close()
    assert rc == 1, (rc, err)
    assert "another process is already accepting" in err, err


def test_regular_file_at_listen_path_is_left_untouched(sc):
    d = sc.tmpdir()
    with open(d + "/x.sock", "w") as f:
        f.write("precious")
    rc, out, err = run_sockferry(["relay", "-F", "rf:unix:%s/x.sock=tcp:127.0.0.1:9" % d])
    assert rc == 1, (rc, err)
    assert "a regular file is in the way; left untouched" in err, err
    with open(d + "/x.sock") as f:
        assert f.read() == "precious"


def test_mount_point_directory_at_listen_path_is_explained(sc):
    d = sc.tmpdir()
    os.mkdir(d + "/x.sock")
    sc.mount_point(d + "/x.sock", d + "/x.sock")
    rc, out, err = run_sockferry(["relay", "-F", "mp:unix:%s/x.sock=tcp:127.0.0.1:9" % d])
    assert rc == 1, (rc, err)
    assert "is a directory and a mount point" in err, err
    assert "host socket bind mount" in err, err
    assert os.path.isdir(d + "/x.sock")


def test_socket_mode_owner_group_exact(sc):
    d = sc.tmpdir()
    sc.relay(["relay", "-F", "m:unix:%s/sub/dir/m.sock=tcp:127.0.0.1:9,mode=0640,owner=65534,group=65534" % d])
    st = os.stat(d + "/sub/dir/m.sock")
    assert oct(st.st_mode & 0o7777) == oct(0o640), oct(st.st_mode)
    assert st.st_uid == 65534 and st.st_gid == 65534, (st.st_uid, st.st_gid)
    assert oct(os.stat(d + "/sub").st_mode & 0o777) == oct(0o755)


def test_socket_owner_without_cap_fowner(sc):
    """Without CAP_FOWNER (a container started with --cap-drop ALL --cap-add CHOWN), the kernel's
    fs.protected_hardlinks lets only a file's owner link it: the relay links its socket while it
    is its own and gives it to its owner right after. The socket serves, with exactly the
    configured owner, group and mode, and nothing else is left in its directory."""
    if not shutil.which("setpriv"):
        raise sftap.Skip("setpriv (util-linux) is not installed")
    probe = subprocess.run(["setpriv", "--bounding-set", "-fowner", "--", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise sftap.Skip("setpriv cannot drop CAP_FOWNER here: %s" % probe.stderr.strip())
    with open("/proc/sys/fs/protected_hardlinks") as f:
        if f.read().strip() != "1":
            raise sftap.Skip("fs.protected_hardlinks is 0 here: nothing would refuse the link")
    d = sc.tmpdir()
    port = free_port()
    sc.server("echo", "tcp:127.0.0.1:%d" % port)
    sc.relay(["relay", "-F", "fo:unix:%s/s.sock=tcp:127.0.0.1:%d,owner=65534,group=65534,mode=0660" % (d, port)],
             prefix=["setpriv", "--bounding-set", "-fowner", "--"])
    st = os.stat(d + "/s.sock")
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)) == (65534, 65534, oct(0o660)), \
        (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777))
    s = connect(d + "/s.sock")
    s.sendall(b"f")
    assert s.recv(1) == b"f"
    s.close()
    assert os.listdir(d) == ["s.sock"], os.listdir(d)


def held_back(sc, calls, spec):
    """A relay with spec whose calls (a strace syscall set) strace holds back 0.3 s: the strace
    process, its stderr piped. LeakSanitizer cannot run under ptrace (every other test of a
    sanitizer build checks for leaks)."""
    if not shutil.which("strace"):
        raise sftap.Skip("strace is not installed (packaging/install-deps.sh installs it)")
    probe = subprocess.run(["strace", "-qq", "-o", "/dev/null", "-e", "inject=listen:delay_enter=1", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise sftap.Skip("strace cannot trace here (no ptrace in this container?): %s" % probe.stderr.strip())
    env = dict(os.environ)
    if SANITIZED:
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    tracer = sc.popen(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + calls,
                       "-e", "inject=%s:delay_enter=300000" % calls, SOCKFERRY, "relay", "-F", spec],
                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    # A killed strace lets its tracee run on: the end of the test kills both, as a group.
    sc.callback(kill_group, tracer.pid)
    return tracer


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_socket_path_appears_listening_with_its_owner(sc):
    """A client that connects the moment the socket's path appears is served, and finds the
    socket's configured owner, group and mode: the relay binds under a hidden name, sets the owner,
    listens, and only then links the path. strace holds each listen() and fchownat() of the relay
    back 0.3 s, so that a socket bound under its path would be seen refusing connections
    (ECONNREFUSED: "nothing is there") or owned by root."""
    d = sc.tmpdir()
    path = d + "/s.sock"
    port = free_port()
    sc.server("echo", "tcp:127.0.0.1:%d" % port)
    tracer = held_back(sc, "listen,fchownat",
                       "st:unix:%s=tcp:127.0.0.1:%d,owner=65534,group=65534,mode=0660" % (path, port))
    refused, first, deadline = 0, None, time.monotonic() + 20 * WAIT_SCALE
    while time.monotonic() < deadline and tracer.poll() is None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        first = first or st
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
        except ConnectionRefusedError:
            refused += 1
            s.close()
            continue
        s.sendall(b"x")
        assert s.recv(1) == b"x"
        s.close()
        break
    else:
        tracer.kill()
        raise AssertionError("the socket never served a client: %s" % tracer.communicate()[1].decode())
    st = first
    assert refused == 0, "the path refused %d connections before the relay listened" % refused
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)) == (65534, 65534, oct(0o660)), \
        "the path appeared as uid %d gid %d mode %o" % (st.st_uid, st.st_gid, st.st_mode & 0o7777)
    # The hidden name goes right after the link.
    wait_for(lambda: os.listdir(d) == ["s.sock"], what="the directory to hold the socket alone",
             detail=lambda: str(os.listdir(d)))
    # strace's child is the relay; it ends as SIGTERM asks, and strace with it.
    with open("/proc/%d/task/%d/children" % (tracer.pid, tracer.pid)) as f:
        os.kill(int(f.read().split()[0]), signal.SIGTERM)
    err = tracer.communicate(timeout=15 * WAIT_SCALE)[1].decode()
    assert tracer.returncode == 0, err
    assert os.listdir(d) == [], "left behind: %s" % os.listdir(d)


def test_a_file_made_at_the_path_while_the_socket_is_made_is_left_untouched(sc):
    """A file another process makes at the listen path after the relay checked it, while the
    relay's socket waits under its hidden name for listen() (held back by strace), is neither
    replaced nor removed: the relay says so and exits, and takes its hidden name with it."""
    d = sc.tmpdir()
    path = d + "/s.sock"
    tracer = held_back(sc, "listen", "st:unix:%s=tcp:127.0.0.1:9" % path)
    wait_for(lambda: any(n.startswith(".s.sock.") for n in os.listdir(d)),
             what="the socket under its hidden name", detail=lambda: str(os.listdir(d)))
    with open(path, "w") as f:
        f.write("someone else's\n")
    err = tracer.communicate(timeout=15 * WAIT_SCALE)[1].decode()
    assert tracer.returncode == 1, (tracer.returncode, err)
    assert "something else appeared at the path while the socket was made; left untouched" in err, err
    with open(path) as f:
        assert f.read() == "someone else's\n"
    assert os.listdir(d) == ["s.sock"], "left behind: %s" % os.listdir(d)


def test_sigterm_drains_active_connections(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("after-eof", "tcp:127.0.0.1:%d" % port)
    r = sc.relay(["relay", "-F", "dr:unix:%s/d.sock=tcp:127.0.0.1:%d" % (d, port)])
    before = r.fds()
    s = connect(d + "/d.sock")
    s.sendall(b"before")
    # active: the relay holds the client and its upstream
    wait_for(lambda: r.fds() == before + 2, what="the connection through the relay")
    r.signal(signal.SIGTERM)
    # logged once the listeners are closed ("SIGTERM received: stopping" comes before that)
    wait_for(lambda: "stopping: no new connections" in r.text(), what="stopping")
    # new clients are refused at once
    try:
        t = connect(d + "/d.sock", timeout=1)
        t.close()
        raise AssertionError("a new connection was accepted while draining")
    except (ConnectionRefusedError, FileNotFoundError):
        pass
    # the active one finishes
    s.sendall(b" after")
    s.shutdown(socket.SHUT_WR)
    reply = recv_all(s)
    s.close()
    assert reply.startswith(b"12 "), reply
    assert r.wait() == 0


def test_drain_timeout_closes_stuck_connections(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("sink", "tcp:127.0.0.1:%d" % port)
    conf = d + "/sf.conf"
    with open(conf, "w") as f:
        f.write("[sockferry]\ndrain-timeout = 300ms\n[stuck]\nlisten = unix:%s/s.sock\nconnect = tcp:127.0.0.1:%d\n"
                % (d, port))
    r = sc.relay(["relay", "-c", conf])
    before = r.fds()
    s = sc.enter_context(connect(d + "/s.sock"))
    s.sendall(b"x")
    wait_for(lambda: r.fds() == before + 2, what="the connection through the relay")
    start = time.monotonic()
    r.signal(signal.SIGTERM)
    assert r.wait() == 0
    # (valgrind's leak check at the exit takes seconds of its own)
    assert time.monotonic() - start < 5 * WAIT_SCALE
    assert "drain timeout: closing 1 connection" in r.text(), r.text()


def test_max_conns_is_exact_and_does_not_spin(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("echo", "tcp:127.0.0.1:%d" % port)
    r = sc.relay(["relay", "-F", "mc:unix:%s/m.sock=tcp:127.0.0.1:%d,max-conns=3" % (d, port)])
    socks = sc.closing([])
    for i in range(3):
        s = connect(d + "/m.sock")
        socks.append(s)
        s.sendall(b"a")
        assert s.recv(1) == b"a"
    extra = sc.enter_context(connect(d + "/m.sock"))  # sits in the backlog
    extra.settimeout(0.5)
    extra.sendall(b"b")
    cpu0 = r.cpu_seconds()
    try:
        extra.recv(1)
        raise AssertionError("a fourth connection was served with max-conns = 3")
    except socket.timeout:
        pass
    # a second of CPU time watched: the time is what is tested (a relay that spins uses it all)
    time.sleep(1)
    spent = r.cpu_seconds() - cpu0
    assert spent < 0.2, "relay used %.2fs of CPU while full" % spent
    socks.pop().close()
    extra.settimeout(5)
    assert extra.recv(1) == b"b"
    extra.close()
    assert "max-conns 3 reached" in r.text()


def test_fd_exhaustion_pauses_without_spinning_and_recovers(sc):
    d = sc.tmpdir()
    port = free_port()
    sc.server("echo", "tcp:127.0.0.1:%d" % port)

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))

    r = sc.relay(["relay", "-F", "fx:unix:%s/f.sock=tcp:127.0.0.1:%d" % (d, port)], preexec=low_limit)
    socks = sc.closing([])
    for i in range(60):
        s = socket.socket(socket.AF_UNIX)
        socks.append(s)
        s.settimeout(5)
        s.connect(d + "/f.sock")
    wait_for(lambda: "pausing new connections" in r.text(), what="EMFILE to be reported")
    cpu0 = r.cpu_seconds()
    # CPU time watched for a while: the time is what is tested (a relay that spins uses it all)
    time.sleep(1.5)
    spent = r.cpu_seconds() - cpu0
    assert spent < 0.3, "relay used %.2fs of CPU while out of fds" % spent
    for s in socks:
        s.close()

    # pressure gone: it serves again
    def served():
        try:
            s = connect(d + "/f.sock", timeout=2)
            s.sendall(b"z")
            ok = s.recv(1) == b"z"
            s.close()
            return ok
        except OSError:
            return False
    wait_for(served, timeout=10, what="the relay to serve again")
    # reported once, not once per failed accept
    assert r.text().count("pausing new connections") == 1, r.text()


def test_json_log_format(sc):
    d = sc.tmpdir()
    port = free_port()
    conf = d + "/sf.conf"
    with open(conf, "w") as f:
        f.write("[sockferry]\nlog-format = json\n[j]\nlisten = unix:%s/j.sock\nconnect = tcp:127.0.0.1:%d\n" % (d, port))
    r = sc.relay(["relay", "-c", conf])
    s = connect(d + "/j.sock")
    s.recv(1)
    s.close()
    wait_for(lambda: "Connection refused" in r.text(), what="the error line")
    text = r.stop()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert any(o.get("forward") == "j" and "Connection refused" in o["msg"] and o["level"] == "error"
               for o in lines), text


def test_usage_and_config_errors_exit_before_binding(sc):
    d = sc.tmpdir()
    rc, out, err = run_sockferry(["relay", "--bogus"])
    assert rc == 64, (rc, err)
    rc, out, err = run_sockferry(["nosuchcommand"])
    assert rc == 64, (rc, err)
    rc, out, err = run_sockferry(["relay"])
    assert rc == 78 and "nothing to relay" in err, (rc, err)
    rc, out, err = run_sockferry(["relay", "-F", "x:unix:%s/a.sock=tcp:127.0.0.1:0" % d])
    assert rc == 78 and "-F 'x:unix:" in err, (rc, err)
    assert not os.path.exists(d + "/a.sock")
    rc, out, err = run_sockferry(["relay", "-F", "x:tcp:0.0.0.0:7000=unix:/x"])
    assert rc == 78 and "auth = token" in err, (rc, err)
    rc, out, err = run_sockferry(["relay", "-c", d + "/missing.conf"])
    assert rc == 78 and "missing.conf" in err, (rc, err)
    rc, out, err = run_sockferry(["--version"])
    assert rc == 0 and out.startswith("sockferry "), out
    rc, out, err = run_sockferry(["--help"])
    assert rc == 0 and "relay" in out and "run" in out


def test_abstract_and_ipv6_endpoints(sc):
    d = sc.tmpdir()
    name = "sf-test-%d" % os.getpid()
    sc.server("echo", d + "/e.sock")
    port = free_port()
    sc.relay(["relay",
              "-F", "ab:unix:@%s=unix:%s/e.sock" % (name, d),
              "-F", "v6:tcp:[::1]:%d=unix:@%s" % (port, name)])
    s = socket.socket(socket.AF_INET6)
    s.settimeout(5)
    s.connect(("::1", port))
    s.sendall(b"v6")
    assert s.recv(2, socket.MSG_WAITALL) == b"v6"
    s.close()


def test_quoted_connect_path_with_spaces(sc):
    # Issue 23: 1Password's agent on a Mac lives under "Group Containers"; a quoted candidate
    # in the file and in -F reaches it. In -F the quoted one comes after a refused candidate.
    d = sc.tmpdir()
    agent_dir = os.path.join(d, "Group Containers", "2BUA8C4S2C.com.1password", "t")
    os.makedirs(agent_dir)
    agent = os.path.join(agent_dir, "agent.sock")
    sc.server("echo", agent)
    conf = d + "/sf.conf"
    with open(conf, "w") as f:
        f.write('[agent]\nlisten = unix:%s/file.sock\nconnect = "unix:%s" tcp:127.0.0.1:%d\n'
                % (d, agent, free_port()))
    r = sc.relay(["relay", "-c", conf, "-F", 'spec:unix:%s/spec.sock=tcp:127.0.0.1:%d|"unix:%s"'
                  % (d, free_port(), agent)])
    for name in ("file", "spec"):
        s = connect("%s/%s.sock" % (d, name))
        s.sendall(b"ping " + name.encode())
        assert s.recv(64) == b"ping " + name.encode(), r.text()
        s.close()


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
