#!/usr/bin/python3
"""sockferry-preload-musl.so, for Alpine containers, with a musl-linked client: it exports
connect() alone, needs only musl's libc, and redirects, uses a live socket, and diagnoses an
unmapped directory like the glibc build. Emits TAP."""
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True
import sfpreload as sf  # noqa: E402
import sftap  # noqa: E402  (on sys.path through sfpreload)


def readelf(*args):
    return subprocess.run(['readelf', '-W', *args], capture_output=True, text=True).stdout


def main():
    args = sf.parse_args('musl-lib', 'musl-client')
    if not args.musl_lib:
        sftap.skip_all('musl-gcc not found: install musl-tools to build and test sockferry-preload-musl.so')
    sf.preflight()
    sf.clean_environment()
    tap = sftap.Tap()
    lib, client = args.musl_lib, args.musl_client
    with sf.Lab(lib) as lab:
        x = lab.mapped
        interp = re.search(r'Requesting program interpreter: (\S+)\]', readelf('-l', client))
        tap.ok(interp and 'ld-musl' in interp.group(1), 'the test client is musl-linked',
               interp.group(1) if interp else 'no interpreter')
        needed = re.findall(r'\(NEEDED\)\s+Shared library: \[(\S+)\]', readelf('-d', lib))
        tap.ok(needed == ['libc.so'], 'the library needs musl\'s libc.so and nothing else', needed)
        exported = [l.split()[-1] for l in readelf('--dyn-syms', lib).splitlines()
                    if re.search(r'\b(FUNC|OBJECT)\s+GLOBAL\s+DEFAULT\s+\d+\s', l)]
        tap.ok(exported == ['connect'], 'it exports connect() and nothing else', exported)

        unix_ep = lab.serve('unix', lab.path('line.sock'), 'unix')
        tcp_ep = lab.serve('tcp', ('127.0.0.1', 0), 'tcp')
        r = lab.run([client, x, 'who'])
        tap.ok(r.returncode == 2 and r.stdout == 'errno=111\n', 'control: without the preload the client fails', r)
        for kind, ep in (('unix', unix_ep), ('tcp', tcp_ep)):
            r = lab.run([client, x, 'who'], env=lab.env(f'{x}={ep}'))
            tap.ok(r.returncode == 0 and r.stdout == f'{kind}:who\n' and r.stderr == '',
                   f'a musl client is redirected to {kind}', r)
        r = lab.run([client, x, 'who'], env=lab.env(f'{x}={tcp_ep}', SOCKFERRY_PRELOAD_DEBUG=1))
        tap.ok(re.search(r'^sockferry-preload: loaded into pid \d+ with 1 mapping$', r.stderr, re.M)
               and 'redirected to ' + tcp_ep in r.stderr,
               'musl\'s dlsym(RTLD_NEXT) found connect() (no system call fallback)', r)

        live = lab.path('live.sock')
        lab.serve('unix', live, 'live')
        r = lab.run([client, live, 'who'], env=lab.env(f'{live}={tcp_ep}'), mount=False)
        tap.ok(r.returncode == 0 and r.stdout == 'live:who\n', 'a live socket at the mapped path is used directly', r)

        r = lab.run([client, x, 'who'], env=lab.env(f'/run/other.sock={tcp_ep};nonsense'))
        tap.ok(r.returncode == 2 and r.stdout == 'errno=111\n' and sf.DIAGNOSTIC.format(x) in r.stderr
               and 'entry 2 "nonsense"' in r.stderr,
               'an unmapped directory gets the diagnostic and a malformed entry is reported', r)
    sys.exit(tap.finish())


if __name__ == '__main__':
    main()
