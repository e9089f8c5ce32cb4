#include "relay/engine/bufpool.h"

#include <stdlib.h>

struct free_buf {
        struct free_buf *next;
};

struct sf_bufpool {
        struct free_buf *free;
        size_t n_free;
        size_t max_free;
        size_t n_out;
        size_t freed; /* bytes given back to malloc since the last trim */
        void (*trim)(void);
};

struct sf_bufpool *sf_bufpool_new(size_t max_free, void (*trim)(void)) {
        struct sf_bufpool *p = calloc(1, sizeof *p);
        if (p) {
                p->max_free = max_free;
                p->trim = trim;
        }
        return p;
}

void *sf_bufpool_get(struct sf_bufpool *pool) {
        struct free_buf *b = pool->free;
        if (b) {
                pool->free = b->next;
                pool->n_free--;
        } else {
                b = malloc(SF_BUF_SIZE);
        }
        if (b)
                pool->n_out++;
        return b;
}

void sf_bufpool_put(struct sf_bufpool *pool, void *buf) {
        if (!buf)
                return;
        pool->n_out--;
        /* Keep a bounded reserve: a burst of busy connections must not pin its peak memory. */
        if (pool->n_free >= pool->max_free) {
                free(buf);
                pool->freed += SF_BUF_SIZE;
        } else {
                struct free_buf *b = buf;
                b->next = pool->free;
                pool->free = b;
                pool->n_free++;
        }
        /* ... nor malloc on its behalf: glibc keeps a freed buffer's heap pages (its mmap
         * threshold rises to a buffer's size once one is freed) until asked. */
        if (!pool->n_out && pool->freed >= SF_BUFPOOL_TRIM_AFTER && pool->trim) {
                pool->freed = 0;
                pool->trim();
        }
}

size_t sf_bufpool_in_use(const struct sf_bufpool *pool) {
        return pool->n_out;
}

void sf_bufpool_free(struct sf_bufpool *pool) {
        if (!pool)
                return;
        while (pool->free) {
                struct free_buf *b = pool->free;
                pool->free = b->next;
                free(b);
        }
        free(pool);
}
