#!/usr/bin/python3
"""The documented limit: a statically linked client has no dynamic loader, so LD_PRELOAD
cannot reach it and the bind-mounted directory still fails for it. The env route (pointing
the client at the relay's socket) is what serves it. Each test gets a Lab
(tests/lib/sfharness.py)."""
import os
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Lab, Scene, build_paths, preload_setup  # noqa: E402

ARGS = build_paths("lib", "static-client")


def test_the_client_is_statically_linked(lab):
    ldd = subprocess.run(["ldd", ARGS.static_client], capture_output=True, text=True)
    assert ldd.returncode != 0 and "not a dynamic executable" in ldd.stdout + ldd.stderr, ldd.stdout + ldd.stderr


def test_the_preload_does_not_reach_a_statically_linked_client_documented_limit(lab):
    ep = lab.server("tagged", "relay.sock", "relay")
    r = lab.run([ARGS.static_client, lab.mapped, "who"], env=lab.env(f"{lab.mapped}={ep}", SOCKFERRY_PRELOAD_DEBUG=1))
    assert r.returncode == 2 and r.stdout == "errno=111\n" and "sockferry-preload" not in r.stderr, r


def test_the_env_route_serves_it_pointed_at_the_relay_socket_it_connects(lab):
    lab.server("tagged", "relay.sock", "relay")
    r = lab.run([ARGS.static_client, lab.path("relay.sock"), "who"])
    assert r.returncode == 0 and r.stdout == "relay:who\n", r


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene.of(lambda sc: Lab(sc, ARGS.lib)),
               setup=lambda: preload_setup(None if ARGS.static_client else
                                           "no static client: the C library has no libc.a (libc6-dev), or this "
                                           "is a sanitizer build"))
