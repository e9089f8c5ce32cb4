#include "relay/engine/pipepool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

struct sf_pipepool {
        size_t n_free, max_free;
        struct sf_pipe free[];
};

struct sf_pipepool *sf_pipepool_new(size_t max_free) {
        struct sf_pipepool *p = calloc(1, sizeof *p + max_free * sizeof p->free[0]);
        if (p)
                p->max_free = max_free;
        return p;
}

int sf_pipepool_get(struct sf_pipepool *pool, struct sf_pipe *p) {
        if (pool->n_free > 0) {
                *p = pool->free[--pool->n_free];
                return 0;
        }
        int fds[2];
        if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
                return -errno;
        int size = fcntl(fds[1], F_SETPIPE_SZ, SF_PIPE_SIZE);
        if (size < 0)
                size = fcntl(fds[1], F_GETPIPE_SZ);
        p->rd = fds[0];
        p->wr = fds[1];
        p->size = size > 0 ? (size_t)size : 4096;
        return 0;
}

static void pipe_close(struct sf_pipe *p) {
        close(p->rd);
        close(p->wr);
}

void sf_pipepool_put(struct sf_pipepool *pool, struct sf_pipe *p, size_t bytes_left) {
        if (p->rd < 0)
                return;
        /* A pipe with bytes left would hand them to the next connection. */
        if (bytes_left > 0 || pool->n_free >= pool->max_free)
                pipe_close(p);
        else
                pool->free[pool->n_free++] = *p;
        p->rd = p->wr = -1;
}

void sf_pipepool_trim(struct sf_pipepool *pool) {
        while (pool->n_free > 0)
                pipe_close(&pool->free[--pool->n_free]);
}

void sf_pipepool_free(struct sf_pipepool *pool) {
        if (!pool)
                return;
        sf_pipepool_trim(pool);
        free(pool);
}
