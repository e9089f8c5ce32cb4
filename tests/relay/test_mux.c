/* The shared link's multiplexer (relay/link/mux.c): a client and a server session wired
 * together in memory, streams opened, fed, stalled, half-closed, refused, reset and cut off
 * with the link; every path frees what it took (run under ASan in CI). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "relay/engine/bufpool.h"
#include "relay/link/mux.h"

struct side {
        struct sf_mux *m;
        struct sf_mux_stream *accepted[16];
        char service[16][64];
        bool probe[16];
        int n_new;
        int wants;
        uint64_t pong;
};

struct watcher {
        uint32_t events;
        int calls;
};

static struct sf_bufpool *pool;
static struct side cli, srv;

static void on_new(void *owner, struct sf_mux_stream *s, const char *service, bool by_default, bool probe) {
        struct side *sd = owner;
        cr_assert_lt(sd->n_new, 16);
        snprintf(sd->service[sd->n_new], sizeof sd->service[0], "%s", service);
        sd->probe[sd->n_new] = probe;
        sd->accepted[sd->n_new++] = s;
}

static void on_want(void *owner) {
        ((struct side *)owner)->wants++;
}

static void on_pong(void *owner, uint64_t sent) {
        ((struct side *)owner)->pong = sent;
}

static const struct sf_mux_ops ops = { .stream_new = on_new, .want_output = on_want, .pong = on_pong };

static void on_ev(void *ev, uint32_t events) {
        struct watcher *w = ev;
        w->events |= events;
        w->calls++;
}

static void setup_with(uint32_t max_streams, uint32_t stream_window) {
        memset(&cli, 0, sizeof cli);
        memset(&srv, 0, sizeof srv);
        pool = sf_bufpool_new(4, NULL);
        cr_assert_not_null(pool);
        struct sf_mux_config cfg = { .max_streams = max_streams, .stream_window = stream_window,
                                     .link_window = 4 * stream_window, .resets_burst = 1000, .resets_per_s = 1000 };
        cr_assert_eq(sf_mux_new(SF_MUX_CLIENT, &cfg, &ops, &cli, pool, &cli.m), 0);
        cr_assert_eq(sf_mux_new(SF_MUX_SERVER, &cfg, &ops, &srv, pool, &srv.m), 0);
}

static void setup(void) {
        setup_with(16, 64 * 1024);
}

static void teardown(void) {
        sf_mux_free(cli.m, "test over");
        sf_mux_free(srv.m, "test over");
        sf_bufpool_free(pool);
}

/* Moves bytes both ways until neither side has anything to say. Returns the bytes moved. */
static size_t pump(void) {
        static uint8_t buf[1 << 16];
        char why[200];
        size_t total = 0;
        for (;;) {
                ssize_t a = sf_mux_output(cli.m, buf, sizeof buf, why, sizeof why);
                cr_assert_geq(a, 0, "client output: %s", why);
                if (a > 0)
                        cr_assert_eq(sf_mux_input(srv.m, buf, (size_t)a, why, sizeof why), 0, "server input: %s", why);
                ssize_t b = sf_mux_output(srv.m, buf, sizeof buf, why, sizeof why);
                cr_assert_geq(b, 0, "server output: %s", why);
                if (b > 0)
                        cr_assert_eq(sf_mux_input(cli.m, buf, (size_t)b, why, sizeof why), 0, "client input: %s", why);
                total += (size_t)(a + b);
                if (a == 0 && b == 0)
                        return total;
        }
}

/* One call of sf_mux_output on the server, handed to the client whole: what a single write
 * to the link carries. Returns its length. */
static ssize_t server_write_once(void) {
        static uint8_t buf[1 << 16];
        char why[200];
        ssize_t n = sf_mux_output(srv.m, buf, sizeof buf, why, sizeof why);
        cr_assert_geq(n, 0, "server output: %s", why);
        if (n > 0)
                cr_assert_eq(sf_mux_input(cli.m, buf, (size_t)n, why, sizeof why), 0, "client input: %s", why);
        return n;
}

/* A client stream to service "agent", its events counted in w. */
static struct sf_mux_stream *open_watched(struct watcher *w) {
        int err = 0;
        struct sf_mux_stream *c = sf_mux_stream_open(cli.m, "agent", false, false, &err);
        cr_assert_not_null(c, "sf_mux_stream_open: %d", err);
        sf_mux_stream_watch(c, on_ev, w);
        return c;
}

/* After both ends closed their streams: none left on either side, every buffer in the pool. */
static void all_gone(void) {
        pump();
        cr_assert_eq(sf_mux_streams_open(cli.m), 0);
        cr_assert_eq(sf_mux_streams_open(srv.m), 0);
        cr_assert_eq(sf_bufpool_in_use(pool), 0, "every buffer back in the pool");
}

static size_t recv_all(struct sf_mux_stream *s, char *out, size_t cap) {
        size_t n = 0;
        ssize_t r;
        while (n < cap && (r = sf_mux_stream_recv(s, out + n, cap - n)) > 0)
                n += (size_t)r;
        return n;
}

TestSuite(mux, .init = setup, .fini = teardown);

Test(mux, a_stream_carries_bytes_both_ways_and_half_closes) {
        struct watcher wc = { 0 }, ws = { 0 };
        struct sf_mux_stream *c = open_watched(&wc);
        /* The client's bytes go with the stream's opening: no round trip first. */
        cr_assert_eq(sf_mux_stream_send(c, "ping", 4), 4);
        sf_mux_stream_shutdown(c);
        pump();
        cr_assert_eq(srv.n_new, 1);
        cr_assert_str_eq(srv.service[0], "agent");
        cr_assert_not(srv.probe[0]);
        struct sf_mux_stream *s = srv.accepted[0];
        sf_mux_stream_watch(s, on_ev, &ws);
        char buf[64];
        cr_assert_eq(recv_all(s, buf, sizeof buf), 4);
        cr_assert_eq(memcmp(buf, "ping", 4), 0);
        cr_assert_eq(sf_mux_stream_recv(s, buf, sizeof buf), 0, "the client's half-close is the end of its side");
        cr_assert_eq(sf_mux_stream_accept(s), 0);
        cr_assert_eq(sf_mux_stream_send(s, "pong", 4), 4);
        sf_mux_stream_shutdown(s);
        pump();
        cr_assert_eq(sf_mux_stream_status(c), SF_MUX_OK);
        cr_assert_eq(recv_all(c, buf, sizeof buf), 4);
        cr_assert_eq(memcmp(buf, "pong", 4), 0);
        cr_assert_eq(sf_mux_stream_recv(c, buf, sizeof buf), 0);
        cr_assert(wc.events & SF_MUX_EV_HUP, "both ends done: the stream is over");
        cr_assert_eq(sf_mux_stream_error(c), 0);
        cr_assert_eq(sf_mux_stream_error(s), 0);
        sf_mux_stream_close(c);
        sf_mux_stream_close(s);
        pump();
        cr_assert_eq(sf_mux_streams_open(cli.m), 0);
        cr_assert_eq(sf_mux_streams_open(srv.m), 0);
        cr_assert_eq(sf_mux_streams_total(srv.m), 1);
}

Test(mux, a_stalled_reader_stalls_its_own_stream_only) {
        int err = 0;
        struct sf_mux_stream *bulk = sf_mux_stream_open(cli.m, "bulk", false, false, &err);
        struct sf_mux_stream *chat = sf_mux_stream_open(cli.m, "chat", false, false, &err);
        cr_assert(bulk && chat);
        pump();
        cr_assert_eq(srv.n_new, 2);
        sf_mux_stream_accept(srv.accepted[0]);
        sf_mux_stream_accept(srv.accepted[1]);
        pump();
        /* The server never reads bulk: the client can queue its send buffer and the stream's
         * window, no more. */
        static char chunk[16384];
        memset(chunk, 'x', sizeof chunk);
        size_t sent = 0;
        for (int i = 0; i < 1000; i++) {
                ssize_t r = sf_mux_stream_send(bulk, chunk, sizeof chunk);
                if (r < 0) {
                        cr_assert_eq(errno, EAGAIN);
                        pump();
                        r = sf_mux_stream_send(bulk, chunk, sizeof chunk);
                        if (r < 0) {
                                cr_assert_eq(errno, EAGAIN);
                                break;
                        }
                }
                sent += (size_t)r;
        }
        cr_assert_leq(sent, SF_BUF_SIZE + 64 * 1024, "sent %zu: more than the send buffer and the window", sent);
        cr_assert_eq(sf_mux_stream_unread(srv.accepted[0]), 64 * 1024);
        /* The neighbour still gets through. */
        cr_assert_eq(sf_mux_stream_send(chat, "hi", 2), 2);
        pump();
        char buf[8];
        cr_assert_eq(sf_mux_stream_recv(srv.accepted[1], buf, sizeof buf), 2);
        /* Reading bulk opens its window again. */
        static char sink[SF_BUF_SIZE];
        size_t got = 0;
        for (int round = 0; round < 64 && got < sent; round++) {
                got += recv_all(srv.accepted[0], sink, sizeof sink);
                pump();
        }
        cr_assert_eq(got, sent);
        for (int i = 0; i < 2; i++)
                sf_mux_stream_close(srv.accepted[i]);
        sf_mux_stream_close(bulk);
        sf_mux_stream_close(chat);
        pump();
}

Test(mux, a_refused_stream_says_why) {
        struct watcher wc = { 0 };
        int err = 0;
        struct sf_mux_stream *c = sf_mux_stream_open(cli.m, "gpg", false, false, &err);
        sf_mux_stream_watch(c, on_ev, &wc);
        sf_mux_stream_send(c, "data", 4);
        pump();
        cr_assert_eq(sf_mux_stream_refuse(srv.accepted[0], SF_MUX_UNKNOWN_SERVICE,
                                          "unknown service gpg: this listener offers agent, docker"),
                     0);
        sf_mux_stream_close(srv.accepted[0]);
        pump();
        char buf[8];
        cr_assert_eq(sf_mux_stream_recv(c, buf, sizeof buf), -1);
        cr_assert_eq(errno, ECONNREFUSED);
        cr_assert_eq(sf_mux_stream_status(c), SF_MUX_UNKNOWN_SERVICE);
        cr_assert_str_eq(sf_mux_stream_reason(c), "unknown service gpg: this listener offers agent, docker");
        cr_assert(wc.events & SF_MUX_EV_ERR);
        sf_mux_stream_close(c);
        pump();
        cr_assert_eq(sf_mux_streams_open(cli.m), 0);
        cr_assert_eq(sf_mux_streams_open(srv.m), 0);
}

Test(mux, a_stream_closed_by_its_client_is_reset_at_the_server) {
        struct watcher ws = { 0 };
        int err = 0;
        struct sf_mux_stream *c = sf_mux_stream_open(cli.m, NULL, false, false, &err);
        pump();
        cr_assert_str_eq(srv.service[0], "", "no service named");
        struct sf_mux_stream *s = srv.accepted[0];
        sf_mux_stream_watch(s, on_ev, &ws);
        sf_mux_stream_accept(s);
        sf_mux_stream_send(c, "half a request", 14);
        pump();
        sf_mux_stream_close(c);
        pump();
        char buf[32];
        cr_assert_eq(recv_all(s, buf, sizeof buf), 14, "what came before the reset is still read");
        cr_assert_eq(sf_mux_stream_recv(s, buf, sizeof buf), -1);
        cr_assert_eq(errno, ECONNRESET);
        cr_assert(strstr(sf_mux_stream_reason(s), "cancelled"), "reason: %s", sf_mux_stream_reason(s));
        cr_assert(ws.events & SF_MUX_EV_ERR);
        cr_assert_eq(sf_mux_stream_send(s, "x", 1), -1);
        sf_mux_stream_close(s);
        pump();
        cr_assert_eq(sf_mux_streams_open(srv.m), 0);
}

Test(mux, the_link_going_down_ends_every_stream_with_its_cause) {
        struct watcher w1 = { 0 }, w2 = { 0 };
        int err = 0;
        struct sf_mux_stream *a = sf_mux_stream_open(cli.m, "a", false, false, &err);
        struct sf_mux_stream *b = sf_mux_stream_open(cli.m, "b", false, false, &err);
        sf_mux_stream_watch(a, on_ev, &w1);
        sf_mux_stream_watch(b, on_ev, &w2);
        pump();
        sf_mux_stream_accept(srv.accepted[0]);
        sf_mux_stream_send(srv.accepted[0], "unread", 6);
        pump();
        sf_mux_free(cli.m, "the link to tcp:host:7000 went down: Connection reset by peer");
        cli.m = NULL;
        cr_assert(w1.events & SF_MUX_EV_ERR);
        cr_assert(w2.events & SF_MUX_EV_ERR);
        char buf[8];
        cr_assert_eq(recv_all(a, buf, sizeof buf), 6, "bytes that arrived are still delivered");
        cr_assert_eq(sf_mux_stream_recv(a, buf, sizeof buf), -1);
        cr_assert_eq(errno, ECONNRESET);
        cr_assert_str_eq(sf_mux_stream_reason(b), "the link to tcp:host:7000 went down: Connection reset by peer");
        cr_assert_eq(sf_mux_stream_send(b, "x", 1), -1);
        sf_mux_stream_close(a);
        sf_mux_stream_close(b);
        /* The server side, whose owner never closed its streams, frees them with the session. */
}

Test(mux, a_stream_closed_before_it_went_out_ends_at_both_ends) {
        int err = 0;
        struct sf_mux_stream *c = sf_mux_stream_open(cli.m, "x", false, false, &err);
        sf_mux_stream_close(c);
        pump();
        for (int i = 0; i < srv.n_new; i++)
                sf_mux_stream_close(srv.accepted[i]);
        pump();
        cr_assert_eq(sf_mux_streams_open(cli.m), 0);
        cr_assert_eq(sf_mux_streams_open(srv.m), 0);
}

Test(mux, pings_come_back) {
        cr_assert_eq(sf_mux_ping(cli.m, 123456789), 0);
        pump();
        cr_assert_eq(cli.pong, 123456789);
        cr_assert_gt(cli.wants, 0, "the owner was told there is output");
}

Test(mux, a_draining_server_takes_no_new_streams_and_finishes_open_ones) {
        int err = 0;
        struct sf_mux_stream *c = sf_mux_stream_open(cli.m, "a", false, false, &err);
        pump();
        struct sf_mux_stream *s = srv.accepted[0];
        sf_mux_stream_accept(s);
        sf_mux_drain(srv.m);
        pump();
        cr_assert(sf_mux_draining(cli.m), "the client saw the GOAWAY");
        cr_assert_null(sf_mux_stream_open(cli.m, "b", false, false, &err));
        cr_assert_eq(err, -EAGAIN);
        cr_assert_eq(sf_mux_stream_send(s, "still here", 10), 10);
        sf_mux_stream_shutdown(s);
        pump();
        char buf[16];
        cr_assert_eq(recv_all(c, buf, sizeof buf), 10);
        cr_assert_eq(sf_mux_stream_recv(c, buf, sizeof buf), 0);
        sf_mux_stream_close(c);
        sf_mux_stream_close(s);
        pump();
}

Test(mux, a_probe_is_marked_and_answered_at_once) {
        int err = 0;
        struct sf_mux_stream *c = sf_mux_stream_open(cli.m, "agent", false, true, &err);
        sf_mux_stream_shutdown(c);
        pump();
        cr_assert(srv.probe[0]);
        cr_assert_eq(sf_mux_stream_accept(srv.accepted[0]), 0);
        cr_assert_gt(server_write_once(), 0);
        cr_assert_eq(sf_mux_stream_status(c), SF_MUX_OK, "a probe asks for the answer alone: it is not held");
        sf_mux_stream_shutdown(srv.accepted[0]);
        sf_mux_stream_close(srv.accepted[0]);
        pump();
        cr_assert_eq(sf_mux_stream_status(c), SF_MUX_OK);
        sf_mux_stream_close(c);
        pump();
}

/* What the client said so far goes over; the server's first stream is accepted. */
static struct sf_mux_stream *accept_first(void) {
        pump();
        cr_assert_eq(srv.n_new, 1);
        cr_assert_eq(sf_mux_stream_accept(srv.accepted[0]), 0);
        return srv.accepted[0];
}

Test(mux, an_accepted_streams_answer_goes_in_one_write_with_its_first_bytes) {
        struct watcher wc = { 0 };
        struct sf_mux_stream *c = open_watched(&wc);
        cr_assert_eq(sf_mux_stream_send(c, "req", 3), 3);
        struct sf_mux_stream *s = accept_first();
        cr_assert_eq(server_write_once(), 0, "the answer alone is not written: it waits for the first bytes");
        cr_assert_eq(sf_mux_stream_status(c), -1);
        cr_assert_eq(sf_mux_stream_accept(s), -EINVAL, "answered once");
        cr_assert_eq(sf_mux_stream_send(s, "reply", 5), 5);
        cr_assert_gt(server_write_once(), 0);
        cr_assert_eq(sf_mux_stream_status(c), SF_MUX_OK, "the answer came in the write of the first bytes");
        char buf[16];
        cr_assert_eq(recv_all(c, buf, sizeof buf), 5, "and the bytes with it");
        cr_assert_eq(memcmp(buf, "reply", 5), 0);
        sf_mux_stream_close(c);
        sf_mux_stream_close(s);
        all_gone();
}

Test(mux, an_accepted_stream_that_ends_without_a_byte_is_answered_with_its_end) {
        struct watcher wc = { 0 };
        struct sf_mux_stream *c = open_watched(&wc);
        sf_mux_stream_shutdown(c);
        struct sf_mux_stream *s = accept_first();
        sf_mux_stream_shutdown(s);
        cr_assert_gt(server_write_once(), 0);
        cr_assert_eq(sf_mux_stream_status(c), SF_MUX_OK);
        char buf[4];
        cr_assert_eq(sf_mux_stream_recv(c, buf, sizeof buf), 0, "the end came in the same write");
        cr_assert_eq(sf_mux_stream_error(c), 0);
        sf_mux_stream_close(c);
        sf_mux_stream_close(s);
        all_gone();
}

Test(mux, an_accepted_stream_dropped_before_a_byte_is_reset_with_the_cause) {
        struct watcher wc = { 0 };
        struct sf_mux_stream *c = open_watched(&wc);
        cr_assert_eq(sf_mux_stream_send(c, "req", 3), 3);
        struct sf_mux_stream *s = accept_first();
        sf_mux_stream_close(s); /* its upstream went away */
        pump();
        char buf[4];
        cr_assert_eq(sf_mux_stream_recv(c, buf, sizeof buf), -1);
        cr_assert_eq(errno, ECONNRESET);
        cr_assert(strstr(sf_mux_stream_reason(c), "cancelled"), "reason: %s", sf_mux_stream_reason(c));
        cr_assert(wc.events & SF_MUX_EV_ERR);
        sf_mux_stream_close(c);
        all_gone();
}

static void setup_two_streams(void) {
        setup_with(2, 64 * 1024);
}

Test(mux_limits, streams_beyond_the_peers_limit_wait_for_a_slot, .init = setup_two_streams, .fini = teardown) {
        int err = 0;
        struct sf_mux_stream *c[3];
        /* The link is used once the server's SETTINGS said how many it takes. */
        pump();
        cr_assert(sf_mux_ready(cli.m));
        for (int i = 0; i < 3; i++)
                c[i] = sf_mux_stream_open(cli.m, "s", false, false, &err);
        pump();
        cr_assert_eq(srv.n_new, 2, "the third waits for a slot");
        sf_mux_stream_close(c[0]);
        pump();
        sf_mux_stream_close(srv.accepted[0]);
        pump();
        cr_assert_eq(srv.n_new, 3, "a slot freed: the third opened");
        for (int i = 1; i < 3; i++) {
                sf_mux_stream_close(c[i]);
                sf_mux_stream_close(srv.accepted[i]);
        }
        pump();
}

Test(mux, garbage_from_the_peer_is_a_protocol_error) {
        char why[200] = "";
        const uint8_t junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        cr_assert_eq(sf_mux_input(srv.m, junk, sizeof junk - 1, why, sizeof why), -EPROTO);
        cr_assert_neq(why[0], '\0');
}

Test(mux, a_bad_service_name_resets_that_stream_alone) {
        int err = 0;
        struct sf_mux_stream *bad = sf_mux_stream_open(cli.m, "no spaces please", false, false, &err);
        struct sf_mux_stream *good = sf_mux_stream_open(cli.m, "ok", false, false, &err);
        struct watcher w = { 0 };
        sf_mux_stream_watch(bad, on_ev, &w);
        pump();
        cr_assert_eq(srv.n_new, 1);
        cr_assert_str_eq(srv.service[0], "ok");
        cr_assert(w.events & SF_MUX_EV_ERR);
        sf_mux_stream_close(bad);
        sf_mux_stream_close(good);
        sf_mux_stream_close(srv.accepted[0]);
        pump();
}

/* ---- a hostile peer: raw frames (RFC 9113) into the server, its answers read back ---------- */

#define F_DATA 0
#define F_HEADERS 1
#define F_RST 3
#define F_SETTINGS 4
#define F_PING 6
#define F_GOAWAY 7

static size_t put_frame(uint8_t *at, uint8_t type, uint8_t flags, uint32_t sid, const void *payload, size_t len) {
        uint8_t h[9] = { (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len, type, flags,
                         (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid };
        memcpy(at, h, sizeof h);
        if (len) /* an empty frame's payload may be NULL, which memcpy may not take */
                memcpy(at + 9, payload, len);
        return 9 + len;
}

/* The client's preface and an empty SETTINGS, then (ack) the acknowledgement of the server's. */
static size_t put_preface(uint8_t *at, bool ack) {
        static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        size_t n = sizeof preface - 1;
        memcpy(at, preface, n);
        n += put_frame(at + n, F_SETTINGS, 0, 0, NULL, 0);
        if (ack)
                n += put_frame(at + n, F_SETTINGS, 1, 0, NULL, 0);
        return n;
}

/* HEADERS naming service "s" (an HPACK literal without indexing). */
static size_t put_open(uint8_t *at, uint32_t sid) {
        static const uint8_t block[] = "\x00\x0asf-service\x01s";
        return put_frame(at, F_HEADERS, 0x4, sid, block, sizeof block - 1);
}

struct seen {
        uint32_t rst_sid[64], rst_code[64];
        int n_rst;
        uint32_t goaway_code;
        bool goaway;
        int pings_acked;
};

/* Everything the server has to say, split into frames. */
static void server_said(struct seen *sn) {
        static uint8_t out[1 << 20];
        char why[200];
        ssize_t n = sf_mux_output(srv.m, out, sizeof out, why, sizeof why);
        cr_assert_geq(n, 0, "server output: %s", why);
        for (size_t at = 0; at + 9 <= (size_t)n;) {
                size_t len = (size_t)out[at] << 16 | (size_t)out[at + 1] << 8 | out[at + 2];
                uint8_t type = out[at + 3], flags = out[at + 4];
                uint32_t sid = (uint32_t)(out[at + 5] & 0x7f) << 24 | (uint32_t)out[at + 6] << 16 |
                               (uint32_t)out[at + 7] << 8 | out[at + 8];
                const uint8_t *p = out + at + 9;
                if (type == F_RST && sn->n_rst < 64) {
                        sn->rst_sid[sn->n_rst] = sid;
                        sn->rst_code[sn->n_rst++] =
                                (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
                } else if (type == F_GOAWAY) {
                        sn->goaway = true;
                        sn->goaway_code = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
                } else if (type == F_PING && (flags & 1)) {
                        sn->pings_acked++;
                }
                at += 9 + len;
        }
}

static void feed_server(const uint8_t *buf, size_t n) {
        char why[200];
        cr_assert_eq(sf_mux_input(srv.m, buf, n, why, sizeof why), 0, "server input: %s", why);
}

Test(mux_limits, a_stream_flood_beyond_the_limit_is_refused_stream_by_stream, .init = setup_two_streams,
     .fini = teardown) {
        /* Before the peer acknowledged our SETTINGS it may not know our limit: the streams
         * beyond it are refused one by one (REFUSED_STREAM), none reaches the owner. */
        static uint8_t in[4096];
        size_t n = put_preface(in, false);
        for (uint32_t sid = 1; sid <= 39; sid += 2)
                n += put_open(in + n, sid);
        feed_server(in, n);
        struct seen sn = { 0 };
        server_said(&sn);
        cr_assert_eq(srv.n_new, 2, "two streams for a limit of two, not %d", srv.n_new);
        cr_assert_eq(sf_mux_streams_open(srv.m), 2);
        cr_assert_eq(sn.n_rst, 18, "18 refused, not %d", sn.n_rst);
        for (int i = 0; i < sn.n_rst; i++) {
                cr_assert_eq(sn.rst_sid[i], 5 + 2 * (uint32_t)i);
                cr_assert_eq(sn.rst_code[i], 7 /* REFUSED_STREAM */);
        }
        cr_assert_not(sn.goaway, "the link itself goes on");
        for (int i = 0; i < 2; i++)
                sf_mux_stream_close(srv.accepted[i]);
        server_said(&sn);
        cr_assert_eq(sf_mux_streams_open(srv.m), 0);
        cr_assert_eq(sf_bufpool_in_use(pool), 0, "a refused stream kept a buffer");
}

Test(mux_limits, a_peer_that_breaks_the_limit_it_acknowledged_loses_its_link, .init = setup_two_streams,
     .fini = teardown) {
        /* Once it acknowledged the limit, a peer that opens more is no relay of ours (ours
         * queues its streams, see above): the link ends (GOAWAY PROTOCOL_ERROR), and the
         * streams it had stay bounded by the limit. */
        static uint8_t in[4096];
        size_t n = put_preface(in, true);
        feed_server(in, n);
        struct seen sn = { 0 };
        server_said(&sn);
        n = 0;
        for (uint32_t sid = 1; sid <= 39; sid += 2)
                n += put_open(in + n, sid);
        char why[200] = "";
        int r = sf_mux_input(srv.m, in, n, why, sizeof why);
        server_said(&sn);
        cr_assert_eq(r, 0, "%s", why);
        cr_assert(sn.goaway, "no GOAWAY");
        cr_assert_eq(sn.goaway_code, 1 /* PROTOCOL_ERROR */);
        /* Once the GOAWAY is out, the link is over: the owner ends it with the cause. */
        uint8_t out[64];
        cr_assert_eq(sf_mux_output(srv.m, out, sizeof out, why, sizeof why), -EPROTO);
        cr_assert(strstr(why, "the peer broke the protocol (protocol error: ") && strstr(why, "max concurrent streams"),
                  "%s", why);
        cr_assert_leq(srv.n_new, 2, "%d streams for a limit of two", srv.n_new);
        for (int i = 0; i < srv.n_new; i++)
                sf_mux_stream_close(srv.accepted[i]);
        sf_mux_free(srv.m, "the peer broke the protocol");
        srv.m = NULL;
        cr_assert_eq(sf_bufpool_in_use(pool), 0);
}

Test(mux, a_peer_that_never_reads_cannot_queue_answers_without_bound) {
        /* A peer sends pings and never reads what we answer: the mux does not queue answers
         * without end, the link fails as a protocol error (flooding). */
        static uint8_t in[1 << 20];
        size_t n = put_preface(in, true);
        static const uint8_t opaque[8] = "12345678";
        char why[200] = "";
        int r = 0;
        feed_server(in, n);
        for (int round = 0; round < 100 && r == 0; round++) {
                n = 0;
                for (int i = 0; i < 1000; i++)
                        n += put_frame(in + n, F_PING, 0, 0, opaque, sizeof opaque);
                r = sf_mux_input(srv.m, in, n, why, sizeof why);
        }
        cr_assert_eq(r, -EPROTO, "100 000 pings unread, and the link goes on");
        cr_assert_neq(why[0], '\0');
}

Test(mux, a_peer_that_never_reads_holds_at_most_the_windows_and_a_buffer_per_stream) {
        /* The client side never reads 8 streams the server fills: what the client holds unread
         * is bounded by the stream windows (the link's went back as the bytes arrived), what
         * the server holds by one send buffer per stream; the server's user is told to wait
         * (EAGAIN). */
        enum { N = 8, WINDOW = 64 * 1024, LINK = 4 * WINDOW };
        int err = 0;
        struct sf_mux_stream *c[N];
        for (int i = 0; i < N; i++)
                cr_assert_not_null(c[i] = sf_mux_stream_open(cli.m, "bulk", false, false, &err));
        pump();
        cr_assert_eq(srv.n_new, N);
        static char chunk[65536];
        memset(chunk, 'b', sizeof chunk);
        size_t sent = 0;
        for (int round = 0; round < 8; round++) {
                for (int i = 0; i < N; i++) {
                        struct sf_mux_stream *s = srv.accepted[i];
                        if (round == 0)
                                cr_assert_eq(sf_mux_stream_accept(s), 0);
                        ssize_t r;
                        while ((r = sf_mux_stream_send(s, chunk, sizeof chunk)) > 0)
                                sent += (size_t)r;
                        cr_assert_eq(errno, EAGAIN);
                }
                pump();
        }
        size_t unread = 0;
        for (int i = 0; i < N; i++) {
                cr_assert_eq(sf_mux_stream_unread(c[i]), WINDOW, "stream %d holds %zu unread, not its window", i,
                             sf_mux_stream_unread(c[i]));
                unread += sf_mux_stream_unread(c[i]);
        }
        cr_assert_gt(unread, LINK, "the stalled streams hold %zu: the link window (%d) bounded them", unread, LINK);
        cr_assert_leq(sent, (size_t)N * WINDOW + N * SF_BUF_SIZE, "sent %zu", sent);
        /* Buffers: one receive buffer per client stream holding bytes, one send buffer per
         * server stream. */
        cr_assert_leq(sf_bufpool_in_use(pool), 2 * N);
        for (int i = 0; i < N; i++) {
                sf_mux_stream_close(c[i]);
                sf_mux_stream_close(srv.accepted[i]);
        }
        pump();
        cr_assert_eq(sf_bufpool_in_use(pool), 0);
}

Test(mux, stalled_readers_stall_only_their_own_streams) {
        /* More stalled streams than the link window holds windows of: a new stream's bytes
         * still get through, both ways, and a stalled stream's flow resumes once it is read. */
        enum { N = 12, WINDOW = 64 * 1024, LINK = 4 * WINDOW };
        int err = 0;
        struct sf_mux_stream *c[N];
        for (int i = 0; i < N; i++)
                cr_assert_not_null(c[i] = sf_mux_stream_open(cli.m, "bulk", false, false, &err));
        pump();
        static char chunk[65536];
        memset(chunk, 'b', sizeof chunk);
        for (int round = 0; round < 4; round++) {
                for (int i = 0; i < N; i++) {
                        if (round == 0)
                                cr_assert_eq(sf_mux_stream_accept(srv.accepted[i]), 0);
                        while (sf_mux_stream_send(srv.accepted[i], chunk, sizeof chunk) > 0)
                                ;
                }
                pump();
        }
        size_t unread = 0;
        for (int i = 0; i < N; i++)
                unread += sf_mux_stream_unread(c[i]);
        cr_assert_gt(unread, LINK);
        /* A neighbour: a round trip each way. */
        struct watcher wn = { 0 };
        struct sf_mux_stream *nb = open_watched(&wn);
        pump();
        struct sf_mux_stream *ns = srv.accepted[N];
        cr_assert_eq(sf_mux_stream_accept(ns), 0);
        cr_assert_eq(sf_mux_stream_send(nb, "ping", 4), 4);
        cr_assert_eq(sf_mux_stream_send(ns, "pong", 4), 4);
        pump();
        char got[8];
        cr_assert_eq(sf_mux_stream_recv(ns, got, sizeof got), 4,
                     "the neighbour's request is stuck behind the stalled streams");
        cr_assert_eq(sf_mux_stream_recv(nb, got, sizeof got), 4,
                     "the neighbour's answer is stuck behind the stalled streams");
        cr_assert_eq(memcmp(got, "pong", 4), 0);
        /* The stalled ones flow again once read. */
        static char sink[SF_BUF_SIZE];
        for (int i = 0; i < N; i++)
                while (sf_mux_stream_recv(c[i], sink, sizeof sink) > 0)
                        ;
        pump();
        cr_assert_gt(sf_mux_stream_unread(c[0]), 0, "stream 0 got nothing more after it was read");
        sf_mux_stream_close(nb);
        sf_mux_stream_close(ns);
        for (int i = 0; i < N; i++) {
                sf_mux_stream_close(c[i]);
                sf_mux_stream_close(srv.accepted[i]);
        }
        pump();
        cr_assert_eq(sf_bufpool_in_use(pool), 0);
}

/* The calls without copies: bytes written into a stream's send buffer in place, frames taken
 * from the mux's memory a few bytes at a time (a socket that takes little), a received buffer
 * handed over whole; the same bytes arrive, in order, and every pooled buffer comes back. */
Test(mux, the_calls_without_copies_carry_the_same_bytes) {
        struct watcher wc = { 0 }, ws = { 0 };
        struct sf_mux_stream *c = open_watched(&wc);
        static char msg[40000];
        for (size_t i = 0; i < sizeof msg; i++)
                msg[i] = (char)('a' + i % 26);
        cr_assert(sf_mux_stream_has_room(c, sizeof msg));
        char *space;
        size_t room;
        cr_assert_eq(sf_mux_stream_send_space(c, &space, &room), 0);
        cr_assert_geq(room, sizeof msg);
        memcpy(space, msg, sizeof msg);
        sf_mux_stream_commit(c, sizeof msg);
        sf_mux_stream_shutdown(c);
        /* The client's output in place, 1000 bytes at a time. */
        char why[200];
        const uint8_t *p;
        ssize_t n;
        while ((n = sf_mux_output_peek(cli.m, &p, why, sizeof why)) > 0) {
                size_t k = n < 1000 ? (size_t)n : 1000;
                cr_assert_eq(sf_mux_input(srv.m, p, k, why, sizeof why), 0, "server input: %s", why);
                sf_mux_output_advance(cli.m, k);
        }
        cr_assert_eq(n, 0, "client output: %s", why);
        pump();
        cr_assert_eq(srv.n_new, 1);
        struct sf_mux_stream *s = srv.accepted[0];
        sf_mux_stream_watch(s, on_ev, &ws);
        static char got[sizeof msg];
        size_t have = 0;
        char *buf = NULL;
        uint32_t off;
        while ((n = sf_mux_stream_recv_buf(s, pool, &buf, &off)) > 0) {
                cr_assert_leq(have + (size_t)n, sizeof got);
                memcpy(got + have, buf + off, (size_t)n);
                have += (size_t)n;
                pump(); /* the window it gave back lets the rest come */
        }
        cr_assert_eq(n, 0, "then the end of the client's side");
        cr_assert_eq(have, sizeof msg);
        cr_assert_eq(memcmp(got, msg, sizeof msg), 0);
        sf_bufpool_put(pool, buf);
        cr_assert_eq(sf_mux_stream_accept(s), 0);
        sf_mux_stream_shutdown(s);
        pump();
        sf_mux_stream_close(c);
        sf_mux_stream_close(s);
        all_gone();
}

/* A full send buffer says so, and SF_MUX_EV_OUT follows once its bytes went out. */
Test(mux, a_full_send_buffer_has_no_room_until_its_bytes_go) {
        struct watcher wc = { 0 };
        struct sf_mux_stream *c = open_watched(&wc);
        static char fill[SF_BUF_SIZE];
        size_t sent = 0;
        ssize_t r;
        while ((r = sf_mux_stream_send(c, fill, sizeof fill - sent)) > 0)
                sent += (size_t)r;
        cr_assert_eq(sent, sizeof fill);
        cr_assert_not(sf_mux_stream_has_room(c, 1));
        wc.events = 0;
        /* The server reads: its window (64 KiB) opens again and again; every EV_OUT on the
         * way asks again, until the buffer has room at its end. */
        static char sink[SF_BUF_SIZE];
        bool room = false;
        for (int i = 0; i < 16 && !room; i++) {
                pump();
                if (srv.n_new)
                        recv_all(srv.accepted[0], sink, sizeof sink);
                if (wc.events & SF_MUX_EV_OUT) {
                        wc.events = 0;
                        room = sf_mux_stream_has_room(c, 16 * 1024);
                }
        }
        cr_assert(room, "room again, told with EV_OUT");
        sf_mux_stream_close(c);
        sf_mux_stream_close(srv.accepted[0]);
        pump();
}

/* A stream closed while its DATA frame is half written from its buffer: the frame still goes
 * out whole (the peer sees valid framing, then the reset), and the buffer comes back after. */
Test(mux, a_stream_closed_mid_frame_keeps_its_buffer_until_the_frame_is_out) {
        int err = 0;
        struct sf_mux_stream *c = sf_mux_stream_open(cli.m, "agent", false, false, &err);
        cr_assert_not_null(c);
        static char msg[40000];
        memset(msg, 'x', sizeof msg);
        cr_assert_eq(sf_mux_stream_send(c, msg, sizeof msg), (ssize_t)sizeof msg);
        char why[200];
        const uint8_t *p;
        ssize_t n;
        size_t fed = 0;
        /* Through the headers and into the DATA frame's payload. */
        while (fed < 2000 && (n = sf_mux_output_peek(cli.m, &p, why, sizeof why)) > 0) {
                size_t k = n < 500 ? (size_t)n : 500;
                cr_assert_eq(sf_mux_input(srv.m, p, k, why, sizeof why), 0, "server input: %s", why);
                sf_mux_output_advance(cli.m, k);
                fed += k;
        }
        sf_mux_stream_close(c);
        pump();
        cr_assert_eq(srv.n_new, 1);
        struct sf_mux_stream *s = srv.accepted[0];
        static char got[sizeof msg];
        size_t have = recv_all(s, got, sizeof got);
        cr_assert_geq(have, 1000, "the frame's payload arrived: %zu bytes", have);
        cr_assert_eq(memchr(got, 0, have), NULL);
        cr_assert_eq(sf_mux_stream_recv(s, got, sizeof got), -1);
        cr_assert_eq(errno, ECONNRESET, "then the client's reset");
        sf_mux_stream_close(s);
        all_gone();
}

/* The last DATA frame (END_STREAM) of a stream its user closed at once: nghttp2 is done with
 * the stream as soon as it framed it, but the stream's buffer stays until its payload is out. */
Test(mux, a_finished_stream_is_freed_once_its_last_frame_is_out) {
        struct watcher wc = { 0 };
        struct sf_mux_stream *c = open_watched(&wc);
        cr_assert_eq(sf_mux_stream_send(c, "hi", 2), 2);
        sf_mux_stream_shutdown(c);
        pump();
        cr_assert_eq(srv.n_new, 1);
        struct sf_mux_stream *s = srv.accepted[0];
        char buf[16];
        cr_assert_eq(recv_all(s, buf, sizeof buf), 2);
        cr_assert_eq(sf_mux_stream_accept(s), 0);
        static char msg[3000];
        memset(msg, 'y', sizeof msg);
        cr_assert_eq(sf_mux_stream_send(s, msg, sizeof msg), (ssize_t)sizeof msg);
        sf_mux_stream_shutdown(s);
        sf_mux_stream_close(s);
        char why[200];
        const uint8_t *p;
        ssize_t n;
        while ((n = sf_mux_output_peek(srv.m, &p, why, sizeof why)) > 0) {
                size_t k = n < 100 ? (size_t)n : 100;
                cr_assert_eq(sf_mux_input(cli.m, p, k, why, sizeof why), 0, "client input: %s", why);
                sf_mux_output_advance(srv.m, k);
        }
        cr_assert_eq(n, 0, "server output: %s", why);
        pump();
        static char got[sizeof msg];
        cr_assert_eq(recv_all(c, got, sizeof got), sizeof msg);
        cr_assert_eq(memcmp(got, msg, sizeof msg), 0);
        cr_assert_eq(sf_mux_stream_recv(c, got, sizeof got), 0, "then the end, not a reset");
        cr_assert_eq(sf_mux_stream_error(c), 0);
        sf_mux_stream_close(c);
        pump();
        cr_assert_eq(sf_mux_streams_open(srv.m), 0);
        cr_assert_eq(sf_bufpool_in_use(pool), 0, "every buffer back in the pool");
}
