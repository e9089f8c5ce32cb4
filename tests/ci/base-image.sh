#!/bin/bash
# CI stage: the Debian base image of the container stages (tests/ci/containers-images.sh), a
# root filesystem tar built with mmdebstrap from this machine's apt sources (no registry, nothing
# pulled). As root on Debian 12:
#
#   tests/ci/base-image.sh OUT.tar     exit 0 PASS, 1 FAIL
#
# A stage of its own so that tests/ci.sh builds it beside the test lanes (about 70 CPU-s that
# took 280 s on a loaded machine at the start of the containers job); containers-images.sh
# imports OUT.tar when SF_CI_BASE_TAR names it, and runs this script itself otherwise.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" base-image
. "$src/tests/ci/engine.sh"
out=${1:?usage: tests/ci/base-image.sh OUT.tar}

needs_root "mmdebstrap as root"
engine_install mmdebstrap
mkdir -p "$(dirname "$out")"
rm -f "$out"
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] && grep -qE '(^|[[:space:]])bookworm([[:space:]]|$)' "$f" && sources+=("$f")
done
((${#sources[@]})) || fail "no bookworm source in /etc/apt/sources.list{,.d}: mmdebstrap has nowhere to get Debian 12 from"
log=$(mktemp /tmp/sockferry-mmdebstrap.XXXXXX)
cleanup 'rm -f "$log"'
cleanup '[ "$stage_status" = 0 ] || rm -f "$out"'
# The same path excludes as Debian's -slim images.
# In a session of its own: mmdebstrap signals its whole process group when it fails.
setsid -w mmdebstrap --quiet --variant=minbase --format=tar \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        bookworm "$out" "${sources[@]}" >"$log" 2>&1 </dev/null ||
        { tail -20 "$log" >&2; fail "mmdebstrap of the base image failed"; }
say "$out: debian:bookworm(-slim), mmdebstrap minbase, $(($(stat -c %s "$out") / 1024 / 1024)) MiB"
