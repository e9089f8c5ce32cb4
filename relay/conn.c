#include "relay/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "conf/log.h"
#include "relay/bufpool.h"
#include "relay/evset.h"
#include "relay/linkmsg.h"
#include "relay/pipepool.h"

/* Side 0 is the accepted client, side 1 the upstream. dir[i] carries bytes read from side i
 * that still have to be written to side 1-i. */
enum { CLIENT = 0, UPSTREAM = 1 };

enum conn_state {
        ST_AWAIT_CLIENT_FRAME, /* listening side of an authenticated link: hello sent */
        ST_DIALING,
        ST_AWAIT_HELLO,        /* connecting side: waiting for the peer relay's greeting */
        ST_RELAYING,
        ST_LINGER,             /* failure status sent: drain the peer's bytes so it reads it */
};

#define DIAL_RETRY_MS 10
#define LINGER_MS 2000
#define PUMP_ROUNDS 8

/* A direction moves its bytes through a pooled buffer (recv/send), or through a pooled pipe
 * with splice(2) once a read has filled the whole buffer: bulk data then stays in the kernel,
 * while small messages keep the path with the fewest system calls. Either holds bytes only
 * while the other side has not taken them. A direction that reads a unix socket always copies:
 * splicing out of one measured slower and costlier than a copy (bench/RESULTS.md: unix to TCP
 * about 1 600 against 2 500 MiB/s, 0.58 against 0.38 relay CPU s per GiB). */
struct dir {
        char *buf;
        uint32_t off, len;
        struct sf_pipe pipe;
        size_t pipe_len;
        bool bulk;      /* a read filled the buffer: splice from now on */
        bool no_splice; /* the source is a unix socket, or splice was refused: copy */
        bool eof;       /* read side returned EOF */
        bool shut;      /* the EOF was passed on with shutdown(SHUT_WR) */
};

struct gai_req {
        uv_getaddrinfo_t req;
        struct sf_conn *conn; /* NULL once the connection is gone: the request frees itself */
};

struct sf_conn {
        struct sf_conn *next, *prev;
        struct sf_fwd *fwd;
        uint64_t id;
        enum conn_state state;
        bool closing;

        int fd[2];
        /* Edge-triggered readiness: set by an event, cleared only when a call says EAGAIN
         * (or a read comes back short, which on a stream socket means it is empty). rdhup
         * keeps a read going to the EOF that arrived with the last edge. */
        struct sf_ev ev[2];
        bool rd[2], wr[2], rdhup[2];
        uv_timer_t timer;
        uint64_t last_activity;
        struct dir dir[2];

        /* dialing */
        unsigned tries;     /* candidates tried so far for this connection */
        int cand;           /* index into conf->connect */
        int upstream_family;
        struct gai_req *gai;
        struct addrinfo *ai_list, *ai_next;
        uint64_t dial_deadline;
        char dial_error[200];
        int dial_errno;

        /* link handshake */
        bool hs_server;       /* we greeted the client: it gets a status frame */
        bool hs_await_status; /* we sent our frame upstream: its status comes first */
        bool greeting_check;  /* auth = none over a network: the upstream's first read is looked at */
        uint8_t hs_flags;
        uint16_t hs_len;
        /* The nonces of the handshake with our client (we are its server) and of the one with
         * our upstream (we are its client): a relay chained between two links runs both. */
        uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];
        uint8_t up_snonce[SF_HS_NONCE_LEN], up_cnonce[SF_HS_NONCE_LEN];
        uint8_t hs[SF_HS_STATUS_MAX];
};

static void dial_next(struct sf_conn *c);
static void progress(struct sf_conn *c);
static ssize_t read_some(struct sf_conn *c, int from);
static int read_step(struct sf_conn *c, int from);
static void count_bytes(struct sf_conn *c, int from, size_t n);
static void relay_error(struct sf_conn *c, int e);

static const char *fname(const struct sf_conn *c) {
        return c->fwd->conf->name;
}

static const struct sf_endpoint *cand_ep(const struct sf_conn *c) {
        return &c->fwd->conf->connect[c->cand];
}

struct sf_conn *sf_conn_next(struct sf_conn *c) {
        return c->next;
}

static void note_error(struct sf_conn *c, uint64_t *counter, const char *msg) {
        sf_fwd_note_error(c->fwd, counter, msg);
}

static uint64_t *link_counter(struct sf_conn *c, enum sf_link_err kind) {
        struct sf_relay_stats *st = &c->fwd->stats;
        switch (kind) {
        case SF_LINK_WRONG_PEER: return &st->err_wrong_peer;
        case SF_LINK_AUTH: return &st->err_auth;
        case SF_LINK_UPSTREAM: return &st->err_upstream;
        case SF_LINK_TIMEOUT: return &st->err_timeout;
        case SF_LINK_OK:
        case SF_LINK_OTHER: break;
        }
        return &st->err_other;
}

static void on_timer_closed(uv_handle_t *h) {
        struct sf_conn *c = h->data;
        struct sf_fwd *fwd = c->fwd;
        free(c);
        sf_fwd_conn_gone(fwd);
}

static void release_buf(struct sf_conn *c, int i) {
        struct dir *d = &c->dir[i];
        sf_bufpool_put(c->fwd->pool, d->buf);
        d->buf = NULL;
        d->off = d->len = 0;
        sf_pipepool_put(c->fwd->pipes, &d->pipe, d->pipe_len);
        d->pipe_len = 0;
}

void sf_conn_close(struct sf_conn *c, const char *reason) {
        if (!c || c->closing)
                return;
        c->closing = true;
        if (reason)
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "closed: %s", reason);

        struct sf_fwd *fwd = c->fwd;
        if (c->prev)
                c->prev->next = c->next;
        else
                fwd->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        fwd->stats.active--;

        /* close() drops a socket from the epoll set; the memory waits for the timer's close
         * callback, after any event of the current batch that still names it. */
        sf_evset_cancel(c->fwd->ev, &c->ev[CLIENT]);
        for (int i = 0; i < 2; i++) {
                if (c->fd[i] >= 0) {
                        close(c->fd[i]);
                        c->fd[i] = -1;
                }
                release_buf(c, i);
        }
        if (c->gai) {
                c->gai->conn = NULL;
                c->gai = NULL;
        }
        if (c->ai_list) {
                freeaddrinfo(c->ai_list);
                c->ai_list = c->ai_next = NULL;
        }
        uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

/* ---- timers ---------------------------------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static void timer_arm(struct sf_conn *c, uint64_t ms) {
        uv_timer_start(&c->timer, on_timer, ms, 0);
}

static void idle_arm(struct sf_conn *c) {
        uint64_t idle = c->fwd->conf->idle_timeout_ms;
        if (idle)
                uv_timer_start(&c->timer, on_timer, idle, 0);
        else
                uv_timer_stop(&c->timer);
}

/* ---- failure reporting ------------------------------------------------------------------ */

static void cand_log_failure(struct sf_conn *c, const char *cause) {
        struct sf_fwd *fwd = c->fwd;
        if (!fwd->cand_failing[c->cand]) {
                fwd->cand_failing[c->cand] = true;
                sf_log(SF_LOG_WARN, fname(c), c->id, "connect %s: %s", cand_ep(c)->text, cause);
        } else {
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "connect %s: %s", cand_ep(c)->text, cause);
        }
}

/* Drops the upstream socket of a failed attempt (close() takes it out of the epoll set). */
static void drop_upstream(struct sf_conn *c) {
        if (c->fd[UPSTREAM] >= 0) {
                close(c->fd[UPSTREAM]);
                c->fd[UPSTREAM] = -1;
        }
        c->rd[UPSTREAM] = c->wr[UPSTREAM] = c->rdhup[UPSTREAM] = false;
}

/* A candidate failed: remember why, log on state change only, try the next one. */
static void cand_failed(struct sf_conn *c, int e, const char *detail) {
        const struct sf_endpoint *ep = cand_ep(c);
        char cause[220];

        uv_timer_stop(&c->timer);

        if (detail)
                snprintf(cause, sizeof cause, "%s", detail);
        else
                sf_link_connect_cause(ep, e, cause, sizeof cause);
        snprintf(c->dial_error, sizeof c->dial_error, "connect %s: %s", ep->text, cause);
        c->dial_errno = e;
        cand_log_failure(c, cause);

        if (c->ai_list) {
                freeaddrinfo(c->ai_list);
                c->ai_list = c->ai_next = NULL;
        }
        drop_upstream(c);
        c->cand = (c->cand + 1) % (int)c->fwd->conf->n_connect;
        c->tries++;
        dial_next(c);
}

static void send_status_and_linger(struct sf_conn *c, enum sf_hs_status st, const char *reason) {
        size_t n = sf_hs_status_build(c->hs, &c->fwd->key, c->snonce, c->cnonce, st, reason);
        /* A fresh socket's send buffer is empty, so the frame goes out whole or not at all. */
        if (send(c->fd[CLIENT], c->hs, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n) {
                sf_conn_close(c, "status frame not sent");
                return;
        }
        /* Close only after the peer has read the status: closing with its bytes unread
         * would send a reset that can overtake the status frame. */
        shutdown(c->fd[CLIENT], SHUT_WR);
        c->state = ST_LINGER;
        drop_upstream(c);
        timer_arm(c, LINGER_MS);
        progress(c);
}

static void all_candidates_failed(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        struct sf_relay_stats *st = &fwd->stats;
        uint64_t *counter = c->dial_errno == ETIMEDOUT ? &st->err_timeout
                            : c->dial_errno == ECONNREFUSED || c->dial_errno == ENOENT ? &st->err_refused
                                                                                        : &st->err_other;
        char msg[256];
        if (fwd->conf->n_connect > 1)
                snprintf(msg, sizeof msg, "upstream unavailable: no candidate answered; last: %s", c->dial_error);
        else
                snprintf(msg, sizeof msg, "upstream unavailable: %s", c->dial_error);
        note_error(c, counter, msg);
        if (sf_fwd_ratelimit(fwd))
                sf_log(SF_LOG_ERROR, fname(c), c->id, "%s; closing the client connection", msg);
        if (c->hs_server)
                send_status_and_linger(c, SF_HS_UPSTREAM_UNAVAILABLE, c->dial_error);
        else
                sf_conn_close(c, msg);
}

/* ---- dialing ---------------------------------------------------------------------------- */

static bool is_net_family(int family) {
        return family == AF_INET || family == AF_INET6 || family == AF_VSOCK;
}

static void start_relaying(struct sf_conn *c);

/* Listening side of an authenticated link: the upstream answers, tell the client. The status
 * frame is queued ahead of the upstream's bytes. Returns false when the connection is gone. */
static bool server_confirm(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        size_t n = sf_hs_status_build(c->hs, &fwd->key, c->snonce, c->cnonce, SF_HS_OK, "");
        if (c->hs_flags & SF_HS_FLAG_PROBE) {
                if (send(c->fd[CLIENT], c->hs, n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n)
                        sf_log(SF_LOG_DEBUG, fname(c), c->id, "probe: upstream %s answers", cand_ep(c)->text);
                sf_conn_close(c, "probe answered");
                return false;
        }
        struct dir *d = &c->dir[UPSTREAM];
        if (!d->buf && !(d->buf = sf_bufpool_get(fwd->pool))) {
                sf_conn_close(c, "out of memory");
                return false;
        }
        /* Bytes of the far end read along with its status frame go after ours; they fit where
         * that frame was, which was no shorter than this one. */
        uint32_t rest = d->len - d->off;
        memmove(d->buf + n, d->buf + d->off, rest);
        memcpy(d->buf, c->hs, n);
        d->off = 0;
        d->len = (uint32_t)n + rest;
        c->hs_server = false;
        return true;
}

static void upstream_connected(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        if (fwd->cand_failing[c->cand]) {
                fwd->cand_failing[c->cand] = false;
                sf_log(SF_LOG_INFO, fname(c), c->id, "connect %s: reachable again", cand_ep(c)->text);
        }
        if (fwd->last_good != c->cand)
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "using %s", cand_ep(c)->text);
        fwd->last_good = c->cand;
        fwd->stats.candidate = c->cand;
        if (c->upstream_family == AF_INET || c->upstream_family == AF_INET6) {
                int one = 1;
                setsockopt(c->fd[UPSTREAM], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        /* A socket that just connected has an empty send buffer. */
        c->wr[UPSTREAM] = true;
        uv_timer_stop(&c->timer);

        if (fwd->has_key && is_net_family(c->upstream_family)) {
                c->state = ST_AWAIT_HELLO;
                c->hs_len = 0;
                timer_arm(c, fwd->conf->handshake_timeout_ms);
                progress(c);
                return;
        }
        if (c->hs_server && !server_confirm(c))
                return;
        c->greeting_check = is_net_family(c->upstream_family);
        start_relaying(c);
}

static int sockaddr_for(const struct sf_endpoint *ep, struct sockaddr_storage *ss, socklen_t *len) {
        memset(ss, 0, sizeof *ss);
        if (ep->kind == SF_EP_UNIX || ep->kind == SF_EP_ABSTRACT) {
                struct sockaddr_un *sa = (struct sockaddr_un *)ss;
                size_t n = strlen(ep->path);
                sa->sun_family = AF_UNIX;
                if (ep->kind == SF_EP_ABSTRACT) {
                        memcpy(sa->sun_path + 1, ep->path, n);
                        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
                } else {
                        memcpy(sa->sun_path, ep->path, n);
                        *len = sizeof *sa;
                }
                return AF_UNIX;
        }
        if (ep->kind == SF_EP_VSOCK) {
                struct sockaddr_vm *sa = (struct sockaddr_vm *)ss;
                sa->svm_family = AF_VSOCK;
                sa->svm_cid = ep->cid;
                sa->svm_port = ep->port;
                *len = sizeof *sa;
                return AF_VSOCK;
        }
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET, ep->host, &s4->sin_addr) == 1) {
                s4->sin_family = AF_INET;
                s4->sin_port = htons((uint16_t)ep->port);
                *len = sizeof *s4;
                return AF_INET;
        }
        if (inet_pton(AF_INET6, ep->host, &s6->sin6_addr) == 1) {
                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons((uint16_t)ep->port);
                *len = sizeof *s6;
                return AF_INET6;
        }
        return -1; /* a name: resolve first */
}

/* Starts a non-blocking connect to addr. Returns 0 when connected or in progress (an event
 * says when it is done), -errno on failure. */
static int connect_addr(struct sf_conn *c, const struct sockaddr *addr, socklen_t len, bool *in_progress) {
        *in_progress = false;
        int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        c->upstream_family = addr->sa_family;
        c->dir[UPSTREAM].no_splice = addr->sa_family == AF_UNIX;
        int e = connect(fd, addr, len) < 0 ? errno : 0;
        if (e == EINPROGRESS) {
                *in_progress = true;
                e = 0;
        }
        /* Added after connect(): a socket not connected yet reports EPOLLHUP, and the ADD
         * itself reports a connection that completed in between. */
        if (e == 0) {
                int r = sf_evset_add(c->fwd->ev, fd, &c->ev[UPSTREAM]);
                if (r < 0) {
                        e = -r;
                        *in_progress = false;
                }
        }
        if (e) {
                close(fd);
                return -e;
        }
        c->fd[UPSTREAM] = fd;
        return 0;
}

static uint64_t remaining_ms(struct sf_conn *c) {
        uint64_t now = uv_now(c->fwd->loop);
        return c->dial_deadline > now ? c->dial_deadline - now : 1;
}

static void try_next_addr(struct sf_conn *c) {
        int last = EHOSTUNREACH;
        while (c->ai_next) {
                struct addrinfo *ai = c->ai_next;
                c->ai_next = ai->ai_next;
                bool in_progress;
                int r = connect_addr(c, ai->ai_addr, ai->ai_addrlen, &in_progress);
                if (r == 0) {
                        if (in_progress) {
                                timer_arm(c, remaining_ms(c));
                        } else {
                                upstream_connected(c);
                        }
                        return;
                }
                last = -r;
        }
        cand_failed(c, last, NULL);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
        struct gai_req *g = (struct gai_req *)req;
        struct sf_conn *c = g->conn;
        free(g);
        if (!c) {
                uv_freeaddrinfo(res);
                return;
        }
        c->gai = NULL;
        if (status < 0) {
                char cause[200];
                sf_link_resolve_cause(cand_ep(c), uv_strerror(status), cause, sizeof cause);
                uv_freeaddrinfo(res);
                uv_timer_stop(&c->timer);
                cand_failed(c, EHOSTUNREACH, cause);
                return;
        }
        c->ai_list = c->ai_next = res;
        try_next_addr(c);
}

static void dial_candidate(struct sf_conn *c) {
        const struct sf_endpoint *ep = cand_ep(c);
        struct sockaddr_storage ss;
        socklen_t len;
        int family = sockaddr_for(ep, &ss, &len);

        if (family < 0) {
                struct gai_req *g = calloc(1, sizeof *g);
                char port[16];
                struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG };
                if (!g) {
                        cand_failed(c, ENOMEM, NULL);
                        return;
                }
                g->conn = c;
                snprintf(port, sizeof port, "%u", ep->port);
                int r = uv_getaddrinfo(c->fwd->loop, &g->req, on_resolved, ep->host, port, &hints);
                if (r < 0) {
                        free(g);
                        cand_failed(c, -r, NULL);
                        return;
                }
                c->gai = g;
                timer_arm(c, remaining_ms(c));
                return;
        }
        bool in_progress;
        int r = connect_addr(c, (struct sockaddr *)&ss, len, &in_progress);
        bool retry = r == -EAGAIN && family == AF_UNIX;
        if (r == -EMFILE || r == -ENFILE) {
                /* The accept took the last descriptor: stop accepting more, and let this
                 * client wait for one as it would in the backlog. */
                char what[300];
                snprintf(what, sizeof what, "connect %s", ep->text);
                sf_fwd_pause_out_of_fds(c->fwd, what, -r);
                retry = true;
        }
        if (retry) {
                /* Also a unix listener with a full backlog: the kernel does not queue us, so
                 * retry shortly until connect-timeout rather than failing a burst of clients. */
                if (uv_now(c->fwd->loop) + DIAL_RETRY_MS < c->dial_deadline) {
                        timer_arm(c, DIAL_RETRY_MS);
                        return;
                }
                if (r == -EAGAIN)
                        r = -ETIMEDOUT;
        }
        if (r < 0) {
                cand_failed(c, -r, NULL);
                return;
        }
        if (in_progress) {
                timer_arm(c, remaining_ms(c));
        } else {
                upstream_connected(c);
        }
}

static void dial_next(struct sf_conn *c) {
        if (c->closing)
                return;
        if (c->tries >= c->fwd->conf->n_connect) {
                all_candidates_failed(c);
                return;
        }
        c->dial_deadline = uv_now(c->fwd->loop) + c->fwd->conf->connect_timeout_ms;
        dial_candidate(c);
}

static void dial_start(struct sf_conn *c) {
        c->state = ST_DIALING;
        c->tries = 0;
        c->cand = c->fwd->last_good >= 0 ? c->fwd->last_good : 0;
        dial_next(c);
}

/* ---- the link handshake ----------------------------------------------------------------- */

static void handshake_failed(struct sf_conn *c, enum sf_link_err kind, const char *msg) {
        note_error(c, link_counter(c, kind), msg);
        if (sf_fwd_ratelimit(c->fwd))
                sf_log(SF_LOG_ERROR, fname(c), c->id, "%s", msg);
        /* Chained between two links: our client is a relay waiting for our status. */
        if (c->hs_server)
                send_status_and_linger(c, SF_HS_UPSTREAM_UNAVAILABLE, msg);
        else
                sf_conn_close(c, msg);
}

/* Listening side: a client failed the handshake; counted, and logged as a warning since it
 * is the peer's problem, not ours. */
static void client_refused(struct sf_conn *c, uint64_t *counter, const char *msg) {
        note_error(c, counter, msg);
        if (sf_fwd_ratelimit(c->fwd))
                sf_log(SF_LOG_WARN, fname(c), c->id, "%s", msg);
}

static void wrong_peer(struct sf_conn *c) {
        char msg[300];
        /* Quote a little more than a greeting's length when the peer already sent it: a
         * banner such as SSH's is recognisable by its first 40 bytes. */
        if (c->hs_len < 40) {
                ssize_t n = recv(c->fd[UPSTREAM], c->hs + c->hs_len, 40 - c->hs_len, MSG_DONTWAIT);
                if (n > 0)
                        c->hs_len += (uint16_t)n;
        }
        handshake_failed(c, sf_link_wrong_peer(c->hs, c->hs_len, cand_ep(c)->text, msg, sizeof msg), msg);
}

/* Reads up to want-hs_len bytes of a handshake frame. 1: complete, 0: more to come,
 * -1: connection closed (c->hs_len says how much arrived), -2: error (errno). */
static int hs_read(struct sf_conn *c, int side, size_t want) {
        while (c->hs_len < want) {
                ssize_t n = recv(c->fd[side], c->hs + c->hs_len, want - c->hs_len, 0);
                if (n > 0) {
                        c->hs_len += (uint16_t)n;
                        continue;
                }
                if (n == 0)
                        return -1;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -2;
                c->rd[side] = false;
                return 0;
        }
        return 1;
}

static void peer_name(struct sf_conn *c, char *out, size_t cap) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        char host[INET6_ADDRSTRLEN] = "?";
        if (getpeername(c->fd[CLIENT], (struct sockaddr *)&ss, &len) < 0) {
                snprintf(out, cap, "an unknown peer");
                return;
        }
        if (ss.ss_family == AF_INET) {
                struct sockaddr_in *s = (struct sockaddr_in *)&ss;
                inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
                snprintf(out, cap, "%s:%u", host, ntohs(s->sin_port));
        } else if (ss.ss_family == AF_INET6) {
                struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
                inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
                snprintf(out, cap, "[%s]:%u", host, ntohs(s->sin6_port));
        } else if (ss.ss_family == AF_VSOCK) {
                struct sockaddr_vm *s = (struct sockaddr_vm *)&ss;
                snprintf(out, cap, "vsock CID %u port %u", s->svm_cid, s->svm_port);
        } else {
                snprintf(out, cap, "a local peer");
        }
}

/* Listening side: the client frame arrived (or not). */
static void on_client_frame(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        int r = hs_read(c, CLIENT, SF_HS_CLIENT_LEN);
        if (r == 0)
                return;
        uint8_t version = 0;
        int v = r > 0 ? sf_hs_client_verify(c->hs, &fwd->key, c->snonce, c->cnonce, &c->hs_flags, &version) : 0;
        if (r > 0 && v == 0) {
                uv_timer_stop(&c->timer);
                dial_start(c);
                return;
        }
        /* Only a refusal names the peer: getpeername is not for every connection. */
        char peer[96], msg[256];
        peer_name(c, peer, sizeof peer);
        if (r < 0) {
                snprintf(msg, sizeof msg, "no greeting: %s closed the link during the handshake", peer);
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "%s", msg);
                sf_conn_close(c, msg);
                return;
        }
        /* The magic is checked before anything else so a stray client is named as such. */
        r = v;
        if (r == -EPROTO) {
                snprintf(msg, sizeof msg, "wrong peer: %s is not a sockferry relay (it did not answer our greeting)",
                         peer);
                client_refused(c, &fwd->stats.err_wrong_peer, msg);
                sf_conn_close(c, msg);
                return;
        }
        if (r == -EPROTONOSUPPORT) {
                snprintf(msg, sizeof msg, "version mismatch: %s speaks sockferry/%u, we speak sockferry/%u", peer,
                         version, SF_HS_VERSION);
                client_refused(c, &fwd->stats.err_other, msg);
                send_status_and_linger(c, SF_HS_VERSION_MISMATCH, "");
                return;
        }
        if (r == -EACCES) {
                snprintf(msg, sizeof msg, "auth rejected: %s does not hold our token (%s)", peer,
                         fwd->token_file ? fwd->token_file : "token-file");
                client_refused(c, &fwd->stats.err_auth, msg);
                send_status_and_linger(c, SF_HS_AUTH_REJECTED, "");
                return;
        }
        /* -EBADMSG: the MAC holds, the flags are not ours. */
        snprintf(msg, sizeof msg, "bad frame: %s set flags this relay does not know (0x%02x)", peer, c->hs_flags);
        note_error(c, &fwd->stats.err_other, msg);
        send_status_and_linger(c, SF_HS_BAD_FRAME, "unknown flags");
}

/* Connecting side: the peer relay's greeting. */
static void on_hello(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        int r = hs_read(c, UPSTREAM, SF_HS_HELLO_LEN);
        size_t cmp = c->hs_len < 4 ? c->hs_len : 4;
        if (memcmp(c->hs, SF_HS_MAGIC, cmp) != 0) {
                wrong_peer(c);
                return;
        }
        if (r == 0)
                return;
        if (r < 0) {
                char msg[300];
                handshake_failed(c, sf_link_hello_eof(c->hs_len, cand_ep(c)->text, msg, sizeof msg), msg);
                return;
        }
        uint8_t version = 0;
        r = sf_hs_hello_parse(c->hs, c->up_snonce, &version);
        if (r == -EPROTONOSUPPORT) {
                char msg[300];
                handshake_failed(c, sf_link_version_mismatch(version, cand_ep(c)->text, msg, sizeof msg), msg);
                return;
        }
        if (r < 0) {
                wrong_peer(c);
                return;
        }
        sf_hs_nonce_new(c->up_cnonce);
        struct dir *d = &c->dir[CLIENT];
        d->buf = sf_bufpool_get(fwd->pool);
        if (!d->buf) {
                sf_conn_close(c, "out of memory");
                return;
        }
        /* The frame is queued ahead of the client's bytes: they may follow at once, no round trip. */
        sf_hs_client_build((uint8_t *)d->buf, &fwd->key, c->up_snonce, c->up_cnonce, 0);
        d->off = 0;
        d->len = SF_HS_CLIENT_LEN;
        /* Whatever the client sent already goes out in the frame's segment: the host relay
         * wakes once for both. */
        if (c->rd[CLIENT] && (r = read_step(c, CLIENT)) < 0) {
                relay_error(c, -r);
                return;
        }
        c->hs_await_status = true;
        c->hs_len = 0;
        /* The host relay dials its upstream before it answers. */
        timer_arm(c, fwd->conf->handshake_timeout_ms + fwd->conf->connect_timeout_ms);
        start_relaying(c);
}

/* Connecting side, first read after our client frame: the status frame and usually the
 * upstream's first bytes arrive together, so they are read in one call into the direction's
 * buffer; the frame is taken from its front and the rest waits there for the client. 1: read
 * (the frame may still be incomplete), 0: nothing yet, -1: closed or failed. */
static int status_read_first(struct sf_conn *c) {
        struct dir *d = &c->dir[UPSTREAM];
        /* Nothing came from the upstream before its status: the read lands at the buffer's
         * start, through recv (a first read is never bulk). */
        ssize_t n;
        do
                n = read_some(c, UPSTREAM);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN) {
                c->rd[UPSTREAM] = false;
                return 0;
        }
        if (n <= 0)
                return -1;
        size_t take = (size_t)n;
        size_t need = sf_hs_status_frame_len((const uint8_t *)d->buf, (size_t)n);
        if (need && need < take)
                take = need;
        memcpy(c->hs, d->buf, take);
        c->hs_len = (uint16_t)take;
        d->off = (uint32_t)take;
        count_bytes(c, UPSTREAM, (size_t)n - take);
        return 1;
}

/* Connecting side: the status frame that follows our client frame. */
static void on_status(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        int r = 1;
        if (c->hs_len == 0)
                r = status_read_first(c);
        if (r == 1 && c->hs_len < 2)
                r = hs_read(c, UPSTREAM, 2);
        if (r == 1)
                r = hs_read(c, UPSTREAM, sf_hs_status_frame_len(c->hs, c->hs_len));
        if (r == 0)
                return;
        char msg[400];
        if (r < 0) {
                handshake_failed(c, sf_link_status_eof(cand_ep(c)->text, msg, sizeof msg), msg);
                return;
        }
        enum sf_hs_status st;
        char reason[SF_HS_REASON_MAX + 1];
        r = sf_hs_status_parse(c->hs, c->hs_len, &fwd->key, c->up_snonce, c->up_cnonce, &st, reason);
        enum sf_link_err kind = sf_link_status_explain(r, st, reason, cand_ep(c)->text, fwd->token_file, msg, sizeof msg);
        if (kind != SF_LINK_OK) {
                handshake_failed(c, kind, msg);
                return;
        }
        c->hs_await_status = false;
        /* A relay chained behind another: confirm to our client only now that the far end did. */
        if (c->hs_server && !server_confirm(c))
                return;
        idle_arm(c);
}

/* ---- relaying ----------------------------------------------------------------------------- */

static bool dir_pending(const struct dir *d) {
        return d->off < d->len || d->pipe_len > 0;
}

static void start_relaying(struct sf_conn *c) {
        c->state = ST_RELAYING;
        if (!c->hs_await_status)
                idle_arm(c);
        progress(c);
}

static void pass_eof(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        if (d->eof && !d->shut && !dir_pending(d)) {
                /* With the other direction done too the connection closes next, and close()
                 * says EOF by itself. */
                if (!c->dir[1 - from].shut)
                        shutdown(c->fd[1 - from], SHUT_WR);
                d->shut = true;
        }
}

/* Writes what is queued in dir[from] to the other side; once all of it is gone the buffer or
 * pipe goes back to its pool. 0 or -errno. */
static int flush(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        int to = 1 - from;
        while (dir_pending(d)) {
                ssize_t n;
                if (d->off < d->len)
                        n = send(c->fd[to], d->buf + d->off, d->len - d->off, MSG_NOSIGNAL | MSG_DONTWAIT);
                else
                        /* No MSG_NOSIGNAL here: the relay's process ignores SIGPIPE (relay.h). */
                        n = splice(d->pipe.rd, NULL, c->fd[to], NULL, d->pipe_len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
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
        release_buf(c, from);
        pass_eof(c, from);
        return 0;
}

static void count_bytes(struct sf_conn *c, int from, size_t n) {
        if (from == CLIENT)
                c->fwd->stats.bytes_up += n;
        else
                c->fwd->stats.bytes_down += n;
}

/* One read from side `from` into the direction's pipe (bulk, when no buffered bytes must go
 * first) or after what its buffer holds. n, 0 at EOF, or -1 with errno. */
static ssize_t read_some(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        if (d->off == d->len)
                d->off = d->len = 0;
        if (d->bulk && !d->len && !d->no_splice &&
            (d->pipe.rd >= 0 || sf_pipepool_get(c->fwd->pipes, &d->pipe) == 0)) {
                ssize_t n = splice(c->fd[from], NULL, d->pipe.wr, NULL, d->pipe.size, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n > 0)
                        d->pipe_len = (size_t)n;
                if (n >= 0 || errno != EINVAL)
                        return n;
                /* A socket family without splice support: copy from now on. */
                d->no_splice = true;
                sf_pipepool_put(c->fwd->pipes, &d->pipe, 0);
        }
        if (!d->buf && !(d->buf = sf_bufpool_get(c->fwd->pool))) {
                errno = ENOMEM;
                return -1;
        }
        size_t room = SF_BUF_SIZE - d->len;
        ssize_t n = recv(c->fd[from], d->buf + d->len, room, 0);
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

/* read_some and what follows it wherever it is called: bytes counted, the EOF noted,
 * readiness cleared on EAGAIN. 1 when bytes or the EOF came, 0 when nothing did, -errno. */
static int read_step(struct sf_conn *c, int from) {
        ssize_t n;
        do
                n = read_some(c, from);
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
                count_bytes(c, from, (size_t)n);
        return 1;
}

/* auth = none here: once, on the upstream's first read, a sockferry greeting there (a relay
 * with auth = token) closes the connection with the fix, instead of reaching the client as
 * data. True when it did. */
static bool greeting_refused(struct sf_conn *c) {
        const struct dir *d = &c->dir[UPSTREAM];
        char msg[600];
        c->greeting_check = false;
        if (!sf_link_greeting_unexpected((const uint8_t *)d->buf, d->len, cand_ep(c)->text, fname(c), msg, sizeof msg))
                return false;
        handshake_failed(c, SF_LINK_WRONG_PEER, msg);
        return true;
}

/* Moves bytes from side `from` to the other side while both are ready; what the other side
 * does not take stays queued and reading `from` waits until it drains (backpressure). After
 * PUMP_ROUNDS reads the connection yields to the others and continues in a deferred call.
 * 0 or -errno. */
static int pump(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        for (int round = 0; !d->eof && !dir_pending(d) && c->rd[from]; round++) {
                if (round == PUMP_ROUNDS) {
                        sf_evset_defer(c->fwd->ev, &c->ev[CLIENT]);
                        return 0;
                }
                int r = read_step(c, from);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (from == UPSTREAM && c->greeting_check && greeting_refused(c))
                        return 0;
                r = flush(c, from);
                if (r < 0)
                        return r;
        }
        if (!dir_pending(d))
                release_buf(c, from);
        return 0;
}

static void relay_error(struct sf_conn *c, int e) {
        char msg[200];
        snprintf(msg, sizeof msg, "connection error: %s", strerror(e));
        if (e != ECONNRESET && e != EPIPE)
                sf_log(SF_LOG_WARN, fname(c), c->id, "%s", msg);
        sf_conn_close(c, msg);
}

/* Both directions, as far as readiness allows. */
static void relay_step(struct sf_conn *c) {
        if (c->hs_await_status) {
                if (c->rd[UPSTREAM])
                        on_status(c);
                if (c->closing)
                        return;
        }
        for (int from = 0; from < 2; from++) {
                int r = 0;
                if (dir_pending(&c->dir[from]) && c->wr[1 - from])
                        r = flush(c, from);
                if (r == 0 && !(from == UPSTREAM && c->hs_await_status))
                        r = pump(c, from);
                if (r < 0) {
                        relay_error(c, -r);
                        return;
                }
        }
        if (c->dir[CLIENT].shut && c->dir[UPSTREAM].shut)
                sf_conn_close(c, "both directions done");
}

static void on_connect_ready(struct sf_conn *c, uint32_t events) {
        int err = 0;
        socklen_t len = sizeof err;
        /* A failed connect always reports EPOLLERR or EPOLLHUP: plain EPOLLOUT is success,
         * and spares a getsockopt per connection. */
        if (!(events & EPOLLOUT) || (events & (EPOLLERR | EPOLLHUP)))
                if (getsockopt(c->fd[UPSTREAM], SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                        err = errno;
        if (!err && !(events & EPOLLOUT))
                return; /* still connecting */
        if (err) {
                if (c->ai_next) {
                        /* The name has another address: try it. */
                        uv_timer_stop(&c->timer);
                        c->dial_errno = err;
                        drop_upstream(c);
                        try_next_addr(c);
                        return;
                }
                cand_failed(c, err, NULL);
                return;
        }
        uv_timer_stop(&c->timer);
        upstream_connected(c);
}

static void linger_drain(struct sf_conn *c) {
        char sink[4096];
        ssize_t n;
        while ((n = recv(c->fd[CLIENT], sink, sizeof sink, 0)) > 0)
                ;
        if (n == 0 || errno != EAGAIN)
                sf_conn_close(c, "failure status delivered");
        else
                c->rd[CLIENT] = false;
}

/* Runs the connection's state as far as the readiness flags let it. */
static void progress(struct sf_conn *c) {
        if (c->closing)
                return;
        switch (c->state) {
        case ST_DIALING:
                return; /* the upstream's events drive the dial */
        case ST_AWAIT_CLIENT_FRAME:
                if (c->rd[CLIENT])
                        on_client_frame(c);
                return;
        case ST_AWAIT_HELLO:
                if (c->rd[UPSTREAM])
                        on_hello(c);
                return;
        case ST_LINGER:
                if (c->rd[CLIENT])
                        linger_drain(c);
                return;
        case ST_RELAYING:
                relay_step(c);
                return;
        }
}

static void on_event(struct sf_conn *c, int side, uint32_t events) {
        if (c->closing)
                return;
        if (!events) {
                progress(c); /* a deferred call: a busy direction goes on */
                return;
        }
        c->last_activity = uv_now(c->fwd->loop);
        if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                c->rd[side] = true;
        if (events & (EPOLLRDHUP | EPOLLHUP))
                c->rdhup[side] = true;
        if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
                c->wr[side] = true;
        if (c->state == ST_DIALING && side == UPSTREAM) {
                /* The edge that says connected may say readable too: the flags keep it. */
                on_connect_ready(c, events);
                return;
        }
        if (events & EPOLLERR) {
                /* The socket's own error says what happened; reading it also clears it. */
                int err = 0;
                socklen_t len = sizeof err;
                if (getsockopt(c->fd[side], SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                        err = errno;
                if (err) {
                        relay_error(c, err);
                        return;
                }
        }
        progress(c);
}

static void on_client_ev(struct sf_ev *ev, uint32_t events) {
        on_event((struct sf_conn *)((char *)ev - offsetof(struct sf_conn, ev[CLIENT])), CLIENT, events);
}

static void on_upstream_ev(struct sf_ev *ev, uint32_t events) {
        on_event((struct sf_conn *)((char *)ev - offsetof(struct sf_conn, ev[UPSTREAM])), UPSTREAM, events);
}

static void on_timer(uv_timer_t *t) {
        struct sf_conn *c = t->data;
        if (c->closing)
                return;
        char msg[300];
        switch (c->state) {
        case ST_AWAIT_CLIENT_FRAME: {
                char peer[96];
                peer_name(c, peer, sizeof peer);
                snprintf(msg, sizeof msg, "no greeting: %s sent no handshake within %llums", peer,
                         (unsigned long long)c->fwd->conf->handshake_timeout_ms);
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "%s", msg);
                note_error(c, &c->fwd->stats.err_timeout, msg);
                sf_conn_close(c, msg);
                return;
        }
        case ST_DIALING:
                if (c->gai || c->fd[UPSTREAM] >= 0 ||
                    uv_now(c->fwd->loop) + DIAL_RETRY_MS >= c->dial_deadline) {
                        if (c->gai) {
                                c->gai->conn = NULL;
                                uv_cancel((uv_req_t *)&c->gai->req);
                                c->gai = NULL;
                        }
                        char cause[200];
                        sf_link_timeout_cause(cand_ep(c), c->fwd->conf->connect_timeout_ms, cause, sizeof cause);
                        cand_failed(c, ETIMEDOUT, cause);
                        return;
                }
                dial_candidate(c); /* unix backlog retry */
                return;
        case ST_AWAIT_HELLO:
                handshake_failed(c,
                                 sf_link_hello_timeout(c->fwd->conf->handshake_timeout_ms, cand_ep(c)->text, msg,
                                                       sizeof msg),
                                 msg);
                return;
        case ST_LINGER:
                sf_conn_close(c, "linger over");
                return;
        case ST_RELAYING:
                if (c->hs_await_status) {
                        handshake_failed(c, sf_link_status_timeout(cand_ep(c)->text, msg, sizeof msg), msg);
                        return;
                }
                uint64_t idle = c->fwd->conf->idle_timeout_ms, now = uv_now(c->fwd->loop);
                if (now - c->last_activity >= idle) {
                        sf_log(SF_LOG_DEBUG, fname(c), c->id, "idle for %llums: closing",
                               (unsigned long long)idle);
                        sf_conn_close(c, "idle timeout");
                        return;
                }
                uv_timer_start(&c->timer, on_timer, idle - (now - c->last_activity), 0);
                return;
        }
}

int sf_conn_new(struct sf_fwd *fwd, int fd) {
        struct sf_conn *c = calloc(1, sizeof *c);
        if (!c) {
                close(fd);
                return -ENOMEM;
        }
        c->fwd = fwd;
        c->id = ++fwd->next_conn_id;
        c->fd[CLIENT] = fd;
        c->fd[UPSTREAM] = -1;
        c->ev[CLIENT].cb = on_client_ev;
        c->ev[UPSTREAM].cb = on_upstream_ev;
        for (int i = 0; i < 2; i++)
                c->dir[i].pipe.rd = c->dir[i].pipe.wr = -1;
        c->dir[CLIENT].no_splice = fwd->listener.family == AF_UNIX;
        c->cand = 0;
        uv_timer_init(fwd->loop, &c->timer);
        c->timer.data = c;
        c->last_activity = uv_now(fwd->loop);

        c->next = fwd->conns;
        if (c->next)
                c->next->prev = c;
        fwd->conns = c;
        fwd->stats.active++;
        fwd->stats.total++;
        fwd->n_conns_allocated++;

        int r = sf_evset_add(fwd->ev, fd, &c->ev[CLIENT]);
        if (r < 0) {
                sf_log(SF_LOG_ERROR, fname(c), c->id, "watching the accepted socket: %s", strerror(-r));
                sf_conn_close(c, "epoll_ctl failed");
                return r;
        }
        if (fwd->listener.family == AF_INET || fwd->listener.family == AF_INET6) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        if (fwd->has_key && is_net_family(fwd->listener.family)) {
                uint8_t hello[SF_HS_HELLO_LEN];
                sf_hs_nonce_new(c->snonce);
                sf_hs_hello_build(hello, c->snonce);
                if (send(fd, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof hello) {
                        sf_conn_close(c, "greeting not sent");
                        return 0;
                }
                c->state = ST_AWAIT_CLIENT_FRAME;
                c->hs_server = true;
                timer_arm(c, fwd->conf->handshake_timeout_ms);
                return 0;
        }
        dial_start(c);
        return 0;
}
