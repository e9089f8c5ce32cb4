#!/usr/bin/env bash
# The link benchmark of issue 24: how a client in a container reaches a host unix socket, by
# direct TCP (the reference), through the sockferry/1 relay pair (one TCP connection and one
# handshake per client), through the shared link (sockferry/2: one link, a stream per client)
# and through `ssh -L` stream-local forwarding (one SSH connection, a channel per client); on
# loopback and across a user-mode network stack standing in for the VM boundary.
#
#   bench/vm.sh [BUILDDIR]        (default BUILDDIR: build-bench next to bench/)
#
# The VM boundary: a network namespace whose only way out is slirp4netns, the user-mode TCP/IP
# stack rootless podman uses (Docker Desktop's vpnkit and Lima's gvproxy are of the same kind:
# every TCP connection of the guest is re-made by a user-space process on the host). Its gateway
# address is the host's 127.0.0.1 (slirp4netns without --disable-host-loopback), as
# host.docker.internal is. The container side (the clients, the container relay, the ssh
# client) runs inside the namespace; the host side (the host relay, sshd, the sf-load server)
# outside.
#
# Contenders (ONLY= picks some):
#   tcp   client → sf-load server on TCP (ratios are to this row, in the same network)
#   sf1   client → container relay unix:P=tcp:HOST:LINK → host relay tcp:127.0.0.1:LINK=unix:S,
#         both auth = token, link = per-connection (sockferry/1)
#   link  the same pair with the default link mode: the shared link (sockferry/2); "not
#         available in this build" while the relay does not know the key `link`
#   ssh   client → ssh -N -L P:S (inside) → sshd on 127.0.0.1 (a throwaway one, its own host
#         key and authorized key, Debian's OpenSSH with its default cipher) → unix:S
#   floor client → sf-load floor-ctr (inside) → one TCP connection → sf-load floor-host →
#         unix:S: the least any relay pair with a shared link must do for a connection (blocking
#         calls, no framing, no event loop, no authentication), so the floor under the link
#         pair's connections/s and first answer; it carries one connection at a time, so only
#         those two tests, at concurrency 1, are run on it
#   floorc the same with --close: each end's close crosses the link as a transparent relay
#         must carry it (the server's end reaches the client as a shutdown, the client's end the
#         host half before it closes the server's connection); floor closes both as soon as the
#         answer is through
#   linkb the shared link pair of another build, B_BUILD's sockferry: an A/B of a change in one
#         run (the link row is this build's)
#
# Environment:
#   RUNS=1              repeats; with more than one, medians and min–max
#   SECONDS_PER=3       seconds per timed test
#   STREAMS=4           streams of the throughput test
#   CONCS="1 4 16"      concurrencies of the connection test
#   FIRST_N=1000        connections of the first-answer test, one at a time,
#   FIRST_GAP_MS=2      with this pause between them
#   IDLE=1000           idle connections held for the memory figures
#   STALLED=200         downloads nobody reads, held open beside the interactive client's round
#                       trips (issue 33: stalled readers must stall only their own streams)
#   WAKE_SECONDS=1      seconds of connections one at a time counted with perf stat (system
#                       calls, epoll waits) and /proc (voluntary context switches: the times a
#                       process slept and had to be woken; CPU time) on each side; "–" for
#                       perf's counts without perf
#   NETS="loopback slirp"
#   SLIRP_MTU=65520     (podman's default for slirp4netns)
#   SLIRP_CIDR=198.19.240.0/24   the namespace's network (198.18.0.0/15); the gateway is .2
#   SF_ARGS=            extra arguments for `sockferry relay` (e.g. -q)
#   B_BUILD=            a second build directory: adds the contender linkb
#   WAIT_QUIET=0        before each contender, wait up to this many seconds for the machine to
#                       be idle (under 10 % busy over 1 s); the busy % found is recorded
#   OUT=BUILDDIR/vm-results      results.tsv (every figure) and table.md go there
#   KEEP=               set: keep the temporary directory (every process's log) for a look
#   REPORT_ONLY=        set: print the tables of the run in OUT again, measure nothing (STREAMS
#                       as it was for that run)
#
# Exit status: 0 done (a failed measurement is recorded as "failed"), 77 something this needs is
# missing (it says what), 1 an error. Every process and the namespace are removed on exit.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-$HERE/../build-bench}" && pwd)
RUNS=${RUNS:-1}
SECONDS_PER=${SECONDS_PER:-3}
STREAMS=${STREAMS:-4}
CONCS=${CONCS:-"1 4 16"}
FIRST_N=${FIRST_N:-1000}
FIRST_GAP_MS=${FIRST_GAP_MS:-2}
IDLE=${IDLE:-1000}
STALLED=${STALLED:-200}
WAKE_SECONDS=${WAKE_SECONDS:-1}
CLK_TCK=$(getconf CLK_TCK)
NETS=${NETS:-"loopback slirp"}
SLIRP_MTU=${SLIRP_MTU:-65520}
SLIRP_CIDR=${SLIRP_CIDR:-198.19.240.0/24}
SF_ARGS=${SF_ARGS:-}
WAIT_QUIET=${WAIT_QUIET:-0}
OUT=${OUT:-$BUILD/vm-results}
SF_LOAD=$BUILD/bench/sf-load
SOCKFERRY=$BUILD/shim/sockferry

die() { echo "vm.sh: $*" >&2; exit 1; }
skip() { echo "vm.sh: SKIP: $*" >&2; exit 77; }

# ---- report (defined first: REPORT_ONLY needs nothing else) ----

# Columns: metric, heading, r (a ratio to tcp's median in the same network is shown) or -,
# and the table it goes in (1: speed, 2: cost, 3: what one connection at a time costs each side).
columns() {
        COLUMNS="first_p50_us	first answer p50 µs	r	1
first_p99_us	first answer p99 µs	r	1"
        for k in $CONCS; do
                COLUMNS+="
conns_s_c$k	conns/s, $k at once	r	1"
        done
        COLUMNS+="
rtt_s	round trips/s	r	1
downN_mib_s	MiB/s, $STREAMS streams	r	1
cpu_s_gib	relay CPU s/GiB	-	2
slirp_cpu_s_gib	slirp4netns CPU s/GiB	-	2
rtt_p99_us	round trip p99 µs	-	2
bulk_rtt_p99_us	… next to a bulk stream	-	2
stalled_rtt_p99_us	… next to $STALLED stalled readers	-	2
stalled_rtt_max_us	round trip max µs, next to $STALLED stalled readers	-	2
stalled_rss_ctr_mib	RSS MiB, $STALLED stalled: container side	-	2
stalled_rss_host_mib	… host side	-	2
idle_rss_ctr_mib	RSS MiB, $IDLE idle: container side	-	2
idle_rss_host_mib	… host side	-	2
idle_tcp	TCP conns across, $IDLE idle	-	2
busy_pct	machine busy % before	-	2
steal_pct	CPU stolen by the host % during	-	2
ctr_wake_conn	wake-ups per connection: container side	-	3
host_wake_conn	… host side	-	3
ctr_cpu_conn	CPU µs per connection: container side	-	3
host_cpu_conn	… host side	-	3
ctr_epoll_conn	epoll waits per connection: container side	-	3
host_epoll_conn	… host side	-	3
ctr_sys_conn	system calls per connection: container side	-	3
host_sys_conn	… host side	-	3"
}

# Up to three tables per network (speed, cost, per connection): a row per contender, "median
# (×ratio)", and with RUNS > 1 the same tables of min–max.
report() {
        columns
        awk -F'\t' -v nets="$NETS" -v order="${CONTENDERS[*]}" -v cols="$COLUMNS" -v runs="$RUNS" \
                -v link_missing="$LINK_ROW" '
                function fmt(x) { return x >= 100 || x == int(x) ? sprintf("%.0f", x) : x >= 10 ? sprintf("%.1f", x) : sprintf("%.2f", x) }
                function stats(k,   n, a, b, t, s) {
                        n = cnt[k]
                        for (a = 1; a <= n; a++) s[a] = v[k, a] + 0
                        for (a = 2; a <= n; a++) for (b = a; b > 1 && s[b - 1] > s[b]; b--) { t = s[b]; s[b] = s[b - 1]; s[b - 1] = t }
                        med[k] = n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
                        lo[k] = s[1]; hi[k] = s[n]
                }
                function table(net, range, grp,   i, j, k, c, out, sep, base) {
                        out = "| " net (range ? " (min–max of " runs " runs)" : runs > 1 ? " (median of " runs " runs)" : ""); sep = "|---"
                        for (i = 1; i <= nm; i++) {
                                if (group[i] != grp || !used[net, met[i]]) continue
                                out = out " | " head[i]; sep = sep "|---:"
                        }
                        print out " |"; print sep "|"
                        for (j = 1; j <= nc; j++) {
                                c = con[j]; out = "| " label[c]
                                for (i = 1; i <= nm; i++) {
                                        if (group[i] != grp || !used[net, met[i]]) continue
                                        k = net SUBSEP c SUBSEP met[i]
                                        if (!(k in seen)) { out = out " | –"; continue }
                                        if (!cnt[k]) { out = out " | failed"; continue }
                                        if (range) { out = out " | " fmt(lo[k]) "–" fmt(hi[k]); continue }
                                        out = out " | " fmt(med[k])
                                        base = net SUBSEP "tcp" SUBSEP met[i]
                                        if (ratio[i] && c != "tcp" && cnt[base] && med[base] > 0)
                                                out = out sprintf(" (×%.2f)", med[k] / med[base])
                                        if ((met[i] == "bulk_rtt_p99_us" || met[i] == "stalled_rtt_p99_us") && cnt[net SUBSEP c SUBSEP "rtt_p99_us"])
                                                out = out sprintf(" (×%.2f)", med[k] / med[net SUBSEP c SUBSEP "rtt_p99_us"])
                                        if (fails[k]) out = out " (" fails[k] " failed)"
                                }
                                print out " |"
                        }
                        if (link_missing && !range) print "| shared link (sockferry/2) | not available in this build |"
                }
                BEGIN {
                        nn = split(nets, netl, " "); nc = split(order, con, " ")
                        nm = split(cols, lines, "\n")
                        for (i = 1; i <= nm; i++) { split(lines[i], f, "\t"); met[i] = f[1]; head[i] = f[2]; ratio[i] = f[3] == "r"; group[i] = f[4]; grp_of[met[i]] = f[4] }
                        label["tcp"] = "direct TCP"; label["sf1"] = "sockferry/1 pair"
                        label["link"] = "shared link (sockferry/2)"; label["ssh"] = "ssh -L stream-local"
                        label["floor"] = "floor of a relay pair"; label["linkb"] = "shared link, build B"
                        label["floorc"] = "floor of a transparent pair (closes carried)"
                }
                {
                        k = $1 SUBSEP $3 SUBSEP $4; seen[k] = 1; used[$1, $4] = 1
                        if ($4 in grp_of) any[$1, grp_of[$4]] = 1
                        if ($5 == "fail" || $5 == "") fails[k]++; else v[k, ++cnt[k]] = $5
                }
                END {
                        for (k in cnt) stats(k)
                        for (n = 1; n <= nn; n++) for (g = 1; g <= 3; g++) {
                                if (!any[netl[n], g]) continue
                                print ""; table(netl[n], 0, g)
                                if (runs > 1) { print ""; table(netl[n], 1, g) }
                        }
                }' "$OUT/results.tsv"
}

# The shared link against the targets of issues 24 and 33, from the medians: one row per target,
# one column per network, "met" or "short" after the figure.
targets() {
        awk -F'\t' -v nets="$NETS" -v concs="$CONCS" '
                { k = $1 SUBSEP $3 SUBSEP $4; if ($5 != "fail" && $5 != "") v[k, ++cnt[k]] = $5 }
                function med(net, c, m,   k, n, a, b, t, s) {
                        k = net SUBSEP c SUBSEP m; n = cnt[k]
                        if (!n) return ""
                        for (a = 1; a <= n; a++) s[a] = v[k, a] + 0
                        for (a = 2; a <= n; a++) for (b = a; b > 1 && s[b - 1] > s[b]; b--) { t = s[b]; s[b] = s[b - 1]; s[b - 1] = t }
                        return n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
                }
                # the highest of the runs: a stall in any run counts
                function top(net, c, m,   k, a, x) {
                        k = net SUBSEP c SUBSEP m
                        if (!cnt[k]) return ""
                        x = v[k, 1] + 0
                        for (a = 2; a <= cnt[k]; a++) if (v[k, a] + 0 > x) x = v[k, a] + 0
                        return x
                }
                # the ratio m(link) / m(base) against bound: ge (at least) or le (at most)
                function cell(net, m, base, bound, how, c,   x, y, r) {
                        x = med(net, c == "" ? "link" : c, m); y = med(net, base, m)
                        if (x == "" || y == "" || y == 0) return "–"
                        r = x / y
                        return sprintf("×%.2f %s", r, (how == "ge" ? r >= bound : r <= bound) ? "met" : "**short**")
                }
                function row(label, m, base, bound, how, only, c,   n, out) {
                        out = "| " label
                        for (n = 1; n <= nn; n++)
                                out = out " | " (only == "" || only == netl[n] ? cell(netl[n], m, base, bound, how, c) : "")
                        print out " |"
                }
                # the shared link'"'"'s m against its own m0 in the same network, at most bound
                function self_row(label, m, m0, bound,   n, x, y, out) {
                        out = "| " label
                        for (n = 1; n <= nn; n++) {
                                x = med(netl[n], "link", m); y = med(netl[n], "link", m0)
                                out = out " | " (x == "" || y == "" || y == 0 ? "–" : sprintf("×%.2f %s", x / y, x / y <= bound ? "met" : "**short**"))
                        }
                        print out " |"
                }
                END {
                        nn = split(nets, netl, " "); nk = split(concs, ck, " ")
                        for (n = 1; n <= nn; n++) if (cnt[netl[n] SUBSEP "link" SUBSEP "rtt_s"]) any = 1
                        if (!any) exit
                        out = "| shared link: target (issue)"; sep = "|---"
                        for (n = 1; n <= nn; n++) { out = out " | " netl[n]; sep = sep "|---" }
                        print ""; print out " |"; print sep "|"
                        for (i = 1; i <= nk; i++) {
                                row("connections/s, " ck[i] " at once, ≥ 1.0× direct TCP on loopback", "conns_s_c" ck[i], "tcp", 1.0, "ge", "loopback")
                                row("connections/s, " ck[i] " at once, ≥ 2× direct TCP through slirp", "conns_s_c" ck[i], "tcp", 2.0, "ge", "slirp")
                        }
                        row("first answer p50 ≤ 1.1× direct TCP on loopback", "first_p50_us", "tcp", 1.1, "le", "loopback")
                        row("first answer p50 ≤ 1.2× direct TCP through slirp", "first_p50_us", "tcp", 1.2, "le", "slirp")
                        # The same bounds for the floor of a relay pair: where it is short too, no
                        # relay pair can meet them on this machine.
                        for (n = 1; n <= nn; n++) if (cnt[netl[n] SUBSEP "floor" SUBSEP "conns_s_c1"]) floor = 1
                        if (floor) {
                                row("*floor of a relay pair:* connections/s, 1 at once, ≥ 1.0× on loopback", "conns_s_c1", "tcp", 1.0, "ge", "loopback", "floor")
                                row("*floor of a relay pair:* connections/s, 1 at once, ≥ 2× through slirp", "conns_s_c1", "tcp", 2.0, "ge", "slirp", "floor")
                                row("*floor of a relay pair:* first answer p50 ≤ 1.1× on loopback", "first_p50_us", "tcp", 1.1, "le", "loopback", "floor")
                                row("*floor of a relay pair:* first answer p50 ≤ 1.2× through slirp", "first_p50_us", "tcp", 1.2, "le", "slirp", "floor")
                        }
                        row("round trips/s ≥ 0.7× direct TCP through slirp", "rtt_s", "tcp", 0.7, "ge", "slirp")
                        row("throughput ≥ 0.8× the sockferry/1 pair (24)", "downN_mib_s", "sf1", 0.8, "ge", "")
                        row("throughput ≥ 0.9× the sockferry/1 pair (33)", "downN_mib_s", "sf1", 0.9, "ge", "")
                        if (floor)
                                row("connections/s, 1 at once, ≥ 0.9× the floor of a relay pair (33)", "conns_s_c1", "floor", 0.9, "ge", "")
                        for (n = 1; n <= nn; n++) if (cnt[netl[n] SUBSEP "floorc" SUBSEP "conns_s_c1"]) floorc = 1
                        if (floorc)
                                row("*the same against the floor of a transparent pair (closes carried)*", "conns_s_c1", "floorc", 0.9, "ge", "")
                        self_row("a bulk stream raises its neighbour'"'"'s round-trip p99 at most 2× (24, 33)", "bulk_rtt_p99_us", "rtt_p99_us", 2)
                        self_row("stalled readers raise the neighbour'"'"'s round-trip p99 at most 2× (33 asks for the column; the bound is the bulk one)", "stalled_rtt_p99_us", "rtt_p99_us", 2)
                        out = "| no round trip of the neighbour'"'"'s takes 1 s or more next to stalled readers, the longest of the runs (33)"
                        for (n = 1; n <= nn; n++) {
                                x = top(netl[n], "link", "stalled_rtt_max_us")
                                out = out " | " (x == "" ? "–" : sprintf("%.1f ms %s", x / 1000, x < 1000000 ? "met" : "**short**"))
                        }
                        print out " |"
                        out = "| idle streams under 64 MiB per relay"
                        for (n = 1; n <= nn; n++) {
                                x = med(netl[n], "link", "idle_rss_ctr_mib"); y = med(netl[n], "link", "idle_rss_host_mib")
                                out = out " | " (x == "" || y == "" ? "–" : sprintf("%.1f / %.1f MiB %s", x, y, x < 64 && y < 64 ? "met" : "**short**"))
                        }
                        print out " |"
                }' "$OUT/results.tsv"
}

# REPORT_ONLY=1: the tables of the run in OUT again (results.tsv), nothing measured.
if [[ -n ${REPORT_ONLY:-} ]]; then
        [[ -s $OUT/results.tsv ]] || die "REPORT_ONLY: no $OUT/results.tsv"
        NETS=$(awk -F'\t' '!seen[$1]++ { printf "%s ", $1 }' "$OUT/results.tsv")
        CONTENDERS=()
        for c in tcp sf1 link linkb ssh floor floorc; do
                awk -F'\t' -v c="$c" '$3 == c { f = 1 } END { exit !f }' "$OUT/results.tsv" && CONTENDERS+=("$c")
        done
        LINK_ROW=
        [[ " ${CONTENDERS[*]} " == *" link "* ]] || LINK_ROW=1
        RUNS=$(awk -F'\t' '$2 > r { r = $2 } END { print r }' "$OUT/results.tsv")
        IDLE=$(awk -F'\t' '$4 == "idle_open" && $5 > n { n = $5 } END { print n + 0 }' "$OUT/results.tsv")
        CONCS=$(awk -F'\t' '$4 ~ /^conns_s_c/ && !seen[$4]++ { sub(/conns_s_c/, "", $4); printf "%s ", $4 }' "$OUT/results.tsv")
        report
        targets
        exit 0
fi

# ---- measuring ----

[[ -x $SF_LOAD && -x $SOCKFERRY ]] || skip "$SF_LOAD or $SOCKFERRY not built: ninja -C $BUILD"
((EUID == 0)) || skip "needs root: a network namespace, and sshd"
for n in $NETS; do
        case $n in
        loopback) ;;
        slirp)
                command -v slirp4netns >/dev/null || skip "slirp4netns is not installed (packaging/install-deps.sh)"
                command -v ip >/dev/null || skip "ip (iproute2) is not installed"
                ;;
        *) die "NETS: unknown network '$n' (loopback, slirp)" ;;
        esac
done
command -v ss >/dev/null || skip "ss (iproute2) is not installed"

# shellcheck disable=SC2034 # bench/lib.sh uses it
PROG=vm.sh
IN=() # set by net_up: the prefix that runs a command on the container side
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

ulimit -n "$(ulimit -Hn)"
CLK_TCK=$(getconf CLK_TCK)
TMO=$(awk -v s="$SECONDS_PER" 'BEGIN { printf "%d", s * 3 + 60 }')
MAXC=$((IDLE + 100))

T=$(mktemp -d /tmp/sf-vm.XXXXXX)
STARTED=()
HOLD_FD=
NS=
SLIRP_PID=

cleanup() {
        [[ -n $HOLD_FD ]] && exec {HOLD_FD}>&-
        kill_trees "${STARTED[@]}"
        net_cleanup
        if [[ -n ${KEEP:-} ]]; then echo "vm.sh: logs kept in $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- what this build and this machine have ----

"$SOCKFERRY" keygen -o "$T/token" >/dev/null 2>"$T/keygen.log" || die "sockferry keygen: $(cat "$T/keygen.log")"

# The shared link exists once the relay knows `link` (link = per-connection keeps sockferry/1);
# until then the relay's default is sockferry/1 and the key is refused as unknown (78).
LINK_KEY=
NOTES=
WARNINGS=
if "$SOCKFERRY" relay -t -F "x:unix:$T/probe.sock=tcp:127.0.0.1:1,auth=token,token-file=$T/token,link=per-connection" \
        >/dev/null 2>"$T/probe.log"; then
        LINK_KEY=,link=per-connection
elif grep -q "link: unknown key" "$T/probe.log"; then
        NOTES+="; shared link: not available in this build (the relay does not know the key link)"
else
        die "sockferry relay -t refused a plain forward: $(cat "$T/probe.log")"
fi

SSH_WHY=
for p in ssh ssh-keygen /usr/sbin/sshd; do
        command -v "$p" >/dev/null || SSH_WHY="$p is not installed (openssh-client, openssh-server: packaging/install-deps.sh)"
done
[[ -z $SSH_WHY ]] || NOTES+="; ssh: $SSH_WHY"

# Tracepoints of the epoll waits this kernel has, and every system call's (wake_tests).
PERF_EVENTS=
if command -v perf >/dev/null; then
        for e in epoll_wait epoll_pwait epoll_pwait2; do
                perf stat -x, -e "syscalls:sys_enter_$e" -- true >/dev/null 2>&1 && PERF_EVENTS+="syscalls:sys_enter_$e,"
        done
        [[ -z $PERF_EVENTS ]] || PERF_EVENTS+=raw_syscalls:sys_enter
fi
[[ -n $PERF_EVENTS ]] || NOTES+="; perf: not installed or no syscall tracepoints (wake-ups counted, epoll waits and system calls not)"

AVAILABLE=(tcp sf1 floor floorc)
[[ -n $LINK_KEY ]] && AVAILABLE+=(link)
SOCKFERRY_B=
if [[ -n ${B_BUILD:-} ]]; then
        SOCKFERRY_B=$(cd "$B_BUILD" && pwd)/shim/sockferry
        [[ -x $SOCKFERRY_B ]] || die "B_BUILD: no $SOCKFERRY_B"
        AVAILABLE+=(linkb)
        NOTES+="; linkb: $SOCKFERRY_B"
fi
[[ -z $SSH_WHY ]] && AVAILABLE+=(ssh)
CONTENDERS=()
LINK_ROW= # the shared link was asked for and this build has none: its row says so
for c in tcp sf1 link linkb ssh floor floorc; do
        [[ -z ${ONLY:-} || " $ONLY " == *" $c "* ]] || continue
        if [[ " ${AVAILABLE[*]} " == *" $c "* ]]; then
                CONTENDERS+=("$c")
        elif [[ $c == ssh && -n ${ONLY:-} ]]; then
                skip "ssh: $SSH_WHY"
        elif [[ $c == link ]]; then
                LINK_ROW=1
        fi
done
((${#CONTENDERS[@]})) || die "ONLY=\"$ONLY\" names no contender this build has (tcp sf1 link linkb ssh floor floorc)"

# ---- the host side: servers, and a throwaway sshd's keys ----

SRV_PORT=$(free_port)
"$SF_LOAD" server --listen "tcp:127.0.0.1:$SRV_PORT" 2>>"$T/server.log" &
SERVERS=($!)
"$SF_LOAD" server --listen "unix:$T/srv.sock" 2>>"$T/server.log" &
SERVERS+=($!)
STARTED+=("${SERVERS[@]}")
LINK_PORT=$(free_port)
while ((LINK_PORT == SRV_PORT)); do LINK_PORT=$(free_port); done
SSH_PORT=$(free_port)
while ((SSH_PORT == SRV_PORT || SSH_PORT == LINK_PORT)); do SSH_PORT=$(free_port); done

if [[ " ${CONTENDERS[*]} " == *" ssh "* ]]; then sshd_prepare "$T/ssh" "$SSH_PORT"; fi

# ---- contenders ----

# Waits (up to 5 s) for a TCP listener on the host's port $1.
wait_listening() {
        local i
        for ((i = 0; i < 100; i++)); do
                ss -Htln "sport = :$1" | grep -q . && return
                sleep 0.05
        done
}

# Starts contender $1; sets EP (where clients connect), LISTEN_PORT (the host side's TCP port),
# CTR and HOSTSIDE (the processes of each side: the relays, ssh and sshd) and ROOTS (both).
start_contender() {
        NAME=$1
        CTR=()
        HOSTSIDE=()
        case $NAME in
        tcp)
                EP=tcp:$HOST:$SRV_PORT
                LISTEN_PORT=$SRV_PORT
                ;;
        sf1 | link | linkb)
                local opts=",auth=token,token-file=$T/token,max-conns=$MAXC" sf=$SOCKFERRY
                [[ $NAME == sf1 ]] && opts+=$LINK_KEY
                [[ $NAME == linkb ]] && sf=$SOCKFERRY_B
                EP=unix:$T/$NAME.sock
                LISTEN_PORT=$LINK_PORT
                # shellcheck disable=SC2086
                "$sf" relay $SF_ARGS -F "host:tcp:127.0.0.1:$LINK_PORT=unix:$T/srv.sock$opts" \
                        2>>"$T/$NAME.log" &
                HOSTSIDE=($!)
                # shellcheck disable=SC2086
                "${IN[@]}" "$sf" relay $SF_ARGS -F "ctr:unix:$T/$NAME.sock=tcp:$HOST:$LINK_PORT$opts" \
                        2>>"$T/$NAME.log" &
                CTR=($!)
                ;;
        floor | floorc)
                local close=()
                [[ $NAME == floorc ]] && close=(--close)
                EP=unix:$T/$NAME.sock
                LISTEN_PORT=$LINK_PORT
                "$SF_LOAD" floor-host --listen "tcp:127.0.0.1:$LINK_PORT" --connect "unix:$T/srv.sock" "${close[@]}" \
                        2>>"$T/$NAME.log" &
                HOSTSIDE=($!)
                wait_listening "$LINK_PORT"
                "${IN[@]}" "$SF_LOAD" floor-ctr --listen "$EP" --connect "tcp:$HOST:$LINK_PORT" "${close[@]}" 2>>"$T/$NAME.log" &
                CTR=($!)
                ;;
        ssh)
                EP=unix:$T/ssh.sock
                LISTEN_PORT=$SSH_PORT
                /usr/sbin/sshd -D -e -f "$T/ssh/sshd_config" 2>>"$T/ssh.log" &
                HOSTSIDE=($!)
                wait_listening "$SSH_PORT"
                "${IN[@]}" ssh "${SSH_OPTS[@]}" -i "$T/ssh/id" -p "$SSH_PORT" \
                        -L "$T/ssh.sock:$T/srv.sock" "root@$HOST" 2>>"$T/ssh.log" &
                CTR=($!)
                ;;
        esac
        ROOTS=("${CTR[@]}" "${HOSTSIDE[@]}")
        STARTED+=("${ROOTS[@]}")
        if [[ $NAME == floor* ]]; then wait_ready first --count 1; else wait_ready; fi
}

stop_contender() {
        kill_trees "${ROOTS[@]}"
        ROOTS=()
}

rec() { printf '%s\t%s\t%s\t%s\t%s\n' "$NET" "$1" "$NAME" "$2" "${3:-fail}" >>"$OUT/results.tsv"; }

mib() { calc "$1 / 1024"; }

# Run $1 of contender $2: the connection tests, then (for all but the floor, which carries one
# request of one connection at a time) streams_tests.
one() {
        local run=$1 line k quiet st0
        NAME=$2
        quiet=$(wait_quiet)
        start_contender "$2"
        rec "$run" busy_pct "$quiet"
        st0=$(cpu_stat)

        line=$(measure first --count "$FIRST_N" --gap-ms "$FIRST_GAP_MS")
        rec "$run" first_p50_us "$(kv "$line" p50_us)"
        rec "$run" first_p99_us "$(kv "$line" p99_us)"
        for k in $CONCS; do
                [[ $NAME == floor* && $k != 1 ]] && continue
                line=$(measure conns --concurrency "$k" --seconds "$SECONDS_PER")
                rec "$run" "conns_s_c$k" "$(kv "$line" conns_s)"
                rec "$run" "conn_errors_c$k" "$(kv "$line" errors)"
        done
        if ((${#ROOTS[@]})); then wake_tests "$run"; fi
        # an if, not ||: a function on the left of || would run with set -e off
        if [[ $NAME != floor* ]]; then streams_tests "$run"; fi
        rec "$run" steal_pct "$(steal_pct "$st0" "$(cpu_stat)")"
        stop_contender
}

# Run $1's count of what one connection at a time costs each side of the running contender:
# wake-ups (voluntary context switches, from /proc), CPU time (utime + stime, from /proc: in
# ticks of 1/CLK_TCK s, a few thousand connections make it exact to a microsecond or two), and
# with perf its epoll waits and system calls (tracepoints, counted in the kernel), per
# connection of WAKE_SECONDS of `conns`.
wake_tests() {
        local run=$1 line n w0c w0h w1c w1h c0c c0h c1c c1h pc='' ph=''
        if [[ -n $PERF_EVENTS ]]; then
                perf stat -x, -o "$T/perf-ctr.txt" -e "$PERF_EVENTS" -p "$(tree "${CTR[@]}" | paste -sd,)" 2>>"$T/perf.log" &
                pc=$!
                perf stat -x, -o "$T/perf-host.txt" -e "$PERF_EVENTS" -p "$(tree "${HOSTSIDE[@]}" | paste -sd,)" 2>>"$T/perf.log" &
                ph=$!
                STARTED+=("$pc" "$ph")
                sleep 0.5 # perf attaches
        fi
        w0c=$(wakeups "${CTR[@]}")
        w0h=$(wakeups "${HOSTSIDE[@]}")
        c0c=$(cpu_ticks "${CTR[@]}")
        c0h=$(cpu_ticks "${HOSTSIDE[@]}")
        line=$(measure conns --concurrency 1 --seconds "$WAKE_SECONDS")
        c1c=$(cpu_ticks "${CTR[@]}")
        c1h=$(cpu_ticks "${HOSTSIDE[@]}")
        w1c=$(wakeups "${CTR[@]}")
        w1h=$(wakeups "${HOSTSIDE[@]}")
        if [[ -n $pc ]]; then
                kill -INT "$pc" "$ph" 2>/dev/null || true
                wait "$pc" "$ph" || true
        fi
        n=$(kv "$line" n)
        ((${n:-0} > 0)) || return 0
        rec "$run" ctr_wake_conn "$(calc "($w1c - $w0c) / $n")"
        rec "$run" host_wake_conn "$(calc "($w1h - $w0h) / $n")"
        rec "$run" ctr_cpu_conn "$(calc "($c1c - $c0c) * 1000000 / $CLK_TCK / $n")"
        rec "$run" host_cpu_conn "$(calc "($c1h - $c0h) * 1000000 / $CLK_TCK / $n")"
        [[ -n $pc ]] || return 0
        rec "$run" ctr_epoll_conn "$(perf_count "$T/perf-ctr.txt" epoll "$n")"
        rec "$run" host_epoll_conn "$(perf_count "$T/perf-host.txt" epoll "$n")"
        rec "$run" ctr_sys_conn "$(perf_count "$T/perf-ctr.txt" raw_syscalls "$n")"
        rec "$run" host_sys_conn "$(perf_count "$T/perf-host.txt" raw_syscalls "$n")"
}

# The count of the events of perf stat -x, output $1 whose name contains $2, divided by $3;
# nothing when perf counted none of them.
perf_count() {
        awk -F, -v want="$2" -v n="$3" '!/^#/ && index($3, want) && $1 ~ /^[0-9]+$/ { s += $1; f = 1 }
                END { if (f) printf "%.6g\n", s / n }' "$1"
}

# Run $1's tests of what streams carry once open, on the running contender: round trips (alone
# and next to a bulk stream), throughput and its CPU, idle clients' memory and connections.
streams_tests() {
        local run=$1 line c0 c1 s0 s1 b bulk_pid across
        line=$(measure pingpong --seconds "$SECONDS_PER")
        rec "$run" rtt_s "$(kv "$line" rtt_s)"
        rec "$run" rtt_p99_us "$(kv "$line" p99_us)"
        # The same ping-pong next to one bulk download on its own connection, started first.
        timeout "$TMO" "${IN[@]}" "$SF_LOAD" throughput --dir down --seconds "$(calc "$SECONDS_PER + 2")" \
                --connect "$EP" >/dev/null 2>>"$T/client.log" &
        bulk_pid=$!
        sleep 1
        line=$(measure pingpong --seconds "$SECONDS_PER")
        wait "$bulk_pid" || echo "vm.sh: $NET $NAME: the bulk neighbour failed: $(tail -n 1 "$T/client.log")" >&2
        rec "$run" bulk_rtt_p99_us "$(kv "$line" p99_us)"

        # The same ping-pong next to STALLED downloads nobody reads, opened first: each holds what
        # its stream's window and the sockets' buffers let through, and must cost the round trips
        # of its neighbour nothing.
        if hold_idle "$STALLED" stalled; then
                sleep 0.5
                line=$(measure pingpong --seconds "$SECONDS_PER")
                rec "$run" stalled_rtt_p99_us "$(kv "$line" p99_us)"
                rec "$run" stalled_rtt_max_us "$(kv "$line" max_us)"
                if ((${#ROOTS[@]})); then
                        rec "$run" stalled_rss_ctr_mib "$(mib "$(status_kb VmRSS "${CTR[@]}")")"
                        rec "$run" stalled_rss_host_mib "$(mib "$(status_kb VmRSS "${HOSTSIDE[@]}")")"
                fi
        else
                echo "vm.sh: $NET $NAME: the stalled readers failed: $(tail -n 1 "$T/idle.log")" >&2
        fi
        release_idle

        c0=$(cpu_ticks "${ROOTS[@]}")
        [[ -n $SLIRP_PID ]] && s0=$(cpu_ticks "$SLIRP_PID")
        line=$(measure throughput --dir down --streams "$STREAMS" --seconds "$SECONDS_PER")
        c1=$(cpu_ticks "${ROOTS[@]}")
        [[ -n $SLIRP_PID ]] && s1=$(cpu_ticks "$SLIRP_PID")
        rec "$run" downN_mib_s "$(kv "$line" mib_s)"
        b=$(kv "$line" bytes)
        if ((${b:-0} > 0)); then
                ((${#ROOTS[@]})) && rec "$run" cpu_s_gib "$(calc "($c1 - $c0) / $CLK_TCK / ($b / 1073741824)")"
                [[ -n $SLIRP_PID ]] && rec "$run" slirp_cpu_s_gib "$(calc "($s1 - $s0) / $CLK_TCK / ($b / 1073741824)")"
        fi

        if hold_idle "$IDLE"; then
                sleep 0.5
                rec "$run" idle_open "$(kv "$(cat "$T/idle.out")" open)"
                if ((${#ROOTS[@]})); then
                        rec "$run" idle_rss_ctr_mib "$(mib "$(status_kb VmRSS "${CTR[@]}")")"
                        rec "$run" idle_rss_host_mib "$(mib "$(status_kb VmRSS "${HOSTSIDE[@]}")")"
                fi
                # what crosses the boundary: one TCP connection per client, or one in all
                across=$(ss -Htn state established "( sport = :$LISTEN_PORT )" | wc -l)
                rec "$run" idle_tcp "$across"
                if [[ $NAME == link ]] && ((across > 2)); then
                        WARNINGS+="
vm.sh: WARNING: $NET run $run: the link pair carried $IDLE idle clients over $across TCP connections: this build's default link mode is not the shared link, so its row measures sockferry/1"
                fi
        else
                echo "vm.sh: $NET $NAME: the idle client failed: $(tail -n 1 "$T/idle.log")" >&2
        fi
        release_idle
}

# ---- main ----

mkdir -p "$OUT"
: >"$OUT/results.tsv"
{
        echo "# sockferry vm bench: $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')"
        echo "# $(nproc) cpus, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), kernel $(uname -r)"
        echo "# RUNS=$RUNS SECONDS_PER=$SECONDS_PER STREAMS=$STREAMS CONCS=\"$CONCS\" FIRST_N=$FIRST_N FIRST_GAP_MS=$FIRST_GAP_MS IDLE=$IDLE STALLED=$STALLED WAKE_SECONDS=$WAKE_SECONDS NETS=\"$NETS\" SLIRP_MTU=$SLIRP_MTU SLIRP_CIDR=$SLIRP_CIDR SF_ARGS=\"$SF_ARGS\""
        echo "# contenders: ${CONTENDERS[*]}$NOTES"
        echo "# $(slirp4netns --version 2>/dev/null | head -n 1); $(ssh -V 2>&1); loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/table.md" >&2

for net in $NETS; do
        net_up "$net"
        for ((run = 1; run <= RUNS; run++)); do
                for c in "${CONTENDERS[@]}"; do
                        echo "$net, run $run/$RUNS: $c" >&2
                        one "$run" "$c"
                done
        done
        net_down
done
{ report; targets; [[ -z $WARNINGS ]] || echo "$WARNINGS"; } | tee -a "$OUT/table.md"
echo "results in $OUT" >&2
