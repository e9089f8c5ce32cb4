# shellcheck shell=bash
# Container engines for the CI stages, sourced (bash) after tests/lib/stage.sh:
#
#   engine_install PACKAGE...   installs the packages missing here (apt-get, as root) with no
#                               service started at install time (PID 1 is not systemd here)
#   engine_start docker|podman  a private engine: exports DOCKER_HOST, sets ENGINE (the CLI
#                               to run: /usr/bin/docker, or a script running podman with the
#                               engine's roots), ENGINE_ARGS (attach's --engine and
#                               --engine-cmd) and ENGINE_RUN_ARGS (what `run` needs on this
#                               engine), registers its stop as a cleanup; skips the stage (77)
#                               when the engine cannot start here
#   wait_attached LOG COUNT     waits until `sockferry attach` ($attach_pid, its stderr in LOG)
#                               has said "far end: ready" COUNT times; fails after 30 s
#
# The engine is private and touches no network: its own socket, data and exec roots and
# configuration file; no bridge, no iptables, no forwarding, so no private address range is
# ever created, and containers use --network host or none. It runs with a proxy that refuses
# at once, so nothing is pulled from a registry. Its images, build cache and volumes live in
# its data root and go with it.
#
# One engine serves every container stage of a run: tests/ci/containers.sh starts it and runs
# its parts with SF_CI_DOCKER_HOST set; a part run alone starts its own.
#
# SF_CI_DOCKER_ROOT=DIR: dockerd's data root is DIR (its images and build cache), removed with
# the engine unless SF_CI_DOCKER_ROOT_KEEP=1: tests/ci.sh builds the images ahead in one engine
# (tests/ci/images.sh) and starts the containers job's on what it left.

engine_install() {
        local need=() p made_policy="" rc=0 log
        for p in "$@"; do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
        done
        ((${#need[@]})) || return 0
        [ "$(id -u)" = 0 ] || skip "${need[*]} not installed, and installing needs root"
        if [ ! -e /usr/sbin/policy-rc.d ]; then
                printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
                chmod 0755 /usr/sbin/policy-rc.d
                made_policy=1
        fi
        log=$(mktemp /tmp/sockferry-engine-apt.XXXXXX)
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >"$log" 2>&1 || rc=$?
        [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
        if [ "$rc" != 0 ]; then
                tail -20 "$log"
                rm -f "$log"
                fail "apt-get install ${need[*]} failed (exit $rc)"
        fi
        rm -f "$log"
        say "installed ${need[*]} ($(stage_seconds) s)"
}

engine_start() {
        case $1 in
        docker) ;;
        podman)
                engine_start_podman
                return
                ;;
        *) fail "engine_start: no engine $1 (docker or podman)" ;;
        esac
        ENGINE=/usr/bin/docker
        ENGINE_ARGS=(--engine docker --engine-cmd "$ENGINE")
        ENGINE_RUN_ARGS=()
        if [ -n "${SF_CI_DOCKER_HOST:-}" ]; then
                export DOCKER_HOST=$SF_CI_DOCKER_HOST
                /usr/bin/docker version >/dev/null 2>&1 || fail "SF_CI_DOCKER_HOST=$SF_CI_DOCKER_HOST does not answer"
                return 0
        fi
        needs_root "dockerd"
        [ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ] || skip "no dockerd here (Debian's docker.io; tests/ci/containers.sh installs it)"
        engine_dir=$(mktemp -d /tmp/sockferry-dockerd.XXXXXX)
        chmod 0755 "$engine_dir"
        export DOCKER_HOST="unix://$engine_dir/docker.sock"
        local id=${engine_dir##*.} d
        engine_droot=${SF_CI_DOCKER_ROOT:-/var/lib/sockferry-ci-docker.$id}
        engine_xroot=/run/sockferry-ci-docker.$id
        engine_pid=""
        engine_made_key=""
        engine_made_dirs=()
        cat >"$engine_dir/daemon.json" <<'EOF'
{
  "bridge": "none",
  "iptables": false,
  "ip6tables": false,
  "ip-forward": false,
  "ip-masq": false,
  "host-gateway-ip": "127.0.0.1",
  "storage-driver": "overlay2"
}
EOF
        # Whatever its roots, dockerd 20.10 writes a trust key to /etc/docker/key.json and makes
        # /run/docker/plugins and (its containerd) /run/containerd/s: removed at the end unless
        # they were there before.
        [ -e /etc/docker/key.json ] || engine_made_key=1
        for d in /run/docker /run/docker/plugins /run/containerd /run/containerd/s; do
                [ -e "$d" ] || engine_made_dirs+=("$d")
        done
        cleanup engine_stop
        HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY= \
                setsid /usr/sbin/dockerd --config-file "$engine_dir/daemon.json" -H "$DOCKER_HOST" \
                --data-root "$engine_droot" --exec-root "$engine_xroot" --pidfile "$engine_dir/dockerd.pid" \
                >"$engine_dir/dockerd.log" 2>&1 </dev/null &
        engine_pid=$!
        for _ in $(seq 300); do
                /usr/bin/docker version >/dev/null 2>&1 && break
                kill -0 "$engine_pid" 2>/dev/null || break
                sleep 0.1
        done
        if ! /usr/bin/docker version >/dev/null 2>&1; then
                tail -5 "$engine_dir/dockerd.log" | sed "s/^/$stage_name: dockerd: /"
                skip "dockerd does not start on this machine (its log above)"
        fi
        say "engine up: dockerd $(/usr/bin/docker version -f '{{.Server.Version}}') ($(stage_seconds) s)"
}

# podman's own service (its socket the host's "docker" one, as podman machine gives a Mac) in a
# root of its own under a directory the stage removes: nothing of this machine's podman state
# is touched, and every container and image goes with the directory.
engine_start_podman() {
        needs_root "podman"
        command -v podman >/dev/null || skip "no podman here (Debian's podman; tests/ci/containers.sh installs it)"
        engine_dir=$(mktemp -d /tmp/sockferry-podman.XXXXXX)
        chmod 0755 "$engine_dir"
        local p=(podman --root "$engine_dir/root" --runroot "$engine_dir/run" --storage-driver vfs
                --cgroup-manager cgroupfs --events-backend file)
        ENGINE=$engine_dir/podman
        printf '#!/bin/sh\nexec %s "$@"\n' "${p[*]}" >"$ENGINE"
        chmod 0755 "$ENGINE"
        ENGINE_ARGS=(--engine podman --engine-cmd "$ENGINE")
        # podman sets open files and processes to 1048576 and 32768, which a container's init
        # may not be allowed to set (EPERM where this machine's own limits are lower): limits
        # below any machine's.
        ENGINE_RUN_ARGS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
        "${p[@]}" system service --time 0 "unix://$engine_dir/podman.sock" >"$engine_dir/service.log" 2>&1 </dev/null &
        engine_pid=$!
        cleanup engine_stop_podman
        export DOCKER_HOST=unix://$engine_dir/podman.sock
        for _ in $(seq 100); do [ -S "$engine_dir/podman.sock" ] && break; sleep 0.1; done
        [ -S "$engine_dir/podman.sock" ] || { cat "$engine_dir/service.log" >&2; fail "podman system service did not start"; }
        say "engine up: podman $("$ENGINE" version -f '{{.Client.Version}}' 2>/dev/null) ($(stage_seconds) s)"
}

# podman's stop (a cleanup): its containers and images removed, the service stopped, what
# its root left mounted unmounted, the directory removed.
engine_stop_podman() {
        local m
        "$ENGINE" rm -af -t 0 >/dev/null 2>&1 || true
        "$ENGINE" rmi -af >/dev/null 2>&1 || true
        kill "$engine_pid" 2>/dev/null
        wait "$engine_pid" 2>/dev/null
        # conmon starts `podman --root DIR/root container cleanup` when a container ends, after
        # `rm` has returned; one still running after the directory is gone makes its root and
        # runroot again (seen: DIR/root and DIR/run left behind). Nothing outlives the stop.
        for _ in $(seq 50); do pgrep -f -- "$engine_dir/" >/dev/null || break; sleep 0.1; done
        pkill -KILL -f -- "$engine_dir/" 2>/dev/null || true
        grep -E " $engine_dir/" /proc/self/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m"; done
        rm -rf "$engine_dir"
        return 0
}

# The engine's stop (a cleanup): every container removed, dockerd stopped, what it left
# behind unmounted and removed.
engine_stop() {
        local ids m i
        if [ -n "$engine_pid" ] && kill -0 "$engine_pid" 2>/dev/null; then
                ids=$(/usr/bin/docker ps -aq)
                [ -z "$ids" ] || /usr/bin/docker rm -f -v $ids >/dev/null
                kill -TERM "$engine_pid"
                for _ in $(seq 150); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.1; done
                kill -0 "$engine_pid" 2>/dev/null && kill -KILL "$engine_pid"
        fi
        [ -z "$engine_pid" ] || wait "$engine_pid" 2>/dev/null
        # dockerd leaves its nsfs mount behind (and overlay mounts if it was killed).
        grep -E " ($engine_xroot|$engine_droot)[/ ]" /proc/self/mounts | awk '{print $2}' | sort -r |
                while read -r m; do umount -l "$m"; done
        [ -z "$engine_made_key" ] || rm -f /etc/docker/key.json
        for ((i = ${#engine_made_dirs[@]} - 1; i >= 0; i--)); do
                [ ! -d "${engine_made_dirs[i]}" ] || rmdir "${engine_made_dirs[i]}"
        done
        [ "${SF_CI_DOCKER_ROOT_KEEP:-}" = 1 ] || rm -rf "$engine_droot"
        rm -rf "$engine_xroot" "$engine_dir"
        return 0
}

wait_attached() {
        for _ in $(seq 300); do
                [ "$(grep -c 'far end: ready' "$1")" -ge "$2" ] && return 0
                kill -0 "$attach_pid" 2>/dev/null || break
                sleep 0.1
        done
        cat "$1" >&2
        fail "attach: the far end was not ready ($2) within 30 s"
}
