#!/bin/bash
# CI stage: sockferry with a real container engine, one private dockerd (tests/ci/engine.sh)
# for the dockerd parts, a private podman service for the podman ones:
#   tests/ci/containers-images.sh   the images built and run against a host relay, compose, the
#                                   Kubernetes sidecar's settings, doc/MACOS.md's commands
#   tests/ci/containers-attach.sh   attach (issue 25) with images made from this machine's
#                                   binaries, the engine's failures in plain words, --inject,
#                                   with dockerd and with podman
#   tests/ci/containers-presets.sh  attach --ssh-agent --gpg-agent --docker for a uid-1000
#                                   container user (issue 34), with dockerd and with podman
#                                   (and from a Windows host: tests/ci.sh runs it after
#                                   tests/ci/windows.sh, which builds the sockferry.exe it needs)
# As root on Debian 12 (Debian's docker.io is installed here first):
#
#   tests/ci/containers.sh BUILD_DIR     exit 0 PASS, 1 FAIL (a part failed), 77 SKIP (no
#                                        engine here: both parts skipped, they say why)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" containers
. "$src/tests/ci/engine.sh"
build=$(cd "${1:?usage: tests/ci/containers.sh BUILD_DIR}" && pwd)

needs_root "apt-get, dockerd"
engine_install docker.io docker-compose python3-yaml curl openssh-client podman gnupg
engine_start docker
export SF_CI_DOCKER_HOST=$DOCKER_HOST

failed=() skipped=()
for part in images attach presets attach-podman presets-podman; do
        rc=0
        case $part in
        images) "$src/tests/ci/containers-images.sh" || rc=$? ;;
        attach) "$src/tests/ci/containers-attach.sh" "$build" || rc=$? ;;
        presets) "$src/tests/ci/containers-presets.sh" "$build" docker || rc=$? ;;
        attach-podman) "$src/tests/ci/containers-attach.sh" "$build" podman || rc=$? ;;
        presets-podman) "$src/tests/ci/containers-presets.sh" "$build" podman || rc=$? ;;
        esac
        case $rc in
        0) ;;
        77) skipped+=("$part") ;;
        *) failed+=("$part") ;;
        esac
done
((${#failed[@]} == 0)) || fail "${failed[*]} (above)"
((${#skipped[@]} < 5)) || skip "every part (above)"
((${#skipped[@]} == 0)) || say "skipped: ${skipped[*]} (above)"
