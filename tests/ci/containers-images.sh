#!/bin/bash
# CI stage, the first part of tests/ci/containers.sh: sockferry's container images in a real
# engine (Debian 12's docker.io, BuildKit, docker-compose 1.29), against a host relay on this
# machine. As root on Debian 12:
#
#   tests/ci/containers-images.sh     exit 0 PASS, 1 FAIL, 77 SKIP (dockerd cannot start here)
#
# The engine (tests/ci/engine.sh: private, no network, no registry) is the one
# tests/ci/containers.sh started, or one of its own when run alone; every container uses
# --network host. Nothing is pulled: the Debian base image is built with mmdebstrap from this
# machine's apt sources and imported. Everything this part made is removed at the end.
#
# Checks (doc: packaging/README.md, "Containers"):
#   images     packaging/docker/Dockerfile, the final (Debian slim) and the static (scratch)
#              targets, the preload library at the .deb's path, the static image <= 5 MiB
#   desktop    an empty host directory bind-mounted where the host socket should be: `run`
#              binds, falls back to TCP, places the alias; curl reaches the host service through
#              the alias and through the env variable; the empty directory AT the alias path
#              (the preload library)
#   native     the real host socket bind-mounted, same config: reached with the host relay down
#   exit       docker stop -> drain, 143; no config -> 78; the payload's status passed on
#   health     healthy -> host relay stopped -> unhealthy, reason in docker inspect -> healthy
#   sidecar    packaging/kubernetes/sidecar.yaml's containers (prepare, the static sidecar as
#              uid 65532, the app as uid 1000) with their users, fsGroup and securityContext
#              (--read-only --cap-drop ALL no-new-privileges) and kubelet's volume owners and
#              modes; the manifest's probes; the app reaches the socket
#   health -F  a container started with -F only (no config file) becomes healthy
#   macos §5   doc/MACOS.md's container commands as written (an image with ssh-add from the
#              project's; ssh-add -l lists the key of an ssh-agent on this machine)
#   compose    docker-compose up of packaging/docker/compose.yaml as shipped -> healthy
#   attach     `sockferry attach --engine docker` into a container of the client image with no
#              network at all, and with --inject into the plain base image (no sockferry in
#              it); curl reaches the host service; docker restart -> attached again; SIGTERM to
#              attach -> the container's socket removed
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/lib/stage.sh" containers-images
. "$src/tests/ci/engine.sh"
DOCKER=/usr/bin/docker   # Debian's CLI: another docker earlier on PATH may lack what is used here

needs_root "apt-get, dockerd"
engine_install docker.io docker-compose python3-yaml curl openssh-client
W=$(mktemp -d /tmp/sockferry-containers.XXXXXX)
cleanup 'rm -rf "$W"'
cleanup '[ "$stage_status" = 0 ] || [ -z "${SF_KEEP_LOGS:-}" ] || cp -r "$W" "$SF_KEEP_LOGS"'
engine_start docker
relay_pid="" service_pid="" mac_relay="" agent_pid="" attach_pid=""
# What this part made in the engine (the engine itself may serve the next part).
remove_containers() {
        if [ -f "$W/compose/compose.yaml" ]; then
                (cd "$W/compose" && docker-compose -p sockferry-ci -f compose.yaml -f ci.override.yaml \
                        down -v --timeout 5 >/dev/null 2>&1)
        fi
        local ids
        ids=$("$DOCKER" ps -aq --filter label=sockferry-ci)
        [ -z "$ids" ] || "$DOCKER" rm -f -v $ids >/dev/null
}
cleanup remove_containers
cleanup 'for p in $attach_pid $relay_pid $service_pid $mac_relay $agent_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done'
versions="dockerd $("$DOCKER" version -f '{{.Server.Version}}'), CLI $("$DOCKER" version -f '{{.Client.Version}}'), $(docker-compose version --short | sed 's/^/docker-compose /'), containerd $("$DOCKER" version -f '{{range .Server.Components}}{{if eq .Name "containerd"}}{{.Version}}{{end}}{{end}}')"
say "engine: $versions"

# ---- the Debian base image, from this machine's apt sources (no registry) ----
# Built beside the test lanes by tests/ci.sh (SF_CI_BASE_TAR), or here when run alone.
base=${SF_CI_BASE_TAR:-}
if [ -z "$base" ] || [ ! -s "$base" ]; then
        [ -z "$base" ] || say "$base is missing (its stage failed?): building the base image here"
        base=$W/base.tar
        "$src/tests/ci/base-image.sh" "$base" >"$W/base-image.log" 2>&1 ||
                { cat "$W/base-image.log" >&2; fail "tests/ci/base-image.sh failed"; }
fi
# The images, in this engine (cache hits when tests/ci.sh built them ahead in its data root).
SF_CI_DOCKER_HOST=$DOCKER_HOST "$src/tests/ci/images.sh" "$base" || fail "tests/ci/images.sh (above)"
rm -f "$W/base.tar"
size_final=$("$DOCKER" image inspect -f '{{.Size}}' sockferry)
size_static=$("$DOCKER" image inspect -f '{{.Size}}' sockferry:static)
say "images: sockferry $((size_final / 1024 / 1024)) MiB, sockferry:static $size_static bytes ($(stage_seconds) s)"
[ "$size_static" -le $((5 * 1024 * 1024)) ] || fail "sockferry:static is $size_static bytes, more than 5 MiB"

# The preload library where the .deb puts it, and nowhere else.
got=$("$DOCKER" run --rm --label sockferry-ci --network host --entrypoint sh sockferry -c \
        'ls -d /usr/lib*/sockferry/sockferry-preload.so /usr/lib/*/sockferry/sockferry-preload.so 2>/dev/null; true' \
        2>"$W/preload-path.log") || { cat "$W/preload-path.log" >&2; fail "docker run of the image failed"; }
[ "$got" = /usr/lib/sockferry/sockferry-preload.so ] ||
        fail "preload library in the image: '$got', expected /usr/lib/sockferry/sockferry-preload.so only"

# ---- the host side: a service on a unix socket, a relay with auth = token in front of it ----
mkdir -p "$W/host" "$W/secrets" "$W/empty" "$W/shared"
id=$("$DOCKER" create sockferry:static 2>"$W/create.log") || { cat "$W/create.log" >&2; fail "docker create sockferry:static"; }
"$DOCKER" cp "$id:/usr/bin/sockferry" "$W/sockferry"
"$DOCKER" rm "$id" >/dev/null
"$W/sockferry" keygen -o "$W/secrets/sockferry.token" 2>"$W/keygen.log"
chmod 0400 "$W/secrets/sockferry.token"
python3 "$src/tests/containers/host_service.py" "$W/host/dispatch.sock" 2>"$W/service.log" &
service_pid=$!
# The host relay's port: 7777 as in the shipped files, another one (written into the test's
# copies of them) when something else on this machine has it.
PORT=7777
bindable() { python3 -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null; }
bindable "$PORT" || PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
[ "$PORT" = 7777 ] || say "127.0.0.1:7777 is taken on this machine: the host relay listens on $PORT"
start_relay() {
        "$W/sockferry" relay -F "dispatch:tcp:127.0.0.1:$PORT=unix:$W/host/dispatch.sock,auth=token,token-file=$W/secrets/sockferry.token" \
                2>>"$W/relay.log" &
        relay_pid=$!
        for _ in $(seq 100); do
                "$W/sockferry" probe "$W/host/dispatch.sock" >/dev/null 2>&1 &&
                        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
                kill -0 "$relay_pid" 2>/dev/null || break
                sleep 0.1
        done
        cat "$W/relay.log" >&2
        fail "the host relay did not start on 127.0.0.1:$PORT"
}
stop_relay() { kill "$relay_pid"; wait "$relay_pid" || true; relay_pid=""; }
start_relay
sed "s/:7777\$/:$PORT/" "$src/packaging/docker/sockferry.conf" >"$W/sockferry.conf"

# Every container: host network, host.docker.internal = 127.0.0.1 (host-gateway-ip), the
# config and the token (0400, root) bind-mounted, a label for the cleanup.
common=(--label sockferry-ci --network host --add-host host.docker.internal:host-gateway
        -v "$W/sockferry.conf:/etc/sockferry.conf:ro" -v "$W/secrets/sockferry.token:/run/secrets/sockferry.token:ro")
expect() { # NAME EXPECTED GOT
        [ "$2" = "$3" ] || fail "$1: expected [$2], got [$3]"
}
run_d() { # docker run -d ARGS...; its stderr only when it fails (it warns that forwarding is off)
        "$DOCKER" run -d "$@" >/dev/null 2>"$W/run-d.log" || { cat "$W/run-d.log" >&2; fail "docker run -d $*"; }
}
# OCI labels and the static image's user.
labels=$("$DOCKER" image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}} {{index .Config.Labels "org.opencontainers.image.licenses"}}' sockferry:static)
expect "sockferry:static labels" "$(meson introspect --projectinfo "$src/meson.build" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])') MIT" "$labels"
expect "sockferry:static user" "65532:65532" "$("$DOCKER" image inspect -f '{{.Config.User}}' sockferry:static)"
health() { "$DOCKER" inspect -f '{{.State.Health.Status}}' "$1"; }
wait_health() { # CONTAINER STATUS MAX_SECONDS; prints the seconds it took
        local s=$SECONDS
        while [ "$(health "$1")" != "$2" ]; do
                ((SECONDS - s < $3)) || { "$DOCKER" inspect -f '{{json .State.Health}}' "$1" >&2; "$DOCKER" logs "$1" >&2; fail "$1 not $2 within $3 s"; }
                sleep 0.2
        done
        echo $((SECONDS - s))
}

# ---- health, started first: its waits overlap the other checks ----
run_d --name sf-ci-health "${common[@]}" -v "$W/empty:/run/host/dispatch.sock" sockferry
hstart=$SECONDS
# The same image started with -F only: no /etc/sockferry.conf, the HEALTHCHECK (check --pid 1)
# checks the -F forward.
run_d --name sf-ci-health-f --label sockferry-ci --network host --add-host host.docker.internal:host-gateway \
        -v "$W/secrets/sockferry.token:/run/secrets/sockferry.token:ro" --entrypoint sockferry sockferry \
        run -F "dispatch:unix:/run/sockferry/dispatch.sock=tcp:host.docker.internal:$PORT,auth=token,token-file=/run/secrets/sockferry.token" \
        -- sleep infinity

# ---- desktop: an empty host directory where the host socket should be ----
# An unmodified client as the payload: curl through the alias and through the env variable.
alias_and_env() { # NAME HOST_PATH_AT_/run/host/dispatch.sock
        local got
        got=$("$DOCKER" run --rm "${common[@]}" -v "$2:/run/host/dispatch.sock" sockferry-ci-client sh -c '
                curl -sS --max-time 10 --unix-socket /run/ward/dispatch-broker.sock http://h/alias &&
                curl -sS --max-time 10 --unix-socket "$WARD_DISPATCH_BROKER_SOCK" http://h/env &&
                echo "env=$WARD_DISPATCH_BROKER_SOCK link=$(readlink /run/ward/dispatch-broker.sock)"' \
                2>"$W/$1.log") || { cat "$W/$1.log" >&2; fail "$1: the client failed"; }
        expect "$1" "host service: /alias
host service: /env
env=/run/sockferry/dispatch.sock link=/run/sockferry/dispatch.sock" "$got"
}
alias_and_env desktop "$W/empty"
grep -q 'host service: /alias\|"GET /alias' "$W/service.log" || fail "desktop: the host service saw no request"
[ -z "$(ls -A "$W/empty")" ] || fail "desktop: something was written into the empty host directory"
say "desktop: empty directory at /run/host/dispatch.sock -> TCP to the host relay; curl through the alias and \$WARD_DISPATCH_BROKER_SOCK: OK"

# The empty directory at the alias path itself (a mount point): only the preload library helps.
got=$("$DOCKER" run --rm "${common[@]}" -v "$W/empty:/run/host/dispatch.sock" \
        -v "$W/empty:/run/ward/dispatch-broker.sock" sockferry-ci-client \
        sh -c 'echo "$LD_PRELOAD"; curl -sS --max-time 10 --unix-socket /run/ward/dispatch-broker.sock http://h/preload' \
        2>"$W/preload.log") || { cat "$W/preload.log" >&2; fail "preload: the client failed"; }
expect preload "/usr/lib/sockferry/sockferry-preload.so
host service: /preload" "$got"
say "desktop: empty directory AT the alias path -> curl through the preload library: OK"

# ---- health: healthy with the link working, unhealthy without the host relay ----
s=$(wait_health sf-ci-health healthy 30)
say "health: healthy $((SECONDS - hstart)) s after docker run"
s=$(wait_health sf-ci-health-f healthy 30)
say "health: the -F-only container healthy too (HEALTHCHECK check --pid 1)"
"$DOCKER" rm -f sf-ci-health-f >/dev/null
stop_relay
hdown=$SECONDS

# ---- native: the real host socket bind-mounted, same config, host relay down ----
alias_and_env native "$W/host/dispatch.sock"
say "native: host socket bind-mounted -> unix:/run/host/dispatch.sock (host relay stopped), alias and env: OK"

# ---- exit statuses ----
rc=0
"$DOCKER" run --rm --label sockferry-ci --network host sockferry true 2>"$W/noconf.log" || rc=$?
expect "no config exit status" 78 "$rc"
grep -q /etc/sockferry.conf "$W/noconf.log" || { cat "$W/noconf.log" >&2; fail "no config: the message does not name /etc/sockferry.conf"; }
rc=0
"$DOCKER" run --rm "${common[@]}" -v "$W/empty:/run/host/dispatch.sock" sockferry sh -c 'exit 7' 2>/dev/null || rc=$?
expect "payload exit status" 7 "$rc"
# docker stop with a request in flight (the host service answers after 2 s), from outside
# the container through the shared socket directory: the relay drains it, then exits 143.
mkdir -p "$W/stop"
run_d --name sf-ci-stop "${common[@]}" -v "$W/host/dispatch.sock:/run/host/dispatch.sock" \
        -v "$W/stop:/run/sockferry" sockferry
for _ in $(seq 100); do [ -S "$W/stop/dispatch.sock" ] && break; sleep 0.1; done
curl -sS --max-time 10 --unix-socket "$W/stop/dispatch.sock" http://h/slow-drain >"$W/drain.out" 2>&1 &
curl_pid=$!
for _ in $(seq 100); do grep -q 'started /slow-drain' "$W/service.log" && break; sleep 0.05; done
s=$SECONDS
"$DOCKER" stop -t 15 sf-ci-stop >/dev/null
took=$((SECONDS - s))
wait "$curl_pid" || { cat "$W/drain.out" >&2; fail "docker stop: the request in flight was cut"; }
expect "docker stop: the request in flight" "host service: /slow-drain" "$(cat "$W/drain.out")"
expect "docker stop exit status" 143 "$("$DOCKER" inspect -f '{{.State.ExitCode}}' sf-ci-stop)"
((took < 15)) || fail "docker stop took $took s: SIGKILL, not a drain"
"$DOCKER" logs sf-ci-stop >"$W/stop.log" 2>&1
grep -qi 'error\|warn' "$W/stop.log" && { cat "$W/stop.log" >&2; fail "docker stop: errors in the log"; }
[ ! -e "$W/stop/dispatch.sock" ] || fail "docker stop: the listen socket was left behind"
say "exit: no config 78, payload's 7 passed on; docker stop: the request in flight answered, 143 after $took s"

# ---- health: unhealthy with the reason, then healthy again ----
s=$(wait_health sf-ci-health unhealthy 40)
reason=$("$DOCKER" inspect -f '{{json .State.Health}}' sf-ci-health |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["Log"][-1]["Output"].strip())')
say "health: unhealthy $((SECONDS - hdown)) s after the host relay stopped; docker inspect: $reason"
echo "$reason" | grep -q "127.0.0.1:$PORT\|host.docker.internal:$PORT" || fail "health: the reason does not name the host relay's address"
start_relay
hup=$SECONDS
s=$(wait_health sf-ci-health healthy 30)
say "health: healthy again $((SECONDS - hup)) s after the host relay restarted"
"$DOCKER" rm -f sf-ci-health >/dev/null

# ---- sidecar: packaging/kubernetes/sidecar.yaml with the images ----
# Its ConfigMap, and each container's image, command, args ($(NODE_IP) = this machine), user
# and securityContext as docker run flags (--read-only, --cap-drop ALL, no-new-privileges);
# the pod's fsGroup as a supplementary group of every container. The volumes are host
# directories with the owners and modes kubelet gives them: the Secret's file root's, group
# fsGroup, mode 0440 (defaultMode 0440 with fsGroup); each emptyDir root's, group fsGroup,
# 2777; a subPath mount is the subdirectory itself. `prepare` runs first, then the sidecar;
# the app container (uid 1000) reaches the socket.
k=$W/k8s
mkdir -p "$k/config" "$k/secret" "$k/token-copy" "$k/sockets"
python3 - "$src/packaging/kubernetes/sidecar.yaml" "$k" "$PORT" <<'PY'
import shlex, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
k, port = sys.argv[2], sys.argv[3]
cm = next(d for d in docs if d["kind"] == "ConfigMap")
pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
psc = pod["securityContext"]
open(k + "/config/sockferry.conf", "w").write(cm["data"]["sockferry.conf"])
vols = {v["name"]: v for v in pod["volumes"]}
host = {"config": k + "/config", "token": k + "/secret", "token-copy": k + "/token-copy", "sockets": k + "/sockets"}
images = {"sockferry:0.1.0": "sockferry", "sockferry:0.1.0-static": "sockferry:static"}
for c in pod["initContainers"] + pod["containers"]:
    sc = c.get("securityContext", {})
    uid, gid = sc.get("runAsUser", psc["runAsUser"]), sc.get("runAsGroup", psc["runAsGroup"])
    flags = ["--user", f"{uid}:{gid}", "--group-add", str(psc["fsGroup"])]
    if sc.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    if "ALL" in sc.get("capabilities", {}).get("drop", []):
        flags += ["--cap-drop", "ALL"]
    if sc.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    for m in c.get("volumeMounts", []):
        src = host[m["name"]] + ("/" + m["subPath"] if m.get("subPath") else "")
        flags += ["-v", f"{src}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}"]
    argv = [a.replace("$(NODE_IP):7777", "127.0.0.1:" + port) for a in c["command"] + c.get("args", [])]
    probes = [c[p]["exec"]["command"] for p in ("startupProbe", "livenessProbe") if p in c]
    with open(f"{k}/{c['name']}.sh", "w") as f:
        f.write(f"flags=({shlex.join(flags)})\nimage={shlex.quote(images[c['image']])}\nargv=({shlex.join(argv)})\n")
        f.write("probes=(" + " ".join(shlex.quote(shlex.join(p)) for p in probes) + ")\n")
    assert c["image"] in images, c["image"]
assert vols["token"]["secret"]["defaultMode"] == 0o440 and psc["fsGroup"] == 65532, (vols["token"], psc)
PY
# kubelet's owners and modes.
install -o 0 -g 65532 -m 0440 "$W/secrets/sockferry.token" "$k/secret/token"
chown 0:65532 "$k/token-copy" "$k/sockets"
chmod 2777 "$k/token-copy" "$k/sockets"
k8s_run() { # NAME [docker run options...]: the container NAME of the pod, as the manifest has it
        local name=$1 flags image argv probes
        shift
        # shellcheck source=/dev/null
        source "$k/$name.sh"
        "$DOCKER" run --label sockferry-ci --network host "${flags[@]}" "$@" --entrypoint "${argv[0]}" "$image" "${argv[@]:1}"
}
k8s_run prepare --rm >"$W/prepare.log" 2>&1 || { cat "$W/prepare.log" >&2; fail "sidecar: the prepare container failed"; }
expect "prepare: the token copy" "65532 400" "$(stat -c '%u %a' "$k/token-copy/token/token")"
# 755, or 2755: the new directory inherits the emptyDir's setgid bit (its files then get group
# 65532); what matters is that only uid 65532 can change it.
mode=$(stat -c '%u %a' "$k/sockets/sockets")
[[ $mode == "65532 755" || $mode == "65532 2755" ]] || fail "prepare: the socket directory is '$mode' (uid, mode), expected uid 65532, 0755"
k8s_run sockferry -d --name sf-ci-sidecar >/dev/null 2>"$W/run-d.log" || { cat "$W/run-d.log" >&2; fail "sidecar: docker run"; }
s=$(wait_health sf-ci-sidecar healthy 30)
# The manifest's own probes, as kubelet runs them (exec in the container).
source "$k/sockferry.sh"
for p in "${probes[@]}"; do
        eval "probe=($p)"
        "$DOCKER" exec sf-ci-sidecar "${probe[@]}" >"$W/probe.log" 2>&1 || { cat "$W/probe.log" >&2; fail "sidecar: probe ${probe[*]}"; }
done
grep -q '^dispatch: OK' "$W/probe.log" || { cat "$W/probe.log" >&2; fail "sidecar: the probe did not check the -F forward"; }
# The app container of the manifest, with curl (the client image) in place of its sleep.
source "$k/agent.sh"
got=$("$DOCKER" run --rm --label sockferry-ci --network host "${flags[@]}" \
        --entrypoint curl sockferry-ci-client -sS --max-time 10 --unix-socket /run/sockferry/dispatch.sock http://h/sidecar) ||
        fail "sidecar: the app container could not reach dispatch.sock"
expect sidecar "host service: /sidecar" "$got"
say "sidecar: prepare (uid 65532) copied the token (0400) and made the socket directory; sockferry:static as uid 65532, --read-only --cap-drop ALL no-new-privileges, healthy in $s s, its probes (check --pid 1) pass; the app as uid 1000 reaches dispatch.sock: OK"
"$DOCKER" stop -t 15 sf-ci-sidecar >/dev/null
expect "sidecar exit status" 0 "$("$DOCKER" inspect -f '{{.State.ExitCode}}' sf-ci-sidecar)"

# ---- doc/MACOS.md §5: its container commands as written ----
# The blocks marked "tests/ci/containers-images.sh runs it" there, in a shell where `docker`
# adds what this engine needs (host network, host.docker.internal = the loopback, a label for
# the cleanup) and ~ is a scratch home holding the token; 7777 is the port of an ssh-agent's
# host relay here. ssh-add -l in the container must list the agent's key.
mkdir -p "$W/mac/.config/sockferry"
install -m 0600 "$W/secrets/sockferry.token" "$W/mac/.config/sockferry/token"
ssh-keygen -q -t ed25519 -N '' -C sockferry-ci -f "$W/mac/key" || fail "macos §5: ssh-keygen"
ssh-agent -a "$W/mac/agent.sock" >"$W/mac/agent.env" || fail "macos §5: ssh-agent"
agent_pid=$(sed -n 's/^SSH_AGENT_PID=\([0-9]*\);.*/\1/p' "$W/mac/agent.env")
SSH_AUTH_SOCK=$W/mac/agent.sock ssh-add -q "$W/mac/key" 2>/dev/null || fail "macos §5: ssh-add"
PORT2=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$W/sockferry" relay -F "agent:tcp:127.0.0.1:$PORT2=unix:$W/mac/agent.sock,auth=token,token-file=$W/mac/.config/sockferry/token" \
        2>"$W/mac/relay.log" &
mac_relay=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT2") 2>/dev/null && break; sleep 0.1; done
python3 - "$src/doc/MACOS.md" >"$W/mac/blocks.sh" <<'PY' || fail "macos §5: no block of doc/MACOS.md is marked for this stage"
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"<!-- doctest: skip [^>]*tests/ci/containers-images\.sh runs it[^>]*-->\n```sh\n(.*?)```", text, re.S)
if not blocks:
    sys.exit(1)
print("".join(blocks))
PY
docker() {
        case $1 in
        build) shift; DOCKER_BUILDKIT=1 "$DOCKER" build --network host --label sockferry-ci "$@" ;;
        run) shift; "$DOCKER" run --label sockferry-ci --network host --add-host host.docker.internal:host-gateway "$@" ;;
        *) "$DOCKER" "$@" ;;
        esac
}
got=$(cd "$W/mac" && HOME=$W/mac bash -e -o pipefail -c "$(declare -f docker); DOCKER=$DOCKER; $(sed "s/:7777,/:$PORT2,/g" "$W/mac/blocks.sh")" 2>"$W/mac/run.log") ||
        { cat "$W/mac/run.log" "$W/mac/relay.log" >&2; fail "macos §5: the commands of doc/MACOS.md failed"; }
kill "$mac_relay" "$agent_pid" 2>/dev/null
wait "$mac_relay" 2>/dev/null
want=$(ssh-keygen -lf "$W/mac/key.pub" | awk '{print $2}')
grep -qF "$want" <<<"$got" || { cat "$W/mac/run.log" >&2; fail "macos §5: ssh-add -l printed '$got', not the key $want"; }
say "macos §5: doc/MACOS.md's docker build and docker run as written; ssh-add -l in the container lists the host agent's key: OK"

# ---- compose: packaging/docker/compose.yaml as shipped, its config and the token beside it ----
# The only addition is the network (this engine has no bridge).
mkdir -p "$W/compose"
cp "$src/packaging/docker/compose.yaml" "$W/compose/"
cp "$W/sockferry.conf" "$W/compose/"
install -m 0400 "$W/secrets/sockferry.token" "$W/compose/sockferry.token"
# The copy's build context is the source tree, as compose.yaml's own is where it is shipped.
printf 'services:\n  agent:\n    network_mode: host\n    labels: [sockferry-ci]\n    build:\n      context: %s\n' "$src" >"$W/compose/ci.override.yaml"
(cd "$W/compose" && HOST_SOCKET="$W/empty" docker-compose -p sockferry-ci -f compose.yaml -f ci.override.yaml \
        up -d >"$W/compose.log" 2>&1) || { cat "$W/compose.log" >&2; fail "docker-compose up failed"; }
cid=$(cd "$W/compose" && docker-compose -p sockferry-ci -f compose.yaml -f ci.override.yaml ps -q agent)
s=$(wait_health "$cid" healthy 30)
(cd "$W/compose" && docker-compose -p sockferry-ci -f compose.yaml -f ci.override.yaml down -v >>"$W/compose.log" 2>&1) ||
        { cat "$W/compose.log" >&2; fail "docker-compose down failed"; }
say "compose: docker-compose up of packaging/docker/compose.yaml, healthy in $s s, down: OK"

# ---- attach: no port, no token ----
# attach here (the static binary) runs `docker exec -i -u 0 CONTAINER sockferry link --stdio`
# into a container with no network at all; its /run/host is a directory of this machine, so
# curl here reaches the socket the far end made there, through attach to the host service.
attach_check() { # NAME IMAGE [attach options...]
        local name=$1 image=$2 dir=$W/attach-$1 log=$W/attach-$1.log rc=0 got
        shift 2
        mkdir -p "$dir"
        run_d --name "sf-ci-attach-$name" --label sockferry-ci --network none -v "$dir:/run/host" \
                --entrypoint sleep "$image" infinity
        "$W/sockferry" attach --engine-cmd "$DOCKER" "$@" \
                -F "dispatch:unix:/run/host/dispatch.sock=unix:$W/host/dispatch.sock,mode=0666" \
                "sf-ci-attach-$name" 2>"$log" &
        attach_pid=$!
        wait_attached "$log" 1
        got=$(curl -sS --max-time 10 --unix-socket "$dir/dispatch.sock" "http://h/attach-$name") ||
                { cat "$log" >&2; fail "attach $name: curl through the container's socket failed"; }
        expect "attach $name" "host service: /attach-$name" "$got"
        "$DOCKER" restart -t 1 "sf-ci-attach-$name" >/dev/null
        wait_attached "$log" 2
        got=$(curl -sS --max-time 10 --unix-socket "$dir/dispatch.sock" "http://h/attach-$name-again") ||
                { cat "$log" >&2; fail "attach $name: curl after docker restart failed"; }
        expect "attach $name after docker restart" "host service: /attach-$name-again" "$got"
        kill -TERM "$attach_pid"
        wait "$attach_pid" || rc=$?
        attach_pid=""
        expect "attach $name: exit status after SIGTERM" 0 "$rc"
        [ ! -e "$dir/dispatch.sock" ] || { cat "$log" >&2; fail "attach $name: the container's socket outlived attach"; }
        "$DOCKER" rm -f "sf-ci-attach-$name" >/dev/null
}
attach_check image sockferry-ci-client
attach_check inject debian:bookworm-slim --inject="$W/sockferry"
grep -q 'inject: copied' "$W/attach-inject.log" || { cat "$W/attach-inject.log" >&2; fail "attach --inject: nothing was copied"; }
say "attach: docker exec into a container with no network (the client image), and --inject into the base image; curl reaches the host service, docker restart re-attaches, SIGTERM removes the socket: OK"
