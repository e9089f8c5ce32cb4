/* Finding forwards by a key in constant time, for the checks that compare every forward with
 * every other: duplicate names, listen endpoints, aliases and variables. */
#include <errno.h>
#include <stdlib.h>

#include "conf/conf_int.h"

int sf_conf_index_init(struct sf_conf_index *ix, size_t n) {
        /* At most half full: probes stay short, and a free slot always ends one. */
        size_t size = 16;
        while (size < 2 * n)
                size *= 2;
        ix->slot = calloc(size, sizeof *ix->slot);
        if (!ix->slot)
                return -ENOMEM;
        ix->mask = size - 1;
        return 0;
}

void sf_conf_index_free(struct sf_conf_index *ix) {
        free(ix->slot);
        ix->slot = NULL;
}

size_t *sf_conf_index_slot(const struct sf_conf_index *ix, uint64_t hash, const struct sf_forward *forwards,
                           bool (*same)(const struct sf_forward *f, const void *key), const void *key) {
        for (size_t i = (size_t)hash & ix->mask;; i = (i + 1) & ix->mask) {
                size_t *s = &ix->slot[i];
                if (!*s || same(&forwards[*s - 1], key))
                        return s;
        }
}

uint64_t sf_conf_hash(uint64_t h, const void *p, size_t n, bool fold) {
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = b[i];
                if (fold && c >= 'A' && c <= 'Z')
                        c = (unsigned char)(c - 'A' + 'a');
                h = (h ^ c) * 1099511628211ull;
        }
        return h;
}
