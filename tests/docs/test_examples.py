#!/usr/bin/env python3
"""Runs every shell and config example of README.md and doc/*.md (TAP output).

Usage: test_examples.py SOURCE_ROOT        (environment: SOCKFERRY, the binary to put on PATH)

Blocks run: ```sh (or bash, shell), ```console (its `$ ` lines) and ```ini. Windows blocks
(```bat, cmd, powershell, ps1, pwsh) cannot run here: each must carry a `skip` marker, so that it
is listed with its reason. An HTML comment on the line just before the fence steers a block:

    <!-- doctest: DIRECTIVE; DIRECTIVE; ... -->

  skip REASON    not run; listed with its reason as a TAP diagnostic (neither pass nor fail)
  then           runs in the scenario of the block before it (same namespaces, scratch
                 directory and background processes); any other block starts a new scenario
  background     (sh) runs in the background; the next block starts once it listens (a new
                 listening socket appeared); it is stopped when the scenario ends
  file PATH      (ini) written to PATH, where the blocks that follow use it
  service EP     a stand-in HTTP service on EP (unix:/PATH or tcp:127.0.0.1:PORT), started
                 before the block, for the real one (docker.sock, an agent) that is not here:
                 the harness's http server (tests/lib/sfservers.py), answering "stand-in for
                 EP: PATH"
  token PATH     a fresh token at PATH, as a mounted secret would be
  mount SRC DST  SRC bind-mounted at DST, as `docker run -v SRC:DST` would do
  user NAME      the user and group NAME exist
  exit N         the status the block must end with (default 0)
  timeout S      seconds the block may take (default 30)

An ini block is checked with `sockferry relay -t -c FILE` (validates, binds nothing; where the
binary has no -t yet, with `sockferry check`, failing only on its usage/configuration statuses). A sh
block runs under `bash -e -o pipefail` as root in a scratch directory, with the build's
sockferry first on PATH and HOME in the scratch directory. Each scenario has its own mount and
network namespace: loopback up, a private /etc (an overlay) whose /etc/hosts maps the names
container engines give the host (host.docker.internal, host.lima.internal, ...) to 127.0.0.1,
and a private tmpfs on /run (so /run/secrets, /var/run/docker.sock are the scenario's own).
A failing block prints its file:line, the block, its output and the output of the scenario's
background processes.
"""
import contextlib
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import SERVERS, Skip  # noqa: E402

RUN_LANGS = {"sh": "sh", "bash": "sh", "shell": "sh", "console": "console", "ini": "ini"}
WINDOWS_LANGS = {"bat", "batch", "cmd", "powershell", "ps1", "pwsh"}
HOST_NAMES = ("host.docker.internal", "host.lima.internal", "host.containers.internal",
              "host.orb.internal", "gateway.docker.internal")
FENCE = re.compile(r"^(\s*)(`{3,})([\w-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*doctest:(.*?)-->\s*$")

class Block:
    def __init__(self, path, line, lang, text, directives):
        self.path, self.line, self.lang, self.text = path, line, lang, text
        self.where = f"{path}:{line}"
        self.skip = None
        self.then = self.background = False
        self.file = None
        self.exit = 0
        self.timeout = 30
        self.setup = []          # (kind, args) stand-ins, in order
        self.error = None
        for d in directives:
            words = d.split()
            if not words:
                continue
            op, args = words[0], words[1:]
            if op == "skip":
                self.skip = " ".join(args) or None
                if not self.skip:
                    self.error = "`skip` needs a reason"
            elif op == "then" and not args:
                self.then = True
            elif op == "background" and not args and self.lang != "ini":
                self.background = True
            elif op == "file" and len(args) == 1 and self.lang == "ini":
                self.file = args[0]
            elif op in ("service", "token", "user") and len(args) == 1:
                self.setup.append((op, args))
            elif op == "mount" and len(args) == 2:
                self.setup.append((op, args))
            elif op in ("exit", "timeout") and len(args) == 1 and args[0].isdigit():
                setattr(self, op, int(args[0]))
            else:
                self.error = f"unknown or malformed doctest directive {d.strip()!r}"

    def script(self):
        if self.lang != "console":
            return self.text
        cmds, cont = [], False
        for line in self.text.splitlines():
            if cont or line.startswith("$ "):
                cmds.append(line if cont else line[2:])
                cont = line.endswith("\\")
        return "\n".join(cmds) + "\n"


def blocks_of(root, rel):
    lines = (root / rel).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        if lang not in RUN_LANGS and lang not in WINDOWS_LANGS:
            continue
        prev = lines[start - 1] if start > 0 else ""
        mk = MARKER.match(prev)
        directives = []
        if mk:
            # `skip` takes the rest of the marker as its reason, semicolons included.
            head, sep, reason = mk.group(1).partition("skip ")
            directives = [d for d in head.split(";") if d.strip()]
            if sep:
                directives.append("skip " + reason)
        out.append(Block(rel, start + 1, RUN_LANGS.get(lang, lang), "\n".join(body) + "\n", directives))
    return out


def listeners(pid):
    """Listening TCP and unix sockets in the network namespace of pid."""
    n = 0
    for name in ("tcp", "tcp6"):
        try:
            rows = pathlib.Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        n += sum(1 for r in rows if r.split()[3] == "0A")
    try:
        rows = pathlib.Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
        n += sum(1 for r in rows if r.split()[3] == "00010000")
    except OSError:
        pass
    return n


class Scenario:
    """A mount and network namespace held open by a sleeping process, plus a scratch dir."""

    def __init__(self, sockferry):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="sf-doctest."))
        self.work, self.home, self.bin = self.dir / "work", self.dir / "home", self.dir / "bin"
        for d in (self.work, self.home, self.bin, self.dir / "etc-up", self.dir / "etc-work"):
            d.mkdir()
        (self.bin / "sockferry").symlink_to(sockferry)
        self.env = {"PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": str(self.home), "LANG": "C.UTF-8", "TERM": "dumb", "USER": "root"}
        # A sanitizer build's settings reach the examples' sockferry as CI set them.
        self.env.update({k: v for k, v in os.environ.items() if k.endswith("SAN_OPTIONS")})
        self.background = []    # (Popen, log path, what)
        self.holder = subprocess.Popen(["unshare", "--mount", "--net", "--propagation", "private",
                                        "sleep", "infinity"], stdin=subprocess.DEVNULL)
        for _ in range(200):
            try:
                if os.readlink(f"/proc/{self.holder.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                    break
            except OSError:
                pass
            time.sleep(0.01)
        hosts = "127.0.0.1 localhost\n::1 localhost\n127.0.0.1 " + " ".join(HOST_NAMES) + "\n"
        try:
            self.sh("ip link set lo up\n"
                    f"mount -t overlay overlay -o lowerdir=/etc,upperdir={self.dir}/etc-up,"
                    f"workdir={self.dir}/etc-work /etc\n"
                    f"printf %s {shlex.quote(hosts)} > /etc/hosts\n"
                    "mount -t tmpfs -o mode=0755 tmpfs /run\n", check=True)
        except BaseException:
            self.close()
            raise

    def cmd(self, argv):
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "--"] + argv

    def sh(self, script, check=False, timeout=30, log=None):
        out = open(log, "w+") if log else tempfile.TemporaryFile("w+")
        try:
            r = subprocess.run(self.cmd(["bash", "-e", "-o", "pipefail", "-c", script]),
                               cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                               stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
            status = r.returncode
        except subprocess.TimeoutExpired:
            status = None
        out.seek(0)
        text = out.read()
        out.close()
        if check and status != 0:
            raise RuntimeError(f"scenario set-up failed ({status}): {text}")
        return status, text

    def start(self, argv, what):
        """Starts argv in the namespaces in the background; waits until it listens."""
        log = self.dir / f"bg{len(self.background)}.log"
        before = listeners(self.holder.pid)
        p = subprocess.Popen(self.cmd(argv), cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
                             stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        self.background.append((p, log, what))
        deadline, seen, stable_since = time.monotonic() + 10, before, None
        while time.monotonic() < deadline:
            if p.poll() is not None:
                return f"{what} exited with status {p.returncode} before it listened"
            n = listeners(self.holder.pid)
            if n != seen:
                seen, stable_since = n, time.monotonic()
            elif n > before and time.monotonic() - stable_since > 0.3:
                return None
            time.sleep(0.05)
        return f"{what} opened no listening socket within 10 s"

    def background_logs(self):
        out = []
        for p, log, what in self.background:
            state = "running" if p.poll() is None else f"exited {p.returncode}"
            out.append(f"--- background: {what} ({state}) ---\n{log.read_text(errors='replace')}")
        return "\n".join(out)

    def close(self):
        try:
            ino = os.stat(f"/proc/{self.holder.pid}/ns/net").st_ino
        except OSError:
            ino = None
        for sig in (signal.SIGTERM, signal.SIGKILL) if ino else ():
            pids = []
            for d in pathlib.Path("/proc").iterdir():
                if not d.name.isdigit() or int(d.name) == os.getpid():
                    continue
                try:
                    if os.stat(d / "ns" / "net").st_ino == ino:
                        pids.append(int(d.name))
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
                for p, _, _ in self.background:
                    p.poll()
                self.holder.poll()
                time.sleep(0.05)
        self.holder.kill()
        for p, _, _ in self.background:
            p.wait()
        self.holder.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def set_up(sc, kind, args):
    """A stand-in the block declared; returns an error text or None."""
    if kind == "service":
        ep = args[0]
        if not re.match(r"^(unix:/\S+|tcp:127\.0\.0\.1:\d+)$", ep):
            return f"service {ep}: expected unix:/PATH or tcp:127.0.0.1:PORT"
        if ep.startswith("unix:"):
            p = shlex.quote(ep[5:])
            st, out = sc.sh(f"mkdir -p \"$(dirname {p})\"; rm -f {p}")
            if st != 0:
                return f"service {ep}: {out.strip()}"
        return sc.start(["python3", SERVERS, "http", ep, f"stand-in for {ep}"], f"stand-in service {ep}")
    if kind == "token":
        p = shlex.quote(args[0])
        st, out = sc.sh(f"mkdir -p -m 0700 \"$(dirname {p})\"; sockferry keygen --force -o {p}")
    elif kind == "mount":
        src, dst = (shlex.quote(a) for a in args)
        st, out = sc.sh(f"mkdir -p \"$(dirname {dst})\"; [ -d {src} ] && mkdir -p {dst} || touch {dst}\n"
                        f"mount --bind {src} {dst}")
    else:
        n = shlex.quote(args[0])
        st, out = sc.sh(f"getent passwd {n} >/dev/null || useradd --system --user-group --no-create-home {n}")
    return None if st == 0 else f"{kind} {' '.join(args)}: {out.strip()}"


def ini_checker(sockferry):
    """How to validate a config: `relay -t` where the binary has it."""
    h = subprocess.run([sockferry, "relay", "--help"], capture_output=True, text=True)
    if "--test" in h.stdout + h.stderr:
        return "sockferry relay -t -c FILE", lambda f: ["sockferry", "relay", "-t", "-c", f]
    # Before the config test mode: `check` loads the file the same way and exits 64/78 on a
    # usage or configuration error; its verdict on the link (0 or 1) is not asked for here.
    return "sockferry check -c FILE (this build has no relay -t; 64/78 fail)", lambda f: [
        "sh", "-c", 'sockferry check --timeout 1s -c "$1" >/dev/null; s=$?; [ $s != 64 ] && [ $s != 78 ] || exit $s', "sh", f]


def run_block(sc, b, check_argv):
    for kind, args in b.setup:
        err = set_up(sc, kind, args)
        if err:
            return False, err
    if b.lang == "ini":
        path = b.file or str(sc.work / f"block-{b.line}.conf")
        q = shlex.quote(path)
        st, out = sc.sh(f"mkdir -p \"$(dirname {q})\"; cat > {q} <<'SF_DOCTEST_EOF'\n{b.text}SF_DOCTEST_EOF\n")
        if st != 0:
            return False, f"could not write {path}: {out}"
        st, out = sc.sh(shlex.join(check_argv(path)), timeout=b.timeout)
        what = f"{shlex.join(check_argv(path))} exited {st}, expected {b.exit}"
    elif b.background:
        err = sc.start(["bash", "-e", "-o", "pipefail", "-c", b.script()], f"{b.where} (background)")
        return err is None, err or ""
    else:
        st, out = sc.sh(b.script(), timeout=b.timeout)
        what = (f"timed out after {b.timeout} s" if st is None else f"exited {st}") + f", expected {b.exit}"
    return st == b.exit, f"{what}\n{out}"


ROOT = pathlib.Path(sys.argv[1])
SOCKFERRY = os.environ.get("SOCKFERRY")
FILES = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "doc").glob("*.md"))


def run_examples(rel):
    """Runs the blocks of one file, each scenario in namespaces of its own; every runnable block
    must pass. Each block's outcome, and each skipped block with its reason, is a TAP comment."""
    if rel == FILES[0]:
        print(f"# ini blocks are checked with: {CHECK_ARGV[0]}", flush=True)
    failed = []
    sc = None
    try:
        for b in blocks_of(ROOT, rel):
            desc = f"{b.where} ({b.lang}{', background' if b.background else ''})"
            if b.error:
                ok, detail = False, b.error
            elif b.skip:
                print(f"# skipped {b.where} ({b.lang}): {b.skip}", flush=True)
                continue
            elif b.lang in WINDOWS_LANGS:
                ok, detail = False, "a Windows block cannot run here: put `<!-- doctest: skip REASON -->` before it"
            elif b.then and sc is None:
                ok, detail = False, "`then` but no runnable block before it in this file"
            else:
                if not b.then:
                    if sc:
                        sc.close()
                        sc = None
                    try:
                        sc = Scenario(SOCKFERRY)
                    except (OSError, RuntimeError) as e:
                        failed.append((desc, f"cannot set up the namespaces: {e}"))
                        continue
                ok, detail = run_block(sc, b, CHECK_ARGV[1])
                if not ok:
                    detail = (f"{b.where}: {b.lang} block failed: {detail}\n--- block ---\n{b.text}"
                              + sc.background_logs())
            print(f"# {'ok' if ok else 'not ok'} {desc}", flush=True)
            if not ok:
                failed.append((desc, detail.rstrip()))
    finally:
        if sc:
            sc.close()
    assert not failed, "\n\n".join(f"{desc}: {detail}" for desc, detail in failed)


def examples_of(rel):
    """The test of one file's examples."""
    def test():
        run_examples(rel)
    test.__name__ = "test_the_examples_of_" + rel
    return test


# How an ini block is checked (ini_checker: what to say, the command), found by the run's set-up.
CHECK_ARGV = []


@contextlib.contextmanager
def examples_setup():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        raise Skip("needs root, unshare and nsenter: every example runs in its own mount and network namespace")
    assert SOCKFERRY and os.access(SOCKFERRY, os.X_OK), "SOCKFERRY names the built binary (meson test sets it)"
    CHECK_ARGV.extend(ini_checker(SOCKFERRY))
    yield


if __name__ == "__main__":
    sftap.main([examples_of(rel) for rel in FILES], setup=examples_setup)
