#!/bin/sh
# build-prev-release.sh OUTDIR: builds the previous release's sockferry (PREV_COMMIT, from before
# services and the shared link) from this source tree's history into OUTDIR, once (a later call
# finds it there, also while another is building it), and prints the binary's path.
# tests/e2e/test_link.py runs it unless SF_PREV_SOCKFERRY names a binary built already: CI builds
# it once with this script and sets that.
# Exit 0; 77 with the reason on stderr when it cannot be built here for want of something (a
# tool, the commit in a shallow clone, a dependency); 1 when the build itself fails.
set -eu
PREV_COMMIT=2e99dc6
out=${1:?usage: build-prev-release.sh OUTDIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$out/sockferry-$PREV_COMMIT
exe=$dir/build/shim/sockferry

for tool in git meson ninja tar flock; do
        command -v "$tool" >/dev/null ||
                { echo "$tool is not installed: cannot build the previous release ($PREV_COMMIT)" >&2; exit 77; }
done
mkdir -p "$out"
# one build at a time (the valgrind twin of a test may ask at the same moment)
exec 9>"$dir.lock"
flock 9
if [ -x "$exe" ]; then
        echo "$exe"
        exit 0
fi
git -C "$src" cat-file -e "$PREV_COMMIT^{commit}" 2>/dev/null || {
        echo "commit $PREV_COMMIT (the previous release) is not in $src's history (a shallow clone? git fetch --unshallow)" >&2
        exit 77
}
work=$dir.part
rm -rf "$work"
mkdir -p "$work/src"
git -C "$src" archive "$PREV_COMMIT" | tar -x -C "$work/src"
if ! meson setup "$work/build" "$work/src" -Dtests=disabled -Dpreload=disabled -Dbuildtype=debugoptimized \
        >"$work/setup.log" 2>&1; then
        echo "the previous release ($PREV_COMMIT) does not configure here:" \
                "$(grep -E 'not found|ERROR' "$work/setup.log" | tail -n 3 | tr '\n' ' ')" >&2
        rm -rf "$work"
        exit 77
fi
if ! ninja -C "$work/build" shim/sockferry >"$work/build.log" 2>&1; then
        tail -c 3000 "$work/build.log" >&2
        echo "the previous release ($PREV_COMMIT) does not build (its log is above)" >&2
        rm -rf "$work"
        exit 1
fi
rm -rf "$dir"
mv "$work" "$dir"
echo "$exe"
