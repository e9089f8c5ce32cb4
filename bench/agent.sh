#!/usr/bin/env bash
# What a user feels (issue 34): how long the commands people run against a forwarded socket take,
# end to end, process start included, through each way of carrying the socket:
#
#   list    SSH_AUTH_SOCK=S ssh-add -l                                 (a real ssh-agent, one key)
#   sign    SSH_AUTH_SOCK=S ssh-keygen -Y sign -f KEY.pub -n file      (the agent signs; a file on stdin)
#   docker  DOCKER_HOST=unix://S docker version                        (a private dockerd, when one starts)
#
# Paths (ONLY= picks some), every one ending at the same agent and dockerd sockets:
#   direct   the sockets themselves
#   sf1      the relay pair with one connection per client: a container relay unix:S →
#            tcp:127.0.0.1:P → a host relay offering both services, auth = token, link =
#            per-connection (sockferry/1)
#   link     the same pair with its default, the shared link (sockferry/2)
#   nsenter  sockferry attach -F ... -- nsenter -t PID -m -n sockferry link --stdio, into mount and
#            network namespaces this script makes (an empty directory bind-mounted where the
#            sockets go, as tests/e2e/test_attach.py does)
#   docker   sockferry attach --engine docker CONTAINER: the shared link over `docker exec` into a
#            container of the private dockerd (no network; its /run/host a directory here)
#   ssh      ssh -N -L S:AGENT -L S2:DOCKER to a throwaway sshd on 127.0.0.1 (OpenSSH's
#            stream-local forwarding, a channel per client)
#   socat    socat UNIX-LISTEN:S,fork TCP:127.0.0.1:P → socat TCP-LISTEN:P,fork UNIX-CONNECT:AGENT
#
# NET=slirp puts the container's side of every path that crosses a network (sf1, link, ssh, socat)
# behind a VM boundary as vm.sh does: its relay, ssh client or socat runs in a network namespace
# whose only way out is slirp4netns, reaching the host's side through slirp's gateway, so each
# request crosses the boundary as it does from a Docker Desktop, Lima or podman-machine VM. The
# attach paths carry the link over an exec's pipes, which cross no network here: they are left
# out of such a run (measured on loopback).
#
# The clients run on this machine's side for every path, reaching the socket the far end made
# through the directory it is in (for nsenter and docker, the directory bind-mounted into the
# namespace or container), so no path pays for entering a namespace per command. Each round
# runs every command once through every path in turn, each round starting one path later, so
# that a change of the machine's load falls on all paths alike and no path is always first;
# one warm-up round is not counted.
#
#   bench/agent.sh [BUILDDIR]     (default BUILDDIR: build-bench next to bench/)
#
# Environment:
#   N=200               rounds
#   NET=loopback        or slirp (above); SLIRP_MTU=65520, SLIRP_CIDR=198.19.240.0/24 as in vm.sh
#   ONLY=               paths to run (default: every one this machine has)
#   DOCKER_CLI=         the docker CLI (default /usr/bin/docker, Debian's, else docker in PATH)
#   WAIT_QUIET=0        before the rounds, wait up to this many seconds for the machine to be idle
#   OUT=BUILDDIR/agent-results   samples.tsv (every command's time), results.tsv and table.md
#   KEEP=               set: keep the temporary directory (every process's log)
#   REPORT_ONLY=        set: print the tables of the run in OUT again, measure nothing
#
# Exit status: 0 done (a failed command is counted, and a path that cannot be set up is named
# with why), 77 something this needs is missing (it says what), 1 an error. Every process, the
# namespaces, the container and the private dockerd (its data and exec roots) are removed on exit.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-$HERE/../build-bench}" && pwd)
N=${N:-200}
NET=${NET:-loopback}
SLIRP_MTU=${SLIRP_MTU:-65520}
SLIRP_CIDR=${SLIRP_CIDR:-198.19.240.0/24}
WAIT_QUIET=${WAIT_QUIET:-0}
OUT=${OUT:-$BUILD/agent-results}
SOCKFERRY=$BUILD/shim/sockferry
ALL_PATHS="direct sf1 link nsenter docker ssh socat"
PROG=agent.sh

die() { echo "agent.sh: $*" >&2; exit 1; }
skip() { echo "agent.sh: SKIP: $*" >&2; exit 77; }

# ---- report ----

# What the report's three awk programs share: sorting a sample (s[1..n], in place) and the
# names of the paths and commands.
AWK_LIB='
        function sort(s, n,   a, b, t) {
                for (a = 2; a <= n; a++) for (b = a; b > 1 && s[b - 1] > s[b]; b--) { t = s[b]; s[b] = s[b - 1]; s[b - 1] = t }
        }
        function names() {
                label["direct"] = "the socket directly"; label["sf1"] = "relay pair (sockferry/1)"
                label["link"] = "shared link (sockferry/2)"; label["nsenter"] = "attach over nsenter"
                label["docker"] = "attach over docker exec"; label["ssh"] = "ssh -L"; label["socat"] = "socat pair"
                head["list"] = "ssh-add -l"; head["sign"] = "ssh-keygen -Y sign"; head["docker"] = "docker version"
                return split("list sign docker", cl, " ")
        }'

# p50 and p99 (nearest rank) of every path and command from samples.tsv (path, command, µs, exit
# status): results.tsv, then the table and the targets.
report() {
        awk -F'\t' -v order="$ALL_PATHS" "$AWK_LIB"'
                function q(k, p,   n, a, s) {
                        n = cnt[k]
                        for (a = 1; a <= n; a++) s[a] = v[k, a]
                        sort(s, n)
                        return s[int(p * (n - 1) + 0.5) + 1]
                }
                $4 == 0 { k = $1 SUBSEP $2; v[k, ++cnt[k]] = $3 + 0 }
                $4 != 0 { fails[$1, $2]++ }
                { seen[$1] = 1; cmd[$2] = 1 }
                END {
                        np = split(order, path, " ")
                        for (i = 1; i <= np; i++) for (c in cmd) {
                                k = path[i] SUBSEP c
                                if (cnt[k]) printf "%s\t%s\t%d\t%d\t%.0f\t%.0f\n", path[i], c, cnt[k], fails[k] + 0, q(k, 0.5), q(k, 0.99)
                                else if (path[i] in seen) printf "%s\t%s\t0\t%d\tfail\tfail\n", path[i], c, fails[k] + 0
                        }
                }' "$OUT/samples.tsv" >"$OUT/results.tsv"
        awk -F'\t' -v order="$ALL_PATHS" -v notes="$(cat "$OUT/paths.txt" 2>/dev/null)" "$AWK_LIB"'
                function ms(us) { return us == "fail" ? "failed" : us >= 10000 ? sprintf("%.1f", us / 1000) : sprintf("%.2f", us / 1000) }
                { p50[$1, $2] = $5; p99[$1, $2] = $6; fl[$1, $2] = $4; n[$1, $2] = $3; have[$1] = 1; c[$2] = 1 }
                END {
                        nc = names()
                        out = "| path"; sep = "|---"
                        for (j = 1; j <= nc; j++) if (cl[j] in c) { out = out " | " head[cl[j]] " p50 ms | p99 ms"; sep = sep "|---:|---:" }
                        print ""; print out " |"; print sep "|"
                        np = split(order, path, " ")
                        for (i = 1; i <= np; i++) {
                                p = path[i]
                                if (!(p in have)) continue
                                out = "| " label[p]
                                for (j = 1; j <= nc; j++) {
                                        k = p SUBSEP cl[j]
                                        if (!(cl[j] in c)) continue
                                        if (!(k in p50)) { out = out " | – | –"; continue }
                                        out = out " | " ms(p50[k])
                                        if (p != "direct" && p50[k] != "fail" && p50["direct", cl[j]] > 0)
                                                out = out sprintf(" (×%.2f)", p50[k] / p50["direct", cl[j]])
                                        out = out " | " ms(p99[k]) (fl[k] ? " (" fl[k] " failed)" : "")
                                }
                                print out " |"
                        }
                        if (notes != "") { print ""; print notes }
                        # issue 34: through the shared link and attach over nsenter, p50 within
                        # 1.5x of the socket directly and ahead of ssh -L
                        print ""; print "| target (issue 34) | " head["list"] " | " head["sign"] " | " head["docker"] " |"; print "|---|---|---|---|"
                        for (t = 1; t <= 2; t++) {
                                p = t == 1 ? "link" : "nsenter"
                                for (g = 1; g <= 2; g++) {
                                        out = "| " label[p] (g == 1 ? ": p50 ≤ 1.5× the socket directly" : ": p50 below ssh -L'"'"'s")
                                        base = g == 1 ? "direct" : "ssh"
                                        for (j = 1; j <= nc; j++) {
                                                k = p SUBSEP cl[j]; b = base SUBSEP cl[j]
                                                if (!(k in p50) || !(b in p50) || p50[k] == "fail" || p50[b] == "fail" || p50[b] <= 0) { out = out " | –"; continue }
                                                r = p50[k] / p50[b]
                                                out = out sprintf(" | ×%.2f %s", r, (g == 1 ? r <= 1.5 : r < 1) ? "met" : "**short**")
                                        }
                                        print out " |"
                                }
                        }
                }' "$OUT/results.tsv"
        # The same question paired: a round runs a command through every path one after another
        # (consecutive lines of samples.tsv), so the difference to ssh -L within a round leaves
        # out what moves every path alike (dockerd's answer, the machine's load), which is most
        # of the spread when a command takes 90 ms and a path adds well under one.
        awk -F'\t' "$AWK_LIB"'
                function med(k,   n, a, s) {
                        n = nd[k]
                        for (a = 1; a <= n; a++) s[a] = d[k, a]
                        sort(s, n)
                        return n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
                }
                # Two-sided p of the sign test: how likely k or more (or as few) rounds ahead of
                # n would be if neither path were faster (normal approximation, erfc after
                # Abramowitz and Stegun 7.1.26).
                function signp(k, n,   x, t) {
                        x = (2 * k - n) / sqrt(2 * n); if (x < 0) x = -x
                        t = 1 / (1 + 0.3275911 * x)
                        return t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * exp(-x * x)
                }
                function flush(   p) {
                        if ("ssh" in t) for (p in t) if (p == "link" || p == "nsenter") {
                                k = p SUBSEP c; d[k, ++nd[k]] = t[p] - t["ssh"]; ahead[k] += t[p] < t["ssh"]
                        }
                        delete t
                }
                $2 != c || $1 in t { flush(); c = $2 }
                $4 == 0 { t[$1] = $3 }
                END {
                        flush()
                        nc = names()
                        print ""; print "| paired by round: minus ssh -L | " head["list"] " | " head["sign"] " | " head["docker"] " |"
                        print "|---|---|---|---|"
                        for (i = 1; i <= 2; i++) {
                                p = i == 1 ? "link" : "nsenter"; out = "| " label[p]
                                for (j = 1; j <= nc; j++) {
                                        cmd = cl[j]; k = p SUBSEP cmd
                                        if (!nd[k]) { out = out " | –"; continue }
                                        pv = signp(ahead[k], nd[k])
                                        out = out sprintf(" | median %+.2f ms, ahead in %d of %d rounds (sign test p %s)", med(k) / 1000,
                                                ahead[k], nd[k], pv < 0.0001 ? "< 0.0001" : sprintf("= %.2g", pv))
                                }
                                print out " |"
                        }
                }' "$OUT/samples.tsv"
}

if [[ -n ${REPORT_ONLY:-} ]]; then
        [[ -s $OUT/samples.tsv ]] || die "REPORT_ONLY: no $OUT/samples.tsv"
        report
        exit 0
fi

# ---- measuring ----

((EUID == 0)) || skip "needs root: namespaces, a private dockerd, sshd"
[[ -x $SOCKFERRY ]] || skip "$SOCKFERRY not built: ninja -C $BUILD"
for p in ssh-agent ssh-add ssh-keygen; do
        command -v "$p" >/dev/null || skip "$p is not installed (openssh-client)"
done

case $NET in
loopback) ;;
slirp) command -v slirp4netns >/dev/null || skip "slirp4netns is not installed (packaging/install-deps.sh)" ;;
*) die "NET: unknown network '$NET' (loopback, slirp)" ;;
esac

IN=() # set by net_up: the prefix that runs the container's side of a path
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

T=$(mktemp -d /tmp/sf-agent.XXXXXX)
chmod 0755 "$T" # the container's bind mount
STARTED=()
BOX_PID=
DOCKERD_PID=
NS=
SLIRP_PID=
DROOT=/var/lib/sf-agent-docker.${T##*.}
XROOT=/run/sf-agent-docker.${T##*.}
MADE=() # what dockerd makes outside its roots that was not there before

# Stops dockerd (its containers first) and removes its roots, mounts and what it made elsewhere.
dockerd_down() {
        local ids i
        [[ -n $DOCKERD_PID ]] || return 0
        if kill -0 "$DOCKERD_PID" 2>/dev/null; then
                ids=$("$DOCKER_CLI" ps -aq 2>/dev/null || true)
                # shellcheck disable=SC2086 # one word per container
                [[ -z $ids ]] || "$DOCKER_CLI" rm -f -v $ids >/dev/null 2>&1 || true
                kill -TERM "$DOCKERD_PID"
                for ((i = 0; i < 150; i++)); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.1; done
                kill -KILL "$DOCKERD_PID" 2>/dev/null || true
        fi
        wait "$DOCKERD_PID" 2>/dev/null || true
        DOCKERD_PID=
        { grep -E " ($XROOT|$DROOT)[/ ]" /proc/self/mounts || true; } | awk '{ print $2 }' | sort -r |
                while read -r m; do umount -l "$m"; done
        for ((i = ${#MADE[@]} - 1; i >= 0; i--)); do
                if [[ -d ${MADE[i]} ]]; then rmdir "${MADE[i]}" 2>/dev/null || true; else rm -f "${MADE[i]}"; fi
        done
        rm -rf "$DROOT" "$XROOT"
}

cleanup() {
        set +e # every step, whatever the one before did
        kill_trees "${STARTED[@]}"
        [[ -z $BOX_PID ]] || kill_trees "$BOX_PID"
        dockerd_down
        net_cleanup
        if [[ -n ${KEEP:-} ]]; then echo "agent.sh: logs kept in $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the services: ssh-agent with a key, dockerd ----

AGENT=$T/agent.sock
ssh-agent -D -a "$AGENT" >/dev/null 2>>"$T/agent.log" &
STARTED+=($!)
ssh-keygen -q -t ed25519 -N '' -C sf-agent-bench -f "$T/key"
for ((i = 0; i < 100; i++)); do [[ -S $AGENT ]] && break; sleep 0.05; done
SSH_AUTH_SOCK=$AGENT ssh-add -q "$T/key" 2>>"$T/agent.log" || die "ssh-add: $(cat "$T/agent.log")"
head -c 4096 /dev/urandom >"$T/msg"

DOCKER_CLI=${DOCKER_CLI:-$( [[ -x /usr/bin/docker ]] && echo /usr/bin/docker || command -v docker || true)}
DOCKER_SOCK=$T/docker.sock
DOCKER_WHY=
# A private dockerd (tests/containers/attach-stage.sh's): its own socket, data and exec roots, no
# bridge, no iptables, proxies pointed nowhere (it never pulls). Sets DOCKER_WHY when it cannot.
dockerd_up() {
        local d i
        [[ -x /usr/sbin/dockerd && -n $DOCKER_CLI ]] || { DOCKER_WHY="dockerd or the docker CLI is not installed"; return; }
        cat >"$T/daemon.json" <<'EOF'
{ "bridge": "none", "iptables": false, "ip6tables": false, "ip-forward": false, "ip-masq": false,
  "storage-driver": "overlay2" }
EOF
        for d in /run/docker /run/docker/plugins /run/containerd /run/containerd/s /etc/docker/key.json; do
                [[ -e $d ]] || MADE+=("$d")
        done
        HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY='' \
                setsid /usr/sbin/dockerd --config-file "$T/daemon.json" -H "unix://$DOCKER_SOCK" \
                --data-root "$DROOT" --exec-root "$XROOT" --pidfile "$T/dockerd.pid" \
                >"$T/dockerd.log" 2>&1 </dev/null &
        DOCKERD_PID=$!
        for ((i = 0; i < 300; i++)); do
                DOCKER_HOST=unix://$DOCKER_SOCK "$DOCKER_CLI" version >/dev/null 2>&1 && return
                kill -0 "$DOCKERD_PID" 2>/dev/null || break
                sleep 0.1
        done
        DOCKER_WHY="dockerd does not start here: $(tail -n 1 "$T/dockerd.log")"
        dockerd_down
}
dockerd_up
CMDS=(list sign)
[[ -n $DOCKER_WHY ]] || CMDS+=(docker)

# ---- the paths ----

# Where each path's sockets are: SOCK[PATH/agent], SOCK[PATH/docker].
declare -A SOCK
NOTES=
note() { NOTES+="* $1: not measured: $2"$'\n'; }
want() { [[ -z ${ONLY:-} || " $ONLY " == *" $1 "* ]]; }

SOCK[direct/agent]=$AGENT
SOCK[direct/docker]=$DOCKER_SOCK
PATHS=(direct)

# FWD: -F specs of the services this run has, listening at $1/NAME.sock, connecting to $2
# (agent) and $3 (docker), $4 after each (e.g. ",auth=token,...").
forwards() {
        FWD=(-F "agent:unix:$1/agent.sock=$2$4")
        [[ -n $DOCKER_WHY ]] || FWD+=(-F "docker:unix:$1/docker.sock=$3$4")
}

wait_socket() {
        local i
        for ((i = 0; i < 300; i++)); do [[ -S $1 ]] && return 0; sleep 0.1; done
        return 1
}

# The relay pair $1 (sf1, link) on port $2: the host relay here, the container relay on the
# container's side.
relay_pair() {
        local opts=",auth=token,token-file=$T/token" host
        [[ $1 == sf1 ]] && opts+=,link=per-connection
        mkdir -p "$T/$1"
        host=(-F "agent:tcp:127.0.0.1:$2=unix:$AGENT$opts")
        [[ -n $DOCKER_WHY ]] || host+=(-F "docker:tcp:127.0.0.1:$2=unix:$DOCKER_SOCK$opts")
        "$SOCKFERRY" relay -q "${host[@]}" 2>>"$T/$1.log" &
        STARTED+=($!)
        forwards "$T/$1" "tcp:$HOST:$2" "tcp:$HOST:$2" "$opts"
        "${IN[@]}" "$SOCKFERRY" relay -q "${FWD[@]}" 2>>"$T/$1.log" &
        STARTED+=($!)
        SOCK[$1/agent]=$T/$1/agent.sock
        SOCK[$1/docker]=$T/$1/docker.sock
        wait_socket "$T/$1/agent.sock" || die "$1: the container relay made no socket: $(tail -n 3 "$T/$1.log")"
        PATHS+=("$1")
}

net_up "$NET"
# Attach path $1 is measured: wanted, and on loopback (a slirp run leaves it out and says why).
attach_wanted() {
        want "$1" || return 1
        [[ $NET == loopback ]] && return 0
        note "$1" "its link is an exec's pipes, which cross no network: measured with NET=loopback"
        return 1
}
"$SOCKFERRY" keygen -o "$T/token" >/dev/null 2>"$T/keygen.log" || die "sockferry keygen: $(cat "$T/keygen.log")"
want sf1 && relay_pair sf1 "$(free_port)"
want link && relay_pair link "$(free_port)"

# attach over nsenter: mount and network namespaces held by a sleeping process; inside, $T/box/run
# is a bind mount of the empty $T/box/empty, where the far end makes the sockets.
if attach_wanted nsenter; then
        if command -v unshare >/dev/null && command -v nsenter >/dev/null; then
                mkdir -p "$T/box/run" "$T/box/empty"
                mkfifo "$T/box/ready"
                # shellcheck disable=SC2016 # the inner shell expands them
                unshare -m -n --propagation private sh -c \
                        'mount --bind "$1" "$2" && ip link set lo up && echo ready >"$3" && exec sleep 36000' sh \
                        "$T/box/empty" "$T/box/run" "$T/box/ready" 2>>"$T/box.log" &
                BOX_PID=$!
                if [[ $(timeout 10 cat "$T/box/ready" || true) == ready ]]; then
                        forwards "$T/box/run" "unix:$AGENT" "unix:$DOCKER_SOCK" ""
                        "$SOCKFERRY" attach -q "${FWD[@]}" -- nsenter -t "$BOX_PID" -m -n "$SOCKFERRY" link --stdio \
                                2>>"$T/nsenter.log" &
                        STARTED+=($!)
                        SOCK[nsenter/agent]=$T/box/empty/agent.sock
                        SOCK[nsenter/docker]=$T/box/empty/docker.sock
                        wait_socket "$T/box/empty/agent.sock" || die "nsenter: the far end made no socket: $(tail -n 3 "$T/nsenter.log")"
                        PATHS+=(nsenter)
                else
                        note nsenter "cannot make mount and network namespaces here: $(tail -n 1 "$T/box.log")"
                fi
        else
                note nsenter "unshare or nsenter (util-linux) is not installed"
        fi
fi

# attach over docker exec: an image of this machine's sleep and the build's sockferry with their
# libraries (as tests/containers/attach-stage.sh makes), a container with no network.
if attach_wanted docker; then
        if [[ -n $DOCKER_WHY ]]; then
                note docker "$DOCKER_WHY"
        else
                root=$T/rootfs
                mkdir -p "$root/bin" "$root/tmp" "$root/run/host" "$root/etc" "$root/proc" "$root/sys" "$root/dev"
                chmod 1777 "$root/tmp"
                for b in "$(command -v sleep)" "$SOCKFERRY"; do
                        cp -L "$b" "$root/bin/"
                        for l in $(ldd "$b" | grep -o '/[^ ]*'); do
                                mkdir -p "$root$(dirname "$l")"
                                cp -L "$l" "$root$l"
                        done
                done
                echo 'root:x:0:0::/:/bin/sh' >"$root/etc/passwd"
                echo 'root:x:0:' >"$root/etc/group"
                export DOCKER_HOST=unix://$DOCKER_SOCK
                tar -C "$root" -c . | "$DOCKER_CLI" import -c 'ENV PATH=/bin' - sf-agent-bench >/dev/null
                mkdir -p "$T/ctr"
                "$DOCKER_CLI" run -d --name sf-agent-bench --network none -v "$T/ctr:/run/host" sf-agent-bench \
                        sleep infinity >/dev/null 2>>"$T/docker.log" || die "docker run: $(cat "$T/docker.log")"
                unset DOCKER_HOST
                forwards /run/host "unix:$AGENT" "unix:$DOCKER_SOCK" ""
                DOCKER_HOST=unix://$DOCKER_SOCK "$SOCKFERRY" attach -q --engine-cmd "$DOCKER_CLI" "${FWD[@]}" sf-agent-bench \
                        2>>"$T/docker-attach.log" &
                STARTED+=($!)
                SOCK[docker/agent]=$T/ctr/agent.sock
                SOCK[docker/docker]=$T/ctr/docker.sock
                wait_socket "$T/ctr/agent.sock" || die "docker exec: the far end made no socket: $(tail -n 3 "$T/docker-attach.log")"
                PATHS+=(docker)
        fi
fi

if want ssh; then
        if command -v ssh >/dev/null && [[ -x /usr/sbin/sshd ]]; then
                port=$(free_port)
                sshd_prepare "$T/ssh" "$port"
                /usr/sbin/sshd -D -e -f "$T/ssh/sshd_config" 2>>"$T/ssh.log" &
                STARTED+=($!)
                for ((i = 0; i < 100; i++)); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
                fw=(-L "$T/ssh/agent.sock:$AGENT")
                [[ -n $DOCKER_WHY ]] || fw+=(-L "$T/ssh/docker.sock:$DOCKER_SOCK")
                "${IN[@]}" ssh "${SSH_OPTS[@]}" -i "$T/ssh/id" -p "$port" "${fw[@]}" "root@$HOST" 2>>"$T/ssh.log" &
                STARTED+=($!)
                SOCK[ssh/agent]=$T/ssh/agent.sock
                SOCK[ssh/docker]=$T/ssh/docker.sock
                wait_socket "$T/ssh/agent.sock" || die "ssh -L made no socket: $(tail -n 3 "$T/ssh.log")"
                PATHS+=(ssh)
        else
                note ssh "ssh or sshd is not installed (openssh-client, openssh-server)"
        fi
fi

if want socat; then
        if command -v socat >/dev/null; then
                mkdir -p "$T/socat"
                for s in agent docker; do
                        [[ $s == docker && -n $DOCKER_WHY ]] && continue
                        port=$(free_port)
                        up=$AGENT
                        [[ $s == docker ]] && up=$DOCKER_SOCK
                        socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:$up" 2>>"$T/socat.log" &
                        STARTED+=($!)
                        for ((i = 0; i < 100; i++)); do ss -Htln "sport = :$port" | grep -q . && break; sleep 0.05; done
                        "${IN[@]}" socat "UNIX-LISTEN:$T/socat/$s.sock,fork" "TCP:$HOST:$port" 2>>"$T/socat.log" &
                        STARTED+=($!)
                        SOCK[socat/$s]=$T/socat/$s.sock
                        wait_socket "$T/socat/$s.sock" || die "socat made no socket: $(tail -n 3 "$T/socat.log")"
                done
                PATHS+=(socat)
        else
                note socat "socat is not installed"
        fi
fi

# ---- the rounds ----

# One command $2 through path $1: a line of samples.tsv (path, command, µs, exit status).
time_one() {
        local s=${SOCK[$1/agent]} d=${SOCK[$1/docker]:-} t0 t1 rc=0
        t0=$EPOCHREALTIME
        case $2 in
        list) SSH_AUTH_SOCK=$s ssh-add -l >/dev/null 2>>"$T/clients.log" || rc=$? ;;
        sign) SSH_AUTH_SOCK=$s ssh-keygen -Y sign -f "$T/key.pub" -n file <"$T/msg" >/dev/null 2>>"$T/clients.log" || rc=$? ;;
        docker) DOCKER_HOST=unix://$d "$DOCKER_CLI" version >/dev/null 2>>"$T/clients.log" || rc=$? ;;
        esac
        t1=$EPOCHREALTIME
        printf '%s\t%s\t%d\t%d\n' "$1" "$2" "$((${t1/./} - ${t0/./}))" "$rc"
}

export LC_NUMERIC=C # EPOCHREALTIME with a dot
mkdir -p "$OUT"
: >"$OUT/samples.tsv"
printf '%s' "$NOTES" >"$OUT/paths.txt"
busy=$(wait_quiet)
{
        echo "# sockferry agent bench: $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')"
        echo "# $(nproc) cpus, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), kernel $(uname -r)"
        echo "# N=$N NET=$NET$([[ $NET == loopback ]] || echo " SLIRP_MTU=$SLIRP_MTU SLIRP_CIDR=$SLIRP_CIDR") paths: ${PATHS[*]}; commands: ${CMDS[*]}; $(ssh -V 2>&1)$([[ -n $DOCKER_WHY ]] || echo "; docker $("$DOCKER_CLI" --version | cut -d, -f1 | cut -d' ' -f3), dockerd $(DOCKER_HOST=unix://$DOCKER_SOCK "$DOCKER_CLI" version -f '{{.Server.Version}}')")"
        echo "# busy $busy % before; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/table.md" >&2
st0=$(cpu_stat)
for c in "${CMDS[@]}"; do for p in "${PATHS[@]}"; do time_one "$p" "$c" >/dev/null; done; done # warm-up
np=${#PATHS[@]}
for ((r = 1; r <= N; r++)); do
        # Each round starts with the next path: none always runs first, right after another
        # command's client exited (the page cache warm, the scheduler's choice of core).
        for c in "${CMDS[@]}"; do
                for ((i = 0; i < np; i++)); do time_one "${PATHS[(i + r) % np]}" "$c" >>"$OUT/samples.tsv"; done
        done
        ((r % 50)) || echo "round $r/$N" >&2
done
echo "# after: loadavg $(cut -d' ' -f1-3 /proc/loadavg), CPU stolen by the host $(steal_pct "$st0" "$(cpu_stat)") % during" | tee -a "$OUT/table.md" >&2
report | tee -a "$OUT/table.md"
echo "results in $OUT" >&2
