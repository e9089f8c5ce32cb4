#!/bin/bash
# CI stage (issue 34), the third part of tests/ci/containers.sh: attach's presets with a real
# engine, for a container whose user is uid 1000 (the image's USER, as dev containers set it):
#
#   tests/ci/containers-presets.sh BUILD_DIR [docker|podman]   exit 0 PASS, 1 FAIL, 77 SKIP
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
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
engine=${2:-docker}
. "$src/tests/lib/stage.sh" "containers-presets-$engine"
. "$src/tests/ci/engine.sh"
build=$(cd "${1:?usage: tests/ci/containers-presets.sh BUILD_DIR [docker|podman]}" && pwd)
SF=$build/shim/sockferry

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

# ---- attach ----
"$E" run -d "${ENGINE_RUN_ARGS[@]}" --name sf-preset --label sockferry-ci-presets --network none sf-presets sleep infinity >/dev/null 2>"$W/run.log" ||
        { cat "$W/run.log" >&2; fail "$engine run"; }
"$SF" attach "${ENGINE_ARGS[@]}" --ssh-agent --gpg-agent --docker sf-preset >"$W/attach.out" 2>"$W/attach.log" &
attach_pid=$!
wait_attached "$W/attach.log" 1
expect_line() { # WORDS: attach printed a line with WORDS
        grep -qF -- "$1" "$W/attach.out" || { cat "$W/attach.out" "$W/attach.log" >&2; fail "attach did not print: $1"; }
}
expect_line "ssh-agent: /run/sockferry/ssh-agent.sock in sf-preset for uid 1000"
expect_line "gpg-agent: /home/app/.gnupg/S.gpg-agent -> /run/sockferry/gpg-agent.sock in sf-preset for uid 1000"
expect_line "docker: /var/run/docker.sock in sf-preset for uid 1000 gid 1000"
expect_line "exec -e SSH_AUTH_SOCK=/run/sockferry/ssh-agent.sock -u 1000 sf-preset"
[ "$(wc -l <"$W/attach.out")" = 4 ] || { cat "$W/attach.out" >&2; fail "attach printed other than 4 lines"; }

in_c() { "$E" exec "$@"; }
jobs_work() { # ROUND: the three as uid 1000
        local out
        out=$(in_c -e SSH_AUTH_SOCK=/run/sockferry/ssh-agent.sock sf-preset ssh-add -l 2>&1) || true
        [[ "$out" == *"$key"* ]] || fail "$1: ssh-add -l as uid 1000: [$out], not the host key $key"
        out=$(in_c sf-preset bash -ic 'id -u; ssh-add -l' 2>/dev/null) || true
        [[ "$out" == 1000*"$key"* ]] || fail "$1: an interactive bash has no SSH_AUTH_SOCK from /etc/bash.bashrc: [$out]"
        echo "signed in the container, $1" | in_c -i sf-preset gpg --batch --local-user "$fpr" --sign -o - >"$W/signed.gpg" 2>"$W/sign.log" ||
                { cat "$W/sign.log" >&2; fail "$1: gpg --sign as uid 1000"; }
        gpg --batch --verify "$W/signed.gpg" 2>"$W/verify.log" || { cat "$W/verify.log" >&2; fail "$1: the host's gpg does not verify"; }
        grep -q "Good signature" "$W/verify.log" || fail "$1: no good signature"
        out=$(in_c sf-preset docker ps --format '{{.Names}}' 2>&1) || true
        [[ "$out" == *sf-preset* ]] || fail "$1: docker ps as uid 1000: [$out]"
        [ "$(in_c sf-preset id -u)" = 1000 ] || fail "$1: the exec is not uid 1000"
}
jobs_work "first attach"
say "attach --ssh-agent --gpg-agent --docker, as uid 1000: ssh-add -l (-e and bash's rc), gpg --sign verified on the host, docker ps: OK"

# ---- the set-up undone, the container restarted: set up again ----
in_c -u 0 sf-preset rm -f /etc/profile.d/sockferry.sh /home/app/.gnupg/S.gpg-agent
"$E" restart -t 1 sf-preset >/dev/null
wait_attached "$W/attach.log" 2
grep -q "attach: set up sf-preset again for uid 1000" "$W/attach.log" || { cat "$W/attach.log" >&2; fail "restart: not set up again"; }
jobs_work "after $engine restart"
say "$engine restart with the profile and gpg's link removed: set up again, the three work: OK"

rc=0
kill -TERM "$attach_pid"
wait "$attach_pid" || rc=$?
attach_pid=""
[ "$rc" = 0 ] || { cat "$W/attach.log" >&2; fail "exit status after SIGTERM: $rc"; }
! in_c sf-preset sh -c 'ls /run/sockferry/*.sock /var/run/docker.sock' 2>/dev/null || fail "the sockets outlived attach"
say "SIGTERM: exit 0, the sockets removed: OK"
