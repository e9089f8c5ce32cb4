#!/usr/bin/env bash
# Resets on the shared link (issue 33, doc/SECURITY.md "Resets"), measured rather than asserted:
#
#   aborts  honest clients that go away mid-stream, as fast as ABORT_PROCS processes manage:
#           each connects through the container relay to a download (sf-churn source-server),
#           reads its first bytes and closes with the rest unread, so the container relay resets
#           the stream (tests/e2e/test_link_life.py: clients_that_go_away_mid_stream_never_end_
#           the_link). Must never end the link.
#   flood   the attack: a token holder's own links to the host relay (sf-flood: the handshake,
#           then HTTP/2 from libnghttp2) open and at once reset streams as fast as it can, a new
#           link each time the host ends one, for FLOOD_SECONDS (test_link_life.py:
#           a_token_holder_resetting_streams_leaves_the_host_bounded): each stream's HEADERS and
#           RST_STREAM in the same write, 100 streams a write. The host relay must stay bounded
#           and the honest link must live on.
#   split   the same attack made dearer for the host (sf-flood --split): the HEADERS of 100
#           streams, then their resets only once the host answered a PING sent after them, so
#           that the host took every stream and dialled its upstream before the reset.
#   alone   the same interactive client with nothing else going on: the reference.
#
# In each, an interactive client of another service on the same link (sf-load pingpong through
# the container relay to an sf-load server) makes round trips one after another for as long as
# the phase lasts. Each phase starts a fresh pair on loopback: a host relay (tcp:127.0.0.1:PORT,
# services src and echo, auth = token, the defaults otherwise) and a container relay (unix
# sockets src and echo, one shared link); so each relay's VmHWM is the peak RSS of its phase.
# Figures per phase: the interactive client's round-trip p50/p99/max; aborts/s (served: read
# their bytes, closed: got EOF or a reset first, errors: could not connect); the flood's streams
# sent and taken by the host (up to each GOAWAY's last stream id) per second, its links and how
# they ended; whether the honest link lived (the container relay's stats: one link, up, no
# reconnect; neither log with a GOAWAY, a link ending or going down); each relay's RSS after the
# link came up and at its peak, and its descriptors then and once the phase is over (they must
# come back).
#
#   bench/aborts.sh [BUILDDIR]    (default BUILDDIR: build-bench next to bench/)
#
# Environment:
#   RUNS=1              repeats of the three phases; with more than one, medians and min–max
#   ABORTS=100000       honest clients that go away, ABORT_PROCS=8 processes at once
#   FLOOD_SECONDS=10    length of the flood
#   ALONE_SECONDS=3     length of the reference round trips
#   WAIT_QUIET=0        before each phase, wait up to this many seconds for the machine to be idle
#                       (under 10 % busy over 1 s); the busy % found is recorded
#   OUT=BUILDDIR/aborts-results   results.tsv and table.md go there
#   KEEP=               set: keep the temporary directory (every process's log)
#   REPORT_ONLY=        set: print the tables of the run in OUT again, measure nothing
#
# Exit status: 0 done (a failed measurement is recorded as "failed"), 77 something this needs is
# missing (it says what), 1 an error. Every process is stopped on exit.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-$HERE/../build-bench}" && pwd)
RUNS=${RUNS:-1}
ABORTS=${ABORTS:-100000}
ABORT_PROCS=${ABORT_PROCS:-8}
FLOOD_SECONDS=${FLOOD_SECONDS:-10}
ALONE_SECONDS=${ALONE_SECONDS:-3}
WAIT_QUIET=${WAIT_QUIET:-0}
OUT=${OUT:-$BUILD/aborts-results}
SF_LOAD=$BUILD/bench/sf-load
SF_FLOOD=$BUILD/bench/sf-flood
SF_CHURN=$BUILD/tests/e2e/sf-churn
SOCKFERRY=$BUILD/shim/sockferry
PROG=aborts.sh

die() { echo "aborts.sh: $*" >&2; exit 1; }
skip() { echo "aborts.sh: SKIP: $*" >&2; exit 77; }

# ---- report ----

# Rows: phase, metric, heading. One table per phase, a column per row here.
ROWS="alone	p50_us	round trip p50 µs
alone	p99_us	p99 µs
alone	max_us	max µs
aborts	n	clients
aborts	rate	aborts/s
aborts	closed	closed before a byte
aborts	errors	could not connect
aborts	survived	link lived (1 = yes)
aborts	p50_us	neighbour's round trip p50 µs
aborts	p99_us	p99 µs
aborts	max_us	max µs
aborts	host_cpu_pct	host relay CPU %
aborts	ctr_cpu_pct	container relay CPU %
aborts	host_rss0_mib	host RSS MiB: start
aborts	host_hwm_mib	peak
aborts	ctr_rss0_mib	container RSS MiB: start
aborts	ctr_hwm_mib	peak
aborts	host_fds	host fds: start → after
aborts	ctr_fds	container fds: start → after"
# the same figures for both floods
for p in flood split; do
        ROWS+="
$p	streams_s	streams sent/s
$p	taken_s	taken by the host /s
$p	dialled_s	upstream dials /s
$p	links	links
$p	ends	how they ended
$p	survived	honest link lived (1 = yes)
$p	p50_us	neighbour's round trip p50 µs
$p	p99_us	p99 µs
$p	max_us	max µs
$p	host_cpu_pct	host relay CPU %
$p	ctr_cpu_pct	container relay CPU %
$p	host_rss0_mib	host RSS MiB: start
$p	host_hwm_mib	peak
$p	host_fds	host fds: start → after"
done
for p in alone aborts flood split; do
        ROWS+="
$p	busy_pct	busy % before
$p	steal_pct	stolen %"
done

# A table per phase: the median of each figure over the runs (text figures: the first run's),
# then min–max with more than one run; then the neighbour's p50/p99 as × its alone figures.
report() {
        awk -F'\t' -v rows="$ROWS" -v runs="$RUNS" '
                function fmt(x) { return x >= 100 || x == int(x) ? sprintf("%.0f", x) : x >= 10 ? sprintf("%.1f", x) : sprintf("%.2f", x) }
                function med(k,   n, a, b, t, s) {
                        n = cnt[k]
                        for (a = 1; a <= n; a++) s[a] = v[k, a] + 0
                        for (a = 2; a <= n; a++) for (b = a; b > 1 && s[b - 1] > s[b]; b--) { t = s[b]; s[b] = s[b - 1]; s[b - 1] = t }
                        lo[k] = s[1]; hi[k] = s[n]
                        return n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
                }
                function cellv(k) {
                        if (!(k in seen)) return "–"
                        if (k in text) return text[k]
                        if (!cnt[k]) return "failed"
                        return fmt(med(k)) (runs > 1 ? " (" fmt(lo[k]) "–" fmt(hi[k]) ")" : "")
                }
                {
                        k = $2 SUBSEP $3; seen[k] = 1
                        if ($4 == "fail" || $4 == "") next
                        if ($4 ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/) v[k, ++cnt[k]] = $4
                        else if (!(k in text)) text[k] = $4
                }
                END {
                        nr = split(rows, r, "\n")
                        np = split("alone aborts flood split", phases, " ")
                        for (p = 1; p <= np; p++) {
                                ph = phases[p]
                                h = "| phase"; sep = "|---"; row = ph (runs > 1 ? " (median of " runs " runs, min–max)" : "")
                                for (i = 1; i <= nr; i++) {
                                        split(r[i], f, "\t"); if (f[1] != ph) continue
                                        h = h " | " f[3]; sep = sep "|---:"
                                        k = ph SUBSEP f[2]
                                        row = row " | " cellv(k)
                                }
                                print ""; print h " |"; print sep "|"; print "| " row " |"
                        }
                        print ""
                        for (p = 2; p <= np; p++) {
                                ph = phases[p]
                                for (q = 1; q <= 2; q++) {
                                        m = q == 1 ? "p50_us" : "p99_us"
                                        a = ph SUBSEP m; b = "alone" SUBSEP m
                                        if (cnt[a] && cnt[b] && med(b) > 0)
                                                printf "the neighbour'"'"'s round-trip %s during the %s: ×%.2f of its figure alone\n", substr(m, 1, 3), ph, med(a) / med(b)
                                }
                        }
                }' "$OUT/results.tsv"
}

if [[ -n ${REPORT_ONLY:-} ]]; then
        [[ -s $OUT/results.tsv ]] || die "REPORT_ONLY: no $OUT/results.tsv"
        RUNS=$(awk -F'\t' '$1 > r { r = $1 } END { print r }' "$OUT/results.tsv")
        report
        exit 0
fi

# ---- measuring ----

for b in "$SF_LOAD" "$SF_FLOOD" "$SF_CHURN" "$SOCKFERRY"; do
        [[ -x $b ]] || skip "$b not built: ninja -C $BUILD"
done
command -v jq >/dev/null || skip "jq is not installed (it reads sockferry stats --format json)"

IN=() # the clients run here
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

ulimit -n "$(ulimit -Hn)"
CLK_TCK=$(getconf CLK_TCK)
T=$(mktemp -d /tmp/sf-aborts.XXXXXX)
STARTED=()
TMO=$((FLOOD_SECONDS + ALONE_SECONDS + 600))

cleanup() {
        kill_trees "${STARTED[@]}"
        if [[ -n ${KEEP:-} ]]; then echo "aborts.sh: logs kept in $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$SOCKFERRY" keygen -o "$T/token" >/dev/null 2>"$T/keygen.log" || die "sockferry keygen: $(cat "$T/keygen.log")"
PORT=$(free_port)

rec() { printf '%s\t%s\t%s\t%s\n' "$RUN" "$PHASE" "$1" "${2:-fail}" >>"$OUT/results.tsv"; }
mib() { calc "$1 / 1024"; }
fds_of() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# A fresh pair for phase $1 (its logs and control sockets in $T/$1): servers, host relay,
# container relay; returns once the link is up and one round trip went through it.
pair_up() {
        local d=$T/$1 i
        mkdir -p "$d"
        "$SF_CHURN" source-server "$d/src.sock" >/dev/null 2>>"$d/servers.log" &
        SRC_PID=$!
        "$SF_LOAD" server --listen "unix:$d/echo.sock" 2>>"$d/servers.log" &
        ECHO_PID=$!
        cat >"$d/host.conf" <<EOF
[sockferry]
token-file = $T/token
control = unix:$d/host.ctl

[src]
listen = tcp:127.0.0.1:$PORT
connect = unix:$d/src.sock
auth = token

[echo]
listen = tcp:127.0.0.1:$PORT
connect = unix:$d/echo.sock
auth = token
EOF
        cat >"$d/ctr.conf" <<EOF
[sockferry]
token-file = $T/token
control = unix:$d/ctr.ctl

[src]
listen = unix:$d/c-src.sock
connect = tcp:127.0.0.1:$PORT
auth = token

[echo]
listen = unix:$d/c-echo.sock
connect = tcp:127.0.0.1:$PORT
auth = token
EOF
        for i in 1 2 3 4 5 6 7 8 9 10; do [[ -S $d/src.sock && -S $d/echo.sock ]] && break; sleep 0.1; done
        "$SOCKFERRY" relay -c "$d/host.conf" 2>>"$d/host.log" &
        HOST_PID=$!
        STARTED+=("$SRC_PID" "$ECHO_PID" "$HOST_PID")
        for ((i = 0; i < 100; i++)); do
                ss -Htln "sport = :$PORT" | grep -q . && break
                sleep 0.05
        done
        "$SOCKFERRY" relay -c "$d/ctr.conf" 2>>"$d/ctr.log" &
        CTR_PID=$!
        STARTED+=("$CTR_PID")
        EP=unix:$d/c-echo.sock
        NAME=$1
        ROOTS=("$HOST_PID" "$CTR_PID" "$SRC_PID" "$ECHO_PID")
        wait_ready pingpong --seconds 0.01
        for ((i = 0; i < 100; i++)); do
                grep -q "link to tcp:127.0.0.1:$PORT up" "$d/ctr.log" && return 0
                sleep 0.05
        done
        die "$1: the container relay's link did not come up: $(tail -n 3 "$d/ctr.log")"
}

pair_down() {
        kill_trees "$CTR_PID" "$HOST_PID" "$SRC_PID" "$ECHO_PID"
}

# The interactive client beside a phase: pingpong_start, then pingpong_stop records its figures.
pingpong_start() {
        "$SF_LOAD" pingpong --connect "$EP" --seconds 3600 >"$T/$PHASE/pingpong.out" 2>>"$T/$PHASE/pingpong.log" &
        PING_PID=$!
        STARTED+=("$PING_PID")
        sleep 0.2
}

pingpong_stop() {
        local line
        kill -USR1 "$PING_PID" 2>/dev/null || true
        if wait "$PING_PID"; then
                line=$(cat "$T/$PHASE/pingpong.out")
                rec p50_us "$(kv "$line" p50_us)"
                rec p99_us "$(kv "$line" p99_us)"
                rec max_us "$(kv "$line" max_us)"
        else
                echo "aborts.sh: $PHASE: the interactive client failed: $(tail -n 1 "$T/$PHASE/pingpong.log")" >&2
                rec p50_us fail
                rec p99_us fail
                rec max_us fail
        fi
}

# Each relay's RSS and fds once its link is up (before the phase's load), and the start of its
# CPU time.
start_figures() {
        CPU0=$(cpu_ticks "$HOST_PID")
        CPU0_CTR=$(cpu_ticks "$CTR_PID")
        T0=$EPOCHREALTIME
        HOST_FDS0=$(fds_of "$HOST_PID")
        CTR_FDS0=$(fds_of "$CTR_PID")
        rec host_rss0_mib "$(mib "$(status_kb VmRSS "$HOST_PID")")"
        rec ctr_rss0_mib "$(mib "$(status_kb VmRSS "$CTR_PID")")"
}

# Each relay's share of a CPU during the phase (100 = one CPU busy), its peak RSS, and its
# descriptors once they came back (up to 10 s) or what they are then.
end_figures() {
        local i h c secs
        secs=$(calc "$EPOCHREALTIME - $T0")
        rec host_cpu_pct "$(calc "100 * ($(cpu_ticks "$HOST_PID") - $CPU0) / $CLK_TCK / $secs")"
        rec ctr_cpu_pct "$(calc "100 * ($(cpu_ticks "$CTR_PID") - $CPU0_CTR) / $CLK_TCK / $secs")"
        rec host_hwm_mib "$(mib "$(status_kb VmHWM "$HOST_PID")")"
        rec ctr_hwm_mib "$(mib "$(status_kb VmHWM "$CTR_PID")")"
        for ((i = 0; i < 100; i++)); do
                h=$(fds_of "$HOST_PID")
                c=$(fds_of "$CTR_PID")
                ((h <= HOST_FDS0 && c <= CTR_FDS0)) && break
                sleep 0.1
        done
        rec host_fds "$HOST_FDS0 → $h"
        rec ctr_fds "$CTR_FDS0 → $c"
}

# 1 when the honest link lived through the phase: the container relay has one link, up, never
# re-dialled, and no relay log $1... has a GOAWAY or a link ending or going down (the host's
# is not looked at during the flood: it ends the flooder's links).
survived() {
        local d=$T/$PHASE st
        st=$("$SOCKFERRY" stats --control "unix:$d/ctr.ctl" --format json 2>>"$d/stats.log") || { echo 0; return; }
        if jq -e '(.links | length) == 1 and .links[0].state == "up" and .links[0].reconnects == 0' <<<"$st" >/dev/null &&
                ! grep -Eiq 'goaway|link (to|from) \S+ (\(\S+\) )?(ended|down)|shutting down|takes no new streams' "$@"; then
                echo 1
        else
                echo 0
        fi
}

phase_alone() {
        local line
        line=$(measure pingpong --seconds "$ALONE_SECONDS")
        rec p50_us "$(kv "$line" p50_us)"
        rec p99_us "$(kv "$line" p99_us)"
        rec max_us "$(kv "$line" max_us)"
}

phase_aborts() {
        local line
        start_figures
        pingpong_start
        line=$(timeout "$TMO" "$SF_CHURN" abort "$T/$PHASE/c-src.sock" "$ABORTS" "$ABORT_PROCS" 2>>"$T/$PHASE/churn.log") ||
                echo "aborts.sh: sf-churn abort: $(tail -n 2 "$T/$PHASE/churn.log")" >&2
        pingpong_stop
        rec n "$(kv "$line" n)"
        rec seconds "$(kv "$line" seconds)"
        [[ -n $line ]] && rec rate "$(calc "$(kv "$line" n) / $(kv "$line" seconds)")"
        rec closed "$(kv "$line" closed)"
        rec errors "$(kv "$line" errors)"
        rec survived "$(survived "$T/$PHASE/ctr.log" "$T/$PHASE/host.log")"
        end_figures
}

# The echo service's connections so far on the host relay (its streams: each one an upstream
# dial).
host_total() {
        "$SOCKFERRY" stats --control "unix:$T/$PHASE/host.ctl" --format json 2>>"$T/$PHASE/stats.log" |
                jq '.forwards[] | select(.name == "echo") | .total'
}

# The flood ($@: sf-flood's extra arguments).
flood() {
        local line d0 d1
        start_figures
        d0=$(host_total)
        pingpong_start
        line=$(timeout "$TMO" "$SF_FLOOD" --connect "tcp:127.0.0.1:$PORT" --token "$T/token" --service echo \
                --seconds "$FLOOD_SECONDS" "$@" 2>>"$T/$PHASE/flood.log") ||
                echo "aborts.sh: sf-flood: $(tail -n 2 "$T/$PHASE/flood.log")" >&2
        pingpong_stop
        d1=$(host_total)
        rec streams_s "$(kv "$line" streams_s)"
        rec taken_s "$(kv "$line" taken_s)"
        [[ -n $line && -n $d0 && -n $d1 ]] && rec dialled_s "$(calc "($d1 - $d0) / $(kv "$line" seconds)")"
        rec links "$(kv "$line" links)"
        rec ends "$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^(refused|goaway_[a-z]+|closed|open)=[1-9]/) { sub(/=/, " ", $i); s = s (s ? ", " : "") $i } }
                END { print s }' <<<"$line")"
        rec survived "$(survived "$T/$PHASE/ctr.log")"
        end_figures
}

phase_flood() { flood; }
phase_split() { flood --split; }

# ---- main ----

mkdir -p "$OUT"
: >"$OUT/results.tsv"
{
        echo "# sockferry aborts bench: $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')"
        echo "# $(nproc) cpus, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), kernel $(uname -r)"
        echo "# RUNS=$RUNS ABORTS=$ABORTS ABORT_PROCS=$ABORT_PROCS FLOOD_SECONDS=$FLOOD_SECONDS ALONE_SECONDS=$ALONE_SECONDS; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/table.md" >&2

for ((RUN = 1; RUN <= RUNS; RUN++)); do
        for PHASE in alone aborts flood split; do
                echo "run $RUN/$RUNS: $PHASE" >&2
                busy=$(wait_quiet)
                pair_up "$PHASE"
                st0=$(cpu_stat)
                rec busy_pct "$busy"
                "phase_$PHASE"
                rec steal_pct "$(steal_pct "$st0" "$(cpu_stat)")"
                pair_down
                mv "$T/$PHASE" "$T/$PHASE.$RUN"
        done
done
report | tee -a "$OUT/table.md"
echo "results in $OUT" >&2
