#!/bin/bash
# CI stage: packaging/release.sh VERSION OUTDIR, then every artifact checked on its own:
#   SHA256SUMS     verifies, and lists every file of OUTDIR (and nothing else)
#   tarball        unpacks to sockferry-VERSION/ with LICENSE and meson.build; the formula
#                  builds from it (below)
#   linux-ARCH     static-pie ELF of its architecture; --version and --help, and a real forward
#                  (unix socket -> unix socket, socat at both ends) natively or under
#                  qemu-ARCH-static
#   macos-*        Mach-O of x86_64 and arm64, the arm64 one signed, macOS 11 the minimum; the
#                  universal file's slices are those two, byte for byte
#   windows zip    sockferry.exe (PE32+ x86-64 console) and its documents
#   .deb           package, version and architecture; its libexec binaries are the linux-ARCH files
#   formula        ruby -c; url and sha256 the tarball's, the resources' sha256 the static
#                  binaries', head; then tests/packaging/brew_harness.rb runs it on Linux the way
#                  Homebrew would: fetch and check every download, build and install from the
#                  tarball with std_meson_args, run `test do` (a relay pair end to end), read
#                  `service do`
#
#   tests/ci/release.sh [OUTDIR]     (default: a temporary directory)
#
# The builds CI made already are reused through SF_RELEASE_STATIC, SF_RELEASE_MACOS,
# SF_RELEASE_WINDOWS and SF_RELEASE_DEB (packaging/release.sh). The formula's URLs are file://
# ones into OUTDIR (--url-base), its head this checkout. Exit 0 pass, 1 fail, 77 skipped (a
# tool is missing: it says which). Prints the stage's wall time.
set -uo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$src/tests/lib/stage.sh" release

lipo=$(command -v llvm-lipo || command -v llvm-lipo-14) || skip "llvm-lipo is missing (Debian's llvm; packaging/install-deps.sh)"
for tool in ruby socat file dpkg-deb unzip llvm-objdump qemu-aarch64-static aarch64-linux-gnu-gcc npm; do
        command -v "$tool" >/dev/null || skip "$tool is missing (packaging/install-deps.sh installs it)"
done
if [ -n "${1:-}" ]; then
        out=$(realpath -m "$1")
        rm -rf "$out"
else
        out=$(mktemp -d /tmp/sockferry-release-stage.XXXXXX)
        cleanup 'rm -rf "$out"'
        rmdir "$out"
fi
work=$(mktemp -d /tmp/sockferry-release-check.XXXXXX)
cleanup 'rm -rf "$work"'
version=$(meson introspect --projectinfo "$src/meson.build" | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
git -C "$src" rev-parse HEAD >/dev/null 2>&1 || skip "$src is not a git checkout (meson dist archives git's HEAD)"
# A real release refuses uncommitted changes; the stage checks the artifacts all the same
# (a local run with work in progress: the tarball is HEAD's, the binaries the working tree's).
dirty=()
[ -z "$(git -C "$src" status --porcelain --untracked-files=normal)" ] || dirty=(--allow-dirty)

"$src/packaging/release.sh" "${dirty[@]}" --url-base "file://$out" --git "file://$src" "$version" "$out" ||
        fail "packaging/release.sh exited $? (its output is above)"
release_s=$(stage_seconds)
cd "$out" || fail "cd $out"

# ---- SHA256SUMS ----
sha256sum --quiet -c SHA256SUMS || fail "sha256sum -c SHA256SUMS"
listed=$(awk '{print $2}' SHA256SUMS | LC_ALL=C sort)
present=$(find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort)
[ "$listed" = "$present" ] || fail "SHA256SUMS lists [$listed], OUTDIR holds [$present]"
want="homebrew-sockferry/Formula/sockferry.rb
homebrew-sockferry/README.md
sockferry-$version-linux-aarch64
sockferry-$version-linux-x86_64
sockferry-$version-macos-arm64
sockferry-$version-macos-universal
sockferry-$version-macos-x86_64
sockferry-$version-windows-x86_64.zip
sockferry-$version.tar.xz
sockferry_${version}_$(dpkg --print-architecture).deb"
[ "$present" = "$(LC_ALL=C sort <<<"$want")" ] || fail "the release holds [$present], expected [$want]"
say "SHA256SUMS: $(wc -l <SHA256SUMS) files, all verify, nothing missing or extra"

# ---- tarball ----
names=$(tar -tJf "sockferry-$version.tar.xz") || fail "tar -tJf sockferry-$version.tar.xz"
for f in meson.build LICENSE packaging/homebrew/sockferry.rb packaging/release.sh; do
        grep -qx "sockferry-$version/$f" <<<"$names" || fail "the tarball has no sockferry-$version/$f"
done
[ -z "$(grep -v "^sockferry-$version/" <<<"$names")" ] || fail "the tarball holds files outside sockferry-$version/"
say "sockferry-$version.tar.xz: $(grep -c . <<<"$names") entries under sockferry-$version/"

# ---- the static Linux binaries ----
declare -A elf=([x86_64]=x86-64 [aarch64]="ARM aarch64")
forward() { # ARCH BINARY: a relay through the binary, socat at both ends
        local a=$1 bin=$2 d=$work/fwd-$1 run=() got rpid spid
        [ "$a" = "$(uname -m)" ] || run=("qemu-$a-static")
        mkdir -p "$d"
        # qemu-user cannot install the guest's seccomp filter; the sandbox is tested natively.
        printf '[sockferry]\nseccomp = no\n' >"$d/qemu.conf"
        socat "UNIX-LISTEN:$d/up.sock,fork" SYSTEM:'read line; echo "upstream got: $line"' 2>"$d/socat.log" &
        spid=$!
        "${run[@]}" "$bin" relay -c "$d/qemu.conf" -F "t:unix:$d/front.sock=unix:$d/up.sock" 2>"$d/relay.log" &
        rpid=$!
        for _ in $(seq 100); do [ -S "$d/front.sock" ] && [ -S "$d/up.sock" ] && break; sleep 0.1; done
        got=$(echo "ping $a" | timeout 20 socat - "UNIX-CONNECT:$d/front.sock" 2>&1)
        kill "$rpid" "$spid" 2>/dev/null
        wait "$rpid" 2>/dev/null
        wait "$spid" 2>/dev/null
        [ "$got" = "upstream got: ping $a" ] || { cat "$d/relay.log"; fail "linux-$a: the forward answered '$got'"; }
        ! grep -qi 'error\|warn' "$d/relay.log" || { cat "$d/relay.log"; fail "linux-$a: the relay logged errors"; }
}
for a in x86_64 aarch64; do
        f=sockferry-$version-linux-$a
        desc=$(file -b "$f")
        case $desc in
        "ELF 64-bit LSB pie executable, ${elf[$a]},"*"static-pie linked"*) ;;
        *) fail "$f: $desc" ;;
        esac
        run=()
        [ "$a" = "$(uname -m)" ] || run=("qemu-$a-static")
        [ "$("${run[@]}" "./$f" --version)" = "sockferry $version" ] || fail "$f --version"
        "${run[@]}" "./$f" --help | grep -q '^Usage: sockferry COMMAND' || fail "$f --help"
        forward "$a" "./$f"
        say "$f: static-pie ${elf[$a]}; --version, --help and a unix -> unix forward through it${run[*]:+ under ${run[*]}}"
done

# ---- macOS ----
for a in x86_64 arm64; do
        f=sockferry-$version-macos-$a
        case $(file -b "$f") in
        "Mach-O 64-bit $a executable"*NOUNDEFS*) ;;
        *) fail "$f: $(file -b "$f")" ;;
        esac
        minos=$(llvm-objdump --macho --private-headers "$f" | awk '$1 == "minos" {print $2; exit}')
        [ "$minos" = 11.0 ] || fail "$f: minimum macOS $minos, expected 11.0"
done
llvm-objdump --macho --private-headers "sockferry-$version-macos-arm64" | grep -q LC_CODE_SIGNATURE ||
        fail "sockferry-$version-macos-arm64 is not signed (Apple silicon runs no unsigned code)"
u=sockferry-$version-macos-universal
[ "$("$lipo" -archs "$u" | xargs)" = "x86_64 arm64" ] || fail "$u holds $("$lipo" -archs "$u")"
for a in x86_64 arm64; do
        "$lipo" "$u" -thin "$a" -output "$work/slice-$a" || fail "$lipo -thin $a $u"
        cmp -s "$work/slice-$a" "sockferry-$version-macos-$a" || fail "the $a slice of $u is not sockferry-$version-macos-$a"
done
say "macOS: x86_64 and arm64 (signed) Mach-O, macOS 11; universal = those two"

# ---- Windows ----
z=sockferry-$version-windows-x86_64.zip
top=sockferry-$version-windows-x86_64
got=$(unzip -Z1 "$z" | LC_ALL=C sort | paste -sd' ' -)
want_zip="$top/LICENSE $top/README.md $top/SECURITY.md $top/TROUBLESHOOTING.md $top/WINDOWS.md $top/sockferry.conf.example $top/sockferry.exe"
[ "$got" = "$want_zip" ] || fail "$z holds [$got], expected [$want_zip]"
unzip -q "$z" -d "$work/zip" || fail "unzip $z"
case $(file -b "$work/zip/$top/sockferry.exe") in
"PE32+ executable (console) x86-64"*) ;;
*) fail "sockferry.exe: $(file -b "$work/zip/$top/sockferry.exe")" ;;
esac
cmp -s "$work/zip/$top/LICENSE" "$src/LICENSE" || fail "$z: LICENSE is not the tree's"
if [ -n "${SF_RELEASE_WINDOWS:-}" ]; then
        cmp -s "$work/zip/$top/sockferry.exe" "$SF_RELEASE_WINDOWS/sockferry.exe" ||
                fail "$z: sockferry.exe is not the one the Windows stage ran"
        ran=", the sockferry.exe the Windows stage ran under Wine"
fi
say "$z: sockferry.exe (PE32+ x86-64 console) and its documents${ran:-}"

# ---- the .deb ----
d=sockferry_${version}_$(dpkg --print-architecture).deb
[ "$(dpkg-deb -f "$d" Version)" = "$version" ] || fail "$d: Version $(dpkg-deb -f "$d" Version)"
dpkg-deb -x "$d" "$work/deb" || fail "dpkg-deb -x $d"
for a in x86_64 aarch64; do
        cmp -s "$work/deb/usr/libexec/sockferry/linux-$a/sockferry" "sockferry-$version-linux-$a" ||
                fail "$d: usr/libexec/sockferry/linux-$a/sockferry is not sockferry-$version-linux-$a"
done
[ -x "$work/deb/usr/bin/sockferry" ] || fail "$d has no usr/bin/sockferry"
say "$d: version $version; usr/libexec/sockferry/linux-{x86_64,aarch64}/sockferry are the release's"

# ---- the Homebrew formula ----
rb=homebrew-sockferry/Formula/sockferry.rb
ruby -c "$rb" >/dev/null || fail "ruby -c $rb"
tar_sha=$(sha256sum "sockferry-$version.tar.xz" | cut -d' ' -f1)
grep -qxF "  url \"file://$out/sockferry-$version.tar.xz\"" "$rb" || fail "$rb: url is not the tarball's"
grep -qxF "  sha256 \"$tar_sha\"" "$rb" || fail "$rb: sha256 is not the tarball's ($tar_sha)"
for a in x86_64 aarch64; do
        s=$(sha256sum "sockferry-$version-linux-$a" | cut -d' ' -f1)
        grep -qxF "    sha256 \"$s\"" "$rb" || fail "$rb: no resource with sha256 $s (sockferry-$version-linux-$a)"
done
grep -qxF "  head \"file://$src\", using: :git" "$rb" || fail "$rb: no head"
! grep -q 'release\.sh:' "$rb" || fail "$rb still has a release.sh: marker"
python3 "$src/tests/packaging/test_homebrew.py" --formula "$rb" >"$work/test_homebrew.tap" ||
        { cat "$work/test_homebrew.tap"; fail "tests/packaging/test_homebrew.py on the tap's formula"; }
say "$rb: ruby -c; url and sha256 the tarball's, resources the static binaries', head; test_homebrew.py"
hb_t0=$SECONDS
ruby "$src/tests/packaging/brew_harness.rb" "$rb" "$work/brew" || fail "the formula under tests/packaging/brew_harness.rb"
say "the formula installed from the tarball and its test passed in $((SECONDS - hb_t0)) s"

say "packaging/release.sh took ${release_s} s"
