/* The shared link (relay/link/link.c) over real loopback TCP in one libuv loop: a client link
 * dials a listener of the test's, which plays the host relay's handshake (or a wrong peer, an
 * old relay, a silent one) and then adopts the connection as the server end. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "relay/engine/bufpool.h"
#include "relay/link/frames.h"
#include "relay/link/link.h"

enum peer_kind { PEER_RELAY, PEER_OLD_RELAY, PEER_WRONG, PEER_SILENT_AFTER_UP, PEER_CLOSE_ONCE };

struct peer {
        uv_tcp_t server;
        enum peer_kind kind;
        uv_tcp_t *conn;
        uint8_t in[SF_HS_CLIENT_LEN];
        size_t in_len;
        uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];
        uint8_t out[SF_HS_STATUS_MAX];
        uv_write_t wreq;
        struct sf_link *link; /* the server end once adopted */
        int accepted;
        struct sf_mux_stream *streams[8];
        int n_streams;
        char service[8][64];
        bool discard;
};

static uv_loop_t *loop;
static struct sf_bufpool *pool;
static struct sf_hs_key key;
static struct peer peer;
static struct sf_link_params cparams, sparams;
static struct sf_endpoint ep;
static int changes;
static bool went_down; /* the client link was down at some point */
static struct sf_link *client;
static uv_timer_t stop_timer;

static void on_client_state(void *owner, struct sf_link *l) {
        (void)owner;
        changes++;
        went_down |= sf_link_state(l) == SF_LINK_DOWN;
}

static const struct sf_link_ops client_ops = { .state_changed = on_client_state };

static void on_server_stream(void *owner, struct sf_link *l, struct sf_mux_stream *s, const char *service,
                             bool by_default, bool probe) {
        (void)l;
        (void)probe;
        struct peer *p = owner;
        snprintf(p->service[p->n_streams], sizeof p->service[0], "%s", service);
        p->streams[p->n_streams++] = s;
        sf_mux_stream_accept(s);
}

static void on_server_ended(void *owner, struct sf_link *l) {
        struct peer *p = owner;
        if (p->link == l)
                p->link = NULL;
        sf_link_close(l);
}

static const struct sf_link_ops server_ops = { .stream_new = on_server_stream, .ended = on_server_ended };

static void on_peer_alloc(uv_handle_t *h, size_t n, uv_buf_t *b) {
        (void)h;
        (void)n;
        static char sink[4096];
        if (peer.discard) {
                *b = uv_buf_init(sink, sizeof sink);
                return;
        }
        b->base = (char *)peer.in + peer.in_len;
        b->len = sizeof peer.in - peer.in_len;
}

static void close_free(uv_handle_t *h) {
        free(h);
}

static void on_peer_written(uv_write_t *req, int status) {
        (void)req;
        (void)status;
}

static void peer_send(const void *data, size_t n) {
        memcpy(peer.out, data, n);
        uv_buf_t b = uv_buf_init((char *)peer.out, (unsigned)n);
        uv_write(&peer.wreq, (uv_stream_t *)peer.conn, &b, 1, on_peer_written);
}

static void on_peer_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
        (void)b;
        if (n < 0) {
                uv_close((uv_handle_t *)s, close_free);
                peer.conn = NULL;
                return;
        }
        if (peer.discard)
                return;
        peer.in_len += (size_t)n;
        if (peer.in_len < SF_HS_CLIENT_LEN)
                return;
        uint8_t flags = 0;
        int v = sf_hs_client_verify(peer.in, &key, peer.snonce, peer.cnonce, &flags, NULL);
        /* The MAC holds (-EBADMSG: it does, and the flags are ones this test's frames.c may not
         * know). */
        cr_assert(v == 0 || v == -EBADMSG, "verify: %d", v);
        cr_assert_eq(flags, SF_HS_FLAG_LINK, "the client asks for a link");
        uv_read_stop(s);
        uint8_t st[SF_HS_STATUS_MAX];
        size_t len = sf_hs_status_build(st, &key, peer.snonce, peer.cnonce,
                                        peer.kind == PEER_OLD_RELAY ? SF_HS_BAD_FRAME : SF_HS_OK,
                                        peer.kind == PEER_OLD_RELAY ? "unknown flags" : "");
        peer_send(st, len);
        if (peer.kind == PEER_OLD_RELAY)
                return;
        if (peer.kind == PEER_SILENT_AFTER_UP) {
                /* A server preface (an empty SETTINGS frame), then nothing but reading. */
                static const uint8_t settings[] = { 0, 0, 0, 4, 0, 0, 0, 0, 0 };
                static uv_write_t req;
                uv_buf_t out = uv_buf_init((char *)settings, sizeof settings);
                uv_write(&req, s, &out, 1, on_peer_written);
                peer.in_len = 0;
                peer.discard = true;
                uv_read_start(s, on_peer_alloc, on_peer_read);
                return;
        }
        uv_tcp_t *c = peer.conn;
        peer.conn = NULL;
        cr_assert_eq(sf_link_adopt(loop, pool, &sparams, &server_ops, &peer, SF_MUX_SERVER, (uv_stream_t *)c,
                                   (uv_stream_t *)c, NULL, &peer.link),
                     0);
}

static void on_peer_connection(uv_stream_t *server, int status) {
        cr_assert_eq(status, 0);
        uv_tcp_t *c = malloc(sizeof *c);
        uv_tcp_init(loop, c);
        cr_assert_eq(uv_accept(server, (uv_stream_t *)c), 0);
        peer.accepted++;
        if (peer.kind == PEER_CLOSE_ONCE && peer.accepted == 1) {
                uv_close((uv_handle_t *)c, close_free);
                return;
        }
        peer.conn = c;
        peer.in_len = 0;
        if (peer.kind == PEER_WRONG) {
                peer_send("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", 32);
                return;
        }
        uint8_t hello[SF_HS_HELLO_LEN];
        sf_hs_nonce_new(peer.snonce);
        sf_hs_hello_build(hello, peer.snonce);
        peer_send(hello, sizeof hello);
        uv_read_start((uv_stream_t *)c, on_peer_alloc, on_peer_read);
}

static void run_until(bool (*done)(void), uint64_t ms) {
        uint64_t end = uv_now(loop) + ms;
        while (!done() && uv_now(loop) < end)
                uv_run(loop, UV_RUN_ONCE);
}

static void on_stop(uv_timer_t *t) {
        (void)t;
}

static void setup(enum peer_kind kind, uint64_t keepalive_ms) {
        loop = uv_default_loop();
        pool = sf_bufpool_new(4, NULL);
        memset(&peer, 0, sizeof peer);
        peer.kind = kind;
        cr_assert_eq(sf_hs_init(), 0);
        key.len = 32;
        memset(key.bytes, 0x5a, key.len);
        uv_tcp_init(loop, &peer.server);
        struct sockaddr_in sa;
        uv_ip4_addr("127.0.0.1", 0, &sa);
        cr_assert_eq(uv_tcp_bind(&peer.server, (struct sockaddr *)&sa, 0), 0);
        cr_assert_eq(uv_listen((uv_stream_t *)&peer.server, 8, on_peer_connection), 0);
        struct sockaddr_storage ss;
        int len = sizeof ss;
        uv_tcp_getsockname(&peer.server, (struct sockaddr *)&ss, &len);
        memset(&ep, 0, sizeof ep);
        ep.kind = SF_EP_TCP;
        snprintf(ep.host, sizeof ep.host, "127.0.0.1");
        ep.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(ep.text, sizeof ep.text, "tcp:127.0.0.1:%u", ep.port);
        struct sf_mux_config mux = { .max_streams = 16, .stream_window = 65536, .link_window = 262144,
                                     .resets_burst = 1000, .resets_per_s = 1000 };
        cparams = (struct sf_link_params){ .name = ep.text, .ep = &ep, .key = &key, .token_file = "test.token",
                                           .connect_timeout_ms = 2000, .handshake_timeout_ms = 2000,
                                           .keepalive_ms = keepalive_ms, .mux = mux };
        sparams = (struct sf_link_params){ .name = "the test's client", .keepalive_ms = 0, .mux = mux };
        changes = 0;
        went_down = false;
        client = NULL;
        uv_timer_init(loop, &stop_timer);
        uv_timer_start(&stop_timer, on_stop, 10, 10);
}

static void teardown(void) {
        sf_link_close(client);
        sf_link_close(peer.link);
        if (peer.conn)
                uv_close((uv_handle_t *)peer.conn, close_free);
        uv_close((uv_handle_t *)&peer.server, NULL);
        uv_close((uv_handle_t *)&stop_timer, NULL);
        uv_run(loop, UV_RUN_DEFAULT);
        cr_assert_eq(uv_loop_close(loop), 0, "every handle was closed");
        sf_bufpool_free(pool);
}

static bool client_up(void) {
        return sf_link_state(client) == SF_LINK_UP;
}

static bool client_down(void) {
        return sf_link_state(client) == SF_LINK_DOWN;
}

static bool client_old(void) {
        return sf_link_state(client) == SF_LINK_OLD_PEER;
}

static struct sf_mux_stream *cs;
static char got[64];
static size_t got_len;

static bool peer_has_stream(void) {
        return peer.n_streams > 0;
}

static void on_cs(void *ev, uint32_t events) {
        (void)ev;
        (void)events;
        ssize_t n;
        while ((n = sf_mux_stream_recv(cs, got + got_len, sizeof got - got_len)) > 0)
                got_len += (size_t)n;
}

static bool client_got_reply(void) {
        return got_len >= 5;
}

Test(link, comes_up_and_carries_a_stream_both_ways) {
        setup(PEER_RELAY, 1000);
        cr_assert_eq(sf_link_client_new(loop, pool, &cparams, &client_ops, NULL, &client), 0);
        run_until(client_up, 3000);
        cr_assert_eq(sf_link_state(client), SF_LINK_UP, "cause: %s", sf_link_cause(client));
        int err = 0;
        got_len = 0;
        cs = sf_link_stream_open(client, "agent", false, false, &err);
        cr_assert_not_null(cs);
        sf_mux_stream_watch(cs, on_cs, NULL);
        cr_assert_eq(sf_mux_stream_send(cs, "hello", 5), 5);
        run_until(peer_has_stream, 2000);
        cr_assert_eq(peer.n_streams, 1);
        cr_assert_str_eq(peer.service[0], "agent");
        cr_assert_eq(sf_mux_stream_send(peer.streams[0], "world", 5), 5);
        run_until(client_got_reply, 2000);
        cr_assert_eq(got_len, 5);
        cr_assert_eq(memcmp(got, "world", 5), 0);
        struct sf_link_stats st;
        sf_link_stats_get(client, &st);
        cr_assert_eq(st.streams_open, 1);
        cr_assert_eq(st.streams_total, 1);
        cr_assert_gt(st.bytes_out, 0);
        sf_mux_stream_close(cs);
        sf_mux_stream_close(peer.streams[0]);
        teardown();
}

Test(link, an_old_relay_is_told_apart) {
        setup(PEER_OLD_RELAY, 1000);
        cr_assert_eq(sf_link_client_new(loop, pool, &cparams, &client_ops, NULL, &client), 0);
        run_until(client_old, 3000);
        cr_assert_eq(sf_link_state(client), SF_LINK_OLD_PEER, "cause: %s", sf_link_cause(client));
        teardown();
}

Test(link, a_wrong_peer_is_named_and_the_link_stays_down) {
        setup(PEER_WRONG, 1000);
        cr_assert_eq(sf_link_client_new(loop, pool, &cparams, &client_ops, NULL, &client), 0);
        run_until(client_down, 3000);
        cr_assert_eq(sf_link_state(client), SF_LINK_DOWN);
        cr_assert(strstr(sf_link_cause(client), "wrong peer"), "cause: %s", sf_link_cause(client));
        cr_assert(strstr(sf_link_cause(client), "SSH-2.0"), "the peer's bytes are quoted: %s", sf_link_cause(client));
        teardown();
}

Test(link, a_dropped_link_is_dialed_again) {
        setup(PEER_CLOSE_ONCE, 1000);
        cr_assert_eq(sf_link_client_new(loop, pool, &cparams, &client_ops, NULL, &client), 0);
        run_until(client_up, 5000);
        cr_assert_eq(sf_link_state(client), SF_LINK_UP, "cause: %s", sf_link_cause(client));
        cr_assert_eq(peer.accepted, 2, "the first connection was closed, the second one held");
        teardown();
}

static bool client_gone_down(void) {
        return sf_link_state(client) == SF_LINK_DOWN;
}

Test(link, a_peer_that_stops_answering_pings_ends_the_link) {
        setup(PEER_SILENT_AFTER_UP, 100);
        cr_assert_eq(sf_link_client_new(loop, pool, &cparams, &client_ops, NULL, &client), 0);
        run_until(client_up, 3000);
        cr_assert_eq(sf_link_state(client), SF_LINK_UP, "cause: %s", sf_link_cause(client));
        /* The host sleeps (a Mac's lid closed): its socket stays open, nothing answers. */
        run_until(client_gone_down, 3000);
        cr_assert_eq(sf_link_state(client), SF_LINK_DOWN);
        cr_assert(strstr(sf_link_cause(client), "no answer to 2 pings"), "cause: %s", sf_link_cause(client));
        teardown();
}

/* A relay's first dial comes after loading its configuration, which can take longer than
 * connect-timeout (valgrind on a loaded machine), with the loop's clock still from before:
 * the deadline is counted from the dial, and the connect that succeeded is not called late. */
Test(link, connect_timeout_counts_from_the_dial_not_from_the_loops_last_turn) {
        setup(PEER_RELAY, 1000);
        cparams.connect_timeout_ms = 1000;
        uv_sleep(1200);
        cr_assert_eq(sf_link_client_new(loop, pool, &cparams, &client_ops, NULL, &client), 0);
        run_until(client_up, 3000);
        cr_assert_eq(sf_link_state(client), SF_LINK_UP, "cause: %s", sf_link_cause(client));
        cr_assert_not(went_down, "the first dial came up: it was not timed out on the way");
        teardown();
}

static uv_sem_t pool_held;

static void hold_the_pool(uv_work_t *w) {
        (void)w;
        uv_sem_wait(&pool_held);
}

/* A numeric address is not looked up on the thread pool, which every other lookup and file
 * operation of the relay shares: with the pool's one thread held, the link still comes up. */
Test(link, a_numeric_address_is_dialed_with_the_thread_pool_busy) {
        setenv("UV_THREADPOOL_SIZE", "1", 1);
        setup(PEER_RELAY, 1000);
        uv_sem_init(&pool_held, 0);
        uv_work_t hold;
        cr_assert_eq(uv_queue_work(loop, &hold, hold_the_pool, NULL), 0);
        cr_assert_eq(sf_link_client_new(loop, pool, &cparams, &client_ops, NULL, &client), 0);
        run_until(client_up, 3000);
        enum sf_link_state state = sf_link_state(client);
        uv_sem_post(&pool_held);
        cr_assert_eq(state, SF_LINK_UP, "cause: %s", sf_link_cause(client));
        cr_assert_not(went_down);
        teardown();
        uv_sem_destroy(&pool_held);
}
