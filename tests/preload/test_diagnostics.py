#!/usr/bin/python3
"""What the preload says: the one-time diagnostic for an unmapped directory (and nothing for
anything else), SOCKFERRY_PRELOAD_QUIET, SOCKFERRY_PRELOAD_DEBUG, malformed map entries
reported once and ignored, and the map ignored in secure-execution mode. Each test gets a Lab
(tests/lib/sfharness.py)."""
import os
import re
import shutil
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import PRELOAD_DIAGNOSTIC, Lab, Scene, Skip, build_paths, preload_setup  # noqa: E402

ARGS = build_paths("lib", "client")
NOBODY = 65534


def line_server(lab):
    """The unix line server (tagged unix), open to the unprivileged clients too; its endpoint."""
    ep = lab.server("tagged", "line.sock", "unix")
    os.chmod(lab.path("line.sock"), 0o777)
    return ep


def diagnostic(lab):
    return PRELOAD_DIAGNOSTIC.format(lab.mapped) + "\n"


def other(lab):
    """A map that names another path, not the directory the client connects to."""
    return f"/run/other.sock={line_server(lab)}"


def client_copy(lab, name, mode):
    """The C client, copied where uid 65534 can run it (root's, with mode)."""
    path = lab.path(name)
    shutil.copy(ARGS.client, path)
    os.chown(path, 0, 0)
    os.chmod(path, mode)
    return path


def test_an_unmapped_directory_still_gives_the_kernels_econnrefused_and_the_diagnostic_once(lab):
    r = lab.python("twice", lab.mapped, env=lab.env(other(lab)))
    assert r.stdout == "errno=111 errno=111\n", r
    assert r.stderr == diagnostic(lab), "the directory diagnostic is not written exactly once per process: %s" % r


def test_without_sockferry_preload_map_the_diagnostic_still_appears(lab):
    r = lab.python("twice", lab.mapped, env=lab.env())
    assert r.stdout == "errno=111 errno=111\n" and r.stderr == diagnostic(lab), r


def test_sockferry_preload_quiet_silences_it(lab):
    r = lab.python("twice", lab.mapped, env=lab.env(other(lab), SOCKFERRY_PRELOAD_QUIET=1))
    assert r.stdout == "errno=111 errno=111\n" and r.stderr == "", r


def test_a_missing_path_enoent_and_no_diagnostic(lab):
    r = lab.python("twice", lab.path("run", "missing.sock"), env=lab.env(other(lab)))
    assert r.stdout == "errno=2 errno=2\n" and r.stderr == "", r


def test_a_regular_file_econnrefused_and_no_diagnostic(lab):
    regular = lab.path("run", "file.sock")
    open(regular, "w").close()
    r = lab.python("twice", regular, env=lab.env(other(lab)))
    assert r.stdout == "errno=111 errno=111\n" and r.stderr == "", r


def test_an_unprivileged_client_gets_eacces_from_the_directory_and_the_diagnostic(lab):
    r = lab.run([client_copy(lab, "sfp-client", 0o755), lab.mapped, "hi"], env=lab.env(other(lab)), user=NOBODY)
    assert r.returncode == 2 and r.stdout == "errno=13\n" and diagnostic(lab) in r.stderr, r


def test_an_unprivileged_client_is_redirected_from_eacces_too(lab):
    r = lab.run([client_copy(lab, "sfp-client", 0o755), lab.mapped, "hi"],
                env=lab.env(f"{lab.mapped}={line_server(lab)}"), user=NOBODY)
    assert r.returncode == 0 and r.stdout == "unix:hi\n", r


def test_sockferry_preload_debug_says_it_is_loaded_then_logs_every_redirect(lab):
    ep = line_server(lab)
    r = lab.python("twice", lab.mapped, env=lab.env(f"{lab.mapped}={ep}", SOCKFERRY_PRELOAD_DEBUG=1))
    logged = re.findall(rf"^sockferry-preload: connect\(\d+, {re.escape(lab.mapped)}\): ECONNREFUSED, "
                        rf"redirected to {re.escape(ep)}: connected$", r.stderr, re.M)
    loaded = re.findall(r"^sockferry-preload: loaded into pid \d+ with 1 mapping$", r.stderr, re.M)
    assert r.stdout == "errno=0 errno=0\n" and len(logged) == 2 and len(loaded) == 1 \
        and len(r.stderr.splitlines()) == 3, r


def test_without_it_a_redirect_is_silent(lab):
    r = lab.python("twice", lab.mapped, env=lab.env(f"{lab.mapped}={line_server(lab)}"))
    assert r.stdout == "errno=0 errno=0\n" and r.stderr == "", r


def test_malformed_map_entries_are_reported_once_each_and_ignored(lab):
    x = lab.mapped
    bad = {
        "nonsense": "expected /expected/path.sock=ENDPOINT",
        "relative/x.sock=unix:/run/a.sock": "the path must be absolute",
        "/a.sock=bogus:1": "unknown endpoint type",
        "/b.sock=tcp:example.invalid:80": "does not resolve host names",
        "/c.sock=vsock:any:5": "vsock:any is a listen address",
        "/d.sock=systemd:foo": "cannot be connected to",
        f"{x}=unix:/elsewhere.sock": "mapped already",
        "/e.sock=unix:/e.sock": "mapped to itself",
        "/" + "p" * 110 + "=unix:/f.sock": "too long",
    }
    entries = list(bad)
    entries.insert(6, f"{x}={line_server(lab)}")
    r = lab.python("twice", x, env=lab.env(";".join(entries) + ";"))
    assert r.stdout == "errno=0 errno=0\n", "the valid entry among malformed ones does not work: %s" % r
    lines = r.stderr.splitlines()
    not_once = []
    for entry, why in bad.items():
        n = entries.index(entry) + 1
        hits = [line for line in lines if line.startswith(f'sockferry-preload: SOCKFERRY_PRELOAD_MAP entry {n} "')]
        if not (len(hits) == 1 and why in hits[0] and hits[0].endswith("; entry ignored")):
            not_once.append((n, why))
    assert not not_once, "malformed entries not reported once each, with the cause (number, cause): %s\n%s" % (
        not_once, r)
    assert len(lines) == len(bad), "and nothing else is said: %s" % r


def secure_execution(lab):
    """A set-group-ID client run by nobody has AT_SECURE set. glibc then ignores LD_PRELOAD
    paths, so the library comes from /etc/ld.so.preload, on an overlay over /etc inside the
    namespace; the same client without the set-group-ID bit is the control. Returns a
    function that runs one of the two (plain or sgid) as nobody."""
    if lab.asan:
        raise Skip("sanitizer build: the instrumented client and library would need the runtime preloaded too")
    clients = {"plain": client_copy(lab, "plain-client", 0o755), "sgid": client_copy(lab, "sgid-client", 0o2755)}
    os.makedirs(lab.path("etc-upper"))
    os.makedirs(lab.path("etc-work"))
    setup = (f'mount -t overlay overlay -o lowerdir=/etc,upperdir={lab.path("etc-upper")},'
             f'workdir={lab.path("etc-work")} /etc && echo {lab.lib} > /etc/ld.so.preload')
    env = {"SOCKFERRY_PRELOAD_MAP": f"{lab.mapped}={line_server(lab)}"}

    def run(which):
        r = lab.run([clients[which], lab.mapped, "who"], env=env, setup=setup, user=NOBODY)
        if r.returncode == 125:
            raise Skip(f"cannot mount an overlay on /etc here: {r.stderr.strip()}")
        return r
    return run


def test_secure_execution_mode_control_loaded_from_etc_ld_so_preload_an_ordinary_client_is_redirected(lab):
    r = secure_execution(lab)("plain")
    assert r.returncode == 0 and r.stdout == "unix:who\n", r


def test_secure_execution_mode_set_group_id_the_map_is_ignored(lab):
    r = secure_execution(lab)("sgid")
    assert r.returncode == 2 and r.stdout == "errno=13\n" and PRELOAD_DIAGNOSTIC.format(lab.mapped) in r.stderr, r


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene.of(lambda sc: Lab(sc, ARGS.lib)), setup=preload_setup)
