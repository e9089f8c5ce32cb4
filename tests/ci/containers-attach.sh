#!/bin/bash
# CI stage (issue 25), the second part of tests/ci/containers.sh: `sockferry attach` with a
# real engine, Debian's docker.io or podman, in a minute and without a registry or an image
# build: the private dockerd or podman service of tests/ci/engine.sh (tests/ci/containers.sh's
# dockerd, or one of its own when run alone), and two images imported from this machine's own binaries:
# "plain" (sh, sleep, uname, mkdir and their libraries: no sockferry) and "with" (plain and the
# build's sockferry with its libraries). As root:
#
#   tests/ci/containers-attach.sh BUILD_DIR [docker|podman]
#                                 exit 0 PASS, 1 FAIL, 77 SKIP (no such engine here)
#
# Checks: attach --engine ENGINE into a container with no network at all (its /run/host a
# directory of this machine, so a client here reaches the socket the far end made there):
# data both ways through to a host service; ENGINE restart -> attached again; SIGTERM -> exit
# 0 and the container's socket removed. In the engine's own words: no such container, a
# container that is not running (retried), no sockferry in the image (with the --inject hint),
# permission denied on the engine's socket (as uid 65534; docker only: podman run by a user is
# that user's own rootless podman, with no shared socket to be denied). --inject into the plain
# image (uname -m, one exec as root making a new 0700 directory and checking the copy): attached,
# and again after ENGINE restart, the directory removed at the end; into a --read-only container
# (refused in plain words, then --inject-dir on a volume); and with a uid-1000 process in the
# container that made the old fixed /tmp/sockferry-VERSION first and races the new directory:
# nothing of it runs as root.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
engine=${2:-docker}
. "$src/tests/lib/stage.sh" "containers-attach-$engine"
. "$src/tests/ci/engine.sh"
build=$(cd "${1:?usage: tests/ci/containers-attach.sh BUILD_DIR [docker|podman]}" && pwd)
SF=$build/shim/sockferry

needs_root "$engine"
[ -x "$SF" ] || fail "no sockferry at $SF"
W=$(mktemp -d /tmp/sockferry-attach.XXXXXX)
chmod 0755 "$W"
cleanup 'rm -rf "$W"'
cleanup '[ "$stage_status" = 0 ] || [ -z "${SF_KEEP_LOGS:-}" ] || cp -r "$W" "$SF_KEEP_LOGS"'
engine_start "$engine"
attach_pid="" service_pid=""
# What this part made in the engine (the engine itself may serve another part): its
# containers carry the label sockferry-ci-attach.
cleanup 'ids=$("$ENGINE" ps -aq --filter label=sockferry-ci-attach); [ -z "$ids" ] || "$ENGINE" rm -f -v $ids >/dev/null'
cleanup 'for p in $attach_pid $service_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; true'

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
# --inject's checks need id, ls, head, chmod, sha256sum, rm, rmdir; the racer below cp, mv, ln, grep, touch, cat.
for b in sh sleep uname mkdir id ls head chmod sha256sum rm rmdir cp mv ln grep touch cat; do
        cp -L "$(command -v $b)" "$root/bin/"
        with_libs "$(command -v $b)"
done
echo 'root:x:0:0::/:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
# The build's libraries too: --inject copies the build's (dynamic) binary in.
with_libs "$SF"
tar -C "$root" -c . | "$ENGINE" import -c 'ENV PATH=/bin' - sf-attach-plain >/dev/null
cp "$SF" "$root/bin/sockferry"
tar -C "$root" -c . | "$ENGINE" import -c 'ENV PATH=/bin' - sf-attach-with >/dev/null
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
        "$ENGINE" run -d "${ENGINE_RUN_ARGS[@]}" --name "$1" --label sockferry-ci-attach --network none -v "$W/$1:/run/host" "$2" sleep infinity >/dev/null 2>"$W/run.log" ||
                { cat "$W/run.log" >&2; fail "$engine run $2"; }
}
forward=(-F "svc:unix:/run/host/svc.sock=unix:$W/host/service.sock,mode=0666")
get() { # NAME PATH: curl through the container's socket
        curl -sS --max-time 10 --unix-socket "$W/$1/svc.sock" "http://h$2" 2>&1 || true
}
attach_run() { # NAME [attach options...]: attached, restarted, attached again, SIGTERM
        local name=$1 log=$W/$1.log rc=0
        shift
        "$SF" attach "${ENGINE_ARGS[@]}" "$@" "${forward[@]}" "$name" 2>"$log" &
        attach_pid=$!
        wait_attached "$log" 1
        expect "$name: curl" "host service: /$name" "$(get "$name" "/$name")"
        "$ENGINE" restart -t 1 "$name" >/dev/null
        wait_attached "$log" 2
        expect "$name: curl after $engine restart" "host service: /$name-again" "$(get "$name" "/$name-again")"
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
        timeout 30 "$SF" attach "${ENGINE_ARGS[@]}" "${@:2}" "${forward[@]}" "$1" 2>"$log" || rc=$?
        expect "attach $1: exit status" 1 "$rc"
        grep -qF "$words" "$log" || { cat "$log" >&2; fail "attach $1: not said: $words"; }
}

# ---- attach into an image with sockferry ----
container sf-with sf-attach-with
attach_run sf-with
say "attach: $engine exec into a container with no network; curl reaches the host service; $engine restart re-attaches; SIGTERM removes the socket: OK"

# ---- the engine's failures in plain words ----
cannot "no such container: sf-nosuch" sf-nosuch
"$ENGINE" create "${ENGINE_RUN_ARGS[@]}" --name sf-stopped --label sockferry-ci-attach sf-attach-with sleep infinity >/dev/null 2>&1
timeout 3 "$SF" attach "${ENGINE_ARGS[@]}" -v "${forward[@]}" sf-stopped 2>"$W/stopped.log" || true
grep -q "container sf-stopped is not running" "$W/stopped.log" && grep -q "attaching again" "$W/stopped.log" ||
        { cat "$W/stopped.log" >&2; fail "a stopped container: not said, or not retried"; }
container sf-plain sf-attach-plain
cannot "no sockferry in the container sf-plain" sf-plain
grep -q -- "--inject" "$W/cannot.log" || fail "no sockferry: no --inject hint"
if [ "$engine" = docker ]; then
        install -m 0755 "$SF" "$W/sockferry" # where uid 65534 may run it
        rc=0
        timeout 30 setpriv --reuid 65534 --regid 65534 --clear-groups env DOCKER_HOST="$DOCKER_HOST" HOME=/nonexistent \
                "$W/sockferry" attach "${forward[@]}" sf-with 2>"$W/denied.log" || rc=$?
        expect "as uid 65534: exit status" 1 "$rc"
        grep -q "permission denied on the engine's socket" "$W/denied.log" || { cat "$W/denied.log" >&2; fail "permission denied: not said"; }
        say "words: no such container, not running (retried), no sockferry (--inject hint), permission denied on the engine's socket: OK"
else
        say "words: no such container, not running (retried), no sockferry (--inject hint): OK"
fi

# ---- --inject into the image without sockferry ----
attach_run sf-plain --inject="$SF"
grep -q "inject: copied $SF (x86_64\|inject: copied $SF (aarch64" "$W/sf-plain.log" ||
        { cat "$W/sf-plain.log" >&2; fail "--inject: nothing copied"; }
injected() { # NAME DIR: the directories --inject made in DIR
        "$ENGINE" exec "$1" sh -c 'cd "$1" && for x in sockferry.*; do [ -e "$x" ] && echo "$1/$x"; done; true' sh "$2"
}
[ -z "$(injected sf-plain /tmp)" ] || fail "--inject: the directory outlived attach: $(injected sf-plain /tmp)"
say "--inject: uname -m, one exec making /tmp/sockferry.RANDOM (0700) with the checked copy, attached, and again after $engine restart; removed at the end: OK"

# ---- --inject into a read-only root filesystem: refused in plain words, then --inject-dir ----
mkdir -p "$W/sf-ro"
# podman's --read-only mounts a tmpfs on /tmp, /run and /var/tmp unless told not to; docker's
# leaves the whole root read-only.
ro=(--read-only)
[ "$engine" != podman ] || ro+=(--read-only-tmpfs=false)
"$ENGINE" run -d "${ENGINE_RUN_ARGS[@]}" --name sf-ro --label sockferry-ci-attach "${ro[@]}" --network none -v "$W/sf-ro:/run/host" -v /inject sf-attach-plain \
        sleep infinity >/dev/null 2>"$W/run.log" || { cat "$W/run.log" >&2; fail "$engine run --read-only"; }
cannot "Read-only file system" sf-ro --inject="$SF"
grep -q -- "--inject-dir DIR" "$W/cannot.log" || { cat "$W/cannot.log" >&2; fail "read-only: no --inject-dir hint"; }
attach_run sf-ro --inject="$SF" --inject-dir /inject
[ -z "$(injected sf-ro /inject)" ] || fail "--inject-dir: the directory outlived attach"
say "--inject into a --read-only container: refused with the --inject-dir hint; --inject-dir on a volume attached, restarted, removed: OK"

# ---- --inject with a uid-1000 process racing it ----
version=$("$SF" version | sed -n 's/^version: //p')
container sf-race sf-attach-plain
# As uid 1000: the old fixed place made first (its directory with its binary, and a symbolic
# link), then every /tmp/sockferry.* it sees: replace the binary, add to it, rename it away.
racer='printf "#!/bin/sh\necho \"uid \$(id -u) ran \$0\" >> /tmp/pwned\nexit 1\n" > /tmp/evil && chmod 755 /tmp/evil || exit 1
mkdir "/tmp/sockferry-$1" && cp /tmp/evil "/tmp/sockferry-$1/sockferry" && ln -s "/tmp/sockferry-$1" "/tmp/sockferry-$1.d" || exit 1
touch /tmp/armed
while [ ! -e /tmp/stop ]; do
        for x in /tmp/sockferry.*; do
                [ -d "$x" ] || continue
                grep -qxF "$x" /tmp/seen 2>/dev/null || echo "$x" >> /tmp/seen
                cp /tmp/evil "$x/sockferry" 2>/dev/null && echo "replaced $x/sockferry" >> /tmp/won
                ln -s /tmp/evil "$x/new" 2>/dev/null && echo "linked in $x" >> /tmp/won
                mv "$x" "$x.away" 2>/dev/null && mkdir "$x" && cp /tmp/evil "$x/sockferry" && echo "swapped $x" >> /tmp/won
        done
done'
"$ENGINE" exec -d -u 1000 sf-race sh -c "$racer" sh "$version"
in_race() { "$ENGINE" exec sf-race sh -c "$1"; }
for _ in $(seq 100); do in_race 'test -e /tmp/armed' && break; sleep 0.1; done
in_race 'test -e /tmp/armed' || fail "race: the uid-1000 process did not start"
"$SF" attach "${ENGINE_ARGS[@]}" --inject="$SF" "${forward[@]}" sf-race 2>"$W/sf-race.log" &
attach_pid=$!
wait_attached "$W/sf-race.log" 1
expect "race: curl" "host service: /race" "$(get sf-race /race)"
dir=$(injected sf-race /tmp)
for _ in $(seq 100); do [ "$(in_race 'cat /tmp/seen' 2>/dev/null)" = "$dir" ] && break; sleep 0.1; done
[ "$(in_race 'cat /tmp/seen' 2>/dev/null)" = "$dir" ] || fail "race: the uid-1000 process never saw $dir"
in_race 'touch /tmp/stop'
! in_race 'cat /tmp/won' 2>/dev/null || fail "race: the uid-1000 process changed $dir: $(in_race 'cat /tmp/won')"
! in_race 'cat /tmp/pwned' 2>/dev/null || fail "race: root ran the uid-1000 process's binary: $(in_race 'cat /tmp/pwned')"
[ "$(in_race "ls -ldn /tmp/sockferry-$version" | awk '{print $3}')" = 1000 ] ||
        fail "race: the old fixed /tmp/sockferry-$version was touched"
rc=0
kill -TERM "$attach_pid"
wait "$attach_pid" || rc=$?
attach_pid=""
expect "race: exit status after SIGTERM" 0 "$rc"
[ -z "$(injected sf-race /tmp)" ] || fail "race: the directory outlived attach"
! in_race 'cat /tmp/pwned' 2>/dev/null || fail "race: root ran the uid-1000 process's binary: $(in_race 'cat /tmp/pwned')"
say "--inject with a uid-1000 process that made /tmp/sockferry-$version first and raced $dir: nothing of it ran as root: OK"
