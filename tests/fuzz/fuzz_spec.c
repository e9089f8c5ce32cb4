/* libFuzzer target: sf_conf_add_spec (-F NAME:LISTEN=CONNECT[,key=value]...) on arbitrary
 * strings; the input is split at newlines into several specs so duplicate names and
 * cross-forward checks in sf_conf_validate are reached. Run with -close_fd_mask=2. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct sf_conf c;
        char *buf = malloc(size + 1);

        if (!buf)
                abort();
        memcpy(buf, data, size);
        buf[size] = '\0';
        sf_conf_init(&c);
        for (char *line = buf, *next; line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = '\0';
                (void)sf_conf_add_spec(&c, line);
        }
        (void)sf_conf_validate(&c);
        sf_conf_free(&c);
        free(buf);
        return 0;
}
