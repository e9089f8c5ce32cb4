#include "relay/link/frames.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "conf/log.h"

/* Domain separation: the two directions use different labels, so a client MAC can never be
 * reflected back as a server MAC or the other way round. The NUL is not part of the input. */
#define LABEL_CLIENT "sockferry/1 client"
#define LABEL_SERVER "sockferry/1 server"
#define LABEL_SERVICE "sockferry/1 service"

#define CLIENT_OFF_FLAGS 5
#define CLIENT_OFF_NONCE 6
#define CLIENT_OFF_MAC (CLIENT_OFF_NONCE + SF_HS_NONCE_LEN)

int sf_hs_init(void) {
        if (sodium_init() < 0) {
                sf_log_error("libsodium failed to initialise (no usable random source?)");
                return -EIO;
        }
        return 0;
}

const char *sf_hs_status_name(enum sf_hs_status st) {
        switch (st) {
        case SF_HS_OK: return "ok";
        case SF_HS_AUTH_REJECTED: return "auth rejected";
        case SF_HS_UPSTREAM_UNAVAILABLE: return "upstream unavailable";
        case SF_HS_VERSION_MISMATCH: return "version mismatch";
        case SF_HS_BAD_FRAME: return "bad frame";
        case SF_HS_UNKNOWN_SERVICE: return "unknown service";
        }
        return "unknown status";
}

void sf_hs_nonce_new(uint8_t nonce[SF_HS_NONCE_LEN]) {
        randombytes_buf(nonce, SF_HS_NONCE_LEN);
}

int sf_hs_prefix_check(const uint8_t *in, size_t len, uint8_t *version) {
        size_t n = len < SF_HS_MAGIC_LEN ? len : SF_HS_MAGIC_LEN;
        if (n > 0 && memcmp(in, SF_HS_MAGIC, n) != 0)
                return -EPROTO;
        if (len <= SF_HS_MAGIC_LEN)
                return 0;
        if (version)
                *version = in[SF_HS_MAGIC_LEN];
        return in[SF_HS_MAGIC_LEN] == SF_HS_VERSION ? 0 : -EPROTONOSUPPORT;
}

void sf_hs_hello_build(uint8_t out[SF_HS_HELLO_LEN], const uint8_t snonce[SF_HS_NONCE_LEN]) {
        memcpy(out, SF_HS_MAGIC, SF_HS_MAGIC_LEN);
        out[SF_HS_MAGIC_LEN] = SF_HS_VERSION;
        memcpy(out + SF_HS_MAGIC_LEN + 1, snonce, SF_HS_NONCE_LEN);
}

int sf_hs_hello_parse(const uint8_t in[SF_HS_HELLO_LEN], uint8_t snonce[SF_HS_NONCE_LEN], uint8_t *version) {
        int r = sf_hs_prefix_check(in, SF_HS_HELLO_LEN, version);
        if (r < 0)
                return r;
        memcpy(snonce, in + SF_HS_MAGIC_LEN + 1, SF_HS_NONCE_LEN);
        return 0;
}

/* HMAC-SHA256(key, label ‖ snonce ‖ cnonce ‖ tail): the one MAC construction of both frames. */
static void frame_mac(uint8_t mac[SF_HS_MAC_LEN], const struct sf_hs_key *key, const char *label,
                      const uint8_t snonce[SF_HS_NONCE_LEN], const uint8_t cnonce[SF_HS_NONCE_LEN],
                      const uint8_t *tail, size_t tail_len) {
        crypto_auth_hmacsha256_state st;

        crypto_auth_hmacsha256_init(&st, key->bytes, key->len);
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
        crypto_auth_hmacsha256_update(&st, snonce, SF_HS_NONCE_LEN);
        crypto_auth_hmacsha256_update(&st, cnonce, SF_HS_NONCE_LEN);
        crypto_auth_hmacsha256_update(&st, tail, tail_len);
        crypto_auth_hmacsha256_final(&st, mac);
        /* The state holds the key XORed with the pads. */
        sodium_memzero(&st, sizeof st);
}

void sf_hs_client_build(uint8_t out[SF_HS_CLIENT_LEN], const struct sf_hs_key *key,
                        const uint8_t snonce[SF_HS_NONCE_LEN], const uint8_t cnonce[SF_HS_NONCE_LEN],
                        uint8_t flags) {
        memcpy(out, SF_HS_MAGIC, SF_HS_MAGIC_LEN);
        out[SF_HS_MAGIC_LEN] = SF_HS_VERSION;
        out[CLIENT_OFF_FLAGS] = flags;
        memcpy(out + CLIENT_OFF_NONCE, cnonce, SF_HS_NONCE_LEN);
        frame_mac(out + CLIENT_OFF_MAC, key, LABEL_CLIENT, snonce, cnonce, &flags, 1);
}

int sf_hs_client_verify(const uint8_t in[SF_HS_CLIENT_LEN], const struct sf_hs_key *key,
                        const uint8_t snonce[SF_HS_NONCE_LEN], uint8_t cnonce[SF_HS_NONCE_LEN],
                        uint8_t *flags, uint8_t *version) {
        uint8_t mac[SF_HS_MAC_LEN];
        int r;

        r = sf_hs_prefix_check(in, SF_HS_CLIENT_LEN, version);
        if (r == -EPROTO)
                return r;
        memcpy(cnonce, in + CLIENT_OFF_NONCE, SF_HS_NONCE_LEN);
        *flags = in[CLIENT_OFF_FLAGS];
        if (r < 0)
                return r;

        frame_mac(mac, key, LABEL_CLIENT, snonce, cnonce, flags, 1);
        if (sodium_memcmp(mac, in + CLIENT_OFF_MAC, SF_HS_MAC_LEN) != 0)
                return -EACCES;
        /* Checked after the MAC so an unauthenticated peer learns nothing but "rejected". */
        if (*flags & ~SF_HS_FLAGS_KNOWN)
                return -EBADMSG;
        return 0;
}

static bool service_char(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
               c == '.';
}

static bool service_bytes_valid(const uint8_t *name, size_t n) {
        if (n == 0 || n > SF_HS_SERVICE_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!service_char(name[i]))
                        return false;
        return true;
}

bool sf_hs_service_valid(const char *name) {
        return service_bytes_valid((const uint8_t *)name, strlen(name));
}

size_t sf_hs_service_build(uint8_t *out, const struct sf_hs_key *key, const uint8_t snonce[SF_HS_NONCE_LEN],
                           const uint8_t cnonce[SF_HS_NONCE_LEN], const char *name) {
        size_t n = strlen(name);
        if (!service_bytes_valid((const uint8_t *)name, n))
                return 0;
        out[0] = (uint8_t)n;
        memcpy(out + 1, name, n);
        frame_mac(out + 1 + n, key, LABEL_SERVICE, snonce, cnonce, out, 1 + n);
        return 1 + n + SF_HS_MAC_LEN;
}

size_t sf_hs_service_ext_len(const uint8_t *in, size_t len) {
        return len ? 1 + (size_t)in[0] + SF_HS_MAC_LEN : 0;
}

int sf_hs_service_verify(const uint8_t *in, size_t len, const struct sf_hs_key *key,
                         const uint8_t snonce[SF_HS_NONCE_LEN], const uint8_t cnonce[SF_HS_NONCE_LEN],
                         char name[SF_HS_SERVICE_MAX + 1]) {
        size_t need = sf_hs_service_ext_len(in, len);
        if (need == 0 || len < need || !service_bytes_valid(in + 1, in[0]))
                return -EBADMSG;
        uint8_t mac[SF_HS_MAC_LEN];
        frame_mac(mac, key, LABEL_SERVICE, snonce, cnonce, in, 1 + (size_t)in[0]);
        if (sodium_memcmp(mac, in + 1 + in[0], SF_HS_MAC_LEN) != 0)
                return -EACCES;
        memcpy(name, in + 1, in[0]);
        name[in[0]] = '\0';
        return 0;
}

size_t sf_hs_reason_ascii(uint8_t *out, const char *reason) {
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *)reason; *p && o < SF_HS_REASON_MAX; o++) {
                if (*p >= 0x20 && *p < 0x7f) {
                        out[o] = *p++;
                        continue;
                }
                out[o] = p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0x93 || p[2] == 0x94) ? '-' : '?';
                /* Past the whole UTF-8 sequence: the lead byte, then its continuation bytes. */
                p++;
                while ((*p & 0xc0) == 0x80)
                        p++;
        }
        return o;
}

size_t sf_hs_status_build(uint8_t *out, const struct sf_hs_key *key, const uint8_t snonce[SF_HS_NONCE_LEN],
                          const uint8_t cnonce[SF_HS_NONCE_LEN], enum sf_hs_status status, const char *reason) {
        size_t rlen = reason ? sf_hs_reason_ascii(out + 2, reason) : 0;

        out[0] = (uint8_t)status;
        out[1] = (uint8_t)rlen;
        frame_mac(out + 2 + rlen, key, LABEL_SERVER, snonce, cnonce, out, 2 + rlen);
        return SF_HS_STATUS_MIN + rlen;
}

size_t sf_hs_status_frame_len(const uint8_t *in, size_t len) {
        if (len < 2)
                return 0;
        return SF_HS_STATUS_MIN + (size_t)in[1];
}

int sf_hs_status_parse(const uint8_t *in, size_t len, const struct sf_hs_key *key,
                       const uint8_t snonce[SF_HS_NONCE_LEN], const uint8_t cnonce[SF_HS_NONCE_LEN],
                       enum sf_hs_status *status, char reason[SF_HS_REASON_MAX + 1]) {
        uint8_t mac[SF_HS_MAC_LEN];
        size_t need = sf_hs_status_frame_len(in, len), rlen;

        if (need == 0 || len < need)
                return -EBADMSG;
        rlen = in[1];

        frame_mac(mac, key, LABEL_SERVER, snonce, cnonce, in, 2 + rlen);
        *status = (enum sf_hs_status)in[0];
        /* The reason ends up in log lines: no control bytes, no terminal escapes. */
        for (size_t i = 0; i < rlen; i++) {
                uint8_t c = in[2 + i];
                reason[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
        }
        reason[rlen] = '\0';
        return sodium_memcmp(mac, in + 2 + rlen, SF_HS_MAC_LEN) == 0 ? 0 : -EACCES;
}

/* Writes the escaped form of c to esc (room for 5) and returns its length. */
static size_t quote_byte(uint8_t c, char esc[5]) {
        if (c == '"' || c == '\\')
                return (size_t)snprintf(esc, 5, "\\%c", c);
        if (c == '\r')
                return (size_t)snprintf(esc, 5, "\\r");
        if (c == '\n')
                return (size_t)snprintf(esc, 5, "\\n");
        if (c == '\t')
                return (size_t)snprintf(esc, 5, "\\t");
        if (c >= 0x20 && c < 0x7f)
                return (size_t)snprintf(esc, 5, "%c", c);
        return (size_t)snprintf(esc, 5, "\\x%02x", c);
}

size_t sf_hs_quote(const uint8_t *in, size_t len, char *out, size_t outlen) {
        static const char ellipsis[] = "...";
        size_t total = 0, o = 0, keep;
        char esc[5];

        if (outlen == 0)
                return 0;
        for (size_t i = 0; i < len; i++)
                total += quote_byte(in[i], esc);
        /* Everything fits, or as many whole escapes as leave room for the ellipsis. */
        keep = total < outlen ? total : (outlen > sizeof ellipsis ? outlen - sizeof ellipsis : 0);
        for (size_t i = 0; i < len; i++) {
                size_t n = quote_byte(in[i], esc);
                if (o + n > keep)
                        break;
                memcpy(out + o, esc, n);
                o += n;
        }
        if (total >= outlen) {
                size_t e = sizeof ellipsis - 1;
                if (e > outlen - 1 - o)
                        e = outlen - 1 - o;
                memcpy(out + o, ellipsis, e);
                o += e;
        }
        out[o] = '\0';
        return o;
}
