#!/usr/bin/env python3
"""Tests of the test harness (sfharness.py) and the TAP runner (sftap.py): what every
end-to-end test relies on when something goes wrong.

* a relay or server that fails to start, or never becomes ready, leaves no process, file or
  directory behind; a server that cannot bind leaves the file in its way alone;
* a teardown step that fails does not stop the others, and every failure is reported;
* a bad exit status, or a sanitizer report in the log, fails the test once everything is
  cleaned up;
* a network namespace that fails half way is removed again, and one that was made is removed
  at the end;
* the runner: one failing test fails alone with its traceback, a skip says why, SF_ONLY
  filters, a fixture's teardown failure fails its test, SIGTERM (meson's timeout) unwinds."""

import contextlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sftap  # noqa: E402
from sfharness import Relay, Scene, Server, Skip, netns, wait_for  # noqa: E402


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
    if os.geteuid() != 0:
        raise Skip("needs root to create a network namespace")
    ns, host_if = "sf-harness-%d" % os.getpid(), "sfxh%d" % (os.getpid() % 10000)
    # the peer's name is too long for a link: `ip link add` fails after `ip netns add` worked
    fails_with(lambda: netns(ns, host_if, "sf-harness-peer-name-too-long", "198.18.9.1", "198.18.9.2").__enter__(),
               "cannot create a network namespace here", "ip link add")
    assert ns not in namespaces(), namespaces()
    assert host_if not in links(), links()
    assert not os.path.exists("/etc/netns/" + ns)


def test_a_namespace_is_removed_at_the_end():
    if os.geteuid() != 0:
        raise Skip("needs root to create a network namespace")
    ns, host_if, cont_if = "sf-harness-%d" % os.getpid(), "sfxh%d" % (os.getpid() % 10000), "sfxc%d" % (os.getpid() % 10000)
    with netns(ns, host_if, cont_if, "198.18.9.1", "198.18.9.2"):
        assert ns in namespaces() and host_if in links()
        with open("/etc/netns/%s/hosts" % ns) as f:
            assert "198.18.9.1 host.docker.internal" in f.read()
    assert ns not in namespaces(), namespaces()
    assert host_if not in links(), links()
    assert not os.path.exists("/etc/netns/" + ns)


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


def run_runner(env=None):
    p = subprocess.run([sys.executable, "-c", RUNNER, HERE], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, **(env or {})))
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


def test_checks_print_their_plan_at_the_end():
    import io
    buf = io.StringIO()
    tap = sftap.Tap(out=buf)
    tap.ok(True, "first")
    tap.ok(False, "second", "why it failed\nover two lines")
    tap.skip("third", "no reason to run")
    tap.forward("ok - a\nnot ok - b\nnoise\n", "helper", "the helper's output")
    tap.forward("nothing in TAP\n", "silent helper")
    assert tap.finish() == 1
    assert buf.getvalue().splitlines() == [
        "ok 1 - first", "not ok 2 - second", "# why it failed", "# over two lines",
        "ok 3 - third # SKIP no reason to run", "ok 4 - helper: a", "not ok 5 - helper: b",
        "# the helper's output", "not ok 6 - silent helper: the helper reported nothing", "1..6"], buf.getvalue()


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
    p = subprocess.Popen([sys.executable, "-c", HANGS, HERE], stdout=subprocess.PIPE, text=True)
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
