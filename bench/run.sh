#!/usr/bin/env bash
# Benchmarks sockferry against direct sockets, socat and systemd-socket-proxyd with sf-load.
#
#   bench/run.sh [BUILDDIR]        (default BUILDDIR: build-bench next to bench/)
#
# Environment:
#   RUNS=1            repeats of the speed tests; with more than one, medians and min–max
#   SECONDS_PER=3     seconds per test
#   STREAMS=4         streams of the parallel download test
#   CONC=4            concurrent clients of the connection test
#   IDLE_COUNTS="1000 10000"   idle connections held in the memory test
#   MODE=all          all | speed | memory
#   ONLY=             contenders to run (default: every one available):
#                     tcp unix socat proxyd sockferry portable sf-pair sf-auth sf-apart
#   PORTABLE=         a sockferry built with -Dportable=true (the engine macOS runs), benched
#                     as `portable` with sockferry's forward (default:
#                     build-bench-portable/shim/sockferry next to bench/, when it exists)
#   SF_ARGS=          extra arguments for `sockferry relay` (e.g. -q)
#   WAIT_QUIET=0      before each contender, wait up to this many seconds for the machine to be
#                     idle (under 10 % busy over 1 s); the busy % found is recorded either way
#   OUT=BUILDDIR/bench-results   results.tsv (every figure), summary.tsv (for plot.sh) and
#                                table.md (the tables printed) go there
#
# Everything runs on 127.0.0.1 and unix sockets in a temporary directory; every process this
# script starts is stopped again when it exits.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-$HERE/../build-bench}" && pwd)
RUNS=${RUNS:-1}
SECONDS_PER=${SECONDS_PER:-3}
STREAMS=${STREAMS:-4}
CONC=${CONC:-4}
IDLE_COUNTS=${IDLE_COUNTS:-"1000 10000"}
MODE=${MODE:-all}
SF_ARGS=${SF_ARGS:-}
WAIT_QUIET=${WAIT_QUIET:-0}
OUT=${OUT:-$BUILD/bench-results}
SF_LOAD=$BUILD/bench/sf-load
SOCKFERRY=$BUILD/shim/sockferry
PORTABLE=${PORTABLE:-$HERE/../build-bench-portable/shim/sockferry}
PROXYD=/lib/systemd/systemd-socket-proxyd
[[ -x $PROXYD ]] || PROXYD=/usr/lib/systemd/systemd-socket-proxyd

die() { echo "run.sh: $*" >&2; exit 1; }
[[ -x $SF_LOAD ]] || die "$SF_LOAD not found: build with ninja -C $BUILD"
case $MODE in all|speed|memory) ;; *) die "MODE must be all, speed or memory" ;; esac

ulimit -n "$(ulimit -Hn)"
HARD_NOFILE=$(ulimit -n)
CLK_TCK=$(getconf CLK_TCK)
TMO=$(awk -v s="$SECONDS_PER" 'BEGIN { printf "%d", s * 3 + 30 }')

PROG=run.sh
IN=() # the clients run here
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

T=$(mktemp -d /tmp/sf-bench.XXXXXX)
STARTED=()
HOLD_FD=

cleanup() {
        [[ -n $HOLD_FD ]] && exec {HOLD_FD}>&-
        kill_trees "${STARTED[@]}"
        rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- contenders ----

SRV_PORT=$(free_port)
"$SF_LOAD" server --listen "tcp:127.0.0.1:$SRV_PORT" 2>>"$T/server.log" & SERVERS=($!)
"$SF_LOAD" server --listen "unix:$T/srv.sock" 2>>"$T/server.log" & SERVERS+=($!)
STARTED+=("${SERVERS[@]}")
LINK_PORT=$(free_port)
while ((LINK_PORT == SRV_PORT)); do LINK_PORT=$(free_port); done
MAXC=20000
for n in $IDLE_COUNTS; do ((n + 100 > MAXC)) && MAXC=$((n + 100)); done

AVAILABLE=(tcp unix)
command -v socat >/dev/null && AVAILABLE+=(socat)
[[ -x $PROXYD ]] && command -v systemd-socket-activate >/dev/null && AVAILABLE+=(proxyd)
if [[ -x $SOCKFERRY ]]; then
        AVAILABLE+=(sockferry)
        [[ -x $PORTABLE ]] && AVAILABLE+=(portable)
        AVAILABLE+=(sf-pair)
        if "$SOCKFERRY" keygen -o "$T/token" >/dev/null 2>&1; then
                AVAILABLE+=(sf-auth)
                command -v taskset >/dev/null && (($(nproc) >= 2)) && AVAILABLE+=(sf-apart)
        fi
fi
CONTENDERS=()
for c in "${AVAILABLE[@]}"; do
        [[ -z ${ONLY:-} || " $ONLY " == *" $c "* ]] && CONTENDERS+=("$c")
done

# Descriptors a contender holds per open connection, to keep within the hard RLIMIT_NOFILE.
fds_per_conn() {
        case $1 in
        proxyd) echo 6 ;;            # two sockets and two pipes for splice()
        sockferry|portable|sf-pair|sf-auth|sf-apart) echo 2 ;;
        *) echo 1 ;;                 # socat: one child per connection; client and server hold one
        esac
}

# A container relay (unix:$T/SOCK.sock) → TCP link → host relay (→ the unix server), each
# forward with the extra keys OPTS; sets EP and ROOTS as start_contender does. With APART, the
# host relay runs on CPU 0 and the container relay on CPU 1: in the real deployment they are on
# two machines, while here the scheduler, seeing them wake each other, tends to put both on one
# CPU (bench/RESULTS.md).
start_pair() {
        local sock=$1 opts=$2 host_cpu=() ctr_cpu=()
        if [[ ${3:-} == APART ]]; then
                host_cpu=(taskset -c 0)
                ctr_cpu=(taskset -c 1)
        fi
        EP=unix:$T/$sock.sock
        # shellcheck disable=SC2086
        "${host_cpu[@]}" "$SOCKFERRY" relay $SF_ARGS \
                -F "host:tcp:127.0.0.1:$LINK_PORT=unix:$T/srv.sock$opts,max-conns=$MAXC" 2>>"$T/$NAME.log" &
        ROOTS=($!)
        # shellcheck disable=SC2086
        "${ctr_cpu[@]}" "$SOCKFERRY" relay $SF_ARGS \
                -F "ctr:unix:$T/$sock.sock=tcp:127.0.0.1:$LINK_PORT$opts,max-conns=$MAXC" 2>>"$T/$NAME.log" &
        ROOTS+=($!)
}

# Starts contender $1; sets EP (where clients connect) and ROOTS (relay processes).
start_contender() {
        NAME=$1
        ROOTS=()
        case $NAME in
        tcp) EP=tcp:127.0.0.1:$SRV_PORT ;;
        unix) EP=unix:$T/srv.sock ;;
        socat)
                EP=unix:$T/socat.sock
                socat "UNIX-LISTEN:$T/socat.sock,fork,reuseaddr" "TCP:127.0.0.1:$SRV_PORT" 2>>"$T/$NAME.log" &
                ROOTS=($!)
                ;;
        proxyd)
                EP=unix:$T/proxyd.sock
                (trap '' PIPE; exec systemd-socket-activate -l "$T/proxyd.sock" \
                        "$PROXYD" --connections-max="$MAXC" "127.0.0.1:$SRV_PORT") 2>>"$T/$NAME.log" &
                ROOTS=($!)
                ;;
        sockferry|portable)
                local bin=$SOCKFERRY
                [[ $NAME == portable ]] && bin=$PORTABLE
                EP=unix:$T/$NAME.sock
                # shellcheck disable=SC2086
                "$bin" relay $SF_ARGS \
                        -F "b:unix:$T/$NAME.sock=tcp:127.0.0.1:$SRV_PORT,max-conns=$MAXC" 2>>"$T/$NAME.log" &
                ROOTS=($!)
                ;;
        sf-pair)
                # the same relay pair as sf-auth with auth = none: the cost of the handshake alone
                start_pair sfp ""
                ;;
        sf-auth)
                start_pair sfa ",auth=token,token-file=$T/token"
                ;;
        sf-apart)
                start_pair sfx ",auth=token,token-file=$T/token" APART
                ;;
        esac
        STARTED+=("${ROOTS[@]}")
        wait_ready
}

stop_contender() {
        kill_trees "${ROOTS[@]}"
        ROOTS=()
}

# A failed test is recorded as "fail".
rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$NAME" "$2" "${3:-fail}" >>"$OUT/results.tsv"; }

# Largest sum of VmHWM over the relay's process tree, sampled; written to $T/peak.
sampler() {
        local peak=0 v
        while :; do
                v=$(status_kb VmHWM "$@")
                if ((v > peak)); then peak=$v; echo "$peak" >"$T/peak"; fi
                sleep 0.5
        done
}

speed_one() {
        local run=$1 line bytes=0 b c0 c1 c2 c3 a0 a1 s2 s3 f0 n all ends sampler_pid t dir streams key quiet
        quiet=$(wait_quiet)
        start_contender "$2"
        rec "$run" busy_pct "$quiet"
        if ((${#ROOTS[@]})); then
                echo 0 >"$T/peak"
                sampler "${ROOTS[@]}" &
                sampler_pid=$!
                STARTED+=("$sampler_pid")
                f0=$(fd_count "${ROOTS[@]}")
                c0=$(cpu_ticks "${ROOTS[@]}")
        fi
        for t in "up 1 up" "down 1 down" "down $STREAMS downN"; do
                read -r dir streams key <<<"$t"
                a0=$(cpu_ticks "${SERVERS[@]}" "${ROOTS[@]}")
                line=$(measure throughput --dir "$dir" --streams "$streams" --seconds "$SECONDS_PER")
                a1=$(cpu_ticks "${SERVERS[@]}" "${ROOTS[@]}")
                rec "$run" "${key}_mib_s" "$(kv "$line" mib_s)"
                b=$(kv "$line" bytes)
                bytes=$((bytes + ${b:-0}))
                # With several streams the direct connection keeps both cores busy: how much
                # CPU every process together spends per GiB says what a relay's path can reach.
                if [[ $key == downN && ${b:-0} -gt 0 ]]; then
                        all=$(calc "$(kv "$line" cpu_s) + ($a1 - $a0) / $CLK_TCK")
                        rec "$run" downN_all_s_gib "$(calc "$all / ($b / 1073741824)")"
                        rec "$run" downN_cores "$(calc "$all / $(kv "$line" seconds)")"
                fi
        done
        ((${#ROOTS[@]})) && c1=$(cpu_ticks "${ROOTS[@]}")
        line=$(measure pingpong --seconds "$SECONDS_PER")
        rec "$run" rtt_s "$(kv "$line" rtt_s)"
        rec "$run" rtt_p50_us "$(kv "$line" p50_us)"
        rec "$run" rtt_p99_us "$(kv "$line" p99_us)"
        c2=$(cpu_ticks "${ROOTS[@]}")
        s2=$(cpu_ticks "${SERVERS[@]}")
        line=$(measure conns --concurrency "$CONC" --seconds "$SECONDS_PER")
        n=$(kv "$line" n)
        rec "$run" conns_s "$(kv "$line" conns_s)"
        rec "$run" conn_p50_us "$(kv "$line" p50_us)"
        rec "$run" conns_n "$n"
        rec "$run" conn_errors "$(kv "$line" errors)"
        # The CPU the endpoints (the load generator and the server) spend per connection, and
        # how much of the machine everything took during the churn: on two cores the relay
        # competes with both endpoints for it.
        ((${#ROOTS[@]})) && sleep 0.5 # let the relay close the last connections (and socat reap its children)
        s3=$(cpu_ticks "${SERVERS[@]}")
        c3=$(cpu_ticks "${ROOTS[@]}")
        if ((${n:-0} > 0)); then
                ends=$(calc "$(kv "$line" cpu_s) + ($s3 - $s2) / $CLK_TCK")
                rec "$run" ends_ms_kconn "$(calc "$ends * 1000 / ($n / 1000)")"
                rec "$run" churn_cores "$(calc "($ends + ($c3 - $c2) / $CLK_TCK) / $(kv "$line" seconds)")"
        fi
        if ((${#ROOTS[@]})); then
                ((bytes > 0)) && rec "$run" cpu_s_gib "$(calc "($c1 - $c0) / $CLK_TCK / ($bytes / 1073741824)")"
                ((${n:-0} > 0)) && rec "$run" cpu_ms_kconn "$(calc "($c3 - $c2) * 1000 / $CLK_TCK / ($n / 1000)")"
                rec "$run" fds_before "$f0"
                rec "$run" fds_after "$(fd_count "${ROOTS[@]}")"
                kill "$sampler_pid"
                wait "$sampler_pid" 2>/dev/null || true
                rec "$run" peak_rss_mib "$(calc "$(cat "$T/peak") / 1024")"
        fi
        stop_contender
}

memory_one() {
        local want eff cap base_fds i line
        start_contender "$1"
        sleep 0.3
        base_fds=$(fd_count "${ROOTS[@]}")
        rec mem mem_base_fds "$base_fds"
        rec mem mem_base_rss_kib "$(status_kb VmRSS "${ROOTS[@]}")"
        rec mem mem_base_pss_kib "$(pss_kb "${ROOTS[@]}")"
        cap=$(((HARD_NOFILE - 64) / $(fds_per_conn "$NAME")))
        for want in $IDLE_COUNTS; do
                eff=$((want < cap ? want : cap))
                hold_idle "$eff" || die "idle client for $NAME failed: $(tail -n 3 "$T/idle.log")"
                sleep 0.5
                line=$(cat "$T/idle.out")
                rec mem "mem_${want}_open" "$(kv "$line" open)"
                rec mem "mem_${want}_rss_kib" "$(status_kb VmRSS "${ROOTS[@]}")"
                rec mem "mem_${want}_pss_kib" "$(pss_kb "${ROOTS[@]}")"
                rec mem "mem_${want}_fds" "$(fd_count "${ROOTS[@]}")"
                release_idle
                for ((i = 0; i < 200; i++)); do
                        (($(fd_count "${ROOTS[@]}") <= base_fds + 2)) && break
                        sleep 0.1
                done
        done
        stop_contender
}

# ---- report ----

METRICS='up_mib_s	upload MiB/s, 1 stream	r
down_mib_s	download MiB/s, 1 stream	r
downN_mib_s	download MiB/s, STREAMS streams	r
rtt_s	1-byte round trips/s	r
rtt_p50_us	round trip p50 µs	r
rtt_p99_us	round trip p99 µs	r
conns_s	connections/s, CONC concurrent	r
conn_p50_us	connect+first byte p50 µs	r
conn_errors	connection errors	-
conns_n	connections in the churn	-
cpu_s_gib	relay CPU s per GiB moved	-
downN_all_s_gib	all processes CPU s per GiB, STREAMS streams	-
downN_cores	CPUs busy, STREAMS streams (all processes)	-
cpu_ms_kconn	relay CPU ms per 1000 conns	-
ends_ms_kconn	client + server CPU ms per 1000 conns	-
churn_cores	CPUs busy in the churn (all processes)	-
peak_rss_mib	relay peak RSS MiB (Σ VmHWM)	-
fds_before	relay fds before the churn	-
fds_after	relay fds after the churn	-
busy_pct	machine busy % just before (other load)	-'

# summary.tsv: metric, contender, median, min, max, ratio to tcp's median (or -), failed runs;
# the median, min and max are "-" when every run failed.
summarize() {
        awk -F'\t' -v order="${CONTENDERS[*]}" -v metrics="$METRICS" '
                BEGIN {
                        nc = split(order, con, " ")
                        nm = split(metrics, lines, "\n")
                        for (i = 1; i <= nm; i++) { split(lines[i], f, "\t"); met[i] = f[1]; ratio[f[1]] = f[3] == "r" }
                }
                $1 != "mem" { k = $3 SUBSEP $2; seen[k] = 1; if ($4 == "fail") fails[k]++; else v[k, ++cnt[k]] = $4 }
                END {
                        for (i = 1; i <= nm; i++) for (j = 1; j <= nc; j++) {
                                k = met[i] SUBSEP con[j]; n = cnt[k]
                                if (!n) continue
                                for (a = 1; a <= n; a++) s[a] = v[k, a] + 0
                                for (a = 2; a <= n; a++) for (b = a; b > 1 && s[b - 1] > s[b]; b--) { t = s[b]; s[b] = s[b - 1]; s[b - 1] = t }
                                med[k] = n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
                                lo[k] = s[1]; hi[k] = s[n]
                        }
                        for (i = 1; i <= nm; i++) for (j = 1; j <= nc; j++) {
                                k = met[i] SUBSEP con[j]
                                if (!(k in seen)) continue
                                if (!(k in med)) {
                                        printf "%s\t%s\t-\t-\t-\t-\t%d\n", met[i], con[j], fails[k]
                                        continue
                                }
                                base = met[i] SUBSEP "tcp"
                                r = ratio[met[i]] && (base in med) && med[base] > 0 ? sprintf("%.3f", med[k] / med[base]) : "-"
                                printf "%s\t%s\t%g\t%g\t%g\t%s\t%d\n", met[i], con[j], med[k], lo[k], hi[k], r, fails[k]
                        }
                }' "$OUT/results.tsv" >"$OUT/summary.tsv"
}

table() {
        awk -F'\t' -v order="${CONTENDERS[*]}" -v metrics="$METRICS" -v runs="$RUNS" \
                -v streams="$STREAMS" -v conc="$CONC" '
                function fmt(x) { return x >= 100 || x == int(x) ? sprintf("%.0f", x) : x >= 10 ? sprintf("%.1f", x) : sprintf("%.2f", x) }
                function row(label, what,   j, k, out) {
                        out = "| " label
                        for (j = 1; j <= nc; j++) {
                                k = m SUBSEP con[j]
                                if (!(k in med)) { out = out " | –"; continue }
                                if (med[k] == "-") { out = out " | failed"; continue }
                                if (what == "v") out = out " | " fmt(med[k]) (rat[k] != "-" ? " (×" sprintf("%.2f", rat[k]) ")" : "")
                                else out = out " | " fmt(lo[k]) "–" fmt(hi[k])
                                if (nf[k]) out = out " (" nf[k] " failed)"
                        }
                        print out " |"
                }
                function header(title,   j, out, sep) {
                        out = "| " title; sep = "|---"
                        for (j = 1; j <= nc; j++) { out = out " | " con[j]; sep = sep "|---:" }
                        print out " |"; print sep "|"
                }
                BEGIN { nc = split(order, con, " "); nm = split(metrics, lines, "\n") }
                { k = $1 SUBSEP $2; med[k] = $3; lo[k] = $4; hi[k] = $5; rat[k] = $6; nf[k] = $7; has[$1] = 1 }
                END {
                        header(runs > 1 ? "median of " runs " runs (× vs tcp)" : "metric (× vs tcp)")
                        for (i = 1; i <= nm; i++) {
                                split(lines[i], f, "\t"); m = f[1]
                                if (!has[m]) continue
                                gsub(/STREAMS/, streams, f[2]); gsub(/CONC/, conc, f[2])
                                row(f[2], "v")
                        }
                        if (runs < 2) exit
                        print ""
                        header("min–max of " runs " runs")
                        for (i = 1; i <= nm; i++) {
                                split(lines[i], f, "\t"); m = f[1]
                                if (!has[m]) continue
                                gsub(/STREAMS/, streams, f[2]); gsub(/CONC/, conc, f[2])
                                row(f[2], "r")
                        }
                }' "$OUT/summary.tsv"
}

memory_table() {
        awk -F'\t' -v order="${CONTENDERS[*]}" -v counts="$IDLE_COUNTS" '
                function mib(x) { return sprintf("%.1f", x / 1024) }
                BEGIN { nc = split(order, con, " "); nn = split(counts, cnt, " ") }
                $1 == "mem" { v[$2, $3] = $4; seen[$2] = 1 }
                END {
                        print "| relay | idle conns (open) | Σ RSS MiB | Σ PSS MiB | PSS per conn KiB | fds |"
                        print "|---|---:|---:|---:|---:|---:|"
                        for (j = 1; j <= nc; j++) {
                                c = con[j]
                                if (!seen[c]) continue
                                printf "| %s | 0 | %s | %s | – | %s |\n", c, mib(v[c, "mem_base_rss_kib"]), mib(v[c, "mem_base_pss_kib"]), v[c, "mem_base_fds"]
                                for (i = 1; i <= nn; i++) {
                                        p = "mem_" cnt[i] "_"; o = v[c, p "open"]
                                        printf "| %s | %s (%s) | %s | %s | %.2f | %s |\n", c, cnt[i], o,
                                                mib(v[c, p "rss_kib"]), mib(v[c, p "pss_kib"]),
                                                (o > 0 ? (v[c, p "pss_kib"] - v[c, "mem_base_pss_kib"]) / o : 0),
                                                v[c, p "fds"]
                                }
                        }
                }' "$OUT/results.tsv"
}

# ---- main ----

mkdir -p "$OUT"
: >"$OUT/results.tsv"
{
        echo "# sockferry bench: $(date -u +%Y-%m-%dT%H:%MZ)"
        echo "# $(nproc) cpus, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), kernel $(uname -r)"
        echo "# RUNS=$RUNS SECONDS_PER=$SECONDS_PER STREAMS=$STREAMS CONC=$CONC IDLE_COUNTS=\"$IDLE_COUNTS\" MODE=$MODE SF_ARGS=\"$SF_ARGS\""
        echo "# contenders: ${CONTENDERS[*]}; RLIMIT_NOFILE hard limit $HARD_NOFILE; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/table.md" >&2

if [[ $MODE != memory ]]; then
        for ((run = 1; run <= RUNS; run++)); do
                for c in "${CONTENDERS[@]}"; do
                        echo "run $run/$RUNS: $c" >&2
                        speed_one "$run" "$c"
                done
        done
        summarize
        { echo; table; } | tee -a "$OUT/table.md"
fi
if [[ $MODE != speed ]]; then
        for c in "${CONTENDERS[@]}"; do
                [[ $c == tcp || $c == unix ]] && continue
                echo "memory: $c" >&2
                memory_one "$c"
        done
        { echo; memory_table; } | tee -a "$OUT/table.md"
fi
echo "results in $OUT" >&2
