#!/bin/bash
# CI stage (issue 34), the third part of tests/ci/containers.sh: attach's presets with a real
# engine, for a container whose user is uid 1000 (the image's USER, as dev containers set it):
#
#   tests/ci/containers-presets.sh BUILD_DIR [docker|podman|wine]
#                                  exit 0 PASS, 1 FAIL, 77 SKIP
#
# The image is imported from this machine's binaries (sh, bash, coreutils, gpg, ssh-add, the
# docker CLI, the build's sockferry): no registry, no build. On the host: a real ssh-agent
# with a key, a gpg home with a signing key and its agent, the engine's own socket.
# `attach --ssh-agent --gpg-agent --docker` (no --user: the image's USER), then as uid 1000 in
# the container: `ssh-add -l` lists the host key (through SSH_AUTH_SOCK from `-e`, and from
# /etc/bash.bashrc in an interactive bash), `gpg --sign` makes a signature the host's gpg
# verifies (gpg's own agent socket a link to the forwarded extra socket), `docker ps` lists
# the container itself. The set-up is removed as root and the container restarted: attach
# sets it up again and all three work again. SIGTERM: exit 0, the sockets removed.
#
# wine: the host is Windows: sockferry.exe (SF_WINDOWS_EXE, tests/ci/windows.sh's) under Wine
# runs `attach --ssh-agent --docker` with no SSH_AUTH_SOCK, so the agent is Windows OpenSSH's
# pipe \\.\pipe\openssh-ssh-agent, and DOCKER_HOST=npipe:////./pipe/NAME as Docker Desktop sets
# it: two pipes a second sockferry.exe serves, carried to the real ssh-agent and dockerd by
# socat. docker.exe and gpgconf.exe are tests/windows/unix-exec.c, which runs the Linux CLIs
# (Wine cannot give a Linux program it starts the pipes sockferry.exe hands it). Then ssh-add -l
# and docker ps as uid 1000 as above, the restart, Ctrl+C; and --gpg-agent is refused in plain
# words (Gpg4win's sockets are not ones attach can dial).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
engine=${2:-docker}
. "$src/tests/lib/stage.sh" "containers-presets-$engine"
. "$src/tests/ci/engine.sh"
build=$(cd "${1:?usage: tests/ci/containers-presets.sh BUILD_DIR [docker|podman]}" && pwd)
SF=$build/shim/sockferry

host=linux
if [ "$engine" = wine ]; then
        host=windows engine=docker
        wine=/usr/lib/wine/wine64
        EXE=${SF_WINDOWS_EXE:-}
        [ -x "$wine" ] || skip "no Wine here (wine64; packaging/install-deps.sh installs it)"
        [ -n "$EXE" ] && [ -f "$EXE" ] || skip "no sockferry.exe: SF_WINDOWS_EXE=${EXE:-} (tests/ci/windows.sh builds one)"
        command -v socat >/dev/null || skip "no socat here"
        WIN_CC=${SF_WIN_CC:-${SF_WINDOWS_CACHE:-$HOME/.cache/sockferry-windows}/bin/x86_64-w64-mingw32-cc}
        [ -x "$WIN_CC" ] || skip "no Windows C compiler at $WIN_CC (packaging/windows/build.sh makes it)"
fi
needs_root "$engine"
[ -x "$SF" ] || fail "no sockferry at $SF"
for b in ssh-agent ssh-add ssh-keygen gpg gpgconf bash; do
        command -v "$b" >/dev/null || skip "no $b here (openssh-client, gnupg, bash)"
done
W=$(mktemp -d /tmp/sockferry-presets.XXXXXX)
chmod 0755 "$W"
cleanup 'rm -rf "$W"'
cleanup '[ "$stage_status" = 0 ] || [ -z "${SF_KEEP_LOGS:-}" ] || cp -r "$W" "$SF_KEEP_LOGS"'
engine_start "$engine"
E=$ENGINE
attach_args=("${ENGINE_ARGS[@]}")
attach_pid="" agent_pid=""
cleanup 'ids=$("$E" ps -aq --filter label=sockferry-ci-presets); [ -z "$ids" ] || "$E" rm -f -v $ids >/dev/null 2>&1'
cleanup 'for p in $attach_pid $agent_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; true'
cleanup 'GNUPGHOME=$W/gnupg gpgconf --kill gpg-agent 2>/dev/null || true'

# ---- the image: this machine's binaries, uid 1000 its user ----
root=$W/rootfs
mkdir -p "$root/bin" "$root/tmp" "$root/run" "$root/var/run" "$root/etc/profile.d" "$root/proc" "$root/sys" "$root/dev" \
        "$root/home/app"
chmod 1777 "$root/tmp"
with_libs() {
        for b in "$@"; do
                for l in $(ldd "$b" 2>/dev/null | grep -o '/[^ ]*'); do
                        mkdir -p "$root$(dirname "$l")"
                        cp -L "$l" "$root$l"
                done
        done
}
# What attach's set-up runs (id, ls, mkdir, chmod, grep, ln, sed, tr, tail, mv, printf) and
# what the user runs.
for b in sh bash sleep id ls mkdir chmod grep ln sed tr tail head cat mv rm env gpg gpgconf ssh-add; do
        cp -L "$(command -v $b)" "$root/bin/"
        with_libs "$(command -v $b)"
done
cp -L /usr/bin/docker "$root/bin/docker"
with_libs /usr/bin/docker "$SF"
cp "$SF" "$root/bin/sockferry"
printf 'root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/bash\n' >"$root/etc/passwd"
printf 'root:x:0:\napp:x:1000:\n' >"$root/etc/group"
: >"$root/etc/bash.bashrc"
chown 1000:1000 "$root/home/app"
tar -C "$root" -c . | "$E" import -c 'ENV PATH=/bin' -c 'USER 1000' - sf-presets >/dev/null 2>"$W/import.log" ||
        { cat "$W/import.log" >&2; fail "$engine import"; }
say "image sf-presets: uid 1000 its user, sh, bash, gpg, ssh-add, docker, sockferry ($(stage_seconds) s)"

# ---- the host: an ssh-agent with a key, gpg with a signing key ----
ssh-agent -D -a "$W/agent sock" >/dev/null 2>&1 &
agent_pid=$!
for _ in $(seq 100); do [ -S "$W/agent sock" ] && break; sleep 0.1; done
export SSH_AUTH_SOCK="$W/agent sock" # a path with a space, as macOS agents have
ssh-keygen -q -t ed25519 -N '' -C sf-preset-key -f "$W/id" >/dev/null
ssh-add -q "$W/id" 2>/dev/null
key=$(ssh-keygen -lf "$W/id.pub" | awk '{print $2}')
export GNUPGHOME=$W/gnupg
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key 'sockferry CI <ci@sockferry.invalid>' ed25519 sign never 2>/dev/null
fpr=$(gpg --batch --with-colons --list-secret-keys 2>/dev/null | awk -F: '$1 == "fpr" {print $10; exit}')
[ -n "$fpr" ] || fail "host gpg: no key made"

# ---- the host's attach: this machine's sockferry, or sockferry.exe under Wine ----
if [ "$host" = windows ]; then
        export WINEPREFIX=$W/wine WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=,winemenubuilder.exe=d"
        unset DISPLAY WAYLAND_DISPLAY
        # -w: the server writes the prefix's registry files as it exits, after -k returned;
        # waited for, or they land in $W after its rm -rf
        wineserver=$(dirname "$wine")/wineserver # not on PATH in Debian's wine64
        cleanup '"$wineserver" -k 2>/dev/null; timeout 30 "$wineserver" -w; true'
        cleanup 'for p in ${side_pids:-}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; true'
        winpath() { echo "Z:${1//\//\\}"; } # a path here as Wine shows it to Windows programs
        # The agent's pipe and Docker Desktop's, served by a second sockferry.exe, carried to
        # the real ssh-agent and dockerd by socat.
        pipe=sf-ci-docker-$$
        agent_port=$(free_port) docker_port=$(free_port)
        socat TCP-LISTEN:"$agent_port",bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:"$SSH_AUTH_SOCK" 2>"$W/socat-agent.log" &
        side_pids=$!
        socat TCP-LISTEN:"$docker_port",bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:"${DOCKER_HOST#unix://}" 2>"$W/socat-docker.log" &
        side_pids+=" $!"
        "$wine" "$EXE" relay -F "agent:npipe:openssh-ssh-agent=tcp:127.0.0.1:$agent_port" \
                -F "docker:npipe:$pipe=tcp:127.0.0.1:$docker_port" 2>"$W/pipes.log" &
        side_pids+=" $!"
        # docker.exe and gpgconf.exe: the Linux CLIs, reaching dockerd and gpg the Linux way.
        "$WIN_CC" -std=gnu11 -O2 -Wall -Wextra -Werror -o "$W/docker.exe" "$src/tests/windows/unix-exec.c" -lws2_32 -lshell32 \
                >"$W/cc.log" 2>&1 || { cat "$W/cc.log" >&2; fail "tests/windows/unix-exec.c does not build"; }
        cp "$W/docker.exe" "$W/gpgconf.exe"
        python3 "$src/tests/windows/unix_exec_server.py" "$W/unix-exec.port" docker="$E" +DOCKER_HOST="$DOCKER_HOST" \
                gpgconf="$(command -v gpgconf)" +GNUPGHOME="$GNUPGHOME" 2>"$W/unix-exec.log" &
        side_pids+=" $!"
        for _ in $(seq 600); do
                [ "$(grep -c 'listening on' "$W/pipes.log")" -ge 2 ] && [ -s "$W/unix-exec.port" ] && break
                sleep 0.1
        done
        [ "$(grep -c 'listening on' "$W/pipes.log")" -ge 2 ] || { cat "$W/pipes.log" >&2; fail "sockferry.exe did not serve the pipes"; }
        [ -s "$W/unix-exec.port" ] || { cat "$W/unix-exec.log" >&2; fail "tests/windows/unix_exec_server.py did not start"; }
        attach_args=(--engine docker --engine-cmd "$(winpath "$W/docker.exe")")
        attach_cmd=(env -u SSH_AUTH_SOCK DOCKER_HOST="npipe:////./pipe/$pipe" WINEPATH="$(winpath "$W")"
                SF_UNIX_EXEC_PORT="$(cat "$W/unix-exec.port")" "$wine" "$EXE" attach)
        # Wine turns SIGINT into the console's Ctrl+C, as Windows delivers it.
        stop_signal=INT
        say "Windows host: sockferry.exe under Wine serving the named pipes openssh-ssh-agent and $pipe ($(stage_seconds) s)"
else
        attach_cmd=("$SF" attach)
        stop_signal=TERM
fi

# ---- attach ----
"$E" run -d "${ENGINE_RUN_ARGS[@]}" --name sf-preset --label sockferry-ci-presets --network none sf-presets sleep infinity >/dev/null 2>"$W/run.log" ||
        { cat "$W/run.log" >&2; fail "$engine run"; }
presets=(--ssh-agent --gpg-agent --docker)
if [ "$host" = windows ]; then
        rc=0
        timeout 60 "${attach_cmd[@]}" "${attach_args[@]}" --gpg-agent sf-preset >"$W/attach.out" 2>"$W/attach.log" || rc=$?
        [ "$rc" = 78 ] && grep -q -- "--gpg-agent: not from a Windows host: .* is Gpg4win's emulated socket" "$W/attach.log" ||
                { cat "$W/attach.log" >&2; fail "--gpg-agent from a Windows host: exit $rc, not refused in plain words"; }
        say "--gpg-agent from a Windows host: refused in plain words (exit 78): OK"
        presets=(--ssh-agent --docker)
fi
"${attach_cmd[@]}" "${attach_args[@]}" "${presets[@]}" sf-preset >"$W/attach.out" 2>"$W/attach.log" &
attach_pid=$!
wait_attached "$W/attach.log" 1
expect_line() { # WORDS: attach printed a line with WORDS
        grep -qF -- "$1" "$W/attach.out" || { cat "$W/attach.out" "$W/attach.log" >&2; fail "attach did not print: $1"; }
}
expect_line "ssh-agent: /run/sockferry/ssh-agent.sock in sf-preset for uid 1000"
[ "$host" = windows ] || expect_line "gpg-agent: /home/app/.gnupg/S.gpg-agent -> /run/sockferry/gpg-agent.sock in sf-preset for uid 1000"
expect_line "docker: /var/run/docker.sock in sf-preset for uid 1000 gid 1000"
expect_line "exec -e SSH_AUTH_SOCK=/run/sockferry/ssh-agent.sock -u 1000 sf-preset"
[ "$(wc -l <"$W/attach.out")" = $((${#presets[@]} + 1)) ] ||
        { cat "$W/attach.out" >&2; fail "attach printed other than $((${#presets[@]} + 1)) lines"; }

in_c() { "$E" exec "$@"; }
jobs_work() { # ROUND: the three as uid 1000
        local out
        out=$(in_c -e SSH_AUTH_SOCK=/run/sockferry/ssh-agent.sock sf-preset ssh-add -l 2>&1) || true
        [[ "$out" == *"$key"* ]] || fail "$1: ssh-add -l as uid 1000: [$out], not the host key $key"
        out=$(in_c sf-preset bash -ic 'id -u; ssh-add -l' 2>/dev/null) || true
        [[ "$out" == 1000*"$key"* ]] || fail "$1: an interactive bash has no SSH_AUTH_SOCK from /etc/bash.bashrc: [$out]"
        if [ "$host" = linux ]; then
                echo "signed in the container, $1" | in_c -i sf-preset gpg --batch --local-user "$fpr" --sign -o - \
                        >"$W/signed.gpg" 2>"$W/sign.log" || { cat "$W/sign.log" >&2; fail "$1: gpg --sign as uid 1000"; }
                gpg --batch --verify "$W/signed.gpg" 2>"$W/verify.log" ||
                        { cat "$W/verify.log" >&2; fail "$1: the host's gpg does not verify"; }
                grep -q "Good signature" "$W/verify.log" || fail "$1: no good signature"
        fi
        out=$(in_c sf-preset docker ps --format '{{.Names}}' 2>&1) || true
        [[ "$out" == *sf-preset* ]] || fail "$1: docker ps as uid 1000: [$out]"
        [ "$(in_c sf-preset id -u)" = 1000 ] || fail "$1: the exec is not uid 1000"
}
jobs_work "first attach"
say "$host host: attach ${presets[*]}, as uid 1000: ssh-add -l (-e and bash's rc),$([ "$host" = windows ] || echo " gpg --sign verified on the host,") docker ps: OK"

# ---- the set-up undone, the container restarted: set up again ----
in_c -u 0 sf-preset rm -f /etc/profile.d/sockferry.sh /home/app/.gnupg/S.gpg-agent
"$E" restart -t 1 sf-preset >/dev/null
wait_attached "$W/attach.log" 2
grep -q "attach: set up sf-preset again for uid 1000" "$W/attach.log" || { cat "$W/attach.log" >&2; fail "restart: not set up again"; }
jobs_work "after $engine restart"
say "$engine restart with the profile$([ "$host" = windows ] || echo " and gpg's link") removed: set up again, ${presets[*]} work: OK"

rc=0
kill -"$stop_signal" "$attach_pid"
wait "$attach_pid" || rc=$?
attach_pid=""
[ "$rc" = 0 ] || { cat "$W/attach.log" >&2; fail "exit status after SIG$stop_signal: $rc"; }
! in_c sf-preset sh -c 'ls /run/sockferry/*.sock /var/run/docker.sock' 2>/dev/null || fail "the sockets outlived attach"
say "SIG$stop_signal: exit 0, the sockets removed: OK"
