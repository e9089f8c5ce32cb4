/* libFuzzer target: sf_log_escape on arbitrary bytes (what a container writes on the stderr of
 * attach's far end, relayed to the host's log and terminal), into buffers of many sizes. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* sf_log_escape's text back to bytes (\xHH is the only escape); -1 when it is malformed. */
static long unescape(const char *s, size_t n, uint8_t *out) {
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] != '\\') {
                        out[o++] = (uint8_t)s[i];
                        continue;
                }
                if (i + 3 >= n || s[i + 1] != 'x')
                        return -1;
                char hex[3] = { s[i + 2], s[i + 3], 0 };
                out[o++] = (uint8_t)strtoul(hex, NULL, 16);
                i += 3;
        }
        return (long)o;
}

/* Nothing that drives a terminal or breaks a line: no C0 control but tab, no DEL, no C1. */
static void check_clean(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++) {
                uint8_t c = (uint8_t)s[i];
                if ((c < 0x20 && c != '\t') || c == 0x7f || (c == 0xc2 && i + 1 < n && (uint8_t)s[i + 1] < 0xa0))
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        size_t big = 4 * size + 8;
        char *full = malloc(big), *out = malloc(big);
        uint8_t *back = malloc(size + 1);
        if (!full || !out || !back)
                abort();
        /* Room for everything: nothing is cut, and every byte comes back. A backslash of the
         * input stays as it is, so the way back holds only without one. */
        size_t n = sf_log_escape((const char *)data, size, full, big);
        if (n >= big || strlen(full) != n)
                abort();
        check_clean(full, n);
        if (!memchr(data, '\\', size) && (unescape(full, n, back) != (long)size || memcmp(back, data, size) != 0))
                abort();
        /* Less room: the whole text when it fits, else a prefix of it ending in "...". */
        for (size_t cap = 4; cap < big; cap = cap < 64 ? cap + 1 : cap * 2) {
                size_t m = sf_log_escape((const char *)data, size, out, cap);
                if (m >= cap || strlen(out) != m)
                        abort();
                check_clean(out, m);
                if (n < cap ? m != n || memcmp(out, full, n) != 0
                            : m < 3 || memcmp(out + m - 3, "...", 3) != 0 || memcmp(out, full, m - 3) != 0)
                        abort();
        }
        free(full);
        free(out);
        free(back);
        return 0;
}
