# A stand-in for the parts of Homebrew the tap's formula uses, to run it on Linux (Homebrew
# itself is not here): the formula is loaded as Homebrew loads it (a Formula subclass and its
# DSL), its url and resources are fetched from file:// URLs and checked against their sha256,
# the source tarball is unpacked, `install` runs with Homebrew's std_meson_args into a keg
# directory, then `test do` runs in a scratch testpath, and the `service do` block is read.
# What is not Homebrew's: no sandbox, no dependency resolution (the system's libraries are
# used), no bottle, linkage or audit checks.
#
#   ruby tests/packaging/brew_harness.rb FORMULA WORKDIR
#
# Prints one line per step; exits 1 at the first failure.
require "digest"
require "fileutils"
require "minitest"
require "pathname"
require "tmpdir"
require "uri"

$stdout.sync = true
def say(msg) = puts("brew-harness: #{msg}")

def die(msg)
  warn "brew-harness: FAIL #{msg}"
  exit 1
end

# Fetches a file:// URL into dir, checks its sha256; returns the path.
def fetch(url, sha256, dir)
  u = URI(url)
  die "#{url}: only file:// URLs are fetched here" unless u.scheme == "file"
  src = URI.decode_www_form_component(u.path)
  die "#{url}: no such file" unless File.file?(src)
  got = Digest::SHA256.file(src).hexdigest
  die "#{url}: sha256 #{got}, the formula says #{sha256}" unless got == sha256
  FileUtils.mkdir_p(dir)
  dst = File.join(dir, File.basename(src))
  FileUtils.cp(src, dst)
  dst
end

# Homebrew's Pathname#install: moves files into the directory, "a" => "b" renames.
class Pathname
  def install(*sources)
    mkpath
    sources.flatten.each do |s|
      pairs = s.is_a?(Hash) ? s : { s => File.basename(s.to_s) }
      pairs.each do |from, to|
        raise "install: #{from} does not exist" unless File.exist?(from.to_s)

        FileUtils.mv(from.to_s, (self/to).to_s)
      end
    end
  end
end

class Resource
  attr_reader :name

  def initialize(name, formula_class)
    @name = name
    @formula_class = formula_class
  end

  def url(u = nil) = u ? @url = u : @url

  def sha256(s = nil) = s ? @sha256 = s : @sha256

  def stage
    Dir.mktmpdir("resource-#{@name}") do |d|
      fetch(@url, @sha256, d)
      Dir.chdir(d) { yield }
    end
  end
end

class BuildError < StandardError; end

class Formula
  include FileUtils
  include Minitest::Assertions
  attr_accessor :assertions

  class << self
    attr_reader :deps, :resources, :service_block, :test_block

    def inherited(sub)
      super
      (@subclasses ||= []) << sub
    end

    def subclasses = @subclasses || []

    # head "URL", using: :git: the options are Homebrew's download strategy, not needed here.
    %i[desc homepage url sha256 license head].each do |m|
      define_method(m) { |v = nil, **_| v ? instance_variable_set("@#{m}", v) : instance_variable_get("@#{m}") }
    end

    def depends_on(spec)
      (@deps ||= []) << spec
    end

    def resource(name, &block)
      r = Resource.new(name, self)
      r.instance_eval(&block)
      (@resources ||= {})[name] = r
    end

    def service(&block) = @service_block = block

    def test(&block) = @test_block = block
  end

  attr_reader :prefix, :testpath
  # While set, what `system` runs writes its output there (Homebrew keeps build logs too).
  attr_accessor :log

  def initialize(keg, var)
    @prefix = Pathname(keg)
    @var = Pathname(var)
    @assertions = 0
  end

  def name = "sockferry"
  def version = self.class.url[/-(\d[\w.]*)\.tar\./, 1]
  def bin = prefix/"bin"
  def lib = prefix/"lib"
  def libexec = prefix/"libexec"
  def share = prefix/"share"
  def pkgshare = share/name
  # The keg is its own opt_prefix here.
  def opt_bin = bin
  def opt_pkgshare = pkgshare
  def var = @var
  def std_meson_args = %W[--prefix=#{prefix} --libdir=#{lib} --buildtype=release --wrap-mode=nofallback]

  def resource(name) = self.class.resources.fetch(name)

  def system(*args)
    redirect = @log ? { out: [@log, "a"], err: %i[child out] } : {}
    ok = Kernel.system(*args.map(&:to_s), **redirect)
    raise BuildError, "#{args.join(" ")} failed (#{$?.exitstatus})" unless ok
  end

  def shell_output(cmd, result = nil)
    out = `#{cmd}`
    assert_equal result, $?.exitstatus, "#{cmd}: exit status" unless result.nil?
    out
  end

  def run_test(dir)
    @testpath = Pathname(dir)
    instance_eval(&self.class.test_block)
  end
end

class Service
  attr_reader :args, :keep, :log, :error_log

  def initialize(formula) = @formula = formula
  def run(args) = @args = args
  def keep_alive(v) = @keep = v
  def log_path(p) = @log = p
  def error_log_path(p) = @error_log = p
  def method_missing(name, *a) = @formula.respond_to?(name) ? @formula.send(name, *a) : super
  def respond_to_missing?(name, all = false) = @formula.respond_to?(name) || super
end

formula_file, work = ARGV
die "usage: brew_harness.rb FORMULA WORKDIR" unless formula_file && work
work = File.expand_path(work)
FileUtils.rm_rf(work)
FileUtils.mkdir_p(work)
load File.expand_path(formula_file)
klass = Formula.subclasses.first or die "#{formula_file} defines no Formula subclass"
say "#{klass.name}: #{klass.desc}"
# homepage is left out while the project has none (packaging/release.sh).
%i[url sha256 head license].each { |m| die "no #{m}" unless klass.send(m) }
say "url #{klass.url}, sha256 #{klass.sha256}, head #{klass.head}"
die "resources: #{klass.resources&.keys.inspect}, expected linux-x86_64 and linux-aarch64" unless
  klass.resources&.keys&.sort == %w[linux-aarch64 linux-x86_64]

keg = File.join(work, "Cellar/sockferry")
f = klass.new(keg, File.join(work, "var"))
tarball = fetch(klass.url, klass.sha256, File.join(work, "download"))
src = File.join(work, "src")
FileUtils.mkdir_p(src)
Kernel.system("tar", "-C", src, "-xf", tarball) or die "tar -xf #{tarball}"
top = Dir.children(src)
die "the tarball holds #{top.inspect}, expected one directory" unless top.size == 1
f.log = File.join(work, "install.log")
begin
  Dir.chdir(File.join(src, top.first)) { f.install }
rescue BuildError, RuntimeError => e
  warn File.read(f.log).lines.last(30).join if File.exist?(f.log)
  die "install: #{e.message} (log: #{f.log})"
end
f.log = nil
say "install: #{Dir.glob("#{keg}/**/*").count { |p| File.file?(p) }} files in the keg"

svc = Service.new(f)
svc.instance_eval(&klass.service_block)
die "service run: #{svc.args.inspect}" unless svc.args&.first.to_s == "#{keg}/bin/sockferry"
say "service: #{svc.args.map(&:to_s).join(" ")} (keep_alive #{svc.keep}, log #{svc.log})"

Dir.mktmpdir("sockferry-test") do |t|
  Dir.chdir(t) do
    old_home = ENV["HOME"]
    ENV["HOME"] = t
    begin
      f.run_test(t)
    rescue Minitest::Assertion, StandardError => e
      die "test do: #{e.class}: #{e.message}"
    ensure
      ENV["HOME"] = old_home
    end
  end
end
say "test do: #{f.assertions} assertions passed"
