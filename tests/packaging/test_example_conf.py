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
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import free_port  # noqa: E402

TAP = sftap.Tap()
check = TAP.ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--sockferry", required=True)
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sf-example-"))
    p = None
    try:
        text = pathlib.Path(a.config).read_text()
        token = tmp / "token"
        subprocess.run([a.sockferry, "keygen", "-o", str(token)], check=True, stderr=subprocess.DEVNULL)
        text = re.sub(r"^token-file\s*=\s*\S+", f"token-file = {token}", text, flags=re.M)
        text = text.replace("unix:/run/", f"unix:{tmp}/run/").replace("unix:/var/run/", f"unix:{tmp}/var/run/")
        text = text.replace("tcp:127.0.0.1:7777", f"tcp:127.0.0.1:{free_port()}")
        conf = tmp / "sockferry.conf"
        conf.write_text(text)
        # The example's own "Check it with" line: the test mode binds nothing and exits 0.
        check_line = re.search(r"^;\s+(sockferry relay -t -c FILE)\s", pathlib.Path(a.config).read_text(), flags=re.M)
        t = subprocess.run([a.sockferry, "relay", "-t", "-c", str(conf)], capture_output=True, text=True, timeout=20)
        check(check_line is not None and t.returncode == 0
              and "configuration OK: 2 forwards, nothing bound" in t.stdout
              and not (tmp / "run").exists(),
              "the example's check line (sockferry relay -t -c FILE) passes and binds nothing",
              f"line {check_line}, status {t.returncode}\n{t.stdout}{t.stderr}")
        p = subprocess.Popen([a.sockferry, "relay", "-c", str(conf)], stderr=subprocess.PIPE, text=True)
        err = ""
        deadline = time.time() + 10
        while time.time() < deadline and p.poll() is None:
            line = p.stderr.readline()
            err += line
            if "ready:" in line:
                break
        check("ready:" in err, "sockferry relay loads the example and binds every forward", err)
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        check(rc == 0, "SIGTERM stops it with status 0", f"status {rc}\n{p.stderr.read()}")
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return TAP.finish()


if __name__ == "__main__":
    sys.exit(main())
