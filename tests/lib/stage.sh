# shellcheck shell=bash
# The one library of the CI stages (tests/ci/*.sh) and of tests/ci.sh, sourced (bash):
#
#   . "$(dirname "${BASH_SOURCE[0]}")/../lib/stage.sh" NAME
#
# A stage exits 0 (passed), 77 (skipped: it cannot run here, and says why) or 1 (failed, and
# says what), the convention of meson's exitcode protocol; any other status it would end with (a
# command that failed under set -e, a signal) is reported and turned into 1, so that a skip is
# always a decision, never an accident.
#
#   say TEXT...        a line of progress: "NAME: TEXT"
#   fail TEXT...       ends the stage: failed, TEXT the reason
#   skip TEXT...       ends the stage: skipped, TEXT the reason
#   needs_root         skips the stage unless it runs as root
#   cleanup COMMAND    COMMAND (one string, run with eval) runs when the stage ends, however it
#                      ends; the last one registered runs first, each whatever the others did;
#                      $stage_status is then the status the stage ends with
#   stage_seconds      seconds since the stage began
#   free_port          a TCP port free on 127.0.0.1 now
#   stage_reason=TEXT  what the closing line says after PASS too (fail and skip set it)
#
# When the stage ends, the cleanups run, then one closing line says how it ended and its time:
# "NAME: PASS (12 s)", "NAME: SKIP: reason (0 s)", "NAME: FAIL: reason (80 s)".
stage_name=${1:?stage.sh: the stage name}
stage_t0=$SECONDS
stage_reason=
stage_cleanups=()

say() { printf '%s: %s\n' "$stage_name" "$*"; }
# In a subshell (a pipeline, $(...)) the reason is said at once: the closing line, printed by
# the stage's own shell, sees only the status.
fail() {
        stage_reason=$*
        ((BASH_SUBSHELL == 0)) || say "FAIL: $*" >&2
        exit 1
}
skip() {
        stage_reason=$*
        ((BASH_SUBSHELL == 0)) || say "SKIP: $*" >&2
        exit 77
}
needs_root() { [ "$(id -u)" = 0 ] || skip "needs root${1:+ ($1)}"; }
cleanup() { stage_cleanups+=("$1"); }
stage_seconds() { echo $((SECONDS - stage_t0)); }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

stage_end() {
        local rc=$? i
        trap - EXIT INT TERM ERR
        set +e
        stage_status=$rc # for the cleanups
        for ((i = ${#stage_cleanups[@]} - 1; i >= 0; i--)); do
                eval "${stage_cleanups[i]}" || say "cleanup: '${stage_cleanups[i]}' exited $?"
        done
        case $rc in
        0) say "PASS${stage_reason:+: $stage_reason} ($(stage_seconds) s)" ;;
        77) say "SKIP: ${stage_reason:-no reason given} ($(stage_seconds) s)" ;;
        *)
                say "FAIL: ${stage_reason:-exit status $rc} ($(stage_seconds) s)"
                rc=1
                ;;
        esac
        exit "$rc"
}
trap stage_end EXIT
# Under set -e, the command that ended the stage.
trap '[[ $- != *e* || -n $stage_reason ]] || stage_reason="line $LINENO: $BASH_COMMAND exited $?"' ERR
trap 'stage_reason="interrupted (SIGINT)"; exit 1' INT
trap 'stage_reason="terminated (SIGTERM)"; exit 1' TERM
