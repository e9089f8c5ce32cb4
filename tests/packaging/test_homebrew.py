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
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import need  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--formula", required=True)
FORMULA = ap.parse_args().formula
with open(FORMULA) as f:
    TEXT = f.read()


def block(text, header):
    """The body of the block opened by `header` at two spaces of indentation, up to its `end`."""
    m = re.search(rf"^  {re.escape(header)}\n(.*?)^  end\n", text, re.M | re.S)
    return m.group(1) if m else None


def test_ruby_c_syntax_ok():
    need("ruby")
    p = subprocess.run(["ruby", "-c", FORMULA], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "Syntax OK" in p.stdout, p.stdout + p.stderr


def test_depends_on_meson_ninja_pkgconf_scdoc_to_build_inih_libnghttp2_libsodium_libuv():
    deps = dict(re.findall(r'^  depends_on "([^"]+)"(?: => :(\w+))?$', TEXT, re.M))
    want = {"meson": "build", "ninja": "build", "pkgconf": "build", "scdoc": "build",
            "inih": "", "libnghttp2": "", "libsodium": "", "libuv": ""}
    assert deps == want, repr(deps)


def test_install_meson_setup_with_std_meson_args_compile_install():
    install = block(TEXT, "def install")
    assert install and '"meson", "setup", "build", "-Dtests=disabled", *std_meson_args' in install \
        and '"meson", "install", "-C", "build"' in install, repr(install)


def test_install_the_static_linux_binaries_into_libexec_sockferry_linux_arch():
    # SF_INJECT_DIR: libexec/sockferry/linux-{x86_64,aarch64}/
    install = block(TEXT, "def install")
    assert install and 'resource("linux-#{arch}").stage' in install \
        and '(libexec/"sockferry/linux-#{arch}").install' in install and "%w[x86_64 aarch64]" in install, \
        repr(install)


def test_service_sockferry_relay_c_config_homebrew_expands_the_tilde():
    service = block(TEXT, "service do")
    assert service and 'run [opt_bin/"sockferry", "relay", "-c", "~/.config/sockferry/sockferry.conf"]' in service, \
        repr(service)


def test_service_keep_alive_log_path_and_error_log_path():
    service = block(TEXT, "service do")
    assert service and "keep_alive true" in service and "log_path" in service and "error_log_path" in service, \
        repr(service)


def test_test_version_keygen_into_testpath_a_config_error_exits_78():
    test = block(TEXT, "test do")
    assert test and "--version" in test and '"keygen", "-o"' in test and ", 78)" in test, repr(test)


def test_test_a_host_relay_and_a_container_side_relay_one_request_and_its_answer_through_both():
    test = block(TEXT, "test do")
    assert test and test.count('spawn sockferry, "relay"') == 2 and "auth=token" in test \
        and 'assert_equal "pong", client.read' in test, repr(test)


def test_url_sha256_homepage_head_and_the_resources():
    """The template: the two lines release.sh fills, no url, sha256, homepage, head or resource of
    its own. The tap's formula: one url (the .tar.xz), its sha256, a head, and the static
    binaries for x86_64 and aarch64 as resources with their sha256."""
    markers = re.findall(r"^  # release\.sh: (.*)$", TEXT, re.M)
    fields = {k: re.findall(rf'^  {k} "([^"]*)"', TEXT, re.M) for k in ("url", "sha256", "homepage", "head")}
    resources = re.findall(r'^  resource "(linux-[a-z0-9_]+)" do\n    url "([^"]+)"\n    sha256 "([0-9a-f]{64})"\n  end$',
                           TEXT, re.M)
    if markers:
        assert markers == ["homepage, url, sha256, head", "resources"] and not any(fields.values()) \
            and not resources and "example" not in TEXT, repr((markers, fields, resources))
        return
    assert len(fields["url"]) == 1 and fields["url"][0].endswith(".tar.xz") \
        and re.fullmatch(r"[0-9a-f]{64}", (fields["sha256"] or [""])[0]) and len(fields["head"]) == 1, repr(fields)
    assert [r[0] for r in resources] == ["linux-x86_64", "linux-aarch64"] \
        and all(r[1].endswith("-" + r[0]) for r in resources), repr(resources)


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()))
