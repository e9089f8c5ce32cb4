#!/bin/bash
# The previous release's sockferry (OLD_COMMIT of tests/e2e/test_link.py, before services and
# the shared link), built once from this tree's git history for the interop tests:
#
#   tests/lib/build-prev-release.sh OUTDIR
#
# prints the path of the built binary on stdout (its build output goes to stderr) and exits 0;
# exits 77, saying why on stderr, when it cannot be built here (no git history holding the
# commit: a shallow clone; a tool or dependency missing); 1 when the build itself fails.
# OUTDIR keeps the build: a second call with the binary there prints it at once.
# tests/ci.sh builds it once per run and hands it to every meson test run as SF_PREV_SOCKFERRY.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(realpath -m "${1:?usage: tests/lib/build-prev-release.sh OUTDIR}")
commit=$(sed -n 's/^OLD_COMMIT = "\([0-9a-f]*\)"$/\1/p' "$src/tests/e2e/test_link.py")
[ -n "$commit" ] || { echo "build-prev-release: no OLD_COMMIT in tests/e2e/test_link.py" >&2; exit 1; }
exe=$out/build/shim/sockferry
if [ -x "$exe" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$commit" ]; then
        echo "$exe"
        exit 0
fi
for tool in git meson ninja; do
        command -v "$tool" >/dev/null || { echo "build-prev-release: $tool is not installed" >&2; exit 77; }
done
git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null || {
        echo "build-prev-release: commit $commit (the previous release) is not in $src's history (a shallow clone? git fetch --unshallow)" >&2
        exit 77
}
rm -rf "$out"
mkdir -p "$out/src"
git -C "$src" archive "$commit" | tar -x -C "$out/src"
if ! meson setup "$out/build" "$out/src" -Dtests=disabled -Dpreload=disabled -Dbuildtype=debugoptimized >&2; then
        echo "build-prev-release: the previous release ($commit) does not configure here (above)" >&2
        exit 77
fi
ninja -C "$out/build" shim/sockferry >&2 || { echo "build-prev-release: the previous release ($commit) does not build (above)" >&2; exit 1; }
echo "$commit" >"$out/commit"
echo "$exe"
