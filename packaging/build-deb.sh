#!/bin/bash
# Builds the Debian package from this tree: a temporary copy of the source files (git's
# tracked and untracked-but-not-ignored files; no build directories) with packaging/debian
# as ./debian, then dpkg-buildpackage -us -uc -b and lintian (errors fail).
# Usage: packaging/build-deb.sh [OUTDIR]       (default: ./build-deb; set DEB_BUILD_OPTIONS=nocheck
#        to skip the package's own test run)
#
# What the copy gets that the tree does not hold:
#   debian/inject/linux-{x86_64,aarch64}/sockferry, the static binaries `attach --inject` uses:
#     from SF_STATIC_DIR (packaging/linux/build-static.sh's OUTDIR) when it is set, else built
#     here with build-static.sh (incremental, in its cache);
#   the Maintainer field and debian/changelog: the version is meson.build's, the maintainer
#     SF_MAINTAINER ("Name <email>"), else DEBFULLNAME and DEBEMAIL, else git's user.name and
#     user.email, else the last commit's author; the date is the last commit's (SOURCE_DATE_EPOCH, when set).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$src/build-deb}")
version=$(meson introspect --projectinfo "$src/meson.build" | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
maintainer=${SF_MAINTAINER:-}
if [ -z "$maintainer" ] && [ -n "${DEBFULLNAME:-}" ] && [ -n "${DEBEMAIL:-}" ]; then
        maintainer="$DEBFULLNAME <$DEBEMAIL>"
fi
if [ -z "$maintainer" ] && git -C "$src" config user.email >/dev/null; then
        maintainer="$(git -C "$src" config user.name) <$(git -C "$src" config user.email)>"
fi
# A fresh clone on a machine with no git identity (a CI machine) still has its last commit's
# author.
if [ -z "$maintainer" ] && a=$(git -C "$src" log -1 --format='%an <%ae>' 2>/dev/null) && [ "$a" != " <>" ]; then
        maintainer=$a
fi
[ -n "$maintainer" ] || {
        echo "build-deb: who maintains this package? Set SF_MAINTAINER='Name <email>' (or DEBFULLNAME and DEBEMAIL, git's user.name and user.email, or build from a git clone)" >&2
        exit 1; }
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
        date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
elif git -C "$src" rev-parse HEAD >/dev/null 2>&1; then
        date=$(date -u -R -d "@$(git -C "$src" log -1 --format=%ct)")
else
        date=$(date -u -R)
fi
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
sed -i "s|^Priority: .*|&\nMaintainer: $maintainer|" "$tree/debian/control"
cat >"$tree/debian/changelog" <<EOF
sockferry ($version) unstable; urgency=medium

  * sockferry $version, built from the source tree by packaging/build-deb.sh.

 -- $maintainer  $date
EOF

static=${SF_STATIC_DIR:-$work/static}
if [ -z "${SF_STATIC_DIR:-}" ]; then
        "$src/packaging/linux/build-static.sh" --source "$src" "$static" >"$work/static.log" 2>&1 || {
                cat "$work/static.log" >&2; echo "build-deb: packaging/linux/build-static.sh failed" >&2; exit 1; }
fi
for arch in x86_64 aarch64; do
        [ -x "$static/linux-$arch/sockferry" ] || { echo "build-deb: $static/linux-$arch/sockferry is missing" >&2; exit 1; }
        install -D -m 0755 "$static/linux-$arch/sockferry" "$tree/debian/inject/linux-$arch/sockferry"
done

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
