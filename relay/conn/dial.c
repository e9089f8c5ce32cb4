#include "relay/conn/state.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>

#include "conf/log.h"
#include "relay/link/messages.h"

/* Dialing the upstream: the candidates in order from the last good one, each name resolved
 * and each of its addresses tried, a unix listener's full backlog retried, failures logged when
 * a candidate's state changes and kept for the line that ends a connection whose every
 * candidate failed. The hub (conn.c) arms connect-timeout per candidate; a candidate becomes
 * the good one only when the hub says it answered as the forward expects. */

static void try_next_addr(struct sf_conn *c);

void sf_conn_cand_note(struct sf_conn *c, uint64_t *counter, bool dial, const char *msg) {
        struct sf_fwd *fwd = c->fwd;
        if (!fwd->cand_failing[c->cand]) {
                fwd->cand_failing[c->cand] = true;
                sf_log(SF_LOG_WARN, fname(c), c->id, "%s", msg);
        } else {
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "%s", msg);
        }
        c->fail_counter = counter;
        c->fail_dial = dial;
        /* One failure is its own line; the causes of several are kept for the one line that
         * gives them all. Without the memory for it, the last cause stands for them. */
        if (fwd->conf->n_connect < 2)
                return;
        if (!c->fails && (c->fails = malloc(SF_FAILS_MAX)))
                c->fails[0] = '\0';
        if (!c->fails)
                return;
        size_t used = strlen(c->fails);
        if (used + 4 >= SF_FAILS_MAX)
                return;
        int n = snprintf(c->fails + used, SF_FAILS_MAX - used, "%s%s", used ? "; " : "", msg);
        if (n < 0 || used + (size_t)n >= SF_FAILS_MAX)
                memcpy(c->fails + SF_FAILS_MAX - 4, "...", 4);
}

bool sf_conn_cand_advance(struct sf_conn *c) {
        c->cand = (c->cand + 1) % (int)c->fwd->conf->n_connect;
        c->tries++;
        return c->tries < c->fwd->conf->n_connect;
}

const char *sf_conn_cand_summary(struct sf_conn *c, const char *last, char *out, size_t cap) {
        static const char prefix[] = "upstream unavailable: ";
        if (c->fails)
                snprintf(out, cap, "upstream unavailable: every candidate failed: %s", c->fails);
        else if (c->fwd->conf->n_connect > 1)
                snprintf(out, cap, "upstream unavailable: every candidate failed; the last: %s", last);
        else if (c->fail_dial)
                snprintf(out, cap, "upstream unavailable: %s", last);
        else
                /* A handshake failure says its own class (wrong peer, auth rejected, ...). */
                snprintf(out, cap, "%s", last);
        /* The reason of a status frame: the receiver says "upstream unavailable" itself. */
        return strncmp(out, prefix, sizeof prefix - 1) == 0 ? out + sizeof prefix - 1 : out;
}

void sf_conn_cand_good(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        if (fwd->cand_failing[c->cand]) {
                fwd->cand_failing[c->cand] = false;
                sf_log(SF_LOG_INFO, fname(c), c->id, "connect %s: reachable again", cand_ep(c)->text);
        }
        if (fwd->last_good != c->cand)
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "using %s", cand_ep(c)->text);
        fwd->last_good = c->cand;
        fwd->stats->candidate = c->cand;
        free(c->fails);
        c->fails = NULL;
}

/* A candidate failed to connect: why, in the relay's words, and its counter should it be the
 * last one. */
static void cand_failed(struct sf_conn *c, int e, const char *detail) {
        const struct sf_endpoint *ep = cand_ep(c);
        struct sf_relay_stats *st = c->fwd->stats;
        char cause[220], msg[300];
        if (detail)
                snprintf(cause, sizeof cause, "%s", detail);
        else
                sf_link_connect_cause(ep, e, cause, sizeof cause);
        snprintf(msg, sizeof msg, "connect %s: %s", ep->text, cause);
        uint64_t *counter = e == ETIMEDOUT                    ? &st->err_timeout
                            : e == ECONNREFUSED || e == ENOENT ? &st->err_refused
                                                               : &st->err_other;
        sf_conn_cand_failed(c, counter, true, msg);
}

static void upstream_connected(struct sf_conn *c) {
        if (c->upstream_family == AF_INET || c->upstream_family == AF_INET6)
                sf_side_nodelay(c, UPSTREAM);
        /* A socket that just connected has an empty send buffer. */
        c->wr[UPSTREAM] = true;
        if (c->fwd->connect_key && is_net_family(c->upstream_family)) {
                sf_conn_event(c, EV_CONNECTED_LINK);
                return;
        }
        c->greeting_check = is_net_family(c->upstream_family);
        sf_conn_event(c, EV_CONNECTED);
}

/* The connect goes on (resolving, in progress, or a retry shortly): the hub re-arms the timer. */
static void dial_wait(struct sf_conn *c, bool retry) {
        c->dial_retry = retry;
        sf_conn_event(c, EV_DIAL_WAIT);
}

static int sockaddr_for(const struct sf_endpoint *ep, struct sockaddr_storage *ss, socklen_t *len) {
        memset(ss, 0, sizeof *ss);
        if (ep->kind == SF_EP_NPIPE)
                return AF_UNIX; /* a local stream too; dialed by name */
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
                int r = sf_vsock_sockaddr(ep->cid, ep->port, ss, len);
                return r < 0 ? r : sf_af_vsock;
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
        c->upstream_family = addr->sa_family;
        c->dir[UPSTREAM].copy_only = addr->sa_family == AF_UNIX;
        return sf_sock_connect(c->fwd->eng, &c->sock[UPSTREAM], addr, len, in_progress);
}

static void try_next_addr(struct sf_conn *c) {
        int last = EHOSTUNREACH;
        while (c->ai_next) {
                struct addrinfo *ai = c->ai_next;
                c->ai_next = ai->ai_next;
                bool in_progress;
                int r = connect_addr(c, ai->ai_addr, ai->ai_addrlen, &in_progress);
                if (r == 0) {
                        if (in_progress)
                                dial_wait(c, false);
                        else
                                upstream_connected(c);
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
                cand_failed(c, EHOSTUNREACH, cause);
                return;
        }
        c->ai_list = c->ai_next = res;
        try_next_addr(c);
}

/* ---- a candidate reached through a shared link ------------------------------------------ */

static void link_wait_cancel(struct sf_conn *c) {
        if (c->link_wait) {
                sf_link_wait_cancel(c->link_wait, &c->waiter);
                c->link_wait = NULL;
        }
}

/* The link is down: the words of the design ("link to ENDPOINT down since TIME (cause)"). */
static void link_down_failed(struct sf_conn *c, struct sf_link *l) {
        struct sf_link_stats st;
        sf_link_stats_get(l, &st);
        char when[40] = "?", msg[400];
        struct tm tm;
        if (gmtime_r(&st.since, &tm))
                strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        /* A re-dial is CONNECTING too, but the link has been down since its first failure: only
         * a first attempt, which has no cause yet, is "not up". */
        if (st.state == SF_LINK_CONNECTING && !st.cause[0])
                snprintf(msg, sizeof msg, "link to %s not up within %llums (connecting since %s)",
                         cand_ep(c)->text, (unsigned long long)c->fwd->conf->connect_timeout_ms, when);
        else
                snprintf(msg, sizeof msg, "link to %s down since %s (%s)", cand_ep(c)->text, when,
                         st.cause[0] ? st.cause : "no cause known");
        /* Counted as the link's own failure: a client that found the link refused for a wrong
         * token is an auth failure, as it would have been over sockferry/1. */
        uint64_t *counter = st.refused                       ? sf_conn_link_counter(c, st.refused_kind)
                            : st.state == SF_LINK_CONNECTING ? &c->fwd->stats->err_timeout
                                                             : &c->fwd->stats->err_refused;
        sf_conn_cand_failed(c, counter, true, msg);
}

/* The link is up but took no new stream: the host relay is stopping (its GOAWAY came), or
 * there was no memory for one. Said as it is: the link is not down, and "down since" with no
 * cause sent people looking for a network fault. */
static void link_open_failed(struct sf_conn *c, int err) {
        char msg[300];
        if (err == -ENOMEM)
                snprintf(msg, sizeof msg, "link to %s: out of memory for a new stream", cand_ep(c)->text);
        else
                snprintf(msg, sizeof msg,
                         "link to %s: the host relay takes no new streams (it is stopping; new clients get "
                         "through once it runs again)",
                         cand_ep(c)->text);
        sf_conn_cand_failed(c, &c->fwd->stats->err_refused, true, msg);
}

/* The stream is the upstream: no TCP connect, no handshake, the client's bytes go at once.
 * Returns 0 or -errno (sf_mux_stream_open's). */
static int link_open(struct sf_conn *c, struct sf_link *l) {
        const struct sf_forward *f = c->fwd->conf;
        int err = 0;
        struct sf_mux_stream *s = sf_link_stream_open(l, f->service, !f->service_set, false, &err);
        if (!s)
                return err ? err : -EAGAIN;
        c->upstream_family = AF_UNSPEC;
        sf_side_attach_stream(c, UPSTREAM, s);
        c->fwd->stats->streams_opened++;
        if (!sf_mux_stream_sent(s))
                sf_log(SF_LOG_DEBUG, fname(c), c->id,
                       "link to %s: the host relay's stream limit is reached: this stream waits for a place",
                       cand_ep(c)->text);
        /* A client writes right after its connect, so its first bytes are usually in the socket
         * already when it is accepted; the edge saying so would come only on the next turn,
         * after the stream's HEADERS went out alone. Reading now puts those bytes in the same
         * write as the HEADERS: one segment across the VM's network stack instead of two, one
         * wake-up of the host relay instead of two. A client that waits for the server first
         * costs one read that finds nothing. */
        c->rd[CLIENT] = true;
        sf_conn_event(c, EV_STREAM_OPEN);
        return 0;
}

bool sf_conn_stream_answer(struct sf_conn *c) {
        struct sf_mux_stream *s = c->stream[UPSTREAM];
        if (!s)
                return true;
        int err = sf_mux_stream_error(s);
        if (!err) {
                /* Its status, or the upstream's bytes or end (a held answer comes with them). */
                if (sf_mux_stream_status(s) != 0 && !sf_mux_stream_unread(s) && !c->rdhup[UPSTREAM])
                        return true;
                c->up_unanswered = false;
                sf_dir_hold_drop(c);
                sf_conn_cand_good(c);
                return true;
        }
        /* Refused, or reset before any answer: while every byte the client sent is still here,
         * the next candidate gets them, as a refused handshake's would. */
        if (!c->dir[CLIENT].held)
                return true; /* the relay step reports it (sf_conn_io_error) */
        c->up_unanswered = false;
        char msg[600];
        const char *why = sf_mux_stream_reason(s);
        int st = sf_mux_stream_status(s);
        uint64_t *counter = &c->fwd->stats->err_upstream;
        if (st > 0 && st != SF_MUX_UPSTREAM_UNAVAILABLE) {
                snprintf(msg, sizeof msg, "upstream unavailable: the host relay at %s refused the stream: %s",
                         cand_ep(c)->text, why);
                counter = st == SF_MUX_BUSY ? &c->fwd->stats->err_upstream : &c->fwd->stats->err_wrong_peer;
        } else if (st > 0) {
                snprintf(msg, sizeof msg, "upstream unavailable: the host relay at %s could not reach its upstream: %s",
                         cand_ep(c)->text, why);
        } else {
                snprintf(msg, sizeof msg, "upstream unavailable: %s", why);
                counter = &c->fwd->stats->err_refused;
        }
        sf_conn_cand_failed(c, counter, false, msg);
        return false;
}

bool sf_conn_stream_unsent(struct sf_conn *c) {
        struct sf_mux_stream *s = c->stream[UPSTREAM];
        if (!c->up_unanswered || !s || sf_mux_stream_sent(s))
                return false;
        c->up_unanswered = false;
        char msg[400];
        snprintf(msg, sizeof msg,
                 "upstream unavailable: link to %s: no stream free within %llums (the host relay's stream limit is "
                 "reached: raise max-conns there)",
                 cand_ep(c)->text, (unsigned long long)c->fwd->conf->connect_timeout_ms);
        sf_conn_cand_failed(c, &c->fwd->stats->err_timeout, false, msg);
        return true;
}

/* The link's dial ended: a client waiting for it goes on at once, through the link that came
 * up, or to its next candidate (or its end) with the cause of a refused or unreachable host, as
 * a connection of its own would have. After a failure the next attempt may mend (a close before
 * the greeting: a host relay restarting) the last candidate waits for that attempt, within its
 * connect-timeout. */
static void on_link_state(struct sf_link_waiter *w, struct sf_link *l) {
        struct sf_conn *c = sf_list_entry(w, struct sf_conn, waiter);
        enum sf_link_state st = sf_link_state(l);
        if (st == SF_LINK_CONNECTING)
                return;
        if (st == SF_LINK_DOWN && c->tries + 1 >= c->fwd->conf->n_connect) {
                struct sf_link_stats ls;
                sf_link_stats_get(l, &ls);
                if (!ls.fail_now)
                        return;
        }
        link_wait_cancel(c);
        if (st == SF_LINK_DOWN) {
                link_down_failed(c, l);
                return;
        }
        sf_conn_dial(c);
}

/* true when the candidate is a shared link's and the dial went that way. */
static bool link_dial(struct sf_conn *c) {
        struct sf_link_entry *e = c->fwd->links[c->cand];
        if (!e)
                return false;
        struct sf_link *l = sf_link_entry_link(e);
        switch (sf_link_state(l)) {
        case SF_LINK_UP: {
                int err = link_open(c, l);
                if (err < 0)
                        link_open_failed(c, err);
                return true;
        }
        case SF_LINK_OLD_PEER:
        case SF_LINK_CLOSED:
                return false; /* a relay from before links: one connection per client */
        case SF_LINK_DOWN: {
                /* Another candidate is tried at once (the link is dialled again meanwhile, for
                 * the next client); so is the end when the host refused the link (its answer
                 * will be the same). The last candidate dials now and waits for that dial. */
                struct sf_link_stats st;
                sf_link_stats_get(l, &st);
                if (st.refused || c->tries + 1 < c->fwd->conf->n_connect) {
                        if (!st.refused)
                                sf_link_hurry(l);
                        link_down_failed(c, l);
                        return true;
                }
                /* The last candidate: wait for the attempt that starts now (sf_link_wait). */
                break;
        }
        case SF_LINK_CONNECTING:
                break;
        }
        /* Wait for the link, at most connect-timeout (the hub's timer of DIALING). */
        c->link_wait = e;
        c->waiter.cb = on_link_state;
        sf_link_wait(e, &c->waiter);
        dial_wait(c, false);
        return true;
}

void sf_conn_dial(struct sf_conn *c) {
        if (link_dial(c))
                return;
        const struct sf_endpoint *ep = cand_ep(c);
        struct sockaddr_storage ss;
        socklen_t len;
        int family = sockaddr_for(ep, &ss, &len);

        if (family == -EAFNOSUPPORT) {
                cand_failed(c, EAFNOSUPPORT, NULL);
                return;
        }
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
                dial_wait(c, false);
                return;
        }
        bool in_progress;
        int r;
        if (ep->kind == SF_EP_NPIPE) {
                c->upstream_family = AF_UNIX;
                c->dir[UPSTREAM].copy_only = true;
                r = sf_sock_connect_pipe(c->fwd->eng, &c->sock[UPSTREAM], ep->pipe, &in_progress);
        } else {
                r = connect_addr(c, (struct sockaddr *)&ss, len, &in_progress);
        }
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
                /* Also a unix listener with a full backlog (the kernel does not queue us) or a
                 * named pipe with every instance busy: retry shortly until connect-timeout
                 * rather than failing a burst of clients. */
                if (uv_now(c->fwd->loop) + DIAL_RETRY_MS < c->dial_deadline) {
                        dial_wait(c, true);
                        return;
                }
                if (r == -EAGAIN)
                        r = -ETIMEDOUT;
        }
        if (r < 0) {
                cand_failed(c, -r, NULL);
                return;
        }
        if (in_progress)
                dial_wait(c, false);
        else
                upstream_connected(c);
}

void sf_conn_dial_first(struct sf_conn *c) {
        c->tries = 0;
        c->cand = c->fwd->last_good >= 0 ? c->fwd->last_good : 0;
}

void sf_conn_dial_ready(struct sf_conn *c, uint32_t events) {
        int err = 0;
        /* A failed connect always reports an error or a hang-up: plain writable is success,
         * and spares asking for the socket's error per connection. */
        if (!(events & SF_EV_OUT) || (events & (SF_EV_ERR | SF_EV_HUP)))
                err = sf_side_error(c, UPSTREAM);
        if (!err && !(events & SF_EV_OUT))
                return; /* still connecting */
        if (err) {
                if (c->ai_next) {
                        /* The name has another address: try it, within the same deadline. */
                        sf_side_close(c, UPSTREAM);
                        try_next_addr(c);
                        return;
                }
                cand_failed(c, err, NULL);
                return;
        }
        upstream_connected(c);
}

void sf_conn_dial_timeout(struct sf_conn *c) {
        if (c->link_wait) {
                struct sf_link *l = sf_link_entry_link(c->link_wait);
                link_wait_cancel(c);
                link_down_failed(c, l);
                return;
        }
        if (c->dial_retry && uv_now(c->fwd->loop) + DIAL_RETRY_MS < c->dial_deadline) {
                c->dial_retry = false;
                sf_conn_dial(c);
                return;
        }
        if (c->gai) {
                c->gai->conn = NULL;
                uv_cancel((uv_req_t *)&c->gai->req);
                c->gai = NULL;
        }
        char cause[200];
        sf_link_timeout_cause(cand_ep(c), c->fwd->conf->connect_timeout_ms, cause, sizeof cause);
        cand_failed(c, ETIMEDOUT, cause);
}

void sf_conn_dial_cancel(struct sf_conn *c) {
        link_wait_cancel(c);
        if (c->gai) {
                c->gai->conn = NULL;
                c->gai = NULL;
        }
        if (c->ai_list) {
                freeaddrinfo(c->ai_list);
                c->ai_list = c->ai_next = NULL;
        }
        sf_side_close(c, UPSTREAM);
}
