#!/usr/bin/env bash
# Charts the ratios to direct TCP from a summary.tsv that bench/run.sh wrote.
#
#   bench/plot.sh [SUMMARY.tsv [OUT.png]]   (defaults: bench/summary.tsv, bench/ratios.png)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
IN=${1:-$HERE/summary.tsv}
PNG=${2:-$HERE/ratios.png}
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
[[ -r $IN ]] || { echo "plot.sh: $IN not found: run bench/run.sh first" >&2; exit 1; }

D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT

# One block per panel: a row per metric, a column per contender other than tcp (the 1.0 line).
matrix() {
        awk -F'\t' -v want="$1" '
                BEGIN { nm = split(want, mw, " ") }
                $6 != "-" && $2 != "tcp" {
                        if (!($2 in col)) { col[$2] = ++nc; name[nc] = $2 }
                        r[$1, $2] = $6
                }
                END {
                        printf "metric"
                        for (j = 1; j <= nc; j++) printf "\t%s", name[j]
                        printf "\n"
                        for (i = 1; i <= nm; i++) {
                                split(mw[i], f, "=")
                                printf "\"%s\"", f[2]
                                for (j = 1; j <= nc; j++) printf "\t%s", ((f[1], name[j]) in r) ? r[f[1], name[j]] : "-"
                                printf "\n"
                        }
                }' "$IN" | sed 's/_/ /g'
}
matrix "up_mib_s=upload down_mib_s=download downN_mib_s=download_×N rtt_s=round_trips/s conns_s=connections/s" \
        >"$D/rates.tsv"
matrix "rtt_p50_us=round_trip_p50 rtt_p99_us=round_trip_p99 conn_p50_us=connect_p50" >"$D/latency.tsv"
NC=$(($(head -n 1 "$D/rates.tsv" | awk -F'\t' '{ print NF }') - 1))
((NC > 0)) || { echo "plot.sh: no contender besides tcp in $IN" >&2; exit 1; }

# y range of a panel: a power of two below the smallest ratio to one well above the largest.
yrange() {
        awk -F'\t' 'NR > 1 { for (i = 2; i <= NF; i++) if ($i != "-") { v = $i + 0; lo = !n || v < lo ? v : lo; hi = !n++ || v > hi ? v : hi } }
                END { a = 1; while (a > lo / 1.2) a /= 2; b = 2; while (b < hi * 3) b *= 2; printf "[%g:%g]", a, b }' "$1"
}

gnuplot <<EOF
set terminal pngcairo size 1400,560 font "DejaVu Sans,10"
set output "$PNG"
set datafile separator "\t"
set datafile missing "-"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 1
set logscale y 2
set grid ytics lc rgb "#dddddd"
set key top left autotitle columnheader
set ylabel "ratio to direct TCP (log scale)"
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb "#555555"
off(j) = (j - 2 - ($NC - 1) / 2.0) / ($NC + 1.0)
set multiplot layout 1,2 title "sockferry bench: ratio to direct TCP (dashed line = 1.0)"
set title "throughput and rates: higher is better"
set yrange $(yrange "$D/rates.tsv")
plot for [j=2:$NC+1] "$D/rates.tsv" using j:xtic(1), \
     for [j=2:$NC+1] "$D/rates.tsv" using (\$0 + off(j)):j:(sprintf("%.2f", column(j))) \
        with labels rotate by 90 left offset 0,0.3 font ",8" notitle
set title "latency: lower is better"
set yrange $(yrange "$D/latency.tsv")
plot for [j=2:$NC+1] "$D/latency.tsv" using j:xtic(1), \
     for [j=2:$NC+1] "$D/latency.tsv" using (\$0 + off(j)):j:(sprintf("%.2f", column(j))) \
        with labels rotate by 90 left offset 0,0.3 font ",8" notitle
unset multiplot
EOF
echo "$PNG"
