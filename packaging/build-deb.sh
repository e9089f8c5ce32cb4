#!/bin/bash
# Builds the Debian package from this tree: a temporary copy of the source files (git's
# tracked and untracked-but-not-ignored files; no build directories) with packaging/debian
# as ./debian, then dpkg-buildpackage -us -uc -b and lintian (errors fail).
# Usage: packaging/build-deb.sh [OUTDIR]       (default: ./build-deb; set DEB_BUILD_OPTIONS=nocheck
#        to skip the package's own test run)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$src/build-deb}")
work=$(mktemp -d /tmp/sockferry-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
tree="$work/sockferry"
mkdir -p "$tree" "$out"

if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$src" && git ls-files -z --cached --others --exclude-standard) |
                while IFS= read -r -d '' f; do
                        [ -e "$src/$f" ] || continue          # deleted, not yet committed
                        mkdir -p "$tree/$(dirname "$f")"
                        cp -a "$src/$f" "$tree/$f"
                done
else
        tar -C "$src" --exclude='./build*' --exclude=./debian -cf - . | tar -C "$tree" -xf -
fi
rm -rf "$tree/debian"
cp -a "$src/packaging/debian" "$tree/debian"

log="$out/dpkg-buildpackage.log"
if ! (cd "$tree" && dpkg-buildpackage -us -uc -b) >"$log" 2>&1; then
        tail -n 40 "$log"
        echo "build-deb: dpkg-buildpackage failed; the whole log is $log" >&2
        exit 1
fi
rm -f "$out"/sockferry*.deb "$out"/sockferry*.changes "$out"/sockferry*.buildinfo
mv "$work"/sockferry*.deb "$work"/sockferry*.changes "$work"/sockferry*.buildinfo "$out"/
deb=$(ls "$out"/sockferry_*.deb | head -n 1)
echo "build-deb: $deb"

if command -v lintian >/dev/null; then
        # Errors fail the build; warnings are printed.
        rc=0
        lintian --fail-on error --tag-display-limit 0 "$deb" >"$out/lintian.txt" 2>&1 || rc=$?
        grep -v '^running with root privileges' "$out/lintian.txt" || true
        if [ "$rc" != 0 ]; then
                echo "build-deb: lintian reports errors" >&2
                exit 1
        fi
        echo "build-deb: lintian: no errors"
else
        echo "build-deb: lintian not installed; not checked" >&2
fi
