#!/bin/bash
# CI stage: meson install into a staging directory (every installed file checked, and the
# hardening of the installed binaries as packaged: PIE, full RELRO, NX stack, stack protector,
# FORTIFY; meson test --suite hardening checked the build tree), then meson dist (the
# committed tree only: meson dist archives git HEAD) and a build of the release tarball.
# Usage: tests/ci/install-dist.sh BUILDDIR
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" install-dist
build=$(realpath "${1:?usage: install-dist.sh BUILDDIR}")
tmp=$(mktemp -d /tmp/sockferry-dist.XXXXXX)
cleanup 'rm -rf "$tmp"'

DESTDIR="$tmp/stage" meson install -C "$build" --no-rebuild --quiet >/dev/null
info() { meson introspect --buildoptions "$build" | python3 -c "import json,sys; print({o['name']: o['value'] for o in json.load(sys.stdin)}['$1'])"; }
prefix=$(info prefix) libdir=$(info libdir) mandir=$(info mandir) datadir=$(info datadir) bindir=$(info bindir)
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
case $mandir in /*) ;; *) mandir=$prefix/$mandir ;; esac
case $datadir in /*) ;; *) datadir=$prefix/$datadir ;; esac
case $bindir in /*) ;; *) bindir=$prefix/$bindir ;; esac
want=("$bindir/sockferry" "$libdir/sockferry/sockferry-preload.so"
        "$datadir/doc/sockferry/examples/sockferry.conf.example")
command -v scdoc >/dev/null && want+=("$mandir/man1/sockferry.1" "$mandir/man5/sockferry.conf.5" "$mandir/man8/sockferry-preload.8")
command -v musl-gcc >/dev/null && want+=("$libdir/sockferry/sockferry-preload-musl.so")
missing=0
for f in "${want[@]}"; do
        [ -e "$tmp/stage$f" ] || { say "$f not installed"; missing=1; }
done
ls "$tmp"/stage/*/lib/systemd/system/sockferry@.socket "$tmp"/stage/lib/systemd/system/sockferry@.socket >/dev/null 2>&1 ||
        find "$tmp/stage" -name 'sockferry@.socket' | grep -q . || { say "systemd units not installed"; missing=1; }
for c in '*bash-completion/completions/sockferry' '*/zsh/*/_sockferry' '*/fish/vendor_completions.d/sockferry.fish'; do
        find "$tmp/stage" -path "$c" | grep -q . || { say "no completion at $c"; missing=1; }
done
[ $missing = 0 ] || fail "meson install left out what is said above"
say "meson install: $(find "$tmp/stage" -type f | wc -l) files, all expected ones present"
hargs=("exe:$tmp/stage$bindir/sockferry" "lib:$tmp/stage$libdir/sockferry/sockferry-preload.so")
[ ! -e "$tmp/stage$libdir/sockferry/sockferry-preload-musl.so" ] || hargs+=("musl-lib:$tmp/stage$libdir/sockferry/sockferry-preload-musl.so")
"$src/tests/hardening/check_hardening.sh" "${hargs[@]}" || fail "the installed binaries' hardening (its TAP above)"

# --allow-dirty: local trees have work in progress; CI's checkout is clean.
meson dist -C "$build" --no-tests --allow-dirty --formats xztar >"$tmp/dist.log" 2>&1 ||
        { cat "$tmp/dist.log"; fail "meson dist"; }
tarball=$(ls "$build"/meson-dist/*.tar.xz | head -n 1)
say "meson dist: $(basename "$tarball") ($(stat -c %s "$tarball") bytes)"
# The tarball must build on its own (configure with the defaults, build everything).
mkdir "$tmp/x"
tar -C "$tmp/x" -xf "$tarball"
top=$(ls "$tmp/x")
# Built inside the unpacked tree as CI builds the checkout (build-ci): ccache then finds the
# same relative paths and options, and the build costs little (tests/ci.sh).
meson setup "$tmp/x/$top/build" "$tmp/x/$top" -Dwerror=true >"$tmp/setup.log" 2>&1 || { tail -20 "$tmp/setup.log"; fail "meson setup of the release tarball"; }
ninja -C "$tmp/x/$top/build" >"$tmp/ninja.log" 2>&1 || { tail -30 "$tmp/ninja.log"; fail "the release tarball does not build"; }
say "the release tarball configures and builds"
