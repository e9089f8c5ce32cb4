#!/usr/bin/python3
"""64 threads of one C client connect at the same moment, again and again, through a
bind-mounted directory redirected to unix and to TCP: every connection must reach the server
and get its own answer back. Emits TAP."""
import sys

sys.dont_write_bytecode = True
import sfpreload as sf  # noqa: E402
import sftap  # noqa: E402  (on sys.path through sfpreload)

THREADS, ROUNDS = 64, 25


def main():
    args = sf.parse_args('lib', 'threads')
    sf.preflight()
    sf.clean_environment()
    tap = sftap.Tap()
    with sf.Lab(args.lib) as lab:
        x = lab.mapped
        for kind, ep in (('unix', lab.serve('unix', lab.path('line.sock'), 'unix')),
                         ('tcp', lab.serve('tcp', ('127.0.0.1', 0), 'tcp'))):
            r = lab.run([args.threads, x, str(THREADS), str(ROUNDS)], env=lab.env(f'{x}={ep}'),
                        timeout=120)
            tap.ok(r.returncode == 0 and r.stdout == f'{THREADS} threads x {ROUNDS} rounds, 0 failures\n',
                   f'{THREADS} threads x {ROUNDS} concurrent connects redirected to {kind}', r)
    sys.exit(tap.finish())


if __name__ == '__main__':
    main()
