#!/usr/bin/env python3
"""The macOS LaunchAgents (packaging/launchd), checked without a Mac (TAP output).

Usage: test_launchd.py --template packaging/launchd/sockferry.relay.plist.in
                       --install packaging/launchd/install.sh

The plist is read with plistlib, as install.sh fills it (its --print mode, which runs on any
POSIX shell): well-formed, the keys launchd needs for a per-user agent that starts at login
and is restarted, every path absolute (launchd expands neither ~ nor variables), logs under
~/Library/Logs/sockferry/. A HOME holding XML and sed metacharacters must come through intact.

The log rotation agent (sockferry.logrotate.plist.in, --print-logrotate): its keys, the same
log as the relay's, and its script run here with sh against a log that a writer holds open
with O_APPEND, as launchd opens StandardErrorPath: above 1 MiB the log is copied to .1 and
emptied, the writer's next line lands at its start (no hole), three old copies are kept.
"""
import argparse
import os
import plistlib
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--template", required=True)
ap.add_argument("--install", required=True)
ARGS = ap.parse_args()
SOCKFERRY = "/opt/homebrew/bin/sockferry"


def fill(home, sockferry=SOCKFERRY):
    env = dict(os.environ, HOME=home)
    return subprocess.run(["sh", ARGS.install, "--print", "--sockferry", sockferry],
                          env=env, capture_output=True, timeout=30)


def agent_as_filled_for(home):
    """The relay agent's plist as install.sh fills it with HOME=home, and its checks."""
    p = fill(home)
    assert p.returncode == 0, f"install.sh --print with HOME={home!r}: {p.stderr.decode()}"
    try:
        d = plistlib.loads(p.stdout)
    except Exception as e:  # plistlib raises several types for malformed XML
        raise AssertionError(f"HOME={home!r}: plistlib cannot read the filled plist: {e}\n{p.stdout.decode()}")
    assert isinstance(d, dict), f"HOME={home!r}: plistlib reads the filled plist as no dictionary"
    assert d.get("Label") == "sockferry.relay", "Label is not sockferry.relay: %r" % d.get("Label")
    args = d.get("ProgramArguments")
    conf = f"{home}/.config/sockferry/sockferry.conf"
    assert args == [SOCKFERRY, "relay", "-c", conf], \
        "ProgramArguments: not the absolute binary, relay -c ~/.config/sockferry/sockferry.conf expanded: %r" % args
    assert d.get("RunAtLoad") is True, "RunAtLoad is not true (started at login): %r" % d.get("RunAtLoad")
    assert d.get("KeepAlive") is True, "KeepAlive is not true (restarted when it exits): %r" % d.get("KeepAlive")
    log = f"{home}/Library/Logs/sockferry/sockferry.log"
    for key in ("StandardOutPath", "StandardErrorPath"):
        assert d.get(key) == log, f"{key} is not ~/Library/Logs/sockferry/sockferry.log expanded: {d.get(key)!r}"
    strings = [v for v in d.values() if isinstance(v, str)] + list(args or [])
    paths = [s for s in strings if "/" in s]
    assert all(s.startswith("/") for s in paths), "a path is not absolute: %r" % paths
    assert not any("@" in s or "~" in s or "$" in s for s in strings), "a placeholder, ~ or $ is left: %r" % strings


def test_the_template_itself_is_a_well_formed_plist():
    with open(ARGS.template, "rb") as f:
        plistlib.loads(f.read())


def test_the_templates_placeholders_are_sockferry_and_home_which_install_sh_fills():
    with open(ARGS.template, "rb") as f:
        found = set(re.findall(rb"@[A-Z_]+@", f.read()))
    assert found == {b"@SOCKFERRY@", b"@HOME@"}, repr(found)


def test_the_relay_agent_as_install_sh_fills_it():
    agent_as_filled_for("/Users/ada")


def test_a_home_holding_xml_and_sed_metacharacters_comes_through_intact():
    agent_as_filled_for("/Users/a & <b> | c\\d")


def rotation_agent():
    home = "/Users/ada"
    p = subprocess.run(["sh", ARGS.install, "--print-logrotate"], env=dict(os.environ, HOME=home),
                       capture_output=True, timeout=30)
    assert p.returncode == 0, "install.sh --print-logrotate: " + p.stderr.decode()
    return plistlib.loads(p.stdout), plistlib.loads(fill(home).stdout)


def test_the_rotation_agent_runs_sh_c_script_on_the_relay_agents_log_at_login_and_every_hour():
    d, relay = rotation_agent()
    args = d.get("ProgramArguments") or []
    assert d.get("Label") == "sockferry.logrotate", "the rotation agent's Label: %r" % d.get("Label")
    assert len(args) == 5 and args[:2] == ["/bin/sh", "-c"] and args[4] == relay["StandardErrorPath"], repr(args)
    assert d.get("RunAtLoad") is True and d.get("StartInterval") == 3600, repr(d)


def test_the_rotation_script_copies_and_empties_a_log_above_1_mib_and_keeps_three():
    args = rotation_agent()[0].get("ProgramArguments") or []
    assert len(args) == 5, repr(args)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "sockferry.log")
        rotate = lambda: subprocess.run(["sh", "-c", args[2], args[3], log], timeout=30, check=True)
        big = b"x" * 1023 + b"\n"
        with open(log, "ab", buffering=0) as w:     # O_APPEND, as launchd opens it
            w.write(big * 100)
            rotate()
            assert os.path.getsize(log) == 102400 and not os.path.exists(log + ".1"), \
                "a log below 1 MiB is not left alone"
            w.write(big * 1024)
            rotate()
            assert os.path.getsize(log + ".1") == 1150976 and os.path.getsize(log) == 0, \
                "above 1 MiB: not copied to .1 and emptied in place"
            w.write(b"after\n")
            with open(log, "rb") as r:
                got = r.read()
            assert got == b"after\n", ("the writer's next line is not at the start of the log (O_APPEND, no hole): "
                                       + repr(got[:40]) + f" ({len(got)} bytes)")
            for n in range(4):
                w.write(b"%d" % n + big * 1100)
                rotate()
            kept = sorted(f for f in os.listdir(tmp) if f != "sockferry.log")
            firsts = []
            for f in kept:
                with open(os.path.join(tmp, f), "rb") as r:
                    firsts.append(r.read(1))
            assert kept == ["sockferry.log.1", "sockferry.log.2", "sockferry.log.3"] and firsts == [b"3", b"2", b"1"], \
                "not three old copies, newest first: %r" % list(zip(kept, firsts))


def test_a_relative_sockferry_is_refused_exit_64_naming_the_cause():
    p = fill("/Users/ada", "bin/sockferry")
    assert p.returncode == 64 and b"absolute" in p.stderr, f"status {p.returncode}: {p.stderr.decode()}"


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()))
