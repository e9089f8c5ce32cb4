# Homebrew formula for the macOS host side (doc/MACOS.md): the template of the tap's formula.
# packaging/release.sh writes homebrew-sockferry/Formula/sockferry.rb from it, with the
# release's homepage, url, sha256 and head in place of the first "release.sh:" line and the
# static Linux binaries, with their sha256, as resources in place of the second. Homebrew
# installs formulae from a tap only: `brew tap sockferry/sockferry URL` names the tap's
# repository (doc/MACOS.md, "Install").
class Sockferry < Formula
  desc "Make a host unix socket usable inside a container when a bind mount cannot carry it"
  # release.sh: homepage, url, sha256, head
  license "MIT"

  depends_on "meson" => :build
  depends_on "ninja" => :build
  depends_on "pkgconf" => :build
  depends_on "scdoc" => :build
  depends_on "inih"
  depends_on "libnghttp2"
  depends_on "libsodium"
  depends_on "libuv"

  # release.sh: resources

  def install
    # The test suite runs on Linux in the project's CI; it is not built here.
    system "meson", "setup", "build", "-Dtests=disabled", *std_meson_args
    system "meson", "compile", "-C", "build", "--verbose"
    system "meson", "install", "-C", "build"
    # The LaunchAgent with a rotated log (caveats), as an alternative to brew services.
    pkgshare.install "packaging/launchd"
    # The static Linux binaries that `sockferry attach --inject` copies into a container that
    # has no sockferry, one per container architecture whatever the Mac's (Docker Desktop runs
    # both): LIBEXEC/sockferry/linux-ARCH/sockferry, where the binary looks for them.
    %w[x86_64 aarch64].each do |arch|
      resource("linux-#{arch}").stage do
        (libexec/"sockferry/linux-#{arch}").install Dir["sockferry-*-linux-#{arch}"].first => "sockferry"
      end
      chmod 0755, libexec/"sockferry/linux-#{arch}/sockferry"
    end
  end

  def caveats
    <<~EOS
      The relay reads ~/.config/sockferry/sockferry.conf (doc/MACOS.md):
        mkdir -p ~/.config/sockferry
        sockferry keygen -o ~/.config/sockferry/token
      then start it at login with: brew services start sockferry
      Its log, #{var}/log/sockferry.log, is not rotated by Homebrew;
      #{opt_pkgshare}/launchd/install.sh installs a LaunchAgent whose log is.
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
    require "socket"

    assert_match "sockferry #{version}", shell_output("#{bin}/sockferry --version")
    %w[x86_64 aarch64].each do |arch|
      assert_predicate libexec/"sockferry/linux-#{arch}/sockferry", :executable?
    end

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

    # Both halves of a link on this Mac: the host side (TCP with auth = token in front of a
    # unix socket service) and the container side (a unix socket to that port), and one
    # request and its answer through both.
    upstream = UNIXServer.new((testpath/"upstream.sock").to_s)
    port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    # Process.spawn takes a String, not a Pathname.
    sockferry = (bin/"sockferry").to_s
    host = spawn sockferry, "relay", "-q", "-F",
                 "host:tcp:127.0.0.1:#{port}=unix:#{testpath}/upstream.sock,auth=token,token-file=#{token}"
    front = spawn sockferry, "relay", "-q", "-F",
                  "ctr:unix:#{testpath}/front.sock=tcp:127.0.0.1:#{port},auth=token,token-file=#{token}"
    100.times do
      break if (testpath/"front.sock").socket? && TCPSocket.new("127.0.0.1", port).close.nil?

      sleep 0.1
    rescue Errno::ECONNREFUSED
      sleep 0.1
    end
    client = UNIXSocket.new((testpath/"front.sock").to_s)
    client.write "ping"
    client.close_write
    conn = upstream.accept
    assert_equal "ping", conn.read
    conn.write "pong"
    conn.close
    assert_equal "pong", client.read
  ensure
    [host, front].compact.each do |pid|
      Process.kill("TERM", pid)
      Process.wait(pid)
    end
  end
end
