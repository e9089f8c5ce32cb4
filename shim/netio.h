#pragma once
/* Blocking client I/O with a deadline, for the one-shot commands: check and stats. A
 * connection is an int: a socket on POSIX (shim/netio.c), a slot for a socket or a named pipe
 * on Windows (shim/netio_win.c). */
#include <stdint.h>
#include <sys/types.h>

#include "conf/endpoint.h"

/* Milliseconds on the monotonic clock. */
int64_t sf_netio_now_ms(void);

/* The deadline ms from now, saturating: a duration as long as configuration allows must not
 * wrap into the past. */
static inline int64_t sf_netio_deadline(uint64_t ms) {
        int64_t now = sf_netio_now_ms();
        return ms >= (uint64_t)(INT64_MAX - now) ? INT64_MAX : now + (int64_t)ms;
}

/* Connects to ep (unix path, abstract name, tcp — each address the name resolves to, in
 * order — vsock, or a named pipe on Windows, waiting while it is busy) within timeout_ms. Returns the connected socket or -errno with the cause
 * and the fix written to err, in the relay's words. The name lookup itself is not bounded. */
int sf_netio_dial(const struct sf_endpoint *ep, uint64_t timeout_ms, char *err, size_t errlen);

/* Waits until fd is readable or deadline (sf_netio_now_ms) passes, then reads at most len
 * bytes: the count, 0 at end of file, -ETIMEDOUT, or -errno. */
ssize_t sf_netio_read(int fd, void *buf, size_t len, int64_t deadline);

/* Writes all len bytes before deadline: 0, -ETIMEDOUT or -errno. */
int sf_netio_write_all(int fd, const void *buf, size_t len, int64_t deadline);

/* Closes a connection from sf_netio_dial. */
void sf_netio_close(int fd);
