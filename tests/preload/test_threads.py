#!/usr/bin/python3
"""64 threads of one C client connect at the same moment, again and again, through a
bind-mounted directory redirected to unix and to TCP: every connection must reach the server
and get its own answer back. Each test gets a Lab (tests/lib/sfharness.py)."""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Lab, Scene, build_paths, preload_setup  # noqa: E402

ARGS = build_paths("lib", "threads")
THREADS, ROUNDS = 64, 25


def concurrent_connects(lab, where, kind):
    ep = lab.server("tagged", where, kind)
    r = lab.run([ARGS.threads, lab.mapped, str(THREADS), str(ROUNDS)], env=lab.env(f"{lab.mapped}={ep}"),
                timeout=120)
    assert r.returncode == 0 and r.stdout == f"{THREADS} threads x {ROUNDS} rounds, 0 failures\n", r


def test_64_threads_x_25_concurrent_connects_redirected_to_unix(lab):
    concurrent_connects(lab, "line.sock", "unix")


def test_64_threads_x_25_concurrent_connects_redirected_to_tcp(lab):
    concurrent_connects(lab, "tcp:127.0.0.1:0", "tcp")


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene.of(lambda sc: Lab(sc, ARGS.lib)), setup=preload_setup)
