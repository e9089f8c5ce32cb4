#!/usr/bin/env python3
"""packaging/sockferry.conf.example is a valid configuration (TAP output).

Usage: test_example_conf.py --config FILE --sockferry BINARY

The example's paths and port are moved into a temporary tree (token made by keygen, a free
loopback port), then `sockferry relay -t -c` (the check the example names) must pass and
bind nothing, and `sockferry relay -c` must load it, bind every forward and report ready;
SIGTERM must stop it with status 0.
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Scene, free_port  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--config", required=True)
ap.add_argument("--sockferry", required=True)
ARGS = ap.parse_args()
EXAMPLE = pathlib.Path(ARGS.config).read_text()


def example_in(sc):
    """The example with its paths and port moved into a temporary tree of sc; (tree, file)."""
    tmp = pathlib.Path(sc.tmpdir(prefix="sf-example-"))
    token = tmp / "token"
    subprocess.run([ARGS.sockferry, "keygen", "-o", str(token)], check=True, stderr=subprocess.DEVNULL)
    text = re.sub(r"^token-file\s*=\s*\S+", f"token-file = {token}", EXAMPLE, flags=re.M)
    text = text.replace("unix:/run/", f"unix:{tmp}/run/").replace("unix:/var/run/", f"unix:{tmp}/var/run/")
    text = text.replace("tcp:127.0.0.1:7777", f"tcp:127.0.0.1:{free_port()}")
    conf = tmp / "sockferry.conf"
    conf.write_text(text)
    return tmp, conf


def test_the_examples_check_line_sockferry_relay_t_c_file_passes_and_binds_nothing(sc):
    tmp, conf = example_in(sc)
    check_line = re.search(r"^;\s+(sockferry relay -t -c FILE)\s", EXAMPLE, flags=re.M)
    t = subprocess.run([ARGS.sockferry, "relay", "-t", "-c", str(conf)], capture_output=True, text=True, timeout=20)
    assert check_line is not None and t.returncode == 0 and "configuration OK: 2 forwards, nothing bound" in t.stdout \
        and not (tmp / "run").exists(), f"line {check_line}, status {t.returncode}\n{t.stdout}{t.stderr}"


def test_sockferry_relay_loads_the_example_binds_every_forward_and_sigterm_stops_it_with_status_0(sc):
    _, conf = example_in(sc)
    r = sc.relay(["relay", "-c", str(conf)], program=ARGS.sockferry)
    assert "ready:" in r.text(), r.text()
    # SIGTERM, and its exit status must be 0
    r.stop()


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
