"""An unmodified-style python3 client for the preload tests: plain socket module and asyncio
calls on a unix socket path, as a real program would make them.

    pyclient.py blocking|select|asyncio|fork|exec PATH LINE   send LINE, print the answer
    pyclient.py twice PATH                                    connect twice, print each errno
    pyclient.py abstract NAME LINE                            abstract socket (no preload role)
    pyclient.py tcp PORT LINE                                 127.0.0.1:PORT (no preload role)
On a failed connect it prints errno=N and exits 2.
"""
import asyncio
import errno
import os
import select
import socket
import subprocess
import sys


def read_line(sock):
    data = b''
    while not data.endswith(b'\n'):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode()


def blocking(path, line, family=socket.AF_UNIX):
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall(line.encode() + b'\n')
        return read_line(s)


def nonblocking_select(path, line):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.setblocking(False)
        first = s.connect_ex(path)
        if first not in (0, errno.EINPROGRESS):
            raise OSError(first, os.strerror(first))
        if not select.select([], [s], [], 10)[1]:
            raise OSError(errno.ETIMEDOUT, 'connect did not finish')
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))
        s.send(line.encode() + b'\n')
        data = b''
        while not data.endswith(b'\n'):
            if not select.select([s], [], [], 10)[0]:
                raise OSError(errno.ETIMEDOUT, 'no answer')
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return f'connect_ex={errno.errorcode[first] if first else 0} ' + data.decode()


async def with_asyncio(path, line):
    reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), 10)
    writer.write(line.encode() + b'\n')
    await writer.drain()
    answer = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    await writer.wait_closed()
    return answer.decode()


def in_fork(path, line):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.write(w, blocking(path, line).encode())
            os._exit(0)
        except OSError as e:
            os.write(w, f'errno={e.errno}\n'.encode())
            os._exit(2)
    os.close(w)
    out = b''
    while chunk := os.read(r, 4096):
        out += chunk
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError(0, f'forked child failed: {out.decode().strip()}')
    return out.decode()


def in_exec(path, line):
    r = subprocess.run([sys.executable, __file__, 'blocking', path, line], capture_output=True,
                       text=True, timeout=20)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        raise OSError(0, f'exec child failed: {r.stdout.strip()}')
    return r.stdout


def twice(path):
    out = []
    for _ in range(2):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            out.append(f'errno={s.connect_ex(path)}')
    return ' '.join(out) + '\n'


def main():
    mode, target = sys.argv[1], sys.argv[2]
    line = sys.argv[3] if len(sys.argv) > 3 else ''
    try:
        if mode == 'blocking':
            out = blocking(target, line)
        elif mode == 'select':
            out = nonblocking_select(target, line)
        elif mode == 'asyncio':
            out = asyncio.run(with_asyncio(target, line))
        elif mode == 'fork':
            out = in_fork(target, line)
        elif mode == 'exec':
            out = in_exec(target, line)
        elif mode == 'twice':
            out = twice(target)
        elif mode == 'abstract':
            out = blocking('\0' + target, line)
        elif mode == 'tcp':
            out = blocking(('127.0.0.1', int(target)), line, socket.AF_INET)
        else:
            sys.exit(f'unknown mode {mode}')
    except OSError as e:
        print(f'errno={e.errno}')
        print(f'{mode}: {e}', file=sys.stderr)
        sys.exit(2)
    sys.stdout.write(out)


if __name__ == '__main__':
    main()
