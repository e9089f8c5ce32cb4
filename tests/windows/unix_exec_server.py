#!/usr/bin/env python3
"""The Linux half of tests/windows/unix-exec.c: runs, for a Windows program under Wine, the
Linux program it stands for, with the standard streams over loopback sockets.

    unix_exec_server.py PORTFILE NAME=PROGRAM [+VAR=VALUE...]...

Listens on 127.0.0.1 (a free port, written to PORTFILE once it listens). NAME.exe's connections
"C ID" (NAME and the arguments, each ended by NUL, then an empty one), "O ID" and "E ID" start
PROGRAM with those arguments, the +VAR=VALUE settings given after it in its environment, its stdin and stdout on O
and its stderr on E; its exit status goes back on C. When C closes first (the Windows program
was killed), the program is killed."""

import os
import signal
import socket
import subprocess
import sys
import threading

programs = {}
name = None
for arg in sys.argv[2:]:
    k, _, v = arg.lstrip("+").partition("=")
    if arg.startswith("+"):
        programs[name][1][k] = v
    else:
        name = k
        programs[name] = (v, {})

pending = {}
lock = threading.Lock()


def read_header(conn):
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise EOFError
        data += chunk
    line, _, rest = data.partition(b"\n")
    kind, ident = line.decode().split()
    return kind, ident, rest


def run(ident, parts):
    c, rest = parts["C"]
    while not rest.endswith(b"\0\0"):
        chunk = c.recv(65536)
        if not chunk:
            return
        rest += chunk
    argv = [a.decode() for a in rest[:-2].split(b"\0")]
    prog, env = programs.get(argv[0], (None, None))
    o, e = parts["O"][0], parts["E"][0]
    if prog is None:
        e.sendall(b"unix_exec_server: no program for %s\n" % argv[0].encode())
        status = 127
    else:
        p = subprocess.Popen([prog] + argv[1:], stdin=o.fileno(), stdout=o.fileno(), stderr=e.fileno(),
                             env=dict(os.environ, **env), start_new_session=True)
        o.close()
        e.close()

        def watch():
            # C ends early only when the Windows program was killed: the program goes too.
            try:
                if not c.recv(1):
                    os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        threading.Thread(target=watch, daemon=True).start()
        status = p.wait()
        status = 128 - status if status < 0 else status
    for s in (o, e):
        s.close()
    try:
        c.sendall(b"%d" % status)
        # shutdown, not only close: watch() may be blocked in c.recv, which holds the socket
        # open past close().
        c.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    c.close()


def accept(conn):
    try:
        kind, ident, rest = read_header(conn)
    except (EOFError, ValueError, OSError):
        conn.close()
        return
    with lock:
        parts = pending.setdefault(ident, {})
        parts[kind] = (conn, rest)
        ready = len(parts) == 3
        if ready:
            del pending[ident]
    if ready:
        run(ident, parts)


def main():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.getsockname()[1])
    os.rename(tmp, sys.argv[1])
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=accept, args=(conn,), daemon=True).start()


main()
