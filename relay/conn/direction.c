#include "relay/conn/state.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "relay/engine/bufpool.h"

/* The two sides of a connection and the two directions between them. Every I/O on a side goes
 * through here: a side is a socket of the engine (relay/engine/engine.h) or a stream of a shared
 * link (relay/link/mux.h), and its events come in here and go to the hub (sf_conn_on_ready). A direction holds the bytes read from one side
 * until the other side took them: a pooled buffer, or a pooled pipe for bulk transfers, and
 * only while it holds bytes. The handshake (its frames, the early bytes) and the pump (bytes
 * both ways) both move their bytes with these primitives, and neither calls the other. */

/* ---- a side ------------------------------------------------------------------------------ */

static void on_client_ev(struct sf_ev *ev, uint32_t events) {
        sf_conn_on_ready(sf_list_entry(ev, struct sf_conn, sock[CLIENT].ev), CLIENT, events);
}

static void on_upstream_ev(struct sf_ev *ev, uint32_t events) {
        sf_conn_on_ready(sf_list_entry(ev, struct sf_conn, sock[UPSTREAM].ev), UPSTREAM, events);
}

/* A stream's readiness in the engine's words. */
static void on_stream_ev(void *ev, uint32_t events) {
        struct side_ev *se = ev;
        uint32_t e = 0;
        if (events & SF_MUX_EV_IN)
                e |= SF_EV_IN;
        if (events & SF_MUX_EV_OUT)
                e |= SF_EV_OUT;
        if (events & SF_MUX_EV_RDHUP)
                e |= SF_EV_RDHUP;
        if (events & SF_MUX_EV_HUP)
                e |= SF_EV_HUP;
        if (events & SF_MUX_EV_ERR)
                e |= SF_EV_ERR;
        sf_conn_on_ready(se->c, se->side, e);
}

void sf_side_init(struct sf_conn *c) {
        sf_sock_init(&c->sock[CLIENT], on_client_ev);
        sf_sock_init(&c->sock[UPSTREAM], on_upstream_ev);
        for (int i = 0; i < 2; i++) {
                c->dir[i].pipe.rd = c->dir[i].pipe.wr = -1;
                c->sev[i] = (struct side_ev){ c, i };
        }
}

void sf_side_attach_stream(struct sf_conn *c, int side, struct sf_mux_stream *s) {
        c->stream[side] = s;
        /* A stream has no descriptor to move bytes in the kernel with: both directions copy. */
        c->dir[side].copy_only = c->dir[1 - side].copy_only = true;
        c->wr[side] = true;
        sf_mux_stream_watch(s, on_stream_ev, &c->sev[side]);
}

int sf_side_adopt(struct sf_conn *c, int side, struct sf_incoming *in, int family) {
        return sf_sock_adopt(c->fwd->eng, &c->sock[side], in, family);
}

ssize_t sf_side_recv(struct sf_conn *c, int side, void *buf, size_t n) {
        if (c->stream[side])
                return sf_mux_stream_recv(c->stream[side], buf, n);
        return sf_sock_recv(&c->sock[side], buf, n);
}

ssize_t sf_side_send(struct sf_conn *c, int side, const void *buf, size_t n) {
        if (c->stream[side])
                return sf_mux_stream_send(c->stream[side], buf, n);
        return sf_sock_send(&c->sock[side], buf, n);
}

void sf_side_shutdown(struct sf_conn *c, int side) {
        if (c->stream[side])
                sf_mux_stream_shutdown(c->stream[side]);
        else
                sf_sock_shutdown(&c->sock[side]);
}

void sf_side_close(struct sf_conn *c, int side) {
        if (c->stream[side]) {
                sf_mux_stream_close(c->stream[side]);
                c->stream[side] = NULL;
        }
        sf_sock_close(c->fwd->eng, &c->sock[side]);
        c->rd[side] = c->wr[side] = c->rdhup[side] = false;
}

int sf_side_error(struct sf_conn *c, int side) {
        if (c->stream[side])
                return sf_mux_stream_error(c->stream[side]);
        return sf_sock_error(&c->sock[side]);
}

bool sf_side_sending(struct sf_conn *c, int side) {
        return !c->stream[side] && sf_sock_sending(&c->sock[side]);
}

void sf_side_nodelay(struct sf_conn *c, int side) {
        if (!c->stream[side])
                sf_sock_nodelay(&c->sock[side]);
}

int sf_side_peername(struct sf_conn *c, int side, struct sockaddr_storage *ss, socklen_t *len) {
        if (c->stream[side])
                return -ENOTSOCK;
        return sf_sock_peername(&c->sock[side], ss, len);
}

const char *sf_side_reason(struct sf_conn *c, int side) {
        return c->stream[side] ? sf_mux_stream_reason(c->stream[side]) : "";
}

/* The deferred call comes back through the client side's callback with no events; the client
 * side is open as long as the connection is. */
void sf_side_yield(struct sf_conn *c) {
        sf_engine_defer(c->fwd->eng, &c->sock[CLIENT].ev);
}

/* ---- a direction ------------------------------------------------------------------------ */

/* Bytes for a stream are read into its own send buffer while it has this much room; with
 * less, into the direction's buffer, whose flush waits until the stream takes them. */
#define SPACE_MIN (16 * 1024)

void sf_dir_release(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        sf_bufpool_put(c->fwd->pool, d->buf);
        d->buf = NULL;
        d->off = d->len = 0;
        d->held = false;
        sf_sock_pipe_put(c->fwd->eng, &d->pipe, d->pipe_len);
        d->pipe_len = 0;
}

void sf_dir_count(struct sf_conn *c, int from, size_t n) {
        if (from == CLIENT)
                c->fwd->stats->bytes_up += n;
        else
                c->fwd->stats->bytes_down += n;
}

void sf_dir_pass_eof(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        if (d->eof && !d->shut && !dir_pending(d)) {
                /* With the other direction done too the connection closes next, and close()
                 * says EOF by itself; a stream's close without its end would be a reset. */
                if (!c->dir[1 - from].shut || c->stream[1 - from])
                        sf_side_shutdown(c, 1 - from);
                d->shut = true;
        }
}

int sf_dir_flush(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        int to = 1 - from;
        while (dir_pending(d)) {
                ssize_t n;
                if (d->off < d->len)
                        n = sf_side_send(c, to, d->buf + d->off, d->len - d->off);
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
        if (!d->held)
                sf_dir_release(c, from);
        sf_dir_pass_eof(c, from);
        return 0;
}

/* Only while relaying do bytes skip the direction's buffer: before, the handshake takes its
 * frames from it, and the first bytes of an upstream with greeting_check are looked at there
 * first. */
static bool buffer_skippable(const struct sf_conn *c) {
        return c->state == ST_RELAYING && !c->greeting_check;
}

bool sf_dir_room(struct sf_conn *c, int from) {
        struct sf_mux_stream *to = c->stream[1 - from];
        return !buffer_skippable(c) || !to || sf_mux_stream_has_room(to, SPACE_MIN);
}

ssize_t sf_dir_read_some(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        /* Held bytes are kept for another candidate until the stream answers; a client that
         * sends a whole buffer before that commits to this candidate. */
        if (d->held && d->len == SF_BUF_SIZE)
                sf_dir_hold_drop(c);
        if (d->off == d->len && !d->held)
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
        bool plain = buffer_skippable(c) && !d->len && !d->held;
        if (plain && c->stream[from]) {
                /* The stream's buffer comes over whole: no copy. */
                ssize_t n = sf_mux_stream_recv_buf(c->stream[from], c->fwd->pool, &d->buf, &d->off);
                if (n > 0) {
                        d->len = d->off + (uint32_t)n;
                        /* It holds nothing more: its next bytes raise a new event. */
                        if (!c->rdhup[from])
                                c->rd[from] = false;
                }
                return n;
        }
        char *space;
        size_t room;
        if (plain && c->stream[1 - from] && sf_mux_stream_send_space(c->stream[1 - from], &space, &room) == 0) {
                if (room >= SPACE_MIN) {
                        /* Read straight into the stream's send buffer: no copy, and nothing
                         * left to flush. */
                        ssize_t n = sf_side_recv(c, from, space, room);
                        sf_mux_stream_commit(c->stream[1 - from], n > 0 ? (size_t)n : 0);
                        if (n > 0 && (size_t)n < room && !c->rdhup[from])
                                c->rd[from] = false;
                        return n;
                }
                sf_mux_stream_commit(c->stream[1 - from], 0);
        }
        if (!d->buf && !(d->buf = sf_bufpool_get(c->fwd->pool))) {
                errno = ENOMEM;
                return -1;
        }
        room = SF_BUF_SIZE - d->len;
        ssize_t n = sf_side_recv(c, from, d->buf + d->len, room);
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

int sf_dir_read(struct sf_conn *c, int from) {
        ssize_t n;
        do
                n = sf_dir_read_some(c, from);
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
                sf_dir_count(c, from, (size_t)n);
        return 1;
}

size_t sf_dir_peek(struct sf_conn *c, int from, void *out, size_t max) {
        const struct dir *d = &c->dir[from];
        size_t n = d->len - d->off < max ? d->len - d->off : max;
        if (n)
                memcpy(out, d->buf + d->off, n);
        return n;
}

size_t sf_dir_take(struct sf_conn *c, int from, void *out, size_t max) {
        size_t n = sf_dir_peek(c, from, out, max);
        c->dir[from].off += (uint32_t)n;
        return n;
}

int sf_dir_put_front(struct sf_conn *c, int from, const void *bytes, size_t n) {
        struct dir *d = &c->dir[from];
        if (!d->buf && !(d->buf = sf_bufpool_get(c->fwd->pool)))
                return -ENOMEM;
        if (d->off < n) {
                /* Only an empty direction gets here: what was in front was taken. */
                uint32_t rest = d->len - d->off;
                memmove(d->buf + n, d->buf + d->off, rest);
                d->len = (uint32_t)n + rest;
                d->off = (uint32_t)n;
        }
        d->off -= (uint32_t)n;
        memcpy(d->buf + d->off, bytes, n);
        return 0;
}

int sf_dir_hold_frame(struct sf_conn *c, const uint8_t *frame, size_t len) {
        struct dir *d = &c->dir[CLIENT];
        if (len > SF_HOLD_FRONT)
                return -EINVAL;
        if (!d->buf && !(d->buf = sf_bufpool_get(c->fwd->pool)))
                return -ENOMEM;
        /* The first candidate with a handshake (or a stream): nothing of the client's is held
         * yet. */
        if (!d->held)
                d->len = SF_HOLD_FRONT;
        if (len)
                memcpy(d->buf + SF_HOLD_FRONT - len, frame, len);
        d->off = (uint32_t)(SF_HOLD_FRONT - len);
        d->held = true;
        return 0;
}

int sf_dir_hold_read(struct sf_conn *c) {
        struct dir *d = &c->dir[CLIENT];
        while (c->rd[CLIENT] && !d->eof && d->len < SF_HOLD_FRONT + SF_EARLY_MAX) {
                size_t room = SF_HOLD_FRONT + SF_EARLY_MAX - d->len;
                ssize_t n = sf_side_recv(c, CLIENT, d->buf + d->len, room);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                return -errno;
                        c->rd[CLIENT] = false;
                        return 0;
                }
                if (n == 0) {
                        d->eof = true;
                        return 0;
                }
                d->len += (uint32_t)n;
                sf_dir_count(c, CLIENT, (size_t)n);
                if ((size_t)n < room && !c->rdhup[CLIENT])
                        c->rd[CLIENT] = false;
        }
        return 0;
}

void sf_dir_hold_end(struct sf_conn *c, bool with_frame) {
        struct dir *d = &c->dir[CLIENT];
        if (!d->held)
                return;
        d->held = false;
        if (!with_frame)
                d->off = SF_HOLD_FRONT;
        if (!dir_pending(d))
                sf_dir_release(c, CLIENT);
}

void sf_dir_hold_drop(struct sf_conn *c) {
        struct dir *d = &c->dir[CLIENT];
        if (!d->held)
                return;
        d->held = false;
        if (!dir_pending(d))
                sf_dir_release(c, CLIENT);
}

void sf_dir_upstream_reset(struct sf_conn *c) {
        struct dir *up = &c->dir[UPSTREAM];
        sf_dir_release(c, UPSTREAM);
        up->bulk = up->copy_only = up->eof = up->shut = false;
        /* What was held goes again to the next candidate, behind its own frame if it has one. */
        if (c->dir[CLIENT].held)
                c->dir[CLIENT].off = SF_HOLD_FRONT;
        c->dir[CLIENT].shut = false;
}

int sf_dir_discard(struct sf_conn *c, int side) {
        char sink[16384];
        for (int round = 0; round < PUMP_ROUNDS; round++) {
                ssize_t n = sf_side_recv(c, side, sink, sizeof sink);
                if (n > 0)
                        continue;
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        c->rd[side] = false;
                        return 0;
                }
                return 1;
        }
        /* More is coming: the other connections get their turn first. */
        sf_side_yield(c);
        return 0;
}
