/* The plain words of link failures, shared by the relay and `sockferry check`. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "conf/endpoint.h"
#include "relay/linkmsg.h"
#include "relay/platform.h"

Test(linkmsg, status_kinds) {
        char out[512];
        cr_assert_eq(sf_link_status_explain(0, SF_HS_OK, "", "tcp:h:1", NULL, out, sizeof out), SF_LINK_OK);
        cr_assert_str_empty(out);
        /* an OK whose MAC does not verify comes from a peer without our token */
        cr_assert_eq(sf_link_status_explain(-EACCES, SF_HS_OK, "", "tcp:h:1", "/t", out, sizeof out), SF_LINK_AUTH);
        cr_assert(strstr(out, "auth rejected: tcp:h:1") && strstr(out, "/t"), "%s", out);
        cr_assert_eq(sf_link_status_explain(-EACCES, SF_HS_AUTH_REJECTED, "", "tcp:h:1", NULL, out, sizeof out),
                     SF_LINK_AUTH);
        cr_assert_eq(sf_link_status_explain(0, SF_HS_UPSTREAM_UNAVAILABLE, "unix:/x: refused", "tcp:h:1", NULL, out,
                                            sizeof out),
                     SF_LINK_UPSTREAM);
        cr_assert(strstr(out, "upstream unavailable") && strstr(out, "unix:/x: refused"), "%s", out);
        cr_assert_eq(sf_link_status_explain(0, SF_HS_VERSION_MISMATCH, "", "tcp:h:1", NULL, out, sizeof out),
                     SF_LINK_OTHER);
        cr_assert(strstr(out, "version mismatch"), "%s", out);
        cr_assert_eq(sf_link_status_explain(0, 77, "later", "tcp:h:1", NULL, out, sizeof out), SF_LINK_OTHER);
        cr_assert(strstr(out, "status 77"), "%s", out);
}

Test(linkmsg, wrong_peer_quotes_the_banner) {
        char out[512];
        const char *banner = "SSH-2.0-OpenSSH_9.2p1\r\n";
        cr_assert_eq(sf_link_wrong_peer((const uint8_t *)banner, strlen(banner), "tcp:h:22", out, sizeof out),
                     SF_LINK_WRONG_PEER);
        cr_assert(strstr(out, "wrong peer: tcp:h:22") && strstr(out, "\"SSH-2.0-OpenSSH_9.2p1\""), "%s", out);
        cr_assert_eq(sf_link_wrong_peer((const uint8_t *)"\x16\x03\x01", 3, "tcp:h:443", out, sizeof out),
                     SF_LINK_WRONG_PEER);
        cr_assert(strstr(out, "it sent \"\\x16\\x03\\x01\""), "%s", out);
}

Test(linkmsg, vsock_denied_points_to_tcp) {
        struct sf_endpoint ep;
        char out[512];
        cr_assert_eq(sf_endpoint_parse("vsock:host:7000", &ep, NULL, 0), 0);
        sf_link_connect_cause(&ep, EPERM, out, sizeof out);
        cr_assert(strstr(out, "seccomp") && strstr(out, "tcp:"), "%s", out);
        sf_link_connect_cause(&ep, EACCES, out, sizeof out);
        cr_assert(strstr(out, "seccomp"), "%s", out);
        sf_link_connect_cause(&ep, EAFNOSUPPORT, out, sizeof out);
        /* The portable build says what macOS says: no vsock there at all. */
        cr_assert(strstr(out, sf_af_vsock < 0 ? "vsock exists on Linux only" : "no vsock support"), "%s", out);
        sf_link_connect_cause(&ep, ECONNREFUSED, out, sizeof out);
        cr_assert(strstr(out, "host-side relay"), "%s", out);
}

Test(linkmsg, vsock_endpoints_parse) {
        struct sf_endpoint ep;
        cr_assert_eq(sf_endpoint_parse("vsock:any:5000", &ep, NULL, 0), 0);
        cr_assert_eq(ep.kind, SF_EP_VSOCK);
        cr_assert_eq(ep.cid, SF_VSOCK_CID_ANY);
        cr_assert_eq(ep.port, 5000);
        cr_assert_eq(sf_endpoint_parse("vsock:host:5000", &ep, NULL, 0), 0);
        cr_assert_eq(ep.cid, SF_VSOCK_CID_HOST);
        cr_assert_eq(sf_endpoint_parse("vsock:42:5000", &ep, NULL, 0), 0);
        cr_assert_eq(ep.cid, 42);
        cr_assert_lt(sf_endpoint_parse("vsock:42", &ep, NULL, 0), 0);
}
