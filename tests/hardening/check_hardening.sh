#!/bin/sh
# Checks the hardening of built (or installed) binaries with readelf; prints TAP.
#
#   check_hardening.sh [--no-fortify] KIND:FILE...
#
# KIND is exe (an executable: also PIE), lib (a shared object) or musl-lib (a shared object
# built against musl, which has no _FORTIFY_SOURCE: that check is skipped). Every file gets:
#   PIE         exe only: ELF type DYN with the PIE flag (readelf -h, FLAGS_1)
#   full RELRO  a GNU_RELRO segment (readelf -l) and BIND_NOW (DT_FLAGS BIND_NOW or FLAGS_1 NOW)
#   NX stack    GNU_STACK not executable
#   stack protector  __stack_chk_fail imported (-fstack-protector-strong)
#   FORTIFY     some __*_chk function imported (-D_FORTIFY_SOURCE, needs optimisation;
#               --no-fortify skips it, for -O0 builds)
# Used by meson test --suite hardening on the build tree; it can be pointed at an installed
# tree too: check_hardening.sh exe:DESTDIR/usr/bin/sockferry lib:DESTDIR/usr/lib/.../x.so
set -u
# shellcheck source=tests/lib/tap.sh
. "$(dirname "$0")/../lib/tap.sh"

fortify=1
if [ "${1:-}" = "--no-fortify" ]; then
        fortify=0
        shift
fi
if [ $# -eq 0 ]; then
        echo "usage: $0 [--no-fortify] exe|lib|musl-lib:FILE..." >&2
        exit 64
fi
if ! command -v readelf >/dev/null 2>&1; then
        tap_skip_all "readelf not found (binutils)"
fi

result() { # ok|not-ok NAME [DIAG]
        if [ "$1" = ok ]; then
                tap_ok "$2"
        else
                tap_not_ok "$2" "${3:-}"
        fi
}

for arg in "$@"; do
        kind=${arg%%:*}
        file=${arg#*:}
        name=$(basename "$file")
        if [ ! -f "$file" ]; then
                result not-ok "$name: exists" "no such file: $file"
                continue
        fi
        header=$(readelf -h -W "$file" 2>&1)
        segments=$(readelf -l -W "$file" 2>&1)
        dynamic=$(readelf -d -W "$file" 2>&1)
        dynsyms=$(readelf --dyn-syms -W "$file" 2>&1)

        if [ "$kind" = exe ]; then
                if echo "$header" | grep -q 'Type:[[:space:]]*DYN' &&
                   echo "$dynamic" | grep -q 'FLAGS_1.*PIE'; then
                        result ok "$name: PIE"
                else
                        result not-ok "$name: PIE" "$(echo "$header" | grep 'Type:')"
                fi
        fi

        if echo "$segments" | grep -q 'GNU_RELRO' &&
           echo "$dynamic" | grep -Eq '\(FLAGS\).*BIND_NOW|FLAGS_1.*[[:space:]]NOW'; then
                result ok "$name: full RELRO (GNU_RELRO and BIND_NOW)"
        else
                result not-ok "$name: full RELRO (GNU_RELRO and BIND_NOW)" \
                        "GNU_RELRO: $(echo "$segments" | grep -c GNU_RELRO); $(echo "$dynamic" | grep -E 'FLAGS' | tr -s ' ' | tr '\n' ';')"
        fi

        stack=$(echo "$segments" | grep GNU_STACK)
        if [ -n "$stack" ] && ! echo "$stack" | grep -q 'RWE'; then
                result ok "$name: non-executable stack"
        else
                result not-ok "$name: non-executable stack" "GNU_STACK: ${stack:-missing}"
        fi

        if echo "$dynsyms" | grep -q ' UND __stack_chk_fail'; then
                result ok "$name: stack protector (__stack_chk_fail)"
        else
                result not-ok "$name: stack protector (__stack_chk_fail)" "not imported"
        fi

        if [ "$kind" = musl-lib ]; then
                tap_skip "$name: FORTIFY" "musl has no _FORTIFY_SOURCE"
        elif [ $fortify = 0 ]; then
                tap_skip "$name: FORTIFY" "an unoptimised build has none"
        else
                chk=$(echo "$dynsyms" | grep ' UND ' | grep -oE '__[a-z0-9_]+_chk' | grep -v '^__stack_chk$' | sort -u | tr '\n' ' ')
                if [ -n "$chk" ]; then
                        result ok "$name: FORTIFY ($chk)"
                else
                        result not-ok "$name: FORTIFY" "no __*_chk function imported"
                fi
        fi
done

tap_finish
