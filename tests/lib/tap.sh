# The TAP output of the shell tests, as tests/lib/sftap.py prints it for the Python ones:
# test points numbered as they come, diagnostics as comments, the plan at the end.
#   . tests/lib/tap.sh
#   tap_ok DESC            a test point that passed
#   tap_not_ok DESC [DIAG] one that failed; DIAG (any lines) is printed as comments
#   tap_skip DESC REASON   one that cannot run here, and why
#   tap_skip_all REASON    the whole program cannot run here: exits 0
#   tap_finish             prints the plan; returns 1 when a test point failed
# POSIX sh (check_hardening.sh runs under dash).
tap_n=0
tap_failed=0

tap_ok() {
        tap_n=$((tap_n + 1))
        printf 'ok %d - %s\n' "$tap_n" "$1"
}

tap_not_ok() {
        tap_n=$((tap_n + 1))
        tap_failed=$((tap_failed + 1))
        printf 'not ok %d - %s\n' "$tap_n" "$1"
        if [ -n "${2:-}" ]; then
                printf '%s\n' "$2" | sed 's/^/# /'
        fi
        return 0
}

tap_skip() {
        tap_n=$((tap_n + 1))
        printf 'ok %d - %s # SKIP %s\n' "$tap_n" "$1" "$2"
}

tap_skip_all() {
        printf '1..0 # SKIP %s\n' "$1"
        exit 0
}

tap_finish() {
        printf '1..%d\n' "$tap_n"
        [ "$tap_failed" -eq 0 ]
}
