#!/usr/bin/env python3
"""Local attack surface: listen paths, aliases and token files another user controls, and
listen addresses decided on what they resolve to (issue 15, items 3, 4 and 5).

Each attack runs as uid 65534 (nobody) against a relay running as root, the way it was
reproduced: (a) nobody renames the relay's socket away in a directory it can write and binds
its own; (b) nobody swaps a symbolic link in its own directory between its own stale socket
and root's live one, so the relay deletes the live one; (c) nobody's link makes root create
its socket where the link points. The relay must refuse such paths (exit 78, naming the
directory or link, its owner and the fix) and leave everything alone; safe places still work.
A token is judged by who can change it: uid 501's is taken, nobody's planted where anyone may
create files is not; keygen --force never writes into nobody's file. A root relay makes a
socket for uid 1000 in uid 1000's own directory, as that user (issue 34).
A tcp: name that looks like loopback but resolves to every address needs auth.
Root only (the attacker is another uid); skipped otherwise. Each test gets a Scene
(tests/lib/sfharness.py) for what it starts."""

import os
import pwd
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Net, Scene, Skip, free_port, need_root, run_sockferry  # noqa: E402

NOBODY = 65534
# The attacker's interpreter must be one uid 65534 can run (not one under /root).
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
BANNER = b"SSH-2.0-"
ATTACKER = "the attacker runs as uid %d against a root relay" % NOBODY


def as_nobody():
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def nobody_python(sc, code, *args):
    return sc.popen([PYTHON, "-c", code] + list(args), stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, preexec_fn=as_nobody, text=True)


def base_dir(sc):
    """A directory root owns that nobody may enter but not change."""
    return sc.tmpdir(mode=0o755)


def sticky_dir(path):
    """A directory root owns that everyone may write, sticky (as /tmp)."""
    os.mkdir(path)
    os.chmod(path, 0o1777)
    return path


def nobody_symlink(sc, target, link):
    """nobody makes the symbolic link link to target."""
    p = nobody_python(sc, "import os, sys; os.symlink(sys.argv[1], sys.argv[2])", target, link)
    assert p.wait() == 0, p.communicate()[1]


def nobody_dir(path, mode=0o755):
    os.mkdir(path)
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, mode)
    return path


def upstream(sc, path):
    """A root service on a unix socket that greets every connection with a banner line."""
    return sc.server("banner", path)


def start(sc, args, prefix=None):
    """(None, relay) when the relay became ready, (status, log) when it exited first."""
    r = sc.relay(args, wait_ready=False, prefix=prefix)
    if r.started():
        return None, r
    return r.proc.returncode, r.kill()


def assert_refused(outcome, *needles, attack=None):
    rc, r = outcome
    if rc is None:
        detail = attack(r) if attack else ""
        r.stop(expect=None)
        raise AssertionError("the relay started on an unsafe path%s" % (": " + detail if detail else ""))
    assert rc == 78, "exit %s, expected 78 (configuration error):\n%s" % (rc, r)
    for n in needles:
        assert n in r, "%r is not in the log:\n%s" % (n, r)


HIJACK = r'''
import os, socket, sys
path = sys.argv[1]
os.rename(path, path + ".moved")
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(1)
s.settimeout(5)
print("bound", flush=True)
c, _ = s.accept()
c.settimeout(5)
print(c.recv(100).decode(), flush=True)
'''


def test_a_nobody_cannot_take_over_a_socket_in_its_writable_directory(sc):
    need_root(ATTACKER)
    base = base_dir(sc)
    up = upstream(sc, os.path.join(base, "up.sock"))
    shared = nobody_dir(os.path.join(base, "shared"), 0o777)
    path = os.path.join(shared, "s.sock")

    def attack(r):
        p = nobody_python(sc, HIJACK, path)
        if p.stdout.readline().strip() != "bound":
            return "nobody could not take over (%s)" % p.communicate()[1]
        c = socket.socket(socket.AF_UNIX)
        c.connect(path)
        c.sendall(b"root's request\n")
        out, _ = p.communicate(timeout=10)
        c.close()
        return "nobody renamed the relay's socket away and received: %r" % out.strip()

    assert_refused(start(sc, ["relay", "-F", "a:unix:%s=unix:%s" % (path, up.where)]),
                   "the directory %s is owned by nobody (uid 65534) with mode 0777" % shared,
                   "chown root %s; chmod go-w %s" % (shared, shared), attack=attack)
    assert not os.path.exists(path), "the relay left a socket behind"


def test_a_a_world_writable_root_directory_is_refused_too(sc):
    need_root(ATTACKER)
    base = base_dir(sc)
    shared = os.path.join(base, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    rc, log = start(sc, ["relay", "-F", "a:unix:%s/deeper/s.sock=tcp:127.0.0.1:9" % shared])
    if rc is None:
        log = log.stop(expect=None)
    assert rc == 78, (rc, log)
    assert "the directory %s is owned by root (uid 0) with mode 0777, so any user" % shared in log, log
    assert "chmod go-w %s" % shared in log, log
    assert not os.path.exists(os.path.join(shared, "deeper")), "a directory was made below it"


SWAP = r'''
import os, socket, sys, time
own, link, root_dir, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
if not os.path.exists(os.path.join(own, "live.sock")):
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(own, "live.sock"))
    s.close()  # a stale socket of nobody's
print("ready", flush=True)
tmp = link + ".tmp"
end = time.monotonic() + seconds
while time.monotonic() < end:
    for target in (own, root_dir):
        try:
            os.symlink(target, tmp)
            os.rename(tmp, link)
        except OSError:
            pass
'''


def live(path):
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(path)
        return True
    except OSError:
        return False
    finally:
        c.close()


def test_b_nobody_cannot_make_the_relay_delete_a_live_socket(sc):
    need_root(ATTACKER)
    base = base_dir(sc)
    root_dir = os.path.join(base, "root")
    os.mkdir(root_dir, 0o755)
    victim = upstream(sc, os.path.join(root_dir, "live.sock"))
    mine = nobody_dir(os.path.join(base, "nobody"))
    own = nobody_dir(os.path.join(mine, "own"))
    link = os.path.join(mine, "p")
    os.symlink(own, link)
    os.lchown(link, NOBODY, NOBODY)
    up = upstream(sc, os.path.join(base, "up.sock"))
    # The swap races the relay's probe and its unlink, as in the report; whether or not a
    # start hits the window, a relay that accepts a path through nobody's directory fails.
    codes = []
    for attempt in range(20):
        with Scene() as attempt_sc:
            p = nobody_python(attempt_sc, SWAP, own, link, root_dir, "3")
            assert p.stdout.readline().strip() == "ready", p.communicate()[1]
            rc, r = start(attempt_sc, ["relay", "-F", "b:unix:%s/live.sock=unix:%s" % (link, up.where)])
            p.kill()
            p.communicate()
            if rc is None:
                r.stop(expect=None)
        if not live(victim.where):
            raise AssertionError("nobody made the root relay delete the live socket %s (attempt %d)"
                                 % (victim.where, attempt + 1))
        codes.append(rc)
        if rc == 78:
            assert "the directory %s is owned by nobody (uid 65534)" % mine in r, r
            break
    else:
        raise AssertionError("the relay never refused the path through nobody's directory (exit %s)" % codes)


def test_c_nobodys_link_does_not_decide_where_root_creates_its_socket(sc):
    need_root(ATTACKER)
    base = base_dir(sc)
    target = os.path.join(base, "target")
    os.mkdir(target, 0o755)
    mine = nobody_dir(os.path.join(base, "nobody"))
    sticky = sticky_dir(os.path.join(base, "sticky"))
    # A link in nobody's own directory, and nobody's link in a sticky directory root owns.
    for parent, needle in ((mine, "the directory %s is owned by nobody (uid 65534)" % mine),
                           (sticky, "the symbolic link %s/l is owned by nobody (uid 65534)" % sticky)):
        nobody_symlink(sc, target, os.path.join(parent, "l"))
        assert_refused(start(sc, ["relay", "-F", "c:unix:%s/l/s.sock=tcp:127.0.0.1:9" % parent]), needle,
                       attack=lambda r: "root created %s" % os.listdir(target))
        assert os.listdir(target) == [], "root created %s in the link's target" % os.listdir(target)


def test_safe_places_still_work_sticky_tmp_and_roots_links(sc):
    need_root(ATTACKER)
    base = base_dir(sc)
    sticky = sticky_dir(os.path.join(base, "sticky"))
    real = os.path.join(base, "real")
    os.mkdir(real, 0o755)
    os.symlink(real, os.path.join(base, "link"))
    up = upstream(sc, os.path.join(base, "up.sock"))
    rc, r = start(sc, ["relay",
                       "-F", "t:unix:%s/t.sock=unix:%s" % (sticky, up.where),
                       "-F", "l:unix:%s/link/made/l.sock=unix:%s" % (base, up.where)])
    assert rc is None, "refused a safe place (%s):\n%s" % (rc, r)
    for path in ("%s/t.sock" % sticky, "%s/made/l.sock" % real):
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(5)
        c.connect(path)
        assert c.recv(100).startswith(BANNER)
        c.close()
    st = os.stat(os.path.join(real, "made"))
    assert st.st_uid == 0 and st.st_mode & 0o7777 == 0o755, oct(st.st_mode)
    r.stop()
    assert not os.path.exists("%s/t.sock" % sticky) and not os.path.exists("%s/made/l.sock" % real), \
        "the relay did not remove its sockets"


def test_close_leaves_a_socket_that_replaced_ours(sc):
    need_root(ATTACKER)
    base = base_dir(sc)
    up = upstream(sc, os.path.join(base, "up.sock"))
    path = os.path.join(base, "s.sock")
    rc, r = start(sc, ["relay", "-F", "s:unix:%s=unix:%s" % (path, up.where)])
    assert rc is None, r
    os.rename(path, path + ".old")
    other = sc.enter_context(socket.socket(socket.AF_UNIX))
    other.bind(path)
    r.stop()
    assert os.path.exists(path), "the relay removed a socket that was not its own"
    other.close()


def test_alias_in_a_directory_nobody_controls_is_refused(sc):
    need_root(ATTACKER)
    base = base_dir(sc)
    up = upstream(sc, os.path.join(base, "up.sock"))
    mine = nobody_dir(os.path.join(base, "nobody"))
    alias = os.path.join(mine, "app.sock")
    rc, out, log = run_sockferry(["run", "--no-preload", "-F",
                                  "a:unix:%s/a.sock=unix:%s,alias=%s" % (base, up.where, alias), "--", "true"])
    assert rc == 78, (rc, log)
    assert "alias %s: the directory %s is owned by nobody (uid 65534)" % (alias, mine) in log, log
    assert not os.path.lexists(alias), "the alias link was made in nobody's directory"


SQUAT = r'''
import os, socket, sys
path, link = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
s = socket.socket(socket.AF_UNIX)
s.bind(path + ".real" if link else path)
s.listen(8)
if link:
    os.symlink(path + ".real", path)
s.settimeout(15)
print("listening", flush=True)
while True:
    try:
        c, _ = s.accept()
    except OSError:
        break
    c.settimeout(2)
    try:
        got = c.recv(100)
    except OSError:
        got = b""
    if got:
        print("got " + repr(got), flush=True)
    c.close()
'''
ASK = r'''
import socket, sys
c = socket.socket(socket.AF_UNIX)
c.settimeout(5)
c.connect(sys.argv[1])
c.sendall(b"the payload's request\n")
print(repr(c.recv(100)))
'''


def test_c_an_alias_held_by_nobodys_socket_is_never_used(sc):
    """In a sticky directory (/tmp) nobody listens at the alias path, or puts a link there: run
    left it "live, the bind mount worked" and the payload's request reached nobody. As root the
    link to the listen socket replaces it; a run that cannot replace it exits 1 naming the owner."""
    need_root(ATTACKER)
    base = base_dir(sc)
    up = upstream(sc, os.path.join(base, "up.sock"))
    sticky = sticky_dir(os.path.join(base, "tmp"))
    for how in ("socket", "link"):
        alias = os.path.join(sticky, "app-%s.sock" % how)
        p = nobody_python(sc, SQUAT, alias, *(["link"] if how == "link" else []))
        assert p.stdout.readline().strip() == "listening", p.communicate()[1]
        rc, out, log = run_sockferry(["run", "--no-preload", "-F", "a:unix:%s/a-%s.sock=unix:%s,alias=%s"
                                      % (base, how, up.where, alias), "--", PYTHON, "-c", ASK, alias])
        p.kill()
        squatter = p.communicate()[0]
        assert rc == 0 and "SSH-2.0" in out, "%s: exit %d, the payload got %s; nobody's listener: %s\n%s" % (
            how, rc, out.strip(), squatter.strip(), log)
        assert "got" not in squatter, "%s: nobody received %s" % (how, squatter.strip())
        assert "alias %s: a %s owned by nobody (uid 65534) was at the path" % (
            alias, "socket" if how == "socket" else "symbolic link") in log, log
        st = os.lstat(alias)
        assert st.st_uid == 0 and os.readlink(alias) == "%s/a-%s.sock" % (base, how), (st.st_uid, alias)

    # Not root, so the sticky directory keeps nobody's socket: run refuses to start.
    alias = os.path.join(sticky, "app-other.sock")
    p = nobody_python(sc, SQUAT, alias)
    assert p.stdout.readline().strip() == "listening", p.communicate()[1]
    other = nobody_dir(os.path.join(base, "other"))
    os.chown(other, 65533, 65533)
    marker = os.path.join(other, "started")

    def as_other():
        os.setgroups([])
        os.setgid(65533)
        os.setuid(65533)
    cmd = [os.environ.get("SOCKFERRY", "sockferry"), "run", "--no-preload", "-F",
           "a:unix:%s/a.sock=unix:%s,alias=%s" % (other, up.where, alias), "--", "touch", marker]
    t = subprocess.run(cmd, capture_output=True, text=True, timeout=20, preexec_fn=as_other, cwd="/")
    assert t.returncode == 1, (t.returncode, t.stderr)
    assert "alias %s: a socket owned by nobody (uid 65534) is at the path and cannot be replaced" % alias \
        in t.stderr and "rm %s" % alias in t.stderr, t.stderr
    assert not os.path.exists(marker), "the payload started"
    assert not os.path.islink(alias), "nobody's socket was replaced by uid 65533"


KEEP_READING = r'''
import sys, time
f = open(sys.argv[1])
print("open", flush=True)
sys.stdin.readline()
f.seek(0)
print(f.read().strip(), flush=True)
'''


def test_keygen_force_never_hands_the_new_token_to_the_old_files_owner(sc):
    need_root(ATTACKER)
    base = base_dir(sc)
    token = os.path.join(base, "token")
    with open(token, "w") as f:
        f.write("old\n")
    os.chown(token, NOBODY, NOBODY)
    os.chmod(token, 0o600)
    p = sc.popen([PYTHON, "-c", KEEP_READING, token], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                 preexec_fn=as_nobody, text=True)
    assert p.stdout.readline().strip() == "open"
    rc, _, err = run_sockferry(["keygen", "--force", "-o", token])
    assert rc == 0, err
    seen, _ = p.communicate("\n", timeout=10)
    with open(token) as f:
        new = f.read().strip()
    assert seen.strip() != new, "nobody read the new token through the file it kept open"
    st = os.stat(token)
    assert st.st_uid == 0 and st.st_mode & 0o7777 == 0o600, (st.st_uid, oct(st.st_mode))


def test_a_token_is_judged_by_who_can_change_it(sc):
    """Issue 34: a 0600 token that only its owner can change is taken whoever owns it (a Mac
    user's file through virtiofs is uid 501); one others may read is refused, and so is one
    that nobody put where anyone may create files, or in nobody's directory there."""
    need_root()
    base = base_dir(sc)
    token = os.path.join(base, "token")
    assert run_sockferry(["keygen", "-o", token])[0] == 0
    os.chown(token, 501, 20)
    spec = "t:tcp:127.0.0.1:%d=unix:%s/up.sock,auth=token,token-file=%s"
    r = sc.relay(["relay", "-F", spec % (free_port(), base, token)])
    r.stop()
    # check reads it too, and then fails on the link, not on the token.
    rc, _, err = run_sockferry(["check", "-F", "t:unix:%s/t.sock=tcp:127.0.0.1:9,auth=token,token-file=%s"
                                % (base, token)])
    assert rc == 1 and "belongs to uid 501, who can change it: taken" in err, (rc, err)
    os.chmod(token, 0o640)
    rc, log = start(sc, ["relay", "-F", spec % (free_port(), base, token)])
    assert rc == 78 and "lets other users read the token" in log, (rc, log)

    # Where anyone may create names, the name's owner made it: nobody's token, nobody's
    # directory holding nobody's token, both where root expects its own.
    sticky = os.path.join(base, "tmp")
    os.mkdir(sticky)
    os.chmod(sticky, 0o1777)
    planted = os.path.join(sticky, "token")
    theirs = os.path.join(sticky, "dir")
    p = nobody_python(sc, "import os, sys\nfor t in (sys.argv[1], sys.argv[2] + '/token'):\n"
                      "    os.makedirs(os.path.dirname(t), exist_ok=True)\n"
                      "    fd = os.open(t, os.O_CREAT | os.O_WRONLY, 0o600)\n"
                      "    os.write(fd, b'00' * 32 + b'\\n')\n    os.close(fd)", planted, theirs)
    assert p.wait() == 0, p.communicate()[1]
    for path, needle in ((planted, "token file %s is owned by nobody (uid 65534), in a directory where anyone"
                          % planted),
                         (os.path.join(theirs, "token"), "the directory %s is owned by nobody (uid 65534)" % theirs)):
        rc, log = start(sc, ["relay", "-F", spec % (free_port(), base, path)])
        if rc is None:
            log = log.stop(expect=None)
        assert rc == 78 and needle in log, "took nobody's token %s (exit %s):\n%s" % (path, rc, log)


def test_a_token_the_user_cannot_read_says_whose_it_is_and_the_fix(sc):
    """In a container started with -u 1000, a root-owned 0400 secret used to give a bare
    "Permission denied": the message names the owner, group and mode, and the fixes."""
    need_root()
    if not shutil.which("setpriv"):
        raise Skip("setpriv is not installed")
    base = base_dir(sc)
    token = os.path.join(base, "token")
    assert run_sockferry(["keygen", "-o", token])[0] == 0
    os.chmod(token, 0o400)
    t = subprocess.run(["setpriv", "--reuid", str(APP), "--regid", str(APP), "--clear-groups",
                        os.environ.get("SOCKFERRY", "sockferry"), "relay", "-t", "-F",
                        "t:tcp:127.0.0.1:%d=unix:%s/up.sock,auth=token,token-file=%s" % (free_port(), base, token)],
                       capture_output=True, text=True, timeout=20, cwd="/")
    assert t.returncode == 78, (t.returncode, t.stderr)
    for needle in ("token file %s: uid %d (gid %d) cannot read it: it is owned by root (uid 0), gid 0, mode 0400"
                   % (token, APP, APP), "chown %d %s" % (APP, token), 'uid: "%d" and mode: 0400' % APP,
                   "start sockferry as root (-u 0) with user = %d" % APP):
        assert needle in t.stderr, (needle, t.stderr)


def test_i_the_token_path_is_walked_like_a_listen_path(sc):
    """Whoever owns a directory or a link on the token file's path could point the relay at
    another trust domain's token: nobody's directory, and nobody's link in a sticky directory,
    both leading to root's token, are refused (78). Docker's secret (a bind-mounted file) and
    Kubernetes' (links through ..data, all root's) keep working."""
    need_root(ATTACKER)
    base = base_dir(sc)
    theirs = os.path.join(base, "other-service")
    os.mkdir(theirs, 0o700)
    other_token = os.path.join(theirs, "token")
    assert run_sockferry(["keygen", "-o", other_token])[0] == 0
    mine = nobody_dir(os.path.join(base, "nobody"))
    sticky = sticky_dir(os.path.join(base, "tmp"))
    for parent, needle in ((mine, "the directory %s is owned by nobody (uid 65534)" % mine),
                           (sticky, "the symbolic link %s/token is owned by nobody (uid 65534)" % sticky)):
        link = os.path.join(parent, "token")
        nobody_symlink(sc, other_token, link)
        spec = "t:tcp:127.0.0.1:%d=unix:%s/up.sock,auth=token,token-file=%s" % (free_port(), base, link)
        rc, log = start(sc, ["relay", "-F", spec])
        if rc is None:
            log = log.stop(expect=None)
        assert rc == 78, "the relay took the token %s leads to (exit %s):\n%s" % (link, rc, log)
        assert "token file %s: %s" % (link, needle) in log, log

    # Kubernetes: the volume (1777, root's), a timestamped directory, ..data and the links.
    sa = os.path.join(base, "var/run/secrets/kubernetes.io/serviceaccount")
    os.makedirs(sa)
    os.chmod(sa, 0o1777)
    stamp = os.path.join(sa, "..2024_05_01_12_00_00.000000001")
    os.mkdir(stamp, 0o755)
    assert run_sockferry(["keygen", "-o", os.path.join(stamp, "token")])[0] == 0
    os.chmod(os.path.join(stamp, "token"), 0o400)
    os.symlink(os.path.basename(stamp), os.path.join(sa, "..data"))
    os.symlink("..data/token", os.path.join(sa, "token"))
    spec = "k:tcp:127.0.0.1:%d=unix:%s/up.sock,auth=token,token-file=%s/token" % (free_port(), base, sa)
    rc, r = start(sc, ["relay", "-F", spec])
    assert rc is None, "refused Kubernetes' secret layout (%s):\n%s" % (rc, r)
    r.stop()

    # Docker: /run/secrets/NAME is the host file bind-mounted over a file in a root directory.
    secrets = os.path.join(base, "ctr/run/secrets")
    os.makedirs(secrets)
    open(os.path.join(secrets, "sf-token"), "w").close()
    spec = "d:tcp:127.0.0.1:%d=unix:%s/up.sock,auth=token,token-file=%s/sf-token" % (free_port(), base, secrets)
    t = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount --bind "$0" "$1" && shift && exec "$@"', other_token,
                        os.path.join(secrets, "sf-token"), os.environ.get("SOCKFERRY", "sockferry"),
                        "relay", "-t", "-F", spec], capture_output=True, text=True, timeout=20)
    assert t.returncode == 0 and "configuration OK" in t.stdout, (t.returncode, t.stdout, t.stderr)

    # A read-only bind mount: nobody here can change it, whoever owns it and whatever its
    # directory's mode says (a folder shared from Windows shows 0777); the same directory
    # mounted read-write is refused.
    shared = os.path.join(base, "shared")
    os.mkdir(shared)
    os.chown(shared, 65533, 65533)
    os.chmod(shared, 0o777)
    assert run_sockferry(["keygen", "-o", os.path.join(shared, "token")])[0] == 0
    os.chown(os.path.join(shared, "token"), NOBODY, NOBODY)
    mnt = os.path.join(base, "ctr/etc/sockferry")
    os.makedirs(mnt)
    spec = "r:tcp:127.0.0.1:%d=unix:%s/up.sock,auth=token,token-file=%s/token" % (free_port(), base, mnt)
    for ro, status in ((True, 0), (False, 78)):
        t = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            'mount --bind "$0" "$1" && { [ "$2" = rw ] || mount -o remount,bind,ro "$1"; } && '
                            'shift 2 && exec "$@"', shared, mnt, "ro" if ro else "rw",
                            os.environ.get("SOCKFERRY", "sockferry"), "relay", "-t", "-F", spec],
                           capture_output=True, text=True, timeout=20)
        assert t.returncode == status, ("read-only" if ro else "read-write", t.returncode, t.stderr)
    assert "with mode 0777, so its owner could change" in t.stderr, t.stderr


APP = 1000


def who(uid):
    """How messages name a user: "NAME (uid N)", or "uid N" without a name."""
    try:
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return "uid %d" % uid


def as_app():
    os.setgroups([])
    os.setgid(APP)
    os.setuid(APP)


def app_dir(path, mode=0o700, uid=APP):
    os.mkdir(path)
    os.chown(path, uid, uid)
    os.chmod(path, mode)
    return path


CONNECT = r'''
import socket, sys
c = socket.socket(socket.AF_UNIX)
c.settimeout(5)
c.connect(sys.argv[1])
print(c.recv(100).decode(errors="replace"))
'''


def test_e_a_root_relay_makes_a_socket_for_uid_1000_in_its_own_directory(sc):
    """gpg-agent for a non-root user (issue 34): the socket in ~/.gnupg, a directory uid 1000 owns
    (0700), made by a root relay as that user, and a missing directory there made as that user
    too; uid 1000 connects. A socket for uid 1001 there, or a directory others may write, stays
    refused."""
    need_root()
    base = base_dir(sc)
    up = upstream(sc, os.path.join(base, "up.sock"))
    os.chmod(up.where, 0o666)
    home = app_dir(os.path.join(base, "home"), 0o755)
    gnupg = app_dir(os.path.join(home, ".gnupg"))
    sock = os.path.join(gnupg, "S.gpg-agent")
    made = os.path.join(home, ".new", "S.other")
    r = sc.relay(["relay", "-F", "g:unix:%s=unix:%s,owner=%d,mode=0600" % (sock, up.where, APP),
                  "-F", "n:unix:%s=unix:%s,owner=%d" % (made, up.where, APP)])
    for path in (sock, made, os.path.dirname(made)):
        st = os.lstat(path)
        assert st.st_uid == APP, (path, st.st_uid)
    assert os.stat(sock).st_mode & 0o777 == 0o600 and os.stat(os.path.dirname(made)).st_mode & 0o7777 == 0o755
    p = sc.popen([PYTHON, "-c", CONNECT, sock], stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=as_app,
                 text=True)
    out, err = p.communicate(timeout=10)
    assert out.startswith(BANNER.decode()), (out, err)
    r.stop()
    assert not os.path.exists(sock) and not os.path.exists(made), "the relay left its sockets"

    rc, log = start(sc, ["relay", "-F", "g:unix:%s=unix:%s,owner=%d" % (sock, up.where, APP + 1)])
    assert rc == 78 and "the directory %s is owned by %s with mode 0755" % (home, who(APP)) in log, (rc, log)
    assert "set owner = %d if the socket is for that user" % APP in log, log
    os.chmod(gnupg, 0o770)
    rc, log = start(sc, ["relay", "-F", "g:unix:%s=unix:%s,owner=%d" % (sock, up.where, APP)])
    assert rc == 78 and "the directory %s is owned by %s with mode 0770, so its group" % (gnupg, who(APP)) in log, \
        (rc, log)
    assert not os.path.exists(sock)


def test_c_the_sockets_users_link_does_not_make_root_create_elsewhere(sc):
    """uid 1000's link decides where a socket for uid 1000 goes: it is made there as uid 1000,
    with uid 1000's rights, so a link to root's directory makes nothing there (root would have
    made the socket, or a directory, wherever the link pointed)."""
    need_root()
    base = base_dir(sc)
    target = os.path.join(base, "target")
    os.mkdir(target, 0o755)
    home = app_dir(os.path.join(base, "home"), 0o755)
    link = os.path.join(home, "l")
    os.symlink(target, link)
    os.lchown(link, APP, APP)
    for path in ("%s/s.sock" % link, "%s/made/s.sock" % link):
        rc, log = start(sc, ["relay", "-F", "l:unix:%s=tcp:127.0.0.1:9,owner=%d" % (path, APP)])
        if rc is None:
            log = log.stop(expect=None)
        assert rc == 1 and "Permission denied" in log, (path, rc, log)
        assert os.listdir(target) == [], "root made %s where uid %d's link points" % (os.listdir(target), APP)


def in_hosts(sc, hosts_text):
    """(directory, prefix): a prefix that runs the relay in a mount namespace whose /etc/hosts
    says hosts_text, and the directory that holds that file."""
    if not shutil.which("unshare"):
        raise Skip("unshare (util-linux) is not installed")
    d = sc.tmpdir(mode=0o755)
    hosts = os.path.join(d, "hosts")
    with open(hosts, "w") as f:
        f.write(hosts_text)
    os.chmod(hosts, 0o644)
    probe = subprocess.run(["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec true', hosts],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise Skip("cannot bind-mount /etc/hosts in a mount namespace: " + probe.stderr.strip())
    return d, ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', hosts]


def listening_on_any(port):
    with open("/proc/net/tcp") as f:
        return any(line.split()[1] == "00000000:%04X" % port and line.split()[3] == "0A" for line in f.readlines()[1:])


def test_a_loopback_looking_name_that_resolves_to_every_address_needs_auth(sc):
    need_root(ATTACKER)
    # Both names pass the text check (conf/conf.c): "localhost" and a name that starts "127.".
    d, prefix = in_hosts(sc, "0.0.0.0 localhost\n0.0.0.0 127.sf-policy.test\n")
    up = upstream(sc, os.path.join(d, "up.sock"))
    for name in ("localhost", "127.sf-policy.test"):
        port = free_port()
        rc, r = start(sc, ["relay", "-F", "a:tcp:%s:%d=unix:%s" % (name, port, up.where)], prefix=prefix)
        if rc is None:
            on_any = listening_on_any(port)
            r.stop(expect=None)
            raise AssertionError("tcp:%s:%d started without auth%s" % (
                name, port, " and listened on 0.0.0.0" if on_any else ""))
        assert rc == 78, (name, rc, r)
        assert "listen tcp:%s:%d: %s resolves to 0.0.0.0, which is not a loopback address" % (name, port, name) \
            in r and "set auth = token" in r, r
    # With auth the same name is fine: the link is authenticated.
    port = free_port()
    sc.relay(["relay", "-F", "a:tcp:127.sf-policy.test:%d=unix:%s,allow-insecure=yes" % (port, up.where)],
             prefix=prefix)


def test_a_name_that_resolves_to_loopback_listens_without_auth(sc):
    need_root(ATTACKER)
    d, prefix = in_hosts(sc, "127.0.0.1 localhost\n127.0.0.1 db.sf-policy.test\n")
    up = upstream(sc, os.path.join(d, "up.sock"))
    port = free_port()
    sc.relay(["relay", "-F", "a:tcp:localhost:%d=unix:%s" % (port, up.where)], prefix=prefix)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        assert c.recv(100).startswith(BANNER)


def test_a_volume_mounted_for_the_socket_is_closed_to_others(sc):
    """A Kubernetes emptyDir or a bind-mounted directory is a 0777 root-owned mount: the relay
    takes write access from others (0755) before binding, and nobody can then move its socket;
    the same directory without a mount stays refused (the test above)."""
    need_root(ATTACKER)
    base = base_dir(sc)
    volume, mnt = os.path.join(base, "volume"), os.path.join(base, "run")
    os.mkdir(volume)
    os.chmod(volume, 0o777)
    os.mkdir(mnt)
    up = upstream(sc, os.path.join(base, "svc.sock"))
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              'mount --bind "$0" "$1" && shift && exec "$@"', volume, mnt]
    t = subprocess.run(prefix + [os.environ.get("SOCKFERRY", "sockferry"), "relay", "-t", "-F",
                                 "v:unix:%s/s.sock=unix:%s" % (mnt, up.where)],
                       capture_output=True, text=True, timeout=20)
    assert t.returncode == 0 and "the relay will make it 0755" in t.stderr, (t.returncode, t.stderr)
    assert os.stat(volume).st_mode & 0o7777 == 0o777, "the test mode changed the volume"
    r = sc.relay(["relay", "-F", "v:unix:%s/s.sock=unix:%s" % (mnt, up.where)], prefix=prefix)
    assert os.stat(volume).st_mode & 0o7777 == 0o755, oct(os.stat(volume).st_mode)
    assert "is a volume mounted with mode 0777: made it 0755" in r.text(), r.text()
    sock = os.path.join(volume, "s.sock")
    with socket.socket(socket.AF_UNIX) as c:
        c.settimeout(5)
        c.connect(sock)
        assert c.recv(100).startswith(BANNER)
    p = nobody_python(sc, "import os, sys\ntry:\n    os.rename(sys.argv[1], sys.argv[1] + '.moved')\n"
                      "    print('moved')\nexcept PermissionError:\n    print('refused')", sock)
    out, _ = p.communicate(timeout=10)
    assert out.strip() == "refused", out


# ---- the control socket ------------------------------------------------------------------------

FLOOD = r'''
import socket, sys, time
name, seconds = sys.argv[1], float(sys.argv[2])
n = 0
end = time.monotonic() + seconds
print("flooding", flush=True)
while time.monotonic() < end:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("\0" + name)
        s.sendall(b"stats\n")
        n += 1
    except OSError:
        pass
    finally:
        s.close()
print(n, flush=True)
'''


def test_h_a_flood_of_refused_peers_cannot_keep_root_from_its_stats(sc):
    """Refused control peers counted against the client limit until their handles closed: uid
    65534 flooding unix:@NAME made 28 of 30 root `stats` calls fail. Every one must work."""
    need_root(ATTACKER)
    base = base_dir(sc)
    name = "sf-policy-flood-%d" % os.getpid()
    conf = os.path.join(base, "conf")
    with open(conf, "w") as f:
        f.write("[sockferry]\ncontrol = unix:@%s\n\n[x]\nlisten = unix:%s/in.sock\nconnect = unix:%s/svc.sock\n"
                % (name, base, base))
    r = sc.relay(["relay", "-c", conf])
    flood = [nobody_python(sc, FLOOD, name, "60") for _ in range(4)]
    for p in flood:
        assert p.stdout.readline().strip() == "flooding", p.communicate()[1]
    failed = []
    for i in range(30):
        rc, out, err = run_sockferry(["stats", "--control", "unix:@" + name, "--format", "json"])
        if rc != 0 or '"forwards"' not in out:
            failed.append((i, rc, err.strip()))
    still = sum(p.poll() is None for p in flood)
    for p in flood:
        p.kill()
    counts = [p.communicate()[0].strip() for p in flood]
    assert still == len(flood), "the flood ended before the stats calls did: %s" % counts
    assert not failed, "%d of 30 stats calls failed during the flood: %s" % (len(failed), failed[:3])
    assert "refused a connection from uid 65534" in r.text(), r.text()


# ---- passed listeners (systemd:, fd:) ---------------------------------------------------------

# A network namespace of its own with NETWORK_ADDR (this program's, sfharness.Net) on one end of
# a veth pair whose both ends stay in it (not every kernel has the dummy driver); the namespace
# and its links go away with its last process.
NET = Net()
NETWORK_ADDR = NET.host
OWN_NET = ("ip link set lo up && ip link add {h} type veth peer name {c} && ip addr add {a}/32 dev {h} && "
           "ip link set {h} up && ip link set {c} up && ").format(h=NET.host_if, c=NET.cont_if, a=NETWORK_ADDR)
ACTIVATED_CLIENT = r'''
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
try:
    print(repr(c.recv(100)))
except OSError as e:
    print("error", e)
'''


def activated(sc, addr, port, fdname, args):
    """sockferry ARGS started by systemd-socket-activate listening on addr:port (fd 3, named
    fdname), in a network namespace of its own, once a client connected there, in the scene
    sc; returns the Relay and what that first client received."""
    if not shutil.which("systemd-socket-activate"):
        raise Skip("systemd-socket-activate (Debian's systemd package) is not installed")
    if not shutil.which("nsenter"):
        raise Skip("nsenter (util-linux) is not installed")
    prefix = ["unshare", "--net", "sh", "-c", OWN_NET + 'name=$1 && shift && exec systemd-socket-activate -l "$0" '
              '--fdname="$name" -E NOTIFY_SOCKET "$@"', "%s:%d" % (addr, port), fdname]
    r = sc.relay(args, prefix=prefix, wait_ready=False)
    net = "/proc/%d/ns/net" % r.pid

    def client():
        # In the relay's network, once systemd-socket-activate listens there.
        p = subprocess.run(["nsenter", "--net=" + net, PYTHON, "-c", ACTIVATED_CLIENT, addr, str(port)],
                           capture_output=True, text=True, timeout=20)
        return p.stdout.strip() if p.returncode == 0 else None
    got = None
    deadline = time.monotonic() + 10
    while got is None and time.monotonic() < deadline and r.proc.poll() is None:
        got = client()
        if got is None:
            time.sleep(0.05)
    return r, got


def test_d_a_passed_socket_on_a_network_address_needs_auth(sc):
    """systemd: and fd: listeners were served without auth whatever address the socket unit
    bound: a passed TCP socket on a network address must be refused as tcp:ADDRESS is (exit 78),
    by relay -t too; on loopback, or with allow-insecure, it is served."""
    need_root(ATTACKER)
    base = base_dir(sc)
    up = upstream(sc, os.path.join(base, "up.sock"))
    port = free_port()
    for spec in ("a:systemd:web=unix:%s" % up.where, "a:fd:3=unix:%s" % up.where):
        for test in ([], ["-t"]):
            r, got = activated(sc, NETWORK_ADDR, port, "web", ["relay"] + test + ["-F", spec])
            try:
                rc = r.wait()
            except subprocess.TimeoutExpired:
                rc = None
            log = r.kill()
            assert rc == 78, "%s %s: exit %s, the first client got %s:\n%s" % (spec, test, rc, got, log)
            assert got is None or "SSH-2.0" not in got, "served without auth: %s" % got
            assert ("listen %s: the passed socket is bound to %s:%d, which is not a loopback address"
                    % (spec.split(":", 1)[1].split("=")[0], NETWORK_ADDR, port)) in log and "set auth = token" in log, log
            assert "configuration OK" not in log, log
    # Loopback, and a network address with allow-insecure: served.
    for addr, extra in (("127.0.0.1", ""), (NETWORK_ADDR, ",allow-insecure=yes")):
        r, got = activated(sc, addr, port, "web", ["relay", "-F", "a:systemd:web=unix:%s%s" % (up.where, extra)])
        assert got and "SSH-2.0" in got, "%s%s: the first client got %s:\n%s" % (addr, extra, got, r.text())
        r.stop()
    # relay -t without the socket says what it cannot check.
    rc, out, err = run_sockferry(["relay", "-t", "-F", "a:systemd:web=unix:%s" % up.where])
    assert rc == 0 and "listen systemd:web: no socket is passed to this test" in err, (rc, out, err)


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), fixture=Scene)
