/* sf-load: load generator and sink server for benchmarking socket relays.
 *
 * One server process serves every mode. A client opens a stream connection and sends one
 * request byte first:
 *   'u' upload: the client streams zero bytes and ends with one non-zero byte; the server
 *       discards them and answers the count it received (8 bytes, big endian), then closes.
 *       An in-band end rather than a half-close, because not every relay forwards one.
 *   'd' download: the server streams bytes until the client goes away.
 *   'p' ping: the server echoes every byte.
 *   'c' connection test: the server answers one byte and closes.
 *   'r' upstream abort: the server closes at once, leaving what the client sent unread (a
 *       unix or TCP peer then sees a reset rather than an orderly end).
 * Every client mode prints one line of key=value pairs on stdout. */

#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (256 * 1024)
#define IO_TIMEOUT_S 10
#define MAX_EVENTS 64
#define EXIT_USAGE 64

enum {
        REQ_UPLOAD = 'u',
        REQ_DOWNLOAD = 'd',
        REQ_PING = 'p',
        REQ_CONN = 'c',
        REQ_ABORT = 'r',
};

struct endpoint {
        struct sockaddr_storage sa;
        socklen_t len;
        const char *text;
};

struct opts {
        const char *listen;
        const char *connect;
        bool upload;
        unsigned streams;
        unsigned concurrency;
        unsigned count;
        unsigned threads;
        double seconds;
        double gap_ms;
        const char *wrong; /* mixed: a listener that must never answer (a relay with another token) */
        const char *junk;  /* mixed: a host relay's own port, fed bytes that are no handshake */
        bool close;        /* floor: each end's close carried across the link */
};

/* Source of every byte the server and the upload client send. */
static char zeros[BUF_SIZE];

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static _Noreturn void die(const char *what) {
        fprintf(stderr, "sf-load: %s: %s\n", what, strerror(errno));
        exit(EXIT_FAILURE);
}

static void *xmalloc(size_t n) {
        void *p = malloc(n);
        if (!p)
                die("malloc");
        return p;
}

static void raise_nofile(void) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
}

/* unix:/path or tcp:HOST:PORT (HOST numeric, [V6] allowed). */
static int endpoint_parse(const char *s, struct endpoint *ep) {
        memset(ep, 0, sizeof *ep);
        ep->text = s;
        if (strncmp(s, "unix:", 5) == 0) {
                struct sockaddr_un *un = (struct sockaddr_un *)&ep->sa;
                size_t n = strlen(s + 5);
                if (s[5] != '/' || n >= sizeof un->sun_path)
                        return -EINVAL;
                un->sun_family = AF_UNIX;
                memcpy(un->sun_path, s + 5, n + 1);
                ep->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
                return 0;
        }
        if (strncmp(s, "tcp:", 4) == 0) {
                const char *h = s + 4, *colon = strrchr(h, ':');
                char host[INET6_ADDRSTRLEN + 2];
                struct addrinfo hints = {
                        .ai_socktype = SOCK_STREAM,
                        .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                }, *ai;
                size_t n;

                if (!colon || colon == h || (size_t)(colon - h) >= sizeof host)
                        return -EINVAL;
                n = (size_t)(colon - h);
                if (h[0] == '[' && h[n - 1] == ']') {
                        h++;
                        n -= 2;
                }
                memcpy(host, h, n);
                host[n] = '\0';
                if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
                        return -EINVAL;
                memcpy(&ep->sa, ai->ai_addr, ai->ai_addrlen);
                ep->len = ai->ai_addrlen;
                freeaddrinfo(ai);
                return 0;
        }
        return -EINVAL;
}

static void set_nodelay(int fd) {
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A blocking connected socket whose reads and writes time out; -1 with errno on failure. */
static int endpoint_connect(const struct endpoint *ep) {
        struct timeval tv = { .tv_sec = IO_TIMEOUT_S };
        int fd = socket(ep->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (ep->sa.ss_family != AF_UNIX)
                set_nodelay(fd);
        if (connect(fd, (const struct sockaddr *)&ep->sa, ep->len) < 0) {
                int saved = errno;
                close(fd);
                errno = saved;
                return -1;
        }
        return fd;
}

static int write_all(int fd, const void *buf, size_t n) {
        const char *p = buf;
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* Reads exactly n bytes; -1 with errno on error, EPIPE on an early EOF. */
static int read_all(int fd, void *buf, size_t n) {
        char *p = buf;
        while (n > 0) {
                ssize_t r = read(fd, p, n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0) {
                        if (r == 0)
                                errno = EPIPE;
                        return -1;
                }
                p += r;
                n -= (size_t)r;
        }
        return 0;
}

/* ---- server ---- */

struct server {
        int fd;
        bool tcp;
};

struct conn {
        int fd;
        char mode; /* 0 until the request byte arrived */
        uint64_t count;
};

/* epoll data of the listening socket, told apart from connections by address. */
static char listener_tag;

static void conn_close(struct conn *c) {
        close(c->fd);
        free(c);
}

static void server_accept(const struct server *s, int ep) {
        static bool warned;

        for (;;) {
                struct epoll_event ev = { .events = EPOLLIN };
                struct conn *c;
                int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE) {
                                if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
                                        fprintf(stderr, "sf-load server: accept: %s\n", strerror(errno));
                                (void)nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
                        }
                        return; /* EAGAIN: another worker took it */
                }
                if (s->tcp)
                        set_nodelay(fd);
                c = calloc(1, sizeof *c);
                if (!c) {
                        close(fd);
                        continue;
                }
                c->fd = fd;
                ev.data.ptr = c;
                if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
                        conn_close(c);
        }
}

static void conn_event(int ep, struct conn *c, char *buf) {
        size_t off = 0;
        ssize_t n;

        if (c->mode == REQ_DOWNLOAD) {
                while (write(c->fd, zeros, BUF_SIZE) > 0)
                        ;
                if (errno != EAGAIN)
                        conn_close(c); /* the client went away */
                return;
        }

        n = read(c->fd, buf, BUF_SIZE);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n <= 0) {
                conn_close(c);
                return;
        }

        if (c->mode == 0) {
                struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };

                c->mode = buf[0];
                off = 1;
                switch (c->mode) {
                case REQ_UPLOAD:
                case REQ_PING:
                        break;
                case REQ_DOWNLOAD:
                        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
                                conn_close(c);
                        return;
                case REQ_CONN:
                        if (write(c->fd, "c", 1) != 1)
                                fprintf(stderr, "sf-load server: conn answer: %s\n", strerror(errno));
                        conn_close(c);
                        return;
                case REQ_ABORT:
                        conn_close(c);
                        return;
                default:
                        fprintf(stderr, "sf-load server: unknown request byte 0x%02x\n", (unsigned char)c->mode);
                        conn_close(c);
                        return;
                }
        }

        if (c->mode == REQ_UPLOAD) {
                c->count += (uint64_t)n - off;
                /* Only the client's last byte is non-zero, so it can only end a read. */
                if ((size_t)n > off && buf[n - 1] != 0) {
                        uint64_t be = htobe64(c->count);
                        if (write(c->fd, &be, sizeof be) != sizeof be)
                                fprintf(stderr, "sf-load server: upload count: %s\n", strerror(errno));
                        conn_close(c);
                }
        } else if ((size_t)n > off && write(c->fd, buf + off, (size_t)n - off) != n - (ssize_t)off)
                conn_close(c); /* a ping client has one byte in flight: a short echo is an error */
}

static void *server_worker(void *arg) {
        const struct server *s = arg;
        struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &listener_tag };
        struct epoll_event events[MAX_EVENTS];
        char *buf = xmalloc(BUF_SIZE);
        int ep = epoll_create1(EPOLL_CLOEXEC);

        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev) < 0)
                die("epoll");
        for (;;) {
                int n = epoll_wait(ep, events, MAX_EVENTS, -1);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        die("epoll_wait");
                }
                for (int i = 0; i < n; i++) {
                        if (events[i].data.ptr == &listener_tag)
                                server_accept(s, ep);
                        else
                                conn_event(ep, events[i].data.ptr, buf);
                }
        }
}

/* A listener on EP (socket FLAGS such as SOCK_NONBLOCK), replacing a stale socket of an
 * earlier run at a unix path; exits when it cannot listen. */
static int endpoint_listen(const struct endpoint *ep, int flags) {
        int one = 1, fd = socket(ep->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
        if (fd < 0)
                die("socket");
        if (ep->sa.ss_family == AF_UNIX) {
                const char *path = ((const struct sockaddr_un *)&ep->sa)->sun_path;
                struct stat st;
                if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                        (void)unlink(path);
        } else {
                (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        }
        if (bind(fd, (const struct sockaddr *)&ep->sa, ep->len) < 0 || listen(fd, 4096) < 0)
                die(ep->text);
        return fd;
}

static int cmd_server(const struct opts *o) {
        struct endpoint ep;
        struct server s;

        if (endpoint_parse(o->listen, &ep) < 0) {
                fprintf(stderr, "sf-load: bad endpoint '%s'\n", o->listen);
                return EXIT_USAGE;
        }
        s.tcp = ep.sa.ss_family != AF_UNIX;
        s.fd = endpoint_listen(&ep, SOCK_NONBLOCK);

        for (unsigned i = 1; i < o->threads; i++) {
                pthread_t t;
                if (pthread_create(&t, NULL, server_worker, &s) != 0)
                        die("pthread_create");
        }
        server_worker(&s);
        return 0;
}

/* ---- clients ---- */

struct samples {
        uint64_t *v;
        size_t n, cap;
};

static void samples_add(struct samples *s, uint64_t ns) {
        if (s->n == s->cap) {
                s->cap = s->cap ? s->cap * 2 : 65536;
                s->v = realloc(s->v, s->cap * sizeof *s->v);
                if (!s->v)
                        die("realloc");
        }
        s->v[s->n++] = ns;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return (x > y) - (x < y);
}

/* Sorts s and returns quantile q in microseconds (nearest rank). */
static double samples_quantile_us(struct samples *s, double q) {
        if (s->n == 0)
                return 0;
        qsort(s->v, s->n, sizeof *s->v, cmp_u64);
        return (double)s->v[(size_t)(q * (double)(s->n - 1) + 0.5)] / 1000.0;
}

static struct endpoint endpoint_or_exit(const char *s) {
        struct endpoint ep;
        if (endpoint_parse(s, &ep) < 0) {
                fprintf(stderr, "sf-load: bad endpoint '%s'\n", s);
                exit(EXIT_USAGE);
        }
        return ep;
}

static struct endpoint connect_endpoint(const struct opts *o) {
        return endpoint_or_exit(o->connect);
}

struct stream {
        const struct opts *o;
        pthread_barrier_t *barrier;
        int fd;
        uint64_t bytes, start, end;
};

static void *stream_run(void *arg) {
        struct stream *st = arg;
        uint64_t deadline;

        pthread_barrier_wait(st->barrier);
        st->start = now_ns();
        deadline = st->start + (uint64_t)(st->o->seconds * 1e9);
        if (st->o->upload) {
                uint64_t be;
                if (write_all(st->fd, "u", 1) < 0)
                        die("upload");
                while (now_ns() < deadline)
                        if (write(st->fd, zeros, BUF_SIZE) < 0 && errno != EINTR)
                                die("upload");
                if (write_all(st->fd, "\1", 1) < 0 || read_all(st->fd, &be, sizeof be) < 0)
                        die("upload: waiting for the server's byte count");
                st->bytes = be64toh(be);
        } else {
                char *buf = xmalloc(BUF_SIZE);
                if (write_all(st->fd, "d", 1) < 0)
                        die("download");
                while (now_ns() < deadline) {
                        ssize_t n = read(st->fd, buf, BUF_SIZE);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0) {
                                if (n == 0)
                                        errno = EPIPE;
                                die("download");
                        }
                        st->bytes += (uint64_t)n;
                }
                free(buf);
        }
        st->end = now_ns();
        close(st->fd);
        return NULL;
}

/* CPU seconds (user + system) this process has used so far, all threads. */
static double self_cpu_s(void) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) < 0)
                die("getrusage");
        return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int cmd_throughput(const struct opts *o) {
        struct endpoint ep = connect_endpoint(o);
        struct stream *st = calloc(o->streams, sizeof *st);
        pthread_t *t = calloc(o->streams, sizeof *t);
        pthread_barrier_t barrier;
        uint64_t bytes = 0, start = UINT64_MAX, end = 0;
        double secs;

        if (!st || !t)
                die("calloc");
        pthread_barrier_init(&barrier, NULL, o->streams);
        for (unsigned i = 0; i < o->streams; i++) {
                st[i] = (struct stream) { .o = o, .barrier = &barrier };
                st[i].fd = endpoint_connect(&ep);
                if (st[i].fd < 0)
                        die(o->connect);
        }
        for (unsigned i = 0; i < o->streams; i++)
                if (pthread_create(&t[i], NULL, stream_run, &st[i]) != 0)
                        die("pthread_create");
        for (unsigned i = 0; i < o->streams; i++) {
                pthread_join(t[i], NULL);
                bytes += st[i].bytes;
                start = st[i].start < start ? st[i].start : start;
                end = st[i].end > end ? st[i].end : end;
        }
        secs = (double)(end - start) / 1e9;
        printf("mode=throughput dir=%s streams=%u seconds=%.3f bytes=%llu mib_s=%.1f cpu_s=%.3f\n",
               o->upload ? "up" : "down", o->streams, secs, (unsigned long long)bytes,
               (double)bytes / (1024.0 * 1024.0) / secs, self_cpu_s());
        free(st);
        free(t);
        return 0;
}

/* Set by SIGUSR1: a ping-pong beside something of unknown length (bench/aborts.sh) ends with
 * it, after the round trip under way. */
static volatile sig_atomic_t stop_asked;

static void ask_stop(int sig) {
        (void)sig;
        stop_asked = 1;
}

static int cmd_pingpong(const struct opts *o) {
        struct endpoint ep = connect_endpoint(o);
        struct sigaction sa = { .sa_handler = ask_stop };
        struct samples s = { 0 };
        uint64_t start, end, deadline;
        char c = 'x';
        int fd;

        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGUSR1, &sa, NULL) < 0)
                die("sigaction");
        fd = endpoint_connect(&ep);
        if (fd < 0)
                die(o->connect);
        if (write_all(fd, "p", 1) < 0)
                die("ping");
        start = now_ns();
        deadline = start + (uint64_t)(o->seconds * 1e9);
        for (end = start; end < deadline && !stop_asked;) {
                uint64_t t = end;
                if (write_all(fd, &c, 1) < 0 || read_all(fd, &c, 1) < 0)
                        die("ping");
                end = now_ns();
                samples_add(&s, end - t);
        }
        close(fd);
        printf("mode=pingpong seconds=%.3f n=%zu rtt_s=%.0f p50_us=%.1f p99_us=%.1f max_us=%.1f\n",
               (double)(end - start) / 1e9, s.n, (double)s.n * 1e9 / (double)(end - start),
               samples_quantile_us(&s, 0.50), samples_quantile_us(&s, 0.99), samples_quantile_us(&s, 1.0));
        free(s.v);
        return 0;
}

/* One connection test: connect, the request byte 'c', its one-byte answer, close. 0, or -1
 * with errno. */
static int conn_once(const struct endpoint *ep) {
        char c;
        int fd = endpoint_connect(ep);
        int r = fd < 0 || write_all(fd, "c", 1) < 0 || read_all(fd, &c, 1) < 0 ? -1 : 0;
        int saved = errno;

        if (fd >= 0)
                close(fd);
        errno = saved;
        return r;
}

static void sleep_ns(uint64_t ns) {
        struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

struct churner {
        const struct opts *o;
        const struct endpoint *ep;
        pthread_barrier_t *barrier;
        struct samples s;
        uint64_t errors, start, end;
};

static void *churner_run(void *arg) {
        struct churner *ch = arg;
        uint64_t deadline;

        pthread_barrier_wait(ch->barrier);
        ch->start = now_ns();
        deadline = ch->start + (uint64_t)(ch->o->seconds * 1e9);
        for (ch->end = ch->start; ch->end < deadline;) {
                uint64_t t = ch->end;

                if (conn_once(ch->ep) < 0) {
                        if (ch->errors++ == 0)
                                fprintf(stderr, "sf-load conns: %s: %s\n", ch->o->connect, strerror(errno));
                        sleep_ns(1000000); /* do not spin on a refusing endpoint */
                        ch->end = now_ns();
                        continue;
                }
                ch->end = now_ns();
                samples_add(&ch->s, ch->end - t);
        }
        return NULL;
}

static int cmd_conns(const struct opts *o) {
        struct endpoint ep = connect_endpoint(o);
        struct churner *ch = calloc(o->concurrency, sizeof *ch);
        pthread_t *t = calloc(o->concurrency, sizeof *t);
        pthread_barrier_t barrier;
        struct samples all = { 0 };
        uint64_t errors = 0, start = UINT64_MAX, end = 0;
        double secs;

        if (!ch || !t)
                die("calloc");
        pthread_barrier_init(&barrier, NULL, o->concurrency);
        for (unsigned i = 0; i < o->concurrency; i++) {
                ch[i] = (struct churner) { .o = o, .ep = &ep, .barrier = &barrier };
                if (pthread_create(&t[i], NULL, churner_run, &ch[i]) != 0)
                        die("pthread_create");
        }
        for (unsigned i = 0; i < o->concurrency; i++) {
                pthread_join(t[i], NULL);
                for (size_t j = 0; j < ch[i].s.n; j++)
                        samples_add(&all, ch[i].s.v[j]);
                free(ch[i].s.v);
                errors += ch[i].errors;
                start = ch[i].start < start ? ch[i].start : start;
                end = ch[i].end > end ? ch[i].end : end;
        }
        secs = (double)(end - start) / 1e9;
        printf("mode=conns concurrency=%u seconds=%.3f n=%zu errors=%llu conns_s=%.0f p50_us=%.1f p99_us=%.1f cpu_s=%.3f\n",
               o->concurrency, secs, all.n, (unsigned long long)errors, (double)all.n / secs,
               samples_quantile_us(&all, 0.50), samples_quantile_us(&all, 0.99), self_cpu_s());
        free(all.v);
        free(ch);
        free(t);
        return errors && all.n == 0 ? EXIT_FAILURE : 0;
}

/* The first answer as a client sees it with nothing else going on: one connection at a time
 * (connect, request, answer), with a pause between them, so that no connection waits for the
 * teardown of the one before or shares the CPUs with another. */
static int cmd_first(const struct opts *o) {
        struct endpoint ep = connect_endpoint(o);
        struct samples s = { 0 };
        uint64_t errors = 0, gap = (uint64_t)(o->gap_ms * 1e6);
        double p50, p90, p99, max;

        for (unsigned i = 0; i < o->count; i++) {
                uint64_t t = now_ns();
                if (conn_once(&ep) < 0) {
                        if (errors++ == 0)
                                fprintf(stderr, "sf-load first: %s: %s\n", o->connect, strerror(errno));
                } else {
                        samples_add(&s, now_ns() - t);
                }
                sleep_ns(gap);
        }
        p50 = samples_quantile_us(&s, 0.50);
        p90 = samples_quantile_us(&s, 0.90);
        p99 = samples_quantile_us(&s, 0.99);
        max = samples_quantile_us(&s, 1.0);
        printf("mode=first n=%zu errors=%llu p50_us=%.1f p90_us=%.1f p99_us=%.1f max_us=%.1f\n", s.n,
               (unsigned long long)errors, p50, p90, p99, max);
        free(s.v);
        return s.n == 0 ? EXIT_FAILURE : 0;
}

/* ---- mixed load (bench/soak.sh) ---- */

/* What a connection of the mix does. Each ends as ok, failed (refused, reset or cut short:
 * expected while the upstream restarts) or, never acceptable, corrupt (bytes that differ from
 * what was sent, or an answer where none may come). */
enum kind {
        K_SHORT,   /* the connection test */
        K_LONG,    /* echoes of 1 B to 16 KiB, spaced out, for 0.2 to 2 s */
        K_HALF,    /* up to 64 KiB, then shutdown(SHUT_WR): every byte must come back, then EOF */
        K_ABORT,   /* a download closed after its first read with bytes unread (a reset) */
        K_UPABORT, /* the upstream closes at once with the client's bytes unread */
        K_SLOW,    /* a download read 4 KiB every 2 ms for 0.2 to 1.5 s */
        K_WRONG,   /* through a relay with another token: must never be answered */
        K_JUNK,    /* bytes that are no handshake, straight at the host relay's port */
        N_KINDS
};

static const struct {
        const char *name;
        unsigned weight;
} kinds[N_KINDS] = {
        [K_SHORT] = { "short", 30 }, [K_LONG] = { "long", 10 },   [K_HALF] = { "half", 15 },
        [K_ABORT] = { "abort", 10 }, [K_UPABORT] = { "upabort", 10 }, [K_SLOW] = { "slow", 5 },
        [K_WRONG] = { "wrong", 10 }, [K_JUNK] = { "junk", 10 },
};

enum outcome { OK, FAILED, CORRUPT };

struct mixer {
        const struct opts *o;
        const struct endpoint *ep, *wrong, *junk;
        uint32_t rng;
        uint64_t ok[N_KINDS], failed[N_KINDS], stalled[N_KINDS], corrupt[N_KINDS];
        int err; /* errno of the last failure */
        char *buf, *back;
};

static uint32_t rnd(struct mixer *m, uint32_t lo, uint32_t hi) {
        /* xorshift32: each thread its own sequence, no lock */
        m->rng ^= m->rng << 13;
        m->rng ^= m->rng >> 17;
        m->rng ^= m->rng << 5;
        return lo + m->rng % (hi - lo + 1);
}

static void pattern(char *p, size_t n, uint32_t seed) {
        for (size_t i = 0; i < n; i++)
                p[i] = (char)(seed + i * 131u);
}

/* Closes fd so that the peer sees a reset: TCP sends RST with a zero linger; a unix peer gets
 * ECONNRESET when bytes are left unread, which every caller arranges. */
static void close_abort(int fd) {
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
}

/* Reads until EOF or reset; CORRUPT if a byte arrives and answers_ok is false. */
static enum outcome read_to_end(int fd, char *buf, bool answers_ok) {
        for (;;) {
                ssize_t n = read(fd, buf, BUF_SIZE);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE)))
                        return OK;
                if (n < 0)
                        return FAILED; /* the read timeout: nobody closed */
                if (!answers_ok)
                        return CORRUPT;
        }
}

static enum outcome mix_long(struct mixer *m, int fd) {
        uint64_t end = now_ns() + (uint64_t)rnd(m, 200, 2000) * 1000000u;
        if (write_all(fd, "p", 1) < 0)
                return FAILED;
        while (now_ns() < end) {
                size_t n = rnd(m, 1, 16384);
                pattern(m->buf, n, m->rng);
                if (write_all(fd, m->buf, n) < 0 || read_all(fd, m->back, n) < 0)
                        return FAILED;
                if (memcmp(m->buf, m->back, n) != 0)
                        return CORRUPT;
                sleep_ns((uint64_t)rnd(m, 20, 100) * 1000000u);
        }
        return OK;
}

static enum outcome mix_half(struct mixer *m, int fd) {
        size_t n = rnd(m, 1, 65536), got = 0;
        m->buf[0] = 'p';
        pattern(m->buf + 1, n, m->rng);
        if (write_all(fd, m->buf, n + 1) < 0 || shutdown(fd, SHUT_WR) < 0)
                return FAILED;
        for (;;) {
                ssize_t r = read(fd, m->back + got, BUF_SIZE - got);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return FAILED;
                if (r == 0)
                        break;
                got += (size_t)r;
                if (got > n)
                        return CORRUPT;
        }
        if (memcmp(m->buf + 1, m->back, got) != 0)
                return CORRUPT;
        return got == n ? OK : FAILED;
}

static enum outcome mix_download(struct mixer *m, int fd, bool slow) {
        uint64_t end = now_ns() + (uint64_t)rnd(m, 200, 1500) * 1000000u;
        if (write_all(fd, "d", 1) < 0)
                return FAILED;
        do {
                ssize_t r = read(fd, m->back, slow ? 4096 : BUF_SIZE);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return FAILED;
                if (slow)
                        sleep_ns(2000000);
        } while (slow && now_ns() < end);
        return OK;
}

static enum outcome mix_one(struct mixer *m, enum kind k) {
        const struct endpoint *ep = k == K_WRONG ? m->wrong : k == K_JUNK ? m->junk : m->ep;
        enum outcome r = OK;
        int fd;

        if (k == K_SHORT) {
                r = conn_once(ep) < 0 ? FAILED : OK;
                m->err = errno;
                return r;
        }
        fd = endpoint_connect(ep);
        if (fd < 0) {
                m->err = errno;
                return FAILED;
        }
        switch (k) {
        case K_LONG:
                r = mix_long(m, fd);
                break;
        case K_HALF:
                r = mix_half(m, fd);
                break;
        case K_ABORT:
        case K_SLOW:
                r = mix_download(m, fd, k == K_SLOW);
                m->err = errno;
                if (k == K_ABORT) {
                        close_abort(fd);
                        return r;
                }
                break;
        case K_UPABORT:
                m->buf[0] = 'r';
                pattern(m->buf + 1, 1024, m->rng);
                /* the write may already meet the reset */
                (void)write_all(fd, m->buf, 1025);
                r = read_to_end(fd, m->back, false);
                break;
        case K_WRONG:
                r = write_all(fd, "c", 1) < 0 ? OK : read_to_end(fd, m->back, false);
                break;
        case K_JUNK:
                pattern(m->buf, 64, m->rng);
                if (write_all(fd, m->buf, 64) == 0 && rnd(m, 0, 1)) {
                        close_abort(fd);
                        return OK;
                }
                /* the host relay's greeting comes first, then it must hang up */
                r = read_to_end(fd, m->back, true);
                break;
        default:
                break;
        }
        if (k != K_SLOW)
                m->err = errno;
        close(fd);
        return r;
}

static void *mixer_run(void *arg) {
        struct mixer *m = arg;
        uint64_t deadline = now_ns() + (uint64_t)(m->o->seconds * 1e9);
        unsigned total = 0;

        for (int k = 0; k < N_KINDS; k++)
                if ((k != K_WRONG || m->wrong) && (k != K_JUNK || m->junk))
                        total += kinds[k].weight;
        while (now_ns() < deadline) {
                unsigned pick = rnd(m, 0, total - 1);
                int k = 0;
                for (;; k++) {
                        if ((k == K_WRONG && !m->wrong) || (k == K_JUNK && !m->junk))
                                continue;
                        if (pick < kinds[k].weight)
                                break;
                        pick -= kinds[k].weight;
                }
                switch (mix_one(m, (enum kind)k)) {
                case OK:
                        m->ok[k]++;
                        break;
                case FAILED:
                        /* a read or write that timed out: neither progress nor an end for
                         * IO_TIMEOUT_S, which no relay should leave a client in */
                        if (m->err == EAGAIN || m->err == EWOULDBLOCK)
                                m->stalled[k]++;
                        else
                                m->failed[k]++;
                        sleep_ns(1000000); /* do not spin on a refusing endpoint */
                        break;
                case CORRUPT:
                        m->corrupt[k]++;
                        break;
                }
        }
        return NULL;
}

static int cmd_mixed(const struct opts *o) {
        struct endpoint ep = connect_endpoint(o), wrong, junk;
        struct mixer *m = calloc(o->concurrency, sizeof *m);
        pthread_t *t = calloc(o->concurrency, sizeof *t);
        uint64_t ok[N_KINDS] = { 0 }, failed[N_KINDS] = { 0 }, stalled[N_KINDS] = { 0 }, corrupt = 0;
        int status = 0;

        if (!m || !t)
                die("calloc");
        if (o->wrong)
                wrong = endpoint_or_exit(o->wrong);
        if (o->junk)
                junk = endpoint_or_exit(o->junk);
        for (unsigned i = 0; i < o->concurrency; i++) {
                m[i] = (struct mixer) {
                        .o = o,
                        .ep = &ep,
                        .wrong = o->wrong ? &wrong : NULL,
                        .junk = o->junk ? &junk : NULL,
                        .rng = (uint32_t)(now_ns() ^ (i * 2654435761u)) | 1,
                        .buf = xmalloc(BUF_SIZE),
                        .back = xmalloc(BUF_SIZE),
                };
                if (pthread_create(&t[i], NULL, mixer_run, &m[i]) != 0)
                        die("pthread_create");
        }
        for (unsigned i = 0; i < o->concurrency; i++) {
                pthread_join(t[i], NULL);
                for (int k = 0; k < N_KINDS; k++) {
                        ok[k] += m[i].ok[k];
                        failed[k] += m[i].failed[k];
                        stalled[k] += m[i].stalled[k];
                        corrupt += m[i].corrupt[k];
                        if (m[i].corrupt[k] && status == 0) {
                                fprintf(stderr, "sf-load mixed: %s: %s\n", kinds[k].name,
                                        k == K_WRONG || k == K_UPABORT ? "answered where no answer may come"
                                                                     : "bytes differ from what was sent");
                                status = EXIT_FAILURE;
                        }
                }
                free(m[i].buf);
                free(m[i].back);
        }
        printf("mode=mixed seconds=%.3f concurrency=%u", o->seconds, o->concurrency);
        for (int k = 0; k < N_KINDS; k++)
                printf(" %s_ok=%llu %s_failed=%llu %s_stalled=%llu", kinds[k].name, (unsigned long long)ok[k],
                       kinds[k].name, (unsigned long long)failed[k], kinds[k].name, (unsigned long long)stalled[k]);
        printf(" corrupt=%llu\n", (unsigned long long)corrupt);
        /* The load must have got through: a mix of nothing but failures proves nothing. */
        for (int k = K_SHORT; k <= K_HALF; k++)
                if (ok[k] == 0) {
                        fprintf(stderr, "sf-load mixed: no %s connection succeeded\n", kinds[k].name);
                        status = EXIT_FAILURE;
                }
        free(m);
        free(t);
        return status;
}

/* idle: connections that did one round trip and then wait. stalled: downloads whose reader
 * took their first byte and then stopped reading, so that everything between it and the server
 * fills up and stays full (a `docker logs -f` whose terminal was suspended). */
static int cmd_hold(const struct opts *o, bool stalled) {
        const char *mode = stalled ? "stalled" : "idle", *req = stalled ? "d" : "px";
        struct endpoint ep = connect_endpoint(o);
        int *fds = calloc(o->count, sizeof *fds);
        unsigned open = 0;
        ssize_t r;
        char c;

        if (!fds)
                die("calloc");
        /* Each connection has one byte back, so every hop of a relay chain is set up. */
        for (; open < o->count; open++) {
                int fd = endpoint_connect(&ep);
                if (fd < 0 || write_all(fd, req, strlen(req)) < 0 || read_all(fd, &c, 1) < 0) {
                        fprintf(stderr, "sf-load %s: connection %u: %s\n", mode, open + 1, strerror(errno));
                        if (fd >= 0)
                                close(fd);
                        break;
                }
                fds[open] = fd;
        }
        printf("mode=%s requested=%u open=%u\n", mode, o->count, open);
        fflush(stdout);
        while ((r = read(STDIN_FILENO, &c, 1)) > 0 || (r < 0 && errno == EINTR))
                ;
        for (unsigned i = 0; i < open; i++)
                close(fds[i]);
        free(fds);
        return open == o->count ? 0 : EXIT_FAILURE;
}

/* ---- the floor of a relay pair (bench/RESULTS.md) ---- */

/* The least a relay pair with a shared link must do for one connection test (request 'c', one
 * byte back), one connection at a time: no framing, no event loop, no authentication, blocking
 * calls on a link opened once. The container half accepts a client, reads its byte, writes it
 * to the link, reads the answer from the link and writes it back; the host half reads the link,
 * connects to the server, writes the byte, reads the answer and writes it to the link. Good for
 * `conns --concurrency 1` and `first` only: it carries one byte of one connection at a time.
 *
 * It closes each connection as soon as the answer is through, which a relay may not do: the
 * client may have half-closed and still wait, the server's close is what the client must see.
 * With --close it is the floor of a transparent pair: the server's end (the host half reads it
 * after the answer) crosses the link behind the answer, one write, and reaches the client as a
 * shutdown; the client's end crosses back, and only then does the host half close the server's
 * connection. One byte, CLOSED, marks an end on the link. */
#define CLOSED 'E'

/* Reads fd to its end: 0, or -1 (an error, or bytes where none may be). */
static int read_end(int fd) {
        char b;
        ssize_t r;
        while ((r = read(fd, &b, 1)) < 0 && errno == EINTR)
                ;
        return r == 0 ? 0 : -1;
}

static int cmd_floor(const struct opts *o, bool container) {
        struct endpoint lep = endpoint_or_exit(o->listen), cep = endpoint_or_exit(o->connect);
        int lfd = endpoint_listen(&lep, 0), link;
        char c, a[2];

        if (container) {
                if ((link = endpoint_connect(&cep)) < 0)
                        die(o->connect);
                /* A link lives as long as the pair: it must not time out between clients. */
                struct timeval none = { 0 };
                (void)setsockopt(link, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        } else {
                if ((link = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
                        die("accept");
                set_nodelay(link);
        }
        for (;;) {
                int fd;
                if (container) {
                        if ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
                                die("accept");
                        if (read_all(fd, &c, 1) < 0 || write_all(link, &c, 1) < 0 || read_all(link, a, o->close ? 2 : 1) < 0)
                                die("floor (container half)");
                        /* A client that went away early costs it its answer, not the floor its link. */
                        if (write_all(fd, a, 1) == 0 && o->close && shutdown(fd, SHUT_WR) == 0)
                                (void)read_end(fd);
                        if (o->close && write_all(link, (char[]) { CLOSED }, 1) < 0)
                                die("floor (container half)");
                } else {
                        if (read_all(link, &c, 1) < 0)
                                return 0; /* the container half went away */
                        if ((fd = endpoint_connect(&cep)) < 0 || write_all(fd, &c, 1) < 0 || read_all(fd, a, 1) < 0 ||
                            (o->close && read_end(fd) < 0))
                                die("floor (host half)");
                        a[1] = CLOSED;
                        if (write_all(link, a, o->close ? 2 : 1) < 0 || (o->close && (read_all(link, &c, 1) < 0 || c != CLOSED)))
                                die("floor (host half)");
                }
                close(fd);
        }
}

/* ---- command line ---- */

static int usage(FILE *f, int status) {
        fputs("usage: sf-load server     --listen EP [--threads N]\n"
              "       sf-load throughput --connect EP --dir up|down [--streams N] [--seconds S]\n"
              "       sf-load pingpong   --connect EP [--seconds S]   (SIGUSR1 ends it sooner)\n"
              "       sf-load conns      --connect EP [--seconds S] [--concurrency C]\n"
              "       sf-load first      --connect EP --count N [--gap-ms MS]   (one at a time)\n"
              "       sf-load idle       --connect EP --count N   (holds them until stdin closes)\n"
              "       sf-load stalled    --connect EP --count N   (downloads nobody reads, held so)\n"
              "       sf-load mixed      --connect EP [--seconds S] [--concurrency C] [--wrong EP] [--junk EP]\n"
              "       sf-load floor-ctr  --listen unix:P --connect tcp:H:PORT [--close]  (the floor of a relay\n"
              "       sf-load floor-host --listen tcp:H:PORT --connect EP [--close]     pair: one 'c' request\n"
              "                          at a time; --close carries each end's close across, as a relay must)\n"
              "EP is unix:/path or tcp:HOST:PORT. Results are one line of key=value pairs.\n",
              f);
        return status;
}

static int parse_count(const char *s, unsigned *out) {
        char *end;
        unsigned long v;

        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || end == s || *end || v == 0 || v > 1000000)
                return -EINVAL;
        *out = (unsigned)v;
        return 0;
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "listen", required_argument, NULL, 'l' },
                { "connect", required_argument, NULL, 'c' },
                { "dir", required_argument, NULL, 'd' },
                { "streams", required_argument, NULL, 's' },
                { "seconds", required_argument, NULL, 't' },
                { "concurrency", required_argument, NULL, 'C' },
                { "count", required_argument, NULL, 'n' },
                { "threads", required_argument, NULL, 'T' },
                { "gap-ms", required_argument, NULL, 'g' },
                { "wrong", required_argument, NULL, 'w' },
                { "junk", required_argument, NULL, 'j' },
                { "close", no_argument, NULL, 'E' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        struct opts o = {
                .streams = 1,
                .concurrency = 1,
                .threads = ncpu > 0 ? (unsigned)ncpu : 1,
                .seconds = 3,
        };
        const char *mode, *dir = NULL;
        char *end;
        int opt;

        if (argc < 2)
                return usage(stderr, EXIT_USAGE);
        mode = argv[1];
        if (strcmp(mode, "--help") == 0 || strcmp(mode, "-h") == 0)
                return usage(stdout, 0);

        while ((opt = getopt_long(argc - 1, argv + 1, "h", options, NULL)) >= 0) {
                switch (opt) {
                case 'l':
                        o.listen = optarg;
                        break;
                case 'c':
                        o.connect = optarg;
                        break;
                case 'd':
                        dir = optarg;
                        break;
                case 's':
                case 'C':
                case 'n':
                case 'T':
                        if (parse_count(optarg, opt == 's' ? &o.streams : opt == 'C' ? &o.concurrency
                                                        : opt == 'n' ? &o.count : &o.threads) < 0) {
                                fprintf(stderr, "sf-load: bad number '%s'\n", optarg);
                                return EXIT_USAGE;
                        }
                        break;
                case 't':
                        o.seconds = strtod(optarg, &end);
                        if (end == optarg || *end || !(o.seconds > 0 && o.seconds <= 3600)) {
                                fprintf(stderr, "sf-load: bad duration '%s'\n", optarg);
                                return EXIT_USAGE;
                        }
                        break;
                case 'g':
                        o.gap_ms = strtod(optarg, &end);
                        if (end == optarg || *end || !(o.gap_ms >= 0 && o.gap_ms <= 10000)) {
                                fprintf(stderr, "sf-load: bad pause '%s'\n", optarg);
                                return EXIT_USAGE;
                        }
                        break;
                case 'w':
                        o.wrong = optarg;
                        break;
                case 'j':
                        o.junk = optarg;
                        break;
                case 'E':
                        o.close = true;
                        break;
                case 'h':
                        return usage(stdout, 0);
                default:
                        return usage(stderr, EXIT_USAGE);
                }
        }
        if (optind + 1 != argc) {
                fprintf(stderr, "sf-load: unexpected argument '%s'\n", argv[optind + 1]);
                return EXIT_USAGE;
        }

        signal(SIGPIPE, SIG_IGN);
        raise_nofile();
        if (strcmp(mode, "server") == 0) {
                if (!o.listen)
                        return usage(stderr, EXIT_USAGE);
                return cmd_server(&o);
        }
        if (!o.connect)
                return usage(stderr, EXIT_USAGE);
        if (strcmp(mode, "floor-ctr") == 0 || strcmp(mode, "floor-host") == 0) {
                if (!o.listen)
                        return usage(stderr, EXIT_USAGE);
                return cmd_floor(&o, strcmp(mode, "floor-ctr") == 0);
        }
        if (strcmp(mode, "throughput") == 0) {
                if (!dir || (strcmp(dir, "up") != 0 && strcmp(dir, "down") != 0))
                        return usage(stderr, EXIT_USAGE);
                o.upload = strcmp(dir, "up") == 0;
                return cmd_throughput(&o);
        }
        if (strcmp(mode, "pingpong") == 0)
                return cmd_pingpong(&o);
        if (strcmp(mode, "conns") == 0)
                return cmd_conns(&o);
        if (strcmp(mode, "first") == 0) {
                if (o.count == 0)
                        return usage(stderr, EXIT_USAGE);
                return cmd_first(&o);
        }
        if (strcmp(mode, "mixed") == 0)
                return cmd_mixed(&o);
        if (strcmp(mode, "idle") == 0 || strcmp(mode, "stalled") == 0) {
                if (o.count == 0)
                        return usage(stderr, EXIT_USAGE);
                return cmd_hold(&o, strcmp(mode, "stalled") == 0);
        }
        fprintf(stderr, "sf-load: unknown mode '%s'\n", mode);
        return usage(stderr, EXIT_USAGE);
}
