#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "relay/link/frames.h"

static struct sf_hs_key key;
static uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];

static void setup(void) {
        cr_assert_eq(sf_hs_init(), 0);
        key.len = 32;
        for (size_t i = 0; i < key.len; i++)
                key.bytes[i] = (uint8_t)i;
        for (size_t i = 0; i < SF_HS_NONCE_LEN; i++) {
                snonce[i] = (uint8_t)(0x40 + i);
                cnonce[i] = (uint8_t)(0x60 + i);
        }
}

TestSuite(handshake, .init = setup);

Test(handshake, init_is_idempotent) {
        cr_assert_eq(sf_hs_init(), 0);
        cr_assert_eq(sf_hs_init(), 0);
}

Test(handshake, status_names) {
        cr_assert_str_eq(sf_hs_status_name(SF_HS_OK), "ok");
        cr_assert_str_eq(sf_hs_status_name(SF_HS_AUTH_REJECTED), "auth rejected");
        cr_assert_str_eq(sf_hs_status_name(SF_HS_UPSTREAM_UNAVAILABLE), "upstream unavailable");
        cr_assert_str_eq(sf_hs_status_name(SF_HS_VERSION_MISMATCH), "version mismatch");
        cr_assert_str_eq(sf_hs_status_name(SF_HS_BAD_FRAME), "bad frame");
        cr_assert_str_eq(sf_hs_status_name(SF_HS_UNKNOWN_SERVICE), "unknown service");
        cr_assert_str_eq(sf_hs_status_name((enum sf_hs_status)9), "unknown status");
}

Test(handshake, nonces_are_fresh) {
        uint8_t a[SF_HS_NONCE_LEN], b[SF_HS_NONCE_LEN], zero[SF_HS_NONCE_LEN] = { 0 };
        sf_hs_nonce_new(a);
        sf_hs_nonce_new(b);
        cr_assert_neq(memcmp(a, b, sizeof a), 0);
        cr_assert_neq(memcmp(a, zero, sizeof a), 0);
}

Test(handshake, prefix_check) {
        uint8_t v = 0xee;
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"", 0, &v), 0);
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"S", 1, &v), 0);
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"SFR", 3, &v), 0);
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"SFRY", 4, &v), 0);
        cr_assert_eq(v, 0xee, "version is not known after 4 bytes");
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"SFRY\x01", 5, &v), 0);
        cr_assert_eq(v, 1);
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"SFRY\x02garbage", 12, &v), -EPROTONOSUPPORT);
        cr_assert_eq(v, 2);
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"SFRY\x00", 5, NULL), -EPROTONOSUPPORT);
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"X", 1, &v), -EPROTO);
        /* An SSH banner is told apart at its second byte. */
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"SSH-2.0-OpenSSH", 2, &v), -EPROTO);
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"SFRX\x01", 5, &v), -EPROTO);
        cr_assert_eq(sf_hs_prefix_check((const uint8_t *)"HTTP/1.1 400 Bad Request\r\n", 26, &v), -EPROTO);
}

Test(handshake, hello_round_trip) {
        uint8_t hello[SF_HS_HELLO_LEN], got[SF_HS_NONCE_LEN], v = 0;
        sf_hs_hello_build(hello, snonce);
        cr_assert_eq(memcmp(hello, "SFRY\x01", 5), 0);
        cr_assert_eq(sf_hs_hello_parse(hello, got, &v), 0);
        cr_assert_eq(v, SF_HS_VERSION);
        cr_assert_eq(memcmp(got, snonce, sizeof got), 0);
        cr_assert_eq(sf_hs_hello_parse(hello, got, NULL), 0);
}

Test(handshake, hello_wrong_magic_and_version) {
        uint8_t hello[SF_HS_HELLO_LEN], got[SF_HS_NONCE_LEN], v = 0;
        sf_hs_hello_build(hello, snonce);
        hello[0] = 's';
        cr_assert_eq(sf_hs_hello_parse(hello, got, &v), -EPROTO);
        sf_hs_hello_build(hello, snonce);
        hello[3] ^= 0x80;
        cr_assert_eq(sf_hs_hello_parse(hello, got, &v), -EPROTO);
        sf_hs_hello_build(hello, snonce);
        hello[4] = 2;
        cr_assert_eq(sf_hs_hello_parse(hello, got, &v), -EPROTONOSUPPORT);
        cr_assert_eq(v, 2);
        hello[4] = 0;
        cr_assert_eq(sf_hs_hello_parse(hello, got, &v), -EPROTONOSUPPORT);
        cr_assert_eq(v, 0);
}

Test(handshake, hello_every_bit_of_the_header_matters) {
        uint8_t hello[SF_HS_HELLO_LEN], got[SF_HS_NONCE_LEN], v;
        for (size_t bit = 0; bit < 5 * 8; bit++) {
                sf_hs_hello_build(hello, snonce);
                hello[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                int r = sf_hs_hello_parse(hello, got, &v);
                cr_assert_eq(r, bit < 32 ? -EPROTO : -EPROTONOSUPPORT, "bit %zu: %d", bit, r);
        }
}

Test(handshake, client_round_trip) {
        uint8_t frame[SF_HS_CLIENT_LEN], got[SF_HS_NONCE_LEN], flags = 0xee, v = 0;
        for (unsigned f = 0; f <= SF_HS_FLAGS_KNOWN; f++) {
                sf_hs_client_build(frame, &key, snonce, cnonce, (uint8_t)f);
                cr_assert_eq(memcmp(frame, "SFRY\x01", 5), 0);
                cr_assert_eq(frame[5], f);
                cr_assert_eq(memcmp(frame + 6, cnonce, SF_HS_NONCE_LEN), 0);
                memset(got, 0, sizeof got);
                cr_assert_eq(sf_hs_client_verify(frame, &key, snonce, got, &flags, &v), 0);
                cr_assert_eq(flags, f);
                cr_assert_eq(v, SF_HS_VERSION);
                cr_assert_eq(memcmp(got, cnonce, sizeof got), 0);
        }
}

Test(handshake, client_keys_of_every_allowed_length) {
        uint8_t frame[SF_HS_CLIENT_LEN], got[SF_HS_NONCE_LEN], flags;
        struct sf_hs_key k = { .len = 0 };
        for (size_t i = 0; i < SF_HS_KEY_MAX; i++)
                k.bytes[i] = (uint8_t)(i * 7 + 1);
        for (k.len = SF_HS_KEY_MIN; k.len <= SF_HS_KEY_MAX; k.len++) {
                sf_hs_client_build(frame, &k, snonce, cnonce, 0);
                cr_assert_eq(sf_hs_client_verify(frame, &k, snonce, got, &flags, NULL), 0, "key length %zu", k.len);
                cr_assert_eq(sf_hs_client_verify(frame, &key, snonce, got, &flags, NULL), -EACCES);
        }
}

Test(handshake, client_wrong_key_or_nonce) {
        uint8_t frame[SF_HS_CLIENT_LEN], got[SF_HS_NONCE_LEN], other[SF_HS_NONCE_LEN], flags;
        struct sf_hs_key k2 = key;
        sf_hs_client_build(frame, &key, snonce, cnonce, 0);

        k2.bytes[31] ^= 1;
        cr_assert_eq(sf_hs_client_verify(frame, &k2, snonce, got, &flags, NULL), -EACCES);
        k2 = key;
        k2.len = 33;
        k2.bytes[32] = 1;
        cr_assert_eq(sf_hs_client_verify(frame, &k2, snonce, got, &flags, NULL), -EACCES);

        /* A frame recorded on one connection is worthless on the next: other server nonce. */
        memcpy(other, snonce, sizeof other);
        other[0] ^= 1;
        cr_assert_eq(sf_hs_client_verify(frame, &key, other, got, &flags, NULL), -EACCES);
}

Test(handshake, client_flipped_bit_anywhere) {
        uint8_t frame[SF_HS_CLIENT_LEN], got[SF_HS_NONCE_LEN], flags, v;
        for (size_t bit = 0; bit < SF_HS_CLIENT_LEN * 8; bit++) {
                sf_hs_client_build(frame, &key, snonce, cnonce, SF_HS_FLAG_PROBE);
                frame[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                int want = bit < 32 ? -EPROTO : bit < 40 ? -EPROTONOSUPPORT : -EACCES;
                int r = sf_hs_client_verify(frame, &key, snonce, got, &flags, &v);
                cr_assert_eq(r, want, "bit %zu: got %d, expected %d", bit, r, want);
        }
}

Test(handshake, client_unknown_flags) {
        uint8_t frame[SF_HS_CLIENT_LEN], got[SF_HS_NONCE_LEN], flags = 0;
        for (unsigned f = 0x01; f <= 0xff; f++) {
                if (!(f & ~SF_HS_FLAGS_KNOWN))
                        continue;
                sf_hs_client_build(frame, &key, snonce, cnonce, (uint8_t)f);
                memset(got, 0, sizeof got);
                cr_assert_eq(sf_hs_client_verify(frame, &key, snonce, got, &flags, NULL), -EBADMSG, "flags %#x", f);
                cr_assert_eq(flags, f);
                cr_assert_eq(memcmp(got, cnonce, sizeof got), 0, "the server needs cnonce for BAD_FRAME");
        }
}

Test(handshake, client_other_version_still_gives_cnonce) {
        uint8_t frame[SF_HS_CLIENT_LEN], got[SF_HS_NONCE_LEN], flags, v = 0;
        sf_hs_client_build(frame, &key, snonce, cnonce, 0);
        frame[4] = 2;
        cr_assert_eq(sf_hs_client_verify(frame, &key, snonce, got, &flags, &v), -EPROTONOSUPPORT);
        cr_assert_eq(v, 2);
        cr_assert_eq(memcmp(got, cnonce, sizeof got), 0, "the server needs cnonce for VERSION_MISMATCH");

        sf_hs_client_build(frame, &key, snonce, cnonce, 0);
        frame[0] = 'G';
        memset(got, 0xaa, sizeof got);
        cr_assert_eq(sf_hs_client_verify(frame, &key, snonce, got, &flags, &v), -EPROTO);
        cr_assert_eq(got[0], 0xaa, "nothing is filled for a non-sockferry peer");
}

Test(handshake, client_mac_is_not_a_status_mac) {
        /* Direction labels: the client MAC over flags 0 must not verify as an OK status. */
        uint8_t frame[SF_HS_CLIENT_LEN], st[SF_HS_STATUS_MAX];
        enum sf_hs_status s;
        char reason[SF_HS_REASON_MAX + 1];
        sf_hs_client_build(frame, &key, snonce, cnonce, 0);
        st[0] = SF_HS_OK;
        st[1] = 0;
        memcpy(st + 2, frame + 38, SF_HS_MAC_LEN);
        cr_assert_eq(sf_hs_status_parse(st, SF_HS_STATUS_MIN, &key, snonce, cnonce, &s, reason), -EACCES);
}

Test(handshake, status_round_trip) {
        uint8_t frame[SF_HS_STATUS_MAX];
        enum sf_hs_status s = 99;
        char reason[SF_HS_REASON_MAX + 1];

        size_t n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_OK, NULL);
        cr_assert_eq(n, SF_HS_STATUS_MIN);
        cr_assert_eq(sf_hs_status_frame_len(frame, n), n);
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason), 0);
        cr_assert_eq(s, SF_HS_OK);
        cr_assert_str_eq(reason, "");

        cr_assert_eq(sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_OK, ""), SF_HS_STATUS_MIN);

        const char *why = "tcp:db:5432: connection refused";
        n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_UPSTREAM_UNAVAILABLE, why);
        cr_assert_eq(n, SF_HS_STATUS_MIN + strlen(why));
        cr_assert_eq(frame[0], SF_HS_UPSTREAM_UNAVAILABLE);
        cr_assert_eq(frame[1], strlen(why));
        cr_assert_eq(sf_hs_status_frame_len(frame, 2), n);
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason), 0);
        cr_assert_eq(s, SF_HS_UPSTREAM_UNAVAILABLE);
        cr_assert_str_eq(reason, why);

        /* Reasons go on the wire as ASCII: the em dash of our own messages would arrive as
         * "???" (issue 16); other non-ASCII characters become one '?' each. */
        why = "connect unix:/run/x.sock: Connection refused \u2014 is the service running? caf\u00e9 \u2013 \u00b5s";
        n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_UPSTREAM_UNAVAILABLE, why);
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason), 0);
        cr_assert_str_eq(reason, "connect unix:/run/x.sock: Connection refused - is the service running? caf? - ?s");

        for (int st = SF_HS_OK; st <= SF_HS_BAD_FRAME; st++) {
                n = sf_hs_status_build(frame, &key, snonce, cnonce, (enum sf_hs_status)st, "x");
                cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason), 0);
                cr_assert_eq((int)s, st);
        }
}

Test(handshake, status_trailing_bytes_are_not_looked_at) {
        uint8_t frame[SF_HS_STATUS_MAX + 16];
        enum sf_hs_status s;
        char reason[SF_HS_REASON_MAX + 1];
        size_t n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_OK, "fine");
        memcpy(frame + n, "upstream bytes", 14);
        cr_assert_eq(sf_hs_status_parse(frame, n + 14, &key, snonce, cnonce, &s, reason), 0);
        cr_assert_str_eq(reason, "fine");
}

Test(handshake, status_reason_is_cut_at_255) {
        uint8_t frame[SF_HS_STATUS_MAX];
        char longer[400], reason[SF_HS_REASON_MAX + 1];
        enum sf_hs_status s;
        memset(longer, 'r', sizeof longer - 1);
        longer[sizeof longer - 1] = '\0';
        size_t n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_UPSTREAM_UNAVAILABLE, longer);
        cr_assert_eq(n, SF_HS_STATUS_MAX);
        cr_assert_eq(frame[1], 255);
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason), 0);
        cr_assert_eq(strlen(reason), 255);
}

Test(handshake, status_frame_len) {
        uint8_t b[2] = { 0, 17 };
        cr_assert_eq(sf_hs_status_frame_len(b, 0), 0);
        cr_assert_eq(sf_hs_status_frame_len(b, 1), 0);
        cr_assert_eq(sf_hs_status_frame_len(b, 2), SF_HS_STATUS_MIN + 17);
        b[1] = 255;
        cr_assert_eq(sf_hs_status_frame_len(b, 2), SF_HS_STATUS_MAX);
}

Test(handshake, status_truncated) {
        uint8_t frame[SF_HS_STATUS_MAX];
        enum sf_hs_status s = 77;
        char reason[SF_HS_REASON_MAX + 1] = "untouched";
        size_t n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_UPSTREAM_UNAVAILABLE, "down");
        for (size_t len = 0; len < n; len++)
                cr_assert_eq(sf_hs_status_parse(frame, len, &key, snonce, cnonce, &s, reason), -EBADMSG,
                             "length %zu", len);
        cr_assert_eq((int)s, 77);
        cr_assert_str_eq(reason, "untouched");
}

Test(handshake, status_flipped_bit_anywhere) {
        uint8_t frame[SF_HS_STATUS_MAX];
        enum sf_hs_status s;
        char reason[SF_HS_REASON_MAX + 1];
        size_t n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_OK, "ready");
        for (size_t bit = 0; bit < n * 8; bit++) {
                sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_OK, "ready");
                frame[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                int r = sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason);
                /* A flipped length byte may claim more than arrived. */
                if (bit / 8 == 1)
                        cr_assert(r == -EACCES || r == -EBADMSG, "bit %zu: %d", bit, r);
                else
                        cr_assert_eq(r, -EACCES, "bit %zu: %d", bit, r);
        }
}

Test(handshake, status_wrong_key_still_says_what_it_claims) {
        uint8_t frame[SF_HS_STATUS_MAX];
        struct sf_hs_key other = key;
        enum sf_hs_status s;
        char reason[SF_HS_REASON_MAX + 1];
        other.bytes[0] ^= 0xff;
        size_t n = sf_hs_status_build(frame, &other, snonce, cnonce, SF_HS_AUTH_REJECTED, NULL);
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason), -EACCES);
        cr_assert_eq(s, SF_HS_AUTH_REJECTED);
        cr_assert_str_eq(reason, "");
}

Test(handshake, status_bound_to_both_nonces) {
        uint8_t frame[SF_HS_STATUS_MAX];
        enum sf_hs_status s;
        char reason[SF_HS_REASON_MAX + 1];
        size_t n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_OK, NULL);
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, cnonce, snonce, &s, reason), -EACCES);
        uint8_t c2[SF_HS_NONCE_LEN];
        memcpy(c2, cnonce, sizeof c2);
        c2[31] ^= 1;
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, c2, &s, reason), -EACCES);
}

Test(handshake, status_reason_is_made_printable) {
        uint8_t frame[SF_HS_STATUS_MAX];
        enum sf_hs_status s;
        char reason[SF_HS_REASON_MAX + 1];
        size_t n = sf_hs_status_build(frame, &key, snonce, cnonce, SF_HS_UPSTREAM_UNAVAILABLE,
                                      "a\nb\x1b[31mc\x7f\xff" "d");
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason), 0);
        cr_assert_str_eq(reason, "a?b?[31mc??d");

        /* A NUL inside the reason (only a foreign builder can send one) does not cut it short. */
        frame[0] = SF_HS_BAD_FRAME;
        frame[1] = 3;
        memcpy(frame + 2, "x\0y", 3);
        cr_assert_eq(sf_hs_status_parse(frame, SF_HS_STATUS_MIN + 3, &key, snonce, cnonce, &s, reason), -EACCES);
        cr_assert_str_eq(reason, "x?y");
}

Test(handshake, status_unknown_code) {
        uint8_t frame[SF_HS_STATUS_MAX];
        enum sf_hs_status s;
        char reason[SF_HS_REASON_MAX + 1];
        size_t n = sf_hs_status_build(frame, &key, snonce, cnonce, (enum sf_hs_status)200, NULL);
        cr_assert_eq(sf_hs_status_parse(frame, n, &key, snonce, cnonce, &s, reason), 0);
        cr_assert_eq((int)s, 200);
        cr_assert_str_eq(sf_hs_status_name(s), "unknown status");
}

Test(handshake, quote) {
        char out[128];
        const char *ssh = "SSH-2.0-OpenSSH_9.2p1\r\n";
        cr_assert_eq(sf_hs_quote((const uint8_t *)ssh, strlen(ssh), out, sizeof out), 25);
        cr_assert_str_eq(out, "SSH-2.0-OpenSSH_9.2p1\\r\\n");

        cr_assert_eq(sf_hs_quote((const uint8_t *)"\x00\xff\"\\\t", 5, out, sizeof out), 14);
        cr_assert_str_eq(out, "\\x00\\xff\\\"\\\\\\t");

        cr_assert_eq(sf_hs_quote((const uint8_t *)"", 0, out, sizeof out), 0);
        cr_assert_str_eq(out, "");
}

Test(handshake, quote_truncates) {
        char out[16];
        const char *http = "HTTP/1.1 400 Bad Request\r\n";
        size_t n = sf_hs_quote((const uint8_t *)http, strlen(http), out, sizeof out);
        cr_assert_eq(n, strlen(out));
        cr_assert_lt(n, sizeof out);
        cr_assert_str_eq(out, "HTTP/1.1 400...");

        cr_assert_eq(sf_hs_quote((const uint8_t *)"abc", 3, out, 4), 3);
        cr_assert_str_eq(out, "abc", "an exact fit needs no ellipsis");
        cr_assert_eq(sf_hs_quote((const uint8_t *)"abcd", 4, out, 4), 3);
        cr_assert_str_eq(out, "...");
        cr_assert_eq(sf_hs_quote((const uint8_t *)"abcd", 4, out, 3), 2);
        cr_assert_str_eq(out, "..");
        cr_assert_eq(sf_hs_quote((const uint8_t *)"abcd", 4, out, 1), 0);
        cr_assert_str_eq(out, "");
        cr_assert_eq(sf_hs_quote((const uint8_t *)"abcd", 4, out, 0), 0);

        /* An escape never gets cut in half. */
        uint8_t bin[8];
        memset(bin, 0x01, sizeof bin);
        n = sf_hs_quote(bin, sizeof bin, out, 12);
        cr_assert_str_eq(out, "\\x01\\x01...");
        cr_assert_eq(n, 11);
}

Test(handshake, service_round_trip) {
        uint8_t ext[SF_HS_SERVICE_EXT_MAX];
        char name[SF_HS_SERVICE_MAX + 1];
        size_t n = sf_hs_service_build(ext, &key, snonce, cnonce, "ssh-agent");
        cr_assert_eq(n, 1 + 9 + SF_HS_MAC_LEN);
        cr_assert_eq(sf_hs_service_ext_len(ext, 0), 0, "the length is known from the first byte");
        cr_assert_eq(sf_hs_service_ext_len(ext, 1), n);
        cr_assert_eq(sf_hs_service_verify(ext, n, &key, snonce, cnonce, name), 0);
        cr_assert_str_eq(name, "ssh-agent");
        cr_assert_eq(sf_hs_service_verify(ext, n - 1, &key, snonce, cnonce, name), -EBADMSG, "truncated");
}

Test(handshake, service_is_bound_to_the_token_and_both_nonces) {
        uint8_t ext[SF_HS_SERVICE_EXT_MAX], other[SF_HS_NONCE_LEN];
        char name[SF_HS_SERVICE_MAX + 1];
        size_t n = sf_hs_service_build(ext, &key, snonce, cnonce, "agent");
        memset(other, 0x11, sizeof other);
        cr_assert_eq(sf_hs_service_verify(ext, n, &key, other, cnonce, name), -EACCES, "another connection's hello");
        cr_assert_eq(sf_hs_service_verify(ext, n, &key, snonce, other, name), -EACCES, "another client nonce");
        struct sf_hs_key k2 = key;
        k2.bytes[0] ^= 1;
        cr_assert_eq(sf_hs_service_verify(ext, n, &k2, snonce, cnonce, name), -EACCES, "another token");
        /* A relay on the way that renames the service: the MAC no longer holds. */
        ext[1] = 'b';
        cr_assert_eq(sf_hs_service_verify(ext, n, &key, snonce, cnonce, name), -EACCES);
}

Test(handshake, service_names_are_plain) {
        uint8_t ext[SF_HS_SERVICE_EXT_MAX];
        char name[SF_HS_SERVICE_MAX + 1], longest[SF_HS_SERVICE_MAX + 2];
        cr_assert_eq(sf_hs_service_build(ext, &key, snonce, cnonce, ""), 0);
        cr_assert_eq(sf_hs_service_build(ext, &key, snonce, cnonce, "a b"), 0);
        cr_assert_eq(sf_hs_service_build(ext, &key, snonce, cnonce, "gpg/agent"), 0);
        memset(longest, 'x', sizeof longest - 1);
        longest[sizeof longest - 1] = '\0';
        cr_assert_eq(sf_hs_service_build(ext, &key, snonce, cnonce, longest), 0, "64 bytes is one too many");
        longest[SF_HS_SERVICE_MAX] = '\0';
        size_t n = sf_hs_service_build(ext, &key, snonce, cnonce, longest);
        cr_assert_eq(n, 1 + SF_HS_SERVICE_MAX + SF_HS_MAC_LEN);
        cr_assert_eq(sf_hs_service_verify(ext, n, &key, snonce, cnonce, name), 0);
        /* A peer that sends a name with a control byte is refused before its MAC is looked at. */
        uint8_t bad[1 + 3 + SF_HS_MAC_LEN] = { 3, 'a', '\n', 'b' };
        cr_assert_eq(sf_hs_service_verify(bad, sizeof bad, &key, snonce, cnonce, name), -EBADMSG);
        uint8_t empty[1 + SF_HS_MAC_LEN] = { 0 };
        cr_assert_eq(sf_hs_service_verify(empty, sizeof empty, &key, snonce, cnonce, name), -EBADMSG);
        cr_assert(sf_hs_service_valid("docker.sock_2-x"));
        cr_assert_not(sf_hs_service_valid("docker sock"));
}
