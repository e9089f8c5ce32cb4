#!/bin/bash
# Installs what building and testing sockferry needs on Debian 12 (run as root).
#
#   packaging/install-deps.sh [--fast] [base|all]
#
# base: what building the tree and running its meson tests need; all (the default): base and
# what the cross-builds, the packaging, fuzzing, Wine stages and the benchmarks need (tests/ci.sh
# installs base first and the rest while the first tests run).
# --fast, for a throw-away machine (tests/ci.sh): dpkg unpacks without syncing every file to
# disk (--force-unsafe-io, as Debian's container images do) and man-db stops rebuilding its
# index after every package; a crash in the middle may leave files empty.
set -euo pipefail
fast="" group=all
for a in "$@"; do
        case $a in
        --fast) fast=1 ;;
        base | all) group=$a ;;
        *) echo "usage: $0 [--fast] [base|all]" >&2; exit 64 ;;
        esac
done
pkgs=(
        meson ninja-build pkg-config gcc ccache
        libuv1-dev libinih-dev libcap-ng-dev libsodium-dev libnghttp2-dev libcriterion-dev
        python3 python3-h2 socat curl iproute2 util-linux procps valgrind musl-tools
        systemd scdoc
        libseccomp-dev binutils
        # tests/packaging: completions tested in each shell, the Kubernetes manifests and
        # compose.yaml read with python3-yaml, ruby -c of the Homebrew formula; ssh-add for
        # the attach tests and doc/MACOS.md §5 (containers stage)
        zsh fish python3-yaml ruby openssh-client
        # tests/e2e/test_relay.py: strace holds the relay's listen() back to show that a socket's
        # path appears only once it is listened on
        strace
)
if [ "$group" = all ]; then
        pkgs+=(
                clang libclang-rt-14-dev # tests/fuzz: libFuzzer
                gnuplot-nox
                dpkg-dev debhelper lintian fakeroot rpm
                # the Mach-O cross-build (packaging/macos/build.sh): libsodium's autoreconf,
                # llvm-nm/llvm-objdump
                autoconf automake libtool llvm
                cmake # tests/ci/libuv150.sh: libuv 1.50 from trixie's source package (dpkg-dev above)
                # tests/ci/windows.sh: sockferry.exe and its test program run under Wine (64-bit)
                wine64
                # packaging/linux/build-static.sh: the aarch64 static binary, cross-built with
                # Debian's compiler and run under qemu (tests/ci/static-chroot.sh,
                # tests/ci/deb-install.sh, tests/ci/release.sh)
                gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
                # bench/vm.sh: the VM boundary (the user-mode network stack rootless podman
                # uses) and ssh -L stream-local forwarding with a throwaway sshd, the
                # benchmark's contender
                slirp4netns openssh-server
                # tests/ci/base-image.sh: the container stages' Debian base image, built beside
                # the tests (the engines themselves come with those stages)
                mmdebstrap
        )
        # The cross-build's toolchain comes from npm; a nodejs from elsewhere may carry its own npm.
        command -v npm >/dev/null || pkgs+=(npm)
fi
missing=()
for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
        export DEBIAN_FRONTEND=noninteractive
        apt_opts=()
        if [ -n "$fast" ]; then
                apt_opts=(-o Dpkg::Options::=--force-unsafe-io)
                echo 'man-db man-db/auto-update boolean false' | debconf-set-selections
        fi
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${apt_opts[@]}" "${missing[@]}"
fi
