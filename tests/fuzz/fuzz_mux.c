/* libFuzzer target: the shared link's mux (relay/link/mux.c) fed arbitrary bytes as its peer,
 * in both roles, with a user that acts on every stream as a relay does.
 *
 * Input: byte 0 picks the role (bit 0: server), whether the client's connection preface is put
 * in front for a server (bit 1, so that mutations reach the frames behind it), whether the
 * session is freed before or after its streams are closed (bit 2) and how the rest is cut into
 * reads (bits 3-7: the first of them also says when the user drains). The rest is what the
 * peer sent. A client opens three streams first (a service, none, a probe) and sends on them;
 * a server accepts, refuses or leaves unanswered the streams it is offered, and echoes what it
 * reads. After each read the output is drained, as the link does.
 *
 * Checked: no crash, undefined behaviour or leak (ASan, UBSan, LeakSanitizer); what the peer
 * made us hold unread stays within the stream and link windows; every pooled buffer is back
 * once the session and its streams are gone. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "relay/engine/bufpool.h"
#include "relay/link/frames.h"
#include "relay/link/mux.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A small stream window and few streams: flow-control and stream-limit violations are a few
 * frames away. The link's window stays HTTP/2's initial one, which a peer may fill before it
 * saw our SETTINGS, as it may fill a stream's until it acknowledged them. */
#define STREAM_WINDOW 4096
#define LINK_WINDOW 65535
#define INITIAL_WINDOW 65535
#define MAX_STREAMS 8
#define HELD_MAX 64

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct held {
        struct sf_mux_stream *s;
        bool echo;  /* a server's accepted stream: what it reads goes back */
        bool stall; /* a reader that never reads: the windows must hold the peer back */
};

static struct fuzz {
        struct sf_mux *m;
        enum sf_mux_role role;
        struct held held[HELD_MAX];
        uint8_t buf[4096];
} F;

static struct sf_bufpool *pool;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        (void)argc;
        (void)argv;
        if (sf_hs_init() < 0 || !(pool = sf_bufpool_new(4, NULL)))
                abort();
        return 0;
}

static void drop(struct held *h) {
        struct sf_mux_stream *s = h->s;
        h->s = NULL;
        sf_mux_stream_close(s);
}

/* A stream's readiness: read all there is (echoing it back on a server), end our side at the
 * peer's end, close on an error, as a relayed connection does. */
static void on_event(void *ev, uint32_t events) {
        struct held *h = ev;
        if (!h->s)
                return;
        if ((events & SF_MUX_EV_IN) && !h->stall) {
                for (;;) {
                        ssize_t n = sf_mux_stream_recv(h->s, F.buf, sizeof F.buf);
                        if (n > 0) {
                                if (h->echo)
                                        (void)sf_mux_stream_send(h->s, F.buf, (size_t)n);
                                continue;
                        }
                        if (n == 0) {
                                sf_mux_stream_shutdown(h->s);
                                break;
                        }
                        if (errno != EAGAIN) {
                                drop(h);
                                return;
                        }
                        break;
                }
        }
        if (events & (SF_MUX_EV_ERR | SF_MUX_EV_HUP))
                drop(h);
}

static struct held *hold(struct sf_mux_stream *s, bool echo, bool stall) {
        for (size_t i = 0; i < HELD_MAX; i++)
                if (!F.held[i].s) {
                        F.held[i] = (struct held){ .s = s, .echo = echo, .stall = stall };
                        sf_mux_stream_watch(s, on_event, &F.held[i]);
                        return &F.held[i];
                }
        sf_mux_stream_close(s);
        return NULL;
}

static void on_new(void *owner, struct sf_mux_stream *s, const char *service, bool by_default, bool probe) {
        (void)owner;
        (void)by_default;
        switch ((unsigned)sf_mux_stream_id(s) / 2 % 4) {
        case 0:
                /* As a probe is answered: accepted, then closed once the answer went out. */
                if (sf_mux_stream_accept(s) == 0 && !probe)
                        hold(s, true, false);
                else
                        sf_mux_stream_close(s);
                return;
        case 1:
                sf_mux_stream_refuse(s, SF_MUX_UNKNOWN_SERVICE, service);
                sf_mux_stream_close(s);
                return;
        case 2:
                /* Not answered yet (its upstream is being dialled): answered when closed. */
                hold(s, false, true);
                return;
        default:
                sf_mux_stream_refuse(s, SF_MUX_BUSY, "service x serves max-conns = 1 connections already");
                sf_mux_stream_close(s);
                return;
        }
}

static void on_want_output(void *owner) {
        (void)owner;
}

static void on_pong(void *owner, uint64_t sent) {
        (void)owner;
        (void)sent;
}

static const struct sf_mux_ops ops = { .stream_new = on_new, .want_output = on_want_output, .pong = on_pong };

/* What the link does after a read: everything the mux has goes out (and is dropped here),
 * copied out or, every other time, written in place and only partly (a full socket). */
static int drain_output(void) {
        static uint8_t out[65536];
        char why[200];
        for (int i = 0; i < 64; i++) {
                ssize_t n;
                if (i % 2) {
                        const uint8_t *p;
                        n = sf_mux_output_peek(F.m, &p, why, sizeof why);
                        if (n > 0) {
                                /* Every byte handed out is readable (ASan says otherwise). */
                                memcpy(out, p, (size_t)n < sizeof out ? (size_t)n : sizeof out);
                                sf_mux_output_advance(F.m, (size_t)n / 2 + 1);
                        }
                } else {
                        n = sf_mux_output(F.m, out, sizeof out, why, sizeof why);
                }
                if (n < 0)
                        return -1;
                if (n == 0)
                        return 0;
        }
        return 0;
}

/* What the peer made us hold unread is bounded by the windows we announced. */
static void check_bounds(void) {
        size_t total = 0;
        for (size_t i = 0; i < HELD_MAX; i++) {
                if (!F.held[i].s)
                        continue;
                size_t n = sf_mux_stream_unread(F.held[i].s);
                if (n > INITIAL_WINDOW)
                        abort();
                total += n;
        }
        if (total > LINK_WINDOW)
                abort();
}

static void client_open(const char *service, bool probe, const char *say, bool shut, bool stall) {
        int err;
        struct sf_mux_stream *s = sf_mux_stream_open(F.m, service, false, probe, &err);
        if (!s)
                return;
        struct held *h = hold(s, false, stall);
        if (!h)
                return;
        (void)sf_mux_stream_send(s, say, strlen(say));
        if (shut)
                sf_mux_stream_shutdown(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        uint8_t flags = data[0];
        data++;
        size--;
        memset(&F, 0, sizeof F);
        F.role = (flags & 1) ? SF_MUX_SERVER : SF_MUX_CLIENT;
        const struct sf_mux_config cfg = { .max_streams = MAX_STREAMS, .stream_window = STREAM_WINDOW,
                                           .link_window = LINK_WINDOW, .resets_burst = 1000, .resets_per_s = 1000 };
        if (sf_mux_new(F.role, &cfg, &ops, NULL, pool, &F.m) < 0)
                return 0;
        if (F.role == SF_MUX_CLIENT) {
                client_open("echo", false, "hello", false, false);
                client_open(NULL, false, "no service", true, true);
                client_open("x", true, "", true, false);
        }
        char why[200];
        bool broken = drain_output() < 0;
        if (!broken && F.role == SF_MUX_SERVER && (flags & 2))
                broken = sf_mux_input(F.m, (const uint8_t *)PREFACE, sizeof PREFACE - 1, why, sizeof why) < 0;
        size_t chunk = 1 + (size_t)(flags >> 3) * 29;
        unsigned turn = 0, drain_at = flags >> 3 & 7;
        while (!broken && size > 0) {
                size_t k = chunk < size ? chunk : size;
                broken = sf_mux_input(F.m, data, k, why, sizeof why) < 0;
                data += k;
                size -= k;
                if (broken)
                        break;
                check_bounds();
                turn++;
                if (turn % 3 == 0)
                        (void)sf_mux_ping(F.m, turn);
                if (turn == drain_at)
                        sf_mux_drain(F.m);
                if (F.role == SF_MUX_CLIENT && turn == 2 && sf_mux_ready(F.m))
                        client_open("late", false, "after the settings", true, false);
                (void)sf_mux_streams_open(F.m);
                (void)sf_mux_draining(F.m);
                broken = drain_output() < 0;
        }
        if (flags & 4) {
                sf_mux_free(F.m, "the fuzzer ended the link");
                for (size_t i = 0; i < HELD_MAX; i++)
                        if (F.held[i].s) {
                                (void)sf_mux_stream_error(F.held[i].s);
                                (void)sf_mux_stream_reason(F.held[i].s);
                                (void)sf_mux_stream_status(F.held[i].s);
                                drop(&F.held[i]);
                        }
        } else {
                for (size_t i = 0; i < HELD_MAX; i++)
                        if (F.held[i].s)
                                drop(&F.held[i]);
                (void)drain_output();
                sf_mux_free(F.m, "the fuzzer ended the link");
        }
        if (sf_bufpool_in_use(pool) != 0)
                abort();
        return 0;
}
