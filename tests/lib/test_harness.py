#!/usr/bin/env python3
"""Tests of the test harness (sfharness.py) and the TAP runner (sftap.py): what every
end-to-end test relies on when something goes wrong.

* a relay or server that fails to start, or never becomes ready, leaves no process, file or
  directory behind; a server that cannot bind leaves the file in its way alone;
* a teardown step that fails does not stop the others, and every failure is reported;
* a bad exit status, or a sanitizer report in the log, fails the test once everything is
  cleaned up;
* a network namespace that fails half way is removed again, and one that was made is removed
  at the end; a test program's network is a /24 of 198.18.0.0/15 no other program holds;
* the test servers listen where they are told and answer as their modes say;
* a test program and its servers run without meson test's MALLOC_PERTURB_, and what they
  start (relays, clients) with it;
* the runner: one failing test fails alone with its traceback, a skip says why, SF_ONLY
  filters, a fixture's teardown failure fails its test, a set-up's Skip skips the run, SIGTERM
  (meson's timeout) unwinds."""

import contextlib
import ipaddress
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sftap  # noqa: E402
from sfharness import (NET_BENCH_BLOCK, NET_FIRST_BLOCK, TEST_NET, Net, Relay, Scene, Server, Skip,  # noqa: E402
                       connect, echo_once, need_root, netns, recv_all, wait_for)


def children():
    """The processes this one started that are still there (zombies included)."""
    me, out = os.getpid(), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            out.append(int(pid))
    return out


@contextlib.contextmanager
def private_tmp():
    """Points tempfile at a fresh directory for the length of the with block, so that what a
    failed start left there can be seen; yields its path."""
    saved = tempfile.tempdir
    d = tempfile.mkdtemp(prefix="sf-harness-")
    tempfile.tempdir = d
    try:
        yield d
    finally:
        tempfile.tempdir = saved
        os.rmdir(d)  # fails the test when something was left in it


def fails_with(fn, *words):
    """Runs fn, which must raise; the text of what it raised (and what that chained) must
    hold every word. Returns that text."""
    try:
        fn()
    except Exception as e:
        text, seen = "", e
        while seen is not None:
            text += "%s: %s\n" % (type(seen).__name__, seen)
            seen = seen.__context__
    else:
        raise AssertionError("no failure was reported")
    for w in words:
        assert w in text, "%r is not in what was raised:\n%s" % (w, text)
    return text


def test_a_relay_that_exits_at_start_leaves_nothing_behind():
    with private_tmp() as tmp:
        fails_with(lambda: Relay(["relay", "-F", "x:unix:relative.sock=tcp:127.0.0.1:9"]),
                   "sockferry exited with 78")
        assert os.listdir(tmp) == [], os.listdir(tmp)
    assert children() == [], children()


def test_a_relay_that_never_becomes_ready_is_killed_and_leaves_nothing_behind():
    with private_tmp() as tmp:
        fails_with(lambda: Relay(["60"], program="sleep", ready_timeout=1), "did not send b'READY=1' within 1s")
        assert os.listdir(tmp) == [], os.listdir(tmp)
    assert children() == [], children()


def test_a_server_that_cannot_bind_leaves_nothing_and_keeps_what_was_in_its_way():
    with Scene() as sc:
        d = sc.tmpdir()
        taken = os.path.join(d, "taken.sock")
        with open(taken, "w") as f:
            f.write("precious")
        fails_with(lambda: Server("echo", taken, stderr=subprocess.DEVNULL), "did not start on " + taken)
        with open(taken) as f:
            assert f.read() == "precious", "the server removed a file it did not make"
        assert children() == [], children()


def test_a_bad_exit_status_fails_the_test_once_everything_is_cleaned_up():
    state = {}

    def scene():
        with Scene() as sc:
            state["dir"] = sc.tmpdir()
            state["srv"] = sc.server("echo", state["dir"] + "/svc.sock")
            # `run` exits 143 on SIGTERM (the payload's status): not the 0 expected here
            state["relay"] = sc.relay(["run", "--no-preload", "-F", "x:unix:%s/in.sock=unix:%s/svc.sock"
                                       % (state["dir"], state["dir"]), "--", "sleep", "60"])
            state["after"] = sc.tmpdir()

    fails_with(scene, "it exited 143, expected 0")
    assert not os.path.exists(state["dir"]) and not os.path.exists(state["after"]), "a directory is left"
    assert not os.path.exists(state["relay"].dir), "the relay's directory is left"
    assert state["srv"].proc.poll() is not None and state["relay"].proc.poll() is not None, "a process is left"
    assert children() == [], children()


def exits_on_sigterm(sc, status):
    """A process in the place of a relay that exits with status on SIGTERM."""
    r = sc.relay(["-c", 'trap "exit %d" TERM; echo armed >&2; while :; do sleep 0.1; done' % status], program="sh",
                 wait_ready=False)
    wait_for(lambda: "armed" in r.text(), what="the trap to be set")
    return r


def test_a_teardown_step_that_fails_does_not_stop_the_others_and_each_failure_is_reported():
    state = {}

    def boom():
        raise RuntimeError("this teardown step failed")

    def scene():
        with Scene() as sc:
            state["dir"] = sc.tmpdir()
            state["first"] = exits_on_sigterm(sc, 5)
            sc.callback(boom)
            state["second"] = exits_on_sigterm(sc, 7)
            raise AssertionError("the test itself failed")

    text = fails_with(scene, "the test itself failed", "this teardown step failed", "it exited 7, expected 0",
                      "it exited 5, expected 0")
    assert not os.path.exists(state["dir"]), text
    for r in (state["first"], state["second"]):
        assert r.proc.poll() is not None and not os.path.exists(r.dir), text
    assert children() == [], children()


def test_a_sanitizer_report_in_the_log_fails_whatever_the_exit_status():
    r = Relay(["-c", "echo 'ERROR: LeakSanitizer: detected memory leaks' >&2; exec sleep 60"], program="sh",
              wait_ready=False, expect=None)
    wait_for(lambda: "LeakSanitizer" in r.text(), what="the report in the log")
    fails_with(r.stop, "LeakSanitizer reported a leak")
    # stopped once: a second stop (the end of a with block) reports nothing more
    assert "LeakSanitizer" in r.stop()
    assert children() == [], children()


def links():
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout


def namespaces():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_a_namespace_that_fails_half_way_is_removed_again():
    need_root()
    net = Net()
    # the peer's name is too long for a link: `ip link add` fails after `ip netns add` worked
    fails_with(lambda: netns(net.ns, net.host_if, "sf-harness-peer-name-too-long", net.host, net.container).__enter__(),
               "cannot create a network namespace here", "ip link add")
    assert net.ns not in namespaces(), namespaces()
    assert net.host_if not in links(), links()
    assert not os.path.exists("/etc/netns/" + net.ns)


ECHO_CLIENT = r'''
import sys
sys.path.insert(0, sys.argv[1])
from sfharness import echo_once
print(echo_once((sys.argv[2], int(sys.argv[3])), b"across"))
'''


def test_a_namespace_is_removed_at_the_end():
    need_root()
    net = Net()
    with net.namespace(), Server("echo", "tcp:%s:0" % net.host) as srv:
        assert net.ns in namespaces() and net.host_if in links()
        with open("/etc/netns/%s/hosts" % net.ns) as f:
            assert "%s host.docker.internal" % net.host in f.read()
        # the host end reached from the namespace, by the name Docker Desktop gives it
        p = subprocess.run(["ip", "netns", "exec", net.ns, sys.executable, "-c", ECHO_CLIENT, HERE,
                            "host.docker.internal", str(srv.port)], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and p.stdout == "b'across'\n", (p.returncode, p.stdout, p.stderr)
    assert net.ns not in namespaces(), namespaces()
    assert net.host_if not in links(), links()
    assert not os.path.exists("/etc/netns/" + net.ns)


def test_each_program_has_a_block_of_its_own():
    blocks = list(TEST_NET.subnets(new_prefix=24))
    first = Net("sf-harness-a")
    again = Net("sf-harness-a")  # the same name, while the first holds its block: the next one
    other = Net("sf-harness-b")
    held = [first.block, again.block, other.block]
    assert len(set(held)) == 3, held
    for net in (first, again, other):
        assert net.block in blocks[NET_FIRST_BLOCK:] and net.block != blocks[NET_BENCH_BLOCK], net.block
        assert ipaddress.IPv4Address(net.host) in net.block and ipaddress.IPv4Address(net.addr(200)) in net.block
        assert len(net.host_if) <= 15 and len(net.cont_if) <= 15 and net.host_if != net.cont_if
    assert blocks[NET_BENCH_BLOCK] == ipaddress.IPv4Network("198.19.240.0/24")
    # the same name always starts at the same block: derived, not drawn
    first._lock.close()
    assert Net("sf-harness-a").block == first.block


def test_the_servers_answer_as_their_modes_say():
    with Scene() as sc:
        servers_answer(sc)


def servers_answer(sc):
    d = sc.tmpdir()
    tagged = sc.server("tagged", d + "/t.sock", "unix")
    assert tagged.endpoint == "unix:%s/t.sock" % d and tagged.port is None
    assert echo_once(d + "/t.sock", b"one\ntwo\nthr", half_close=True) == b"unix:one\nunix:two\nunix:thr"
    echo = sc.server("echo", "tcp:127.0.0.1:0")
    assert echo.endpoint == "tcp:127.0.0.1:%d" % echo.port and echo.port > 0
    assert echo_once(("127.0.0.1", echo.port), b"x" * 100000, half_close=True) == b"x" * 100000
    web = sc.server("http", "@sf-harness-%d" % os.getpid(), "web")
    assert web.endpoint == "unix:@sf-harness-%d" % os.getpid()
    s = connect("\0sf-harness-%d" % os.getpid())
    s.sendall(b"GET /a/b HTTP/1.0\r\n\r\n")
    got = recv_all(s)
    s.close()
    assert got.startswith(b"HTTP/1.0 200 ") and got.endswith(b"\r\n\r\nweb: /a/b\n"), got
    threaded = sc.server("tagged", d + "/th.sock", "in-process", thread=True)
    assert threaded.proc is None and echo_once(d + "/th.sock", b"x\n", half_close=True) == b"in-process:x\n"
    threaded.stop()
    assert not os.path.exists(d + "/th.sock"), "the threaded server's socket is left"
    banner = sc.server("banner", d + "/b.sock")
    s = connect(d + "/b.sock")
    assert s.recv(100).startswith(b"SSH-2.0-")
    s.close()
    banner.stop()
    assert not os.path.exists(d + "/b.sock"), "the server's socket is left"


# A test program that reports the MALLOC_PERTURB_ that glibc saw at its start (its environment
# as exec gave it), what it passes on, and what a relay and a server of its scene got.
PERTURB = r'''
import os, sys
sys.path.insert(0, sys.argv[1])
import sfharness

def perturb_of(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        seen = [e for e in f.read().split(b"\0") if e.startswith(b"MALLOC_PERTURB_=")]
    return seen[0].decode().split("=", 1)[1] if seen else "-"

print("self", perturb_of(os.getpid()), os.environ.get("MALLOC_PERTURB_"), "SF_MALLOC_PERTURB" in os.environ)
with sfharness.Scene() as sc:
    d = sc.tmpdir()
    r = sc.relay(["relay", "-F", "p:unix:%s/p.sock=tcp:127.0.0.1:9" % d])
    srv = sc.server("echo", d + "/e.sock")
    print("relay", perturb_of(r.pid), "server", perturb_of(srv.proc.pid))
'''


def test_python_runs_without_malloc_perturb_and_what_it_starts_with_it():
    # meson test's MALLOC_PERTURB_ fills what the C under test mallocs and frees; the test
    # program and its Python servers run without it (sfservers.without_malloc_perturb).
    env = dict(os.environ)
    env.pop("SF_MALLOC_PERTURB", None)
    for perturb in ("77", "0"):
        env["MALLOC_PERTURB_"] = perturb
        out = subprocess.run([sys.executable, "-c", PERTURB, HERE], env=env, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        want = ["self 0 %s False" % perturb, "relay %s server 0" % perturb]
        assert out.stdout.splitlines() == want, out.stdout + out.stderr


# A test program for the runner: four tests and a fixture whose teardown fails for one of them.
RUNNER = r'''
import contextlib, sys
sys.path.insert(0, sys.argv[1])
import sftap
broken = []

@contextlib.contextmanager
def fixture():
    yield "fixture"
    if broken:
        raise AssertionError("the fixture's teardown found a problem")

def test_passes(f):
    assert f == "fixture"

def test_fails(f):
    assert 1 == 2, "one is not two"

def test_skips(f):
    raise sftap.Skip("not here")

def test_breaks_its_fixture(f):
    broken.append(True)

def test_still_runs(f):
    broken.clear()

sftap.main(sftap.tests_of(globals()), fixture=fixture)
'''


def runner_env():
    """The environment of a test program run by a test: not filtered by this run's SF_ONLY."""
    return {k: v for k, v in os.environ.items() if k != "SF_ONLY"}


def run_runner(env=None):
    p = subprocess.run([sys.executable, "-c", RUNNER, HERE], capture_output=True, text=True, timeout=30,
                       env=dict(runner_env(), **(env or {})))
    return p.returncode, p.stdout


def test_the_runner_isolates_failures_and_says_why():
    rc, out = run_runner()
    lines = [line for line in out.splitlines() if not line.startswith("# ")]
    assert rc == 1, (rc, out)
    assert lines[:2] == ["TAP version 13", "1..5"], out
    assert lines[2].startswith("ok 1 - passes ("), out
    assert lines[3] == "not ok 2 - fails", out
    assert lines[4] == "ok 3 - skips # SKIP not here", out
    assert lines[5] == "not ok 4 - breaks its fixture", out
    assert lines[6].startswith("ok 5 - still runs ("), out
    assert "# AssertionError: one is not two" in out and "# Traceback (most recent call last):" in out, out
    assert "# AssertionError: the fixture's teardown found a problem" in out, out


def test_the_runner_runs_only_what_sf_only_names():
    rc, out = run_runner({"SF_ONLY": "skips"})
    assert rc == 0 and out.splitlines() == ["TAP version 13", "1..1", "ok 1 - skips # SKIP not here"], (rc, out)


# A test program whose set-up says, through SF_SETUP, what it does: skip, fail or let it run.
SETUP = r'''
import contextlib, os, sys
sys.path.insert(0, sys.argv[1])
import sftap

@contextlib.contextmanager
def setup():
    if os.environ["SF_SETUP"] == "skip":
        raise sftap.Skip("no such device here")
    if os.environ["SF_SETUP"] == "fail":
        raise RuntimeError("the set-up broke")
    yield
    if os.environ["SF_SETUP"] == "teardown":
        raise RuntimeError("the teardown broke")

def test_runs():
    pass

sftap.main(sftap.tests_of(globals()), setup=setup)
'''


def test_the_runs_set_up_skips_or_fails_it_as_a_whole():
    def run(how):
        p = subprocess.run([sys.executable, "-c", SETUP, HERE], capture_output=True, text=True, timeout=30,
                           env=dict(runner_env(), SF_SETUP=how))
        return p.returncode, [line for line in p.stdout.splitlines() if not line.startswith("# ")], p.stdout
    rc, lines, out = run("skip")
    assert rc == 0 and lines == ["1..0 # SKIP no such device here"], out
    rc, lines, out = run("fail")
    assert rc == 1 and lines == ["TAP version 13", "1..1", "not ok 1 - set-up of the test run"], out
    assert "RuntimeError: the set-up broke" in out, out
    rc, lines, out = run("teardown")
    assert rc == 1 and lines[:2] == ["TAP version 13", "1..1"] and lines[2].startswith("ok 1 - runs ("), out
    assert "RuntimeError: the teardown broke" in out, out
    rc, lines, out = run("run")
    assert rc == 0 and lines[2].startswith("ok 1 - runs ("), out


# A test that makes a directory and a relay, then waits to be killed by meson's timeout.
HANGS = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
import sftap
from sfharness import Scene

def test_hangs(sc):
    d = sc.tmpdir()
    r = sc.relay(["-c", "exec sleep 60"], program="sh", wait_ready=False, expect=None)
    print("# %s %s" % (d, r.dir), flush=True)
    time.sleep(60)

sftap.main([test_hangs], fixture=Scene)
'''


def test_sigterm_tears_the_running_test_down():
    p = subprocess.Popen([sys.executable, "-c", HANGS, HERE], stdout=subprocess.PIPE, text=True, env=runner_env())
    try:
        line = ""
        while not line.startswith("# /"):
            line = p.stdout.readline()
            assert line, "the test program ended early"
        dirs = line.split()[1:]
        assert all(os.path.isdir(d) for d in dirs), dirs
        start = time.monotonic()
        p.terminate()
        rc = p.wait(timeout=30)
        assert rc != 0, rc
        assert time.monotonic() - start < 20, "the teardown took %.1fs" % (time.monotonic() - start)
        assert not any(os.path.exists(d) for d in dirs), "left behind: %s" % [d for d in dirs if os.path.exists(d)]
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stdout.close()


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()))
