# Homebrew formula for the macOS host side (doc/MACOS.md): brew install --formula ./sockferry.rb
#
# PLACEHOLDERS until the first release is published: `homepage`, `url` and `sha256` name a
# release tarball (the output of `meson dist`) that does not exist yet. Fill them in from the
# release; `brew install` refuses a sha256 that does not match. Everything else is real.
class Sockferry < Formula
  desc "Make a host unix socket usable inside a container when a bind mount cannot carry it"
  homepage "https://sockferry.example/"
  url "https://sockferry.example/releases/sockferry-0.1.0.tar.xz"
  sha256 "0000000000000000000000000000000000000000000000000000000000000000"
  license "MIT"

  depends_on "meson" => :build
  depends_on "ninja" => :build
  depends_on "pkg-config" => :build
  depends_on "scdoc" => :build
  depends_on "inih"
  depends_on "libnghttp2"
  depends_on "libsodium"
  depends_on "libuv"

  def install
    system "meson", "setup", "build", *std_meson_args
    system "meson", "compile", "-C", "build", "--verbose"
    system "meson", "install", "-C", "build"
  end

  def caveats
    <<~EOS
      The relay reads ~/.config/sockferry/sockferry.conf (see doc/MACOS.md):
        mkdir -p ~/.config/sockferry
        sockferry keygen -o ~/.config/sockferry/token
      then start it at login with: brew services start sockferry
    EOS
  end

  # A per-user LaunchAgent (brew services start sockferry), like packaging/launchd: Homebrew
  # expands the leading ~ in run arguments when it writes the plist.
  service do
    run [opt_bin/"sockferry", "relay", "-c", "~/.config/sockferry/sockferry.conf"]
    keep_alive true
    log_path var/"log/sockferry.log"
    error_log_path var/"log/sockferry.log"
  end

  test do
    assert_match "sockferry #{version}", shell_output("#{bin}/sockferry --version")

    token = testpath/"token"
    system bin/"sockferry", "keygen", "-o", token
    assert_match(/\A\h{64}\n?\z/, token.read)
    assert_equal "600", format("%o", token.stat.mode & 0o777)

    # A configuration error is reported before anything is bound: exit status 78.
    (testpath/"bad.conf").write <<~EOS
      [fwd]
      listen = tcp:127.0.0.1:7777
      connect = unix:#{testpath}/upstream.sock
      no-such-key = 1
    EOS
    assert_match "no-such-key", shell_output("#{bin}/sockferry relay -c #{testpath}/bad.conf 2>&1", 78)
  end
end
