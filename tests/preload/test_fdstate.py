#!/usr/bin/python3
"""What the client can observe about its fd: flags, timeouts, family and number after a
redirect, no temporary fd left behind, kernel errnos on every path, and which socket a mapped
path reaches (a live socket is used as is; a directory, stale socket or missing path is
redirected). Emits TAP."""
import os
import socket
import sys

sys.dont_write_bytecode = True
import sfpreload as sf  # noqa: E402
import sftap  # noqa: E402  (on sys.path through sfpreload)


def main():
    args = sf.parse_args('lib', 'client', 'fdcheck')
    sf.preflight()
    sf.clean_environment()
    tap = sftap.Tap()
    with sf.Lab(args.lib) as lab:
        x, fdcheck = lab.mapped, args.fdcheck
        unix_ep = lab.serve('unix', lab.path('line.sock'), 'unix')
        tcp_ep = lab.serve('tcp', ('127.0.0.1', 0), 'tcp')
        refused_ep = f'tcp:127.0.0.1:{sf.closed_tcp_port()}'

        targets = [('unix', unix_ep, 'unix'), ('tcp', tcp_ep, 'inet')]
        if sf.ipv6_loopback():
            targets.append(('tcp6', lab.serve('tcp6', ('::1', 0), 'tcp6'), 'inet6'))
        else:
            tap.skip('IPv6 TCP target keeps the fd flags', 'no IPv6 loopback (::1) here')
        for name, ep, family in targets:
            r = lab.run([fdcheck, 'flags', x, family], env=lab.env(f'{x}={ep}'))
            tap.forward(r.stdout, f'{name} target ({ep})', r)

        vsock_ok, vsock_reason = sf.vsock_loopback()
        if vsock_ok:
            ep = lab.serve('vsock', (socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY), 'vsock')
            r = lab.run([fdcheck, 'flags', x, 'vsock'], env=lab.env(f'{x}={ep}'))
            tap.forward(r.stdout, f'vsock target ({ep})', r)
        else:
            tap.skip('vsock target: flags, timeouts and echo', vsock_reason)
            if sf.vsock_socket_works():
                # No peer, but the swap itself can still be watched.
                r = lab.run([fdcheck, 'swap', x, 'vsock'], env=lab.env(f'{x}=vsock:1:9'))
                tap.forward(r.stdout, 'vsock target without a peer', r)
            else:
                tap.skip('vsock swap', 'socket(AF_VSOCK) is not available')

        other = lab.path('run', 'refused.sock')
        os.makedirs(other)
        env = lab.env(f'{x}={tcp_ep};{other}={refused_ep}')
        r = lab.run([fdcheck, 'leak', x, other, '200'], env=env, timeout=120)
        tap.forward(r.stdout, 'fd leak', r)
        r = lab.run([fdcheck, 'reconnect', x, tcp_ep.rsplit(':', 1)[1]], env=lab.env(f'{x}={tcp_ep}'))
        tap.forward(r.stdout, 'second connect() on a TCP-redirected fd', r)
        r = lab.run([fdcheck, 'refused', x], env=lab.env(f'{x}={refused_ep}'))
        tap.forward(r.stdout, f'refused target ({refused_ep})', r)
        r = lab.run([fdcheck, 'dgram', x], env=lab.env(f'{x}={tcp_ep}'))
        tap.forward(r.stdout, 'datagram client', r)

        live = lab.path('live.sock')
        lab.serve('unix', live, 'live')
        r = lab.run([args.client, live, 'who'], env=lab.env(f'{live}={tcp_ep}'), mount=False)
        tap.ok(r.returncode == 0 and r.stdout == 'live:who\n',
               'a live socket at the mapped path is used directly (the bind mount worked)', r)

        stale = lab.path('stale.sock')
        s = socket.socket(socket.AF_UNIX)
        s.bind(stale)
        s.close()
        r = lab.run([args.client, stale, 'who'], env=lab.env(f'{stale}={tcp_ep}'), mount=False)
        tap.ok(r.returncode == 0 and r.stdout == 'tcp:who\n', 'a stale socket at the mapped path is redirected', r)

        missing = lab.path('missing.sock')
        r = lab.run([args.client, missing, 'who'], env=lab.env(f'{missing}={tcp_ep}'), mount=False)
        tap.ok(r.returncode == 0 and r.stdout == 'tcp:who\n', 'a missing mapped path is redirected', r)

        r = lab.run([args.client, x, 'who'], env=lab.env(f'{x}={refused_ep}'))
        tap.ok(r.returncode == 2 and r.stdout == 'errno=111\n',
               'a refused redirect returns ECONNREFUSED to the client', r)
        tap.ok('is mapped to ' + refused_ep in r.stderr and r.stderr.count('sockferry-preload') == 1,
               'and says once which target refused', r)
    sys.exit(tap.finish())


if __name__ == '__main__':
    main()
