#!/usr/bin/python3
"""What the preload says: the one-time diagnostic for an unmapped directory (and nothing for
anything else), SOCKFERRY_PRELOAD_QUIET, SOCKFERRY_PRELOAD_DEBUG, malformed map entries
reported once and ignored, and the map ignored in secure-execution mode. Emits TAP."""
import os
import re
import shutil
import sys

sys.dont_write_bytecode = True
import sfpreload as sf  # noqa: E402
import sftap  # noqa: E402  (on sys.path through sfpreload)

NOBODY = 65534


def main():
    args = sf.parse_args('lib', 'client')
    sf.preflight()
    sf.clean_environment()
    tap = sftap.Tap()
    with sf.Lab(args.lib) as lab:
        x = lab.mapped
        line_sock = lab.path('line.sock')
        line_ep = lab.serve('unix', line_sock, 'unix')
        os.chmod(line_sock, 0o777)  # the unprivileged clients below connect to it too
        diag = sf.DIAGNOSTIC.format(x) + '\n'
        other = f'/run/other.sock={line_ep}'

        r = lab.python('twice', x, env=lab.env(other))
        tap.ok(r.stdout == 'errno=111 errno=111\n', 'an unmapped directory still gives the kernel\'s ECONNREFUSED', r)
        tap.ok(r.stderr == diag, 'the directory diagnostic is written exactly once per process', r)

        r = lab.python('twice', x, env=lab.env())
        tap.ok(r.stdout == 'errno=111 errno=111\n' and r.stderr == diag,
               'without SOCKFERRY_PRELOAD_MAP the diagnostic still appears', r)

        r = lab.python('twice', x, env=lab.env(other, SOCKFERRY_PRELOAD_QUIET=1))
        tap.ok(r.stdout == 'errno=111 errno=111\n' and r.stderr == '', 'SOCKFERRY_PRELOAD_QUIET=1 silences it', r)

        r = lab.python('twice', lab.path('run', 'missing.sock'), env=lab.env(other))
        tap.ok(r.stdout == 'errno=2 errno=2\n' and r.stderr == '', 'a missing path: ENOENT and no diagnostic', r)

        regular = lab.path('run', 'file.sock')
        open(regular, 'w').close()
        r = lab.python('twice', regular, env=lab.env(other))
        tap.ok(r.stdout == 'errno=111 errno=111\n' and r.stderr == '', 'a regular file: ECONNREFUSED and no diagnostic', r)

        client = lab.path('sfp-client')
        shutil.copy(args.client, client)
        os.chmod(client, 0o755)
        r = lab.run([client, x, 'hi'], env=lab.env(other), user=NOBODY)
        tap.ok(r.returncode == 2 and r.stdout == 'errno=13\n' and diag in r.stderr,
               'an unprivileged client gets EACCES from the directory, and the diagnostic', r)
        r = lab.run([client, x, 'hi'], env=lab.env(f'{x}={line_ep}'), user=NOBODY)
        tap.ok(r.returncode == 0 and r.stdout == 'unix:hi\n', 'an unprivileged client is redirected from EACCES too', r)

        r = lab.python('twice', x, env=lab.env(f'{x}={line_ep}', SOCKFERRY_PRELOAD_DEBUG=1))
        logged = re.findall(rf'^sockferry-preload: connect\(\d+, {re.escape(x)}\): ECONNREFUSED, '
                            rf'redirected to {re.escape(line_ep)}: connected$', r.stderr, re.M)
        loaded = re.findall(r'^sockferry-preload: loaded into pid \d+ with 1 mapping$', r.stderr, re.M)
        tap.ok(r.stdout == 'errno=0 errno=0\n' and len(logged) == 2 and len(loaded) == 1
               and len(r.stderr.splitlines()) == 3,
               'SOCKFERRY_PRELOAD_DEBUG=1 says it is loaded, then logs every redirect', r)
        r = lab.python('twice', x, env=lab.env(f'{x}={line_ep}'))
        tap.ok(r.stdout == 'errno=0 errno=0\n' and r.stderr == '', 'without it, a redirect is silent', r)

        bad = {
            'nonsense': 'expected /expected/path.sock=ENDPOINT',
            'relative/x.sock=unix:/run/a.sock': 'the path must be absolute',
            '/a.sock=bogus:1': 'unknown endpoint type',
            '/b.sock=tcp:example.invalid:80': 'does not resolve host names',
            '/c.sock=vsock:any:5': 'vsock:any is a listen address',
            '/d.sock=systemd:foo': 'cannot be connected to',
            f'{x}=unix:/elsewhere.sock': 'mapped already',
            '/e.sock=unix:/e.sock': 'mapped to itself',
            '/' + 'p' * 110 + '=unix:/f.sock': 'too long',
        }
        entries = list(bad)
        entries.insert(6, f'{x}={line_ep}')
        r = lab.python('twice', x, env=lab.env(';'.join(entries) + ';'))
        tap.ok(r.stdout == 'errno=0 errno=0\n', 'the valid entry among malformed ones works', r)
        lines = r.stderr.splitlines()
        for entry, why in bad.items():
            n = entries.index(entry) + 1
            hits = [l for l in lines if l.startswith(f'sockferry-preload: SOCKFERRY_PRELOAD_MAP entry {n} "')]
            tap.ok(len(hits) == 1 and why in hits[0] and hits[0].endswith('; entry ignored'),
                   f'malformed entry {n} is reported once: {why}', r)
        tap.ok(len(lines) == len(bad), 'and nothing else is said', r)

        secure_execution(tap, lab, args.client, line_ep)
    sys.exit(tap.finish())


def secure_execution(tap, lab, client, line_ep):
    """A set-group-ID client run by nobody has AT_SECURE set. glibc then ignores LD_PRELOAD
    paths, so the library comes from /etc/ld.so.preload, on an overlay over /etc inside the
    namespace; the same client without the set-group-ID bit is the control."""
    if lab.asan:
        for what in ('control', 'secure'):
            tap.skip(f'secure-execution mode ({what})', 'sanitizer build: the instrumented client and library would need the runtime preloaded too')
        return
    x = lab.mapped
    plain, sgid = lab.path('plain-client'), lab.path('sgid-client')
    for path, mode in ((plain, 0o755), (sgid, 0o2755)):
        shutil.copy(client, path)
        os.chown(path, 0, 0)
        os.chmod(path, mode)
    os.makedirs(lab.path('etc-upper'))
    os.makedirs(lab.path('etc-work'))
    setup = (f'mount -t overlay overlay -o lowerdir=/etc,upperdir={lab.path("etc-upper")},'
             f'workdir={lab.path("etc-work")} /etc && echo {lab.lib} > /etc/ld.so.preload')
    env = {'SOCKFERRY_PRELOAD_MAP': f'{x}={line_ep}'}

    r = lab.run([plain, x, 'who'], env=env, setup=setup, user=NOBODY)
    if r.returncode == 125:
        for what in ('control', 'secure'):
            tap.skip(f'secure-execution mode ({what})', f'cannot mount an overlay on /etc here: {r.stderr.strip()}')
        return
    tap.ok(r.returncode == 0 and r.stdout == 'unix:who\n',
           'control: loaded from /etc/ld.so.preload, an ordinary client is redirected', r)
    r = lab.run([sgid, x, 'who'], env=env, setup=setup, user=NOBODY)
    tap.ok(r.returncode == 2 and r.stdout == 'errno=13\n' and sf.DIAGNOSTIC.format(x) in r.stderr,
           'in secure-execution mode (set-group-ID) the map is ignored', r)


if __name__ == '__main__':
    main()
