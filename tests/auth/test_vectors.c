/* Checks every ```sf-vector block of doc/PROTOCOL.md against relay/link/frames.c, so the
 * specification cannot drift from the code (tests/auth/protocol_vectors.py checks the same
 * blocks against an independent Python implementation). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/link/frames.h"

#define MAX_VECTORS 16
#define FIELD_MAX 1024

struct vector {
        char name[128];
        struct sf_hs_key key;
        uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];
        unsigned flags, status;
        char reason[SF_HS_REASON_MAX + 1];
        uint8_t hello[SF_HS_HELLO_LEN], client[SF_HS_CLIENT_LEN], status_frame[SF_HS_STATUS_MAX];
        size_t status_len;
        char service[SF_HS_SERVICE_MAX + 1];
        uint8_t service_ext[SF_HS_SERVICE_EXT_MAX];
        size_t service_ext_len;
        unsigned seen; /* bit per field */
};

static struct vector vectors[MAX_VECTORS];
static size_t n_vectors;

static size_t unhex(const char *hex, uint8_t *out, size_t cap, const char *what) {
        size_t n = strlen(hex);
        cr_assert_eq(n % 2, 0, "%s: odd hex length", what);
        cr_assert_leq(n / 2, cap, "%s: %zu bytes, at most %zu expected", what, n / 2, cap);
        for (size_t i = 0; i < n / 2; i++) {
                unsigned b;
                cr_assert_eq(sscanf(hex + 2 * i, "%2x", &b), 1, "%s: bad hex at %zu", what, 2 * i);
                out[i] = (uint8_t)b;
        }
        return n / 2;
}

static void exact(const char *hex, uint8_t *out, size_t len, const char *what) {
        cr_assert_eq(unhex(hex, out, len, what), len, "%s: expected %zu bytes", what, len);
}

static void set_field(struct vector *v, const char *k, const char *val) {
        static const char *const names[] = { "name", "key", "server-nonce", "client-nonce", "flags", "status",
                                             "reason", "hello", "client-frame", "status-frame", "service",
                                             "service-ext" };
        size_t i;
        for (i = 0; i < sizeof names / sizeof names[0]; i++)
                if (strcmp(k, names[i]) == 0)
                        break;
        cr_assert_lt(i, sizeof names / sizeof names[0], "unknown vector field '%s'", k);
        v->seen |= 1u << i;
        switch (i) {
        case 0: snprintf(v->name, sizeof v->name, "%s", val); break;
        case 1: v->key.len = unhex(val, v->key.bytes, sizeof v->key.bytes, k); break;
        case 2: exact(val, v->snonce, SF_HS_NONCE_LEN, k); break;
        case 3: exact(val, v->cnonce, SF_HS_NONCE_LEN, k); break;
        case 4: cr_assert_eq(sscanf(val, "%x", &v->flags), 1); break;
        case 5: cr_assert_eq(sscanf(val, "%u", &v->status), 1); break;
        case 6: snprintf(v->reason, sizeof v->reason, "%s", val); break;
        case 7: exact(val, v->hello, SF_HS_HELLO_LEN, k); break;
        case 8: exact(val, v->client, SF_HS_CLIENT_LEN, k); break;
        case 9: v->status_len = unhex(val, v->status_frame, sizeof v->status_frame, k); break;
        case 10: snprintf(v->service, sizeof v->service, "%s", val); break;
        case 11: v->service_ext_len = unhex(val, v->service_ext, sizeof v->service_ext, k); break;
        }
}

static char *trim(char *s) {
        while (*s == ' ' || *s == '\t')
                s++;
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
                s[--n] = '\0';
        return s;
}

static void load_vectors(void) {
        const char *root = getenv("SF_SOURCE_ROOT");
        char path[4096], line[FIELD_MAX];
        struct vector *cur = NULL;

        cr_assert_eq(sf_hs_init(), 0);
        cr_assert_not_null(root, "SF_SOURCE_ROOT is not set (run through meson test)");
        snprintf(path, sizeof path, "%s/doc/PROTOCOL.md", root);
        FILE *f = fopen(path, "re");
        cr_assert_not_null(f, "cannot open %s", path);
        while (fgets(line, sizeof line, f)) {
                cr_assert_not_null(strchr(line, '\n'), "line longer than %d bytes in %s", FIELD_MAX, path);
                if (!cur && strcmp(trim(line), "```sf-vector") == 0) {
                        cr_assert_lt(n_vectors, MAX_VECTORS);
                        cur = &vectors[n_vectors++];
                        memset(cur, 0, sizeof *cur);
                        continue;
                }
                if (!cur)
                        continue;
                if (strcmp(trim(line), "```") == 0) {
                        cr_assert_eq(cur->seen & 0x3ffu, 0x3ffu, "vector %zu (%s) lacks fields (seen %#x)", n_vectors,
                                     cur->name, cur->seen);
                        /* The service and its extension go with the SERVICE flag, and only with it. */
                        bool with_service = (cur->flags & SF_HS_FLAG_SERVICE) != 0;
                        cr_assert_eq((cur->seen >> 10) == 3u, with_service, "vector %zu (%s): flags %#x, service fields %#x",
                                     n_vectors, cur->name, cur->flags, cur->seen >> 10);
                        cur = NULL;
                        continue;
                }
                char *eq = strchr(line, '=');
                cr_assert_not_null(eq, "bad vector line '%s'", line);
                *eq = '\0';
                set_field(cur, trim(line), trim(eq + 1));
        }
        fclose(f);
        cr_assert_null(cur, "unterminated sf-vector block");
}

TestSuite(vectors, .init = load_vectors);

Test(vectors, present) {
        bool ok = false, upstream = false, probe = false;
        cr_assert_geq(n_vectors, 3, "doc/PROTOCOL.md has %zu vectors", n_vectors);
        for (size_t i = 0; i < n_vectors; i++) {
                ok |= vectors[i].status == SF_HS_OK;
                upstream |= vectors[i].status == SF_HS_UPSTREAM_UNAVAILABLE && vectors[i].reason[0];
                probe |= vectors[i].flags == SF_HS_FLAG_PROBE;
        }
        cr_assert(ok && upstream && probe, "the vectors must cover OK, UPSTREAM_UNAVAILABLE with a reason and a probe");
}

Test(vectors, build_matches) {
        for (size_t i = 0; i < n_vectors; i++) {
                const struct vector *v = &vectors[i];
                uint8_t hello[SF_HS_HELLO_LEN], client[SF_HS_CLIENT_LEN], st[SF_HS_STATUS_MAX];

                sf_hs_hello_build(hello, v->snonce);
                cr_assert_eq(memcmp(hello, v->hello, sizeof hello), 0, "%s: hello differs", v->name);
                sf_hs_client_build(client, &v->key, v->snonce, v->cnonce, (uint8_t)v->flags);
                cr_assert_eq(memcmp(client, v->client, sizeof client), 0, "%s: client frame differs", v->name);
                size_t n = sf_hs_status_build(st, &v->key, v->snonce, v->cnonce, (enum sf_hs_status)v->status,
                                              v->reason);
                cr_assert_eq(n, v->status_len, "%s: status frame length %zu, document says %zu", v->name, n,
                             v->status_len);
                cr_assert_eq(memcmp(st, v->status_frame, n), 0, "%s: status frame differs", v->name);
                if (v->service[0]) {
                        uint8_t ext[SF_HS_SERVICE_EXT_MAX];
                        size_t m = sf_hs_service_build(ext, &v->key, v->snonce, v->cnonce, v->service);
                        cr_assert_eq(m, v->service_ext_len, "%s: service extension length", v->name);
                        cr_assert_eq(memcmp(ext, v->service_ext, m), 0, "%s: service extension differs", v->name);
                }
        }
}

Test(vectors, parse_matches) {
        for (size_t i = 0; i < n_vectors; i++) {
                const struct vector *v = &vectors[i];
                uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN], flags, version;
                enum sf_hs_status st;
                char reason[SF_HS_REASON_MAX + 1];

                cr_assert_eq(sf_hs_hello_parse(v->hello, snonce, &version), 0, "%s", v->name);
                cr_assert_eq(memcmp(snonce, v->snonce, sizeof snonce), 0);
                cr_assert_eq(sf_hs_client_verify(v->client, &v->key, v->snonce, cnonce, &flags, &version), 0,
                             "%s", v->name);
                cr_assert_eq(flags, v->flags);
                cr_assert_eq(memcmp(cnonce, v->cnonce, sizeof cnonce), 0);
                cr_assert_eq(sf_hs_status_frame_len(v->status_frame, 2), v->status_len);
                cr_assert_eq(sf_hs_status_parse(v->status_frame, v->status_len, &v->key, v->snonce, v->cnonce, &st,
                                                reason), 0, "%s", v->name);
                cr_assert_eq((unsigned)st, v->status);
                cr_assert_str_eq(reason, v->reason);
                if (v->service[0]) {
                        char name[SF_HS_SERVICE_MAX + 1];
                        cr_assert_eq(sf_hs_service_verify(v->service_ext, v->service_ext_len, &v->key, v->snonce,
                                                          v->cnonce, name), 0, "%s", v->name);
                        cr_assert_str_eq(name, v->service);
                }

                /* The same frames under a key one bit off are rejected. */
                struct sf_hs_key wrong = v->key;
                wrong.bytes[0] ^= 1;
                cr_assert_eq(sf_hs_client_verify(v->client, &wrong, v->snonce, cnonce, &flags, NULL), -EACCES);
                cr_assert_eq(sf_hs_status_parse(v->status_frame, v->status_len, &wrong, v->snonce, v->cnonce, &st,
                                                reason), -EACCES);
        }
}
