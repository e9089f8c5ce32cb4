/* The plain words of link failures, shared by the relay and `sockferry check`. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "conf/endpoint.h"
#include "relay/link/messages.h"
#include "relay/sys/platform.h"

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

/* A relay that greeted and then closed is a relay, not a "wrong peer": under a flood of
 * unauthenticated connections its pre-auth budget closes the oldest. */
Test(linkmsg, closed_after_greeting_is_not_a_wrong_peer) {
        char out[512];
        cr_assert_eq(sf_link_status_eof("tcp:h:1", out, sizeof out), SF_LINK_OTHER);
        cr_assert(strstr(out, "the relay at tcp:h:1 greeted us, then closed") && strstr(out, "unauthenticated"),
                  "%s", out);
        cr_assert_null(strstr(out, "wrong peer"), "%s", out);
        cr_assert_null(strstr(out, "plain TCP"), "%s", out);
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

/* auth = token only on the host: the container side (auth = none) gets the host relay's
 * greeting as the upstream's first bytes (issue 16). */
Test(linkmsg, greeting_where_auth_none_names_the_fix) {
        char out[512];
        uint8_t hello[SF_HS_HELLO_LEN];
        uint8_t nonce[SF_HS_NONCE_LEN] = { 0 };
        sf_hs_hello_build(hello, nonce);
        cr_assert(sf_link_greeting_unexpected(hello, sizeof hello, "tcp:host.docker.internal:7777", "docker", out,
                                              sizeof out));
        cr_assert_str_eq(out, "wrong peer: tcp:host.docker.internal:7777 is a sockferry relay with auth = token (it "
                              "sent the sockferry/1 greeting), and this forward has auth = none: set auth = token and "
                              "token-file (the same token as that relay's) in [docker] here; the connection was "
                              "closed so the greeting does not reach the client as data");
        /* another version is still a relay; the magic alone, or other bytes, are not judged */
        cr_assert(sf_link_greeting_unexpected((const uint8_t *)"SFRY\x02", 5, "tcp:h:1", "d", out, sizeof out));
        cr_assert(strstr(out, "sockferry/2 greeting"), "%s", out);
        cr_assert_not(sf_link_greeting_unexpected((const uint8_t *)"SFRY", 4, "tcp:h:1", "d", out, sizeof out));
        cr_assert_not(sf_link_greeting_unexpected((const uint8_t *)"HTTP/1.1 200 OK\r\n", 17, "tcp:h:1", "d", out,
                                                  sizeof out));
        cr_assert_not(sf_link_greeting_unexpected(NULL, 0, "tcp:h:1", "d", out, sizeof out));
}

/* auth = token only in the container: the host relay (auth = none) waits for its client and
 * sends nothing. The usual fix is on the host relay; both causes are named (issue 16). */
Test(linkmsg, silence_names_both_causes) {
        char out[512];
        cr_assert_eq(sf_link_hello_timeout(5000, "tcp:host.docker.internal:7777", out, sizeof out), SF_LINK_WRONG_PEER);
        cr_assert_str_eq(out, "wrong peer: tcp:host.docker.internal:7777 sent nothing within 5000ms: it may be a plain "
                              "TCP service (then auth = none here) or, the usual case, a sockferry relay with auth = "
                              "none: set auth = token and the same token-file on that relay (one with auth = token "
                              "greets at once)");
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
