"""Shared helpers of the preload end-to-end tests (python3 stdlib only).

A "container" here is a private mount namespace in which an empty directory is bind-mounted
over the socket path the client expects: what Docker Desktop leaves when a host socket cannot
cross into the VM. Servers run outside it, on unix sockets in the test's temporary directory,
on 127.0.0.1, or on vsock; only the client runs inside, with the preload loaded. The tests
print TAP with tests/lib/sftap.py's Tap.
"""
import argparse
import http.server
import os
import socket
import socketserver
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
from sfharness import Scene, free_port  # noqa: E402
from sftap import skip_all, unwind_on_sigterm  # noqa: E402

# A loopback port nothing listens on (bound, then released).
closed_tcp_port = free_port

PYTHON = '/usr/bin/python3' if os.access('/usr/bin/python3', os.X_OK) else sys.executable
PYCLIENT = os.path.join(HERE, 'pyclient.py')
TIMEOUT = 30

DIAGNOSTIC = ('sockferry-preload: {} is a directory, not a socket: the host socket bind mount '
              'did not carry a socket (Docker Desktop?). Map it with alias= in sockferry\'s config.')


def parse_args(*names):
    """Meson passes build outputs relative to the build directory: make them absolute, as the
    clients run from other directories."""
    p = argparse.ArgumentParser()
    for name in names:
        p.add_argument(f'--{name}', type=os.path.abspath)
    return p.parse_args()


def preflight():
    """Skips the whole test unless mount namespaces and bind mounts work here."""
    if os.geteuid() != 0:
        skip_all('needs root, for a mount namespace and a bind mount')
    try:
        r = subprocess.run(['unshare', '--mount', '--propagation', 'private', 'true'],
                           capture_output=True, text=True, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        skip_all(f'unshare --mount does not work here: {e}')
    if r.returncode != 0:
        skip_all(f'unshare --mount does not work here: {r.stderr.strip()}')


def clean_environment():
    """The clients must see only what each test sets."""
    for k in list(os.environ):
        if k.startswith('SOCKFERRY_PRELOAD') or k == 'LD_PRELOAD':
            del os.environ[k]
    os.environ['PYTHONDONTWRITEBYTECODE'] = '1'


def asan_runtime(lib):
    """An AddressSanitizer build of the library needs the runtime loaded before it, since the
    clients (curl, python3) are not instrumented. Returns its path, or None."""
    try:
        out = subprocess.run(['ldd', lib], capture_output=True, text=True, timeout=TIMEOUT).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if 'libasan.so' in line and '=>' in line:
            return line.split('=>')[1].split('(')[0].strip()
    return None


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def __str__(self):
        return f'exit {self.returncode}\nstdout: {self.stdout!r}\nstderr: {self.stderr!r}'


class Lab(Scene):
    """A Scene (tests/lib/sfharness.py) with a temporary directory holding the expected socket
    path, servers, and the way to run a client in a container. `with Lab(lib) as lab:` tears
    everything down at the end, SIGTERM included (meson's timeout); a set-up that fails half
    way leaves nothing behind either."""

    def __init__(self, lib):
        super().__init__()
        self.lib = lib
        self.asan = asan_runtime(lib) if lib else None

    def __enter__(self):
        unwind_on_sigterm()
        super().__enter__()
        try:
            self.tmp = self.tmpdir(prefix='sfp.', mode=0o755, dir='/tmp')
            self.empty = self.path('empty')
            self.mapped = self.path('run', 'x.sock')
            os.makedirs(self.empty)
            os.makedirs(self.mapped)
            os.chmod(self.path('run'), 0o755)
        except BaseException:
            self.close()
            raise
        return self

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def env(self, mapping=None, lib=None, **extra):
        lib = lib or self.lib
        e = {'LD_PRELOAD': f'{self.asan}:{lib}' if self.asan and lib == self.lib else lib}
        if self.asan:
            e['ASAN_OPTIONS'] = 'detect_leaks=0'
        if mapping is not None:
            e['SOCKFERRY_PRELOAD_MAP'] = mapping
        e.update({k: str(v) for k, v in extra.items()})
        return e

    def run(self, cmd, env=None, mount=True, setup='', user=None, cwd=None, stdin=None,
            timeout=TIMEOUT):
        """Runs cmd in a fresh mount namespace; with mount, the empty directory is first
        bind-mounted over self.mapped, then the shell code setup runs (exit 125 if either
        fails). env is added for cmd alone (not unshare, sh, mount or setpriv)."""
        script = ('mount --bind "$1" "$2" || exit 125; ' if mount else '') + \
            (f'{{ {setup}; }} || exit 125; ' if setup else '') + 'shift 2; exec "$@"'
        argv = ['unshare', '--mount', '--propagation', 'private', '--', '/bin/sh', '-c', script,
                'sh', self.empty, self.mapped]
        if user is not None:
            argv += ['setpriv', f'--reuid={user}', f'--regid={user}', '--clear-groups']
        argv += ['env'] + [f'{k}={v}' for k, v in (env or {}).items()] + list(cmd)
        try:
            r = subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=cwd,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return Result(-1, e.stdout or '', f'timed out after {timeout}s; {e.stderr or ""}')
        return Result(r.returncode, r.stdout, r.stderr)

    def python(self, mode, *args, **kw):
        return self.run([PYTHON, PYCLIENT, mode, *args], **kw)

    def serve(self, kind, address, label, http=False):
        """Starts a threaded server: an HTTP one answering "sockferry ok via LABEL", or a line
        one answering LABEL:LINE to every line. Returns the endpoint text for the map."""
        bases = {'unix': socketserver.UnixStreamServer, 'tcp': socketserver.TCPServer,
                 'tcp6': _Tcp6Server, 'vsock': _VsockServer}
        cls = type('Server', (socketserver.ThreadingMixIn, bases[kind]),
                   {'daemon_threads': True, 'request_queue_size': 256,
                    'allow_reuse_address': kind.startswith('tcp')})
        srv = cls(address, _HttpHandler if http else _LineHandler)
        self.callback(srv.server_close)
        srv.label = label
        threading.Thread(target=srv.serve_forever, kwargs={'poll_interval': 0.05},
                         daemon=True).start()
        self.callback(srv.shutdown)
        if kind == 'unix':
            return 'unix:' + (address if address[0] != '\0' else '@' + address[1:])
        if kind == 'tcp':
            return f'tcp:127.0.0.1:{srv.server_address[1]}'
        if kind == 'tcp6':
            return f'tcp:[::1]:{srv.server_address[1]}'
        return f'vsock:1:{srv.server_address[1]}'


class _LineHandler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            for line in self.rfile:
                self.wfile.write(self.server.label.encode() + b':' + line)
        except ConnectionError:
            pass  # a client killed mid-test (a timeout); its own check reports that


class _HttpHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.0'

    def do_GET(self):
        body = f'sockferry ok via {self.server.label}\n'.encode()
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

    def address_string(self):
        # A unix peer has no address tuple.
        return 'peer'


class _Tcp6Server(socketserver.TCPServer):
    address_family = socket.AF_INET6


class _VsockServer(socketserver.TCPServer):
    address_family = socket.AF_VSOCK


def vsock_loopback():
    """Returns (True, port) when AF_VSOCK loopback (CID 1, vsock_loopback) works, else
    (False, reason)."""
    if not hasattr(socket, 'AF_VSOCK'):
        return False, 'python3 has no AF_VSOCK'
    try:
        srv = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    except OSError as e:
        return False, f'socket(AF_VSOCK) failed: {e.strerror}'
    try:
        srv.bind((socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY))
        srv.listen()
        port = srv.getsockname()[1]
        c = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        c.settimeout(3)
        try:
            c.connect((1, port))
        finally:
            c.close()
    except OSError as e:
        return False, ('no vsock loopback (CID 1; the vsock_loopback module): connect '
                       f'{e.strerror or "timed out"}')
    finally:
        srv.close()
    return True, None


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(('::1', 0))
        return True
    except OSError:
        return False


def vsock_socket_works():
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
        return True
    except (OSError, AttributeError):
        return False
