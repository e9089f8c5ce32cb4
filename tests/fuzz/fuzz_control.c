/* libFuzzer target: sf_control_request_parse, the parser of what a control-socket client
 * sends ("stats [text|json|prometheus]\n"). Each input is offered the way a stream delivers
 * it, one more byte at a time, and the answers must agree: once a prefix gets a verdict
 * (1, -EINVAL or -EMSGSIZE), every longer prefix gets the same one (and the same format). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relay/control/control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        /* A copy of exactly size bytes, so ASan sees any read past the end. */
        char *buf = malloc(size ? size : 1);
        int verdict = 0;
        enum sf_stats_format first = SF_STATS_TEXT;

        if (!buf)
                abort();
        memcpy(buf, data, size);
        for (size_t n = 0; n <= size; n++) {
                enum sf_stats_format fmt = (enum sf_stats_format)-1;
                int r = sf_control_request_parse(buf, n, &fmt);
                if (r != SF_CONTROL_STATS && r != SF_CONTROL_RELOAD && r != 0 && r != -EINVAL && r != -EMSGSIZE)
                        abort();
                if (r == 1 && fmt != SF_STATS_TEXT && fmt != SF_STATS_JSON && fmt != SF_STATS_PROMETHEUS)
                        abort();
                if (verdict == 0 && r != 0) {
                        verdict = r;
                        first = fmt;
                } else if (verdict != 0 && (r != verdict || (r == 1 && fmt != first))) {
                        abort();
                }
                if (r == 0 && n >= SF_CONTROL_LINE_MAX)
                        abort();
        }
        free(buf);
        return 0;
}
