#!/usr/bin/python3
"""The documented limit: a statically linked client has no dynamic loader, so LD_PRELOAD
cannot reach it and the bind-mounted directory still fails for it. The env route (pointing
the client at the relay's socket) is what serves it. Emits TAP."""
import subprocess
import sys

sys.dont_write_bytecode = True
import sfpreload as sf  # noqa: E402
import sftap  # noqa: E402  (on sys.path through sfpreload)


def main():
    args = sf.parse_args('lib', 'static-client')
    if not args.static_client:
        sftap.skip_all('no static client: the C library has no libc.a (libc6-dev), or this is a sanitizer build')
    sf.preflight()
    sf.clean_environment()
    tap = sftap.Tap()
    with sf.Lab(args.lib) as lab:
        x = lab.mapped
        relay = lab.path('relay.sock')
        ep = lab.serve('unix', relay, 'relay')

        ldd = subprocess.run(['ldd', args.static_client], capture_output=True, text=True)
        tap.ok(ldd.returncode != 0 and 'not a dynamic executable' in ldd.stdout + ldd.stderr,
               'the client is statically linked', ldd.stdout + ldd.stderr)
        r = lab.run([args.static_client, x, 'who'], env=lab.env(f'{x}={ep}', SOCKFERRY_PRELOAD_DEBUG=1))
        tap.ok(r.returncode == 2 and r.stdout == 'errno=111\n' and 'sockferry-preload' not in r.stderr,
               'the preload does not reach a statically linked client (documented limit)', r)
        r = lab.run([args.static_client, relay, 'who'])
        tap.ok(r.returncode == 0 and r.stdout == 'relay:who\n',
               'the env route serves it: pointed at the relay socket, it connects', r)
    sys.exit(tap.finish())


if __name__ == '__main__':
    main()
