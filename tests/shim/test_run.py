"""End-to-end tests of `sockferry run`, the container entrypoint, printing TAP.

Each test runs sockferry in a "container": new mount and network namespaces (unshare, as
root), loopback up, and an empty directory bind-mounted where the host socket should have
been, as Docker Desktop leaves it. Tests about PID 1 add a PID namespace. Standard library
only; every process a test starts is killed when it ends (each test's Container tears down
its Scene, tests/lib/sfharness.py), and every wait is bounded."""

import contextlib
import glob
import os
import signal
import socket
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import PYTHON, SOCKFERRY, Scene, Skip, need_root, wait_for, WAIT_SCALE  # noqa: E402

BUILD_ROOT = os.environ.get("SF_BUILD_ROOT", "")


class Container:
    """A scratch directory laid out like a container's filesystem, with a host-side service
    that answers every line with "echo:" and the line (a tagged server), in the scene sc. D/ctr/run/ward/broker.sock is where clients expect the socket
    (the alias); sockferry listens on D/ctr/run/sockferry/broker.sock."""

    def __init__(self, sc):
        self.sc = sc
        # a payload running as nobody walks through it
        self.dir = sc.tmpdir(prefix="sf-shim-", mode=0o755)
        self.host_empty = os.path.join(self.dir, "host-empty")
        self.alias = os.path.join(self.dir, "ctr/run/ward/broker.sock")
        self.listen = os.path.join(self.dir, "ctr/run/sockferry/broker.sock")
        self.upstream = os.path.join(self.dir, "host.sock")
        os.makedirs(self.host_empty)
        os.makedirs(self.alias)
        sc.server("tagged", self.upstream, "echo", thread=True)
        self.procs = []
        sc.callback(self.end_processes)

    def path(self, name):
        return os.path.join(self.dir, name)

    def forward(self, extra=""):
        return "broker:unix:%s=unix:%s%s" % (self.listen, self.upstream, extra)

    def setup_script(self, bind_alias=True):
        lines = ["set -e", "ip link set lo up"]
        if bind_alias:
            lines.append("mount --bind %s %s" % (self.host_empty, self.alias))
        lines.append("set +e")
        return "\n".join(lines) + "\n"

    def start(self, args, bind_alias=True, pidns=False, env=None, stdin=subprocess.DEVNULL, pre="", pass_fds=()):
        """Starts `sockferry ARGS` in the container; sockferry is the process Popen returns
        unless pidns, where it is PID 1 of a new PID namespace below unshare. pre: shell lines
        run just before sockferry is exec'd (in the process that becomes sockferry)."""
        script = self.setup_script(bind_alias) + pre + 'exec "$SOCKFERRY" "$@"\n'
        ns = ["unshare", "--mount", "--net", "--propagation", "private"]
        if pidns:
            ns += ["--pid", "--fork", "--mount-proc"]
        e = dict(os.environ, SOCKFERRY=SOCKFERRY)
        if env:
            e.update(env)
        self.log = self.sc.enter_context(open(self.path("log"), "wb"))
        self.out = self.sc.enter_context(open(self.path("out"), "wb"))
        p = subprocess.Popen(ns + ["/bin/sh", "-c", script, "sh"] + args, stdin=stdin, stdout=self.out,
                             stderr=self.log, env=e, start_new_session=True, pass_fds=pass_fds)
        self.procs.append(p)
        return p

    def run(self, args, timeout=20, **kw):
        p = self.start(args, **kw)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("sockferry did not exit within %ds; log:\n%s" % (timeout, self.text("log")))
        return rc, self.text("out"), self.text("log")

    def text(self, name):
        with open(self.path(name), "rb") as f:
            return f.read().decode(errors="replace")

    def end_processes(self):
        for p in self.procs:
            kill_session(p.pid)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()


def kill_session(sid):
    """Everything a test started shares its session (payloads change their process group,
    not their session), so this finds what is left whatever it turned into."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) == sid:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def running(pid, argv):
    """The children of pid that run argv. The process start() returns is the setup shell
    before it is sockferry, and the shell's children (ip, mount) are not the payload; nor is
    sockferry's child until it has exec'd, its command line is sockferry's till then. A payload
    running means sockferry has set up its signal handling, which comes before the spawn."""
    want = "".join(a + "\0" for a in argv).encode()
    found = []
    for k in children(pid):
        try:
            with open("/proc/%d/cmdline" % k, "rb") as f:
                if f.read() == want:
                    found.append(k)
        except FileNotFoundError:
            pass
    return found


def system_library():
    """A harmless shared library to stand in for the preload library: the real one is
    tested by the preload tests, and a sanitizer build of it cannot load into a payload."""
    for pattern in ("/usr/lib/*-linux-gnu/libdl.so.2", "/lib/*-linux-gnu/libdl.so.2", "/usr/lib*/libdl.so.2"):
        found = glob.glob(pattern)
        if found:
            return os.path.realpath(found[0])
    raise Skip("no libdl.so.2 to stand in for the preload library")


def py(code):
    return [PYTHON, "-c", code]


def expect(cond, msg, log=""):
    if not cond:
        raise AssertionError(msg + ("\n--- log ---\n" + log if log else ""))


def env_lines(out):
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


PRINT_ENV = "import os\nfor k in ('X_SOCK', 'LD_PRELOAD', 'SOCKFERRY_PRELOAD_MAP'):\n    print('%s=%s' % (k, os.environ.get(k, '<unset>')))\n"

# Connects through PATH at once, before anything else, and says what it got back.
CONNECT_NOW = """
import os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(path)
except OSError as e:
    print('connect failed: %s' % e)
    sys.exit(3)
s.sendall(b'ping')
print(s.recv(100).decode())
"""


# --- environment ----------------------------------------------------------------------------

def test_env_exports_the_listen_path(c):
    rc, out, log = c.run(["run", "-F", c.forward(",env=X_SOCK"), "--"] + py(PRINT_ENV))
    expect(rc == 0, "exit status %d" % rc, log)
    expect(env_lines(out)["X_SOCK"] == c.listen, "X_SOCK is %r" % env_lines(out).get("X_SOCK"), log)


def test_env_unix_url(c):
    rc, out, log = c.run(["run", "-F", c.forward(",env=X_SOCK,env-format=unix-url"), "--"] + py(PRINT_ENV))
    expect(rc == 0, "exit status %d" % rc, log)
    expect(env_lines(out)["X_SOCK"] == "unix://" + c.listen, "X_SOCK is %r" % env_lines(out).get("X_SOCK"), log)


def test_env_overrides_an_existing_variable_and_says_so(c):
    rc, out, log = c.run(["run", "-v", "-F", c.forward(",env=X_SOCK"), "--"] + py(PRINT_ENV), env={"X_SOCK": "/old"})
    expect(rc == 0, "exit status %d" % rc, log)
    expect(env_lines(out)["X_SOCK"] == c.listen, "X_SOCK is %r" % env_lines(out).get("X_SOCK"), log)
    expect("overriding X_SOCK=/old" in log, "the override is not in the log", log)


# --- alias ----------------------------------------------------------------------------------

def test_alias_missing_becomes_a_link(c):
    os.rmdir(c.alias)
    rc, out, log = c.run(["run", "--no-preload", "-F", c.forward(",alias=" + c.alias), "--"]
                         + py(CONNECT_NOW) + [c.alias], bind_alias=False)
    expect(rc == 0 and "echo:ping" in out, "rc %d, payload said %r" % (rc, out), log)
    expect(os.readlink(c.alias) == c.listen, "alias is not a link to the listen socket")


def test_alias_empty_directory_becomes_a_link(c):
    rc, out, log = c.run(["run", "-v", "--no-preload", "-F", c.forward(",alias=" + c.alias), "--"]
                         + py(CONNECT_NOW) + [c.alias], bind_alias=False)
    expect(rc == 0 and "echo:ping" in out, "rc %d, payload said %r" % (rc, out), log)
    expect(os.path.islink(c.alias) and os.readlink(c.alias) == c.listen, "alias was not replaced by a link", log)
    expect("was an empty directory, now a link" in log, "the log does not say so", log)


def test_alias_mount_point_is_left_for_the_preload_map(c):
    lib = system_library()
    # os.path.ismount() compares devices, which a bind mount from the same file system keeps.
    code = PRINT_ENV + ("print('ISDIR=%s' % os.path.isdir(ALIAS))\n"
                        "print('ISMOUNT=%s' % any(l.split()[4] == ALIAS for l in open('/proc/self/mountinfo')))\n")
    code = "ALIAS = %r\n" % c.alias + code
    rc, out, log = c.run(["run", "-v", "--preload", lib, "-F", c.forward(",alias=" + c.alias), "--"] + py(code))
    env = env_lines(out)
    expect(rc == 0, "exit status %d" % rc, log)
    expect(env["ISDIR"] == "True" and env["ISMOUNT"] == "True", "the mount point was touched: %r" % env, log)
    expect(env["SOCKFERRY_PRELOAD_MAP"] == "%s=unix:%s" % (c.alias, c.listen),
           "SOCKFERRY_PRELOAD_MAP is %r" % env["SOCKFERRY_PRELOAD_MAP"], log)
    expect(env["LD_PRELOAD"] == lib, "LD_PRELOAD is %r" % env["LD_PRELOAD"], log)
    expect("a mount point" in log, "the log does not say it is a mount point", log)


def test_alias_live_socket_is_left_alone(c):
    os.rmdir(c.alias)
    with Scene() as live:
        live.server("tagged", c.alias, "echo", thread=True)
        rc, out, log = c.run(["run", "-v", "--no-preload", "-F", c.forward(",alias=" + c.alias), "--"]
                             + py(CONNECT_NOW) + [c.alias], bind_alias=False)
    expect(rc == 0 and "echo:ping" in out, "rc %d, payload said %r" % (rc, out), log)
    expect(not os.path.islink(c.alias), "the live socket was replaced", log)
    expect("a live socket" in log and "left alone" in log, "the log does not say so", log)


def test_alias_stale_socket_becomes_a_link(c):
    os.rmdir(c.alias)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(c.alias)
    s.close()
    rc, out, log = c.run(["run", "--no-preload", "-F", c.forward(",alias=" + c.alias), "--"]
                         + py(CONNECT_NOW) + [c.alias], bind_alias=False)
    expect(rc == 0 and "echo:ping" in out, "rc %d, payload said %r" % (rc, out), log)
    expect(os.path.islink(c.alias), "the stale socket was not replaced", log)


# --- preload wiring -------------------------------------------------------------------------

def test_preload_keeps_existing_entries(c):
    lib = system_library()
    rc, out, log = c.run(["run", "--preload", lib, "-F", c.forward(",alias=" + c.alias), "--"] + py(PRINT_ENV),
                         env={"LD_PRELOAD": "/nonexistent/first.so"})
    expect(rc == 0, "exit status %d" % rc, log)
    expect(env_lines(out)["LD_PRELOAD"] == "/nonexistent/first.so:" + lib,
           "LD_PRELOAD is %r" % env_lines(out)["LD_PRELOAD"], log)


def test_preload_from_environment_variable(c):
    lib = system_library()
    rc, out, log = c.run(["run", "-F", c.forward(",alias=" + c.alias), "--"] + py(PRINT_ENV),
                         env={"SOCKFERRY_PRELOAD": lib})
    expect(rc == 0, "exit status %d" % rc, log)
    expect(env_lines(out)["LD_PRELOAD"] == lib, "LD_PRELOAD is %r" % env_lines(out)["LD_PRELOAD"], log)


def test_preload_found_in_the_build_tree(c):
    built = os.path.join(BUILD_ROOT, "preload", "sockferry-preload.so")
    if not BUILD_ROOT or not os.path.exists(built):
        raise Skip("the preload library is not built")
    # The payload only prints; a sanitizer build of the library may refuse to load into it,
    # so the log line is what counts.
    env = {"SOCKFERRY_PRELOAD": "", "ASAN_OPTIONS": "verify_asan_link_order=0"}
    rc, out, log = c.run(["run", "-v", "-F", c.forward(",alias=" + c.alias), "--", "true"], env=env)
    expect("preload: %s added to LD_PRELOAD" % os.path.realpath(built) in log, "not the build tree's library", log)


def test_no_preload(c):
    rc, out, log = c.run(["run", "--no-preload", "-F", c.forward(",alias=" + c.alias), "--"] + py(PRINT_ENV),
                         env={"SOCKFERRY_PRELOAD": system_library()})
    env = env_lines(out)
    expect(rc == 0, "exit status %d" % rc, log)
    expect(env["LD_PRELOAD"] == "<unset>" and env["SOCKFERRY_PRELOAD_MAP"] == "<unset>", "env: %r" % env, log)
    expect("clients that connect there will fail without the preload library" in log, "no warning", log)


def test_explicit_preload_missing_is_a_config_error(c):
    marker = c.path("started")
    rc, out, log = c.run(["run", "--preload", c.path("nope.so"), "-F", c.forward(",alias=" + c.alias), "--",
                          "touch", marker])
    expect(rc == 78, "exit status %d, expected 78" % rc, log)
    expect(not os.path.exists(marker), "the payload started", log)


# --- start-up order -------------------------------------------------------------------------

def test_payload_connecting_at_once_never_sees_no_such_file(c):
    for i in range(15):
        rc, out, log = c.run(["run", "-F", c.forward(",env=X_SOCK"), "--", "/bin/sh", "-c",
                              'exec %s -c "$1" "$X_SOCK"' % PYTHON, "sh", CONNECT_NOW])
        expect(rc == 0 and "echo:ping" in out, "run %d: rc %d, payload said %r" % (i, rc, out), log)


def test_config_error_stops_before_the_payload(c):
    marker = c.path("started")
    rc, out, log = c.run(["run", "-F", "broker:unix:relative=unix:/x", "--", "touch", marker])
    expect(rc == 78, "exit status %d, expected 78" % rc, log)
    expect(not os.path.exists(marker), "the payload started", log)


def test_bind_error_stops_before_the_payload(c):
    marker = c.path("started")
    os.makedirs(os.path.dirname(c.listen))
    open(c.listen, "w").close()
    rc, out, log = c.run(["run", "-F", c.forward(), "--", "touch", marker])
    expect(rc == 1, "exit status %d, expected 1" % rc, log)
    expect(not os.path.exists(marker), "the payload started", log)


# What the payload holds of socket activation: the variables, and every socket among its fds.
ACTIVATION_STATE = """
import os, socket, sys
for k in ('LISTEN_PID', 'LISTEN_FDS', 'LISTEN_FDNAMES', 'NOTIFY_SOCKET'):
    print('%s=%s' % (k, os.environ.get(k, '<unset>')))
held = []
for fd in os.listdir('/proc/self/fd'):
    try:
        if os.readlink('/proc/self/fd/' + fd).startswith('socket:'):
            held.append(fd)
    except OSError:
        pass
print('SOCKETS=%s' % ','.join(sorted(held)))
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b'ping')
print('REPLY=%s' % s.recv(100).decode())
"""


PASS_FDS = """
import fcntl, os, sys
web, spare = (fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (%d, %d))
os.dup2(web, 3)
os.dup2(spare, 4)
os.closerange(5, 1024)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="2", LISTEN_FDNAMES="web:spare")
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_payload_gets_no_socket_activation_state(c):
    """run is the process socket activation started: the payload must not inherit the passed
    sockets no forward uses, nor LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES and NOTIFY_SOCKET."""
    web, spare = (c.sc.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) for _ in range(2))
    notify = c.sc.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
    web.bind(c.path("web.sock"))
    spare.bind(c.path("spare.sock"))
    for s in (web, spare):
        s.listen(8)
    notify.bind(c.path("notify"))
    notify.settimeout(10)
    a, b = web.fileno(), spare.fileno()
    # Passed as sd_listen_fds(3) says: fd 3 "web", fd 4 "spare", LISTEN_PID the process
    # that becomes sockferry (this wrapper, which execs it).
    pre = 'exec %s -c "$PASS_FDS" "$SOCKFERRY" "$@"\n' % PYTHON
    rc, out, log = c.run(["run", "-F", "broker:systemd:web=unix:%s" % c.upstream, "--"] + py(ACTIVATION_STATE)
                         + [c.path("web.sock")], bind_alias=False, pre=pre, pass_fds=(a, b),
                         env={"NOTIFY_SOCKET": c.path("notify"), "PASS_FDS": PASS_FDS % (a, b)})
    state = env_lines(out)
    expect(rc == 0 and state.get("REPLY") == "echo:ping", "rc %d, payload said %r" % (rc, out), log)
    for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET"):
        expect(state[k] == "<unset>", "the payload got %s=%s" % (k, state[k]), log)
    expect(state["SOCKETS"] == "", "the payload holds socket fds %s" % state["SOCKETS"], log)
    # run itself still told the service manager.
    expect(b"READY=1" in notify.recv(4096), "run sent no READY=1", log)


# --- exit status ----------------------------------------------------------------------------

def test_exit_status_is_the_payloads(c):
    for status in (0, 3, 42, 255):
        rc, out, log = c.run(["run", "-F", c.forward(), "--", "/bin/sh", "-c", "exit %d" % status])
        expect(rc == status, "exit status %d, expected %d" % (rc, status), log)


def test_own_failure_after_the_payload_started_is_125(c):
    # A control socket path with a regular file in the way fails once the payload runs.
    ctl = c.path("ctl")
    open(ctl, "w").close()
    conf = c.path("c.conf")
    with open(conf, "w") as f:
        f.write("[sockferry]\ncontrol = unix:%s\n[broker]\nlisten = unix:%s\nconnect = unix:%s\n"
                % (ctl, c.listen, c.upstream))
    rc, out, log = c.run(["run", "-c", conf, "--", "/bin/sh", "-c", "sleep 20; exit 1"])
    expect(rc == 125, "exit status %d, expected 125 (run itself failed, not the payload)" % rc, log)
    expect("the relay cannot serve; stopping the payload" in log, "the log does not say why", log)


def test_quiet_by_default_verbose_for_info(c):
    rc, out, log = c.run(["run", "-F", c.forward(), "--", "true"])
    expect(rc == 0 and log == "", "rc %d, expected 0 and no log by default" % rc, log)
    rc, out, log = c.run(["run", "-v", "-F", c.forward(), "--", "true"])
    expect(rc == 0 and "sockferry info [broker]: listening on unix:%s" % c.listen in log,
           "rc %d, -v did not log the info lines" % rc, log)


def test_test_mode_binds_nothing_and_runs_nothing(c):
    marker = c.path("started")
    rc, out, log = c.run(["run", "-t", "-F", c.forward(), "--", "touch", marker])
    expect(rc == 0, "exit status %d, expected 0" % rc, log)
    expect("broker: listen unix:%s -> connect unix:%s, auth = none\n" % (c.listen, c.upstream) in out
           and "configuration OK: 1 forward, nothing bound" in out, "-t did not say what would be bound: %r" % out, log)
    expect(not os.path.exists(marker) and not os.path.exists(c.listen), "-t started the payload or bound", log)
    # CMD is optional with -t; a token file that cannot be used is a configuration error
    rc, out, log = c.run(["run", "--test", "-F", c.forward(",auth=token,token-file=" + c.path("no.token"))])
    expect(rc == 78 and "cannot open token file %s" % c.path("no.token") in log, "rc %d" % rc, log)


def test_killed_by_signal_is_128_plus_n(c):
    rc, out, log = c.run(["run", "--", "/bin/sh", "-c", "kill -KILL $$"])
    expect(rc == 137, "exit status %d, expected 137" % rc, log)


def test_plain_init_without_forwards(c):
    rc, out, log = c.run(["run", "--", "/bin/sh", "-c", "echo hello"], bind_alias=False)
    expect(rc == 0 and out.strip() == "hello", "rc %d out %r" % (rc, out), log)


def test_exec_failures(c):
    notexec = c.path("notexec")
    open(notexec, "w").close()
    os.chmod(notexec, 0o644)
    # No executable format: execvp(3) hands the file to /bin/sh, which fails on its first line.
    badelf = c.path("badelf")
    with open(badelf, "wb") as f:
        f.write(b"\x7fELF\x02\x01\x01garbage\n")
    os.chmod(badelf, 0o755)
    cases = [
        (["no-such-command-sf"], 127, "command not found"),
        ([badelf], 127, "not found"),
        ([c.path("missing")], 127, "no such file"),
        ([notexec], 126, "permission denied"),
        ([c.dir], 126, "permission denied"),
    ]
    for cmd, want, words in cases:
        rc, out, log = c.run(["run", "-F", c.forward(), "--"] + cmd)
        expect(rc == want, "%s: exit status %d, expected %d" % (cmd[0], rc, want), log)
        expect(words in log and cmd[0] in log, "%s: the log does not say %r" % (cmd[0], words), log)


# --- signals --------------------------------------------------------------------------------

# Reports every signal it gets on stdout; exits 0 on SIGTERM.
SIGNAL_SINK = """
import signal, sys, time
def got(n, f):
    print(signal.Signals(n).name, flush=True)
    if n == signal.SIGTERM:
        sys.exit(0)
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGTERM):
    signal.signal(s, got)
print('ready', flush=True)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(9)
"""


def test_sigterm_reaches_the_payload_and_exits_143_promptly(c):
    p = c.start(["run", "-F", c.forward(), "--", "sleep", "30"])
    wait_for(lambda: running(p.pid, ["sleep", "30"]), 5, "the payload to start")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(5 * WAIT_SCALE)
    except subprocess.TimeoutExpired:
        raise AssertionError("sockferry did not exit within %ds of SIGTERM" % (5 * WAIT_SCALE))
    expect(rc == 143, "exit status %d, expected 143" % rc, c.text("log"))
    # (an ASan build's exit, its leak check, takes time of its own)
    expect(time.monotonic() - t0 < 2 * WAIT_SCALE, "took %.1fs" % (time.monotonic() - t0), c.text("log"))


def test_every_forwarded_signal_reaches_the_payload(c):
    p = c.start(["run", "--"] + py(SIGNAL_SINK))
    wait_for(lambda: "ready" in c.text("out"), 10, "the payload to be ready")
    names = ["SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH"]
    for name in names:
        p.send_signal(getattr(signal, name))
        wait_for(lambda: name in c.text("out"), 5, name + " to reach the payload")
    p.send_signal(signal.SIGTERM)
    rc = p.wait(5)
    expect(rc == 0, "exit status %d" % rc, c.text("log"))
    expect("SIGTERM" in c.text("out"), "SIGTERM did not reach the payload", c.text("log"))


def test_signal_group_reaches_the_whole_process_group(c):
    marker, armed = c.path("grandchild-got-term"), c.path("grandchild-armed")
    child = ("trap 'echo term > %s; exit 0' TERM; : > %s; i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done"
             % (marker, armed))
    p = c.start(["run", "--signal-group", "--", "/bin/sh", "-c",
                 "/bin/sh -c \"$1\" & echo started; wait", "sh", child])
    wait_for(lambda: "started" in c.text("out") and os.path.exists(armed), 5, "the grandchild to set its trap")
    p.send_signal(signal.SIGTERM)
    rc = p.wait(5)
    expect(rc == 143, "exit status %d, expected 143" % rc, c.text("log"))
    wait_for(lambda: os.path.exists(marker), 3, "the grandchild to get SIGTERM")


# --- reaping and PID 1 ----------------------------------------------------------------------

# Double-forks a grandchild that dies after 0.2 s as an orphan, then, once the orphan is gone
# (reaped: no /proc entry, not even a zombie's; 5 s at most), looks for zombies whose parent is
# sockferry (its own parent). The grandchild reports who adopted it (sockferry, as a subreaper
# or as PID 1), and its pid.
ORPHAN = """
import os, sys, time
sockferry = os.getppid()
r, w = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        time.sleep(0.1)
        os.write(w, ('%d %d' % (os.getppid(), os.getpid())).encode())
        time.sleep(0.1)
        os._exit(0)
    os._exit(0)
os.wait()
adopter, orphan = map(int, os.read(r, 32).split())
deadline = time.monotonic() + 5
while os.path.exists('/proc/%d' % orphan) and time.monotonic() < deadline:
    time.sleep(0.01)
zombies = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            stat = open('/proc/%s/stat' % pid).read()
        except OSError:
            continue
        fields = stat.rsplit(')', 1)[1].split()
        if fields[0] == 'Z' and int(fields[1]) == sockferry:
            zombies.append(pid)
print('adopter=%d sockferry=%d zombies=%s' % (adopter, sockferry, ','.join(zombies) or 'none'))
sys.exit(0 if adopter == sockferry and not zombies else 1)
"""


def test_orphan_is_reaped_by_the_subreaper(c):
    rc, out, log = c.run(["run", "--"] + py(ORPHAN), bind_alias=False)
    expect(rc == 0, "payload said %r" % out.strip(), log)


def test_orphan_is_reaped_as_pid_1(c):
    rc, out, log = c.run(["run", "--"] + py(ORPHAN), bind_alias=False, pidns=True)
    expect(rc == 0 and "sockferry=1 " in out, "payload said %r" % out.strip(), log)


# The payload of the PID 1 tests: starts $1 in the background, waits until it has set its trap
# (the file %s exists), then exits %d and leaves it behind.
UNTIL_ARMED = '/bin/sh -c "$1" & while [ ! -e %s ]; do sleep 0.01; done; exit %d'


def test_pid_1_terminates_the_processes_left_behind(c):
    marker, armed = c.path("leftover-got-term"), c.path("leftover-armed")
    leftover = ("trap 'echo term > %s; exit 0' TERM; : > %s; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done"
                % (marker, armed))
    t0 = time.monotonic()
    rc, out, log = c.run(["run", "--", "/bin/sh", "-c", UNTIL_ARMED % (armed, 4), "sh", leftover],
                         bind_alias=False, pidns=True)
    took = time.monotonic() - t0
    expect(rc == 4, "exit status %d, expected 4" % rc, log)
    expect(os.path.exists(marker), "the leftover process did not get SIGTERM", log)
    # (below the 5 s grace period it would wait out, however slow the build)
    expect(took < min(3 * WAIT_SCALE, 4.5), "took %.1fs" % took, log)


def test_pid_1_grace_period_is_bounded(c):
    armed = c.path("stubborn-armed")
    stubborn = "trap '' TERM; : > %s; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done" % armed
    t0 = time.monotonic()
    rc, out, log = c.run(["run", "--", "/bin/sh", "-c", UNTIL_ARMED % (armed, 0), "sh", stubborn],
                         bind_alias=False, pidns=True)
    took = time.monotonic() - t0
    expect(rc == 0, "exit status %d" % rc, log)
    expect(4 < took < 9, "took %.1fs, expected the 5 s grace period" % took, log)
    expect("still running" in log, "the log does not say why it waited", log)


# --- privileges -----------------------------------------------------------------------------

STATUS = """
import os, sys
for line in open('/proc/%s/status' % sys.argv[1]):
    k = line.split(':')[0]
    if k in ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs'):
        print('%s=%s' % (k, ' '.join(line.split()[1:])))
"""


def test_user_nobody_has_no_capabilities(c):
    rc, out, log = c.run(["run", "--user", "nobody", "-F", c.forward(), "--"] + py(STATUS) + ["self"])
    st = env_lines(out)
    expect(rc == 0, "exit status %d" % rc, log)
    expect(st["Uid"] == "65534 65534 65534 65534" and st["Gid"] == "65534 65534 65534 65534", "ids: %r" % st, log)
    expect(st["Groups"] == "", "supplementary groups kept: %r" % st["Groups"], log)
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        expect(st[k] == "0000000000000000", "%s is %s" % (k, st[k]), log)


def test_user_can_use_its_socket_and_no_new_privs(c):
    conf = c.path("sockferry.conf")
    with open(conf, "w") as f:
        f.write("[sockferry]\nuser = nobody\nno-new-privs = yes\n\n[broker]\nlisten = unix:%s\nconnect = unix:%s\n"
                "env = X_SOCK\n" % (c.listen, c.upstream))
    code = CONNECT_NOW.replace("print(s.recv(100).decode())",
                               "print(s.recv(100).decode())\nprint('nnp=' + [l for l in open('/proc/self/status') "
                               "if l.startswith('NoNewPrivs')][0].split()[1])")
    rc, out, log = c.run(["run", "-c", conf, "--", "/bin/sh", "-c", 'exec %s -c "$1" "$X_SOCK"' % PYTHON, "sh", code])
    expect(rc == 0 and "echo:ping" in out, "rc %d, payload said %r" % (rc, out), log)
    expect("nnp=1" in out, "no-new-privs not set: %r" % out, log)


def test_a_mounted_socket_only_root_can_use_is_served_to_the_payloads_user(c):
    """Docker Desktop 4.72 and others pass some -v socket mounts through, root's and 0660: the
    container's user cannot open them. run (root) takes the mounted path as its first
    candidate and serves it to the payload's user (README, "When you do not need sockferry")."""
    need_root()
    os.chmod(c.upstream, 0o660)
    st = os.stat(c.upstream)
    expect(st.st_uid == 0 and st.st_gid == 0, "the stand-in for the mounted socket is not root's: %r" % (st,))
    fwd = ("broker:unix:%s=unix:%s|tcp:127.0.0.1:9,owner=nobody,mode=0600,env=X_SOCK"
           % (c.listen, c.upstream))
    # run's socket, then the mounted one itself
    both = CONNECT_NOW + "path = sys.argv[2]" + CONNECT_NOW.split("path = sys.argv[1]", 1)[1]
    rc, out, log = c.run(["run", "--user", "nobody", "-F", fwd, "--", "/bin/sh", "-c",
                          'exec %s -c "$1" "$X_SOCK" "$2"' % PYTHON, "sh", both, c.upstream])
    expect("echo:ping" in out, "through run's socket: %r" % out, log)
    expect("connect failed: [Errno 13] Permission denied" in out and rc == 3,
           "the mounted socket itself should refuse nobody: rc %d, %r" % (rc, out), log)
    lst = os.stat(c.listen) if os.path.exists(c.listen) else None
    expect(lst is None, "run's socket outlived it", log)


def test_relay_keeps_only_cap_kill(c):
    # A TCP upstream: nothing calls for CAP_DAC_OVERRIDE, so only CAP_KILL (bit 5) stays.
    fwd = "broker:unix:%s=tcp:127.0.0.1:9" % c.listen
    rc, out, log = c.run(["run", "--user", "nobody", "-F", fwd, "--"] + py(STATUS.replace("sys.argv[1]", "os.getppid()")))
    st = env_lines(out)
    expect(rc == 0, "exit status %d" % rc, log)
    expect(st["Uid"].split()[0] == "0", "the relay changed user: %r" % st, log)
    expect(st["CapEff"] == "0000000000000020" and st["CapPrm"] == "0000000000000020", "relay caps: %r" % st, log)
    for k in ("CapInh", "CapBnd", "CapAmb"):
        expect(st[k] == "0000000000000000", "relay %s is %s" % (k, st[k]), log)


def test_payload_starts_with_clean_signal_state(c):
    code = "\n".join([
        "for line in open('/proc/self/status'):",
        "    if line.split(':')[0] in ('SigBlk', 'SigIgn'):",
        "        print(line.split(':')[0] + '=' + line.split()[1])",
    ])
    rc, out, log = c.run(["run", "--"] + py(code), bind_alias=False)
    st = env_lines(out)
    expect(rc == 0, "exit status %d" % rc, log)
    expect(st["SigBlk"] == "0000000000000000", "blocked: %s" % st["SigBlk"], log)
    # Python itself ignores SIGPIPE (bit 13, 0x1000) and SIGXFSZ (bit 25, 0x1000000).
    expect(int(st["SigIgn"], 16) & ~0x1001000 == 0, "ignored: %s" % st["SigIgn"], log)


def test_payload_gets_the_terminal_foreground(c):
    if not shutil.which("script"):
        raise Skip("script(1) is not installed")
    code = "import os; print('fg=%s' % (os.tcgetpgrp(0) == os.getpgrp() and os.getpgrp() == os.getpid()))"
    cmd = "exec %s run -- %s -c \"%s\"" % (SOCKFERRY, PYTHON, code)
    p = subprocess.Popen(["script", "-qec", cmd, "/dev/null"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    c.procs.append(p)
    out = p.communicate(timeout=20)[0].decode(errors="replace")
    expect("fg=True" in out, "payload output: %r" % out)


# --- a container user that is not root (issue 34) ---------------------------------------------

APP = 1000


def as_app(c, xdg=False, extra=""):
    """Shell lines that make the container as `docker run -u 1000` sees it: a fresh /run (root's,
    0755: /run/sockferry cannot be made) and /tmp, this test's directory at /run/host; then
    sockferry runs as uid 1000 with no groups (setpriv), XDG_RUNTIME_DIR=/run/user/1000 with xdg."""
    if not shutil.which("setpriv"):
        raise Skip("setpriv is not installed")
    os.chmod(c.upstream, 0o666)
    lines = ["set -e", "mount -t tmpfs -o mode=0755 sf-run /run", "mkdir /run/host",
             "mount --bind %s /run/host" % c.dir,
             # the binary from where uid 1000 reaches it under the fresh /tmp (a build tree
             # under /tmp, as a CI clone may be, is hidden by it)
             'install -m 0755 "$SOCKFERRY" /run/host/.sockferry', "SOCKFERRY=/run/host/.sockferry",
             "mount -t tmpfs -o mode=1777 sf-tmp /tmp"]
    if xdg:
        lines += ["mkdir -p /run/user/%d" % APP, "chown %d:%d /run/user/%d" % (APP, APP, APP),
                  "chmod 0700 /run/user/%d" % APP, "export XDG_RUNTIME_DIR=/run/user/%d" % APP]
    else:
        lines.append("unset XDG_RUNTIME_DIR")
    lines += [extra, "set +e",
              'exec setpriv --reuid %d --regid %d --clear-groups "$SOCKFERRY" "$@"' % (APP, APP)]
    return "\n".join(lines) + "\n"


USE_ITS_SOCKET = """
import os, socket, stat
p = os.environ['A_SOCK']
st = os.stat(os.path.dirname(p))
print('dir=%s uid=%d mode=%o' % (os.path.dirname(p), st.st_uid, stat.S_IMODE(st.st_mode)))
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(p)
s.sendall(b'ping')
print(s.recv(100).decode())
"""

APP_FORWARD = "a:unix:/run/sockferry/a.sock=unix:/run/host/host.sock,env=A_SOCK"


def test_a_user_that_cannot_make_run_sockferry_gets_its_own_directory(c):
    rc, out, log = c.run(["run", "-F", APP_FORWARD, "--"] + py(USE_ITS_SOCKET), bind_alias=False, pre=as_app(c))
    expect(rc == 0 and "echo:ping" in out, "rc %d, payload said %r" % (rc, out), log)
    expect("dir=/tmp/sockferry-%d uid=%d mode=700" % (APP, APP) in out, "the place: %r" % out, log)
    expect("uid %d may not create files in /run (Permission denied), so the sockets configured under /run/sockferry "
           "are made in /tmp/sockferry-%d instead (XDG_RUNTIME_DIR is not set)" % (APP, APP) in log,
           "the place is not named", log)


def test_a_user_with_an_xdg_runtime_dir_gets_it(c):
    rc, out, log = c.run(["run", "-F", APP_FORWARD, "--"] + py(USE_ITS_SOCKET), bind_alias=False,
                         pre=as_app(c, xdg=True))
    expect(rc == 0 and "echo:ping" in out, "rc %d, payload said %r" % (rc, out), log)
    expect("dir=/run/user/%d/sockferry uid=%d mode=700" % (APP, APP) in out, "the place: %r" % out, log)
    expect("are made in /run/user/%d/sockferry instead;" % APP in log, "the place is not named", log)
    # -t says where (tests/relay/test_safedir.c: and makes nothing).
    rc, out, log = c.run(["run", "-t", "-F", APP_FORWARD], bind_alias=False, pre=as_app(c, xdg=True))
    expect(rc == 0 and "would be made in /run/user/%d/sockferry" % APP in log, "rc %d" % rc, log)
    expect("/run/user/%d/sockferry/a.sock" % APP in out, "-t prints the place: %r" % out, log)


def test_an_own_directory_someone_else_made_is_refused(c):
    marker = c.path("started")
    rc, out, log = c.run(["run", "-F", APP_FORWARD, "--", "touch", marker], bind_alias=False,
                         pre=as_app(c, extra="mkdir -m 0755 /tmp/sockferry-%d; chown 65534 /tmp/sockferry-%d" % (APP, APP)))
    expect(rc == 78, "exit status %d" % rc, log)
    expect("the socket directory /tmp/sockferry-%d exists and is not this user's own (a directory owned by nobody "
           "(uid 65534), mode 0755)" % APP in log, "the squatter is not named", log)
    expect(not os.path.exists(marker), "the payload started", log)


def test_a_directory_a_user_may_not_make_names_its_own_place(c):
    rc, out, log = c.run(["run", "-F", "a:unix:/run/ward/a.sock=unix:/run/host/host.sock", "--", "true"],
                         bind_alias=False, pre=as_app(c))
    expect(rc == 1, "exit status %d" % rc, log)
    expect("cannot create the directory /run/ward: Permission denied: uid %d may not make it there" % APP in log
           and "listen under /tmp/sockferry-%d" % APP in log and "install -d -o %d /run/ward" % APP in log,
           "no hint", log)


def test_a_token_the_user_cannot_read_says_what_fixes_it(c):
    token = c.path("token")
    assert subprocess.run([SOCKFERRY, "keygen", "-o", token], capture_output=True).returncode == 0
    os.chmod(token, 0o400)
    fwd = "a:unix:/run/sockferry/a.sock=tcp:127.0.0.1:9,auth=token,token-file=/run/host/token"
    rc, out, log = c.run(["run", "-F", fwd, "--", "true"], bind_alias=False, pre=as_app(c))
    expect(rc == 78, "exit status %d" % rc, log)
    expect("token file /run/host/token: uid %d (gid %d) cannot read it: it is owned by root (uid 0), gid 0, mode 0400"
           % (APP, APP) in log and 'uid: "%d" and mode: 0400' % APP in log, "no owner, mode or fix", log)


@contextlib.contextmanager
def as_root():
    need_root("for namespaces")
    yield


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene.of(Container), setup=as_root)
