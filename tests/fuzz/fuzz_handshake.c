/* libFuzzer target: the three frame parsers of relay/link/frames.c on arbitrary bytes, and
 * build → parse round trips driven by the input so the authenticated branches are reached too. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relay/link/frames.h"

static struct sf_hs_key key;
static const uint8_t snonce[SF_HS_NONCE_LEN] = { 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47 };

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        if (sf_hs_init() < 0)
                abort();
        key.len = 32;
        for (size_t i = 0; i < key.len; i++)
                key.bytes[i] = (uint8_t)i;
        return 0;
}

static void parse_raw(const uint8_t *data, size_t size) {
        uint8_t nonce[SF_HS_NONCE_LEN], flags = 0, version = 0, frame[SF_HS_CLIENT_LEN];
        enum sf_hs_status st;
        char reason[SF_HS_REASON_MAX + 1];

        (void)sf_hs_prefix_check(data, size, &version);
        if (size >= SF_HS_HELLO_LEN && sf_hs_hello_parse(data, nonce, &version) == 0) {
                uint8_t hello[SF_HS_HELLO_LEN];
                sf_hs_hello_build(hello, nonce);
                if (memcmp(hello, data, sizeof hello) != 0)
                        abort();
        }
        if (size >= SF_HS_CLIENT_LEN && sf_hs_client_verify(data, &key, snonce, nonce, &flags, &version) == 0) {
                /* Only the canonical frame verifies. */
                sf_hs_client_build(frame, &key, snonce, nonce, flags);
                if (memcmp(frame, data, sizeof frame) != 0 || (flags & ~SF_HS_FLAGS_KNOWN))
                        abort();
        }
        size_t need = sf_hs_status_frame_len(data, size);
        int r = sf_hs_status_parse(data, size, &key, snonce, nonce, &st, reason);
        if ((r == -EBADMSG) != (need == 0 || need > size))
                abort();
        if (r != -EBADMSG) {
                size_t n = strlen(reason);
                if (n != data[1])
                        abort();
                for (size_t i = 0; i < n; i++)
                        if (reason[i] < 0x20 || reason[i] > 0x7e)
                                abort();
        }
}

/* The input picks status, flags, nonce and reason; what is built must parse back. */
static void round_trip(const uint8_t *data, size_t size) {
        uint8_t cnonce[SF_HS_NONCE_LEN] = { 0 }, got[SF_HS_NONCE_LEN], flags, version;
        uint8_t frame[SF_HS_CLIENT_LEN], st_frame[SF_HS_STATUS_MAX];
        char in_reason[SF_HS_REASON_MAX + 2], reason[SF_HS_REASON_MAX + 1];
        enum sf_hs_status st;

        if (size < 2)
                return;
        uint8_t want_status = data[0], want_flags = data[1];
        data += 2;
        size -= 2;
        size_t k = size < SF_HS_NONCE_LEN ? size : SF_HS_NONCE_LEN;
        memcpy(cnonce, data, k);
        data += k;
        size -= k;

        sf_hs_client_build(frame, &key, snonce, cnonce, want_flags);
        int r = sf_hs_client_verify(frame, &key, snonce, got, &flags, &version);
        if (r != ((want_flags & ~SF_HS_FLAGS_KNOWN) ? -EBADMSG : 0) || flags != want_flags ||
            memcmp(got, cnonce, sizeof got) != 0)
                abort();

        size_t rl = size < sizeof in_reason - 1 ? size : sizeof in_reason - 1;
        memcpy(in_reason, data, rl);
        in_reason[rl] = '\0';
        size_t n = sf_hs_status_build(st_frame, &key, snonce, cnonce, want_status, in_reason);
        if (n < SF_HS_STATUS_MIN || n > SF_HS_STATUS_MAX || sf_hs_status_frame_len(st_frame, 2) != n)
                abort();
        if (sf_hs_status_parse(st_frame, n, &key, snonce, cnonce, &st, reason) != 0 || (uint8_t)st != want_status)
                abort();
        if (strlen(reason) != (n - SF_HS_STATUS_MIN))
                abort();
}

static void quote(const uint8_t *data, size_t size) {
        char out[64];
        size_t outlen = size ? (size_t)data[0] % (sizeof out + 1) : sizeof out;
        size_t n = sf_hs_quote(data, size, out, outlen);
        if (outlen == 0 ? n != 0 : (n >= outlen || strlen(out) != n))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        parse_raw(data, size);
        round_trip(data, size);
        quote(data, size);
        return 0;
}
