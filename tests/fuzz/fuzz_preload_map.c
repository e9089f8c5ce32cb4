/* libFuzzer target: the SOCKFERRY_PRELOAD_MAP parser of sockferry-preload.so
 * (PATH=ENDPOINT;PATH=ENDPOINT...), compiled from preload/preload.c with -DSF_PRELOAD_FUZZ.
 * The input up to its first NUL byte is the map; what follows is a connect() path looked up in
 * it. Every kept mapping must be found again by its own path. Rejected entries are reported
 * on stderr: run with -close_fd_mask=2. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t sf_preload_fuzz_map(const char *text, const char *probe, size_t probe_len);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *buf = malloc(size + 1);

        if (!buf)
                abort();
        memcpy(buf, data, size);
        buf[size] = '\0';
        size_t text_len = strlen(buf);
        const char *probe = text_len < size ? buf + text_len + 1 : buf + size;
        size_t probe_len = text_len < size ? size - text_len - 1 : 0;
        (void)sf_preload_fuzz_map(buf, probe, probe_len);
        free(buf);
        return 0;
}
