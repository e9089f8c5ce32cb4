#!/bin/bash
# CI stage: the project's container images — packaging/docker/Dockerfile's final (Debian slim)
# and static (scratch) targets, and tests/containers/app.Dockerfile's client — built in a real
# dockerd (BuildKit) from the Debian base image tests/ci/base-image.sh makes. As root on Debian 12:
#
#   tests/ci/images.sh BASE.tar     exit 0 PASS, 1 FAIL, 77 SKIP (dockerd cannot start here)
#
# The engine is tests/ci/engine.sh's: the one SF_CI_DOCKER_HOST names (containers-images.sh
# runs this in its own engine, whose tests use the images), or a private one. tests/ci.sh runs it
# ahead, beside the test lanes, with SF_CI_DOCKER_ROOT set: that engine's data root outlives it,
# the containers job's engine starts on it, and its own builds of the same files find every
# step in BuildKit's cache (the builds took 400 s of the containers job, the run's last one).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" images
. "$src/tests/ci/engine.sh"
DOCKER=/usr/bin/docker
base=${1:?usage: tests/ci/images.sh BASE.tar}

needs_root "dockerd"
engine_install docker.io
W=$(mktemp -d /tmp/sockferry-images.XXXXXX)
cleanup 'rm -rf "$W"'
engine_start docker

# A base image already there is kept: imported again it would be a new image, and every build
# step FROM it a cache miss.
if ! "$DOCKER" image inspect debian:bookworm-slim >/dev/null 2>&1; then
        [ -s "$base" ] || fail "$base: no base image (tests/ci/base-image.sh makes it)"
        "$DOCKER" import "$base" debian:bookworm-slim >/dev/null
        "$DOCKER" tag debian:bookworm-slim debian:bookworm
        say "base image debian:bookworm(-slim) imported from $base ($(stage_seconds) s)"
fi

build() {
        DOCKER_BUILDKIT=1 "$DOCKER" build --network host --progress plain "$@" >"$W/build.log" 2>&1 ||
                { tail -40 "$W/build.log" >&2; fail "docker build $* failed"; }
        # How many steps came from the cache, and the slowest step: what this build cost.
        say "docker build $*: $(grep -c ' CACHED$' "$W/build.log") steps cached; slowest: $(sed -n 's/^#[0-9]* DONE \([0-9.]*\)s$/\1/p' "$W/build.log" | sort -n | tail -n 1 || true) s"
}
build -f "$src/packaging/docker/Dockerfile" -t sockferry "$src"
build -f "$src/packaging/docker/Dockerfile" --target static -t sockferry:static "$src"
# The client: an application image that takes sockferry with COPY --from (packaging/README.md).
build -t sockferry-ci-client - <"$src/tests/containers/app.Dockerfile"
say "built: sockferry, sockferry:static, sockferry-ci-client ($(stage_seconds) s)"
