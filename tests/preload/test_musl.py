#!/usr/bin/python3
"""sockferry-preload-musl.so, for Alpine containers, with a musl-linked client: it exports
connect() alone, needs only musl's libc, and redirects, uses a live socket, and diagnoses an
unmapped directory like the glibc build. Each test gets a Lab (tests/lib/sfharness.py)."""
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import PRELOAD_DIAGNOSTIC, Lab, Scene, build_paths, preload_setup  # noqa: E402

ARGS = build_paths("musl-lib", "musl-client")


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True).stdout


def client(lab, path, mapping=None, **kw):
    return lab.run([ARGS.musl_client, path, "who"], env=lab.env(mapping, **kw) if mapping else None,
                   mount=path == lab.mapped)


def test_the_test_client_is_musl_linked(lab):
    interp = re.search(r"Requesting program interpreter: (\S+)\]", readelf("-l", ARGS.musl_client))
    assert interp and "ld-musl" in interp.group(1), interp.group(1) if interp else "no interpreter"


def test_the_library_needs_musls_libc_so_and_nothing_else(lab):
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]", readelf("-d", ARGS.musl_lib))
    assert needed == ["libc.so"], needed


def test_it_exports_connect_and_nothing_else(lab):
    exported = [line.split()[-1] for line in readelf("--dyn-syms", ARGS.musl_lib).splitlines()
                if re.search(r"\b(FUNC|OBJECT)\s+GLOBAL\s+DEFAULT\s+\d+\s", line)]
    assert exported == ["connect"], exported


def test_control_without_the_preload_the_client_fails(lab):
    r = client(lab, lab.mapped)
    assert r.returncode == 2 and r.stdout == "errno=111\n", r


def test_a_musl_client_is_redirected_to_unix(lab):
    r = client(lab, lab.mapped, f"{lab.mapped}={lab.server('tagged', 'line.sock', 'unix')}")
    assert r.returncode == 0 and r.stdout == "unix:who\n" and r.stderr == "", r


def test_a_musl_client_is_redirected_to_tcp(lab):
    r = client(lab, lab.mapped, f"{lab.mapped}={lab.server('tagged', 'tcp:127.0.0.1:0', 'tcp')}")
    assert r.returncode == 0 and r.stdout == "tcp:who\n" and r.stderr == "", r


def test_musls_dlsym_rtld_next_found_connect_no_system_call_fallback(lab):
    ep = lab.server("tagged", "tcp:127.0.0.1:0", "tcp")
    r = client(lab, lab.mapped, f"{lab.mapped}={ep}", SOCKFERRY_PRELOAD_DEBUG=1)
    assert re.search(r"^sockferry-preload: loaded into pid \d+ with 1 mapping$", r.stderr, re.M) \
        and "redirected to " + ep in r.stderr, r


def test_a_live_socket_at_the_mapped_path_is_used_directly(lab):
    live = lab.path("live.sock")
    lab.server("tagged", live, "live")
    r = client(lab, live, f"{live}={lab.server('tagged', 'tcp:127.0.0.1:0', 'tcp')}")
    assert r.returncode == 0 and r.stdout == "live:who\n", r


def test_an_unmapped_directory_gets_the_diagnostic_and_a_malformed_entry_is_reported(lab):
    r = client(lab, lab.mapped, f"/run/other.sock={lab.server('tagged', 'tcp:127.0.0.1:0', 'tcp')};nonsense")
    assert r.returncode == 2 and r.stdout == "errno=111\n" and PRELOAD_DIAGNOSTIC.format(lab.mapped) in r.stderr \
        and 'entry 2 "nonsense"' in r.stderr, r


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene.of(lambda sc: Lab(sc, ARGS.musl_lib)),
               setup=lambda: preload_setup(None if ARGS.musl_lib else
                                           "musl-gcc not found: install musl-tools to build and test "
                                           "sockferry-preload-musl.so"))
