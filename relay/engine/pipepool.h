#pragma once
/* Pipes for splice(2), recycled like the copy buffers: a direction holds one only while bytes
 * sit in it, so an idle connection holds no pipe (and no descriptors beyond its sockets). */
#include <stddef.h>

/* Asked for with F_SETPIPE_SZ; a pipe keeps the default size when the kernel refuses more
 * (fs.pipe-max-size, or pipe-user-pages-soft for an unprivileged user). A pipe's worth fits a
 * unix socket's default send buffer (208 KiB) in one splice: 256 KiB pipes moved TCP to unix
 * at about 2 400 MiB/s, 128 KiB ones at about 3 300 (bench/RESULTS.md). */
#define SF_PIPE_SIZE (128 * 1024)

struct sf_pipe {
        int rd, wr; /* -1 when none */
        size_t size;
};

struct sf_pipepool;

struct sf_pipepool *sf_pipepool_new(size_t max_free);
/* A pipe with nothing in it. 0 or -errno (EMFILE, ...). */
int sf_pipepool_get(struct sf_pipepool *pool, struct sf_pipe *p);
/* Returns p (emptied, or closed when bytes are left in it) and sets its fds to -1. Safe on
 * a pipe that is already -1. */
void sf_pipepool_put(struct sf_pipepool *pool, struct sf_pipe *p, size_t bytes_left);
/* Closes the spare pipes: their descriptors go back when the relay is idle. */
void sf_pipepool_trim(struct sf_pipepool *pool);
void sf_pipepool_free(struct sf_pipepool *pool);
