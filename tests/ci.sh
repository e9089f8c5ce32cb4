#!/bin/bash
# The whole test suite, as CI runs it (as root on a fresh Debian 12; with sudo otherwise):
# install the dependencies, build with warnings as errors and hardening, then run every test
# of every build and every stage (tests/ci/*.sh) in lanes that overlap, and end with the
# slowest tests, each job's time and one line: "N passed, N failed, N skipped".
#
# Lanes (after packaging/install-deps.sh base, the main build, build-ci, and the ASan+UBSan
# build, build-asan; the rest of the packages installs beside them, and the jobs that need it
# wait for it):
#   e2e       the main build's tests but the valgrind twins (unit, e2e, ops, docs, packaging,
#             hardening, the 60 s soak), then the container engines (tests/ci/containers.sh)
#   valgrind  the main build's valgrind twins (every relay of 7 e2e suites under memcheck),
#             then the portable build's tests (tests/ci/portable.sh)
#   asan      the ASan+UBSan build's tests, then the libuv 1.50 build's (tests/ci/libuv150.sh)
#   builds    the portable (tests/ci/portable.sh) and libuv 1.50
#             (tests/ci/libuv150.sh) builds, then meson install and dist
#             (tests/ci/install-dist.sh), the RPM spec, the .deb (tests/ci/deb-install.sh),
#             the release (tests/ci/release.sh)
#   cross     the CPU-bound side jobs: the static binaries and their chroots
#             (tests/ci/static-chroot.sh), sockferry.exe and Wine (tests/ci/windows.sh), then
#             attach's presets from that sockferry.exe (tests/ci/containers-presets.sh wine)
#   cross2    the macOS cross-build (tests/ci/macos-cross.sh), fuzz (tests/fuzz/run.sh)
#   base      the containers job's Debian base image (tests/ci/base-image.sh), then its images
#             (tests/ci/images.sh) in a dockerd whose data root that job's engine starts on
# The previous release (tests/e2e/test_link.py's interop tests) is built once, beside the main
# build, and every test run gets it as SF_PREV_SOCKFERRY.
# Every test run has a network namespace of its own (unshare --net): runs that overlap never
# meet on an address, a port or an interface, whoever else tests on this machine. Each runs
# $SF_TEST_PROCESSES (2) tests at a time. The build and cross lanes run under nice: the tests,
# which wait on timeouts, get the CPU first. Every job writes its own log
# (build-logs/NAME.log), printed whole when it ends; a job that fails fails the run, and the jobs
# that needed what it made are not run (said as such). build-logs/stages.tsv keeps each job's
# lane, start, end and status.
#
# Coverage: every test and check of the former sequential run still runs, but:
#   * the libuv 1.50 build runs what starts a sandboxed relay (the list and the reasons are in
#     tests/ci/libuv150.sh), not the whole suite: the rest does not depend on which libuv runs
#     under the sandbox, and the main build (libuv 1.44) runs all of it;
#   * the ASan+UBSan build runs no packaging suite (completions, units, manifests, example
#     configuration: files read by other programs, no sockferry code under the sanitizers
#     that the e2e suites do not run; the main build runs it), and a 20 s soak instead of 60 s
#     (SF_SOAK_SECONDS: RSS is not judged under ASan; leaks, counters and descriptors are,
#     and the main build's soak runs the full minute), and 20 000 sequential connections through
#     an authenticated pair instead of 100 000 (SF_CHURN_N: the same reasons; the descriptors are
#     still judged after them, ASan's leak check at exit sees every connection's memory);
#   * the previous release is built once (tests/lib/build-prev-release.sh), not once per
#     build directory: it is the same program every time;
#   * the hardening of the installed binaries is checked on install-dist's staging tree,
#     not on a second meson install.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
. tests/lib/stage.sh ci
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export SF_TEST_PROCESSES=${SF_TEST_PROCESSES:-2}
# ccache (installed by install-deps.sh; meson uses it by itself): paths taken relative to the
# build directory and the directory not hashed, so that a build of the same sources with the
# same options elsewhere (the release tarball's, install-dist.sh) hits.
export CCACHE_BASEDIR=/ CCACHE_NOHASHDIR=true
logs=$src/build-logs
rm -rf "$logs"
mkdir -p "$logs"
: >"$logs/stages.tsv"
# Each lane a process group of its own (set -m), stopped whole if the run is.
set -m
lanes=()
# The data root of the base lane's dockerd (lane_base), for the containers job's: removed once
# the lanes have ended (this runs after the cleanup below), whether that job ran or not.
images_root=/var/lib/sockferry-ci-docker.images.$$
cleanup '$SUDO rm -rf "$images_root"'
cleanup 'for p in "${lanes[@]}"; do kill -- "-$p" 2>/dev/null; done; wait'

# job LANE NAME COMMAND...: runs the stage COMMAND (0 passed, 77 skipped, else failed) with
# its output in $logs/NAME.log and the CPU time it took (bash's times: its processes, once
# they ended; not what a daemon such as dockerd did for it) in $logs/NAME.times, records it
# and prints its log when it ends. Returns 0 unless it failed.
job() {
        local lane=$1 name=$2 t0=$SECONDS rc=0
        shift 2
        echo "$t0" >"$logs/$name.start"
        (
                rc=0
                "$@" || rc=$?
                times >"$logs/$name.times"
                exit $rc
        ) >"$logs/$name.log" 2>&1 </dev/null || rc=$?
        done_job "$lane" "$name" "$t0" "$rc"
}
# done_job LANE NAME START STATUS: the record and the printed log of a job (status -1: not run).
done_job() {
        local lane=$1 name=$2 t0=$3 rc=$4 word
        case $rc in
        0) word=PASS ;;
        77) word=SKIP ;;
        -1) word="NOT RUN" ;;
        *) word=FAIL ;;
        esac
        printf '%s\t%s\t%d\t%d\t%s\n' "$name" "$lane" "$t0" "$SECONDS" "$word" >>"$logs/stages.tsv"
        {
                flock 9
                printf '\n──── %s: %s (%s lane, %d s, from %d s to %d s) ────\n' "$name" "$word" "$lane" \
                        $((SECONDS - t0)) "$t0" "$SECONDS"
                cat "$logs/$name.log"
                printf '──── end of %s ────\n' "$name"
        } 9>"$logs/.print"
        echo "$rc" >"$logs/$name.rc"
        [ "$rc" = 0 ] || [ "$rc" = 77 ]
}
# ended NAME...: waits until the jobs NAME have ended; 0 if they all passed, 77 if one was
# skipped and none failed, 1 if one failed.
ended() {
        local n rc worst=0
        for n in "$@"; do
                while [ ! -f "$logs/$n.rc" ]; do sleep 2; done
                rc=$(cat "$logs/$n.rc")
                case $rc in
                0) ;;
                77) [ $worst = 1 ] || worst=77 ;;
                *) worst=1 ;;
                esac
        done
        return $worst
}
# after NAME... -- LANE JOB COMMAND...: the job, once the jobs NAME passed; skipped if one of
# them was, not run if one failed.
after() {
        local deps=() rc=0
        while [ "$1" != -- ]; do deps+=("$1"); shift; done
        shift
        ended "${deps[@]}" || rc=$?
        case $rc in
        0) job "$@" ;;
        77)
                echo "skipped: it needs ${deps[*]}, and one of them was skipped" >"$logs/$2.log"
                done_job "$1" "$2" "$SECONDS" 77
                ;;
        *)
                echo "not run: it needs ${deps[*]}, and one of them failed" >"$logs/$2.log"
                done_job "$1" "$2" "$SECONDS" -1
                ;;
        esac
}
# in_netns COMMAND...: COMMAND as root in a network namespace of its own, its loopback up.
in_netns() { $SUDO ${SUDO:+-E} unshare --net -- sh -c 'ip link set lo up && exec "$@"' in_netns "$@"; }
# tests BUILD LOGBASE [meson test arguments...]: a test run of BUILD in a namespace of its own;
# its log (BUILD/meson-logs/LOGBASE.json) counts in the closing line.
tests() {
        local build=$1 logbase=$2
        shift 2
        in_netns meson test -C "$build" --no-rebuild --print-errorlogs --num-processes "$SF_TEST_PROCESSES" \
                --logbase "$logbase" "$@"
}
# The ASan+UBSan build's tests: no packaging suite, a short soak (the list above says why).
tests_asan() (
        export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
        export SF_BIG_MIB=16 SF_SOAK_SECONDS=20 SF_WAIT_SCALE=2 SF_CHURN_N=20000
        tests "$src/build-asan" testlog --timeout-multiplier 3 --no-suite preload --no-suite packaging
)
# with_prev: SF_PREV_SOCKFERRY for the tests of this lane, once the previous release is built
# (none when it could not be: the interop tests then say so).
with_prev() {
        ended prev || true
        SF_PREV_SOCKFERRY=$(cat "$logs/prev.path" 2>/dev/null || true)
        if [ -n "$SF_PREV_SOCKFERRY" ]; then export SF_PREV_SOCKFERRY; else unset SF_PREV_SOCKFERRY; fi
}
prev_release() { tests/lib/build-prev-release.sh "$src/build-prev" >"$logs/prev.path"; }
build() { # DIR meson-setup-options...: a fresh build directory, built
        local dir=$1
        shift
        rm -rf "$dir"
        meson setup "$dir" "$@" && ninja -C "$dir"
}
# The lanes that only build and check get the CPU after the tests, which wait on timeouts.
niced() { renice -n 10 -p "$BASHPID" >/dev/null; }

# ---- packages, the main build and the previous release ----
# What the main build and its tests need first; the rest (cross-builds, packaging, fuzzing,
# Wine) while they run.
job setup packages $SUDO packaging/install-deps.sh --fast base || fail "packaging/install-deps.sh (its log above)"
(set +e; job setup packages-rest $SUDO packaging/install-deps.sh --fast) &
lanes+=($!)
(set +e; job setup prev prev_release) &
lanes+=($!)
job setup build-ci build "$src/build-ci" -Dwerror=true -Dbuildtype=debugoptimized -Dtest_hooks=true || fail "the main build (its log above)"
# The ASan+UBSan build before the lanes too: its tests are the longest job of the run, and built
# under nice beside the test lanes it ended at 600-680 s with a cold ccache (137 CPU-s: about
# 70 s alone on 2 cores). A failure leaves its tests not run; the rest goes on.
job setup build-asan build "$src/build-asan" \
        -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dpreload=disabled -Dtest_hooks=true || true

# ---- the lanes ----
lane_e2e() {
        with_prev
        job e2e tests-main tests "$src/build-ci" testlog --no-suite valgrind
        # The container engine: the images, compose, the sidecar, attach (one dockerd), then
        # podman. Here, not in the builds lane: it waits on engines more than it computes, it
        # times container restarts (no nice), and behind the builds it was the run's last 8 minutes.
        # Its Debian base image and its images come from the base lane (containers-images.sh
        # makes what that lane did not).
        local images=()
        ended base-image images || true
        [ "$(cat "$logs/images.rc")" != 0 ] || images=(SF_CI_DOCKER_ROOT="$images_root")
        after packages-rest -- e2e containers env SF_CI_BASE_TAR="$src/build-base/base.tar" "${images[@]}" \
                $SUDO ${SUDO:+-E} tests/ci/containers.sh "$src/build-ci"
}
lane_valgrind() {
        with_prev
        job valgrind tests-valgrind tests "$src/build-ci" valgrind --suite valgrind
        after build-portable -- valgrind tests-portable in_netns tests/ci/portable.sh "$src/build-portable" test
}
lane_asan() {
        with_prev
        after build-asan -- asan tests-asan tests_asan
        # Here rather than after the containers job, which ends later (the run's end, then).
        after build-libuv150 -- asan tests-libuv150 in_netns tests/ci/libuv150.sh "$src/build-libuv150" test
}
lane_builds() {
        niced
        # The portable build before libuv 1.50's: its tests (the valgrind lane's) are the longer.
        job builds build-portable tests/ci/portable.sh "$src/build-portable" build
        after packages-rest -- builds build-libuv150 tests/ci/libuv150.sh "$src/build-libuv150" build
        job builds install-dist tests/ci/install-dist.sh "$src/build-ci"
        after packages-rest -- builds rpm-spec sh -c 'rpmspec -P packaging/rpm/sockferry.spec >/dev/null &&
                echo "packaging/rpm/sockferry.spec parses"'
        after packages-rest static -- builds deb env SF_STATIC_DIR="$src/build-static" $SUDO ${SUDO:+-E} \
                tests/ci/deb-install.sh "$src/build-deb"
        # The release with the builds the other stages made (one that was skipped left none:
        # release.sh then makes its own).
        ended deb macos windows || true
        local release_env=(SF_RELEASE_STATIC="$src/build-static")
        [ "$(cat "$logs/deb.rc")" != 0 ] || release_env+=(SF_RELEASE_DEB="$(ls "$src"/build-deb/sockferry_*.deb)")
        [ ! -f "$src/build-macos/sockferry-universal" ] || release_env+=(SF_RELEASE_MACOS="$src/build-macos")
        [ ! -f "$src/build-windows/sockferry.exe" ] || release_env+=(SF_RELEASE_WINDOWS="$src/build-windows")
        after static -- builds release env "${release_env[@]}" tests/ci/release.sh "$src/build-release"
}
lane_cross() {
        niced
        # The static binaries (-Dstatic=true) for x86_64 and aarch64 (the .deb takes them), each
        # in an empty chroot.
        after packages-rest -- cross static packaging/linux/build-static.sh "$src/build-static"
        after static -- cross static-chroot $SUDO tests/ci/static-chroot.sh "$src/build-static"
        # Windows host side without Windows: sockferry.exe cross-built (it downloads: not in a
        # namespace of its own; its end-to-end test makes one with addresses no other test
        # uses), kept for the release, then under Wine.
        after packages-rest -- cross windows env SF_WINDOWS_OUT="$src/build-windows" $SUDO ${SUDO:+-E} \
                tests/ci/windows.sh "$src/build-ci"
        # attach's presets from a Windows host: that sockferry.exe under Wine into a container of
        # a dockerd of its own (the containers job installed the engine).
        after windows containers -- cross presets-windows env SF_WINDOWS_EXE="$src/build-windows/sockferry.exe" \
                $SUDO ${SUDO:+-E} tests/ci/containers-presets.sh "$src/build-ci" wine
}
lane_cross2() {
        niced
        # macOS host side without a Mac: Mach-O cross-build, kept for the release.
        after packages-rest -- cross2 macos tests/ci/macos-cross.sh "$src/build-macos"
        # libFuzzer smoke run of every parser that takes outside input, from the committed corpora.
        after packages-rest -- cross2 fuzz tests/fuzz/run.sh 10 "$src/build-fuzz"
}
# The containers job's Debian base image (mmdebstrap: ~70 CPU-s, 280 s on the loaded machine
# when that job made it) and its images (400 s of apt-get and two builds of the tree in dockerd,
# the run's last minutes when that job made them), in a lane of its own: ready before that job,
# and no other job waits behind it. The images stay in a dockerd data root that the containers
# job's engine starts on.
lane_base() {
        niced
        after packages-rest -- base base-image $SUDO tests/ci/base-image.sh "$src/build-base/base.tar"
        after base-image -- base images env SF_CI_DOCKER_ROOT="$images_root" SF_CI_DOCKER_ROOT_KEEP=1 \
                $SUDO ${SUDO:+-E} tests/ci/images.sh "$src/build-base/base.tar"
}
# A lane runs all of its jobs whatever becomes of each (set +e): the jobs of other lanes may
# wait for them.
for lane in lane_e2e lane_valgrind lane_asan lane_builds lane_cross lane_cross2 lane_base; do
        (set +e; $lane) &
        lanes+=($!)
done
# A line a minute while the lanes run: the jobs running, and for how long.
heartbeat() {
        local s n running
        while sleep 60; do
                running=""
                for s in "$logs"/*.start; do
                        n=$(basename "$s" .start)
                        [ -f "$logs/$n.rc" ] || running+=" $n ($((SECONDS - $(cat "$s"))) s)"
                done
                echo "ci: at $SECONDS s, running:$running"
        done
}
heartbeat &
beat=$!
disown "$beat"
wait "${lanes[@]}" || true
kill -- "-$beat"
lanes=()

# ---- the end: the slowest tests, each job's time, one closing line ----
rc=0
python3 - "$logs" "$SECONDS" build-ci build-asan build-libuv150 build-portable >"$logs/summary.txt" <<'PY' || rc=$?
import glob, json, re, sys
logs, total, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
tests = []
for b in builds:
    for path in sorted(glob.glob(b + "/meson-logs/*.json")):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                tests.append((r["duration"], b, r["name"], r["result"]))
print("\nThe 10 slowest tests:")
for d, b, name, res in sorted(tests, reverse=True)[:10]:
    print("  %7.1f s  %-16s %-30s %s" % (d, b, name, res))
jobs = [l.rstrip("\n").split("\t") for l in open(logs + "/stages.tsv") if l.strip()]
def cpu(name):
    """A job's CPU seconds: the user and system times of its shell and their children."""
    try:
        text = open("%s/%s.times" % (logs, name)).read()
    except OSError:
        return 0.0
    return sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", text))
print("\nEach job: lane, start and end (s since the run began), seconds, CPU seconds:")
for name, lane, t0, t1, word in sorted(jobs, key=lambda j: (int(j[2]), j[0])):
    print("  %-16s %-9s %5s %5s %5d s %6.0f s  %s" % (name, lane, t0, t1, int(t1) - int(t0), cpu(name), word))
all_cpu = sum(cpu(j[0]) for j in jobs)
print("  the run: %d s; its jobs' CPU: %.0f s (%.2f cores busy on average)" % (total, all_cpu, all_cpu / max(total, 1)))
passed = sum(1 for t in tests if t[3] in ("OK", "EXPECTEDFAIL"))
skipped = sum(1 for t in tests if t[3] == "SKIP")
failed = len(tests) - passed - skipped
# The stages count beside the tests. A test run counts by its tests (and once more when it
# failed: a run can fail with no failed test to show, a timeout of the whole run); a build, the
# packages and the previous release only when they did not pass.
for name, lane, t0, t1, word in jobs:
    if word == "PASS" and (name.startswith(("build-", "tests-", "packages")) or name == "prev"):
        continue
    if word == "PASS":
        passed += 1
    elif word == "SKIP":
        skipped += 1
    else:
        failed += 1
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed else 0)
PY
cat "$logs/summary.txt"
# The closing line: the count again, and the run's time.
# shellcheck disable=SC2034 # stage.sh says it
stage_reason=$(tail -n 1 "$logs/summary.txt")
[ "$rc" = 0 ] || exit 1
