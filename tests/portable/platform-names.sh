#!/bin/sh
# Platform differences live in few, obvious files (issues 14 and 22). TAP. $1: the source root.
#   1. Linux mechanisms (epoll, splice, vm_sockets, prctl) only in the engine (relay/engine/),
#      the seccomp sandbox and the platform files.
#   2. The Win32 API (windows.h) only in files whose name ends in _win (and compat/win).
#   3. The relay is in folders by concern: no source file at the top of relay/ but the runtime
#      objects (relay, forward) and the list helper, and every folder builds from its own
#      meson.build.
#   4. shim/ includes from relay/ only the headers named after $1 (relay/meson.build's
#      sf_relay_api).
cd "${1:?source root}" || exit 1
shift
echo "1..4"
status=0
hits=$(grep -rnE 'epoll|splice|vm_sockets|prctl' relay conf shim |
        grep -vE '^relay/engine/[^/]+:|^relay/sys/(sandbox\.c|platform_[a-z]+\.c|meson\.build):|^shim/platform_[a-z]+\.c:')
if [ -n "$hits" ]; then
        echo "$hits" | sed 's/^/# /'
        echo "not ok 1 - Linux mechanisms named outside the engine and platform files"
        status=1
else
        echo "ok 1 - epoll, splice, vm_sockets and prctl appear only in the Linux engine and platform files"
fi
hits=$(grep -rlE '#include <(windows|winsock2|aclapi|psapi|winternl)\.h>' relay conf shim preload |
        grep -vE '_win\.[ch]$')
if [ -n "$hits" ]; then
        echo "$hits" | sed 's/^/# /'
        echo "not ok 2 - Windows headers included outside *_win files"
        status=1
else
        echo "ok 2 - the Win32 API is used only in *_win.c / *_win.h files"
fi
hits=$(find relay -maxdepth 1 -name '*.[ch]' | grep -vE '^relay/((relay|forward)\.[ch]|list\.h)$')
for d in relay/*/; do
        [ -f "$d/meson.build" ] || hits="$hits ${d}meson.build missing"
done
if [ -n "$hits" ]; then
        echo "$hits" | tr ' ' '\n' | sed '/^$/d; s/^/# /'
        echo "not ok 3 - relay/ has files outside its concern folders"
        status=1
else
        echo "ok 3 - relay/ keeps only its runtime objects at the top; every folder has its meson.build"
fi
hits=$(grep -rhoE '#include "relay/[^"]+"' shim | sort -u | sed 's/#include "//; s/"$//' |
        while read -r h; do
                case " $* " in *" $h "*) ;; *) echo "$h" ;; esac
        done)
if [ -n "$hits" ]; then
        echo "$hits" | sed 's/^/# not in sf_relay_api: /'
        echo "not ok 4 - shim/ includes relay headers outside the relay's named API"
        status=1
else
        echo "ok 4 - shim/ includes only the relay's named API ($# headers)"
fi
exit $status
