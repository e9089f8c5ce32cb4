/* One end of a sockferry/2 link over standard input and output, for checking the mux's frames
 * against an independent HTTP/2 implementation (tests/relay/test_mux_h2.py, Python's h2):
 *
 *   mux-peer client SERVICE DATA  opens a stream for SERVICE, sends DATA, ends its side, reads
 *                                 the answer to its end; prints "status=N reason=R data=D"
 *   mux-peer server REPLY         takes one stream, reads it to its end, answers REPLY, ends;
 *                                 prints "service=S data=D"
 *
 * The result goes to stderr; stdout is the link. Exit 0 when the exchange completed. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relay/engine/bufpool.h"
#include "relay/link/mux.h"

static struct sf_mux *m;
static struct sf_mux_stream *st;
static char service[64], got[4096];
static size_t got_len;
static bool eof, done;
static const char *reply;

static void on_new(void *owner, struct sf_mux_stream *s, const char *svc, bool by_default, bool probe) {
        (void)owner;
        (void)probe;
        st = s;
        snprintf(service, sizeof service, "%s", svc);
}

static const struct sf_mux_ops ops = { .stream_new = on_new };

static int write_all(const uint8_t *p, size_t n) {
        while (n > 0) {
                ssize_t w = write(1, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return -1;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

static int flush(void) {
        static uint8_t buf[65536];
        char why[200];
        ssize_t n;
        while ((n = sf_mux_output(m, buf, sizeof buf, why, sizeof why)) > 0)
                if (write_all(buf, (size_t)n) < 0)
                        return -1;
        if (n < 0)
                fprintf(stderr, "output: %s\n", why);
        return n < 0 ? -1 : 0;
}

static void drain_stream(void) {
        ssize_t n;
        while (st && (n = sf_mux_stream_recv(st, got + got_len, sizeof got - 1 - got_len)) > 0)
                got_len += (size_t)n;
        if (st && n == 0)
                eof = true;
}

int main(int argc, char **argv) {
        if (argc < 3 || (strcmp(argv[1], "client") && strcmp(argv[1], "server"))) {
                fprintf(stderr, "usage: mux-peer client SERVICE DATA | mux-peer server REPLY\n");
                return 64;
        }
        bool client = strcmp(argv[1], "client") == 0;
        struct sf_bufpool *pool = sf_bufpool_new(2, NULL);
        struct sf_mux_config cfg = { .max_streams = 100, .stream_window = 262144, .link_window = 1048576,
                                     .resets_burst = 1000, .resets_per_s = 1000 };
        if (sf_mux_new(client ? SF_MUX_CLIENT : SF_MUX_SERVER, &cfg, &ops, NULL, pool, &m) < 0)
                return 1;
        if (client) {
                int err;
                st = sf_mux_stream_open(m, argv[2], false, false, &err);
                if (!st || argc < 4)
                        return 1;
                sf_mux_stream_send(st, argv[3], strlen(argv[3]));
                sf_mux_stream_shutdown(st);
        } else {
                reply = argv[2];
        }
        bool answered = false;
        while (!done) {
                if (flush() < 0)
                        return 1;
                static uint8_t in[65536];
                ssize_t n = read(0, in, sizeof in);
                if (n <= 0)
                        break;
                char why[200];
                if (sf_mux_input(m, in, (size_t)n, why, sizeof why) < 0) {
                        fprintf(stderr, "input: %s\n", why);
                        return 1;
                }
                drain_stream();
                if (!client && st && eof && !answered) {
                        answered = true;
                        sf_mux_stream_accept(st);
                        sf_mux_stream_send(st, reply, strlen(reply));
                        sf_mux_stream_shutdown(st);
                        if (flush() < 0)
                                return 1;
                        got[got_len] = '\0';
                        fprintf(stderr, "service=%s data=%s\n", service, got);
                        done = true;
                }
                if (client && (eof || sf_mux_stream_error(st))) {
                        got[got_len] = '\0';
                        fprintf(stderr, "status=%d reason=%s data=%s\n", sf_mux_stream_status(st),
                                sf_mux_stream_reason(st), got);
                        done = true;
                }
        }
        flush();
        sf_mux_stream_close(st);
        flush();
        sf_mux_free(m, "done");
        sf_bufpool_free(pool);
        return done ? 0 : 1;
}
