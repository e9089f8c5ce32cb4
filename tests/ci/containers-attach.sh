#!/bin/bash
# CI stage (issue 25), the second part of tests/ci/containers.sh: `sockferry attach` with a
# real engine (Debian's docker.io), in a minute and without a registry or an image build: the
# private dockerd of tests/ci/engine.sh (tests/ci/containers.sh's, or one of its own when run
# alone), and two images imported from this machine's own binaries:
# "plain" (sh, sleep, uname, mkdir and their libraries: no sockferry) and "with" (plain and the
# build's sockferry with its libraries). As root:
#
#   tests/ci/containers-attach.sh BUILD_DIR    exit 0 PASS, 1 FAIL, 77 SKIP (no dockerd here)
#
# Checks: attach --engine docker into a container with no network at all (its /run/host a
# directory of this machine, so a client here reaches the socket the far end made there):
# data both ways through to a host service; docker restart -> attached again; SIGTERM -> exit
# 0 and the container's socket removed. In docker's own words: no such container, a container
# that is not running (retried), no sockferry in the image (with the --inject hint), permission
# denied on the engine's socket (as uid 65534). --inject into the plain image (uname -m, docker
# cp): attached, and again after docker restart.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" containers-attach
. "$src/tests/ci/engine.sh"
build=$(cd "${1:?usage: tests/ci/containers-attach.sh BUILD_DIR}" && pwd)
SF=$build/shim/sockferry
DOCKER=/usr/bin/docker

needs_root "dockerd"
[ -x "$SF" ] || fail "no sockferry at $SF"
W=$(mktemp -d /tmp/sockferry-attach.XXXXXX)
chmod 0755 "$W"
cleanup 'rm -rf "$W"'
cleanup '[ "$stage_status" = 0 ] || [ -z "${SF_KEEP_LOGS:-}" ] || cp -r "$W" "$SF_KEEP_LOGS"'
engine_start docker
attach_pid="" service_pid=""
# What this part made in the engine (the engine itself may serve another part): its
# containers carry the label sockferry-ci-attach.
cleanup 'ids=$("$DOCKER" ps -aq --filter label=sockferry-ci-attach); [ -z "$ids" ] || "$DOCKER" rm -f -v $ids >/dev/null'
cleanup 'for p in $attach_pid $service_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done'

# ---- the images, from this machine's binaries ----
root=$W/rootfs
mkdir -p "$root/bin" "$root/tmp" "$root/run" "$root/etc" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
with_libs() { # copies each binary's libraries into the root
        for b in "$@"; do
                for l in $(ldd "$b" | grep -o '/[^ ]*'); do
                        mkdir -p "$root$(dirname "$l")"
                        cp -L "$l" "$root$l"
                done
        done
}
for b in sh sleep uname mkdir; do cp -L "$(command -v $b)" "$root/bin/"; with_libs "$(command -v $b)"; done
echo 'root:x:0:0::/:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
# The build's libraries too: --inject copies the build's (dynamic) binary in.
with_libs "$SF"
tar -C "$root" -c . | "$DOCKER" import -c 'ENV PATH=/bin' - sf-attach-plain >/dev/null
cp "$SF" "$root/bin/sockferry"
tar -C "$root" -c . | "$DOCKER" import -c 'ENV PATH=/bin' - sf-attach-with >/dev/null
say "images: sf-attach-plain (no sockferry), sf-attach-with ($(stage_seconds) s)"

# ---- the host service ----
mkdir -p "$W/host"
python3 "$src/tests/containers/host_service.py" "$W/host/service.sock" 2>"$W/service.log" &
service_pid=$!
for _ in $(seq 100); do [ -S "$W/host/service.sock" ] && break; sleep 0.1; done
[ -S "$W/host/service.sock" ] || fail "the host service did not start"

expect() { # NAME EXPECTED GOT
        [ "$2" = "$3" ] || fail "$1: expected [$2], got [$3]"
}
container() { # NAME IMAGE: a container with no network, its /run/host in $W/NAME
        mkdir -p "$W/$1"
        "$DOCKER" run -d --name "$1" --label sockferry-ci-attach --network none -v "$W/$1:/run/host" "$2" sleep infinity >/dev/null 2>"$W/run.log" ||
                { cat "$W/run.log" >&2; fail "docker run $2"; }
}
forward=(-F "svc:unix:/run/host/svc.sock=unix:$W/host/service.sock,mode=0666")
get() { # NAME PATH: curl through the container's socket
        curl -sS --max-time 10 --unix-socket "$W/$1/svc.sock" "http://h$2" 2>&1 || true
}
attach_run() { # NAME [attach options...]: attached, restarted, attached again, SIGTERM
        local name=$1 log=$W/$1.log rc=0
        shift
        "$SF" attach "$@" "${forward[@]}" "$name" 2>"$log" &
        attach_pid=$!
        wait_attached "$log" 1
        expect "$name: curl" "host service: /$name" "$(get "$name" "/$name")"
        "$DOCKER" restart -t 1 "$name" >/dev/null
        wait_attached "$log" 2
        expect "$name: curl after docker restart" "host service: /$name-again" "$(get "$name" "/$name-again")"
        grep -q "the exec was killed: $name stopped or restarted" "$log" || { cat "$log" >&2; fail "$name: the restart not said"; }
        kill -TERM "$attach_pid"
        wait "$attach_pid" || rc=$?
        attach_pid=""
        expect "$name: exit status after SIGTERM" 0 "$rc"
        [ ! -e "$W/$name/svc.sock" ] || { cat "$log" >&2; fail "$name: the container's socket outlived attach"; }
}
cannot() { # WORDS NAME [attach options...]: attach exits 1 saying WORDS
        local words=$1 log=$W/cannot.log rc=0
        shift
        timeout 30 "$SF" attach "${@:2}" "${forward[@]}" "$1" 2>"$log" || rc=$?
        expect "attach $1: exit status" 1 "$rc"
        grep -qF "$words" "$log" || { cat "$log" >&2; fail "attach $1: not said: $words"; }
}

# ---- attach into an image with sockferry ----
container sf-with sf-attach-with
attach_run sf-with
say "attach: docker exec into a container with no network; curl reaches the host service; docker restart re-attaches; SIGTERM removes the socket: OK"

# ---- the engine's failures in plain words ----
cannot "no such container: sf-nosuch" sf-nosuch
"$DOCKER" create --name sf-stopped --label sockferry-ci-attach sf-attach-with sleep infinity >/dev/null 2>&1
timeout 3 "$SF" attach -v "${forward[@]}" sf-stopped 2>"$W/stopped.log" || true
grep -q "container sf-stopped is not running" "$W/stopped.log" && grep -q "attaching again" "$W/stopped.log" ||
        { cat "$W/stopped.log" >&2; fail "a stopped container: not said, or not retried"; }
container sf-plain sf-attach-plain
cannot "no sockferry in the container sf-plain" sf-plain
grep -q -- "--inject" "$W/cannot.log" || fail "no sockferry: no --inject hint"
install -m 0755 "$SF" "$W/sockferry" # where uid 65534 may run it
rc=0
timeout 30 setpriv --reuid 65534 --regid 65534 --clear-groups env DOCKER_HOST="$DOCKER_HOST" HOME=/nonexistent \
        "$W/sockferry" attach "${forward[@]}" sf-with 2>"$W/denied.log" || rc=$?
expect "as uid 65534: exit status" 1 "$rc"
grep -q "permission denied on the engine's socket" "$W/denied.log" || { cat "$W/denied.log" >&2; fail "permission denied: not said"; }
say "words: no such container, not running (retried), no sockferry (--inject hint), permission denied on the engine's socket: OK"

# ---- --inject into the image without sockferry ----
attach_run sf-plain --inject="$SF"
grep -q "inject: copied $SF (x86_64\|inject: copied $SF (aarch64" "$W/sf-plain.log" ||
        { cat "$W/sf-plain.log" >&2; fail "--inject: nothing copied"; }
say "--inject: uname -m, docker cp to /tmp/sockferry-VERSION, attached, and again after docker restart: OK"
