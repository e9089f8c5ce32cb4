#!/usr/bin/env python3
"""End-to-end tests of usage and configuration errors every command shares: -t (test the
configuration, bind nothing), the conventions of --version, --help and usage errors, the
journal's priority prefixes, and what is refused before anything runs (config files that are
not regular or too large, named pipes off Windows). Each test gets a Scene
(tests/lib/sfharness.py). test_cli.py has help CMD, version, relay -t's control socket and the
process metrics."""

import json
import os
import re
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import SOCKFERRY, Scene, free_port, keygen, run_measured, run_sockferry, write_conf  # noqa: E402


def test_relay_test_mode_binds_nothing(sc):
    d = sc.tmpdir()
    token = keygen(d)
    port = free_port()
    spec = "c:unix:%s/c.sock=tcp:localhost:%d|unix:%s/svc.sock,auth=token,token-file=%s" % (d, port, d, token)
    for flag in ("-t", "--test"):
        rc, out, err = run_sockferry(["relay", flag, "-F", spec, "-F", "h:tcp:127.0.0.1:%d=unix:%s/svc.sock" % (port, d)])
        assert rc == 0, (rc, out, err)
        assert out == ("c: listen unix:%s/c.sock -> connect tcp:localhost:%d (127.0.0.1) | unix:%s/svc.sock, "
                       "auth = token (token-file %s)\n"
                       "h: listen tcp:127.0.0.1:%d -> connect unix:%s/svc.sock, auth = none\n"
                       "configuration OK: 2 forwards, nothing bound\n" % (d, port, d, token, port, d)), out
        assert not os.path.exists(d + "/c.sock")
        s = socket.socket()
        assert s.connect_ex(("127.0.0.1", port)) != 0, "-t bound the TCP port"
        s.close()
    # a token file that cannot be used and a name that does not resolve here
    rc, out, err = run_sockferry(["relay", "-t", "-F", "c:unix:%s/c.sock=tcp:nosuch.invalid:1,auth=token,token-file=%s/none"
                                  % (d, d)])
    assert rc == 78 and "cannot open token file %s/none" % d in err, (rc, out, err)
    assert "connect tcp:nosuch.invalid:1: nosuch.invalid does not resolve here" in err, err
    assert "configuration OK" not in out, out


def test_cli_conventions_across_commands(sc):
    version = run_sockferry(["--version"])[1]
    assert re.fullmatch(r"sockferry \S+\n", version), version
    for args in (["relay", "--version"], ["run", "-V"], ["check", "-c", "/nonexistent", "-V"], ["stats", "--version"],
                 ["probe", "--version"], ["keygen", "-V"]):
        rc, out, err = run_sockferry(args)
        assert rc == 0 and out == version, (args, rc, out, err)
    for cmd in ("relay", "run", "check", "stats", "probe"):
        rc, out, _ = run_sockferry(["help", cmd])
        assert rc == 0 and out == run_sockferry([cmd, "--help"])[1], cmd
        assert "Exit status" in out, "%s --help lists no exit status" % cmd
        rc, out, err = run_sockferry([cmd, "--bogus"] + (["--", "true"] if cmd == "run" else []))
        assert rc == 64 and err.startswith("sockferry %s: unknown option '--bogus'" % cmd), (cmd, rc, err)
    for cmd in ("relay", "run", "check"):
        rc, _, err = run_sockferry([cmd, "-vZ"])
        assert rc == 64 and err.startswith("sockferry %s: unknown option '-Z'\n" % cmd), (cmd, rc, err)
        rc, _, err = run_sockferry([cmd, "-c"])
        assert rc == 64 and err.startswith("sockferry %s: option '-c' needs a value\n" % cmd), (cmd, rc, err)
        rc, _, err = run_sockferry([cmd, "--log-format", "xml"])
        assert rc == 64 and "--log-format xml: expected text or json" in err, (cmd, rc, err)
        rc, _, err = run_sockferry([cmd, "--log-format", "json", "-F", "x"] + (["--", "true"] if cmd == "run" else []))
        assert rc == 78 and json.loads(err.splitlines()[0])["level"] == "error", (cmd, rc, err)


def test_journal_priority_prefixes(sc):
    d = sc.tmpdir()
    with open(d + "/err", "wb") as f:
        st = os.fstat(f.fileno())
        journal = {"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}
        p = subprocess.run([SOCKFERRY, "relay", "-v", "-t", "-F",
                            "c:unix:%s/c.sock=tcp:nosuch.invalid:1" % d, "-F", "x"], stderr=f,
                           stdout=subprocess.DEVNULL, env=dict(os.environ, **journal), timeout=20)
    with open(d + "/err") as f:
        err = f.read()
    assert p.returncode == 78, err
    assert err.startswith("<3>sockferry error: -F 'x': missing ':'"), err
    # stderr elsewhere than the stream JOURNAL_STREAM names: an inherited variable, ignored
    rc, _, err = run_sockferry(["relay", "-F", "x"], env=journal)
    assert rc == 78 and re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z sockferry error: ", err), err
    with open(d + "/err", "wb") as f:
        st = os.fstat(f.fileno())
        journal = {"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)}
        subprocess.run([SOCKFERRY, "relay", "-v", "-t", "-F",
                        "c:unix:%s/c.sock=tcp:nosuch.invalid:1" % d], stderr=f, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, **journal), timeout=20)
    with open(d + "/err") as f:
        err = f.read()
    assert err.startswith("<4>sockferry warn [c]: connect tcp:nosuch.invalid:1"), err


def test_check_refuses_non_regular_and_oversized_config_files(sc):
    """/dev/zero used to grow to 2.3 GB, a FIFO hung for ever, a 300 MB one-line file peaked
    at 309 MB: each is refused with exit 78 at once, in a few MiB."""
    d = sc.tmpdir()
    fifo = d + "/fifo"
    os.mkfifo(fifo)
    huge = d + "/huge.conf"
    with open(huge, "wb") as f:  # one line, 300 MB (sparse)
        f.truncate(300 * 1000 * 1000)
    long_line = write_conf(d, "[x]\nlisten = unix:/" + "a" * (1000 * 1000) + "\n", "long.conf")
    cases = [("/dev/zero", "it is a character device, expected a regular file"),
             (fifo, "it is a FIFO (named pipe), expected a regular file"),
             (d, "it is a directory, expected a regular file"),
             (huge, "300000000 bytes, expected a config file of at most 1048576 bytes"),
             (long_line, "long.conf:2: line is longer than 4096 bytes")]
    for path, why in cases:
        rc, out, err, peak_kib = run_measured(["check", "-c", path], timeout=10)
        assert rc == 78 and why in err and path in err, (path, rc, err)
        # a resource bound, not a speed test: tens of MiB would mean the file was read whole
        assert peak_kib < 32 * 1024, (path, peak_kib)


def test_named_pipes_are_a_config_error_off_windows(sc):
    """npipe: endpoints are Windows' (sockferry.exe): here every place one can go is refused
    before anything is bound, with exit 78 and a sentence that names this system."""
    d = sc.tmpdir()
    for args in (["relay", "-t", "-F", "a:npipe:openssh-ssh-agent=tcp:127.0.0.1:1"],
                 ["relay", "-t", "-F", "a:tcp:127.0.0.1:1=npipe:////./pipe/docker_engine"],
                 ["check", "-F", "a:unix:%s/a.sock=tcp:127.0.0.1:1|npipe:\\\\.\\pipe\\x" % d]):
        rc, _, err = run_sockferry(args)
        assert rc == 78, (args, rc, err)
        assert "named pipes are Windows' (sockferry.exe); on Linux use unix:/path or tcp:HOST:PORT" in err, err
    conf = os.path.join(d, "sf.conf")
    with open(conf, "w") as f:
        f.write("[sockferry]\ncontrol = npipe:sockferry-control\n[a]\nlisten = unix:%s/a.sock\n"
                "connect = tcp:127.0.0.1:1\n" % d)
    rc, _, err = run_sockferry(["relay", "-t", "-c", conf])
    assert rc == 78 and "sf.conf:2: [sockferry] control: npipe:sockferry-control: named pipes are Windows'" in err, \
        (rc, err)
    assert not os.path.exists(os.path.join(d, "a.sock"))


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
