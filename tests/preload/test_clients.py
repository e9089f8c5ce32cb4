#!/usr/bin/python3
"""Real, unmodified clients reach a server through a path that is an empty bind-mounted
directory: curl --unix-socket, socat, python3 (blocking, non-blocking with select, asyncio,
fork, exec), redirected to unix, TCP and vsock. Emits TAP."""
import os
import shutil
import sys

sys.dont_write_bytecode = True
import sfpreload as sf  # noqa: E402
import sftap  # noqa: E402  (on sys.path through sfpreload)

CURL_ASAN = 'sanitizer build: curl hangs with libasan preloaded, with or without sockferry'
NO_CURL = 'curl is not installed (apt-get install curl)'


def main():
    args = sf.parse_args('lib')
    sf.preflight()
    sf.clean_environment()
    tap = sftap.Tap()
    with sf.Lab(args.lib) as lab:
        x = lab.mapped
        targets = {
            'unix': (lab.serve('unix', lab.path('http.sock'), 'unix', http=True),
                     lab.serve('unix', lab.path('line.sock'), 'unix')),
            'tcp': (lab.serve('tcp', ('127.0.0.1', 0), 'tcp', http=True),
                    lab.serve('tcp', ('127.0.0.1', 0), 'tcp')),
        }
        vsock_ok, vsock_reason = sf.vsock_loopback()
        if vsock_ok:
            targets['vsock'] = (lab.serve('vsock', (sf.socket.VMADDR_CID_ANY, sf.socket.VMADDR_PORT_ANY), 'vsock', http=True),
                                lab.serve('vsock', (sf.socket.VMADDR_CID_ANY, sf.socket.VMADDR_PORT_ANY), 'vsock'))

        have_curl, have_socat = shutil.which('curl'), shutil.which('socat')
        curl = ['curl', '-sS', '--max-time', '10', '--unix-socket', x, 'http://localhost/hello']
        r = lab.python('blocking', x, 'hello')
        tap.ok(r.returncode == 2 and r.stdout == 'errno=111\n',
               'control: without the preload, a client cannot connect to the bind-mounted directory', r)

        for kind in ('unix', 'tcp', 'vsock'):
            clients = ['curl --unix-socket', 'socat', 'python3 blocking socket',
                       'python3 non-blocking socket with select', 'python3 asyncio']
            if kind not in targets:
                for c in clients:
                    tap.skip(f'{c} redirected to {kind}', vsock_reason)
                continue
            http_ep, line_ep = targets[kind]
            env_http = lab.env(f'{x}={http_ep}')
            env_line = lab.env(f'{x}={line_ep}')

            if not have_curl or lab.asan:
                tap.skip(f'curl --unix-socket redirected to {kind}', CURL_ASAN if have_curl else NO_CURL)
            else:
                r = lab.run(curl, env=env_http)
                tap.ok(r.returncode == 0 and r.stdout == f'sockferry ok via {kind}\n' and r.stderr == '',
                       f'curl --unix-socket redirected to {kind} ({http_ep})', r)

            if not have_socat:
                tap.skip(f'socat redirected to {kind}', 'socat is not installed (apt-get install socat)')
            else:
                r = lab.run(['socat', '-T', '10', '-', f'UNIX-CONNECT:{x}'], env=env_line, stdin='ping\n')
                tap.ok(r.returncode == 0 and r.stdout == f'{kind}:ping\n', f'socat redirected to {kind}', r)

            r = lab.python('blocking', x, 'hello', env=env_line)
            tap.ok(r.returncode == 0 and r.stdout == f'{kind}:hello\n', f'python3 blocking socket redirected to {kind}', r)

            r = lab.python('select', x, 'hello', env=env_line)
            # A unix target connects at once; TCP and vsock report EINPROGRESS, as the kernel does.
            want = 'connect_ex=0 ' if kind == 'unix' else 'connect_ex=EINPROGRESS '
            tap.ok(r.returncode == 0 and r.stdout == f'{want}{kind}:hello\n',
                   f'python3 non-blocking socket with select redirected to {kind}', r)

            r = lab.python('asyncio', x, 'hello', env=env_line)
            tap.ok(r.returncode == 0 and r.stdout == f'{kind}:hello\n', f'python3 asyncio redirected to {kind}', r)

        tcp_line = targets['tcp'][1]
        env = lab.env(f'{x}={tcp_line}')
        r = lab.python('fork', x, 'forked', env=env)
        tap.ok(r.returncode == 0 and r.stdout == 'tcp:forked\n', 'a forked child is redirected (state inherited)', r)
        r = lab.python('exec', x, 'execed', env=env)
        tap.ok(r.returncode == 0 and r.stdout == 'tcp:execed\n', 'an exec()ed child is redirected (map inherited through the environment)', r)

        # /var/run/x.sock vs /run/x.sock: the same socket through a symlinked directory.
        os.symlink(lab.path('run'), lab.path('varrun'))
        r = lab.python('blocking', lab.path('varrun', 'x.sock'), 'alias', env=env)
        tap.ok(r.returncode == 0 and r.stdout == 'tcp:alias\n', 'a path through a symlinked parent directory finds the mapping', r)
        r = lab.python('blocking', 'x.sock', 'relative', env=env, cwd=lab.path('run'))
        tap.ok(r.returncode == 0 and r.stdout == 'tcp:relative\n', 'a relative path finds the mapping', r)
        messy = lab.path('run') + '//./../run/x.sock/'
        r = lab.python('blocking', messy, 'messy', env=env)
        tap.ok(r.returncode == 0 and r.stdout == 'tcp:messy\n', 'a path with //, . and .. is normalised before matching', r)

        abstract = f'sfp-abstract-{os.getpid()}'
        lab.serve('unix', '\0' + abstract, 'abstract')
        r = lab.python('abstract', abstract, 'hi', env=lab.env(f'{x}={tcp_line}'))
        tap.ok(r.returncode == 0 and r.stdout == 'abstract:hi\n' and r.stderr == '', 'an abstract socket passes straight through', r)
        port = tcp_line.rsplit(':', 1)[1]
        r = lab.python('tcp', port, 'hi', env=lab.env(f'{x}={targets["unix"][1]}'))
        tap.ok(r.returncode == 0 and r.stdout == 'tcp:hi\n' and r.stderr == '', 'an AF_INET connect passes straight through', r)
    sys.exit(tap.finish())


if __name__ == '__main__':
    main()
