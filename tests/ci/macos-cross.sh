#!/bin/bash
# CI stage: the macOS host side without a Mac (issue 14).
#   * packaging/macos/build.sh cross-builds sockferry for x86_64 and arm64 into OUTDIR (default:
#     a temporary directory; CI keeps it for packaging/release.sh); both must be Mach-O
#     executables of their architecture, every undefined symbol bound to a library the binary
#     loads, libuv/libsodium/inih linked in (build.sh fails otherwise; this prints what it
#     found); the universal file holds exactly those two;
#   * the LaunchAgent plist (plistlib) and the Homebrew formula (ruby -c), the same checks as
#     meson test --suite packaging.
# Any failure fails the stage: a tree whose sources do not build for macOS fails here.
# Prints one closing line: "macos-cross: PASS ..." or "macos-cross: FAIL ..." (tests/lib/stage.sh).
set -uo pipefail

# Usage: tests/ci/macos-cross.sh [OUTDIR]
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$root/tests/lib/stage.sh" macos-cross
if [ -n "${1:-}" ]; then
        mkdir -p "$1"
        out=$(cd "$1" && pwd)
else
        out=$(mktemp -d /tmp/sockferry-macos.XXXXXX)
        cleanup 'rm -rf "$out"'
fi

start=$(date +%s)
"$root/packaging/macos/build.sh" --source "$root" "$out" || fail "packaging/macos/build.sh exited $? (its output is above)"
elapsed=$(($(date +%s) - start))

for a in x86_64 arm64; do
        exe=$out/sockferry-$a
        [ -f "$exe" ] || fail "$exe missing"
        desc=$(file -b "$exe")
        case $desc in
        "Mach-O 64-bit $a executable"*NOUNDEFS*) ;;
        *) fail "$exe: $desc" ;;
        esac
        undefined=$(llvm-nm -m -u "$exe") || fail "llvm-nm $exe"
        n_undef=$(grep -c . <<<"$undefined")
        libs=$(sed -n 's/.* (from \(.*\))$/\1/p' <<<"$undefined" | sort -u | paste -sd, -)
        unbound=$(grep -vc ' (from ' <<<"$undefined")
        dylibs=$(llvm-objdump --macho --dylibs-used "$exe" | sed -n 's/^[[:space:]]*\([^ ]*\) (compat.*/\1/p' | paste -sd, -)
        minos=$(llvm-objdump --macho --private-headers "$exe" | awk '$1 == "minos" {print $2; exit}')
        say "sockferry-$a: $(stat -c %s "$exe") bytes; $desc; macOS >= $minos; loads $dylibs;" \
                "$n_undef undefined symbols, all bound ($libs), $unbound unbound"
        [ "$unbound" = 0 ] || fail "$exe: $unbound undefined symbols bound to no library"
        [ "$dylibs" = /usr/lib/libSystem.B.dylib ] || fail "$exe loads $dylibs: only libSystem expected (the rest is static)"
done
# Apple silicon runs no arm64 code without a signature; zig's linker signs ad hoc.
llvm-objdump --macho --private-headers "$out/sockferry-arm64" | grep -q LC_CODE_SIGNATURE ||
        fail "sockferry-arm64 has no code signature (LC_CODE_SIGNATURE)"
# The universal file: its two slices are the two files above, byte for byte.
lipo=$(command -v llvm-lipo || command -v llvm-lipo-14) || fail "llvm-lipo not found (Debian's llvm package)"
archs=$("$lipo" -archs "$out/sockferry-universal" | xargs) || fail "$lipo -archs sockferry-universal"
[ "$archs" = "x86_64 arm64" ] || fail "sockferry-universal holds '$archs', expected x86_64 arm64"
for a in x86_64 arm64; do
        "$lipo" "$out/sockferry-universal" -thin "$a" -output "$out/.slice-$a" || fail "$lipo -thin $a"
        cmp -s "$out/.slice-$a" "$out/sockferry-$a" || fail "the $a slice of sockferry-universal is not sockferry-$a"
        rm -f "$out/.slice-$a"
done
say "sockferry-universal: $(stat -c %s "$out/sockferry-universal") bytes; $archs, each slice the file above"

python3 "$root/tests/packaging/test_launchd.py" \
        --template "$root/packaging/launchd/sockferry.relay.plist.in" \
        --install "$root/packaging/launchd/install.sh" || fail "LaunchAgent plist (tests/packaging/test_launchd.py)"
command -v ruby >/dev/null || fail "ruby is not installed (packaging/install-deps.sh installs it)"
python3 "$root/tests/packaging/test_homebrew.py" \
        --formula "$root/packaging/homebrew/sockferry.rb" || fail "Homebrew formula (tests/packaging/test_homebrew.py)"

say "Mach-O x86_64, arm64 and universal in ${elapsed}s, LaunchAgent plist, Homebrew formula"
