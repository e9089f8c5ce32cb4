#!/bin/zsh -f
# The zsh completion (_sockferry), in a real interactive zsh on a pseudo-terminal (zsh/zpty):
# compinit finds it in fpath, a line is typed and <TAB> pressed, and what the completion
# offers is read from a compadd that records its matches.
# Usage: test_completion_zsh.zsh COMPLETION_FILE TABLE     (TAP output; TABLE:
#        packaging/completions/sockferry.cli, the commands it must offer)
zmodload zsh/zpty || { print "1..0 # SKIP zsh has no zsh/zpty module"; exit 0 }
comp=$1 table=$2
tmp=$(mktemp -d)
trap 'zpty -d z 2>/dev/null; rm -rf $tmp' EXIT
mkdir $tmp/fpath $tmp/dir
cp $comp $tmp/fpath/_sockferry
touch $tmp/dir/host.conf

# One interactive zsh for every case. Each set-up line runs before the next is sent: zsh may
# drop what is typed while it is busy.
log=$tmp/log
: >$log
# What zsh writes to the terminal is read and dropped: a full terminal would stop it.
drain() { local junk; while zpty -r -t z junk; do :; done }
# step LINE NAME: runs LINE, waits until it ran (NAME: unique, for the log).
step() {
        local i
        zpty -w z "$1; print -r -- '<ready $2>' >>$log"
        for i in {1..600}; do drain; grep -q "<ready $2>" $log && return 0; sleep 0.05; done
        print -u2 "zsh did not run: $1"
        exit 1
}
zpty z zsh -f -i
step "PS1=''; fpath=($tmp/fpath \$fpath); autoload -U compinit; compinit -u -D" compinit
step 'compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi;
        local -a __m; builtin compadd -A __m "$@"; (( $#__m )) && print -rl -- "${__m[@]}" >>$__sf_out;
        builtin compadd "$@"; }' compadd
step "_sf_done() { print -r -- '<done>' >>\$__sf_out; }; bindkey '^I' complete-word" done

# complete N LINE: the matches offered for the last word of LINE, sorted, one a line (N: the
# case's number).
complete() {
        local out=$tmp/out.$1 i
        # comppostfuncs is emptied after each completion.
        step "__sf_out=$out; comppostfuncs=(_sf_done)" "case $1"
        shift
        zpty -n -w z "$1"$'\t'
        for i in {1..600}; do drain; grep -q '<done>' $out 2>/dev/null && break; sleep 0.05; done
        # ^U empties the line for the next case.
        zpty -n -w z $'\C-u'
        grep -q '<done>' $out || { print -u2 "no completion ran for: $1"; return 1 }
        grep -v '^<' $out | sort -u
}

n=0 failed=0
# expect DESCRIPTION EXPECTED LINE: EXPECTED is the whole list, words separated by spaces.
expect() {
        local got
        n=$((n + 1))
        got=$(complete $n $3 | paste -sd' ' -)
        if [[ $got == $2 ]]; then
                print "ok $n - $1"
        else
                print "not ok $n - $1: got '$got', expected '$2'"
                failed=1
        fi
}
# offers DESCRIPTION WORD LINE: WORD is among what is offered.
offers() {
        local got
        n=$((n + 1))
        got=$(complete $n $3)
        if print -r -- $got | grep -qx -- $2; then
                print "ok $n - $1"
        else
                print "not ok $n - $1: '$2' not in '${got//$'\n'/ }'"
                failed=1
        fi
}

table_commands=$(awk '$1 == "command" {print $2}' $table | sort | paste -sd' ' -)
print "1..14"
expect "sockferry rela<TAB> gives relay" relay "sockferry rela"
expect "sockferry relo<TAB> gives reload" reload "sockferry relo"
expect "sockferry k<TAB> gives keygen" keygen "sockferry k"
expect "sockferry --v<TAB> gives --version" --version "sockferry --v"
expect "relay --c<TAB> gives --config" --config "sockferry relay --c"
expect "run --no<TAB> gives --no-preload" --no-preload "sockferry run --no"
expect "relay -c <TAB> completes files" host.conf "sockferry relay -c $tmp/dir/h"
expect "-F ...,aut<TAB> offers the key" auth "sockferry relay -F d:unix:/a=tcp:h:1,aut"
expect "stats --format <TAB> offers the formats" "json prometheus text" "sockferry stats --format "
expect "keygen --f<TAB> gives --force" --force "sockferry keygen --f"
expect "help rela<TAB> gives relay" relay "sockferry help rela"
offers "run -- ech<TAB> offers echo" echo "sockferry run -c x -- ech"
expect "check --p<TAB> gives --pid" --pid "sockferry check --p"
expect "sockferry <TAB> offers every command of the table" $table_commands "sockferry "
exit $failed
