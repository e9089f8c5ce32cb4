#!/bin/bash
# meson install into a staging directory (every installed file checked), then meson dist
# (the committed tree only: meson dist archives git HEAD) and a build of the release tarball.
# Usage: tests/ci/install-dist.sh BUILDDIR
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath "${1:?usage: install-dist.sh BUILDDIR}")
step() { printf 'install-dist: %s\n' "$*"; }
tmp=$(mktemp -d /tmp/sockferry-dist.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

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
        [ -e "$tmp/stage$f" ] || { echo "install-dist: $f not installed" >&2; missing=1; }
done
ls "$tmp"/stage/*/lib/systemd/system/sockferry@.socket "$tmp"/stage/lib/systemd/system/sockferry@.socket >/dev/null 2>&1 ||
        find "$tmp/stage" -name 'sockferry@.socket' | grep -q . || { echo "install-dist: systemd units not installed" >&2; missing=1; }
for c in '*bash-completion/completions/sockferry' '*/zsh/*/_sockferry' '*/fish/vendor_completions.d/sockferry.fish'; do
        find "$tmp/stage" -path "$c" | grep -q . || { echo "install-dist: no completion at $c" >&2; missing=1; }
done
[ $missing = 0 ] || exit 1
step "meson install: $(find "$tmp/stage" -type f | wc -l) files, all expected ones present"

# --allow-dirty: local trees have work in progress; CI's checkout is clean.
meson dist -C "$build" --no-tests --allow-dirty --formats xztar >"$tmp/dist.log" 2>&1 ||
        { cat "$tmp/dist.log" >&2; exit 1; }
tarball=$(ls "$build"/meson-dist/*.tar.xz | head -n 1)
step "meson dist: $(basename "$tarball") ($(stat -c %s "$tarball") bytes)"
# The tarball must build on its own (configure with the defaults, build everything).
mkdir "$tmp/x"
tar -C "$tmp/x" -xf "$tarball"
top=$(ls "$tmp/x")
meson setup "$tmp/x-build" "$tmp/x/$top" -Dwerror=true >"$tmp/setup.log" 2>&1 || { tail -20 "$tmp/setup.log" >&2; exit 1; }
ninja -C "$tmp/x-build" >"$tmp/ninja.log" 2>&1 || { tail -30 "$tmp/ninja.log" >&2; exit 1; }
step "the release tarball configures and builds"
