#!/bin/sh
# Runs every libFuzzer target for SECONDS each, starting from the committed seed corpora, and
# prints the executions per target. A CI smoke test: tests/fuzz/run.sh 30
#
#   tests/fuzz/run.sh SECONDS [BUILDDIR]
#
# BUILDDIR (default build-fuzz in the source tree) is configured with CC=clang -Dfuzz=true if
# it does not exist yet, and its fuzz targets are rebuilt. New corpus entries go to a scratch directory, never into
# the committed corpora; crash inputs go to BUILDDIR/fuzz-artifacts/. Exits 1 if any target
# failed. Extra libFuzzer flags can be passed in FUZZ_FLAGS.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ] || ! [ "$1" -gt 0 ] 2>/dev/null; then
        echo "usage: $0 SECONDS [BUILDDIR]" >&2
        exit 64
fi
seconds=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${2:-$root/build-fuzz}

if [ ! -f "$build/build.ninja" ]; then
        CC=clang meson setup "$build" "$root" -Dfuzz=true >/dev/null
fi
targets="fuzz_handshake fuzz_endpoint fuzz_conf fuzz_spec fuzz_control fuzz_preload_map fuzz_mux fuzz_log_escape"
# Only the fuzz targets: the rest of the tree is not what this script is about.
ninja -C "$build" $(for t in $targets; do printf 'tests/fuzz/%s ' "$t"; done) >/dev/null

artifacts=$build/fuzz-artifacts
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/sockferry-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

status=0
summary=""
for target in $targets; do
        bin=$build/tests/fuzz/$target
        flags="-max_total_time=$seconds -timeout=10 -print_final_stats=1 -artifact_prefix=$artifacts/$target-"
        case $target in
        fuzz_handshake) flags="$flags -max_len=512" ;;
        fuzz_endpoint) flags="$flags -max_len=400" ;;
        # Every rejected configuration logs its errors: keep stderr of the target closed.
        fuzz_conf) flags="$flags -max_len=4096 -close_fd_mask=2 -dict=$here/conf.dict" ;;
        fuzz_spec) flags="$flags -max_len=1024 -close_fd_mask=2 -dict=$here/conf.dict" ;;
        fuzz_control) flags="$flags -max_len=256" ;;
        # Rejected map entries are reported on stderr, as the library does.
        fuzz_preload_map) flags="$flags -max_len=2048 -close_fd_mask=2" ;;
        # A few dozen frames: enough for a stream's life and the windows' edges.
        fuzz_mux) flags="$flags -max_len=8192 -dict=$here/mux.dict" ;;
        # A line of the far end's stderr and more (attach cuts at 1 KiB).
        fuzz_log_escape) flags="$flags -max_len=2048" ;;
        esac
        mkdir -p "$work/$target"
        log=$work/$target.log
        echo "== $target: ${seconds}s"
        # shellcheck disable=SC2086 # flags are words on purpose
        if "$bin" $flags ${FUZZ_FLAGS:-} "$work/$target" "$here/corpus/$target" >"$log" 2>&1; then
                result=ok
        else
                result=FAILED
                status=1
                tail -n 60 "$log" >&2
        fi
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
        line=$(printf '%-16s %-6s %12s executions  %6s edges' "$target" "$result" "${execs:-?}" "${cov:-?}")
        echo "$line"
        summary="$summary$line
"
done

echo
printf '%s' "$summary"
exit $status
