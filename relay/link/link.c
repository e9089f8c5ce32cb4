#include "relay/link/link.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/engine/bufpool.h"
#include "relay/engine/engine.h"
#include "relay/link/backoff.h"
#include "relay/link/client.h"
#include "relay/link/messages.h"
#include "relay/sys/platform.h"

/* Reads of the link land here before the mux takes them: a pooled buffer, so that one read
 * takes what a busy link has queued. */
#define READ_BUF SF_BUF_SIZE
/* One write at a time, of at most this much: the mux frames the next bytes only once the
 * last ones were taken, so what waits to go out stays in the streams' own buffers, bounded. */
#define WRITE_BUF SF_BUF_SIZE
/* A frame of at least this much is written from where the mux holds it; smaller ones are
 * copied together into one write. */
#define DIRECT_MIN (16 * 1024)
/* A ping unanswered for this many keepalive periods ends the link. */
#define PINGS_MISSED_MAX 2

enum phase { PH_NONE, PH_RESOLVE, PH_CONNECT, PH_HANDSHAKE, PH_MUX };

/* What the link runs over: one stream (a socket) or two (an exec's pipes), each allocated
 * with malloc and freed in its close callback. */
struct transport {
        uv_stream_t *rd, *wr; /* wr == rd for a socket */
        uv_close_cb close_cb; /* frees a handle; NULL: free() */
        struct sf_link *l;
        unsigned closing; /* handles whose close callback is due */
        /* rd read by the engine's own readiness set (sf_reader), else with uv_read_start. Here
         * rather than in the link: an event of the current batch may still name it after a
         * drop, and the transport lives until its close callback, after the batch. */
        struct sf_reader rdr;
        bool rd_hup; /* its peer shut down or failed: read on to the end, no edge follows */
};

struct sf_link {
        uv_loop_t *loop;
        struct sf_bufpool *pool;
        struct sf_engine *eng;
        const struct sf_link_params *p;
        const struct sf_link_ops *ops;
        void *owner;
        bool dialer; /* dials its endpoint, and again when the link drops */
        enum sf_mux_role role;

        enum sf_link_state state;
        time_t since;
        char cause[256];
        bool closing;
        unsigned handles; /* libuv handles not closed yet: the memory waits for them */
        uv_timer_t timer; /* the dial and handshake deadline, the backoff, the keepalive */
        struct sf_backoff backoff;

        struct transport *t;
        enum phase phase;
        uv_getaddrinfo_t gai;
        bool gai_pending;
        struct addrinfo *ai_list, *ai_next;
        uv_connect_t connect_req;
        uv_poll_t *vsock_poll;
        int vsock_fd;
        int last_err;

        struct sf_hs_client hsc;
        uint8_t frame[SF_HSC_FRAME_MAX];
        uv_write_t frame_req;

        struct sf_mux *mux;
        char *in;
        uint8_t *out;
        uv_write_t write_req;
        bool writing;
        bool flush_due;
        uv_idle_t flush;
        struct sf_ev flush_ev; /* the same through the engine's deferred calls */

        uint64_t ping_sent_ms;
        unsigned pings_missed;
        uint64_t rtt_us;
        bool was_up;
        uint64_t reconnects;
        /* Since when a client's link is not up, and the dials since then: logged once when it
         * goes down and once when it comes back, not at every attempt. */
        uint64_t down_since_ms;
        unsigned attempts;
        bool down_logged;
        uint64_t bytes_in, bytes_out;
        uint64_t streams_total_before; /* of the links before this one */
        bool retired; /* replaced by a new link: ends once its streams are over */
        bool draining_told; /* ops->draining was called */
        bool goaway_seen;   /* the peer sent GOAWAY: ops->draining is due */
        bool refused; /* the last attempt was refused by the peer (see link_refused) */
        bool fail_now; /* ... or failed as the next would now (sf_link_stats, fail_now) */
        enum sf_link_err refused_kind; /* which failure that was, for the clients' counters */
};

static void link_down(struct sf_link *l, const char *cause);
static void dial(struct sf_link *l);
static void resolve(struct sf_link *l);
static void addresses_try(struct sf_link *l, struct addrinfo *res);
static void flush(struct sf_link *l);
static void vsock_poll_drop(struct sf_link *l);
static void on_flush_deferred(struct sf_ev *ev, uint32_t events);

/* ---- lifetime ---------------------------------------------------------------------------- */

static bool not_up(enum sf_link_state st) {
        return st == SF_LINK_CONNECTING || st == SF_LINK_DOWN;
}

static void set_state(struct sf_link *l, enum sf_link_state st, const char *cause) {
        bool changed = l->state != st;
        /* A link that is down and dialled again is still down: its time is since it went
         * (or since the start), not since the last attempt, for "down since" and stats. */
        if (changed && !(not_up(l->state) && not_up(st)))
                l->since = time(NULL);
        l->state = st;
        if (st == SF_LINK_UP || !cause)
                l->cause[0] = '\0';
        else if (cause != l->cause)
                snprintf(l->cause, sizeof l->cause, "%s", cause);
        if (changed && l->ops->state_changed)
                l->ops->state_changed(l->owner, l);
}

/* A getaddrinfo that uv_cancel could not stop (it was already running on the thread pool)
 * still calls on_resolved: the link stays until it has. */
static void maybe_free(struct sf_link *l) {
        if (l->closing && l->handles == 0 && !l->gai_pending) {
                free(l->out);
                free(l->in);
                free(l);
        }
}

static void on_handle_closed(uv_handle_t *h) {
        struct sf_link *l = h->data;
        l->handles--;
        maybe_free(l);
}

static void on_transport_closed(uv_handle_t *h) {
        struct transport *t = h->data;
        if (t->close_cb)
                t->close_cb(h);
        else
                free(h);
        if (--t->closing == 0) {
                struct sf_link *l = t->l;
                free(t);
                l->handles--;
                maybe_free(l);
        }
}

static struct transport *transport_new(struct sf_link *l, uv_stream_t *rd, uv_stream_t *wr) {
        struct transport *t = calloc(1, sizeof *t);
        if (!t)
                return NULL;
        t->rd = rd;
        t->wr = wr;
        t->l = l;
        t->rdr.fd = -1;
        rd->data = wr->data = t;
        return t;
}

/* Closes the transport, whatever state it is in; a write still queued fails with ECANCELED. */
static void transport_drop(struct sf_link *l) {
        struct transport *t = l->t;
        if (!t)
                return;
        l->t = NULL;
        l->writing = false;
        if (l->p->eng)
                sf_reader_stop(l->p->eng, &t->rdr);
        l->handles++;
        t->closing = t->wr != t->rd ? 2 : 1;
        uv_close((uv_handle_t *)t->rd, on_transport_closed);
        if (t->wr != t->rd)
                uv_close((uv_handle_t *)t->wr, on_transport_closed);
}

static uv_stream_t *rd_of(struct sf_link *l) {
        return l->t->rd;
}

static uv_stream_t *wr_of(struct sf_link *l) {
        return l->t->wr;
}

static void mux_end(struct sf_link *l, const char *cause) {
        if (!l->mux)
                return;
        l->streams_total_before += sf_mux_streams_total(l->mux);
        char why[320];
        snprintf(why, sizeof why, "the link to %s went down: %s", l->p->name, cause);
        struct sf_mux *m = l->mux;
        l->mux = NULL;
        sf_mux_free(m, why);
}

void sf_link_close(struct sf_link *l) {
        if (!l || l->closing)
                return;
        mux_end(l, "the relay closed it");
        l->closing = true;
        l->state = SF_LINK_CLOSED;
        if (l->p->eng)
                sf_engine_cancel(l->p->eng, &l->flush_ev);
        if (l->gai_pending)
                uv_cancel((uv_req_t *)&l->gai);
        if (l->ai_list) {
                uv_freeaddrinfo(l->ai_list);
                l->ai_list = l->ai_next = NULL;
        }
        transport_drop(l);
        vsock_poll_drop(l);
        uv_close((uv_handle_t *)&l->timer, on_handle_closed);
        uv_close((uv_handle_t *)&l->flush, on_handle_closed);
        maybe_free(l);
}

static struct sf_link *link_alloc(uv_loop_t *loop, struct sf_bufpool *pool, const struct sf_link_params *p,
                                  const struct sf_link_ops *ops, void *owner) {
        struct sf_link *l = calloc(1, sizeof *l);
        if (!l)
                return NULL;
        l->vsock_fd = -1;
        /* Its own buffers for as long as it lives, not the pool's: the pool's count of buffers
         * out is the connections' and the streams', and it trims once that is zero. */
        l->in = malloc(READ_BUF);
        l->out = malloc(WRITE_BUF);
        if (!l->in || !l->out) {
                free(l->in);
                free(l->out);
                free(l);
                return NULL;
        }
        l->loop = loop;
        l->pool = pool;
        l->p = p;
        l->ops = ops;
        l->owner = owner;
        l->since = time(NULL);
        uv_timer_init(loop, &l->timer);
        uv_idle_init(loop, &l->flush);
        l->flush_ev.cb = on_flush_deferred;
        l->timer.data = l->flush.data = l;
        l->handles = 2;
        return l;
}

/* ---- the mux over the transport ------------------------------------------------------------ */

static void retired_check(struct sf_link *l);

static void on_flush_idle(uv_idle_t *h) {
        struct sf_link *l = h->data;
        uv_idle_stop(&l->flush);
        if (l->p->eng)
                sf_engine_cancel(l->p->eng, &l->flush_ev);
        l->flush_due = false;
        flush(l);
        retired_check(l);
}

static void on_flush_deferred(struct sf_ev *ev, uint32_t events) {
        (void)events;
        struct sf_link *l = (struct sf_link *)((char *)ev - offsetof(struct sf_link, flush_ev));
        l->flush_due = false;
        flush(l);
        retired_check(l);
}

/* The mux has bytes: written at the end of this turn, so that one write carries every stream's. */
static void mux_want_output(void *owner) {
        struct sf_link *l = owner;
        if (l->flush_due || l->writing || !l->t)
                return;
        l->flush_due = true;
        if (l->p->eng)
                sf_engine_defer(l->p->eng, &l->flush_ev);
        else
                uv_idle_start(&l->flush, on_flush_idle);
}

static void on_written(uv_write_t *req, int status) {
        struct sf_link *l = req->data;
        if (l->closing || !l->t || req->handle != wr_of(l))
                return;
        l->writing = false;
        if (status < 0) {
                char why[200];
                snprintf(why, sizeof why, "writing to it: %s", uv_strerror(status));
                link_down(l, why);
                return;
        }
        flush(l);
}

/* Queues what the socket did not take at once; the next bytes wait for its callback. */
static void write_queued(struct sf_link *l, size_t off, size_t n) {
        l->bytes_out += (uint64_t)n;
        uv_buf_t b = uv_buf_init((char *)l->out + off, (unsigned)n);
        l->write_req.data = l;
        int r = uv_write(&l->write_req, wr_of(l), &b, 1, on_written);
        if (r < 0) {
                char why[200];
                snprintf(why, sizeof why, "writing to it: %s", uv_strerror(r));
                link_down(l, why);
                return;
        }
        l->writing = true;
}

/* Small frames (headers, window updates, the DATA of interactive streams) are gathered in
 * l->out, so that one write carries every stream's; a large one goes straight from the mux's
 * memory, in the same write, without a copy. What the socket takes at once needs no write
 * request (nor the loop turn of its callback); once it is full, the rest is copied to l->out
 * and goes through one uv_write, and the next bytes wait for it. */
static void flush(struct sf_link *l) {
        if (!l->mux || !l->t || l->writing || l->closing)
                return;
        char why[200];
        size_t staged = 0;
        for (;;) {
                const uint8_t *p;
                ssize_t n = sf_mux_output_peek(l->mux, &p, why, sizeof why);
                if (n < 0) {
                        link_down(l, why);
                        return;
                }
                if (n > 0 && (size_t)n < DIRECT_MIN && staged + (size_t)n <= WRITE_BUF) {
                        memcpy(l->out + staged, p, (size_t)n);
                        sf_mux_output_advance(l->mux, (size_t)n);
                        staged += (size_t)n;
                        continue;
                }
                if (!staged && !n)
                        return;
                uv_buf_t b[2] = { uv_buf_init((char *)l->out, (unsigned)staged), uv_buf_init((char *)p, (unsigned)n) };
                uv_buf_t *first = staged ? b : b + 1;
                unsigned nb = (staged ? 1 : 0) + (n ? 1 : 0);
                int w = uv_try_write(wr_of(l), first, nb);
                /* Not now (EAGAIN), or not this way (a transport without it): uv_write takes
                 * it, and reports a real error in its callback. */
                size_t done = w > 0 ? (size_t)w : 0;
                if (done < staged) {
                        l->bytes_out += done;
                        write_queued(l, done, staged - done);
                        return;
                }
                l->bytes_out += done;
                done -= staged;
                staged = 0;
                sf_mux_output_advance(l->mux, done);
                if (done < (size_t)n) {
                        ssize_t k = sf_mux_output(l->mux, l->out, WRITE_BUF, why, sizeof why);
                        if (k < 0)
                                link_down(l, why);
                        else if (k > 0)
                                write_queued(l, 0, (size_t)k);
                        return;
                }
                if (n == 0)
                        return;
        }
}

static void mux_stream_new(void *owner, struct sf_mux_stream *s, const char *service, bool by_default, bool probe) {
        struct sf_link *l = owner;
        if (l->ops->stream_new) {
                l->ops->stream_new(l->owner, l, s, service, by_default, probe);
                return;
        }
        sf_mux_stream_refuse(s, SF_MUX_UNKNOWN_SERVICE, "this end opens no streams for its peer");
        sf_mux_stream_close(s);
}

static void keepalive_arm(struct sf_link *l);

/* A ping carries the time it was sent in microseconds: a loopback link answers in far less
 * than the loop's millisecond clock can tell. */
static uint64_t now_us(void) {
        return uv_hrtime() / 1000;
}

static void mux_pong(void *owner, uint64_t sent) {
        struct sf_link *l = owner;
        uint64_t now = now_us();
        /* At least 1: 0 means no answer yet. */
        l->rtt_us = now > sent ? now - sent : 1;
        l->pings_missed = 0;
}

/* A client link that takes no new streams any more: its owner hears of it once. */
static void draining(struct sf_link *l) {
        if (!l->dialer || l->retired || l->draining_told)
                return;
        l->draining_told = true;
        if (l->ops->draining)
                l->ops->draining(l->owner, l);
}

/* Inside nghttp2's callbacks: the owner hears of it once sf_mux_input returned (mux_input), as
 * it may end this link, and its mux, right away. */
static void mux_goaway(void *owner) {
        struct sf_link *l = owner;
        l->goaway_seen = true;
}

static const struct sf_mux_ops mux_ops = {
        .stream_new = mux_stream_new,
        .want_output = mux_want_output,
        .pong = mux_pong,
        .goaway = mux_goaway,
};

/* A retired link whose last stream is over ends now. */
static void retired_check(struct sf_link *l) {
        if (l->retired && !l->closing && l->mux && sf_mux_streams_open(l->mux) == 0)
                link_down(l, "its streams are over (a new link took its place)");
}

static void on_keepalive(uv_timer_t *t) {
        struct sf_link *l = t->data;
        if (!l->mux)
                return;
        /* A stream its user closed after the session was done with it goes without a frame:
         * a retired link looks again here at the latest. */
        retired_check(l);
        if (l->closing || !l->mux)
                return;
        if (l->ping_sent_ms && ++l->pings_missed >= PINGS_MISSED_MAX) {
                char why[160];
                snprintf(why, sizeof why, "no answer to %u pings in %llums (keepalive)", l->pings_missed,
                         (unsigned long long)(l->pings_missed * l->p->keepalive_ms));
                link_down(l, why);
                return;
        }
        l->ping_sent_ms = uv_now(l->loop);
        sf_mux_ping(l->mux, now_us());
        keepalive_arm(l);
}

static void keepalive_arm(struct sf_link *l) {
        if (l->p->keepalive_ms)
                uv_timer_start(&l->timer, on_keepalive, l->p->keepalive_ms, 0);
        else
                uv_timer_stop(&l->timer);
}

static void mux_input(struct sf_link *l, const uint8_t *data, size_t n) {
        char why[200];
        int r = sf_mux_input(l->mux, data, n, why, sizeof why);
        if (r == 0 && l->dialer && l->goaway_seen && !l->draining_told) {
                /* The owner may retire (and so end) this link now: its memory stays until libuv
                 * let go of its handles, and nothing else of it is used once it closes. */
                draining(l);
                if (l->closing || !l->mux)
                        return;
        }
        if (r == 0 && l->retired) {
                retired_check(l);
                return;
        }
        if (r < 0) {
                char msg[300];
                if (!l->p->key && !l->dialer && l->state == SF_LINK_CONNECTING)
                        sf_link_exec_noise(data, n, msg, sizeof msg);
                else
                        snprintf(msg, sizeof msg, "it broke the protocol: %s", why);
                link_down(l, msg);
                return;
        }
        if (l->state == SF_LINK_CONNECTING && sf_mux_ready(l->mux)) {
                sf_backoff_reset(&l->backoff);
                if (l->was_up)
                        l->reconnects++;
                double down_s = (double)(uv_now(l->loop) - l->down_since_ms) / 1000.0;
                const char *plural = l->attempts == 1 ? "" : "s";
                if (l->dialer && l->down_logged && l->was_up)
                        sf_log(SF_LOG_INFO, NULL, 0, "link to %s up again after %.1f s (%u attempt%s)", l->p->name,
                               down_s, l->attempts, plural);
                else if (l->dialer && l->down_logged)
                        sf_log(SF_LOG_INFO, NULL, 0, "link to %s up after %.1f s (%u attempt%s)", l->p->name, down_s,
                               l->attempts, plural);
                else if (l->dialer)
                        sf_log(SF_LOG_INFO, NULL, 0, "link to %s up", l->p->name);
                l->was_up = true;
                l->down_logged = false;
                l->attempts = 0;
                set_state(l, SF_LINK_UP, NULL);
        }
}

/* Test builds (-Dtest_hooks=true) only: SF_TEST_STREAM_ID_START starts a client link's stream
 * ids there, so that a test sees them run out without opening 2^30 streams. */
static void test_hooks_apply(struct sf_link *l) {
#ifdef SF_TEST_HOOKS
        const char *start = getenv("SF_TEST_STREAM_ID_START");
        if (l->dialer && start && *start)
                sf_mux_set_next_stream_id(l->mux, (uint32_t)strtoul(start, NULL, 10));
#else
        (void)l;
#endif
}

static int mux_start(struct sf_link *l) {
        int r = sf_mux_new(l->role, &l->p->mux, &mux_ops, l, l->pool, &l->mux);
        if (r < 0)
                return r;
        test_hooks_apply(l);
        l->phase = PH_MUX;
        l->pings_missed = 0;
        l->ping_sent_ms = 0;
        /* A first ping at once: the link's round trip is known from the start, not only
         * after a keepalive period. */
        sf_mux_ping(l->mux, now_us());
        keepalive_arm(l);
        mux_want_output(l);
        return 0;
}

/* ---- reading ----------------------------------------------------------------------------- */

static void handshake_input(struct sf_link *l, const uint8_t *data, size_t n);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
        (void)suggested;
        struct transport *t = h->data;
        struct sf_link *l = t->l;
        *buf = uv_buf_init(l->in, READ_BUF);
}

/* What a read of the transport gave: n bytes in l->in, or a libuv error (UV_EOF). */
static void link_read(struct sf_link *l, ssize_t n) {
        if (n < 0) {
                char why[200];
                if (n == UV_EOF)
                        snprintf(why, sizeof why, "%s", l->phase == PH_MUX ? "the peer closed it" : "the peer closed the connection");
                else
                        snprintf(why, sizeof why, "reading from it: %s", uv_strerror((int)n));
                if (l->phase == PH_HANDSHAKE) {
                        sf_hs_client_eof(&l->hsc);
                        link_down(l, l->hsc.msg);
                        return;
                }
                link_down(l, why);
                return;
        }
        l->bytes_in += (uint64_t)n;
        if (l->phase == PH_MUX)
                mux_input(l, (const uint8_t *)l->in, (size_t)n);
        else
                handshake_input(l, (const uint8_t *)l->in, (size_t)n);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        (void)buf;
        struct transport *t = s->data;
        struct sf_link *l = t->l;
        if (!l || l->t != t || l->closing)
                return;
        if (n == 0 || n == UV_ENOBUFS)
                return;
        link_read(l, n);
}

/* Reads a busy link may take in one go before the other connections get their turn. */
#define READS_PER_TURN 8

/* Readable (edge-triggered): read until a short read emptied it (bytes that come later raise
 * a new edge) or to the end, or go on in a deferred call. */
static void on_readable(struct sf_ev *ev, uint32_t events) {
        struct transport *t = (struct transport *)((char *)ev - offsetof(struct transport, rdr.ev));
        struct sf_link *l = t->l;
        if (events & (SF_EV_RDHUP | SF_EV_HUP | SF_EV_ERR))
                t->rd_hup = true;
        for (int i = 0; i < READS_PER_TURN; i++) {
                if (l->t != t || l->closing)
                        return;
                ssize_t n = sf_reader_read(&t->rdr, l->in, READ_BUF);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return;
                link_read(l, n > 0 ? n : n == 0 ? UV_EOF : uv_translate_sys_error(errno));
                if (n <= 0 || ((size_t)n < READ_BUF && !t->rd_hup))
                        return;
        }
        if (l->t == t && !l->closing)
                sf_engine_defer(l->p->eng, &t->rdr.ev);
}

static int read_start(struct sf_link *l) {
        if (l->p->eng && sf_reader_start(l->p->eng, &l->t->rdr, rd_of(l), on_readable) == 0)
                return 0;
        return uv_read_start(rd_of(l), on_alloc, on_read);
}

/* ---- the client's handshake ---------------------------------------------------------------- */

static void link_refused(struct sf_link *l, enum sf_link_err kind, const char *msg);

/* Something that accepted and then said nothing in time is no relay that will answer the next
 * attempt either: a refusal as much as a wrong greeting is. */
static void on_hs_timeout(uv_timer_t *t) {
        struct sf_link *l = t->data;
        sf_hs_client_timeout(&l->hsc, l->p->handshake_timeout_ms);
        link_refused(l, l->hsc.kind, l->hsc.msg);
}

static void on_frame_written(uv_write_t *req, int status) {
        struct sf_link *l = req->data;
        if (status < 0 && !l->closing && l->t && req->handle == wr_of(l)) {
                char why[200];
                snprintf(why, sizeof why, "sending the client frame: %s", uv_strerror(status));
                link_down(l, why);
        }
}

/* The peer answered, and not as a relay holding our token does (wrong peer, version
 * mismatch, auth rejected): clients waiting for this link are told now rather than at their
 * connect-timeout, as the next attempt will most likely say the same. */
static void link_refused(struct sf_link *l, enum sf_link_err kind, const char *msg) {
        l->refused = true;
        l->fail_now = true;
        l->refused_kind = kind;
        link_down(l, msg);
}

/* The handshake of relay/link/client.h with the LINK flag; the peer's first frames may follow
 * its status in the same read. */
static void handshake_input(struct sf_link *l, const uint8_t *data, size_t n) {
        while (n > 0 && !l->closing && l->t) {
                size_t used;
                enum sf_hsc_step step = sf_hs_client_input(&l->hsc, data, n, &used);
                data += used;
                n -= used;
                switch (step) {
                case SF_HSC_MORE:
                        continue;
                case SF_HSC_FRAME: {
                        uv_buf_t b = uv_buf_init((char *)l->frame, (unsigned)sf_hs_client_frame(&l->hsc, l->frame));
                        l->frame_req.data = l;
                        if (uv_write(&l->frame_req, wr_of(l), &b, 1, on_frame_written) < 0) {
                                link_down(l, "sending the client frame failed");
                                return;
                        }
                        /* The host relay answers at once: nothing to dial for a link. */
                        uv_timer_start(&l->timer, on_hs_timeout, l->p->handshake_timeout_ms, 0);
                        continue;
                }
                case SF_HSC_OLD_PEER:
                        uv_timer_stop(&l->timer);
                        transport_drop(l);
                        l->phase = PH_NONE;
                        sf_log(SF_LOG_INFO, NULL, 0,
                               "link to %s: the host relay does not offer a shared link (an older sockferry): "
                               "one connection per client instead",
                               l->p->name);
                        set_state(l, SF_LINK_OLD_PEER, "the host relay does not offer a shared link");
                        return;
                case SF_HSC_FAILED:
                        link_refused(l, l->hsc.kind, l->hsc.msg);
                        return;
                case SF_HSC_OK:
                        uv_timer_stop(&l->timer);
                        if (mux_start(l) < 0) {
                                link_down(l, "out of memory");
                                return;
                        }
                        if (n > 0)
                                mux_input(l, data, n);
                        return;
                }
        }
}

/* ---- dialing ----------------------------------------------------------------------------- */

static void connected(struct sf_link *l) {
        if (l->ai_list) {
                uv_freeaddrinfo(l->ai_list);
                l->ai_list = l->ai_next = NULL;
        }
        if (l->t->rd->type == UV_TCP)
                uv_tcp_nodelay((uv_tcp_t *)l->t->rd, 1);
        l->phase = l->p->key ? PH_HANDSHAKE : PH_MUX;
        l->hsc = (struct sf_hs_client){
                .key = l->p->key,
                .ep = l->p->name,
                .token_file = l->p->token_file,
                .flags = SF_HS_FLAG_LINK,
        };
        if (read_start(l) < 0) {
                link_down(l, "reading from it failed");
                return;
        }
        if (l->p->key) {
                uv_timer_start(&l->timer, on_hs_timeout, l->p->handshake_timeout_ms, 0);
                return;
        }
        uv_timer_stop(&l->timer);
        if (mux_start(l) < 0)
                link_down(l, "out of memory");
}

static void try_next_addr(struct sf_link *l);
static void connect_failed(struct sf_link *l, int e);

static void on_connect(uv_connect_t *req, int status) {
        struct sf_link *l = req->data;
        if (l->closing || !l->t || req->handle != rd_of(l))
                return;
        if (status == UV_ECANCELED)
                return;
        if (status < 0) {
                l->last_err = sf_errno_uv(status);
                /* This address failed: the next one gets a fresh handle. */
                transport_drop(l);
                try_next_addr(l);
                return;
        }
        connected(l);
}

static void try_next_addr(struct sf_link *l) {
        while (l->ai_next) {
                struct addrinfo *ai = l->ai_next;
                l->ai_next = ai->ai_next;
                uv_tcp_t *tcp = malloc(sizeof *tcp);
                if (tcp)
                        uv_tcp_init(l->loop, tcp);
                if (!tcp || !(l->t = transport_new(l, (uv_stream_t *)tcp, (uv_stream_t *)tcp))) {
                        if (tcp)
                                uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
                        link_down(l, "out of memory");
                        return;
                }
                l->connect_req.data = l;
                int r = uv_tcp_connect(&l->connect_req, tcp, ai->ai_addr, on_connect);
                if (r == 0)
                        return;
                l->last_err = sf_errno_uv(r);
                transport_drop(l);
        }
        connect_failed(l, l->last_err ? l->last_err : EHOSTUNREACH);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
        struct sf_link *l = req->data;
        l->gai_pending = false;
        if (l->closing || l->phase != PH_RESOLVE) {
                /* The attempt it was for timed out, and no other waits for it yet. */
                uv_freeaddrinfo(res);
                maybe_free(l);
                return;
        }
        if (status == UV_ECANCELED) {
                /* Cancelled for an attempt that timed out; the attempt now waiting needs its own. */
                resolve(l);
                return;
        }
        if (status < 0) {
                char cause[240], msg[300];
                sf_link_resolve_cause(l->p->ep, uv_strerror(status), cause, sizeof cause);
                snprintf(msg, sizeof msg, "connect %s: %s", l->p->name, cause);
                uv_freeaddrinfo(res);
                l->fail_now = true;
                link_down(l, msg);
                return;
        }
        addresses_try(l, res);
}

static void addresses_try(struct sf_link *l, struct addrinfo *res) {
        l->ai_list = l->ai_next = res;
        l->last_err = 0;
        try_next_addr(l);
}

static void on_dial_timeout(uv_timer_t *t) {
        struct sf_link *l = t->data;
        char cause[240], msg[300];
        sf_link_timeout_cause(l->p->ep, l->p->connect_timeout_ms, cause, sizeof cause);
        snprintf(msg, sizeof msg, "connect %s: %s", l->p->name, cause);
        if (l->gai_pending)
                uv_cancel((uv_req_t *)&l->gai);
        if (l->vsock_poll) {
                /* The poll's close callback must not go on with the socket. */
                close(l->vsock_fd);
                l->vsock_fd = -1;
                vsock_poll_drop(l);
        }
        link_down(l, msg);
}

/* vsock has no libuv handle of its own: a socket connected by hand (its writability says the
 * connect finished), then a pipe handle on it. */
/* A connect that failed with e: refused or unreachable, the next attempt would too, now. */
static void connect_failed(struct sf_link *l, int e) {
        char cause[240], msg[300];
        sf_link_connect_cause(l->p->ep, e, cause, sizeof cause);
        snprintf(msg, sizeof msg, "connect %s: %s", l->p->name, cause);
        l->fail_now = e != ETIMEDOUT && e != ENOMEM && e != EMFILE && e != ENFILE;
        link_down(l, msg);
}

static void vsock_fail(struct sf_link *l, int e) {
        connect_failed(l, e);
}

static void vsock_opened(struct sf_link *l, int fd) {
        uv_pipe_t *pipe = malloc(sizeof *pipe);
        if (!pipe) {
                close(fd);
                vsock_fail(l, ENOMEM);
                return;
        }
        uv_pipe_init(l->loop, pipe, 0);
        int r = uv_pipe_open(pipe, fd);
        if (r < 0 || !(l->t = transport_new(l, (uv_stream_t *)pipe, (uv_stream_t *)pipe))) {
                uv_close((uv_handle_t *)pipe, (uv_close_cb)free);
                close(fd);
                vsock_fail(l, r < 0 ? sf_errno_uv(r) : ENOMEM);
                return;
        }
        connected(l);
}

static void on_vsock_poll_closed(uv_handle_t *h) {
        struct sf_link *l = h->data;
        free(h);
        l->handles--;
        int fd = l->vsock_fd;
        l->vsock_fd = -1;
        if (l->closing) {
                if (fd >= 0)
                        close(fd);
                maybe_free(l);
                return;
        }
        if (fd < 0)
                return;
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, (void *)&err, &len) < 0)
                err = errno;
        if (err) {
                close(fd);
                vsock_fail(l, err);
                return;
        }
        vsock_opened(l, fd);
}

static void vsock_poll_drop(struct sf_link *l) {
        if (!l->vsock_poll)
                return;
        uv_close((uv_handle_t *)l->vsock_poll, on_vsock_poll_closed);
        l->vsock_poll = NULL;
}

static void on_vsock_writable(uv_poll_t *h, int status, int events) {
        (void)status;
        (void)events;
        struct sf_link *l = h->data;
        uv_poll_stop(h);
        vsock_poll_drop(l);
}

static void vsock_dial(struct sf_link *l) {
        struct sockaddr_storage ss;
        socklen_t len;
        int r = sf_vsock_sockaddr(l->p->ep->cid, l->p->ep->port, &ss, &len);
        int fd = r < 0 ? r : sf_socket(ss.ss_family, SOCK_STREAM);
        if (fd < 0) {
                vsock_fail(l, -fd);
                return;
        }
        if (connect(fd, (struct sockaddr *)&ss, len) == 0) {
                vsock_opened(l, fd);
                return;
        }
        if (errno != EINPROGRESS) {
                r = errno;
                close(fd);
                vsock_fail(l, r);
                return;
        }
        uv_poll_t *poll = malloc(sizeof *poll);
        if (!poll || uv_poll_init_socket(l->loop, poll, fd) < 0) {
                free(poll);
                close(fd);
                vsock_fail(l, ENOMEM);
                return;
        }
        poll->data = l;
        l->handles++;
        l->vsock_poll = poll;
        l->vsock_fd = fd;
        uv_poll_start(poll, UV_WRITABLE, on_vsock_writable);
}

static void dial(struct sf_link *l) {
        l->refused = false;
        l->fail_now = false;
        if (l->attempts == 0 && !l->down_logged)
                l->down_since_ms = uv_now(l->loop);
        l->attempts++;
        set_state(l, SF_LINK_CONNECTING, l->cause);
        l->phase = PH_RESOLVE;
        /* The loop's clock is from the start of this turn, or from before the configuration
         * was loaded at a relay's start: connect-timeout counts from now, not from then. */
        uv_update_time(l->loop);
        uv_timer_start(&l->timer, on_dial_timeout, l->p->connect_timeout_ms, 0);
        const struct sf_endpoint *ep = l->p->ep;
        if (ep->kind == SF_EP_VSOCK) {
                vsock_dial(l);
                return;
        }
        /* A resolve of an earlier attempt that timed out may still be on the thread pool
         * (uv_cancel cannot stop a running one): its request is still queued and may not be
         * started again before its callback. Its answer serves this attempt. */
        if (!l->gai_pending)
                resolve(l);
}

static void resolve(struct sf_link *l) {
        const struct sf_endpoint *ep = l->p->ep;
        char port[16];
        snprintf(port, sizeof port, "%u", ep->port);
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG };
        /* A numeric address needs no lookup: answered here (no callback: libuv runs it in
         * place), not through the thread pool, whose round trip counts against connect-timeout
         * (140 ms of a relay's first dial under valgrind, the pool's threads being started). */
        struct addrinfo numeric = hints;
        numeric.ai_flags |= AI_NUMERICHOST;
        uv_getaddrinfo_t now;
        if (uv_getaddrinfo(l->loop, &now, NULL, ep->host, port, &numeric) == 0) {
                addresses_try(l, now.addrinfo);
                return;
        }
        l->gai.data = l;
        int r = uv_getaddrinfo(l->loop, &l->gai, on_resolved, ep->host, port, &hints);
        if (r < 0) {
                char cause[240], msg[300];
                sf_link_resolve_cause(ep, uv_strerror(r), cause, sizeof cause);
                snprintf(msg, sizeof msg, "connect %s: %s", l->p->name, cause);
                link_down(l, msg);
                return;
        }
        l->gai_pending = true;
}

static void on_backoff(uv_timer_t *t) {
        dial(t->data);
}

/* The link failed or dropped: its streams end with the cause; a client dials again after a
 * jittered backoff, a server end is over. */
static void link_down(struct sf_link *l, const char *cause) {
        if (l->closing)
                return;
        bool was_up = l->state == SF_LINK_UP;
        mux_end(l, cause);
        transport_drop(l);
        if (l->ai_list) {
                uv_freeaddrinfo(l->ai_list);
                l->ai_list = l->ai_next = NULL;
        }
        l->phase = PH_NONE;
        uv_timer_stop(&l->timer);
        uv_idle_stop(&l->flush);
        if (l->p->eng)
                sf_engine_cancel(l->p->eng, &l->flush_ev);
        l->flush_due = false;
        if (!l->dialer || l->retired) {
                if (l->retired)
                        sf_log(SF_LOG_DEBUG, NULL, 0, "the previous link to %s is closed: %s", l->p->name, cause);
                else if (was_up)
                        sf_log(l->p->quiet ? SF_LOG_DEBUG : SF_LOG_INFO, NULL, 0, "link from %s ended: %s",
                               l->p->name, cause);
                set_state(l, SF_LINK_DOWN, cause);
                if (l->ops->ended)
                        l->ops->ended(l->owner, l);
                return;
        }
        /* Logged once when it goes down and once when it is back (mux_input): a link that stays
         * down is not news at every backoff. A new cause while it stays down is, at debug
         * level; a refusal (wrong peer, token, version) needs someone to act, so it is told. */
        if (!l->down_logged) {
                sf_log(was_up ? SF_LOG_WARN : SF_LOG_INFO, NULL, 0, "link to %s down (%s); retrying", l->p->name, cause);
                l->down_logged = true;
        } else if (strncmp(l->cause, cause, sizeof l->cause - 1) != 0) {
                /* (l->cause holds the first 255 bytes: a longer cause, a wrong peer's advice, is
                 * the same cause when those match, not news at every backoff) */
                sf_log(l->refused ? SF_LOG_WARN : SF_LOG_DEBUG, NULL, 0, "link to %s still down (%s); retrying",
                       l->p->name, cause);
        }
        if (was_up) {
                /* Counted from the drop, not from the dial that went up long ago. */
                l->down_since_ms = uv_now(l->loop);
                l->attempts = 0;
        }
        uint64_t wait = sf_backoff_next(&l->backoff);
        set_state(l, SF_LINK_DOWN, cause);
        if (!l->closing)
                uv_timer_start(&l->timer, on_backoff, wait, 0);
}

/* ---- the API ------------------------------------------------------------------------------ */

void sf_link_hurry(struct sf_link *l) {
        if (!l->dialer || l->closing || l->retired || l->state != SF_LINK_DOWN)
                return;
        /* A client waits: the next attempt is now, not at the end of a backoff that may outlast
         * its connect-timeout. Its outcome, whatever it is, reaches the waiters. */
        uv_timer_stop(&l->timer);
        dial(l);
}

int sf_link_client_new(uv_loop_t *loop, struct sf_bufpool *pool, const struct sf_link_params *p,
                       const struct sf_link_ops *ops, void *owner, struct sf_link **out) {
        struct sf_link *l = link_alloc(loop, pool, p, ops, owner);
        if (!l)
                return -ENOMEM;
        l->dialer = true;
        l->role = SF_MUX_CLIENT;
        l->state = SF_LINK_CONNECTING;
        *out = l;
        dial(l);
        return 0;
}

void sf_link_transport_close(uv_stream_t *rd, uv_stream_t *wr, uv_close_cb close_cb) {
        uv_close((uv_handle_t *)rd, close_cb ? close_cb : (uv_close_cb)free);
        if (wr != rd)
                uv_close((uv_handle_t *)wr, close_cb ? close_cb : (uv_close_cb)free);
}

int sf_link_adopt(uv_loop_t *loop, struct sf_bufpool *pool, const struct sf_link_params *p,
                  const struct sf_link_ops *ops, void *owner, enum sf_mux_role role, uv_stream_t *rd,
                  uv_stream_t *wr, uv_close_cb close_cb, struct sf_link **out) {
        struct sf_link *l = link_alloc(loop, pool, p, ops, owner);
        if (l && !(l->t = transport_new(l, rd, wr))) {
                sf_link_close(l);
                l = NULL;
        }
        if (!l) {
                sf_link_transport_close(rd, wr, close_cb);
                return -ENOMEM;
        }
        l->t->close_cb = close_cb;
        l->role = role;
        l->state = SF_LINK_CONNECTING;
        *out = l;
        if (read_start(l) < 0 || mux_start(l) < 0) {
                link_down(l, "starting the link failed");
                return 0;
        }
        return 0;
}

struct sf_mux_stream *sf_link_stream_open(struct sf_link *l, const char *service, bool by_default, bool probe,
                                          int *err) {
        if (l->state != SF_LINK_UP || !l->mux || l->retired) {
                *err = -EAGAIN;
                return NULL;
        }
        struct sf_mux_stream *s = sf_mux_stream_open(l->mux, service, by_default, probe, err);
        /* That was the last stream id, or the peer is draining: the next stream goes on a new
         * link, this one ends with its streams. */
        if (sf_mux_exhausted(l->mux) || sf_mux_draining(l->mux))
                draining(l);
        return s;
}

enum sf_link_state sf_link_state(const struct sf_link *l) {
        return l->state;
}

const char *sf_link_cause(const struct sf_link *l) {
        return l->cause;
}

const char *sf_link_state_name(enum sf_link_state st) {
        switch (st) {
        case SF_LINK_CONNECTING: return "connecting";
        case SF_LINK_UP: return "up";
        case SF_LINK_DOWN: return "down";
        case SF_LINK_OLD_PEER: return "old-peer";
        case SF_LINK_CLOSED: return "closed";
        }
        return "closed";
}

void sf_link_stats_get(const struct sf_link *l, struct sf_link_stats *st) {
        memset(st, 0, sizeof *st);
        st->name = l->p->name;
        st->token_file = l->p->token_file ? l->p->token_file : "";
        st->dialer = l->dialer;
        st->state = l->state;
        st->since = l->since;
        st->rtt_us = l->rtt_us;
        st->streams_open = l->mux ? sf_mux_streams_open(l->mux) : 0;
        st->streams_total = l->streams_total_before + (l->mux ? sf_mux_streams_total(l->mux) : 0);
        st->reconnects = l->reconnects;
        st->bytes_in = l->bytes_in;
        st->bytes_out = l->bytes_out;
        st->refused = l->refused;
        st->fail_now = l->fail_now;
        st->refused_kind = l->refused ? l->refused_kind : SF_LINK_OK;
        snprintf(st->cause, sizeof st->cause, "%s", l->cause);
}

void sf_link_drain(struct sf_link *l) {
        if (l->mux)
                sf_mux_drain(l->mux);
}

void sf_link_inherit(struct sf_link *l, const struct sf_link *old) {
        l->streams_total_before = old->streams_total_before + (old->mux ? sf_mux_streams_total(old->mux) : 0);
        l->reconnects = old->reconnects;
        l->was_up = old->was_up;
}

void sf_link_retire(struct sf_link *l) {
        if (l->retired || l->closing)
                return;
        l->retired = true;
        if (!l->mux) {
                /* Not up: nothing of it is worth keeping. */
                link_down(l, "a new link took its place");
                return;
        }
        retired_check(l);
}

int sf_link_set_max_streams(struct sf_link *l, uint32_t max_streams) {
        return l->mux ? sf_mux_set_max_streams(l->mux, max_streams) : 0;
}
