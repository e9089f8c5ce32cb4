/* libFuzzer target: sf_endpoint_parse_n on arbitrary bytes (the preload parses
 * SOCKFERRY_PRELOAD_MAP entries in place with it, from the environment of any process). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf/endpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct sf_endpoint ep, ep2;
        char err[256], text[SF_ENDPOINT_TEXT_MAX + 8];

        int r = sf_endpoint_parse_n((const char *)data, size, &ep, err, sizeof err);
        if (strnlen(err, sizeof err) == sizeof err)
                abort();
        if (r < 0) {
                if (r != -EINVAL || err[0] == '\0')
                        abort();
                return 0;
        }
        /* Accepted: the text is kept as written and reparses to the same endpoint. */
        if (size >= sizeof ep.text || memcmp(ep.text, data, size) != 0 || ep.text[size] != '\0')
                abort();
        memcpy(text, data, size);
        text[size] = '\0';
        if (sf_endpoint_parse(text, &ep2, NULL, 0) != 0 || !sf_endpoint_equal(&ep, &ep2))
                abort();
        if (strnlen(ep.path, sizeof ep.path) == sizeof ep.path || strnlen(ep.host, sizeof ep.host) == sizeof ep.host)
                abort();
        (void)sf_endpoint_is_loopback(&ep);
        (void)sf_endpoint_kind_name(ep.kind);
        return 0;
}
