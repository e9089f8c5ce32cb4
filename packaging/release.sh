#!/bin/bash
# Builds every artifact of a release into OUTDIR, with a SHA256SUMS file:
#
#   sockferry-VERSION.tar.xz                   the source (meson dist: the committed tree)
#   sockferry-VERSION-linux-{x86_64,aarch64}   static Linux binaries (container side, attach --inject)
#   sockferry-VERSION-macos-{x86_64,arm64,universal}   the macOS host side (Mach-O)
#   sockferry-VERSION-windows-x86_64.zip       sockferry.exe with its documents
#   sockferry_VERSION_amd64.deb                the Debian package (with both static binaries)
#   homebrew-sockferry/                        the Homebrew tap: Formula/sockferry.rb, whose url
#                                              and sha256 are the tarball's, the static binaries
#                                              its resources
#
#   packaging/release.sh [OPTIONS] VERSION OUTDIR
#
#   --url-base URL   where OUTDIR's files will be downloaded from (the formula's url and
#                    resources); default, when git's remote origin is a GitHub repository
#                    OWNER/REPO: https://github.com/OWNER/REPO/releases/download/vVERSION
#   --git URL        the repository, for the formula's head (default: origin's URL)
#   --homepage URL   the formula's homepage (default: origin's GitHub page; else none)
#   --allow-dirty    build from a tree with uncommitted changes: the tarball has the committed
#                    tree only, the binaries the working tree (for trying the script out)
#
# VERSION must be meson.build's. OUTDIR must be empty or missing. Nothing is published: the
# script ends by printing what to tag, upload and push.
#
# Builds CI has made already can be reused; each is checked here as if it were built here:
#   SF_RELEASE_STATIC=DIR   packaging/linux/build-static.sh's OUTDIR
#   SF_RELEASE_MACOS=DIR    packaging/macos/build.sh's OUTDIR
#   SF_RELEASE_WINDOWS=DIR  packaging/windows/build.sh's OUTDIR
#   SF_RELEASE_DEB=FILE     packaging/build-deb.sh's .deb (its static binaries must be the ones
#                           above)
# Without them the builds run here (their caches make a second run quick); the .deb's own
# tests run unless DEB_BUILD_OPTIONS=nocheck.
set -euo pipefail

usage() { echo "usage: $0 [--url-base URL] [--git URL] [--homepage URL] [--allow-dirty] VERSION OUTDIR" >&2; exit 64; }
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
url_base= git_url= homepage= allow_dirty= args=()
while (($#)); do
        case $1 in
        --url-base) (($# >= 2)) || usage; url_base=${2%/}; shift 2 ;;
        --git) (($# >= 2)) || usage; git_url=$2; shift 2 ;;
        --homepage) (($# >= 2)) || usage; homepage=$2; shift 2 ;;
        --allow-dirty) allow_dirty=1; shift ;;
        -h|--help) usage ;;
        -*) echo "$0: unknown option $1" >&2; usage ;;
        *) args+=("$1"); shift ;;
        esac
done
((${#args[@]} == 2)) || usage
version=${args[0]}
out=$(realpath -m "${args[1]}")
t0=$SECONDS
say() { printf 'release: %s\n' "$*"; }
fail() { printf 'release: %s\n' "$*" >&2; exit 1; }

meson_version=$(meson introspect --projectinfo "$src/meson.build" | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
[ "$version" = "$meson_version" ] || { echo "$0: VERSION $version: meson.build says $meson_version" >&2; exit 64; }
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
        echo "$0: $out is not empty: give a new directory" >&2; exit 64
fi
git -C "$src" rev-parse HEAD >/dev/null 2>&1 || fail "$src is not a git checkout: meson dist archives git's HEAD"
if [ -n "$(git -C "$src" status --porcelain --untracked-files=normal)" ]; then
        [ -n "$allow_dirty" ] || fail "$src has uncommitted changes (git status): commit them, or --allow-dirty to try the script out"
        say "WARNING: uncommitted changes: the tarball holds the committed tree, the binaries the working tree"
fi

# What git's origin says, for the defaults.
origin=$(git -C "$src" remote get-url origin 2>/dev/null || true)
gh=
if [[ $origin =~ ^(https://github\.com/|git@github\.com:|ssh://git@github\.com/)([^/]+)/([^/]+)$ ]]; then
        gh=${BASH_REMATCH[2]}/${BASH_REMATCH[3]%.git}
fi
if [ -n "$gh" ]; then
        : "${url_base:=https://github.com/$gh/releases/download/v$version}"
        : "${git_url:=https://github.com/$gh.git}"
        : "${homepage:=https://github.com/$gh}"
fi
[ -n "$url_base" ] || { echo "$0: where will the files be downloaded from? Give --url-base URL (origin is not a GitHub repository: '${origin:-none}')" >&2; exit 64; }
[ -n "$git_url" ] || git_url=$origin
[ -n "$git_url" ] || { echo "$0: the formula's head needs the repository: give --git URL (no remote origin)" >&2; exit 64; }

mkdir -p "$out"
work=$(mktemp -d /tmp/sockferry-release.XXXXXX)
trap 'rm -rf "$work"' EXIT
commit_time=$(git -C "$src" log -1 --format=%ct)
step() { say "$1 ($((SECONDS - t0)) s)"; }
# built NAME SCRIPT: the directory SF_RELEASE_NAME names (a build CI made), else SCRIPT's
# OUTDIR, built here from this tree.
built() {
        local var=SF_RELEASE_$1 dir=$work/$1
        if [ -n "${!var:-}" ]; then
                echo "${!var}"
                return
        fi
        "$src/$2" --source "$src" "$dir" >"$work/$1.log" 2>&1 || { tail -30 "$work/$1.log" >&2; fail "$2 failed"; }
        echo "$dir"
}

# ---- the source tarball ----
meson setup "$work/dist" "$src" -Dtests=disabled >"$work/dist-setup.log" 2>&1 ||
        { tail -20 "$work/dist-setup.log" >&2; fail "meson setup for meson dist failed"; }
meson dist -C "$work/dist" --no-tests --formats xztar ${allow_dirty:+--allow-dirty} >"$work/dist.log" 2>&1 ||
        { cat "$work/dist.log" >&2; fail "meson dist failed"; }
tarball=sockferry-$version.tar.xz
cp "$work/dist/meson-dist/$tarball" "$out/"
step "$tarball"

# ---- static Linux binaries ----
static=$(built STATIC packaging/linux/build-static.sh) || exit 1
declare -A elf=([x86_64]=x86-64 [aarch64]="ARM aarch64")
for a in x86_64 aarch64; do
        f=$static/linux-$a/sockferry
        [ -f "$f" ] || fail "$f is missing"
        case $(file -b "$f") in
        "ELF 64-bit LSB pie executable, ${elf[$a]},"*"static-pie linked"*) ;;
        *) fail "$f: $(file -b "$f")" ;;
        esac
        runner=()
        [ "$a" = "$(uname -m)" ] || runner=("qemu-$a-static")
        got=$("${runner[@]}" "$f" --version) || fail "${runner[*]} $f --version failed"
        [ "$got" = "sockferry $version" ] || fail "$f --version says '$got'"
        install -m 0755 "$f" "$out/sockferry-$version-linux-$a"
done
step "sockferry-$version-linux-{x86_64,aarch64}"

# ---- macOS ----
macos=$(built MACOS packaging/macos/build.sh) || exit 1
for a in x86_64 arm64 universal; do
        f=$macos/sockferry-$a
        [ -f "$f" ] || fail "$f is missing"
        case $a:$(file -b "$f") in
        x86_64:"Mach-O 64-bit x86_64 executable"* | arm64:"Mach-O 64-bit arm64 executable"* | universal:"Mach-O universal binary with 2 architectures"*) ;;
        *) fail "$f: $(file -b "$f")" ;;
        esac
        grep -qaF "$version" "$f" || fail "$f does not hold the version $version"
        install -m 0755 "$f" "$out/sockferry-$version-macos-$a"
done
step "sockferry-$version-macos-{x86_64,arm64,universal}"

# ---- Windows: sockferry.exe and its documents in a zip ----
windows=$(built WINDOWS packaging/windows/build.sh) || exit 1
exe=$windows/sockferry.exe
[ -f "$exe" ] || fail "$exe is missing"
case $(file -b "$exe") in
"PE32+ executable (console) x86-64"*) ;;
*) fail "$exe: $(file -b "$exe")" ;;
esac
zip=sockferry-$version-windows-x86_64.zip
python3 - "$out/$zip" "sockferry-$version-windows-x86_64" "$commit_time" "$exe" \
        "$src/README.md" "$src/LICENSE" "$src/doc/WINDOWS.md" "$src/doc/SECURITY.md" \
        "$src/doc/TROUBLESHOOTING.md" "$src/packaging/sockferry.conf.example" <<'PY'
import os, sys, time, zipfile
out, top, when, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
stamp = time.gmtime(when)[:6]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for f in files:
        info = zipfile.ZipInfo(f"{top}/{os.path.basename(f)}", stamp)
        info.external_attr = (0o755 if f.endswith(".exe") else 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(f, "rb") as fh:
            z.writestr(info, fh.read())
PY
step "$zip"

# ---- the Debian package, with the static binaries above ----
deb=${SF_RELEASE_DEB:-}
if [ -z "$deb" ]; then
        SF_STATIC_DIR=$static "$src/packaging/build-deb.sh" "$work/deb" >"$work/deb.log" 2>&1 ||
                { tail -30 "$work/deb.log" >&2; fail "packaging/build-deb.sh failed"; }
        deb=$(ls "$work"/deb/sockferry_*.deb)
fi
[ -f "$deb" ] || fail "$deb is missing"
[ "$(dpkg-deb -f "$deb" Package Version Architecture | paste -sd' ' -)" = "Package: sockferry Version: $version Architecture: $(dpkg --print-architecture)" ] ||
        fail "$deb: $(dpkg-deb -f "$deb" Package Version Architecture | paste -sd' ' -)"
dpkg-deb -x "$deb" "$work/deb-files"
for a in x86_64 aarch64; do
        cmp -s "$work/deb-files/usr/libexec/sockferry/linux-$a/sockferry" "$out/sockferry-$version-linux-$a" ||
                fail "$deb holds another usr/libexec/sockferry/linux-$a/sockferry than sockferry-$version-linux-$a"
done
cp "$deb" "$out/"
step "$(basename "$deb")"

# ---- the Homebrew tap ----
tap=$out/homebrew-sockferry
mkdir -p "$tap/Formula"
python3 - "$src/packaging/homebrew/sockferry.rb" "$tap/Formula/sockferry.rb" "$version" "$url_base" \
        "$git_url" "$homepage" "$out" <<'PY'
import hashlib, sys
template, dest, version, base, git, homepage, out = sys.argv[1:]
def sha(name):
    with open(f"{out}/{name}", "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
def q(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("#{", "\\#{") + '"'
tarball = f"sockferry-{version}.tar.xz"
head = ([f"  homepage {q(homepage)}"] if homepage else []) + [
    f"  url {q(f'{base}/{tarball}')}",
    f"  sha256 {q(sha(tarball))}",
    f"  head {q(git)}, using: :git",
]
res = []
for arch in ("x86_64", "aarch64"):
    name = f"sockferry-{version}-linux-{arch}"
    res += [f"  resource {q('linux-' + arch)} do", f"    url {q(f'{base}/{name}')}",
            f"    sha256 {q(sha(name))}", "  end", ""]
text = open(template).read()
markers = {"  # release.sh: homepage, url, sha256, head\n": "\n".join(head) + "\n",
           "  # release.sh: resources\n": "\n".join(res[:-1]) + "\n"}
for marker, lines in markers.items():
    if text.count(marker) != 1:
        sys.exit(f"{template}: expected the line {marker.strip()!r} once")
    text = text.replace(marker, lines)
lines = text.splitlines(keepends=True)
# The template's header says how the file is made; the tap's says what it is.
while lines and lines[0].startswith("#"):
    lines.pop(0)
text = (f"# sockferry {version}, written by packaging/release.sh from packaging/homebrew/sockferry.rb.\n"
        + "".join(lines))
open(dest, "w").write(text)
PY
ruby -c "$tap/Formula/sockferry.rb" >/dev/null || fail "ruby -c $tap/Formula/sockferry.rb"
cat >"$tap/README.md" <<EOF
# The Homebrew tap of sockferry $version

    brew tap sockferry/sockferry URL-OF-THIS-REPOSITORY
    brew install sockferry/sockferry/sockferry

The formula builds sockferry from $url_base/$tarball and installs the static
Linux binaries for \`sockferry attach --inject\` from the same release. The host side on macOS:
doc/MACOS.md of the source.
EOF
step "homebrew-sockferry/Formula/sockferry.rb"

# ---- checksums ----
(cd "$out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
(cd "$out" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not verify"
step "SHA256SUMS: $(wc -l <"$out/SHA256SUMS") files"

say "done in $((SECONDS - t0)) s: $out"
cat <<EOF
To publish sockferry $version:
  git -C $src tag -a v$version -m "sockferry $version" && git -C $src push origin v$version
  upload the files of $out (not homebrew-sockferry/) to $url_base/
  push $tap as the tap's git repository (homebrew-sockferry), then:
    brew tap sockferry/sockferry URL-OF-THAT-REPOSITORY && brew install sockferry/sockferry/sockferry
EOF
