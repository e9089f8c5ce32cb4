#pragma once
/* Fixed-size copy buffers, recycled through a free list so the data path never calls malloc
 * per read and an idle connection holds no buffer at all. */
#include <stddef.h>

/* Larger than a unix socket's default send buffer (net.core.wmem_default, 208 KiB), so one
 * recv takes all a unix client has queued: 128 KiB buffers moved unix to TCP at about
 * 1 700 MiB/s, 256 KiB ones at about 2 500 (bench/RESULTS.md). */
#define SF_BUF_SIZE (256 * 1024)

struct sf_bufpool;

/* A pool keeping at most max_free buffers in reserve. trim (NULL: none) hands the pages of
 * freed memory back to the system (sf_memory_trim): the pool calls it once no buffer is out
 * after it gave a burst's worth (SF_BUFPOOL_TRIM_AFTER) back to malloc, so a relay does not stay
 * at the peak of a burst, and never on a connection's way through the reserve. */
#define SF_BUFPOOL_TRIM_AFTER (32 * (size_t)SF_BUF_SIZE)
struct sf_bufpool *sf_bufpool_new(size_t max_free, void (*trim)(void));
void *sf_bufpool_get(struct sf_bufpool *pool);
void sf_bufpool_put(struct sf_bufpool *pool, void *buf);
void sf_bufpool_free(struct sf_bufpool *pool);
/* Buffers handed out and not given back: with no connection and no stream open, none (the
 * connection's unit tests check every way a connection ends with it; a link's own buffers are
 * not the pool's). */
size_t sf_bufpool_in_use(const struct sf_bufpool *pool);
