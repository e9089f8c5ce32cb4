#!/bin/bash
# The fish completion (sockferry.fish), loaded into fish with no configuration (fish -N):
# `complete -C LINE` prints what fish offers for the last word of LINE.
# Usage: test_completion_fish.sh COMPLETION_FILE TABLE     (TAP output; TABLE:
#        packaging/completions/sockferry.cli, the commands it must offer)
set -u
command -v fish >/dev/null || { echo "1..0 # SKIP fish is not installed (packaging/install-deps.sh installs it)"; exit 0; }
comp=$1 table=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/host.conf"

# complete LINE: the words offered (descriptions dropped), sorted, one a line.
complete() {
        # shellcheck disable=SC2016
        fish -N -c 'source $argv[1]; complete -C $argv[2]' "$comp" "$1" | cut -f1 | sort -u
}
n=0
failed=0
expect() { # DESCRIPTION EXPECTED LINE
        local got
        got=$(complete "$3" | paste -sd' ' -)
        n=$((n + 1))
        if [[ $got == "$2" ]]; then
                echo "ok $n - $1"
        else
                echo "not ok $n - $1: got '$got', expected '$2'"
                failed=1
        fi
}
offers() { # DESCRIPTION WORD LINE
        local got
        got=$(complete "$3")
        n=$((n + 1))
        if grep -qx -- "$2" <<<"$got"; then
                echo "ok $n - $1"
        else
                echo "not ok $n - $1: '$2' not in '$(paste -sd' ' - <<<"$got")'"
                failed=1
        fi
}

commands=$(awk '$1 == "command" {print $2}' "$table" | sort | paste -sd' ' -)
echo "1..14"
expect "sockferry rela<TAB> gives relay" relay "sockferry rela"
expect "sockferry relo<TAB> gives reload" reload "sockferry relo"
expect "sockferry k<TAB> gives keygen" keygen "sockferry k"
expect "sockferry --v<TAB> gives --version" --version "sockferry --v"
expect "relay --c<TAB> gives --config" --config "sockferry relay --c"
expect "run --no<TAB> gives --no-preload" --no-preload "sockferry run --no"
expect "relay -c <TAB> completes files" "$tmp/host.conf" "sockferry relay -c $tmp/h"
expect "-F ...,aut<TAB> offers the key" "d:unix:/a=tcp:h:1,auth=" "sockferry relay -F d:unix:/a=tcp:h:1,aut"
expect "stats --format <TAB> offers the formats" "json prometheus text" "sockferry stats --format "
expect "keygen --f<TAB> gives --force" --force "sockferry keygen --f"
expect "help rela<TAB> gives relay" relay "sockferry help rela"
offers "run -- ech<TAB> offers echo" echo "sockferry run -c x -- ech"
expect "check --p<TAB> gives --pid" --pid "sockferry check --p"
expect "sockferry <TAB> offers every command of the table" "$commands" "sockferry "
exit $failed
