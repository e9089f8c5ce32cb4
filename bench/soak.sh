#!/usr/bin/env bash
# The soak of issue 23: minutes of mixed load through the authenticated relay pair, then the
# leak check an operator would make.
#
#   bench/soak.sh [BUILDDIR]      (default BUILDDIR: build-bench next to bench/; SOCKFERRY and
#                                  SF_LOAD name the binaries instead when set, as meson does)
#
# The pair: a container relay (unix:C → tcp:127.0.0.1:PORT, auth = token) and a host relay
# (tcp:127.0.0.1:PORT → unix:U, auth = token) in front of an sf-load server on U. The load
# (sf-load mixed, CONC clients, and sf-load conns beside it for churn): short and long
# connections, half-closes, client aborts (a reset), upstream aborts, slow readers; clients of a
# third relay that holds another token, and bytes that are no handshake sent straight to the
# host relay's port; every RESTART_EVERY seconds the upstream server is killed (SIGKILL) and
# started again.
#
# Then, once the load has stopped, for each of the three relays:
#   * stats: active 0 for every forward, and total = closed + active (also checked mid-run,
#     under load, when the counters move);
#   * open descriptors (/proc/PID/fd) exactly what they were after the warm-up;
#   * RSS within RSS_SLACK_KIB (or 25 %, whichever is more) of the warm-up's; not checked in a
#     sanitizer build (SF_SANITIZED=1: ASan keeps freed memory in quarantine), only reported;
#   * SIGTERM ends it with status 0 (under ASan that includes LeakSanitizer's verdict);
# and the load itself: no byte ever differed from what was sent, no wrong-token client was
# answered, every kind of connection got through at least once.
#
# Environment:
#   SOAK_SECONDS=600   the load's duration (the test suite runs 60)
#   SF_SOAK_SECONDS=   when set, the load's duration whatever SOAK_SECONDS says (meson's test
#                      environment sets SOAK_SECONDS; CI shortens the soak of the ASan build,
#                      whose RSS is not judged, with this)
#   WARM_SECONDS=      warm-up before the baseline: the same load, restarts left out (default:
#                      SOAK_SECONDS / 6, 5 to 30)
#   CONC=16            clients of sf-load mixed
#   RESTART_EVERY=10   seconds between upstream restarts (0: never)
#   SAMPLE_EVERY=5     seconds between samples of fds, RSS and active connections
#   RSS_SLACK_KIB=4096
#   LINK=              the pair's link key (per-connection for sockferry/1 in a build that has
#                      the shared link); empty: the relay's default
#   OUT=BUILDDIR/soak-results   samples.tsv, stats-*.prom (and the end's .json) and report.txt
#   KEEP=              set: keep the temporary directory (the relays' logs)
#
# Exit status: 0 pass, 1 a check failed (each failure is named), 77 something it needs is missing
# (said); any other way out (a command that failed under set -e, a signal) is reported as 1, so
# that meson's exitcode protocol never reads an accident as a skip.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
if [[ -n ${SOCKFERRY:-} && -n ${SF_LOAD:-} ]]; then
        BUILD=$(dirname "$(dirname "$SOCKFERRY")")
else
        BUILD=$(cd "${1:-$HERE/../build-bench}" 2>/dev/null && pwd) || BUILD=${1:-$HERE/../build-bench}
        SOCKFERRY=$BUILD/shim/sockferry
        SF_LOAD=$BUILD/bench/sf-load
fi
SOAK_SECONDS=${SF_SOAK_SECONDS:-${SOAK_SECONDS:-600}}
WARM_SECONDS=${WARM_SECONDS:-$(((w = SOAK_SECONDS / 6) < 5 ? 5 : w > 30 ? 30 : w))}
CONC=${CONC:-16}
RESTART_EVERY=${RESTART_EVERY:-10}
SAMPLE_EVERY=${SAMPLE_EVERY:-5}
RSS_SLACK_KIB=${RSS_SLACK_KIB:-4096}
LINK=${LINK:-}
OUT=${OUT:-$BUILD/soak-results}
PROG=soak.sh

SKIPPED=
skip() { echo "soak.sh: SKIP: $*"; SKIPPED=1; exit 77; }
# The exit status, whatever the way out: 0, 77 (a skip, said) or 1.
CLEANUP=
on_exit() {
        local rc=$?
        [[ -z $CLEANUP ]] || $CLEANUP
        if ((rc == 0)) || { ((rc == 77)) && [[ -n $SKIPPED ]]; }; then exit "$rc"; fi
        ((rc == 1)) || echo "soak.sh: FAIL: stopped with status $rc"
        exit 1
}
trap on_exit EXIT
[[ -x $SOCKFERRY ]] || skip "$SOCKFERRY not built"
[[ -x $SF_LOAD ]] || skip "$SF_LOAD not built"

IN=() # the clients run here
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

ulimit -n "$(ulimit -Hn)"
T=$(mktemp -d /tmp/sf-soak.XXXXXX)
STARTED=()
UP_PID=
FAILS=0

cleanup() {
        kill_trees "${STARTED[@]}" "$UP_PID"
        if [[ -n ${KEEP:-} ]]; then echo "soak.sh: logs kept in $T"; else rm -rf "$T"; fi
}
CLEANUP=cleanup
trap 'exit 130' INT TERM

fail() { echo "soak.sh: FAIL: $*"; FAILS=$((FAILS + 1)); }
say() { echo "soak.sh: $*"; }

mkdir -p "$OUT"
"$SOCKFERRY" keygen -o "$T/token" >/dev/null 2>&1
"$SOCKFERRY" keygen -o "$T/other-token" >/dev/null 2>&1
if [[ -n $LINK ]] && ! "$SOCKFERRY" relay -t \
        -F "x:unix:$T/probe.sock=tcp:127.0.0.1:1,auth=token,token-file=$T/token,link=$LINK" >/dev/null 2>&1; then
        skip "this build's relay does not take link = $LINK"
fi
PORT=$(free_port)

# Writes relay NAME's configuration: one forward NAME from $2 to $3 with the token file $4.
relay_conf() {
        cat >"$T/$1.conf" <<EOF
[sockferry]
control = unix:$T/$1-control.sock

[$1]
listen = $2
connect = $3
auth = token
token-file = $4
max-conns = 4096
${LINK:+link = $LINK}
EOF
}
relay_conf host "tcp:127.0.0.1:$PORT" "unix:$T/up.sock" "$T/token"
relay_conf ctr "unix:$T/ctr.sock" "tcp:127.0.0.1:$PORT" "$T/token"
relay_conf wrong "unix:$T/wrong.sock" "tcp:127.0.0.1:$PORT" "$T/other-token"

upstream_start() {
        "$SF_LOAD" server --listen "unix:$T/up.sock" 2>>"$T/upstream.log" &
        UP_PID=$!
}

upstream_restart() {
        kill -KILL "$UP_PID" 2>/dev/null || true
        wait "$UP_PID" 2>/dev/null || true
        sleep 0.3 # a moment with no upstream: new connections get "upstream unavailable"
        upstream_start
}

declare -A PID
RELAYS=(host ctr wrong)
upstream_start
for r in "${RELAYS[@]}"; do
        "$SOCKFERRY" relay -c "$T/$r.conf" 2>>"$T/$r.log" &
        PID[$r]=$!
        STARTED+=("${PID[$r]}")
done

# stats NAME FILE [FORMAT]: the relay's stats (Prometheus' format unless told), or status 1.
# The Prometheus lines are what the checks read: one sample a line, awk is enough.
stats() { "$SOCKFERRY" stats --control "$T/$1-control.sock" --format "${3:-prometheus}" >"$2" 2>>"$T/stats.log"; }

# psum FILE METRIC [LABEL]: the sum of METRIC's samples over every forward (those with LABEL,
# e.g. kind="auth_rejected", when given).
psum() {
        awk -v m="$2{" -v l="${3:-}" 'index($0, m) == 1 && (l == "" || index($0, l)) { s += $NF } END { printf "%d\n", s }' "$1"
}

fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
rss_kib() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"; }

# Waits until every relay reports no active connection; 1 after $1 seconds.
wait_inactive() {
        local until=$((SECONDS + $1)) r busy
        while :; do
                busy=
                for r in "${RELAYS[@]}"; do
                        stats "$r" "$T/now.prom" && (($(psum "$T/now.prom" sockferry_connections_active) == 0)) ||
                                busy+=" $r"
                done
                [[ -z $busy ]] && return 0
                ((SECONDS < until)) || { echo "$busy"; return 1; }
                sleep 0.5
        done
}

# Waits until relay $1 holds $2 descriptors (the control connection of the last stats request
# may still be open for a moment); prints the count it settled on.
fds_settle() {
        local until=$((SECONDS + $3)) n
        while n=$(fds "${PID[$1]}"); ((n != $2 && SECONDS < until)); do sleep 0.2; done
        echo "$n"
}

# Every relay's accounting: total = closed + active for every forward; $1 names the moment.
check_balance() {
        local r bad
        for r in "${RELAYS[@]}"; do
                if ! stats "$r" "$T/bal.prom"; then
                        fail "$1: stats of the $r relay did not answer"
                        continue
                fi
                bad=$(awk '
                        match($0, /^sockferry_connections_(active|total|closed_total)\{forward="[^"]*"\}/) {
                                k = substr($0, 1, RLENGTH); f = k; sub(/^[^{]*/, "", f); sub(/\{.*/, "", k)
                                v[k, f] = $NF; fw[f] = 1
                        }
                        END {
                                for (f in fw) {
                                        t = v["sockferry_connections_total", f]; c = v["sockferry_connections_closed_total", f]
                                        a = v["sockferry_connections_active", f]
                                        if (t != c + a) printf "%s: total %d != closed %d + active %d; ", f, t, c, a
                                }
                        }' "$T/bal.prom")
                [[ -z $bad ]] || fail "$1: the $r relay's counters do not balance: $bad"
        done
}

# ---- start, warm up, baseline ----

EP=unix:$T/ctr.sock
NAME=pair
ROOTS=("${PID[@]}")
TMO=60
wait_ready
for r in "${RELAYS[@]}"; do
        for ((i = 0; i < 100; i++)); do stats "$r" "$T/now.prom" && break; sleep 0.1; done
        stats "$r" "$T/now.prom" || { echo "soak.sh: the $r relay's control socket does not answer: $(tail -n 3 "$T/$r.log")"; exit 1; }
done

say "$(date -u +%H:%M:%SZ) warm-up ${WARM_SECONDS}s, then ${SOAK_SECONDS}s of load (CONC=$CONC, upstream restarts every ${RESTART_EVERY}s${LINK:+, link = $LINK}); loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
# The warm-up is the load's own shape, the churn beside the mixed clients included: what a
# relay fills once and then reuses (the buffer pool's reserve, up to 32 buffers of 256 KiB;
# malloc's arenas) must be in the baseline. Without the churn the baseline missed it: a soak
# of the shared link under a load average of 19 saw the container relay step from 7 100 to
# 13 080 KiB in the load's first second and stay at 12 300 KiB, flat, through 200 000
# connections.
# start_load SECONDS PHASE: the load's shape in the background, sf-load mixed ($MIXED, its
# report in $T/PHASE-mixed.out) and the churn beside it ($CONNS, $T/PHASE-conns.out).
start_load() {
        "$SF_LOAD" mixed --connect "$EP" --seconds "$1" --concurrency "$CONC" --wrong "unix:$T/wrong.sock" \
                --junk "tcp:127.0.0.1:$PORT" >"$T/$2-mixed.out" 2>>"$T/client.log" &
        MIXED=$!
        "$SF_LOAD" conns --connect "$EP" --seconds "$1" --concurrency 2 >"$T/$2-conns.out" 2>>"$T/client.log" &
        CONNS=$!
        STARTED+=("$MIXED" "$CONNS")
}
start_load "$WARM_SECONDS" warm
wait "$MIXED" || fail "warm-up load: $(cat "$T/warm-mixed.out") $(tail -n 2 "$T/client.log")"
wait "$CONNS" || true # as the load's churn: its errors are counted, not judged
if busy=$(wait_inactive 60); then :; else fail "after the warm-up, connections still active in:$busy"; fi

declare -A BASE_FDS BASE_RSS
for r in "${RELAYS[@]}"; do
        stats "$r" "$OUT/stats-$r-baseline.prom"
        sleep 0.3
        BASE_FDS[$r]=$(fds "${PID[$r]}")
        BASE_RSS[$r]=$(rss_kib "${PID[$r]}")
done
BASE_TOTAL=$(psum "$OUT/stats-host-baseline.prom" sockferry_connections_total)

# ---- the load ----

printf 't_s\trelay\tfds\trss_kib\tactive\n' >"$OUT/samples.tsv"
start_load "$SOAK_SECONDS" load
start=$SECONDS
next_restart=$((start + RESTART_EVERY))
next_sample=$start
restarts=0
balanced_mid=
declare -A PEAK_FDS PEAK_RSS
while kill -0 "$MIXED" 2>/dev/null; do
        now=$SECONDS
        if ((RESTART_EVERY > 0 && now >= next_restart && now - start < SOAK_SECONDS - 2)); then
                upstream_restart
                restarts=$((restarts + 1))
                next_restart=$((now + RESTART_EVERY))
        fi
        if ((now >= next_sample)); then
                for r in "${RELAYS[@]}"; do
                        nfd=$(fds "${PID[$r]}")
                        kib=$(rss_kib "${PID[$r]}" 2>/dev/null || echo 0)
                        act=-
                        stats "$r" "$T/s.prom" && act=$(psum "$T/s.prom" sockferry_connections_active)
                        printf '%d\t%s\t%d\t%d\t%s\n' $((now - start)) "$r" "$nfd" "$kib" "$act" >>"$OUT/samples.tsv"
                        ((nfd > ${PEAK_FDS[$r]:-0})) && PEAK_FDS[$r]=$nfd
                        ((kib > ${PEAK_RSS[$r]:-0})) && PEAK_RSS[$r]=$kib
                done
                # the accounting under load, once, halfway
                if [[ -z $balanced_mid ]] && ((now - start >= SOAK_SECONDS / 2)); then
                        check_balance "halfway, under load"
                        balanced_mid=1
                fi
                next_sample=$((now + SAMPLE_EVERY))
        fi
        sleep 0.2
done
wait "$MIXED" && mixed_rc=0 || mixed_rc=$?
wait "$CONNS" || true
kill -0 "$UP_PID" 2>/dev/null || upstream_start

# ---- back to the baseline ----

say "$(date -u +%H:%M:%SZ) load done ($restarts upstream restarts); waiting for the relays to settle"
((mixed_rc == 0)) || fail "the mixed load reported corruption or got nothing through (exit $mixed_rc): $(tail -n 3 "$T/client.log")"
if busy=$(wait_inactive 60); then :; else fail "60 s after the load, connections still active in:$busy"; fi
check_balance "after the load"

{
        echo "# soak $(date -u +%Y-%m-%dT%H:%MZ): SOAK_SECONDS=$SOAK_SECONDS WARM_SECONDS=$WARM_SECONDS CONC=$CONC RESTART_EVERY=$RESTART_EVERY LINK=${LINK:-default}, $restarts upstream restarts; loadavg at the end $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "# load: $(cat "$T/load-mixed.out")"
        echo "# churn beside it: $(cat "$T/load-conns.out")"
        printf '%-6s %9s %9s %9s %11s %11s %11s %9s %9s %9s  %s\n' relay fds_base fds_peak fds_end rss_base_kib rss_peak_kib rss_end_kib total closed active errors
} >"$OUT/report.txt"
for r in "${RELAYS[@]}"; do
        end_fds=$(fds_settle "$r" "${BASE_FDS[$r]}" 30)
        end_rss=$(rss_kib "${PID[$r]}")
        stats "$r" "$OUT/stats-$r-end.prom" || fail "stats of the $r relay did not answer at the end"
        stats "$r" "$OUT/stats-$r-end.json" json || true
        total=$(psum "$OUT/stats-$r-end.prom" sockferry_connections_total)
        closed=$(psum "$OUT/stats-$r-end.prom" sockferry_connections_closed_total)
        active=$(psum "$OUT/stats-$r-end.prom" sockferry_connections_active)
        errs=$(awk '/^sockferry_errors_total\{/ && $NF > 0 { k = $0; sub(/.*kind="/, "", k); sub(/".*/, "", k); s = s (s ? "," : "") k "=" $NF }
                END { print s ? s : "-" }' "$OUT/stats-$r-end.prom")
        printf '%-6s %9d %9d %9d %11d %11d %11d %9d %9d %9d  %s\n' "$r" "${BASE_FDS[$r]}" "${PEAK_FDS[$r]:-0}" "$end_fds" \
                "${BASE_RSS[$r]}" "${PEAK_RSS[$r]:-0}" "$end_rss" "$total" "$closed" "$active" "$errs" >>"$OUT/report.txt"
        ((end_fds == BASE_FDS[$r])) || fail "the $r relay holds $end_fds descriptors, $((end_fds - BASE_FDS[$r])) more than after the warm-up (${BASE_FDS[$r]}): $(find "/proc/${PID[$r]}/fd" -mindepth 1 -printf '%f -> %l; ' 2>/dev/null)"
        slack=$((BASE_RSS[$r] / 4 > RSS_SLACK_KIB ? BASE_RSS[$r] / 4 : RSS_SLACK_KIB))
        if [[ ${SF_SANITIZED:-0} == 1 ]]; then
                :
        elif ((end_rss > BASE_RSS[$r] + slack)); then
                fail "the $r relay's RSS grew from ${BASE_RSS[$r]} to $end_rss KiB (more than $slack KiB)"
        fi
done
cat "$OUT/report.txt"
[[ ${SF_SANITIZED:-0} == 1 ]] && say "sanitizer build: RSS reported, not checked"

# The mix must have exercised what it claims: the host relay refused the other token and the junk.
host_total=$(psum "$OUT/stats-host-end.prom" sockferry_connections_total)
((host_total > BASE_TOTAL)) || fail "the host relay accepted no connection during the load"
auth=$(($(psum "$OUT/stats-host-end.prom" sockferry_errors_total 'kind="auth_rejected"') +
        $(psum "$OUT/stats-host-end.prom" sockferry_errors_total 'kind="wrong_peer"') +
        $(psum "$OUT/stats-host-end.prom" sockferry_errors_total 'kind="timeout"')))
((auth > 0)) || fail "the host relay counted no refused handshake: the wrong-token and junk clients did not reach it"
((restarts > 0 || RESTART_EVERY == 0)) || fail "the upstream was never restarted (SOAK_SECONDS too short for RESTART_EVERY)"

# A clean stop: SIGTERM, and status 0 (LeakSanitizer's verdict is part of it under ASan).
for r in "${RELAYS[@]}"; do kill -TERM "${PID[$r]}"; done
for r in "${RELAYS[@]}"; do
        rc=0
        wait "${PID[$r]}" || rc=$?
        ((rc == 0)) || fail "the $r relay exited with status $rc on SIGTERM: $(tail -n 5 "$T/$r.log" | tr '\n' ';')"
done
STARTED=()

if ((FAILS)); then
        say "$FAILS check(s) failed; samples and stats in $OUT"
        exit 1
fi
say "pass: descriptors back to the baseline, every counter balanced, no corruption ($OUT)"
