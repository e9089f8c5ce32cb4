# shellcheck shell=bash
# Shared by the scripts of bench/ (sourced): process trees and what /proc says of them, the
# machine's load, ports, a throwaway sshd, the key=value lines sf-load prints, and the container
# side's network (net_up: loopback or behind slirp4netns).
# The caller sets WAIT_QUIET (seconds wait_quiet may wait), PROG (its name, for messages) and
# IN (an array: the prefix that runs a client where clients run, empty for here); the client
# helpers at the end also use T (a temporary directory), TMO (seconds a client may take),
# SF_LOAD, EP (where clients connect), NAME (the contender), ROOTS (its processes) and STARTED
# (every process to stop on exit).

# Every live pid in the process trees below the given roots (socat forks a child per connection).
tree() {
        ps -e -o pid=,ppid= | awk -v roots="$*" '
                BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
                { pid[NR] = $1; par[$1] = $2 }
                END {
                        do {
                                grew = 0
                                for (i = 1; i <= NR; i++)
                                        if (!(pid[i] in keep) && (par[pid[i]] in keep)) { keep[pid[i]] = 1; grew = 1 }
                        } while (grew)
                        for (p in keep) if (p in par) print p
                }'
}

# Contents of /proc/PID/FILE for every process of the trees; processes may vanish meanwhile.
proc_cat() {
        local file=$1 p paths=()
        shift
        for p in $(tree "$@"); do paths+=("/proc/$p/$file"); done
        ((${#paths[@]})) || return 0
        cat "${paths[@]}" 2>/dev/null || true
}

# 0 for no process at all: the direct contenders have no relay.
cpu_ticks() { proc_cat stat "$@" | awk '{ sub(/^.*\) /, ""); s += $12 + $13 + $14 + $15 } END { printf "%d\n", s }'; }
status_kb() { local key=$1; shift; proc_cat status "$@" | awk -v k="$key:" '$1 == k { s += $2 } END { printf "%d\n", s }'; }
pss_kb() { proc_cat smaps_rollup "$@" | awk '$1 == "Pss:" { s += $2 } END { printf "%d\n", s }'; }
fd_count() {
        local p dirs=()
        for p in $(tree "$@"); do dirs+=("/proc/$p/fd"); done
        { find "${dirs[@]}" -mindepth 1 -maxdepth 1 2>/dev/null || true; } | wc -l
}

# Voluntary context switches of every thread of the trees: the times they slept (in epoll_wait,
# read, accept...) and had to be woken.
wakeups() {
        local p paths=()
        for p in $(tree "$@"); do paths+=("/proc/$p/task"/*/status); done
        ((${#paths[@]})) || { echo 0; return 0; }
        cat "${paths[@]}" 2>/dev/null | awk '$1 == "voluntary_ctxt_switches:" { s += $2 } END { printf "%d\n", s }'
}

# The machine's CPU counters (user nice system idle iowait irq softirq steal, in ticks) now.
cpu_stat() {
        local a
        read -ra a </proc/stat
        echo "${a[*]:1:8}"
}

# Percentage of all CPU time between two cpu_stat readings that was busy (all but idle and
# iowait) or stolen (steal: what the hypervisor gave to others) — $3 says which.
cpu_pct() {
        awk -v a="$1" -v b="$2" -v kind="$3" 'BEGIN {
                split(a, x, " "); split(b, y, " ")
                for (i = 1; i <= 8; i++) { d[i] = y[i] - x[i]; all += d[i] }
                part = kind == "steal" ? d[8] : all - d[4] - d[5]
                printf "%d\n", all ? 100 * part / all : 0
        }'
}

# Percentage of all CPU time spent busy during the next second.
busy_pct() {
        local a
        a=$(cpu_stat)
        sleep 1
        cpu_pct "$a" "$(cpu_stat)" busy
}

# Percentage of all CPU time stolen by the hypervisor between two cpu_stat readings: on a
# shared VM, the figures measured while it was high are the machine's, not ours.
steal_pct() { cpu_pct "$1" "$2" steal; }

wait_quiet() {
        local until=$((SECONDS + WAIT_QUIET)) b
        while b=$(busy_pct); ((b >= 10 && SECONDS < until)); do :; done
        echo "$b"
}

kill_trees() {
        local pids p
        (($#)) || return 0
        mapfile -t pids < <(tree "$@")
        ((${#pids[@]} == 0)) || kill "${pids[@]}" 2>/dev/null || true
        for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

free_port() {
        local p
        for ((p = 20000 + RANDOM % 10000; ; p++)); do
                (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
        done
}

# A throwaway sshd's files in the new directory $1 for port $2 on 127.0.0.1: its host key, a
# client key (id) it lets in as root, and sshd_config (stream-local forwarding allowed);
# `/usr/sbin/sshd -D -e -f $1/sshd_config` runs it. SSH_OPTS: the client's options for it.
sshd_prepare() {
        mkdir -m 700 "$1"
        ssh-keygen -q -t ed25519 -N '' -f "$1/host_key"
        ssh-keygen -q -t ed25519 -N '' -f "$1/id"
        cp "$1/id.pub" "$1/authorized_keys"
        cat >"$1/sshd_config" <<EOF
Port $2
ListenAddress 127.0.0.1
HostKey $1/host_key
PidFile none
AuthorizedKeysFile $1/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowStreamLocalForwarding yes
AllowTcpForwarding local
X11Forwarding no
LogLevel ERROR
EOF
        mkdir -p /run/sshd # sshd's privilege separation directory, as its service creates it
}
# shellcheck disable=SC2034 # used by the scripts that source this
SSH_OPTS=(-N -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=no
        -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ExitOnForwardFailure=yes -o StreamLocalBindUnlink=yes)

kv() { awk -v k="$2" '{ for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' <<<"$1"; }
calc() { awk "BEGIN { printf \"%.6g\n\", $1 }"; }

# Runs one sf-load client against EP and prints its line; prints nothing when it fails (logged).
measure() {
        local line
        if line=$(timeout "$TMO" "${IN[@]}" "$SF_LOAD" "$@" --connect "$EP" 2>>"$T/client.log"); then
                echo "$line"
        else
                echo "$PROG: $NAME: sf-load $* failed: $(tail -n 1 "$T/client.log")" >&2
        fi
}

# Waits until EP answers a ping (or the sf-load client given as arguments, for a contender
# that carries nothing else); exits when a process of ROOTS dies or EP stays silent.
wait_ready() {
        local i p probe=("$@")
        ((${#probe[@]})) || probe=(pingpong --seconds 0.01)
        for ((i = 0; i < 200; i++)); do
                "${IN[@]}" "$SF_LOAD" "${probe[@]}" --connect "$EP" >/dev/null 2>&1 && return 0
                for p in "${ROOTS[@]}"; do
                        kill -0 "$p" 2>/dev/null || { echo "$PROG: $NAME exited, see $T/$NAME.log" >&2; exit 1; }
                done
                sleep 0.05
        done
        echo "$PROG: $NAME: $EP did not answer" >&2
        exit 1
}

# Opens $1 idle connections to EP (or, with $2 = stalled, downloads nobody reads) and holds
# them until release_idle; sets IDLE_PID and HOLD_FD. Returns 1 when they could not all be
# opened within 300 s (idle.log says why).
hold_idle() {
        local i
        rm -f "$T/hold" "$T/idle.out"
        mkfifo "$T/hold"
        "${IN[@]}" "$SF_LOAD" "${2:-idle}" --connect "$EP" --count "$1" <"$T/hold" >"$T/idle.out" 2>>"$T/idle.log" &
        IDLE_PID=$!
        STARTED+=("$IDLE_PID")
        exec {HOLD_FD}>"$T/hold"
        for ((i = 0; i < 3000; i++)); do
                [[ -s $T/idle.out ]] && return 0
                kill -0 "$IDLE_PID" 2>/dev/null || break
                sleep 0.1
        done
        return 1
}

# Ends the idle client of hold_idle (after a failure too).
release_idle() {
        [[ -n $HOLD_FD ]] && exec {HOLD_FD}>&-
        HOLD_FD=
        wait "$IDLE_PID" || true
}

# The container side's network $1: loopback (the host's own), or slirp: a network namespace whose
# only way out is slirp4netns (SLIRP_MTU, SLIRP_CIDR), the user-mode TCP/IP stack of rootless
# podman and of Docker Desktop's and Lima's VMs; the gateway it answers for is the host's
# 127.0.0.1. Sets NET, IN (the prefix that runs a command on the container side), HOST (the host's
# address as the container side sees it), NS and SLIRP_PID (for the caller's cleanup, as
# net_down does). Uses T and die.
# shellcheck disable=SC2034 # HOST is the caller's
net_up() {
        NET=$1
        if [[ $NET == loopback ]]; then
                IN=()
                HOST=127.0.0.1
                return
        fi
        NS=sf-${PROG%.sh}-$$
        ip netns add "$NS"
        # no --disable-host-loopback: the gateway must be the host's loopback
        slirp4netns --configure --mtu="$SLIRP_MTU" --cidr="$SLIRP_CIDR" --disable-dns \
                --netns-type=path "/run/netns/$NS" tap0 >>"$T/slirp.log" 2>&1 &
        SLIRP_PID=$!
        IN=(ip netns exec "$NS")
        HOST=$(awk -F'[./]' '{ print $1 "." $2 "." $3 "." $4 + 2 }' <<<"$SLIRP_CIDR")
        local i
        for ((i = 0; i < 100; i++)); do
                "${IN[@]}" ip -4 -o addr show dev tap0 2>/dev/null | grep -q inet && return
                kill -0 "$SLIRP_PID" 2>/dev/null || die "slirp4netns exited: $(cat "$T/slirp.log")"
                sleep 0.05
        done
        die "slirp4netns did not configure tap0 in $NS: $(cat "$T/slirp.log")"
}

net_down() {
        [[ $NET == loopback ]] && return
        kill_trees "$SLIRP_PID"
        SLIRP_PID=
        ip netns del "$NS"
        NS=
}

# What net_up left, whatever became of the run: for the caller's EXIT trap.
net_cleanup() {
        [[ -z $SLIRP_PID ]] || kill_trees "$SLIRP_PID"
        [[ -z $NS ]] || ip netns del "$NS" 2>/dev/null
}
