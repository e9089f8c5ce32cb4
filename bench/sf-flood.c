/* sf-flood: the attack of doc/SECURITY.md ("Resets"), for bench/aborts.sh. A token holder opens
 * shared links (sockferry/1 handshake with the link flag, then HTTP/2 frames from libnghttp2)
 * to a host relay and, on each, opens streams and resets them at once, as fast as it can, until
 * the host ends the link; then it dials the next one, until --seconds are over. 100 streams a
 * write: each stream's HEADERS and its RST_STREAM together, or with --split the HEADERS of 100
 * streams and a PING, then, once the PING's answer says the host took them (and dialled their
 * upstream), their 100 RST_STREAMs.
 *
 *   sf-flood --connect tcp:HOST:PORT --token FILE --service NAME [--seconds S] [--split]
 *
 * Prints one line: seconds, streams (opened and reset: sent), taken (those the host took: on a
 * link it ended with GOAWAY, the streams up to the GOAWAY's last stream id), streams_s and
 * taken_s, links (handshakes that succeeded), refused (handshakes the host refused: max-links),
 * and how the links ended: goaway_calm (GOAWAY ENHANCE_YOUR_CALM), goaway_internal (GOAWAY
 * INTERNAL_ERROR: what libnghttp2's reset limiter sends), goaway_other, closed (the host closed
 * or reset the connection without a GOAWAY), open (still open at the end). Exit 1 when no link
 * was had. */

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 64
#define HELLO_LEN 37
#define NONCE_LEN 32
#define MAC_LEN 32
#define FLAG_LINK 0x02
/* Streams opened and reset per write: the test's flooder (tests/e2e/test_link_life.py) sends
 * 100 at a time too. */
#define BATCH 100

static const char LABEL_CLIENT[] = "sockferry/1 client";

struct counts {
        unsigned long long streams, taken;
        unsigned links, refused, goaway_calm, goaway_internal, goaway_other, closed, open;
};

struct link {
        int fd;
        nghttp2_session *h2;
        bool goaway, pong;
        uint32_t goaway_code;
        int32_t goaway_last;
};

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int read_all(int fd, void *buf, size_t n) {
        for (char *p = buf; n > 0;) {
                ssize_t r = read(fd, p, n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return -1;
                p += r;
                n -= (size_t)r;
        }
        return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
        for (const char *p = buf; n > 0;) {
                ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -1;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* A blocking TCP connection to host:port with 5 s timeouts; -1 when it cannot connect. */
static int dial(const char *host, const char *port) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV }, *ai;
        struct timeval tv = { .tv_sec = 5 };
        int one = 1, fd;

        if (getaddrinfo(host, port, &hints, &ai) != 0)
                return -1;
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                close(fd);
                fd = -1;
        }
        freeaddrinfo(ai);
        if (fd >= 0) {
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        }
        return fd;
}

/* doc/PROTOCOL.md: the host's hello, our client frame with the link flag, the host's status.
 * 0 once the status is OK, -1 when the connection failed, 1 when the host refused the link. */
static int handshake(int fd, const uint8_t key[32]) {
        uint8_t hello[HELLO_LEN], frame[6 + NONCE_LEN + MAC_LEN], head[2], rest[255 + MAC_LEN];
        uint8_t flags = FLAG_LINK;
        crypto_auth_hmacsha256_state st;

        if (read_all(fd, hello, sizeof hello) < 0 || memcmp(hello, "SFRY\1", 5) != 0)
                return -1;
        memcpy(frame, "SFRY\1", 5);
        frame[5] = flags;
        randombytes_buf(frame + 6, NONCE_LEN);
        crypto_auth_hmacsha256_init(&st, key, 32);
        crypto_auth_hmacsha256_update(&st, (const uint8_t *)LABEL_CLIENT, sizeof LABEL_CLIENT - 1);
        crypto_auth_hmacsha256_update(&st, hello + 5, NONCE_LEN);
        crypto_auth_hmacsha256_update(&st, frame + 6, NONCE_LEN);
        crypto_auth_hmacsha256_update(&st, &flags, 1);
        crypto_auth_hmacsha256_final(&st, frame + 6 + NONCE_LEN);
        if (write_all(fd, frame, sizeof frame) < 0 || read_all(fd, head, 2) < 0 ||
            read_all(fd, rest, (size_t)head[1] + MAC_LEN) < 0)
                return -1;
        return head[0] == 0 ? 0 : 1;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *user) {
        struct link *l = user;
        (void)h2;
        if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK))
                l->pong = true;
        if (frame->hd.type == NGHTTP2_GOAWAY) {
                l->goaway = true;
                l->goaway_code = frame->goaway.error_code;
                l->goaway_last = frame->goaway.last_stream_id;
        }
        return 0;
}

/* Appends what the session has to send to buf (at most cap bytes in all); -1 on a session error. */
static int collect(nghttp2_session *h2, uint8_t *buf, size_t *len, size_t cap) {
        for (;;) {
                const uint8_t *data;
                ssize_t n = nghttp2_session_mem_send(h2, &data);
                if (n < 0)
                        return -1;
                if (n == 0)
                        return 0;
                if (*len + (size_t)n > cap)
                        return -1;
                memcpy(buf + *len, data, (size_t)n);
                *len += (size_t)n;
        }
}

/* Whatever the host sent meanwhile, without waiting (or, with until_pong, until the answer to
 * our PING came); false once the link is over (EOF, an error, or a GOAWAY). */
static bool take_input(struct link *l, bool until_pong) {
        uint8_t in[65536];
        l->pong = false;
        for (;;) {
                if (until_pong && l->pong)
                        return true;
                ssize_t n = recv(l->fd, in, sizeof in, until_pong ? 0 : MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errno == EAGAIN || errno == EWOULDBLOCK;
                if (n == 0 || nghttp2_session_mem_recv(l->h2, in, (size_t)n) < 0)
                        return false;
                if (l->goaway)
                        return false;
        }
}

/* One link, flooded until it ends or until the deadline. */
static void flood_link(int fd, double deadline, const nghttp2_nv *nv, bool split, struct counts *c) {
        static uint8_t out[BATCH * 64 + 65536];
        struct link l = { .fd = fd };
        nghttp2_session_callbacks *cb;
        size_t len = 0;
        unsigned long long sent = 0;
        bool alive = true;

        if (nghttp2_session_callbacks_new(&cb) != 0) {
                fprintf(stderr, "sf-flood: out of memory\n");
                exit(EXIT_FAILURE);
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
        if (nghttp2_session_client_new(&l.h2, cb, &l) != 0) {
                fprintf(stderr, "sf-flood: out of memory\n");
                exit(EXIT_FAILURE);
        }
        nghttp2_session_callbacks_del(cb);
        /* The preface and SETTINGS, then the host's SETTINGS before the first stream, as a
         * client of ours waits for them. */
        (void)nghttp2_submit_settings(l.h2, NGHTTP2_FLAG_NONE, NULL, 0);
        if (collect(l.h2, out, &len, sizeof out) < 0 || write_all(fd, out, len) < 0)
                alive = false;
        while (alive && now_s() < deadline) {
                int32_t ids[BATCH];
                int n = 0;
                len = 0;
                for (; n < BATCH && alive; n++) {
                        /* The HEADERS must be out of the session before the reset: a stream
                         * reset while its HEADERS wait is never opened at all. */
                        ids[n] = nghttp2_submit_headers(l.h2, NGHTTP2_FLAG_NONE, -1, NULL, nv, 1, NULL);
                        if (ids[n] < 0 || collect(l.h2, out, &len, sizeof out) < 0 ||
                            (!split && (nghttp2_submit_rst_stream(l.h2, NGHTTP2_FLAG_NONE, ids[n], NGHTTP2_CANCEL) != 0 ||
                                        collect(l.h2, out, &len, sizeof out) < 0)))
                                alive = false;
                }
                if (alive && split) {
                        /* The host answers the PING once it took everything before it. */
                        if (nghttp2_submit_ping(l.h2, NGHTTP2_FLAG_NONE, NULL) != 0 ||
                            collect(l.h2, out, &len, sizeof out) < 0 || write_all(fd, out, len) < 0 ||
                            !take_input(&l, true))
                                alive = false;
                        len = 0;
                        for (int i = 0; i < n && alive; i++)
                                if (nghttp2_submit_rst_stream(l.h2, NGHTTP2_FLAG_NONE, ids[i], NGHTTP2_CANCEL) != 0 ||
                                    collect(l.h2, out, &len, sizeof out) < 0)
                                        alive = false;
                }
                if (alive)
                        sent += (unsigned long long)n;
                if (write_all(fd, out, len) < 0 || !take_input(&l, false))
                        alive = false;
        }
        /* A GOAWAY names the last stream the host took; the ones after it it dropped unseen. */
        c->taken += l.goaway ? (unsigned long long)(l.goaway_last + 1) / 2 : sent;
        if (l.goaway && l.goaway_code == NGHTTP2_ENHANCE_YOUR_CALM)
                c->goaway_calm++;
        else if (l.goaway && l.goaway_code == NGHTTP2_INTERNAL_ERROR)
                c->goaway_internal++;
        else if (l.goaway)
                c->goaway_other++;
        else if (!alive)
                c->closed++;
        else
                c->open++;
        c->streams += sent;
        nghttp2_session_del(l.h2);
}

static int usage(FILE *f, int status) {
        fputs("usage: sf-flood --connect tcp:HOST:PORT --token FILE --service NAME [--seconds S] [--split]\n", f);
        return status;
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "connect", required_argument, NULL, 'c' }, { "token", required_argument, NULL, 'k' },
                { "service", required_argument, NULL, 's' }, { "seconds", required_argument, NULL, 't' },
                { "split", no_argument, NULL, 'S' },         { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *connect_to = NULL, *token = NULL, *service = NULL;
        char host[256], hex[130] = "", *colon, *end;
        double seconds = 3, start, deadline;
        bool split = false;
        uint8_t key[32];
        size_t key_len = 0;
        struct counts c = { 0 };
        FILE *f;
        int opt;

        while ((opt = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
                switch (opt) {
                case 'c':
                        connect_to = optarg;
                        break;
                case 'k':
                        token = optarg;
                        break;
                case 's':
                        service = optarg;
                        break;
                case 't':
                        seconds = strtod(optarg, &end);
                        if (end == optarg || *end || !(seconds > 0 && seconds <= 3600))
                                return usage(stderr, EXIT_USAGE);
                        break;
                case 'S':
                        split = true;
                        break;
                case 'h':
                        return usage(stdout, 0);
                default:
                        return usage(stderr, EXIT_USAGE);
                }
        }
        if (!connect_to || !token || !service || optind != argc || strncmp(connect_to, "tcp:", 4) != 0 ||
            strlen(connect_to + 4) >= sizeof host || !(colon = strrchr(connect_to + 4, ':')))
                return usage(stderr, EXIT_USAGE);
        memcpy(host, connect_to + 4, (size_t)(colon - connect_to - 4));
        host[colon - connect_to - 4] = '\0';
        if (sodium_init() < 0) {
                fprintf(stderr, "sf-flood: libsodium did not start\n");
                return EXIT_FAILURE;
        }
        if (!(f = fopen(token, "r")) || !fgets(hex, sizeof hex, f) ||
            sodium_hex2bin(key, sizeof key, hex, strlen(hex), "\n", &key_len, NULL) != 0 || key_len != sizeof key) {
                fprintf(stderr, "sf-flood: %s: not a token (64 hex digits)\n", token);
                return EXIT_USAGE;
        }
        fclose(f);
        signal(SIGPIPE, SIG_IGN);

        nghttp2_nv nv = { (uint8_t *)"sf-service", (uint8_t *)service, 10, strlen(service), NGHTTP2_NV_FLAG_NONE };
        start = now_s();
        deadline = start + seconds;
        while (now_s() < deadline) {
                int fd = dial(host, colon + 1), r;
                if (fd < 0) {
                        fprintf(stderr, "sf-flood: %s: %s\n", connect_to, strerror(errno));
                        return EXIT_FAILURE;
                }
                r = handshake(fd, key);
                if (r == 0) {
                        c.links++;
                        flood_link(fd, deadline, &nv, split, &c);
                } else if (r == 1) {
                        c.refused++;
                } else {
                        c.closed++;
                }
                close(fd);
        }
        seconds = now_s() - start;
        printf("mode=flood seconds=%.3f streams=%llu streams_s=%.0f taken=%llu taken_s=%.0f links=%u refused=%u "
               "goaway_calm=%u goaway_internal=%u goaway_other=%u closed=%u open=%u\n",
               seconds, c.streams, (double)c.streams / seconds, c.taken, (double)c.taken / seconds, c.links, c.refused,
               c.goaway_calm, c.goaway_internal, c.goaway_other, c.closed, c.open);
        return c.links ? 0 : EXIT_FAILURE;
}
