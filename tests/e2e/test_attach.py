#!/usr/bin/env python3
"""End-to-end tests of `sockferry attach` and `sockferry link --stdio` (issue 25): the shared
link over an exec's stdin and stdout, into a "container" made of mount and network namespaces
(unshare) with an empty directory bind-mounted where the sockets go, as Docker Desktop leaves
one for a host socket it could not carry. attach enters it with `nsenter -t PID -m -n sockferry
link --stdio`; unmodified clients run inside with nsenter. The engines' CLIs are played by a
shell script that prints docker's own error texts (as docker 20.10 prints them, on the same
streams) and exits as docker does.

Each test gets a Scene (tests/lib/sfharness.py) for what it starts."""

import datetime
import math
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


def test_account_names_are_the_containers_not_the_hosts(sc):
    """owner, group and allow-uid by name: looked up by the far end in the container (its own
    /etc/passwd and /etc/group here), where the host knows no such accounts, as a Mac or a
    Windows host does not know a container's."""
    d = sc.tmpdir(mode=0o755)
    box = Container(sc, d)
    for name in ("sf-box-user", "sf-box-group"):
        rc, _, _ = run_sockferry(["check", "-F", "x:unix:%s/x.sock=unix:%s/y.sock,owner=%s" % (d, d, name)])
        assert rc != 0, "the host knows %s: pick a name it does not" % name
    with open(d + "/passwd", "w") as f:
        f.write("root:x:0:0::/root:/bin/sh\nsf-box-user:x:4321:4321::/:/bin/sh\n")
    with open(d + "/group", "w") as f:
        f.write("root:x:0:\nsf-box-group:x:4322:\n")
    for name in ("passwd", "group"):
        rc, out, err = box.run(["mount", "--bind", "%s/%s" % (d, name), "/etc/" + name])
        assert rc == 0, (out, err)
    sc.server("echo", d + "/echo.sock")
    r = attach(sc, ["echo:unix:%s/echo.sock=unix:%s/echo.sock,mode=0660,owner=sf-box-user,group=sf-box-group,"
                    "allow-uid=sf-box-user" % (box.run_dir, d)], box)
    rc, out, err = box.run(["stat", "-c", "%u %g", box.run_dir + "/echo.sock"])
    assert rc == 0 and out.split() == ["4321", "4322"], (out, err, r.text())
    rc, out, err = box.run(["setpriv", "--reuid", "4321", "--regid", "4322", "--clear-groups", "/usr/bin/python3",
                            "-c", "import socket, sys\ns = socket.socket(socket.AF_UNIX); s.settimeout(5)\n"
                            "s.connect(sys.argv[1]); s.sendall(b'named'); print(s.recv(10).decode())",
                            box.run_dir + "/echo.sock"])
    assert rc == 0 and out.strip() == "named", (rc, out, err, r.text())
    # allow-uid=sf-box-user: root in the container is not let through.
    rc, out, err = box.run(["/usr/bin/python3", "-c", "import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
                            "s.settimeout(5); s.connect(sys.argv[1]); s.sendall(b'x'); print(repr(s.recv(10)))",
                            box.run_dir + "/echo.sock"])
    assert "b'named'" not in out and "b'x'" not in out, (rc, out, err, r.text())


def test_gpg_agent_for_uid_1000_in_its_own_gnupg_directory(sc):
    """Issue 34: the far end (root in the container) makes a socket for uid 1000 in uid 1000's
    ~/.gnupg (0700), and a missing directory there, as uid 1000; uid 1000 connects."""
    d = sc.tmpdir(mode=0o755)
    box = Container(sc, d)
    os.chmod(box.empty, 0o755)
    home = os.path.join(box.empty, "home")
    for path, mode in ((home, 0o755), (home + "/.gnupg", 0o700)):
        os.mkdir(path)
        os.chown(path, 1000, 1000)
        os.chmod(path, mode)
    sc.server("echo", d + "/echo.sock")
    os.chmod(d + "/echo.sock", 0o666)
    inside = box.run_dir + "/home"
    r = attach(sc, ["gpg:unix:%s/.gnupg/S.gpg-agent=unix:%s/echo.sock,owner=1000,mode=0600" % (inside, d),
                    "new:unix:%s/.new/S=unix:%s/echo.sock,owner=1000" % (inside, d)], box)
    rc, out, err = box.run(["stat", "-c", "%u %a", inside + "/.gnupg/S.gpg-agent", inside + "/.new"])
    assert rc == 0 and out.split() == ["1000", "600", "1000", "755"], (out, err, r.text())
    rc, out, err = box.run(["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "/usr/bin/python3",
                            "-c", "import socket, sys\ns = socket.socket(socket.AF_UNIX); s.settimeout(5)\n"
                            "s.connect(sys.argv[1]); s.sendall(b'gpg'); print(s.recv(10).decode())",
                            inside + "/.gnupg/S.gpg-agent"])
    assert rc == 0 and out.strip() == "gpg", (rc, out, err, r.text())


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

FAKE_ENGINE = r"""#!/bin/sh
# docker (kubectl), as far as attach uses them: exec [-i] [-u USER] TARGET [--] CMD..., run in the
# mount namespace of the "container" $FAKE_PID (nsenter) as USER (setpriv; without -u the
# image's user: root, or $FAKE_USER, as kubectl runs the pod's). $FAKE_MODE picks a failure;
# every call is appended to $FAKE_CALLS, one line each.
printf '%s' "$*" | tr '\n' ' ' >> "$FAKE_CALLS" && echo >> "$FAKE_CALLS"
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
[ "$1" = exec ] || { echo "fake docker: unexpected $1" >&2; exit 2; }
shift
[ "$1" = -i ] && shift
user=${FAKE_USER:-0}
[ "$1" = -u ] && { user=$2; shift 2; }
shift # the target
[ "$1" = -- ] && shift
if [ "$1" = sockferry ]; then
        case "$FAKE_MODE" in
        missing)
                # docker 20.10 says it on stdout, where the link's frames belong, and exits 126
                echo 'OCI runtime exec failed: exec failed: unable to start container process: exec: "sockferry": executable file not found in $PATH: unknown'
                exit 126 ;;
        old-inject)
                echo "sockferry: unknown command 'link'; run 'sockferry --help' for the list" >&2
                exit 64 ;;
        esac
        shift
        set -- "$SOCKFERRY" "$@"
fi
enter=
[ -z "$FAKE_PID" ] || enter="nsenter -t $FAKE_PID -m"
[ "$user" = 0 ] || enter="$enter setpriv --reuid=$user --regid=$user --clear-groups"
if [ -f /dev/stdin ]; then
        # A file on stdin (--inject's copy): what the exec printed is lost when it ended with
        # some of its stdin unread, as podman 4.3.1 does at times (every time here).
        out=$(mktemp) || exit 2
        $enter "$@" >"$out" 2>&1
        st=$?
        [ "$(head -c 1 | wc -c)" -ne 0 ] || cat "$out"
        rm -f "$out"
        exit "$st"
fi
exec $enter "$@"
"""


def fake_engine(d):
    path = d + "/docker"
    with open(path, "w") as f:
        f.write(FAKE_ENGINE)
    os.chmod(path, 0o755)
    return path


def engine_env(d, mode, box=None, user=None):
    env = {"FAKE_MODE": mode, "FAKE_CALLS": d + "/calls", "FAKE_PID": str(box.pid) if box else ""}
    if user is not None:
        env["FAKE_USER"] = str(user)
    return env


def calls(d):
    with open(d + "/calls") as f:
        return f.read().splitlines()


def engine_attach(engine, d, mode, extra=(), timeout=30, box=None):
    p = subprocess.run([SOCKFERRY, "attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d),
                        "--engine-cmd", engine] + list(extra) + ["app"], capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, **engine_env(d, mode, box)))
    return p.returncode, p.stderr


def engine_relay(sc, d, mode, extra=(), ready=True):
    """attach through the fake engine in mode, running (a Relay in sc); with ready, once the far
    end is ready. x:unix:D/c/x.sock=unix:D/x.sock, into the container app."""
    r = sc.relay(["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--engine-cmd", fake_engine(d)]
                 + list(extra) + ["app"], wait_ready=False, env=engine_env(d, mode))
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
    rc, out, err = run_sockferry(["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--inject-dir",
                                  "vol", "app"])
    assert rc == 64 and "--inject-dir vol: expected an absolute path" in err, (rc, err)


def test_engine_container_not_running_is_retried(sc):
    r = engine_relay(sc, sc.tmpdir(), "stopped", ["-v"], ready=False)
    wait_for(lambda: r.text().count("attaching again") >= 2, 30, "two attempts")
    text = r.stop()
    assert "container app is not running" in text, text


def test_engine_docker_exec_argv_and_sigterm(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/x.sock")
    r = engine_relay(sc, d, "ok")
    assert calls(d)[0] == "exec -i -u 0 app sockferry link --stdio"
    assert echo_once(d + "/c/x.sock", b"via docker exec") == b"via docker exec"
    r.stop()
    assert not os.path.exists(d + "/c/x.sock"), r.text()


# ---- --inject ----------------------------------------------------------------------------------


class Box:
    """A container for --inject: a mount namespace held by a sleeping process, with a /tmp of
    its own (a tmpfs, 1777, as an image's) and the test's directory d bound back at its path,
    so the sockets the far end makes in d are this side's too. read_only: / and /tmp are
    read-only in it (docker run --read-only), and d/vol is a tmpfs (a volume) for --inject-dir.
    The fake engine execs into it (FAKE_PID); a user of the container is a process in it with
    another uid (as_user)."""

    def __init__(self, sc, d, read_only=False):
        if os.geteuid() != 0:
            raise Skip("needs root for a mount namespace (unshare, nsenter)")
        for tool in ("unshare", "nsenter", "setpriv"):
            if not shutil.which(tool):
                raise Skip("%s is not installed (util-linux)" % tool)
        script = ('exec 3<"$1" && mount -t tmpfs -o mode=1777 tmpfs /tmp && mkdir -p "$1" && '
                  'mount -c --bind /proc/self/fd/3 "$1" && exec 3<&- || exit 1\n')
        if read_only:
            script += ('mkdir -p "$1/vol" && mount -t tmpfs -o mode=0755 tmpfs "$1/vol" && '
                       'mount -o remount,bind,ro / && mount -o remount,ro /tmp || exit 1\n')
        script += 'echo ready && exec sleep 3600'
        self.proc = sc.popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", d],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        if self.proc.stdout.readline().strip() != b"ready":
            raise Skip("cannot make a mount namespace with a tmpfs /tmp here (unshare -m, mount)")
        self.pid = self.proc.pid
        self.sc = sc

    def enter(self, uid=0):
        argv = ["nsenter", "-t", str(self.pid), "-m"]
        return argv + (["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"] if uid else [])

    def sh(self, script, *args, uid=0):
        """script in the container as uid: (exit status, stdout + stderr)."""
        p = subprocess.run(self.enter(uid) + ["sh", "-c", script, "sh"] + [str(a) for a in args],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def as_user(self, uid, script, *args):
        """script running in the container as uid until the end of the test."""
        return self.sc.popen(self.enter(uid) + ["sh", "-c", script, "sh"] + [str(a) for a in args],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def exists(self, path):
        return self.sh('test -e "$1" || test -L "$1"', path)[0] == 0

    def injected(self, parent="/tmp"):
        """The directories --inject made in parent."""
        rc, out = self.sh('cd "$1" && for x in sockferry.*; do [ -e "$x" ] && echo "$x"; done; true', parent)
        assert rc == 0, out
        return sorted(parent + "/" + x for x in out.split())


# A binary a user of the container would like root to run: it leaves a mark and fails.
EVIL = '#!/bin/sh\necho "uid $(id -u) ran $0 $*" >> /tmp/pwned\nexit 1\n'


def inject_attach(sc, d, box, extra=(), mode="missing", expect=0, user=None, engine_kind=()):
    """attach --inject (the build's sockferry) into box with the fake engine; returns once
    attached (expect 0) or exited."""
    engine = fake_engine(d)
    args = ["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--engine-cmd", engine,
            "--inject=" + os.path.realpath(SOCKFERRY)] + list(engine_kind) + list(extra) + ["app"]
    r = sc.relay(args, wait_ready=False, env=engine_env(d, mode, box, user), expect=expect)
    wait_for(lambda: "far end: ready" in r.text() or r.proc.poll() is not None, 60, "the far end")
    if expect == 0:
        assert "far end: ready" in r.text(), r.text()
    return r


def echo(d, data):
    got = echo_once(d + "/c/x.sock", data)
    assert got == data, got


def far_end_of(r):
    """The injected far end (./sockferry link --stdio) among attach's descendants."""
    for pid in process_tree(r.pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().split(b"\0")[:3] == [b"./sockferry", b"link", b"--stdio"]:
                    return pid
        except OSError:
            pass
    raise AssertionError("no far end among attach's processes")


def test_engine_inject_copies_a_checked_sockferry_in_and_removes_it(sc):
    d = sc.tmpdir()
    box = Box(sc, d)
    sc.server("echo", d + "/x.sock")
    r = inject_attach(sc, d, box)
    text = r.text()
    arch = os.uname().machine
    assert "inject: copied %s (%s, sha256 " % (os.path.realpath(SOCKFERRY), arch) in text, text
    made = box.injected()
    assert len(made) == 1 and made[0] in text, (made, text)
    rc, out = box.sh('ls -ldn "$1" "$1/sockferry"', made[0])
    lines = out.splitlines()
    assert rc == 0 and lines[0].split()[0] == "drwx------" and lines[0].split()[2] == "0", out
    assert lines[1].split()[0] == "-rwx------" and lines[1].split()[2] == "0", out
    c = calls(d)
    assert "exec app uname -m" in c, c
    # one exec as root makes and fills the directory, the binary on its stdin; each run checks first
    inject = [x for x in c if x.startswith("exec -i -u 0 app /bin/sh -c ")]
    assert len(inject) == 2 and inject[0].endswith(" %s %s %d" % (os.path.basename(made[0]), file_sha256(SOCKFERRY),
                                                                    os.path.getsize(SOCKFERRY))), inject
    assert inject[1].endswith(" sf-inject %s %s" % (made[0], file_sha256(SOCKFERRY))), inject
    echo(d, b"injected")
    text = r.stop()
    assert box.injected() == [], "the injected directory outlived attach:\n" + text


def file_sha256(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_engine_inject_replaces_an_older_sockferry(sc):
    d = sc.tmpdir()
    box = Box(sc, d)
    sc.server("echo", d + "/x.sock")
    r = inject_attach(sc, d, box, mode="old-inject")
    assert "older and has no `link`: --inject copied this one in" in r.text(), r.text()
    echo(d, b"newer")


RACER = r"""
mkdir -p /tmp/evil && printf '%s' "$EVIL" > /tmp/evil/sockferry && chmod 755 /tmp/evil/sockferry || exit 1
# the old fixed place, made first: a directory of this user's with the binary in it, and a
# symbolic link to it next to it
mkdir "/tmp/sockferry-$1" && cp /tmp/evil/sockferry "/tmp/sockferry-$1/" && ln -s /tmp/evil "/tmp/sockferry-$1.d" || exit 1
touch /tmp/armed
while [ ! -e /tmp/stop ]; do
        for x in /tmp/sockferry.*; do
                [ -d "$x" ] || continue
                grep -qxF "$x" /tmp/seen 2>/dev/null || echo "$x" >> /tmp/seen
                cp /tmp/evil/sockferry "$x/sockferry" 2>/dev/null && echo "replaced $x/sockferry" >> /tmp/won
                ln -sf /tmp/evil/sockferry "$x/new" 2>/dev/null && echo "linked in $x" >> /tmp/won
                mv "$x" "$x.away" 2>/dev/null && mkdir "$x" && cp /tmp/evil/sockferry "$x/" && echo "swapped $x" >> /tmp/won
        done
done
"""


def sf_version():
    rc, out, err = run_sockferry(["version"])
    return out.split()[1]


def test_engine_inject_a_container_user_racing_it_gets_nothing_run_as_root(sc):
    d = sc.tmpdir()
    box = Box(sc, d)
    sc.server("echo", d + "/x.sock")
    version = sf_version()
    racer = box.as_user(1000, "EVIL=$2\n" + RACER, version, EVIL)
    sc.callback(lambda: box.sh("touch /tmp/stop"))
    wait_for(lambda: box.exists("/tmp/armed") or racer.poll() is not None, 10, "the racer")
    assert racer.poll() is None, "the racer could not start"
    r = inject_attach(sc, d, box)
    echo(d, b"checked copy")
    made = box.injected()
    wait_for(lambda: box.sh("cat /tmp/seen")[1].split() == made, 10, "the racer to see the directory")
    box.sh("touch /tmp/stop")
    racer.wait(timeout=10)
    rc, won = box.sh("cat /tmp/won")
    assert rc != 0, "the racer changed the injected directory:\n" + won
    assert not box.exists("/tmp/pwned"), box.sh("cat /tmp/pwned")[1]
    # the old fixed place is not used at all: the racer's things there are as it left them
    rc, out = box.sh('ls -ldn "/tmp/sockferry-$1" && cat "/tmp/sockferry-$1/sockferry"', version)
    assert rc == 0 and out.split()[2] == "1000" and EVIL in out, out
    text = r.stop()
    assert box.injected() == [] and not box.exists("/tmp/pwned"), text


def test_engine_inject_never_runs_a_directory_made_again_under_its_name(sc):
    # A container made anew loses the copy; a user of it who saw the name (ls /tmp) makes the
    # directory again with a binary of its own. The next run refuses it and copies anew,
    # elsewhere. A copy that is just gone is copied again too.
    d = sc.tmpdir()
    box = Box(sc, d)
    sc.server("echo", d + "/x.sock")
    r = inject_attach(sc, d, box)
    first = box.injected()[0]
    rc, out = box.sh('rm -rf "$1"', first)
    assert rc == 0, out
    rc, out = box.sh('mkdir "$1" && printf "%s" "$2" > "$1/sockferry" && chmod 700 "$1/sockferry" "$1"', first, EVIL,
                     uid=1000)
    assert rc == 0, out
    os.kill(far_end_of(r), signal.SIGKILL)
    wait_for(lambda: r.text().count("far end: ready") >= 2 or r.proc.poll() is not None, 60, "attached again")
    text = r.text()
    assert r.text().count("far end: ready") >= 2, text
    assert "inject: not run: %s is not the directory attach made" % first in text, text
    assert "%s is not as attach left it: --inject copied sockferry into" % first in text, text
    assert not box.exists("/tmp/pwned"), box.sh("cat /tmp/pwned")[1]
    second = [x for x in box.injected() if x != first]
    assert len(second) == 1, box.injected()
    echo(d, b"second copy")
    rc, out = box.sh('rm -rf "$1"', second[0])
    os.kill(far_end_of(r), signal.SIGKILL)
    wait_for(lambda: r.text().count("far end: ready") >= 3 or r.proc.poll() is not None, 60, "attached a third time")
    assert "%s is gone (the container was made anew): --inject copied sockferry into" % second[0] in r.text(), r.text()
    echo(d, b"third copy")
    r.stop()
    assert not box.exists("/tmp/pwned")


def test_engine_inject_dir_on_a_read_only_root_filesystem(sc):
    d = sc.tmpdir()
    box = Box(sc, d, read_only=True)
    sc.server("echo", d + "/x.sock")
    r = inject_attach(sc, d, box, expect=1)
    text = r.stop()
    assert "cannot attach" in text and "--inject could not copy" in text and "Read-only file system" in text \
        and "--inject-dir DIR" in text, text
    r = inject_attach(sc, d, box, extra=["--inject-dir", d + "/vol"])
    made = box.injected(d + "/vol")
    assert len(made) == 1, made
    echo(d, b"from the volume")
    r.stop()
    assert box.injected(d + "/vol") == []


def test_engine_inject_dir_that_others_could_change_is_refused(sc):
    d = sc.tmpdir()
    box = Box(sc, d)
    rc, out = box.sh("mkdir -p /tmp/users/own /tmp/open && chown 1000 /tmp/users/own && chmod 0777 /tmp/open && "
                     "mkdir /tmp/users/own/sub")
    assert rc == 0, out
    for where, words in [("/tmp/users/own/sub", "/tmp/users/own belongs to uid 1000, who could rename what is in it"),
                         ("/tmp/open", "/tmp/open is writable by others than its owner (mode drwxrwxrwx)"),
                         ("/tmp/none", "/tmp/none: no such directory")]:
        r = inject_attach(sc, d, box, extra=["--inject-dir", where], expect=1)
        text = r.stop()
        assert "cannot attach" in text and words in text, (where, text)
    assert box.injected("/tmp/users/own/sub") == [] and box.injected("/tmp/open") == []


def test_engine_inject_kubectl_as_the_pods_user(sc):
    # kubectl exec has no -u: the exec runs as the pod's user (1000 here). The copy is that
    # user's, in a directory only it can change: it runs as nobody else.
    d = sc.tmpdir(mode=0o711)
    os.mkdir(d + "/c", 0o700)
    os.chown(d + "/c", 1000, 1000)
    box = Box(sc, d)
    sc.server("echo", d + "/x.sock")
    r = inject_attach(sc, d, box, user=1000, engine_kind=["--engine", "kubectl"])
    text = r.text()
    assert "runs as uid 1000 in app, not root" in text, text
    made = box.injected()
    rc, out = box.sh('ls -ldn "$1"', made[0])
    assert out.split()[:3] == ["drwx------", "2", "1000"], out
    assert any(x.startswith("exec -i app -- /bin/sh -c ") for x in calls(d)), calls(d)
    echo(d, b"as the pod's user")
    r.stop()
    assert box.injected() == []


def test_engine_inject_without_a_static_binary_says_how_to_get_one(sc):
    d = sc.tmpdir()
    box = Box(sc, d)
    engine = fake_engine(d)
    p = subprocess.run([SOCKFERRY, "attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--engine-cmd", engine,
                        "--inject", "app"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SOCKFERRY_STATIC=d + "/nothing-here", **engine_env(d, "missing", box)))
    arch = os.uname().machine
    if p.returncode == 0 or "copied" in p.stderr:
        raise Skip("this build finds a static binary (installed, or a static build)")
    assert p.returncode == 1 and "--inject has no static Linux sockferry for %s" % arch in p.stderr, p.stderr
    assert "packaging/linux/build-static.sh" in p.stderr and "sockferry-%s-linux-%s" % (sf_version(), arch) in p.stderr, \
        p.stderr
    # SOCKFERRY_STATIC: a directory of linux-ARCH/sockferry, as build-static.sh makes
    os.makedirs(d + "/static/linux-" + arch)
    shutil.copy(SOCKFERRY, d + "/static/linux-%s/sockferry" % arch)
    sc.server("echo", d + "/x.sock")
    r = sc.relay(["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--engine-cmd", engine, "--inject",
                  "app"], wait_ready=False, env=dict(engine_env(d, "missing", box), SOCKFERRY_STATIC=d + "/static"))
    wait_for(lambda: "far end: ready" in r.text(), 60, "the far end")
    assert "inject: copied %s/static/linux-%s/sockferry" % (d, arch) in r.text(), r.text()
    echo(d, b"from SOCKFERRY_STATIC")


# ---- the far end's stderr ------------------------------------------------------------------------


def test_the_far_ends_stderr_is_escaped(sc):
    d = sc.tmpdir()
    sc.server("echo", d + "/x.sock")
    hostile = r'printf "\033]0;owned\007 \033[2J\rsockferry error: forged\000x\n" >&2; exec "$0" link --stdio'
    r = sc.relay(["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--", "sh", "-c", hostile, SOCKFERRY],
                 wait_ready=False)
    wait_for(lambda: "far end: ready" in r.text(), 30, "the far end")
    with open(r.log_path, "rb") as f:
        raw = f.read()
    assert b"\\x1b]0;owned\\x07 \\x1b[2J\\x0dsockferry error: forged\\x00x" in raw, raw
    assert not any(c in raw for c in (b"\x1b", b"\x07", b"\r", b"\x00")), raw


def test_a_flood_of_far_end_stderr_is_cut_to_the_rate_with_a_count(sc):
    import re
    d = sc.tmpdir()
    sc.server("echo", d + "/x.sock")
    # The far end's own lines ("ready") go through the same limit: they must come in a window
    # of their own, after attach has read the last of the flood. The pipe holds about 6 000
    # lines that attach reads after the flood's writer is done: under valgrind, beside CI's
    # other lanes, that took longer than the 1.2 s pause, "ready" was dropped, and the wait for
    # it below ran out. There the pause is 5 s, and the flood a tenth (still more than a
    # second of lines).
    n, pause = (20000, 5) if VALGRIND else (200000, 1.2)
    flood = 'yes "flood line" | head -n %d >&2; sleep %s; exec "$0" link --stdio' % (n, pause)
    r = sc.relay(["attach", "-F", "x:unix:%s/c/x.sock=unix:%s/x.sock" % (d, d), "--", "sh", "-c", flood, SOCKFERRY],
                 wait_ready=False)
    wait_for(lambda: "far end: ready" in r.text(), 60, "the far end")
    echo(d, b"after the flood")
    text = r.stop()
    shown = text.count(": flood line\n")
    dropped = sum(int(x) for x in re.findall(r"(\d+) lines? of the far end's stderr dropped \(more than 20 a second\)", text))
    # 20 lines in each second the flood lasted (as attach read it: under valgrind, seconds
    # more), counted from the log's own times, and every line either shown or counted
    stamps = [datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
              for line in text.splitlines() if line.endswith(": flood line")]
    span = (stamps[-1] - stamps[0]).total_seconds() if stamps else 0
    assert 0 < shown <= 20 * (math.floor(span) + 2) and shown + dropped == n, (shown, span, dropped, text[-3000:])


def test_presets_say_what_is_missing_before_any_exec(sc):
    """The presets' errors on this side, in plain words, before the engine runs anything
    (attach with a real engine: tests/ci/containers-presets.sh)."""
    d = sc.tmpdir()
    engine = fake_engine(d)

    def attach(args, env):
        p = subprocess.run([SOCKFERRY, "attach", "--engine-cmd", engine] + args + ["app"], capture_output=True,
                           text=True, timeout=30, env=dict(os.environ, FAKE_MODE="ok", FAKE_CALLS=d + "/calls", **env))
        return p.returncode, p.stderr

    rc, err = attach(["--ssh-agent"], {"SSH_AUTH_SOCK": ""})
    assert rc == 78 and "--ssh-agent: SSH_AUTH_SOCK is not set in this shell" in err, (rc, err)
    rc, err = attach(["--ssh-agent"], {"SSH_AUTH_SOCK": d + "/no agent"})
    assert rc == 78 and "SSH_AUTH_SOCK=%s/no agent: No such file or directory: is the agent running?" % d in err, \
        (rc, err)
    rc, err = attach(["--docker"], {"DOCKER_HOST": "tcp://198.18.0.1:2375"})
    assert rc == 78 and "--docker: the engine here is tcp://198.18.0.1:2375 (DOCKER_HOST), not a socket" in err, \
        (rc, err)
    rc, err = attach(["--user", "app"], {})
    assert rc == 64 and "--user goes with --ssh-agent, --gpg-agent or --docker" in err, (rc, err)
    rc, err = attach(["--docker", "--user", "a b"], {})
    assert rc == 64 and "--user a b: expected a user name or UID[:GID]" in err, (rc, err)
    p = subprocess.run([SOCKFERRY, "attach", "--ssh-agent", "--", "sh"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 64 and "not with -- CMD" in p.stderr, (p.returncode, p.stderr)
    assert not os.path.exists(d + "/calls"), calls(d)


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
