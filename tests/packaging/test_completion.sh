#!/bin/bash
# The bash completion, sourced into a plain bash (no bash-completion package needed).
# Usage: test_completion.sh COMPLETION_FILE TABLE     (TAP output; TABLE:
#        packaging/completions/sockferry.cli, the commands it must offer)
set -u
# shellcheck source=tests/lib/tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"
# shellcheck source=/dev/null
source "$1" || { tap_not_ok "$1 sources"; tap_finish; exit 1; }

# complete WORDS... : sets COMPREPLY for the last word, as bash would on <TAB>.
complete_words() {
        COMP_WORDS=("$@")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        COMPREPLY=()
        _sockferry sockferry "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
}
# expect DESCRIPTION EXPECTED_REPLY -- WORDS...
expect() {
        local desc=$1 want=$2
        shift 3
        complete_words "$@"
        local got="${COMPREPLY[*]}"
        if [[ $got == "$want" ]]; then
                tap_ok "$desc"
        else
                tap_not_ok "$desc" "got '$got', expected '$want'"
        fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/host.conf" "$tmp/hosts"

commands=$(awk '$1 == "command" {print $2}' "$2" | sort | paste -sd' ' -)
expect "sockferry rela<TAB> gives relay" "relay" -- sockferry rela
expect "sockferry relo<TAB> gives reload" "reload" -- sockferry relo
expect "sockferry k<TAB> gives keygen" "keygen" -- sockferry k
expect "sockferry --v<TAB> gives --version" "--version" -- sockferry --v
expect "relay --c<TAB> gives --config" "--config" -- sockferry relay --c
expect "run --no<TAB> gives --no-preload" "--no-preload" -- sockferry run --no
expect "relay -c <TAB> completes files" "$tmp/host.conf" -- sockferry relay -c "$tmp/host.c"
expect "-F is free text until a ','" "" -- sockferry relay -F dock
expect "-F ...,auth<TAB> offers the key" "d:unix:/a=tcp:h:1,auth=" -- sockferry relay -F "d:unix:/a=tcp:h:1,aut"
expect "stats --format <TAB>" "json" -- sockferry stats --format j
expect "keygen --f<TAB> gives --force" "--force" -- sockferry keygen --f
expect "help rela<TAB> gives relay" "relay" -- sockferry help rela
expect "check --p<TAB> gives --pid" "--pid" -- sockferry check --p
complete_words sockferry run -c x -- ech
if [[ " ${COMPREPLY[*]} " == *" echo "* ]]; then tap_ok "run -- ech<TAB> offers echo"; else tap_not_ok "run -- ech<TAB> offers echo" "got '${COMPREPLY[*]}'"; fi
complete_words sockferry ""
got=$(printf '%s\n' "${COMPREPLY[@]}" | sort | paste -sd' ' -)
if [[ $got == "$commands" ]]; then tap_ok "sockferry <TAB> offers every command of the table"; else tap_not_ok "sockferry <TAB> offers every command of the table" "got '$got', the table has '$commands'"; fi
tap_finish
