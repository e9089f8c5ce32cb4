#!/bin/bash
# Installs what building and testing sockferry needs on Debian 12 (run as root).
set -euo pipefail
pkgs=(
        meson ninja-build pkg-config gcc clang libclang-rt-14-dev
        libuv1-dev libinih-dev libcap-ng-dev libsodium-dev libnghttp2-dev libcriterion-dev
        python3 python3-h2 socat curl iproute2 util-linux procps valgrind musl-tools
        systemd scdoc gnuplot-nox
        libseccomp-dev binutils
        dpkg-dev debhelper lintian fakeroot rpm
        # macOS packaging (tests/packaging): ruby -c of the Homebrew formula; the Mach-O
        # cross-build (packaging/macos/build.sh): libsodium's autoreconf, llvm-nm/llvm-objdump
        ruby autoconf automake libtool llvm
        cmake # tests/sandbox/ci-stage.sh: libuv 1.50 from trixie's source package (dpkg-dev above)
        # tests/windows/ci-stage.sh: sockferry.exe and its test program run under Wine (64-bit)
        wine64
        # packaging/linux/build-static.sh: the aarch64 static binary, cross-built with Debian's
        # compiler and run under qemu (static-chroot.sh, deb-install.sh, release-stage.sh)
        gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
        # completions tested in each shell; the Kubernetes manifests and compose.yaml read with
        # python3-yaml (tests/packaging); ssh-agent for doc/MACOS.md §5 (containers stage)
        zsh fish python3-yaml openssh-client
        # bench/vm.sh: the VM boundary (the user-mode network stack rootless podman uses) and
        # ssh -L stream-local forwarding with a throwaway sshd, the benchmark's contender
        slirp4netns openssh-server
)
# The cross-build's toolchain comes from npm; a nodejs from elsewhere may carry its own npm.
command -v npm >/dev/null || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
