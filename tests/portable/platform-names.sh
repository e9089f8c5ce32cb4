#!/bin/sh
# Platform differences live in few, obvious files (issue 14): outside the engine and platform
# files, nothing in relay/, conf/ or shim/ names epoll, splice, vm_sockets or prctl.
# TAP, one test. $1: the source root.
cd "${1:?source root}" || exit 1
echo "1..1"
hits=$(grep -rnE 'epoll|splice|vm_sockets|prctl' relay conf shim |
        grep -vE '^relay/(engine[^/]*|evset\.[ch]|pipepool\.[ch]|sandbox\.c|platform_[a-z]+\.c):|^shim/platform_[a-z]+\.c:')
if [ -n "$hits" ]; then
        echo "$hits" | sed 's/^/# /'
        echo "not ok 1 - Linux mechanisms named outside the engine and platform files"
        exit 1
fi
echo "ok 1 - epoll, splice, vm_sockets and prctl appear only in the engine and platform files"
