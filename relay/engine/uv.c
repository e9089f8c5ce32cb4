#include "relay/engine/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "relay/engine/uv_int.h"
#include "relay/sys/platform.h"

/* The part of the portable engine every system shares; uv_posix.c and uv_win.c
 * hold how listening sockets are watched and accepted and how local streams are opened:
 * descriptors on POSIX, named pipes through libuv on Windows. */

/* ---- the engine ------------------------------------------------------------------------ */

static void on_idle(uv_idle_t *idle) {
        struct sf_engine *e = idle->data;
        sf_deferq_run(&e->q);
        if (!sf_deferq_pending(&e->q))
                uv_idle_stop(&e->idle);
}

int sf_engine_init(struct sf_engine *e, uv_loop_t *loop, struct sf_bufpool *pool) {
        e->loop = loop;
        e->pool = pool;
        uv_idle_init(loop, &e->idle);
        e->idle.data = e;
        /* libuv sets a descriptor aside for its own accept (its EMFILE reserve) when the loop's
         * first stream is initialised: taken now, the relay's descriptor count stays where it
         * was at start once its connections are gone. */
        uv_pipe_init(loop, &e->first, 0);
        uv_close((uv_handle_t *)&e->first, NULL);
        e->open = true;
        return 0;
}

void sf_engine_close(struct sf_engine *e) {
        if (!e->open)
                return;
        e->open = false;
        sf_deferq_clear(&e->q);
        uv_close((uv_handle_t *)&e->idle, NULL);
}

void sf_engine_free(struct sf_engine *e) {
        sf_engine_close(e);
}

void sf_engine_run(struct sf_engine *e, uv_loop_t *loop) {
        (void)e;
        uv_run(loop, UV_RUN_DEFAULT);
}

void sf_engine_defer(struct sf_engine *e, struct sf_ev *ev) {
        sf_deferq_add(&e->q, ev);
        if (e->open)
                uv_idle_start(&e->idle, on_idle);
}

void sf_engine_cancel(struct sf_engine *e, struct sf_ev *ev) {
        sf_deferq_cancel(&e->q, ev);
}

void sf_engine_trim(struct sf_engine *e) {
        (void)e;
}

/* ---- one side of a connection ----------------------------------------------------------- */

void sf_uvsock_report(struct sf_uvsock *h, uint32_t events) {
        struct sf_sock *s = h->sock;
        if (s)
                s->ev.cb(&s->ev, events);
}

static void inbox_release(struct sf_uvsock *h) {
        sf_bufpool_put(h->e->pool, h->in);
        h->in = NULL;
        h->in_off = h->in_len = 0;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
        struct sf_uvsock *h = (struct sf_uvsock *)handle;
        (void)suggested;
        if (!h->in)
                h->in = sf_bufpool_get(h->e->pool);
        /* No more than the owner has room for (reading stops at 0): what it could not take
         * would hold a buffer while it waits, where the Linux engine leaves it in the kernel.
         * A buffer of length 0 makes libuv report UV_ENOBUFS. */
        uint32_t room = SF_BUF_SIZE - h->in_len;
        *buf = uv_buf_init(h->in ? h->in + h->in_len : NULL, h->in ? (room < h->want ? room : h->want) : 0);
}

static void read_stop(struct sf_uvsock *h) {
        if (h->reading) {
                uv_read_stop(&h->u.stream);
                h->reading = false;
        }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
        struct sf_uvsock *h = (struct sf_uvsock *)stream;
        (void)buf;
        if (nread == 0 || nread == UV_EAGAIN) {
                if (h->in && h->in_len == 0)
                        inbox_release(h);
                return;
        }
        if (nread > 0) {
                h->in_len += (uint32_t)nread;
                h->want -= (uint32_t)nread < h->want ? (uint32_t)nread : h->want;
                if (h->quiet)
                        uv_timer_again(h->quiet);
                sf_uvsock_report(h, SF_EV_IN);
                /* Full, or all the owner had room for and it did not ask again in the report
                 * (a recv sets want anew): the peer waits until sf_sock_recv asks for more
                 * (backpressure). Checked after the report, so that an owner that takes
                 * everything and asks again costs no stop and restart. */
                if (h->in_len == SF_BUF_SIZE || !h->want)
                        read_stop(h);
                return;
        }
        read_stop(h);
        if (h->in && h->in_off == h->in_len)
                inbox_release(h);
        if (nread == UV_EOF) {
                h->eof = true;
                sf_uvsock_report(h, SF_EV_IN | SF_EV_RDHUP);
                return;
        }
        h->err = nread == UV_ENOBUFS ? ENOMEM : sf_errno_uv((int)nread);
        sf_uvsock_report(h, SF_EV_IN | SF_EV_ERR | SF_EV_HUP);
}

int sf_uvsock_read_start(struct sf_uvsock *h) {
        /* An owner with no room gets nothing read (on_alloc would offer libuv 0 bytes: ENOBUFS). */
        if (h->reading || h->eof || h->err || !h->want)
                return 0;
        int r = uv_read_start(&h->u.stream, on_alloc, on_read);
        if (r < 0)
                return r;
        h->reading = true;
        return 0;
}

void sf_uvsock_closed(uv_handle_t *handle) {
        struct sf_uvsock *h = (struct sf_uvsock *)handle;
        inbox_release(h);
        sf_bufpool_put(h->e->pool, h->out);
        free(h);
}

void sf_uvsock_handle_freed(uv_handle_t *handle) {
        free(handle);
}

struct sf_uvsock *sf_uvsock_new(struct sf_engine *e, struct sf_sock *s) {
        struct sf_uvsock *h = calloc(1, sizeof *h);
        if (!h)
                return NULL;
        h->e = e;
        h->sock = s;
        h->fd = -1;
        h->want = SF_BUF_SIZE;
        if (s)
                s->h = h;
        return h;
}

void sf_sock_init(struct sf_sock *s, sf_ev_cb cb) {
        s->ev.cb = cb;
        s->h = NULL;
}

static void on_connect(uv_connect_t *req, int status) {
        struct sf_uvsock *h = req->data;
        if (status == UV_ECANCELED || !h->sock)
                return;
        if (status == 0)
                status = sf_uvsock_read_start(h);
        if (status < 0) {
                h->err = sf_errno_uv(status);
                sf_uvsock_report(h, SF_EV_ERR | SF_EV_HUP);
                return;
        }
        sf_uvsock_report(h, SF_EV_OUT);
}

/* TCP through libuv on every system; the others by the platform part. */
int sf_sock_connect(struct sf_engine *e, struct sf_sock *s, const struct sockaddr *addr, socklen_t len,
                    bool *in_progress) {
        *in_progress = false;
        int family = addr->sa_family;
        if (family == AF_INET || family == AF_INET6) {
                struct sf_uvsock *h = sf_uvsock_new(e, s);
                if (!h)
                        return -ENOMEM;
                h->is_tcp = true;
                uv_tcp_init(e->loop, &h->u.tcp);
                h->opened = true;
                h->creq.data = h;
                int r = uv_tcp_connect(&h->creq, &h->u.tcp, addr, on_connect);
                if (r < 0) {
                        sf_sock_close(e, s);
                        return -sf_errno_uv(r);
                }
                *in_progress = true;
                return 0;
        }
        return sf_sock_connect_local(e, s, addr, len, in_progress);
}

ssize_t sf_sock_recv(struct sf_sock *s, void *buf, size_t n) {
        struct sf_uvsock *h = s->h;
        /* A socket handed over (sf_sock_release: a host relay's shared link) or closed has no
         * handle: it reads as a closed descriptor does on the Linux engine. sf_conn_close
         * drains its client socket after a link took it over (a NULL dereference here). */
        if (!h) {
                errno = EBADF;
                return -1;
        }
        size_t avail = h->in ? h->in_len - h->in_off : 0;
        size_t k = n < avail ? n : avail;
        if (k) {
                memcpy(buf, h->in + h->in_off, k);
                h->in_off += (uint32_t)k;
                /* Empty: an idle side holds no buffer. */
                if (h->in_off == h->in_len)
                        inbox_release(h);
        }
        /* The inbox reads what the owner has room for after this, and no further: an owner
         * that stops asking (the other side does not take its bytes) leaves them in the
         * kernel, as on the Linux engine. Room left means the inbox is empty now. */
        h->want = (uint32_t)(n - k < SF_BUF_SIZE ? n - k : SF_BUF_SIZE);
        if (!h->want) {
                read_stop(h);
        } else {
                int r = sf_uvsock_read_start(h);
                if (r < 0)
                        h->err = sf_errno_uv(r);
        }
        if (k == 0) {
                errno = h->err ? h->err : h->eof ? 0 : EAGAIN;
                return errno ? -1 : 0;
        }
        return (ssize_t)k;
}

void sf_uvsock_end_input(struct sf_uvsock *h) {
        read_stop(h);
        inbox_release(h);
        h->eof = true;
}

static void on_write(uv_write_t *req, int status) {
        struct sf_uvsock *h = req->data;
        sf_bufpool_put(h->e->pool, h->out);
        h->out = NULL;
        if (status == UV_ECANCELED || !h->sock)
                return;
        if (status < 0) {
                h->err = sf_errno_uv(status);
                sf_uvsock_report(h, SF_EV_OUT | SF_EV_ERR);
                return;
        }
        if (h->end_after_write && !h->eof) {
                sf_uvsock_end_input(h);
                sf_uvsock_report(h, SF_EV_OUT | SF_EV_IN | SF_EV_RDHUP);
                return;
        }
        sf_uvsock_report(h, SF_EV_OUT);
}

ssize_t sf_sock_send(struct sf_sock *s, const void *buf, size_t n) {
        struct sf_uvsock *h = s->h;
        if (h->err) {
                errno = h->err;
                return -1;
        }
        if (h->out || h->poll) {
                errno = EAGAIN;
                return -1;
        }
        uv_buf_t b = uv_buf_init((char *)buf, (unsigned)n);
        int w = uv_try_write(&h->u.stream, &b, 1);
        if (w < 0 && w != UV_EAGAIN && w != UV_ENOSYS) {
                errno = sf_errno_uv(w);
                return -1;
        }
        size_t done = w > 0 ? (size_t)w : 0;
        if (done == n)
                return (ssize_t)n;
        /* The rest goes into the outbox; sends say EAGAIN until it is written. */
        size_t rest = n - done;
        if (rest > SF_BUF_SIZE)
                rest = SF_BUF_SIZE;
        if (!(h->out = sf_bufpool_get(h->e->pool))) {
                if (done)
                        return (ssize_t)done;
                errno = ENOMEM;
                return -1;
        }
        memcpy(h->out, (const char *)buf + done, rest);
        b = uv_buf_init(h->out, (unsigned)rest);
        h->wreq.data = h;
        int r = uv_write(&h->wreq, &h->u.stream, &b, 1, on_write);
        if (r < 0) {
                sf_bufpool_put(h->e->pool, h->out);
                h->out = NULL;
                if (done)
                        return (ssize_t)done;
                errno = sf_errno_uv(r);
                return -1;
        }
        return (ssize_t)(done + rest);
}

/* The outbox is being written: uv_close would cancel that write, and its bytes, which send
 * said it took, would never reach the peer. */
bool sf_sock_sending(const struct sf_sock *s) {
        return s->h && s->h->out;
}

static void on_shutdown(uv_shutdown_t *req, int status) {
        (void)req;
        (void)status;
}

/* After the queued writes, as shutdown(SHUT_WR) after the bytes in the send buffer. */
void sf_sock_shutdown(struct sf_sock *s) {
        struct sf_uvsock *h = s->h;
        if (h->shut || !h->opened || h->poll)
                return;
        h->shut = true;
        if (!sf_sock_shutdown_local(h))
                uv_shutdown(&h->sreq, &h->u.stream, on_shutdown);
}

void sf_sock_close(struct sf_engine *e, struct sf_sock *s) {
        struct sf_uvsock *h = s->h;
        sf_deferq_cancel(&e->q, &s->ev);
        if (!h)
                return;
        sf_deferq_cancel(&e->q, &h->endev);
        if (h->quiet) {
                uv_close((uv_handle_t *)h->quiet, sf_uvsock_handle_freed);
                h->quiet = NULL;
        }
        s->h = NULL;
        h->sock = NULL;
        if (h->poll) {
                uv_close((uv_handle_t *)h->poll, sf_uvsock_handle_freed);
                h->poll = NULL;
        }
        if (h->fd >= 0) {
                close(h->fd);
                h->fd = -1;
        }
        if (!h->opened) {
                free(h);
                return;
        }
        read_stop(h);
        uv_close(&h->u.handle, sf_uvsock_closed);
}

/* The side's own stream goes to the caller, with the close callback that frees the side's
 * state: a write still queued (the status frame) goes out first, as libuv keeps the order. */
int sf_sock_release(struct sf_engine *e, struct sf_sock *s, uv_loop_t *loop, uv_stream_t **out,
                    uv_close_cb *close_cb) {
        (void)e;
        (void)loop;
        struct sf_uvsock *h = s->h;
        /* Bytes read and not taken would be lost to the new owner: the peer broke the rule
         * that it waits for the status before it speaks on a link. */
        if (!h || !h->opened || h->err || h->eof || h->in_len > h->in_off)
                return -EBUSY;
        read_stop(h);
        inbox_release(h);
        s->h = NULL;
        h->sock = NULL;
        *out = &h->u.stream;
        *close_cb = sf_uvsock_closed;
        return 0;
}

int sf_sock_error(struct sf_sock *s) {
        return s->h->err;
}

void sf_sock_nodelay(struct sf_sock *s) {
        struct sf_uvsock *h = s->h;
        if (h->is_tcp && h->opened)
                uv_tcp_nodelay(&h->u.tcp, 1);
}

int sf_sock_peername(struct sf_sock *s, struct sockaddr_storage *ss, socklen_t *len) {
        struct sf_uvsock *h = s->h;
        if (!h || !h->opened)
                return -ENOTCONN;
        if (h->is_tcp) {
                int n = (int)*len;
                int r = uv_tcp_getpeername(&h->u.tcp, (struct sockaddr *)ss, &n);
                *len = (socklen_t)n;
                return r < 0 ? -sf_errno_uv(r) : 0;
        }
        return sf_sock_peername_local(h, ss, len);
}
