#!/usr/bin/env python3
"""The Homebrew formula (packaging/homebrew/sockferry.rb), checked without a Mac (TAP output).

Usage: test_homebrew.py --formula packaging/homebrew/sockferry.rb

ruby -c parses it (Debian's ruby; Homebrew itself is not here, so `brew audit` and
`brew test` are not run). The rest is read from the text: the build and run-time
dependencies, the meson build, the per-user service and its test block.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402

TAP = sftap.Tap()
check = TAP.ok
skip = TAP.skip


def block(text, header):
    """The body of the block opened by `header` at two spaces of indentation, up to its `end`."""
    m = re.search(rf"^  {re.escape(header)}\n(.*?)^  end\n", text, re.M | re.S)
    return m.group(1) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--formula", required=True)
    a = ap.parse_args()
    with open(a.formula) as f:
        text = f.read()

    ruby = shutil.which("ruby")
    if ruby:
        p = subprocess.run([ruby, "-c", a.formula], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and "Syntax OK" in p.stdout, "ruby -c: Syntax OK", p.stdout + p.stderr)
    else:
        skip("ruby -c", "ruby is not installed (packaging/install-deps.sh installs it)")

    deps = dict(re.findall(r'^  depends_on "([^"]+)"(?: => :(\w+))?$', text, re.M))
    want = {"meson": "build", "ninja": "build", "pkg-config": "build", "scdoc": "build",
            "inih": "", "libnghttp2": "", "libsodium": "", "libuv": ""}
    check(deps == want, "depends_on: meson, ninja, pkg-config, scdoc to build; inih, libnghttp2, libsodium, libuv",
          repr(deps))
    install = block(text, "def install")
    check(install and '"meson", "setup", "build", *std_meson_args' in install
          and '"meson", "install", "-C", "build"' in install,
          "install: meson setup with std_meson_args, compile, install", repr(install))
    service = block(text, "service do")
    check(service and 'run [opt_bin/"sockferry", "relay", "-c", "~/.config/sockferry/sockferry.conf"]' in service,
          "service: sockferry relay -c ~/.config/sockferry/sockferry.conf (Homebrew expands ~)", repr(service))
    check(service and "keep_alive true" in service and "log_path" in service and "error_log_path" in service,
          "service: keep_alive, log_path and error_log_path", repr(service))
    test = block(text, "test do")
    check(test and "--version" in test and '"keygen", "-o"' in test and ", 78)" in test,
          "test: --version, keygen -o into testpath, a config error exits 78", repr(test))
    placeholder = re.search(r'^  sha256 "(0{64})"$', text, re.M)
    check(not placeholder or re.search(r"^# PLACEHOLDERS", text, re.M),
          "a placeholder url/sha256 is said to be one in the header", "")

    return TAP.finish()


if __name__ == "__main__":
    sys.exit(main())
