#!/usr/bin/env python3
"""The macOS LaunchAgent (packaging/launchd), checked without a Mac (TAP output).

Usage: test_launchd.py --template packaging/launchd/sockferry.relay.plist.in
                       --install packaging/launchd/install.sh

The plist is read with plistlib, as install.sh fills it (its --print mode, which runs on any
POSIX shell): well-formed, the keys launchd needs for a per-user agent that starts at login
and is restarted, every path absolute (launchd expands neither ~ nor variables), logs under
~/Library/Logs/sockferry/. A HOME holding XML and sed metacharacters must come through intact.
"""
import argparse
import os
import plistlib
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402

TAP = sftap.Tap()
check = TAP.ok

SOCKFERRY = "/opt/homebrew/bin/sockferry"


def fill(install, home, sockferry=SOCKFERRY):
    env = dict(os.environ, HOME=home)
    return subprocess.run(["sh", install, "--print", "--sockferry", sockferry],
                          env=env, capture_output=True, timeout=30)


def check_agent(install, home):
    p = fill(install, home)
    if not check(p.returncode == 0, f"install.sh --print with HOME={home!r}", p.stderr.decode()):
        return
    try:
        d = plistlib.loads(p.stdout)
    except Exception as e:  # plistlib raises several types for malformed XML
        check(False, f"HOME={home!r}: plistlib reads the filled plist", f"{e}\n{p.stdout.decode()}")
        return
    check(isinstance(d, dict), f"HOME={home!r}: plistlib reads the filled plist as a dictionary")
    check(d.get("Label") == "sockferry.relay", "Label is sockferry.relay", repr(d.get("Label")))
    args = d.get("ProgramArguments")
    conf = f"{home}/.config/sockferry/sockferry.conf"
    check(args == [SOCKFERRY, "relay", "-c", conf],
          "ProgramArguments: the absolute binary, relay -c ~/.config/sockferry/sockferry.conf expanded",
          repr(args))
    check(d.get("RunAtLoad") is True, "RunAtLoad is true (started at login)", repr(d.get("RunAtLoad")))
    check(d.get("KeepAlive") is True, "KeepAlive is true (restarted when it exits)", repr(d.get("KeepAlive")))
    log = f"{home}/Library/Logs/sockferry/sockferry.log"
    for key in ("StandardOutPath", "StandardErrorPath"):
        check(d.get(key) == log, f"{key} is ~/Library/Logs/sockferry/sockferry.log expanded", repr(d.get(key)))
    strings = [v for v in d.values() if isinstance(v, str)] + list(args or [])
    paths = [s for s in strings if "/" in s]
    check(all(s.startswith("/") for s in paths), "every path is absolute", repr(paths))
    check(not any("@" in s or "~" in s or "$" in s for s in strings), "no placeholder, ~ or $ is left",
          repr(strings))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", required=True)
    ap.add_argument("--install", required=True)
    a = ap.parse_args()

    with open(a.template, "rb") as f:
        raw = f.read()
    try:
        plistlib.loads(raw)
        check(True, "the template itself is a well-formed plist")
    except Exception as e:
        check(False, "the template itself is a well-formed plist", str(e))
    check(set(re.findall(rb"@[A-Z_]+@", raw)) == {b"@SOCKFERRY@", b"@HOME@"},
          "the template's placeholders are @SOCKFERRY@ and @HOME@, which install.sh fills",
          repr(set(re.findall(rb"@[A-Z_]+@", raw))))

    check_agent(a.install, "/Users/ada")
    check_agent(a.install, "/Users/a & <b> | c\\d")

    p = fill(a.install, "/Users/ada", "bin/sockferry")
    check(p.returncode == 64 and b"absolute" in p.stderr,
          "a relative --sockferry is refused (exit 64, names the cause)",
          f"status {p.returncode}: {p.stderr.decode()}")

    return TAP.finish()


if __name__ == "__main__":
    sys.exit(main())
