#!/usr/bin/env python3
"""The Homebrew formula, checked without a Mac (TAP output).

Usage: test_homebrew.py --formula packaging/homebrew/sockferry.rb     (the template)
       test_homebrew.py --formula OUTDIR/homebrew-sockferry/Formula/sockferry.rb  (the tap's)

ruby -c parses it (Debian's ruby; Homebrew itself is not here, so `brew audit` and
`brew test` are not run; tests/ci/release.sh runs the tap's formula under
tests/packaging/brew_harness.rb). The rest is read from the text: the build and run-time
dependencies, the meson build, the static Linux binaries, the per-user service and its test
block; the template holds the two lines packaging/release.sh fills and no url, sha256,
homepage or head of its own; the tap's formula has them, and the two resources.
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
    want = {"meson": "build", "ninja": "build", "pkgconf": "build", "scdoc": "build",
            "inih": "", "libnghttp2": "", "libsodium": "", "libuv": ""}
    check(deps == want, "depends_on: meson, ninja, pkgconf, scdoc to build; inih, libnghttp2, libsodium, libuv",
          repr(deps))
    install = block(text, "def install")
    check(install and '"meson", "setup", "build", "-Dtests=disabled", *std_meson_args' in install
          and '"meson", "install", "-C", "build"' in install,
          "install: meson setup with std_meson_args, compile, install", repr(install))
    check(install and 'resource("linux-#{arch}").stage' in install
          and '(libexec/"sockferry/linux-#{arch}").install' in install and "%w[x86_64 aarch64]" in install,
          "install: the static Linux binaries into libexec/sockferry/linux-{x86_64,aarch64}/ (SF_INJECT_DIR)",
          repr(install))
    service = block(text, "service do")
    check(service and 'run [opt_bin/"sockferry", "relay", "-c", "~/.config/sockferry/sockferry.conf"]' in service,
          "service: sockferry relay -c ~/.config/sockferry/sockferry.conf (Homebrew expands ~)", repr(service))
    check(service and "keep_alive true" in service and "log_path" in service and "error_log_path" in service,
          "service: keep_alive, log_path and error_log_path", repr(service))
    test = block(text, "test do")
    check(test and "--version" in test and '"keygen", "-o"' in test and ", 78)" in test,
          "test: --version, keygen -o into testpath, a config error exits 78", repr(test))
    check(test and test.count('spawn sockferry, "relay"') == 2 and "auth=token" in test
          and 'assert_equal "pong", client.read' in test,
          "test: a host relay and a container-side relay, one request and its answer through both",
          repr(test))
    markers = re.findall(r"^  # release\.sh: (.*)$", text, re.M)
    fields = {k: re.findall(rf'^  {k} "([^"]*)"', text, re.M) for k in ("url", "sha256", "homepage", "head")}
    resources = re.findall(r'^  resource "(linux-[a-z0-9_]+)" do\n    url "([^"]+)"\n    sha256 "([0-9a-f]{64})"\n  end$',
                           text, re.M)
    if markers:
        check(markers == ["homepage, url, sha256, head", "resources"] and not any(fields.values())
              and not resources and "example" not in text,
              "the template: the two lines release.sh fills, no url, sha256, homepage, head or resource of its own",
              repr((markers, fields, resources)))
    else:
        check(len(fields["url"]) == 1 and fields["url"][0].endswith(".tar.xz")
              and re.fullmatch(r"[0-9a-f]{64}", (fields["sha256"] or [""])[0]) and len(fields["head"]) == 1,
              "the tap's formula: one url (the .tar.xz), its sha256, a head", repr(fields))
        check([r[0] for r in resources] == ["linux-x86_64", "linux-aarch64"]
              and all(r[1].endswith("-" + r[0]) for r in resources),
              "the tap's formula: the static binaries for x86_64 and aarch64 as resources, with their sha256",
              repr(resources))

    return TAP.finish()


if __name__ == "__main__":
    sys.exit(main())
