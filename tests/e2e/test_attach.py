#!/usr/bin/env python3
"""End-to-end tests of `sockferry attach` and `sockferry link --stdio` (issue 25): the shared
link over an exec's stdin and stdout, into a "container" made of mount and network namespaces
(unshare) with an empty directory bind-mounted where the sockets go, as Docker Desktop leaves
one for a host socket it could not carry. attach enters it with `nsenter -t PID -m -n sockferry
link --stdio`; unmodified clients run inside with nsenter. The engines' CLIs are played by a
shell script that prints docker's own error texts (as docker 20.10 prints them, on the same
streams) and exits as docker does.

Each test gets a Scene (tests/lib/sfharness.py) for what it starts."""

import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import SOCKFERRY, VALGRIND, Scene, Skip, echo_once, run_sockferry, steady, wait_for  # noqa: E402

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")
MIB = 1 << 20
SEQUENTIAL = 200 if VALGRIND else 1000


class Container:
    """Mount and network namespaces held by a sleeping process; inside, d/run is a bind mount of
    an empty directory (the failed socket bind mount). Ends with the Scene."""

    def __init__(self, sc, d):
        if os.geteuid() != 0:
            raise Skip("needs root for namespaces (unshare, nsenter)")
        for tool in ("unshare", "nsenter"):
            if not shutil.which(tool):
                raise Skip("%s is not installed (util-linux)" % tool)
        self.run_dir = d + "/run"
        self.empty = d + "/empty"
        os.mkdir(self.run_dir)
        os.mkdir(self.empty)
        script = 'mount --bind "$1" "$2" && ip link set lo up && echo ready && exec sleep 3600'
        self.proc = sc.popen(["unshare", "-m", "-n", "--propagation", "private", "sh", "-c", script, "sh",
                              self.empty, self.run_dir], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        if self.proc.stdout.readline().strip() != b"ready":
            raise Skip("cannot make mount and network namespaces here (unshare -m -n failed)")
        self.pid = self.proc.pid

    def enter(self):
        return ["nsenter", "-t", str(self.pid), "-m", "-n"]

    def run(self, argv, timeout=120, env=None, input=None):
        """argv inside the container: (exit status, stdout, stderr)."""
        p = subprocess.run(self.enter() + argv, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **(env or {})), input=input)
        return p.returncode, p.stdout, p.stderr

    def python(self, code, *args, timeout=120):
        """Python code inside the container, tests/lib on its path; its stdout (it must exit 0)."""
        rc, out, err = self.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r)\n" % LIB + code]
                                + [str(a) for a in args], timeout=timeout)
        assert rc == 0, (rc, out, err)
        return out

    def exists(self, path):
        return self.run(["test", "-e", path])[0] == 0


# Under valgrind the far end runs under memcheck too; its status is in attach's log.
FAR_VALGRIND = ["valgrind", "-q", "--vgdb=no", "--leak-check=full", "--errors-for-leak-kinds=all", "--error-exitcode=99"]


def attach(sc, forwards, container, program=None, expect=0, extra=()):
    """attach with forwards (-F specs) into container; returns once the far end is ready. At
    the end attach is stopped, and a far end that valgrind found fault with fails the test."""
    args = ["attach", "-v"] + [a for f in forwards for a in ("-F", f)] + list(extra)
    args += ["--"] + container.enter() + (FAR_VALGRIND if VALGRIND else []) + [program or SOCKFERRY, "link",
                                                                              "--stdio"]
    r = sc.relay(args, wait_ready=False, expect=expect)

    def far_end_clean():
        text = r.stop()
        assert "(exit status 99)" not in text, "valgrind found errors or leaks in the far end:\n" + text
    sc.callback(far_end_clean)
    wait_for(lambda: "far end: ready" in r.text() or r.proc.poll() is not None, 30 if not VALGRIND else 120,
             "the far end to be ready")
    assert "far end: ready" in r.text(), r.text()
    return r


def far_end_pid(r):
    """The running far end: attach's child (nsenter execs sockferry in place)."""
    with open("/proc/%d/task/%d/children" % (r.pid, r.pid)) as f:
        kids = f.read().split()
    assert len(kids) == 1, kids
    return int(kids[0])


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def process_tree(pid):
    """pid and every process descended from it."""
    parent = {}
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % entry) as f:
                parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError):
            pass
    tree = {pid}
    grew = True
    while grew:
        kids = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= kids
        grew = bool(kids)
    return tree


def tcp_listeners_of(pids):
    """The TCP listeners in this network namespace that processes pids hold (other tests may
    listen on this machine at the same time)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if any("pid=%d," % p in line for p in pids)]


def echo_inside(container, path, data):
    """One client of an echo service inside container: data, half-closed; what came back."""
    out = container.python(
        "from sfharness import connect, recv_all\n"
        "import socket\n"
        "s = connect(sys.argv[1]); s.sendall(sys.argv[2].encode()); s.shutdown(socket.SHUT_WR)\n"
        "print(recv_all(s).decode())\n", path, data)
    return out.strip()


def attached_echo(sc):
    """An echo service on the host, attach forwarding it into a Container as RUN/echo.sock:
    the directory, the container and attach."""
    d = sc.tmpdir()
    box = Container(sc, d)
    sc.server("echo", d + "/echo.sock")
    return d, box, attach(sc, ["echo:unix:%s/echo.sock=unix:%s/echo.sock" % (box.run_dir, d)], box)


# ---- the tests ---------------------------------------------------------------------------------


def test_data_both_ways_and_half_close_no_tcp_listener(sc):
    d = sc.tmpdir()
    box = Container(sc, d)
    sc.server("sink-source", d + "/big.sock")
    sc.server("after-eof", d + "/eof.sock")
    r = attach(sc, ["big:unix:%s/big.sock=unix:%s/big.sock" % (box.run_dir, d),
                    "eof:unix:%s/eof.sock=unix:%s/eof.sock" % (box.run_dir, d)], box)
    assert not os.path.exists(d + "/run/big.sock"), "the socket is in the container, not on the host"
    assert box.exists(box.run_dir + "/big.sock")
    out = box.python("from sfharness import transfer_both_ways\nprint(transfer_both_ways(sys.argv[1], %d))"
                     % (8 * MIB), box.run_dir + "/big.sock")
    assert out.strip() == "True", (out, r.text())
    # after-eof answers once the request ended: only a forwarded half-close gets the answer
    out = box.python(
        "from sfharness import connect, recv_all\nimport socket, hashlib\n"
        "s = connect(sys.argv[1]); s.sendall(b'x' * 100000); s.shutdown(socket.SHUT_WR)\n"
        "print(recv_all(s).decode().strip() == '100000 ' + hashlib.sha256(b'x' * 100000).hexdigest())",
        box.run_dir + "/eof.sock")
    assert out.strip() == "True", (out, r.text())
    mine = tcp_listeners_of(process_tree(r.pid))
    assert not mine, "attach opened a TCP listener on the host: %s" % mine
    rc, inside, err = box.run(["ss", "-Hltn"])
    assert rc == 0 and not inside.strip(), "a TCP listener in the container: %s%s" % (inside, err)


def test_mode_owner_and_alias_are_applied_in_the_container(sc):
    d = sc.tmpdir()
    box = Container(sc, d)
    sc.server("echo", d + "/echo.sock")
    r = attach(sc, ["echo:unix:%s/sf/echo.sock=unix:%s/echo.sock,mode=0640,owner=65534,group=65534,alias=%s/app.sock"
                    % (box.run_dir, d, box.run_dir)], box)
    rc, out, err = box.run(["stat", "-c", "%a %u %g %F", box.run_dir + "/sf/echo.sock"])
    assert rc == 0 and out.split() == ["640", "65534", "65534", "socket"], (out, err, r.text())
    rc, out, err = box.run(["readlink", box.run_dir + "/app.sock"])
    assert rc == 0 and out.strip() == box.run_dir + "/sf/echo.sock", (out, err, r.text())
    assert echo_inside(box, box.run_dir + "/app.sock", "via the alias") == "via the alias", r.text()


def test_stats_of_attachs_forwards_on_its_control_socket(sc):
    d = sc.tmpdir()
    box = Container(sc, d)
    sc.server("echo", d + "/echo.sock")
    with open(d + "/attach.conf", "w") as f:
        f.write("[sockferry]\ncontrol = unix:%s/control.sock\n[echo]\nlisten = unix:%s/echo.sock\nconnect = unix:%s/echo.sock\n"
                % (d, box.run_dir, d))
    r = attach(sc, [], box, extra=["-c", d + "/attach.conf"])
    assert echo_inside(box, box.run_dir + "/echo.sock", "counted") == "counted"
    rc, out, err = run_sockferry(["stats", "--control", d + "/control.sock"])
    assert rc == 0 and "echo: unix:%s/echo.sock" % box.run_dir in out and "1 total" in out, (rc, out, err, r.text())
    r.stop()
    assert not os.path.exists(d + "/control.sock"), r.text()


def test_curl_to_an_http_server_on_a_host_unix_socket(sc):
    if not shutil.which("curl"):
        raise Skip("curl is not installed")
    d = sc.tmpdir()
    box = Container(sc, d)
    sc.server("http", d + "/http.sock", "hello from the host")
    r = attach(sc, ["web:unix:%s/http.sock=unix:%s/http.sock" % (box.run_dir, d)], box)
    for _ in range(3):
        rc, out, err = box.run(["curl", "-sS", "--unix-socket", box.run_dir + "/http.sock", "http://x/hello.txt"])
        assert rc == 0 and out == "hello from the host: /hello.txt\n", (rc, out, err, r.text())


def test_ssh_add_lists_the_host_agents_key(sc):
    for tool in ("ssh-agent", "ssh-add", "ssh-keygen"):
        if not shutil.which(tool):
            raise Skip("%s is not installed (openssh-client)" % tool)
    d = sc.tmpdir()
    box = Container(sc, d)
    agent = d + "/agent.sock"
    sc.popen(["ssh-agent", "-D", "-a", agent], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: os.path.exists(agent), 10, "ssh-agent's socket")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sf-attach-test", "-f", d + "/key"],
                   check=True)
    subprocess.run(["ssh-add", "-q", d + "/key"], check=True, env=dict(os.environ, SSH_AUTH_SOCK=agent),
                   capture_output=True)
    r = attach(sc, ["ssh:unix:%s/ssh.sock=unix:%s" % (box.run_dir, agent)], box)
    rc, out, err = box.run(["ssh-add", "-l"], env={"SSH_AUTH_SOCK": box.run_dir + "/ssh.sock"})
    assert rc == 0 and "sf-attach-test" in out and "ED25519" in out, (rc, out, err, r.text())


def test_redis_cli_through_attach(sc):
    for tool in ("redis-server", "redis-cli"):
        if not shutil.which(tool):
            raise Skip("%s is not installed (redis-server, redis-tools)" % tool)
    d = sc.tmpdir()
    box = Container(sc, d)
    sc.popen(["redis-server", "--port", "0", "--unixsocket", d + "/redis.sock", "--save", "", "--appendonly", "no"],
             stdout=subprocess.DEVNULL)
    wait_for(lambda: os.path.exists(d + "/redis.sock"), 10, "redis-server's socket")
    r = attach(sc, ["redis:unix:%s/redis.sock=unix:%s/redis.sock" % (box.run_dir, d)], box)
    rc, out, err = box.run(["redis-cli", "-s", box.run_dir + "/redis.sock", "SET", "k", "through attach"])
    assert rc == 0 and out.strip() == "OK", (rc, out, err, r.text())
    rc, out, err = box.run(["redis-cli", "-s", box.run_dir + "/redis.sock", "GET", "k"])
    assert rc == 0 and out.strip() == "through attach", (rc, out, err, r.text())


def test_sequential_connections_no_fd_growth_on_either_end(sc):
    _, box, r = attached_echo(sc)
    far = far_end_pid(r)
    assert echo_inside(box, box.run_dir + "/echo.sock", "warm") == "warm"
    host_fds, far_fds = steady(lambda: fds(r.pid), "attach's descriptors"), steady(lambda: fds(far), "the far end's")
    out = box.python(
        "from sfharness import connect\n"
        "n = int(sys.argv[2])\n"
        "for i in range(n):\n"
        "    s = connect(sys.argv[1]); m = b'%d' % i; s.sendall(m)\n"
        "    assert s.recv(64) == m\n"
        "    s.close()\n"
        "print('done', n)\n", box.run_dir + "/echo.sock", SEQUENTIAL, timeout=600)
    assert out.strip() == "done %d" % SEQUENTIAL, out
    wait_for(lambda: fds(r.pid) == host_fds and fds(far) == far_fds, 10,
             "the descriptors to come back (host %d -> %d, far end %d -> %d)" % (host_fds, fds(r.pid), far_fds,
                                                                               fds(far)))


def test_exec_killed_reattaches_and_sigterm_removes_the_sockets(sc):
    _, box, r = attached_echo(sc)
    assert echo_inside(box, box.run_dir + "/echo.sock", "one") == "one"
    far = far_end_pid(r)
    os.kill(far, signal.SIGKILL)
    wait_for(lambda: r.text().count("far end: ready") >= 2, 30, "attach to start the exec again")
    text = r.text()
    assert "killed by signal 9" in text and "attaching again in" in text, text
    assert far_end_pid(r) != far
    assert echo_inside(box, box.run_dir + "/echo.sock", "two") == "two", r.text()
    far = far_end_pid(r)
    text = r.stop()
    assert box.exists(box.run_dir) and not box.exists(box.run_dir + "/echo.sock"), \
        "the container's socket outlived attach:\n" + text
    assert not os.path.exists("/proc/%d" % far) or open("/proc/%d/stat" % far).read().split()[2] == "Z", \
        "the far end outlived attach"
    assert "removing the sockets" in text and "detached" in text, text


def test_attach_killed_the_far_end_sees_eof_and_removes_its_sockets(sc):
    _, box, r = attached_echo(sc)
    far = far_end_pid(r)
    r.kill()  # SIGKILL: nothing of attach's own shutdown runs; the far end's stdin ends
    wait_for(lambda: not os.path.exists("/proc/%d" % far), 20, "the far end to exit")
    assert not box.exists(box.run_dir + "/echo.sock"), "the far end left its socket behind"


def test_the_far_ends_refusal_reaches_the_host_log(sc):
    # A regular file where the far end must listen: refused there, said here in its words.
    d = sc.tmpdir()
    box = Container(sc, d)
    sc.server("echo", d + "/echo.sock")
    with open(d + "/empty/file.sock", "w") as f:
        f.write("not a socket")
    r = sc.relay(["attach", "-v", "-F", "echo:unix:%s/file.sock=unix:%s/echo.sock" % (box.run_dir, d), "--"]
                 + box.enter() + [SOCKFERRY, "link", "--stdio"], wait_ready=False)
    wait_for(lambda: r.text().count("attaching again") >= 2, 30, "two attempts")
    text = r.stop()
    assert "far end: " in text and box.run_dir + "/file.sock" in text and "regular file" in text, text
    assert "exit status 1" in text, text


def test_no_sockferry_at_the_far_end_gives_up_in_plain_words(sc):
    d = sc.tmpdir()
    box = Container(sc, d)
    rc, out, err = run_sockferry(["attach", "-F", "x:unix:%s/x.sock=unix:%s/x.sock" % (box.run_dir, d), "--"]
                                 + box.enter() + ["/nonexistent/sockferry", "link", "--stdio"], timeout=30)
    assert rc == 1 and "cannot attach" in err and "sockferry link --stdio" in err, (rc, err)
    rc, out, err = run_sockferry(["attach", "-F", "x:unix:%s/x.sock=unix:%s/x.sock" % (box.run_dir, d), "--",
                                  "/nonexistent-command"], timeout=30)
    assert rc == 1 and "/nonexistent-command was not found" in err, (rc, err)


# ---- engines played by a script ---------------------------------------------------------------

FAKE_ENGINE = r'''#!/bin/sh
# docker, as far as attach uses it: exec -i -u 0 TARGET CMD..., exec TARGET CMD..., cp SRC TARGET:DST.
# $FAKE_MODE picks a failure; $FAKE_ROOT is the "container's" filesystem for --inject.
echo "$*" >> "$FAKE_ROOT/calls"
case "$FAKE_MODE" in
denied)
        echo 'permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.24/containers/app/json": dial unix /var/run/docker.sock: connect: permission denied' >&2
        exit 1 ;;
nosuch)
        echo "Error response from daemon: No such container: $5" >&2
        exit 1 ;;
stopped)
        echo "Error response from daemon: Container 851974ea3f65e826bb83fbd64b4abbd006e3fbfed063c08e274c4e3b9b16e8dd is not running" >&2
        exit 1 ;;
old)
        echo "sockferry: unknown command 'link'; run 'sockferry --help' for the list" >&2
        exit 64 ;;
esac
if [ "$FAKE_MODE" = old-inject ] && [ "$1" = exec ] && [ "$6" = sockferry ]; then
        echo "sockferry: unknown command 'link'; run 'sockferry --help' for the list" >&2
        exit 64
fi
if [ "$1" = cp ]; then
        dst=${3#*:}
        mkdir -p "$FAKE_ROOT$(dirname "$dst")" && cp "$2" "$FAKE_ROOT$dst"
        exit
fi
[ "$1" = exec ] || { echo "fake docker: unexpected $1" >&2; exit 2; }
shift
[ "$1" = -i ] && shift
[ "$1" = -u ] && shift 2
shift # the target
case "$1" in
uname) echo x86_64; exit ;;
mkdir) mkdir -p "$FAKE_ROOT$3"; exit ;;
sockferry)
        if [ "$FAKE_MODE" = missing ] || [ "$FAKE_MODE" = inject ]; then
                # docker 20.10 says it on stdout, where the link's frames belong, and exits 126
                echo 'OCI runtime exec failed: exec failed: unable to start container process: exec: "sockferry": executable file not found in $PATH: unknown'
                exit 126
        fi
        shift
        exec "$SOCKFERRY" "$@" ;;
/tmp/*)
        prog=$FAKE_ROOT$1
        shift
        exec "$prog" "$@" ;;
esac
echo "fake docker: cannot run $1" >&2
exit 126
'''


def fake_engine(d):
    path = d + "/docker"
    with open(path, "w") as f:
        f.write(FAKE_ENGINE)
    os.chmod(path, 0o755)
    os.mkdir(d + "/root")
    return path


def engine_attach(engine, d, mode, extra=(), timeout=30):
    env = dict(os.environ, FAKE_MODE=mode, FAKE_ROOT=d + "/root")
    p = subprocess.run([SOCKFERRY, "attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d),
                        "--engine-cmd", engine] + list(extra) + ["app"], capture_output=True, text=True,
                       timeout=timeout, env=env)
    return p.returncode, p.stderr


def engine_relay(sc, d, mode, extra=(), ready=True):
    """attach through the fake engine in mode, running (a Relay in sc); with ready, once the far
    end is ready. x:unix:D/c/x.sock=unix:D/x.sock, into the container app."""
    r = sc.relay(["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--engine-cmd", fake_engine(d)]
                 + list(extra) + ["app"], wait_ready=False, env={"FAKE_MODE": mode, "FAKE_ROOT": d + "/root"})
    if ready:
        wait_for(lambda: "far end: ready" in r.text(), 30, "the far end")
    return r


def test_engine_failures_in_plain_words(sc):
    d = sc.tmpdir()
    engine = fake_engine(d)
    cases = [
        ("denied", "permission denied on the engine's socket"),
        ("nosuch", "no such container: app"),
        ("missing", "no sockferry in the container app"),
        ("old", "older and has no `link` command"),
    ]
    for mode, words in cases:
        rc, err = engine_attach(engine, d, mode)
        assert rc == 1 and "cannot attach" in err and words in err, (mode, rc, err)
    rc, err = engine_attach(engine, d, "missing")
    assert "--inject" in err, err
    rc, out, err = run_sockferry(["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--engine-cmd",
                                  d + "/no-such-docker", "app"], timeout=30)
    assert rc == 1 and "the engine CLI %s/no-such-docker was not found" % d in err and "--engine-cmd" in err, \
        (rc, err)
    rc, out, err = run_sockferry(["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--engine",
                                  "lxc", "app"])
    assert rc == 64 and "docker, podman or kubectl" in err, (rc, err)
    rc, out, err = run_sockferry(["attach", "-F", "x:systemd:x=unix:%s/x.sock" % d, "app"])
    assert rc == 78 and "cannot be made in the container" in err, (rc, err)


def test_engine_container_not_running_is_retried(sc):
    r = engine_relay(sc, sc.tmpdir(), "stopped", ["-v"], ready=False)
    wait_for(lambda: r.text().count("attaching again") >= 2, 30, "two attempts")
    text = r.stop()
    assert "container app is not running" in text, text


def test_engine_docker_exec_argv_and_sigterm(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/x.sock")
    r = engine_relay(sc, d, "ok")
    with open(d + "/root/calls") as f:
        assert f.read().splitlines()[0] == "exec -i -u 0 app sockferry link --stdio"
    assert echo_once(d + "/c/x.sock", b"via docker exec") == b"via docker exec"
    r.stop()
    assert not os.path.exists(d + "/c/x.sock"), r.text()


def test_engine_inject_copies_a_sockferry_in(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/x.sock")
    r = engine_relay(sc, d, "inject", ["--inject=" + os.path.realpath(SOCKFERRY)])
    text = r.text()
    assert "inject: copied" in text and "(x86_64)" in text, text
    with open(d + "/root/calls") as f:
        calls = f.read()
    assert "exec app uname -m" in calls.splitlines(), calls
    assert any(c.startswith("cp %s app:/tmp/sockferry-" % os.path.realpath(SOCKFERRY)) for c in calls.splitlines()), calls
    assert echo_once(d + "/c/x.sock", b"injected") == b"injected"
    r.stop()


def test_engine_inject_replaces_an_older_sockferry(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/x.sock")
    r = engine_relay(sc, d, "old-inject", ["--inject=" + os.path.realpath(SOCKFERRY)])
    assert "older and has no `link`: --inject copied this one in" in r.text(), r.text()
    r.stop()


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
