# shellcheck shell=bash
# Shared by bench/run.sh, bench/vm.sh and bench/soak.sh (sourced): process trees and what
# /proc says of them, the machine's load, ports, and the key=value lines sf-load prints.
# The caller sets WAIT_QUIET (seconds wait_quiet may wait).

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

# Percentage of all CPU time spent busy during the next second.
busy_pct() {
        local a b
        read -ra a </proc/stat
        sleep 1
        read -ra b </proc/stat
        awk -v a="${a[*]:1:8}" -v b="${b[*]:1:8}" 'BEGIN {
                split(a, x, " "); split(b, y, " ")
                for (i = 1; i <= 8; i++) { d = y[i] - x[i]; all += d; if (i == 4 || i == 5) idle += d }
                printf "%d\n", all ? 100 * (all - idle) / all : 0
        }'
}

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

kv() { awk -v k="$2" '{ for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' <<<"$1"; }
calc() { awk "BEGIN { printf \"%.6g\n\", $1 }"; }
