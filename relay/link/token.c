/* What token files mean, the same on every platform: hex text, decoded and checked here. The
 * file itself is opened, checked and written by relay/tokenfile_*.c. */
#include "relay/link/token.h"

#include <errno.h>
#include <sodium.h>
#include <stdint.h>

#include "conf/log.h"
#include "relay/link/tokenfile.h"

#define TOKEN_GEN_BYTES 32
#define KEYGEN_HINT SF_TOKENFILE_KEYGEN_HINT

static bool is_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_hex(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Decodes the hex text in buf[0..n) into key, logging what is wrong with it. */
static int token_decode(const char *path, const char *buf, size_t n, struct sf_hs_key *key) {
        size_t b = 0, e = n, bin_len = 0;

        while (b < e && is_space(buf[b]))
                b++;
        while (e > b && is_space(buf[e - 1]))
                e--;
        if (b == e) {
                sf_log_error("token file %s is empty; " KEYGEN_HINT " %s", path, path);
                return -EINVAL;
        }
        for (size_t i = b; i < e; i++)
                if (!is_hex(buf[i])) {
                        /* The position only, never the character: it may be part of a secret. */
                        sf_log_error("token file %s is not a hex token (byte %zu is not a hex digit); "
                                     KEYGEN_HINT " %s", path, i + 1, path);
                        return -EINVAL;
                }
        if ((e - b) % 2 != 0) {
                sf_log_error("token file %s holds an odd number of hex digits (%zu); " KEYGEN_HINT " %s",
                             path, e - b, path);
                return -EINVAL;
        }
        if ((e - b) / 2 > SF_HS_KEY_MAX) {
                sf_log_error("token file %s holds %zu bytes of key material, at most %d are allowed; "
                             KEYGEN_HINT " %s", path, (e - b) / 2, SF_HS_KEY_MAX, path);
                return -EINVAL;
        }
        if ((e - b) / 2 < SF_HS_KEY_MIN) {
                sf_log_error("token file %s holds %zu bytes of key material, at least %d are needed; "
                             KEYGEN_HINT " %s", path, (e - b) / 2, SF_HS_KEY_MIN, path);
                return -EINVAL;
        }
        if (sodium_hex2bin(key->bytes, sizeof key->bytes, buf + b, e - b, NULL, &bin_len, NULL) < 0 ||
            bin_len != (e - b) / 2) {
                sf_log_error("token file %s: cannot decode the hex token; " KEYGEN_HINT " %s", path, path);
                return -EINVAL;
        }
        key->len = bin_len;
        return 0;
}

int sf_token_load(const char *path, const struct sf_conf *c, struct sf_hs_key *key) {
        char buf[SF_TOKENFILE_MAX];
        size_t n = 0;
        int r;

        sodium_memzero(key, sizeof *key);
        r = sf_hs_init();
        if (r < 0)
                return r;
        r = sf_tokenfile_read(path, c, buf, sizeof buf, &n);
        if (r == 0)
                r = token_decode(path, buf, n, key);
        sodium_memzero(buf, sizeof buf);
        if (r < 0)
                sodium_memzero(key, sizeof *key);
        return r;
}

int sf_token_generate(const char *path, bool force) {
        uint8_t raw[TOKEN_GEN_BYTES];
        char hex[TOKEN_GEN_BYTES * 2 + 2];
        const size_t len = TOKEN_GEN_BYTES * 2 + 1;
        int r;

        r = sf_hs_init();
        if (r < 0)
                return r;
        randombytes_buf(raw, sizeof raw);
        sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
        sodium_memzero(raw, sizeof raw);
        hex[TOKEN_GEN_BYTES * 2] = '\n';

        r = sf_tokenfile_write(path, hex, len, force);
        sodium_memzero(hex, sizeof hex);
        return r;
}
