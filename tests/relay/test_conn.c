/* The connection's state machine (relay/conn/), driven over real sockets through every row of
 * the transition table in relay/conn/state.h, every timeout and every way a connection ends; each
 * test then checks that it freed what it took: the forward's connections, the pooled buffers and
 * the descriptors. The test plays both ends: the client, and the far end — a plain service, or the
 * peer relay of a link, with the frames of relay/link/frames.h and a key it knows.
 *
 * Which test takes which row:
 *   NEW -GREET-> GREETED                 greeted_*
 *   NEW -DIAL-> DIALING                  plain_*
 *   NEW -CLOSE-> CLOSED                  new_greeting_not_sent, new_adopt_fails
 *   GREETED -DIAL-> DIALING              greeted_client_frame_ok, greeted_probe
 *   GREETED -REFUSED-> LINGER            greeted_bad_mac_lingers_*, greeted_version_and_flags
 *   GREETED -CLOSE-> CLOSED              greeted_wrong_magic, greeted_eof, greeted_timeout, eviction
 *   DIALING -DIAL_WAIT-> DIALING         dial_unix_backlog_retry, dial_tcp_timeout, client_hangup_*
 *   DIALING -CONNECTED-> RELAYING        plain_relay_both_ways
 *   DIALING -CONNECTED_LINK-> AWAIT_HELLO link_*
 *   DIALING -CAND_FAILED-> DIALING       plain_failover, dial_unix_backlog_retry
 *   DIALING -REFUSED-> LINGER            chained_every_dial_fails
 *   DIALING -CLOSE-> CLOSED              plain_every_candidate_fails, dial_tcp_timeout, client_hangup_*
 *   AWAIT_HELLO -HELLO-> AWAIT_STATUS    link_happy_path
 *   AWAIT_HELLO -CAND_FAILED-> DIALING   link_hello_failures_fall_through
 *   AWAIT_HELLO -REFUSED-> LINGER        chained_hello_timeout
 *   AWAIT_HELLO -CLOSE-> CLOSED          link_hello_failures_all_fail, link_hello_reset
 *   AWAIT_STATUS -STATUS_OK-> RELAYING   link_happy_path, link_early_bytes_bound
 *   AWAIT_STATUS -CAND_FAILED-> DIALING  link_auth_rejected_resends_early_bytes, link_to_plain_candidate
 *   AWAIT_STATUS -REFUSED-> LINGER       chained_upstream_unavailable
 *   AWAIT_STATUS -CLOSE-> CLOSED         link_status_timeout, link_status_eof
 *   RELAYING -CLOSE-> CLOSED             plain_relay_both_ways, relaying_idle_timeout, relaying_reset,
 *                                        greeting_check_*, close_all
 *   LINGER -CLOSE-> CLOSED               greeted_bad_mac_lingers_*
 * and table.* checks the table itself and an event it has no row for. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#ifndef SF_PORTABLE
#include <sys/epoll.h>
#include <sys/ioctl.h>
#endif

#include "conf/conf.h"
#include "conf/conf_int.h"
#include "conf/log.h"
#include "relay/conn/state.h"
#include "relay/engine/bufpool.h"
#include "relay/link/frames.h"

/* A handshake-timeout that the test's own side must beat before the one under test runs out
 * (a peer's hello or frame, the client's frame): each is a few steps of the loop, but a test
 * process that waits for a CPU on a loaded machine lets a shorter one expire first (80 ms did,
 * under two busy loops beside a full CI run), and the test sees another failure than the one
 * it provoked. */
#define HS_MUST_BEAT "500ms"

static uv_loop_t loop;
static struct sf_bufpool *pool;
static struct sf_engine eng;
static struct sf_conf conf;
static struct sf_fwd fwd;
static struct sf_hs_key key = { .len = 32 };
static char tmp[64];
static char log_path[128];
static int base_fds;
static bool fwd_up;
#ifdef SF_PORTABLE
static uv_timer_t tick; /* bounds each turn of the loop: uv_run(ONCE) waits for something */
#endif

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        cr_assert(d);
        int n = 0;
        for (struct dirent *e; (e = readdir(d));)
                n += e->d_name[0] != '.';
        closedir(d);
        return n - 1; /* the directory's own */
}

#ifdef SF_PORTABLE
static void on_tick(uv_timer_t *t) {
        (void)t;
}
#endif

static void setup(void) {
        snprintf(tmp, sizeof tmp, "/tmp/sf-conn-XXXXXX");
        cr_assert(mkdtemp(tmp));
        /* The log goes to a file the tests read. */
        snprintf(log_path, sizeof log_path, "%s/log", tmp);
        int fd = open(log_path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert(fd >= 0);
        dup2(fd, 2);
        close(fd);
        sf_log_setup(SF_LOG_DEBUG, SF_LOG_TEXT);
        memset(key.bytes, 0x42, key.len);
        cr_assert_eq(sf_hs_init(), 0);
        uv_loop_init(&loop);
        pool = sf_bufpool_new(0, NULL);
        cr_assert(pool);
        cr_assert_eq(sf_engine_init(&eng, &loop, pool), 0);
#ifdef SF_PORTABLE
        uv_timer_init(&loop, &tick);
        uv_timer_start(&tick, on_tick, 5, 5);
#endif
        sf_conf_init(&conf);
        base_fds = count_fds();
}

static void teardown(void) {
        if (fwd_up) {
                sf_conn_close_all(&fwd, "test over");
                sf_fwd_free(&fwd);
        }
#ifdef SF_PORTABLE
        uv_close((uv_handle_t *)&tick, NULL);
#endif
        sf_engine_close(&eng);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        sf_engine_free(&eng);
        sf_bufpool_free(pool);
        sf_conf_free(&conf);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        cr_assert_eq(system(cmd), 0);
}

TestSuite(conn, .init = setup, .fini = teardown, .timeout = 60);

/* One turn of the relay's loop, as sf_relay_run would take it (relay/engine/evset.c). */
static void step(void) {
#ifdef SF_PORTABLE
        uv_run(&loop, UV_RUN_ONCE);
#else
        struct epoll_event evs[64];
        int n = epoll_wait(eng.ev.epfd, evs, 64, sf_deferq_pending(&eng.ev.q) ? 0 : 5);
        uv_update_time(&loop);
        for (int i = 0; i < n; i++) {
                struct sf_ev *ev = evs[i].data.ptr;
                if (ev)
                        ev->cb(ev, evs[i].events);
        }
        sf_deferq_run(&eng.ev.q);
        uv_run(&loop, UV_RUN_NOWAIT);
#endif
}

/* Turns the loop until expr holds, for 10 s at most; its value then. */
#define run_until(expr)                                           \
        ({                                                        \
                int64_t end_ = now_ms() + 10000;                  \
                while (!(expr) && now_ms() < end_)                \
                        step();                                   \
                (expr);                                           \
        })

static const char *log_text(void) {
        static char text[1 << 16];
        FILE *f = fopen(log_path, "r");
        cr_assert(f);
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        return text;
}

/* The relay logged what (the log follows when it did not). */
#define assert_log(what)                                                                          \
        do {                                                                                      \
                const char *text_ = log_text();                                                   \
                cr_assert(strstr(text_, (what)), "not in the log: %s\nthe log:\n%s", (what), text_); \
        } while (0)

static void on_gone(struct sf_fwd *f) {
        (void)f;
}

/* The forward of spec (-F syntax); the listener's family says which kind of client it has.
 * link: it holds the test key (auth = token). */
__attribute__((format(printf, 3, 4))) static void forward(int listen_family, bool link, const char *fmt, ...) {
        char spec[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(spec, sizeof spec, fmt, ap);
        va_end(ap);
        cr_assert_eq(sf_conf_add_spec(&conf, spec), 0, "%s", spec);
        /* The defaults validation fills in (the service's name). */
        sf_conf_forward_resolve(&conf.forwards[0]);
        cr_assert_eq(sf_fwd_init(&fwd, &conf, &conf.forwards[0], &loop, pool, &eng), 0);
        fwd.conn_gone = on_gone;
        fwd.listener.family = listen_family;
        if (link) {
                fwd.key = key;
                fwd.has_key = true;
                fwd.token_file = "test-token";
                /* As sf_relay_start decides: a network listener's relay dials its upstream
                 * plainly unless the forward says connect-auth = token. */
                const struct sf_forward *fc = &conf.forwards[0];
                fwd.connect_key = fc->connect_auth_set ? fc->connect_auth == SF_AUTH_TOKEN : listen_family == AF_UNIX;
        }
        fwd_up = true;
}

static struct sf_conn *conn(void) {
        return fwd.conns.first ? sf_list_entry(fwd.conns.first, struct sf_conn, node) : NULL;
}

/* The newest connection. */
static struct sf_conn *newest(void) {
        return fwd.conns.last ? sf_list_entry(fwd.conns.last, struct sf_conn, node) : NULL;
}

static enum conn_state state(void) {
        struct sf_conn *c = conn();
        return c ? c->state : ST_CLOSED;
}

/* The connection gone and everything it held given back. */
static void check_freed(void) {
        cr_assert(run_until(fwd.n_conns_allocated == 0), "the connection was not freed");
        for (int i = 0; i < 3; i++)
                step();
        cr_assert_eq(fwd.stats->active, 0);
        cr_assert_eq(fwd.preauth.all.n, 0);
        cr_assert_eq(sf_bufpool_in_use(pool), 0, "%zu buffers still out", sf_bufpool_in_use(pool));
        sf_engine_trim(&eng);
        cr_assert_eq(count_fds(), base_fds, "%d descriptors open, %d before", count_fds(), base_fds);
}

/* The test's sockets closed (n of them), the connection ends and gives everything back. */
static void finish(int n, ...) {
        va_list ap;
        va_start(ap, n);
        for (int i = 0; i < n; i++)
                close(va_arg(ap, int));
        va_end(ap);
        cr_assert(run_until(conn() == NULL), "the connection outlived its sockets");
        check_freed();
}

/* ---- sockets of the test ----------------------------------------------------------------- */

static int tcp_listener(unsigned *port, int backlog) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        cr_assert_eq(listen(fd, backlog), 0);
        socklen_t len = sizeof a;
        getsockname(fd, (struct sockaddr *)&a, &len);
        *port = ntohs(a.sin_port);
        return fd;
}

static int unix_listener(const char *name, int backlog, char *path, size_t cap) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(path, cap, "%s/%s", tmp, name);
        snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        cr_assert_eq(listen(fd, backlog), 0);
        return fd;
}

static bool readable(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return poll(&p, 1, 0) == 1;
}

/* The relay's connection to one of the test's listeners. */
static int accept_one(int lfd) {
        cr_assert(run_until(readable(lfd)), "the relay did not connect");
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        cr_assert(fd >= 0);
        return fd;
}

/* A new connection of the forward: its client's end (the test's) is returned. */
static int client_unix(void) {
        int sv[2];
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
        struct sf_incoming in = { .fd = sv[0] };
        cr_assert_eq(sf_conn_new(&fwd, &in), 0);
        return sv[1];
}

/* A TCP connection on loopback: the accepted end (non-blocking, the relay's) is returned, the
 * connecting end (the test's) goes to *test_end. */
static int tcp_pair(int *test_end) {
        unsigned port;
        int lfd = tcp_listener(&port, 4);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
        int rfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        cr_assert(rfd >= 0);
        close(lfd);
        *test_end = fd;
        return rfd;
}

static int client_tcp(void) {
        int fd;
        struct sf_incoming in = { .fd = tcp_pair(&fd) };
        cr_assert_eq(sf_conn_new(&fwd, &in), 0);
        return fd;
}

static void send_all(int fd, const void *buf, size_t n) {
        cr_assert_eq(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads exactly n bytes from the test's socket fd while the loop turns. */
static void recv_n(int fd, void *buf, size_t n) {
        size_t have = 0;
        cr_assert(run_until(({
                          ssize_t r = recv(fd, (char *)buf + have, n - have, MSG_DONTWAIT);
                          if (r > 0)
                                  have += (size_t)r;
                          have == n;
                  })),
                  "%zu of %zu bytes came", have, n);
}

/* Whether the test's socket fd is at EOF (or reset) once the loop has turned. */
static bool at_eof(int fd) {
        char b[4096];
        ssize_t r;
        while ((r = recv(fd, b, sizeof b, MSG_DONTWAIT)) > 0)
                ;
        return r == 0 || (r < 0 && errno != EAGAIN);
}

/* Everything the test's socket fd gets until EOF, at most cap bytes kept. */
static size_t recv_to_eof(int fd, char *buf, size_t cap) {
        size_t have = 0;
        bool eof = false;
        run_until(({
                char b[65536];
                ssize_t r;
                while ((r = recv(fd, b, sizeof b, MSG_DONTWAIT)) > 0) {
                        size_t k = (size_t)r < cap - have ? (size_t)r : cap - have;
                        memcpy(buf + have, b, k);
                        have += k;
                }
                eof = r == 0 || (r < 0 && errno != EAGAIN);
                eof;
        }));
        cr_assert(eof, "no EOF after %zu bytes", have);
        return have;
}

/* A forward from a unix socket to a unix service of the test (more keys: extra), and one
 * connection through it, relaying. */
struct relayed {
        int lfd, cfd, sfd;
};

static struct relayed relayed_unix(const char *extra) {
        struct relayed r;
        char path[128];
        r.lfd = unix_listener("svc.sock", 16, path, sizeof path);
        forward(AF_UNIX, false, "t:unix:%s/l.sock=unix:%s%s", tmp, path, extra);
        r.cfd = client_unix();
        r.sfd = accept_one(r.lfd);
        cr_assert_eq(state(), ST_RELAYING);
        return r;
}

/* A forward with auth = token from a unix socket to one peer relay the test plays (more keys:
 * extra), and a client. */
struct linked {
        int lfd, cfd;
};

static struct linked linked_unix(const char *extra) {
        struct linked r;
        unsigned port;
        r.lfd = tcp_listener(&port, 4);
        forward(AF_UNIX, true, "t:unix:%s/l.sock=tcp:127.0.0.1:%u%s", tmp, port, extra);
        r.cfd = client_unix();
        return r;
}

/* ---- the test as the peer relay --------------------------------------------------------------- */

struct peer {
        int fd;
        uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];
};

/* Accepts the relay's link and greets it. */
static struct peer peer_accept(int lfd) {
        struct peer p = { .fd = accept_one(lfd) };
        uint8_t hello[SF_HS_HELLO_LEN];
        sf_hs_nonce_new(p.snonce);
        sf_hs_hello_build(hello, p.snonce);
        send_all(p.fd, hello, sizeof hello);
        return p;
}

/* Reads the client frame: it must verify with the test key. */
static void peer_frame(struct peer *p) {
        uint8_t frame[SF_HS_CLIENT_LEN], flags, version;
        recv_n(p->fd, frame, sizeof frame);
        cr_assert_eq(sf_hs_client_verify(frame, &key, p->snonce, p->cnonce, &flags, &version), 0);
        /* The forward names no service: it asks for its own name, as a default. */
        cr_assert_eq(flags, SF_HS_FLAG_SERVICE | SF_HS_FLAG_DEFAULT);
        uint8_t ext[SF_HS_SERVICE_EXT_MAX];
        recv_n(p->fd, ext, 1);
        size_t n = sf_hs_service_ext_len(ext, 1);
        cr_assert(n > 1 && n <= sizeof ext, "extension of %zu bytes", n);
        recv_n(p->fd, ext + 1, n - 1);
        char name[SF_HS_SERVICE_MAX + 1];
        cr_assert_eq(sf_hs_service_verify(ext, n, &key, p->snonce, p->cnonce, name), 0);
        cr_assert_str_eq(name, "t");
}

static void peer_status(struct peer *p, const struct sf_hs_key *k, enum sf_hs_status st, const char *reason) {
        uint8_t buf[SF_HS_STATUS_MAX];
        size_t n = sf_hs_status_build(buf, k, p->snonce, p->cnonce, st, reason);
        send_all(p->fd, buf, n);
}

/* ---- the test as the client relay ------------------------------------------------------------- */

struct link_client {
        int fd;
        uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];
};

static struct link_client client_link(void) {
        struct link_client l = { .fd = client_tcp() };
        uint8_t hello[SF_HS_HELLO_LEN];
        recv_n(l.fd, hello, sizeof hello);
        cr_assert_eq(sf_hs_hello_parse(hello, l.snonce, NULL), 0);
        sf_hs_nonce_new(l.cnonce);
        return l;
}

static void client_frame(struct link_client *l, const struct sf_hs_key *k, uint8_t flags) {
        uint8_t frame[SF_HS_CLIENT_LEN];
        sf_hs_client_build(frame, k, l->snonce, l->cnonce, flags);
        send_all(l->fd, frame, sizeof frame);
}

/* Reads the status frame the relay answers with; its reason into reason. */
static enum sf_hs_status client_status(struct link_client *l, char reason[SF_HS_REASON_MAX + 1]) {
        uint8_t buf[SF_HS_STATUS_MAX];
        recv_n(l->fd, buf, 2);
        size_t n = sf_hs_status_frame_len(buf, 2);
        recv_n(l->fd, buf + 2, n - 2);
        enum sf_hs_status st;
        cr_assert_eq(sf_hs_status_parse(buf, n, &key, l->snonce, l->cnonce, &st, reason), 0);
        return st;
}

/* ---- the table ---------------------------------------------------------------------------- */

Test(conn, table_rows_and_nothing_else) {
        bool row[ST_COUNT][EV_COUNT] = { 0 };
#define CHECK_ROW(from, ev, to)                                                                   \
        cr_assert_eq(sf_conn_next_state(from, ev), to, "%s -%s->", sf_conn_state_name(from),     \
                     sf_conn_event_name(ev));                                                      \
        row[from][ev] = true;
        SF_CONN_TRANSITIONS(CHECK_ROW)
#undef CHECK_ROW
        for (int s = 0; s < ST_COUNT; s++) {
                for (int e = 0; e < EV_COUNT; e++)
                        if (!row[s][e])
                                cr_assert_eq(sf_conn_next_state(s, e), ST_COUNT, "%s -%s-> has no row",
                                             sf_conn_state_name(s), sf_conn_event_name(e));
                /* every state but the last one can close, and the last one leads nowhere */
                cr_assert_eq(row[s][EV_CLOSE], s != ST_CLOSED, "%s", sf_conn_state_name(s));
        }
        cr_assert_eq(sf_conn_next_state(ST_COUNT, EV_CLOSE), ST_COUNT);
        cr_assert_str_eq(sf_conn_state_name(ST_AWAIT_STATUS), "await-status");
        cr_assert_str_eq(sf_conn_event_name(EV_CAND_FAILED), "candidate-failed");
}

Test(conn, table_an_event_without_a_row_closes) {
        struct relayed r = relayed_unix("");
        sf_conn_event(conn(), EV_HELLO);
        cr_assert_null(conn());
        assert_log("internal error: event hello in state relaying: closing");
        finish(3, r.cfd, r.sfd, r.lfd);
}

/* ---- dialing, and relaying without a link ------------------------------------------------------ */

Test(conn, plain_relay_both_ways) {
        struct relayed r = relayed_unix("");
        int cfd = r.cfd, sfd = r.sfd, lfd = r.lfd;
        cr_assert_eq(fwd.last_good, 0);
        cr_assert_eq(fwd.stats->candidate, 0);
        send_all(cfd, "request", 7);
        char buf[16];
        recv_n(sfd, buf, 7);
        cr_assert_eq(memcmp(buf, "request", 7), 0);
        shutdown(cfd, SHUT_WR);
        cr_assert(run_until(at_eof(sfd)), "the client's EOF was not passed on");
        send_all(sfd, "reply", 5);
        recv_n(cfd, buf, 5);
        cr_assert_eq(memcmp(buf, "reply", 5), 0);
        shutdown(sfd, SHUT_WR);
        cr_assert(run_until(conn() == NULL), "both directions done, the connection stayed");
        assert_log("closed: both directions done");
        cr_assert_eq(fwd.stats->bytes_up, 7);
        cr_assert_eq(fwd.stats->bytes_down, 5);
        finish(3, cfd, sfd, lfd);
}

Test(conn, plain_failover) {
        char path[128];
        int lfd = unix_listener("svc.sock", 4, path, sizeof path);
        forward(AF_UNIX, false, "t:unix:%s/l.sock=unix:%s/none.sock|unix:%s", tmp, tmp, path);
        int cfd = client_unix();
        int sfd = accept_one(lfd);
        cr_assert_eq(state(), ST_RELAYING);
        cr_assert_eq(fwd.last_good, 1);
        cr_assert(fwd.cand_failing[0]);
        assert_log("connect unix:");
        /* the good one is tried first from then on */
        int cfd2 = client_unix();
        int sfd2 = accept_one(lfd);
        cr_assert_eq(newest()->tries, 0);
        cr_assert_eq(newest()->cand, 1);
        finish(5, cfd, sfd, cfd2, sfd2, lfd);
}

Test(conn, plain_every_candidate_fails) {
        forward(AF_UNIX, false, "t:unix:%s/l.sock=unix:%s/a.sock|unix:%s/b.sock", tmp, tmp, tmp);
        int cfd = client_unix();
        cr_assert_null(conn(), "the client was not closed at once");
        cr_assert(run_until(at_eof(cfd)));
        cr_assert_eq(fwd.stats->err_refused, 1);
        char want[512];
        snprintf(want, sizeof want,
                 "upstream unavailable: every candidate failed: connect unix:%s/a.sock: "
                 "No such file or directory",
                 tmp);
        assert_log(want);
        snprintf(want, sizeof want, "; connect unix:%s/b.sock: No such file or directory", tmp);
        assert_log(want);
        cr_assert(strstr(fwd.stats->last_error, "every candidate failed"), "%s", fwd.stats->last_error);
        cr_assert_eq(fwd.last_good, -1);
        finish(1, cfd);
}

Test(conn, dial_unix_backlog_retry) {
        /* A unix listener that accepts nothing and whose backlog is full: the connect says
         * EAGAIN, retried every 10 ms until connect-timeout, then the next candidate. */
        char full[128], path[128];
        int ffd = unix_listener("full.sock", 0, full, sizeof full);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(a.sun_path, sizeof a.sun_path, "%s", full);
        int fillers[8], n_fill = 0;
        for (; n_fill < 8; n_fill++) {
                fillers[n_fill] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (connect(fillers[n_fill], (struct sockaddr *)&a, sizeof a) < 0) {
                        cr_assert_eq(errno, EAGAIN);
                        close(fillers[n_fill]);
                        break;
                }
        }
        int lfd = unix_listener("svc.sock", 4, path, sizeof path);
        forward(AF_UNIX, false, "t:unix:%s/l.sock=unix:%s|unix:%s,connect-timeout=100ms", tmp, full, path);
        int cfd = client_unix();
        cr_assert_eq(state(), ST_DIALING);
        cr_assert(conn()->dial_retry);
        cr_assert_eq(conn()->cand, 0);
        int sfd = accept_one(lfd);
        cr_assert_eq(state(), ST_RELAYING);
        cr_assert_eq(conn()->cand, 1);
        assert_log("timed out after 100ms");
        for (int i = 0; i < n_fill; i++)
                close(fillers[i]);
        finish(4, cfd, sfd, ffd, lfd);
}

/* A TCP listener whose accept queue is full: a connect to it stays in progress. */
static int full_tcp_listener(unsigned *port, int fillers[4]) {
        int lfd = tcp_listener(port, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(*port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        for (int i = 0; i < 4; i++) {
                fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                connect(fillers[i], (struct sockaddr *)&a, sizeof a);
        }
        return lfd;
}

Test(conn, dial_tcp_timeout) {
        unsigned port;
        int fillers[4];
        int lfd = full_tcp_listener(&port, fillers);
        forward(AF_UNIX, false, "t:unix:%s/l.sock=tcp:127.0.0.1:%u,connect-timeout=100ms", tmp, port);
        int cfd = client_unix();
        cr_assert_eq(state(), ST_DIALING);
        cr_assert_not(conn()->dial_retry);
        cr_assert(run_until(conn() == NULL));
        cr_assert_eq(fwd.stats->err_timeout, 1);
        assert_log("upstream unavailable: connect tcp:127.0.0.1:");
        assert_log("timed out after 100ms");
        cr_assert(at_eof(cfd));
        for (int i = 0; i < 4; i++)
                close(fillers[i]);
        finish(2, cfd, lfd);
}

Test(conn, client_hangup_drops_the_dial) {
        unsigned port;
        int fillers[4];
        int lfd = full_tcp_listener(&port, fillers);
        forward(AF_UNIX, false, "t:unix:%s/l.sock=tcp:127.0.0.1:%u,connect-timeout=60s", tmp, port);
        /* A half-close keeps the dial: the client may wait for the reply. */
        int half = client_unix();
        send_all(half, "x", 1);
        shutdown(half, SHUT_WR);
        for (int i = 0; i < 10; i++)
                step();
        cr_assert_eq(state(), ST_DIALING);
        sf_conn_close(conn(), "test");
        close(half);
        /* A full hang-up drops it, whatever the client sent (finding k). */
        int cfd = client_unix();
        send_all(cfd, "x", 1);
        close(cfd);
#ifdef SF_PORTABLE
        /* libuv reports the EOF alone, as for a half-close: the dial stays until it connects
         * or connect-timeout. */
        for (int i = 0; i < 10; i++)
                step();
        cr_assert_eq(state(), ST_DIALING);
        sf_conn_close(conn(), "test");
#else
        cr_assert(run_until(conn() == NULL), "the dial stayed after the client hung up");
        assert_log("the client hung up while its upstream was being dialed");
#endif
        for (int i = 0; i < 4; i++)
                close(fillers[i]);
        finish(1, lfd);
}

Test(conn, new_greeting_not_sent) {
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s/svc.sock", tmp);
        int fd, rfd = tcp_pair(&fd);
        /* The client resets before it is greeted. */
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
        struct pollfd p = { .fd = rfd, .events = POLLIN };
        poll(&p, 1, 1000);
        struct sf_incoming in = { .fd = rfd };
        cr_assert_eq(sf_conn_new(&fwd, &in), 0);
#ifdef SF_PORTABLE
        /* libuv's stream may take the reset only in its read: the greeting's write fails, or the
         * read that follows ends the handshake. */
        cr_assert(run_until(conn() == NULL));
#else
        cr_assert_null(conn());
        assert_log("closed: greeting not sent");
#endif
        check_freed();
}

#ifndef SF_PORTABLE
Test(conn, new_adopt_fails) {
        forward(AF_UNIX, false, "t:unix:%s/l.sock=unix:%s/svc.sock", tmp, tmp);
        char path[128];
        snprintf(path, sizeof path, "%s/file", tmp);
        /* A regular file: the epoll set refuses it. */
        struct sf_incoming in = { .fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600) };
        cr_assert(sf_conn_new(&fwd, &in) < 0);
        cr_assert_null(conn());
        assert_log("watching the accepted socket");
        check_freed();
}
#endif

/* ---- the connecting side of a link ---------------------------------------------------------- */

Test(conn, link_happy_path) {
        struct linked lk = linked_unix("");
        int lfd = lk.lfd, cfd = lk.cfd;
        send_all(cfd, "early", 5);
        struct peer p = { .fd = accept_one(lfd) };
        cr_assert(run_until(state() == ST_AWAIT_HELLO));
        /* Nothing of the client's goes before the hello. */
        for (int i = 0; i < 5; i++)
                step();
        cr_assert_not(readable(p.fd));
        cr_assert_eq(fwd.last_good, -1, "the candidate is good before its handshake");
        uint8_t hello[SF_HS_HELLO_LEN];
        sf_hs_nonce_new(p.snonce);
        sf_hs_hello_build(hello, p.snonce);
        send_all(p.fd, hello, sizeof hello);
        peer_frame(&p);
        char buf[16];
        recv_n(p.fd, buf, 5);
        cr_assert_eq(memcmp(buf, "early", 5), 0);
        cr_assert_eq(state(), ST_AWAIT_STATUS);
        cr_assert_eq(fwd.last_good, -1, "the candidate is good before its status");
        cr_assert_eq(fwd.stats->candidate, -1);
        /* The status and the service's first bytes in one segment. */
        uint8_t st[SF_HS_STATUS_MAX + 5];
        size_t n = sf_hs_status_build(st, &key, p.snonce, p.cnonce, SF_HS_OK, "");
        memcpy(st + n, "hello", 5);
        send_all(p.fd, st, n + 5);
        recv_n(cfd, buf, 5);
        cr_assert_eq(memcmp(buf, "hello", 5), 0);
        cr_assert_eq(state(), ST_RELAYING);
        cr_assert_eq(fwd.last_good, 0);
        cr_assert_eq(fwd.stats->candidate, 0);
        cr_assert_eq(fwd.stats->bytes_down, 5, "the status frame counted as data");
        send_all(cfd, "more", 4);
        recv_n(p.fd, buf, 4);
        cr_assert_eq(memcmp(buf, "more", 4), 0);
        finish(3, cfd, p.fd, lfd);
}

Test(conn, link_early_bytes_bound) {
        struct linked lk = linked_unix("");
        int lfd = lk.lfd, cfd = lk.cfd;
        static char big[100000];
        memset(big, 'b', sizeof big);
        size_t sent = 0;
        ssize_t w;
        while (sent < sizeof big && (w = send(cfd, big + sent, sizeof big - sent, MSG_DONTWAIT)) > 0)
                sent += (size_t)w;
        struct peer p = peer_accept(lfd);
        peer_frame(&p);
        static char got[200000];
        size_t have = 0;
        /* Whatever the client has sent, the peer gets the bound and no more before its status. */
        run_until(({
                ssize_t r = recv(p.fd, got + have, sizeof got - have, MSG_DONTWAIT);
                if (r > 0)
                        have += (size_t)r;
                have >= SF_EARLY_MAX;
        }));
        for (int i = 0; i < 20; i++) {
                step();
                ssize_t r = recv(p.fd, got + have, sizeof got - have, MSG_DONTWAIT);
                if (r > 0)
                        have += (size_t)r;
        }
        cr_assert_eq(have, SF_EARLY_MAX, "%zu bytes before the status", have);
        cr_assert_eq(state(), ST_AWAIT_STATUS);
        peer_status(&p, &key, SF_HS_OK, "");
        /* The rest follows once the status verified. */
        while (sent < sizeof big) {
                step();
                if ((w = send(cfd, big + sent, sizeof big - sent, MSG_DONTWAIT)) > 0)
                        sent += (size_t)w;
                ssize_t r = recv(p.fd, got + have, sizeof got - have, MSG_DONTWAIT);
                if (r > 0)
                        have += (size_t)r;
        }
        recv_n(p.fd, got + have, sizeof big - have);
        finish(3, cfd, p.fd, lfd);
}

Test(conn, link_auth_rejected_resends_early_bytes) {
        unsigned pa, pb;
        int la = tcp_listener(&pa, 4), lb = tcp_listener(&pb, 4);
        forward(AF_UNIX, true, "t:unix:%s/l.sock=tcp:127.0.0.1:%u|tcp:127.0.0.1:%u", tmp, pa, pb);
        int cfd = client_unix();
        send_all(cfd, "secret", 6);
        struct peer a = peer_accept(la);
        peer_frame(&a);
        char buf[16];
        recv_n(a.fd, buf, 6);
        /* A answers with another key: auth rejected, and the same client goes on to B. */
        struct sf_hs_key other = { .len = 32 };
        memset(other.bytes, 0x17, other.len);
        peer_status(&a, &other, SF_HS_AUTH_REJECTED, "");
        struct peer b = peer_accept(lb);
        peer_frame(&b);
        recv_n(b.fd, buf, 6);
        cr_assert_eq(memcmp(buf, "secret", 6), 0);
        cr_assert(run_until(at_eof(a.fd)), "the refused candidate's link stayed open");
        peer_status(&b, &key, SF_HS_OK, "");
        send_all(b.fd, "answer", 6);
        recv_n(cfd, buf, 6);
        cr_assert_eq(memcmp(buf, "answer", 6), 0);
        cr_assert_eq(fwd.last_good, 1);
        cr_assert(fwd.cand_failing[0]);
        cr_assert_eq(fwd.stats->err_auth, 0, "a candidate that failed over counted as a failed connection");
        cr_assert_eq(fwd.stats->bytes_up, 6, "the early bytes counted twice");
        assert_log("auth rejected: tcp:127.0.0.1:");
        finish(5, cfd, a.fd, b.fd, la, lb);
}

Test(conn, link_to_plain_candidate) {
        /* A candidate with a handshake fails after it got the early bytes; the next one has no
         * handshake (a unix socket): it gets the early bytes without the frame, and the EOF. */
        unsigned pa;
        char path[128];
        int la = tcp_listener(&pa, 4), lb = unix_listener("svc.sock", 4, path, sizeof path);
        forward(AF_UNIX, true, "t:unix:%s/l.sock=tcp:127.0.0.1:%u|unix:%s", tmp, pa, path);
        int cfd = client_unix();
        send_all(cfd, "request", 7);
        shutdown(cfd, SHUT_WR);
        struct peer a = peer_accept(la);
        peer_frame(&a);
        char buf[64];
        recv_n(a.fd, buf, 7);
        cr_assert(run_until(at_eof(a.fd)), "the client's EOF did not reach the first candidate");
        close(a.fd); /* closes without a status */
        int sfd = accept_one(lb);
        size_t n = recv_to_eof(sfd, buf, sizeof buf);
        cr_assert_eq(n, 7);
        cr_assert_eq(memcmp(buf, "request", 7), 0);
        cr_assert_eq(state(), ST_RELAYING);
        assert_log("not confirmed: the relay at tcp:127.0.0.1:");
        send_all(sfd, "ok", 2);
        close(sfd);
        n = recv_to_eof(cfd, buf, sizeof buf);
        cr_assert_eq(n, 2);
        finish(3, cfd, la, lb);
}

/* Candidates that fail in the hello, one way each: a banner, another version, a close without
 * a word, a reset, silence. */
static int bad_hello_peers(int lfds[5], unsigned ports[5]) {
        for (int i = 0; i < 5; i++)
                lfds[i] = tcp_listener(&ports[i], 4);
        return 5;
}

static void serve_bad_hellos(int lfds[5]) {
        int fd = accept_one(lfds[0]);
        send_all(fd, "SSH-2.0-OpenSSH_9.2p1\r\n", 23);
        cr_assert(run_until(at_eof(fd)));
        close(fd);
        fd = accept_one(lfds[1]);
        uint8_t v2[SF_HS_HELLO_LEN] = "SFRY\x02";
        send_all(fd, v2, sizeof v2);
        cr_assert(run_until(at_eof(fd)));
        close(fd);
        fd = accept_one(lfds[2]);
        close(fd);
        fd = accept_one(lfds[3]);
        /* Reset once the link is up: an error while the hello is awaited. */
        cr_assert(run_until(state() == ST_AWAIT_HELLO && conn()->cand == 3));
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
        fd = accept_one(lfds[4]);
        cr_assert(run_until(at_eof(fd)), "the silent candidate was not given up");
        close(fd);
}

Test(conn, link_hello_failures_all_fail) {
        int lfds[5];
        unsigned p[5];
        bad_hello_peers(lfds, p);
        forward(AF_UNIX, true,
                "t:unix:%s/l.sock=tcp:127.0.0.1:%u|tcp:127.0.0.1:%u|tcp:127.0.0.1:%u|tcp:127.0.0.1:%u|"
                "tcp:127.0.0.1:%u,handshake-timeout=" HS_MUST_BEAT,
                tmp, p[0], p[1], p[2], p[3], p[4]);
        int cfd = client_unix();
        serve_bad_hellos(lfds);
        cr_assert(run_until(conn() == NULL));
        cr_assert(at_eof(cfd));
        char want[300];
        snprintf(want, sizeof want,
                 "upstream unavailable: every candidate failed: wrong peer: tcp:127.0.0.1:%u is not a sockferry "
                 "relay: it sent \"SSH-2.0-OpenSSH_9.2p1\"; version mismatch: tcp:127.0.0.1:%u speaks sockferry/2",
                 p[0], p[1]);
        assert_log(want);
        snprintf(want, sizeof want, "; no greeting: tcp:127.0.0.1:%u closed the connection without a word", p[2]);
        assert_log(want);
        snprintf(want, sizeof want, "; no greeting: tcp:127.0.0.1:%u closed the connection without a word", p[3]);
        assert_log(want);
        snprintf(want, sizeof want, "; wrong peer: tcp:127.0.0.1:%u sent nothing within " HS_MUST_BEAT, p[4]);
        assert_log(want);
        /* counted once, in the class of the last cause */
        cr_assert_eq(fwd.stats->err_wrong_peer, 1);
        cr_assert_eq(fwd.stats->err_other, 0);
        cr_assert_eq(fwd.last_good, -1);
        for (int i = 0; i < 5; i++)
                close(lfds[i]);
        finish(1, cfd);
}

Test(conn, link_hello_failures_fall_through) {
        unsigned pa, pb;
        int la = tcp_listener(&pa, 4), lb = tcp_listener(&pb, 4);
        forward(AF_UNIX, true,
                "t:unix:%s/l.sock=tcp:127.0.0.1:%u|tcp:127.0.0.1:%u,handshake-timeout=" HS_MUST_BEAT, tmp, pa, pb);
        int cfd = client_unix();
        int afd = accept_one(la); /* says nothing */
        struct peer b = peer_accept(lb);
        peer_frame(&b);
        peer_status(&b, &key, SF_HS_OK, "");
        cr_assert(run_until(state() == ST_RELAYING));
        cr_assert_eq(fwd.last_good, 1);
        assert_log("sent nothing within " HS_MUST_BEAT);
        cr_assert_eq(fwd.stats->err_wrong_peer, 0);
        finish(5, cfd, afd, b.fd, la, lb);
}

Test(conn, link_hello_reset) {
        /* An error event on the link while the hello is awaited: the candidate failed. */
        struct linked lk = linked_unix("");
        int la = lk.lfd, cfd = lk.cfd;
        int afd = accept_one(la);
        cr_assert(run_until(state() == ST_AWAIT_HELLO));
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        setsockopt(afd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(afd);
        cr_assert(run_until(conn() == NULL));
        assert_log("no greeting: tcp:127.0.0.1:");
        cr_assert_eq(fwd.stats->err_wrong_peer, 1);
        finish(2, cfd, la);
}

Test(conn, link_status_timeout) {
        struct linked lk = linked_unix(",handshake-timeout=" HS_MUST_BEAT ",connect-timeout=" HS_MUST_BEAT);
        int la = lk.lfd, cfd = lk.cfd;
        struct peer a = peer_accept(la);
        peer_frame(&a);
        cr_assert_eq(state(), ST_AWAIT_STATUS);
        cr_assert(run_until(conn() == NULL));
        assert_log("no greeting: tcp:127.0.0.1:");
        assert_log("did not confirm the link in time");
        cr_assert_eq(fwd.stats->err_timeout, 1);
        finish(3, cfd, a.fd, la);
}

Test(conn, link_status_timeout_saturates) {
        /* handshake-timeout + connect-timeout past 2^64 ms: the status wait is "forever", not a
         * wrapped sum that expires at once. */
        unsigned pa;
        int la = tcp_listener(&pa, 4);
        forward(AF_UNIX, true, "t:unix:%s/l.sock=tcp:127.0.0.1:%u", tmp, pa);
        conf.forwards[0].handshake_timeout_ms = UINT64_MAX / 2 + 1;
        conf.forwards[0].connect_timeout_ms = UINT64_MAX / 2 + 1;
        int cfd = client_unix();
        struct peer a = peer_accept(la);
        peer_frame(&a);
        cr_assert_eq(state(), ST_AWAIT_STATUS);
        cr_assert_gt(uv_timer_get_due_in(&conn()->timer), (uint64_t)1 << 62);
        finish(3, cfd, a.fd, la);
}

Test(conn, link_status_eof) {
        struct linked lk = linked_unix("");
        int la = lk.lfd, cfd = lk.cfd;
        struct peer a = peer_accept(la);
        peer_frame(&a);
        send_all(a.fd, "\x00", 1); /* half a status, then gone */
        close(a.fd);
        cr_assert(run_until(conn() == NULL));
        assert_log("not confirmed: the relay at tcp:127.0.0.1:");
        cr_assert_eq(fwd.stats->err_other, 1);
        finish(2, cfd, la);
}

/* ---- the listening side of a link ------------------------------------------------------------ */

Test(conn, greeted_client_frame_ok) {
        char path[128];
        int lfd = unix_listener("svc.sock", 4, path, sizeof path);
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s", path);
        struct link_client l = client_link();
        cr_assert_eq(state(), ST_GREETED);
        cr_assert_eq(fwd.preauth.all.n, 1);
        client_frame(&l, &key, 0);
        send_all(l.fd, "after the frame", 15);
        int sfd = accept_one(lfd);
        char reason[SF_HS_REASON_MAX + 1], buf[32];
        cr_assert_eq(client_status(&l, reason), SF_HS_OK);
        cr_assert_eq(fwd.preauth.all.n, 0);
        cr_assert_eq(state(), ST_RELAYING);
        recv_n(sfd, buf, 15);
        cr_assert_eq(memcmp(buf, "after the frame", 15), 0);
        send_all(sfd, "back", 4);
        recv_n(l.fd, buf, 4);
        cr_assert_eq(memcmp(buf, "back", 4), 0);
        finish(3, l.fd, sfd, lfd);
}

Test(conn, greeted_probe) {
        char path[128];
        int lfd = unix_listener("svc.sock", 4, path, sizeof path);
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s", path);
        struct link_client l = client_link();
        client_frame(&l, &key, SF_HS_FLAG_PROBE);
        char reason[SF_HS_REASON_MAX + 1];
        cr_assert_eq(client_status(&l, reason), SF_HS_OK);
        cr_assert(run_until(conn() == NULL));
        assert_log("closed: probe answered");
        cr_assert_eq(fwd.last_good, 0);
        finish(2, l.fd, lfd);
}

/* A client with another token: AUTH_REJECTED, then the linger drain. */
static struct link_client refused_client(void) {
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s/svc.sock", tmp);
        struct link_client l = client_link();
        struct sf_hs_key other = { .len = 32 };
        memset(other.bytes, 0x17, other.len);
        client_frame(&l, &other, 0);
        uint8_t st[SF_HS_STATUS_MIN];
        recv_n(l.fd, st, sizeof st);
        cr_assert_eq(st[0], SF_HS_AUTH_REJECTED);
        cr_assert_eq(state(), ST_LINGER);
        cr_assert_eq(fwd.stats->err_auth, 1);
        assert_log("auth rejected: 127.0.0.1:");
        return l;
}

Test(conn, greeted_bad_mac_lingers_until_the_client_closes) {
        struct link_client l = refused_client();
        send_all(l.fd, "ignored", 7);
        for (int i = 0; i < 5; i++)
                step();
        cr_assert_eq(state(), ST_LINGER);
        cr_assert(at_eof(l.fd), "the refused client's read side stays open");
        close(l.fd);
        cr_assert(run_until(conn() == NULL));
        assert_log("closed: failure status delivered");
        check_freed();
}

Test(conn, greeted_bad_mac_lingers_until_its_timeout) {
        struct link_client l = refused_client();
        cr_assert(run_until(conn() == NULL));
        assert_log("closed: linger over");
        finish(1, l.fd);
}

#ifndef SF_PORTABLE
/* Bytes received on fd and not read yet. */
static size_t unread(int fd) {
        int n = 0;
        return ioctl(fd, FIONREAD, &n) == 0 && n > 0 ? (size_t)n : 0;
}

Test(conn, greeted_linger_drain_is_bounded_per_turn) {
        /* Finding a: a refused peer that keeps pushing gets a bounded share of each turn; the
         * rest waits for a deferred call, after the other connections' events. */
        struct link_client l = refused_client();
        struct sf_conn *c = conn();
        /* Room on both ends for more than one turn's bound. */
        int big = 4 << 20;
        if (setsockopt(c->sock[CLIENT].fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
                setsockopt(c->sock[CLIENT].fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        if (setsockopt(l.fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) < 0)
                setsockopt(l.fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
        /* More than a turn's bound, all of it in the relay's receive queue before the turn. */
        static char junk[3 * PUMP_ROUNDS * 8192];
        size_t sent = 0;
        ssize_t w;
        while (sent < sizeof junk && (w = send(l.fd, junk + sent, sizeof junk - sent, MSG_DONTWAIT)) > 0)
                sent += (size_t)w;
        size_t before = 0;
        for (int i = 0; i < 1000 && before < sizeof junk; i++) {
                usleep(1000);
                before = unread(c->sock[CLIENT].fd);
        }
        if (before < sizeof junk)
                cr_skip_test("a socket's receive queue holds only %zu bytes here (net.core.rmem_max)", before);
        sf_conn_on_ready(c, CLIENT, SF_EV_IN);
        size_t after = unread(c->sock[CLIENT].fd);
        cr_assert_gt(after, 0, "one turn drained all of %zu bytes", before);
        cr_assert_leq(before - after, (size_t)PUMP_ROUNDS * 16384, "%zu bytes before, %zu after", before, after);
        cr_assert(sf_deferq_pending(&eng.ev.q), "the drain did not go on in a deferred call");
        cr_assert_eq(state(), ST_LINGER);
        finish(1, l.fd);
}
#endif

Test(conn, greeted_version_and_flags) {
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s/svc.sock", tmp);
        struct link_client l = client_link();
        uint8_t frame[SF_HS_CLIENT_LEN];
        sf_hs_client_build(frame, &key, l.snonce, l.cnonce, 0);
        frame[4] = 9;
        send_all(l.fd, frame, sizeof frame);
        uint8_t st[SF_HS_STATUS_MAX];
        recv_n(l.fd, st, SF_HS_STATUS_MIN);
        cr_assert_eq(st[0], SF_HS_VERSION_MISMATCH);
        cr_assert_eq(state(), ST_LINGER);
        close(l.fd);
        cr_assert(run_until(conn() == NULL));
        l = client_link();
        client_frame(&l, &key, 0x80);
        recv_n(l.fd, st, 2);
        cr_assert_eq(st[0], SF_HS_BAD_FRAME);
        cr_assert_eq(state(), ST_LINGER);
        close(l.fd);
        cr_assert(run_until(conn() == NULL));
        assert_log("version mismatch: 127.0.0.1:");
        cr_assert(strstr(fwd.stats->last_error, "set flags this relay does not know (0x80)"), "%s",
                  fwd.stats->last_error);
        cr_assert_eq(fwd.stats->err_other, 2);
        check_freed();
}

Test(conn, greeted_wrong_magic) {
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s/svc.sock", tmp);
        struct link_client l = client_link();
        static const char get[SF_HS_CLIENT_LEN] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        send_all(l.fd, get, sizeof get);
        cr_assert(run_until(conn() == NULL));
        char buf[8];
        cr_assert_eq(recv_to_eof(l.fd, buf, sizeof buf), 0, "a stray client got a status frame");
        assert_log("wrong peer: 127.0.0.1:");
        cr_assert_eq(fwd.stats->err_wrong_peer, 1);
        finish(1, l.fd);
}

Test(conn, greeted_eof) {
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s/svc.sock", tmp);
        struct link_client l = client_link();
        send_all(l.fd, "SFRY", 4);
        close(l.fd);
        cr_assert(run_until(conn() == NULL));
        assert_log("no greeting: 127.0.0.1:");
        check_freed();
}

Test(conn, greeted_timeout) {
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s/svc.sock,handshake-timeout=50ms", tmp);
        struct link_client l = client_link();
        cr_assert(run_until(conn() == NULL));
        assert_log("sent no handshake within 50ms");
        cr_assert_eq(fwd.stats->err_timeout, 1);
        finish(1, l.fd);
}

Test(conn, greeted_eviction) {
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s/svc.sock,preauth-max=4", tmp);
        int fds[5];
        for (int i = 0; i < 5; i++)
                fds[i] = client_link().fd;
        /* one per source at most: each new one evicts the one before it */
        cr_assert_eq(fwd.preauth.all.n, 1);
        cr_assert_eq(fwd.stats->err_preauth, 4);
        for (int i = 0; i < 4; i++)
                cr_assert(run_until(at_eof(fds[i])), "connection %d was not evicted", i);
        for (int i = 0; i < 5; i++)
                close(fds[i]);
        finish(0);
}

/* ---- a relay between two links ---------------------------------------------------------------- */

/* Our client is a relay: it gets UPSTREAM_UNAVAILABLE with every candidate's cause. */
static void expect_unavailable(struct link_client *l, const char *want) {
        char reason[SF_HS_REASON_MAX + 1];
        cr_assert_eq(client_status(l, reason), SF_HS_UPSTREAM_UNAVAILABLE);
        cr_assert(strstr(reason, want), "reason: %s", reason);
        cr_assert(run_until(state() == ST_LINGER || conn() == NULL));
        close(l->fd);
        cr_assert(run_until(conn() == NULL));
}

Test(conn, chained_every_dial_fails) {
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=unix:%s/a.sock|unix:%s/b.sock", tmp, tmp);
        struct link_client l = client_link();
        client_frame(&l, &key, 0);
        expect_unavailable(&l, "every candidate failed: connect unix:");
        cr_assert_eq(fwd.stats->err_refused, 1);
        check_freed();
}

Test(conn, chained_hello_timeout) {
        unsigned pa;
        int la = tcp_listener(&pa, 4);
        forward(AF_INET, true,
                "t:tcp:127.0.0.1:1=tcp:127.0.0.1:%u,connect-auth=token,handshake-timeout=" HS_MUST_BEAT, pa);
        struct link_client l = client_link();
        client_frame(&l, &key, 0);
        int afd = accept_one(la);
        expect_unavailable(&l, "sent nothing within " HS_MUST_BEAT);
        finish(2, afd, la);
}

Test(conn, chained_upstream_unavailable) {
        unsigned pa;
        int la = tcp_listener(&pa, 4);
        forward(AF_INET, true, "t:tcp:127.0.0.1:1=tcp:127.0.0.1:%u,connect-auth=token", pa);
        struct link_client l = client_link();
        client_frame(&l, &key, 0);
        struct peer a = peer_accept(la);
        peer_frame(&a);
        peer_status(&a, &key, SF_HS_UPSTREAM_UNAVAILABLE, "connect unix:/far: No such file or directory");
        expect_unavailable(&l, "could not reach its upstream: connect unix:/far");
        cr_assert_eq(fwd.stats->err_upstream, 1);
        finish(2, a.fd, la);
}

/* ---- relaying ---------------------------------------------------------------------------- */

Test(conn, relaying_idle_timeout) {
        struct relayed r = relayed_unix(",idle-timeout=60ms");
        cr_assert(run_until(conn() == NULL));
        assert_log("closed: idle timeout");
        finish(3, r.cfd, r.sfd, r.lfd);
}

Test(conn, relaying_reset) {
        unsigned port;
        int lfd = tcp_listener(&port, 4);
        forward(AF_UNIX, false, "t:unix:%s/l.sock=tcp:127.0.0.1:%u", tmp, port);
        int cfd = client_unix();
        int sfd = accept_one(lfd);
        cr_assert(run_until(state() == ST_RELAYING));
        send_all(cfd, "x", 1);
        char b;
        recv_n(sfd, &b, 1);
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        setsockopt(sfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(sfd);
        cr_assert(run_until(conn() == NULL));
        assert_log("closed: connection error: Connection reset by peer");
        finish(2, cfd, lfd);
}

Test(conn, greeting_check_refuses_a_relay_with_auth_token) {
        unsigned port;
        int lfd = tcp_listener(&port, 4);
        forward(AF_UNIX, false, "t:unix:%s/l.sock=tcp:127.0.0.1:%u", tmp, port);
        int cfd = client_unix();
        struct peer a = peer_accept(lfd); /* greets as a relay with auth = token would */
        cr_assert(run_until(conn() == NULL));
        char buf[64];
        cr_assert_eq(recv_to_eof(cfd, buf, sizeof buf), 0, "the greeting reached the client as data");
        assert_log("is a sockferry relay with auth = token");
        cr_assert_eq(fwd.stats->err_wrong_peer, 1);
        /* the candidate connected: for auth = none that makes it good */
        cr_assert_eq(fwd.last_good, 0);
        finish(3, cfd, a.fd, lfd);
}

Test(conn, greeting_check_passes_a_service) {
        unsigned port;
        int lfd = tcp_listener(&port, 4);
        forward(AF_UNIX, false, "t:unix:%s/l.sock=tcp:127.0.0.1:%u", tmp, port);
        int cfd = client_unix();
        int sfd = accept_one(lfd);
        send_all(sfd, "220 smtp\r\n", 10);
        char buf[16];
        recv_n(cfd, buf, 10);
        cr_assert_eq(memcmp(buf, "220 smtp\r\n", 10), 0);
        cr_assert_not(conn()->greeting_check);
        finish(3, cfd, sfd, lfd);
}

Test(conn, close_all_and_twice) {
        struct relayed r = relayed_unix("");
        int cfds[3] = { r.cfd }, sfds[3] = { r.sfd };
        for (int i = 1; i < 3; i++) {
                cfds[i] = client_unix();
                sfds[i] = accept_one(r.lfd);
        }
        struct sf_conn *c = conn();
        sf_conn_close_all(&fwd, "stopping");
        sf_conn_close(c, "again");
        sf_conn_close(NULL, "nothing");
        cr_assert_null(conn());
        for (int i = 0; i < 3; i++) {
                cr_assert(run_until(at_eof(cfds[i])));
                close(cfds[i]);
                close(sfds[i]);
        }
        finish(1, r.lfd);
}
