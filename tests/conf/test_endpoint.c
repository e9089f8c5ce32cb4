/* Endpoint syntax (conf/endpoint.c): every kind and every error branch. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "conf/endpoint.h"

#define EXPECTED "expected unix:/abs/path, unix:@name, tcp:HOST:PORT, tcp:[V6]:PORT, vsock:CID|host|any:PORT, systemd:NAME or fd:N"

static struct sf_endpoint parse_ok(const char *s) {
        struct sf_endpoint ep;
        char err[512] = "";
        cr_assert_eq(sf_endpoint_parse(s, &ep, err, sizeof err), 0, "%s: %s", s, err);
        cr_assert_str_eq(ep.text, s);
        return ep;
}

static void assert_parse_error(const char *s, const char *want) {
        struct sf_endpoint ep;
        char err[512] = "";
        cr_assert_eq(sf_endpoint_parse(s, &ep, err, sizeof err), -EINVAL, "%s was accepted", s);
        cr_assert_str_eq(err, want, "for %s", s);
}

/* "PREFIX" followed by n copies of c and then "SUFFIX". */
static const char *repeat(char *buf, size_t size, const char *prefix, char c, size_t n, const char *suffix) {
        size_t p = strlen(prefix);
        cr_assert_lt(p + n + strlen(suffix), size);
        memcpy(buf, prefix, p);
        memset(buf + p, c, n);
        strcpy(buf + p + n, suffix);
        return buf;
}

Test(endpoint, unix_path) {
        struct sf_endpoint ep = parse_ok("unix:/run/x.sock");
        cr_assert_eq(ep.kind, SF_EP_UNIX);
        cr_assert_str_eq(ep.path, "/run/x.sock");
        cr_assert_eq(ep.fd, -1);

        char buf[400];
        ep = parse_ok(repeat(buf, sizeof buf, "unix:/", 'a', 106, ""));
        cr_assert_eq(strlen(ep.path), 107);
}

Test(endpoint, abstract) {
        struct sf_endpoint ep = parse_ok("unix:@sockferry-ctl");
        cr_assert_eq(ep.kind, SF_EP_ABSTRACT);
        cr_assert_str_eq(ep.path, "sockferry-ctl");
}

Test(endpoint, tcp) {
        struct sf_endpoint ep = parse_ok("tcp:127.0.0.1:7000");
        cr_assert_eq(ep.kind, SF_EP_TCP);
        cr_assert_str_eq(ep.host, "127.0.0.1");
        cr_assert_eq(ep.port, 7000);

        ep = parse_ok("tcp:[::1]:80");
        cr_assert_str_eq(ep.host, "::1");
        cr_assert_eq(ep.port, 80);

        ep = parse_ok("tcp:[fe80::1%eth0]:65535");
        cr_assert_str_eq(ep.host, "fe80::1%eth0");
        cr_assert_eq(ep.port, 65535);

        ep = parse_ok("tcp:host.docker.internal:1");
        cr_assert_str_eq(ep.host, "host.docker.internal");
        cr_assert_eq(ep.port, 1);
}

Test(endpoint, vsock) {
        struct sf_endpoint ep = parse_ok("vsock:host:1024");
        cr_assert_eq(ep.kind, SF_EP_VSOCK);
        cr_assert_eq(ep.cid, SF_VSOCK_CID_HOST);
        cr_assert_eq(ep.port, 1024);

        ep = parse_ok("vsock:any:5000");
        cr_assert_eq(ep.cid, SF_VSOCK_CID_ANY);

        ep = parse_ok("vsock:3:0");
        cr_assert_eq(ep.cid, 3);
        cr_assert_eq(ep.port, 0);

        ep = parse_ok("vsock:4294967294:4294967294");
        cr_assert_eq(ep.cid, 4294967294u);
        cr_assert_eq(ep.port, 4294967294u);
}

Test(endpoint, systemd_and_fd) {
        struct sf_endpoint ep = parse_ok("systemd:dispatch");
        cr_assert_eq(ep.kind, SF_EP_SYSTEMD);
        cr_assert_str_eq(ep.path, "dispatch");

        ep = parse_ok("fd:3");
        cr_assert_eq(ep.kind, SF_EP_FD);
        cr_assert_eq(ep.fd, 3);
}

Test(endpoint, parse_n_stops_at_len) {
        struct sf_endpoint ep;
        char err[256];
        const char *s = "unix:/a|tcp:x:1";
        cr_assert_eq(sf_endpoint_parse_n(s, 7, &ep, err, sizeof err), 0, "%s", err);
        cr_assert_str_eq(ep.path, "/a");
        cr_assert_eq(sf_endpoint_parse_n("unix:/a\0b", 9, &ep, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "endpoint contains a NUL byte");
        cr_assert_eq(sf_endpoint_parse("x", &ep, NULL, 0), -EINVAL);
}

/* The forms people paste: Windows' own path and Docker's DOCKER_HOST, either slash. */
Test(endpoint, npipe) {
        static const char *const forms[] = {
                "npipe:openssh-ssh-agent",          "npipe:\\\\.\\pipe\\openssh-ssh-agent",
                "npipe:////./pipe/openssh-ssh-agent", "npipe://./pipe/openssh-ssh-agent",
                "npipe:\\\\.\\PIPE\\openssh-ssh-agent",
        };
        for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
                struct sf_endpoint ep = parse_ok(forms[i]);
                cr_assert_eq(ep.kind, SF_EP_NPIPE);
                cr_assert_str_eq(ep.pipe, "openssh-ssh-agent", "%s", forms[i]);
        }
        struct sf_endpoint a = parse_ok("npipe:Docker_Engine"), b = parse_ok("npipe:////./pipe/docker_engine");
        cr_assert(sf_endpoint_equal(&a, &b), "pipe names are case-insensitive");
        cr_assert_str_eq(sf_endpoint_kind_name(SF_EP_NPIPE), "npipe");
        /* A name may hold a backslash below the pipe root, as Windows allows. */
        cr_assert_str_eq(parse_ok("npipe:app\\agent").pipe, "app\\agent");
        char buf[400];
        cr_assert_eq(strlen(parse_ok(repeat(buf, sizeof buf, "npipe:", 'p', SF_NPIPE_NAME_MAX, "")).pipe),
                     SF_NPIPE_NAME_MAX);
}

Test(endpoint, npipe_errors) {
        char buf[400], want[600];
        assert_parse_error("npipe:", "npipe:: empty pipe name, expected npipe:NAME (for \\\\.\\pipe\\NAME)");
        assert_parse_error("npipe:\\\\.\\pipe\\", "npipe:\\\\.\\pipe\\: empty pipe name, expected npipe:NAME (for \\\\.\\pipe\\NAME)");
        assert_parse_error("npipe:\\\\server\\pipe\\x",
                           "npipe:\\\\server\\pipe\\x: only pipes on this machine are supported (\\\\.\\pipe\\NAME); reach another host over tcp:");
        assert_parse_error("npipe:///./pipe/x", "npipe:///./pipe/x: bad pipe path, expected npipe:NAME or npipe:\\\\.\\pipe\\NAME");
        assert_parse_error("npipe://./pipes/x", "npipe://./pipes/x: bad pipe path, expected npipe:\\\\.\\pipe\\NAME");
        assert_parse_error("npipe:a\tb", "npipe:a\tb: control character in the pipe name");
        repeat(buf, sizeof buf, "npipe:", 'p', SF_NPIPE_NAME_MAX + 1, "");
        snprintf(want, sizeof want, "%s: pipe name is too long (247 characters at most)", buf);
        assert_parse_error(buf, want);
}

/* Linux's build refuses them (conf/platform_posix.c); parsing alone is the same everywhere. */
Test(endpoint, npipe_is_windows_only_here) {
        struct sf_endpoint ep = parse_ok("npipe:x");
        char err[300] = "";
        cr_assert_eq(sf_endpoint_supported(&ep, err, sizeof err), -EINVAL);
        cr_assert_str_eq(err, "npipe:x: named pipes are Windows' (sockferry.exe); on Linux use unix:/path or tcp:HOST:PORT");
        ep = parse_ok("tcp:127.0.0.1:1");
        cr_assert_eq(sf_endpoint_supported(&ep, err, sizeof err), 0);
}

Test(endpoint, generic_errors) {
        char buf[400];
        assert_parse_error("", "empty endpoint, " EXPECTED);
        assert_parse_error(repeat(buf, sizeof buf, "unix:/", 'a', 300, ""), "endpoint is too long (299 bytes at most)");
        assert_parse_error("/run/x.sock", "/run/x.sock: missing transport, did you mean unix:/run/x.sock?");
        assert_parse_error("http://x", "http://x: unknown endpoint type, " EXPECTED);
        assert_parse_error("UNIX:/a", "UNIX:/a: unknown endpoint type, " EXPECTED);
}

Test(endpoint, unix_errors) {
        char buf[400], want[600];
        assert_parse_error("unix:run/x.sock", "unix:run/x.sock: unix socket path must be absolute, expected unix:/abs/path");
        assert_parse_error("unix:", "unix:: unix socket path must be absolute, expected unix:/abs/path");
        assert_parse_error("unix:@", "unix:@: empty abstract socket name, expected unix:@name");

        repeat(buf, sizeof buf, "unix:/", 'a', 107, "");
        snprintf(want, sizeof want, "%s: unix socket path is too long (107 bytes at most, a kernel limit); use a shorter directory", buf);
        assert_parse_error(buf, want);

        repeat(buf, sizeof buf, "unix:@", 'a', 108, "");
        snprintf(want, sizeof want, "%s: abstract name is too long (106 bytes at most)", buf);
        assert_parse_error(buf, want);
}

Test(endpoint, tcp_errors) {
        char buf[400], want[600];
        assert_parse_error("tcp:[::1:80", "tcp:[::1:80: missing ']' after an IPv6 address, expected tcp:[V6]:PORT");
        assert_parse_error("tcp:[]:80", "tcp:[]:80: bad IPv6 address in brackets, expected tcp:[V6]:PORT");
        assert_parse_error("tcp:[abc]:80", "tcp:[abc]:80: bad IPv6 address in brackets, expected tcp:[V6]:PORT");
        assert_parse_error("tcp:[::1]", "tcp:[::1]: missing port, expected tcp:[V6]:PORT");
        assert_parse_error("tcp:[::1]80", "tcp:[::1]80: missing port, expected tcp:[V6]:PORT");
        assert_parse_error("tcp:localhost", "tcp:localhost: missing port, expected tcp:HOST:PORT");
        assert_parse_error("tcp::80", "tcp::80: missing host, expected tcp:HOST:PORT (tcp:127.0.0.1:PORT for loopback, tcp:0.0.0.0:PORT for every address)");
        assert_parse_error("tcp:::1:80", "tcp:::1:80: an IPv6 address needs brackets, expected tcp:[V6]:PORT");
        assert_parse_error("tcp:ho st:80", "tcp:ho st:80: bad character in host name, expected tcp:HOST:PORT");
        assert_parse_error("tcp:a/b:80", "tcp:a/b:80: bad character in host name, expected tcp:HOST:PORT");
        assert_parse_error("tcp:h:0", "tcp:h:0: bad port, expected a number from 1 to 65535");
        assert_parse_error("tcp:h:65536", "tcp:h:65536: bad port, expected a number from 1 to 65535");
        assert_parse_error("tcp:h:", "tcp:h:: bad port, expected a number from 1 to 65535");
        assert_parse_error("tcp:h:http", "tcp:h:http: bad port, expected a number from 1 to 65535");
        assert_parse_error("tcp:[::1]:0", "tcp:[::1]:0: bad port, expected a number from 1 to 65535");

        repeat(buf, sizeof buf, "tcp:", 'h', 256, ":80");
        snprintf(want, sizeof want, "%s: host is too long", buf);
        assert_parse_error(buf, want);
        repeat(buf, sizeof buf, "tcp:[::", 'a', 254, "]:80");
        snprintf(want, sizeof want, "%s: host is too long", buf);
        assert_parse_error(buf, want);
}

Test(endpoint, vsock_errors) {
        assert_parse_error("vsock:2", "vsock:2: missing port, expected vsock:CID|host|any:PORT");
        assert_parse_error("vsock:guest:1", "vsock:guest:1: bad CID, expected a number, 'host' (CID 2) or 'any'");
        assert_parse_error("vsock::1", "vsock::1: bad CID, expected a number, 'host' (CID 2) or 'any'");
        assert_parse_error("vsock:4294967295:1", "vsock:4294967295:1: bad CID, expected a number, 'host' (CID 2) or 'any'");
        assert_parse_error("vsock:host:x", "vsock:host:x: bad vsock port, expected a number below 4294967295");
        assert_parse_error("vsock:host:", "vsock:host:: bad vsock port, expected a number below 4294967295");
        assert_parse_error("vsock:host:4294967295", "vsock:host:4294967295: bad vsock port, expected a number below 4294967295");
}

Test(endpoint, systemd_fd_errors) {
        char buf[400], want[600];
        assert_parse_error("systemd:", "systemd:: empty name, expected systemd:NAME (a FileDescriptorName= of the socket unit)");
        assert_parse_error("systemd:a:b", "systemd:a:b: bad character in name, expected systemd:NAME");
        assert_parse_error("systemd:a b", "systemd:a b: bad character in name, expected systemd:NAME");
        repeat(buf, sizeof buf, "systemd:", 'n', 108, "");
        snprintf(want, sizeof want, "%s: name is too long", buf);
        assert_parse_error(buf, want);
        assert_parse_error("fd:", "fd:: bad file descriptor, expected fd:N with N a number (3 is the first passed by systemd)");
        assert_parse_error("fd:x", "fd:x: bad file descriptor, expected fd:N with N a number (3 is the first passed by systemd)");
        assert_parse_error("fd:65536", "fd:65536: bad file descriptor, expected fd:N with N a number (3 is the first passed by systemd)");
}

Test(endpoint, equal) {
        struct sf_endpoint a = parse_ok("tcp:LOCALHOST:80"), b = parse_ok("tcp:localhost:80");
        cr_assert(sf_endpoint_equal(&a, &b), "host names compare without case");
        b = parse_ok("tcp:localhost:81");
        cr_assert(!sf_endpoint_equal(&a, &b));
        a = parse_ok("unix:/a");
        b = parse_ok("unix:@a");
        cr_assert(!sf_endpoint_equal(&a, &b), "a path and an abstract name are different sockets");
        b = parse_ok("unix:/a");
        cr_assert(sf_endpoint_equal(&a, &b));
        a = parse_ok("vsock:host:1");
        b = parse_ok("vsock:2:1");
        cr_assert(sf_endpoint_equal(&a, &b));
        a = parse_ok("fd:3");
        b = parse_ok("fd:4");
        cr_assert(!sf_endpoint_equal(&a, &b));
        a = parse_ok("systemd:x");
        b = parse_ok("systemd:x");
        cr_assert(sf_endpoint_equal(&a, &b));
}

Test(endpoint, loopback) {
        static const char *const yes[] = { "tcp:127.0.0.1:1", "tcp:127.1.2.3:1", "tcp:[::1]:1", "tcp:localhost:1", "tcp:LocalHost:1" };
        static const char *const no[] = { "tcp:0.0.0.0:1", "tcp:[::]:1", "tcp:10.0.0.1:1", "tcp:host.docker.internal:1", "unix:/a" };
        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
                struct sf_endpoint ep = parse_ok(yes[i]);
                cr_assert(sf_endpoint_is_loopback(&ep), "%s", yes[i]);
        }
        for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
                struct sf_endpoint ep = parse_ok(no[i]);
                cr_assert(!sf_endpoint_is_loopback(&ep), "%s", no[i]);
        }
}

Test(endpoint, kind_names) {
        cr_assert_str_eq(sf_endpoint_kind_name(SF_EP_UNIX), "unix");
        cr_assert_str_eq(sf_endpoint_kind_name(SF_EP_ABSTRACT), "unix (abstract)");
        cr_assert_str_eq(sf_endpoint_kind_name(SF_EP_TCP), "tcp");
        cr_assert_str_eq(sf_endpoint_kind_name(SF_EP_VSOCK), "vsock");
        cr_assert_str_eq(sf_endpoint_kind_name(SF_EP_SYSTEMD), "systemd");
        cr_assert_str_eq(sf_endpoint_kind_name(SF_EP_FD), "fd");
        cr_assert_str_eq(sf_endpoint_kind_name((enum sf_endpoint_kind)0), "?");
}
