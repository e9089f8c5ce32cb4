#include "relay/conn/state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "conf/log.h"
#include "relay/engine/bufpool.h"

/* The byte pump: both directions as far as readiness allows, through a buffer or a pipe, with
 * backpressure (a direction reads only once what it read before is written) and half-close
 * (an EOF is passed on with shutdown once its bytes are out). */

void sf_conn_release_buf(struct sf_conn *c, int i) {
        struct dir *d = &c->dir[i];
        sf_bufpool_put(c->fwd->pool, d->buf);
        d->buf = NULL;
        d->off = d->len = 0;
        sf_sock_pipe_put(c->fwd->eng, &d->pipe, d->pipe_len);
        d->pipe_len = 0;
}

void sf_conn_start_relaying(struct sf_conn *c) {
        c->state = ST_RELAYING;
        if (!c->hs_await_status)
                sf_conn_idle_arm(c);
        sf_conn_progress(c);
}

static void pass_eof(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        if (d->eof && !d->shut && !dir_pending(d)) {
                /* With the other direction done too the connection closes next, and close()
                 * says EOF by itself. */
                if (!c->dir[1 - from].shut)
                        sf_sock_shutdown(&c->sock[1 - from]);
                d->shut = true;
        }
}

/* Writes what is queued in dir[from] to the other side; once all of it is gone the buffer or
 * pipe goes back to its pool. 0 or -errno. */
static int flush(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        int to = 1 - from;
        while (dir_pending(d)) {
                ssize_t n;
                if (d->off < d->len)
                        n = sf_sock_send(&c->sock[to], d->buf + d->off, d->len - d->off);
                else
                        n = sf_sock_from_pipe(&d->pipe, &c->sock[to], d->pipe_len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                c->wr[to] = false;
                                return 0;
                        }
                        return -errno;
                }
                if (d->off < d->len)
                        d->off += (uint32_t)n;
                else
                        d->pipe_len -= (size_t)n;
        }
        sf_conn_release_buf(c, from);
        pass_eof(c, from);
        return 0;
}

void sf_conn_count_bytes(struct sf_conn *c, int from, size_t n) {
        if (from == CLIENT)
                c->fwd->stats.bytes_up += n;
        else
                c->fwd->stats.bytes_down += n;
}

/* One read from side `from` into the direction's pipe (bulk, when no buffered bytes must go
 * first) or after what its buffer holds. n, 0 at EOF, or -1 with errno. */
ssize_t sf_conn_read_some(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        if (d->off == d->len)
                d->off = d->len = 0;
        if (d->bulk && !d->len && !d->copy_only &&
            (d->pipe.rd >= 0 || sf_sock_pipe_get(c->fwd->eng, &d->pipe) == 0)) {
                ssize_t n = sf_sock_to_pipe(&c->sock[from], &d->pipe, d->pipe.size);
                if (n > 0)
                        d->pipe_len = (size_t)n;
                if (n >= 0 || errno != EINVAL)
                        return n;
                /* A socket family without the pipe path: copy from now on. */
                d->copy_only = true;
                sf_sock_pipe_put(c->fwd->eng, &d->pipe, 0);
        }
        if (!d->buf && !(d->buf = sf_bufpool_get(c->fwd->pool))) {
                errno = ENOMEM;
                return -1;
        }
        size_t room = SF_BUF_SIZE - d->len;
        ssize_t n = sf_sock_recv(&c->sock[from], d->buf + d->len, room);
        if (n > 0) {
                d->len += (uint32_t)n;
                if ((size_t)n == room)
                        d->bulk = true;
                else if (!c->rdhup[from])
                        /* A short read emptied the socket: bytes arriving later raise a new
                         * edge. An EOF that came with the last edge raises none. */
                        c->rd[from] = false;
        }
        return n;
}

/* read_some and what follows it wherever it is called: bytes counted, the EOF noted,
 * readiness cleared on EAGAIN. 1 when bytes or the EOF came, 0 when nothing did, -errno. */
int sf_conn_read_step(struct sf_conn *c, int from) {
        ssize_t n;
        do
                n = sf_conn_read_some(c, from);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                if (errno != EAGAIN)
                        return -errno;
                c->rd[from] = false;
                return 0;
        }
        if (n == 0)
                c->dir[from].eof = true;
        else
                sf_conn_count_bytes(c, from, (size_t)n);
        return 1;
}

/* Moves bytes from side `from` to the other side while both are ready; what the other side
 * does not take stays queued and reading `from` waits until it drains (backpressure). After
 * PUMP_ROUNDS reads the connection yields to the others and continues in a deferred call.
 * 0 or -errno. */
static int pump(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        for (int round = 0; !d->eof && !dir_pending(d) && c->rd[from]; round++) {
                if (round == PUMP_ROUNDS) {
                        sf_engine_defer(c->fwd->eng, &c->sock[CLIENT].ev);
                        return 0;
                }
                int r = sf_conn_read_step(c, from);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (from == UPSTREAM && c->greeting_check && sf_conn_greeting_refused(c))
                        return 0;
                r = flush(c, from);
                if (r < 0)
                        return r;
        }
        if (!dir_pending(d))
                sf_conn_release_buf(c, from);
        return 0;
}

void sf_conn_relay_error(struct sf_conn *c, int e) {
        char msg[200];
        snprintf(msg, sizeof msg, "connection error: %s", strerror(e));
        if (e != ECONNRESET && e != EPIPE)
                sf_log(SF_LOG_WARN, fname(c), c->id, "%s", msg);
        sf_conn_close(c, msg);
}

/* Both directions, as far as readiness allows. */
void sf_conn_relay_step(struct sf_conn *c) {
        if (c->hs_await_status) {
                if (c->rd[UPSTREAM])
                        sf_conn_on_status(c);
                if (c->closing)
                        return;
        }
        for (int from = 0; from < 2; from++) {
                int r = 0;
                if (dir_pending(&c->dir[from]) && c->wr[1 - from])
                        r = flush(c, from);
                if (r == 0 && !(from == UPSTREAM && c->hs_await_status))
                        r = pump(c, from);
                if (r < 0) {
                        sf_conn_relay_error(c, -r);
                        return;
                }
        }
        if (c->dir[CLIENT].shut && c->dir[UPSTREAM].shut)
                sf_conn_close(c, "both directions done");
}
