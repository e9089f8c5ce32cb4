#!/usr/bin/env python3
"""The command line people and scripts meet first: help in every spelling, `sockferry version`
(what a bug report needs), `relay -t` naming the control socket, and the process metrics under
Prometheus' standard names (issue 23, item 5). Each test gets a Scene
(tests/lib/sfharness.py) for what it starts.

argv: --seccomp 1|0 (whether the build has the seccomp sandbox)."""

import ctypes
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import ENGINE, Scene, connect, run_sockferry  # noqa: E402

SECCOMP = len(sys.argv) > 2 and sys.argv[1] == "--seccomp" and sys.argv[2] == "1"
COMMANDS = ("relay", "run", "check", "probe", "stats", "keygen", "version")


def test_help_cmd_in_every_spelling(sc):
    """`--help CMD` and `-h CMD` said "expected at most one COMMAND"; they are `help CMD`."""
    for cmd in COMMANDS:
        want = run_sockferry([cmd, "--help"])
        assert want[0] == 0 and want[1].startswith("Usage: sockferry %s" % cmd), (cmd, want)
        for spelling in ("help", "--help", "-h"):
            got = run_sockferry([spelling, cmd])
            assert got == want, "sockferry %s %s: %s, expected %s" % (spelling, cmd, got, want)
    main = run_sockferry(["--help"])
    assert main[0] == 0 and main[1].startswith("Usage: sockferry COMMAND"), main
    for args in (["help"], ["-h"], ["help", "--help"], ["--help", "-h"]):
        assert run_sockferry(args) == main, args
    rc, _, err = run_sockferry(["--help", "relay", "run"])
    assert rc == 64 and "expected at most one COMMAND" in err, (rc, err)
    rc, _, err = run_sockferry(["-h", "nosuch"])
    assert rc == 64 and "unknown command 'nosuch'" in err, (rc, err)
    assert "version" in main[1], "the command list lacks version"


def landlock_abi():
    """The kernel's Landlock ABI (landlock_create_ruleset's version query), or None."""
    if os.uname().machine not in ("x86_64", "aarch64"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return abi if abi > 0 else None


def test_version_says_what_a_bug_report_needs(sc):
    rc, out, err = run_sockferry(["version"])
    assert rc == 0 and err == "", (rc, err)
    lines = out.splitlines()
    keys = [line.split(":", 1)[0] for line in lines]
    assert keys == ["version", "engine", "libuv", "sandbox", "platform", "build"], out
    v = dict(line.split(": ", 1) for line in lines)
    assert run_sockferry(["--version"])[1] == "sockferry %s\n" % v["version"], out
    assert v["engine"] == ENGINE, out
    assert re.fullmatch(r"\d+\.\d+\.\d+(-\w+)? \(built with \d+\.\d+\.\d+(-\w+)?\)", v["libuv"]), out
    u = os.uname()
    assert v["platform"] == "%s %s %s" % (u.sysname, u.release, u.machine), out
    portable = "yes" if ENGINE == "portable" else "no"
    preload = "yes" if os.path.exists(os.path.join(os.environ.get("SF_BUILD_ROOT", ""),
                                                   "preload/sockferry-preload.so")) else "no"
    hooks = " test-hooks=yes (not for production)" if "test-hooks=yes" in v["build"] else ""
    assert v["build"] == "static=no portable=%s preload=%s%s" % (portable, preload, hooks), out
    if ENGINE == "portable":
        assert v["sandbox"] == "none (the portable engine has none)", out
    elif not SECCOMP:
        assert v["sandbox"] == "none (built without libseccomp)", out
    else:
        abi = landlock_abi()
        if abi:
            assert v["sandbox"] == "seccomp built in, applies here; Landlock ABI %d" % abi, out
        else:
            assert re.fullmatch(r"seccomp built in, applies here; no Landlock \(.+\)", v["sandbox"]), out
    rc, _, err = run_sockferry(["version", "extra"])
    assert rc == 64 and "unexpected argument 'extra'" in err, (rc, err)


def test_relay_t_lists_the_control_socket(sc):
    d = sc.tmpdir()
    for control in ("unix:%s/ctl.sock" % d, "unix:@sf-cli-%d" % os.getpid()):
        conf = os.path.join(d, "conf")
        with open(conf, "w") as f:
            f.write("[sockferry]\ncontrol = %s\n[x]\nlisten = unix:%s/in.sock\nconnect = unix:%s/up.sock\n"
                    % (control, d, d))
        rc, out, err = run_sockferry(["relay", "-t", "-c", conf])
        assert rc == 0, (rc, out, err)
        assert out == ("x: listen unix:%s/in.sock -> connect unix:%s/up.sock, auth = none\n"
                       "control: listen %s (sockferry stats)\n"
                       "configuration OK: 1 forward, nothing bound\n" % (d, d, control)), out
        assert not os.path.exists(os.path.join(d, "ctl.sock")), "-t bound the control socket"
    # A control path in a directory others can write is refused as a listen path is.
    shared = os.path.join(d, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    with open(conf, "w") as f:
        f.write("[sockferry]\ncontrol = unix:%s/ctl.sock\n[x]\nlisten = unix:%s/in.sock\nconnect = unix:%s/up.sock\n"
                % (shared, d, d))
    rc, out, err = run_sockferry(["relay", "-t", "-c", conf])
    assert rc == 78 and "the directory %s is owned by" % shared in err and "configuration OK" not in out, \
        (rc, out, err)


def start_time(pid):
    """process_start_time_seconds as Prometheus' clients compute it: btime + starttime / ticks."""
    with open("/proc/stat") as f:
        btime = int([line for line in f if line.startswith("btime ")][0].split()[1])
    with open("/proc/%d/stat" % pid) as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def test_process_metrics_have_prometheus_standard_names(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/svc.sock")
    conf = os.path.join(d, "conf")
    with open(conf, "w") as f:
        f.write("[sockferry]\ncontrol = unix:%s/control.sock\n[echo]\nlisten = unix:%s/in.sock\n"
                "connect = unix:%s/svc.sock\n" % (d, d, d))
    r = sc.relay(["relay", "-c", conf])
    s = connect(d + "/in.sock")
    s.sendall(b"x")
    assert s.recv(1) == b"x"
    s.close()

    def scrape():
        rc, out, err = run_sockferry(["stats", "-c", conf, "--format", "prometheus"])
        assert rc == 0, err
        return out
    first = scrape()
    samples = dict(line.rsplit(" ", 1) for line in first.splitlines() if not line.startswith("#"))
    for old in ("sockferry_open_fds", "sockferry_resident_memory_bytes", "sockferry_uptime_seconds"):
        assert old not in first, "%s is still exported" % old
    for name, kind in (("process_open_fds", "gauge"), ("process_resident_memory_bytes", "gauge"),
                       ("process_start_time_seconds", "gauge")):
        assert "# TYPE %s %s\n" % (name, kind) in first and name in samples, (name, first)
    assert int(samples["process_open_fds"]) > 0 and int(samples["process_resident_memory_bytes"]) > 0, samples
    # A Unix timestamp of the start, not an uptime, and the same at every scrape.
    assert abs(float(samples["process_start_time_seconds"]) - start_time(r.pid)) < 0.02, \
        (samples["process_start_time_seconds"], start_time(r.pid))
    again = dict(line.rsplit(" ", 1) for line in scrape().splitlines() if not line.startswith("#"))
    assert again["process_start_time_seconds"] == samples["process_start_time_seconds"], (again, samples)
    # The forward metrics keep their names.
    assert samples['sockferry_connections_total{forward="echo"}'] == "1", first
    rc, out, _ = run_sockferry(["stats", "-c", conf, "--format", "json"])
    process = json.loads(out)["process"]
    assert abs(process["start_time_seconds"] - float(samples["process_start_time_seconds"])) < 0.01, process


if __name__ == "__main__":
    sftap.main([
        test_help_cmd_in_every_spelling,
        test_version_says_what_a_bug_report_needs,
        test_relay_t_lists_the_control_socket,
        test_process_metrics_have_prometheus_standard_names,
    ], fixture=Scene)
