#include "relay/relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/conn/conn.h"
#include "relay/engine/bufpool.h"
#include "relay/engine/engine.h"
#include "relay/forward.h"
#include "relay/link/table.h"
#include "relay/listen/accept.h"
#include "relay/listen/listener.h"
#include "relay/sys/platform.h"

/* Spare copy buffers kept after a burst: 8 MiB of SF_BUF_SIZE ones at most. */
#define BUFPOOL_RESERVE 32

struct sf_relay {
        uv_loop_t *loop;
        const struct sf_conf *conf;
        struct sf_fwd *fwds;
        size_t n_fwds;
        struct sf_bufpool *pool;
        struct sf_engine eng; /* every connection's sockets */
        struct sf_link_table *links; /* the shared links toward host relays */

        bool stopping;
        unsigned pending_closes; /* relay-owned handles being closed */
        uv_timer_t drain;
        bool drain_init;
        sf_relay_stopped_cb stopped_cb;
        void *stopped_data;
        bool stopped;

        sf_relay_fatal_cb fatal_cb;
        void *fatal_data;
        bool fatal_reported;
};

static void on_conn_gone(struct sf_fwd *fwd);
static void on_fwd_fatal(struct sf_fwd *fwd, int err);

void sf_relay_on_fatal(struct sf_relay *relay, sf_relay_fatal_cb cb, void *data) {
        relay->fatal_cb = cb;
        relay->fatal_data = data;
}

size_t sf_relay_n_forwards(const struct sf_relay *relay) {
        return relay->n_fwds;
}

const struct sf_listener *sf_relay_listener(const struct sf_relay *relay, size_t forward) {
        return forward < relay->n_fwds ? &relay->fwds[forward].listener : NULL;
}

const struct sf_relay_stats *sf_relay_stats_get(const struct sf_relay *relay, size_t forward) {
        return forward < relay->n_fwds ? &relay->fwds[forward].stats : NULL;
}

bool sf_relay_link_stats(const struct sf_relay *relay, size_t i, struct sf_link_stats *st, const char **forward) {
        size_t n = relay->links ? sf_link_table_size(relay->links) : 0;
        if (i < n) {
                sf_link_stats_get(sf_link_table_at(relay->links, i), st);
                *forward = NULL;
                return true;
        }
        i -= n;
        for (size_t k = 0; k < relay->n_fwds; k++) {
                const struct sf_fwd *f = &relay->fwds[k];
                if (i < f->links_in.n) {
                        sf_link_stats_get(sf_conn_link_at(f, i), st);
                        *forward = f->conf->name;
                        return true;
                }
                i -= f->links_in.n;
        }
        return false;
}

int sf_relay_new(uv_loop_t *loop, const struct sf_conf *conf, struct sf_relay **out) {
        struct sf_relay *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->loop = loop;
        r->conf = conf;
        r->n_fwds = conf->n_forwards;
        r->fwds = calloc(r->n_fwds ? r->n_fwds : 1, sizeof *r->fwds);
        r->pool = sf_bufpool_new(BUFPOOL_RESERVE);
        if (!r->fwds || !r->pool) {
                sf_bufpool_free(r->pool);
                free(r->fwds);
                free(r);
                return -ENOMEM;
        }
        for (size_t i = 0; i < r->n_fwds; i++) {
                struct sf_fwd *f = &r->fwds[i];
                f->relay = r;
                f->accepted = sf_conn_new;
                f->conn_gone = on_conn_gone;
                f->fatal = on_fwd_fatal;
                int e = sf_fwd_init(f, conf, &conf->forwards[i], loop, r->pool, &r->eng);
                if (e < 0) {
                        sf_relay_free(r);
                        return e;
                }
                /* Services: the first forward on a listen endpoint owns the listener, the
                 * others answer through it (configuration checked they may). */
                for (size_t j = 0; j < i && !f->group; j++) {
                        struct sf_fwd *o = &r->fwds[j];
                        if (!o->group && sf_endpoint_equal(&o->conf->listen, &f->conf->listen)) {
                                f->group = o;
                                struct sf_fwd **tail = &o->next_service;
                                while (*tail)
                                        tail = &(*tail)->next_service;
                                *tail = f;
                        }
                }
        }
        int e = sf_link_table_new(loop, r->pool, &r->links);
        if (e < 0) {
                sf_relay_free(r);
                return e;
        }
        *out = r;
        return 0;
}

/* The shared links of forwards that reach host relays with auth = token (link = shared): one
 * per network candidate and token, dialled now. */
static int links_open(struct sf_relay *relay) {
        for (size_t i = 0; i < relay->n_fwds; i++) {
                struct sf_fwd *f = &relay->fwds[i];
                const struct sf_forward *c = f->conf;
                if (!f->connect_key || c->link != SF_LINK_SHARED)
                        continue;
                struct sf_link_settings s = {
                        .connect_timeout_ms = c->connect_timeout_ms,
                        .handshake_timeout_ms = c->handshake_timeout_ms,
                        .keepalive_ms = c->keepalive_ms,
                        /* The host opens no streams toward us; the windows bound what it may
                         * send unread (doc/PROTOCOL.md "Flow control"). */
                        .mux = { .max_streams = 16, .stream_window = 256 * 1024, .link_window = 8 * 1024 * 1024 },
                        .eng = &relay->eng,
                };
                for (size_t k = 0; k < c->n_connect; k++) {
                        if (!sf_endpoint_is_network(&c->connect[k]))
                                continue;
                        int err = 0;
                        f->links[k] = sf_link_table_get(relay->links, &c->connect[k], &f->key, f->token_file, &s, &err);
                        if (!f->links[k])
                                return err;
                }
        }
        return 0;
}

int sf_relay_bind(struct sf_relay *relay) {
        for (size_t i = 0; i < relay->n_fwds; i++) {
                struct sf_fwd *f = &relay->fwds[i];
                if (f->group) {
                        sf_log(SF_LOG_INFO, f->conf->name, 0, "service %s on %s (the listener of [%s])", f->conf->service,
                               f->conf->listen.text, f->group->conf->name);
                        continue;
                }
                int r = sf_listener_open(relay->loop, f->conf, relay->conf, &f->listener);
                if (r < 0) {
                        for (size_t j = 0; j < i; j++)
                                sf_listener_close(&relay->fwds[j].listener);
                        return r;
                }
                /* A host relay authenticates its listener and dials its upstream plainly; a
                 * passed (systemd:, fd:) network socket is one as much as a tcp: listener. */
                if (!f->conf->connect_auth_set && (f->listener.family == AF_INET || f->listener.family == AF_INET6 ||
                                                   f->listener.family == sf_af_vsock))
                        f->connect_key = false;
                for (struct sf_fwd *s = f->next_service; s; s = s->next_service)
                        s->listener.family = f->listener.family;
                sf_log(SF_LOG_INFO, f->conf->name, 0, "listening on %s", f->conf->listen.text);
                if (f->conf->allow_insecure && f->conf->auth == SF_AUTH_NONE &&
                    ((f->conf->listen.kind == SF_EP_TCP && !sf_endpoint_is_loopback(&f->conf->listen)) ||
                     f->conf->listen.kind == SF_EP_VSOCK))
                        sf_log(SF_LOG_WARN, f->conf->name, 0,
                               "%s accepts unauthenticated connections from the network (allow-insecure = yes): "
                               "anyone who reaches it reaches the upstream",
                               f->conf->listen.text);
        }
        return 0;
}

int sf_relay_start(struct sf_relay *relay) {
        int e = sf_engine_init(&relay->eng, relay->loop, relay->pool);
        if (e < 0)
                return e;
        for (size_t i = 0; i < relay->n_fwds; i++) {
                struct sf_fwd *f = &relay->fwds[i];
                if (f->group) {
                        f->listen_started = true;
                        continue;
                }
                int r = sf_fwd_start(f);
                if (r < 0)
                        return r;
        }
        return links_open(relay);
}

static size_t active_total(const struct sf_relay *relay) {
        size_t n = 0;
        for (size_t i = 0; i < relay->n_fwds; i++)
                n += relay->fwds[i].stats.active;
        return n;
}

/* Connections whose memory is not freed yet: they still point at their forward. */
static size_t allocated_total(const struct sf_relay *relay) {
        size_t n = 0;
        for (size_t i = 0; i < relay->n_fwds; i++)
                n += relay->fwds[i].n_conns_allocated;
        return n;
}

static void close_relay_handle(struct sf_relay *relay, uv_handle_t *h);

static void maybe_stopped(struct sf_relay *relay) {
        if (!relay->stopping || relay->stopped || allocated_total(relay) > 0)
                return;
        if (relay->drain_init) {
                relay->drain_init = false;
                uv_timer_stop(&relay->drain);
                close_relay_handle(relay, (uv_handle_t *)&relay->drain);
                return;
        }
        if (relay->pending_closes > 0)
                return;
        /* Every connection is gone: the links they used go too (their handles close in the
         * loop's last turns). */
        for (size_t i = 0; i < relay->n_fwds; i++)
                sf_conn_links_close(&relay->fwds[i]);
        sf_link_table_free(relay->links);
        relay->links = NULL;
        relay->stopped = true;
        sf_engine_close(&relay->eng);
        sf_log(SF_LOG_INFO, NULL, 0, "stopped");
        if (relay->stopped_cb)
                relay->stopped_cb(relay, relay->stopped_data);
}

static void on_conn_gone(struct sf_fwd *fwd) {
        /* Spare pipes are descriptors: an idle relay holds none. */
        if (allocated_total(fwd->relay) == 0)
                sf_engine_trim(&fwd->relay->eng);
        maybe_stopped(fwd->relay);
}

static void on_fwd_fatal(struct sf_fwd *fwd, int err) {
        struct sf_relay *relay = fwd->relay;
        if (relay->fatal_reported || !relay->fatal_cb)
                return;
        relay->fatal_reported = true;
        relay->fatal_cb(relay, err, relay->fatal_data);
}

static void on_relay_handle_closed(uv_handle_t *h) {
        struct sf_relay *relay = h->data;
        relay->pending_closes--;
        maybe_stopped(relay);
}

static void close_relay_handle(struct sf_relay *relay, uv_handle_t *h) {
        h->data = relay;
        relay->pending_closes++;
        uv_close(h, on_relay_handle_closed);
}

static void on_drain_timeout(uv_timer_t *t) {
        struct sf_relay *relay = t->data;
        size_t n = active_total(relay);
        if (n)
                sf_log(SF_LOG_WARN, NULL, 0, "drain timeout: closing %zu connection%s still open", n,
                       n == 1 ? "" : "s");
        for (size_t i = 0; i < relay->n_fwds; i++)
                sf_conn_close_all(&relay->fwds[i], "drain timeout");
}

void sf_relay_stop(struct sf_relay *relay, uint64_t drain_ms, sf_relay_stopped_cb cb, void *data) {
        if (relay->stopping) {
                /* Asked again (a second SIGTERM): cut the drain short. */
                if (drain_ms == 0 && relay->drain_init)
                        uv_timer_start(&relay->drain, on_drain_timeout, 0, 0);
                return;
        }
        relay->stopping = true;
        relay->stopped_cb = cb;
        relay->stopped_data = data;
        size_t n = active_total(relay);
        for (size_t i = 0; i < relay->n_fwds; i++) {
                struct sf_fwd *f = &relay->fwds[i];
                sf_fwd_listen_pause(f);
                f->listen_started = false;
                /* Closed before its descriptor: libuv drops a descriptor it watches when the
                 * watcher closes, and the number may be reused by then. */
                uv_handle_t *watch = sf_watch_handle(&f->listen_watch);
                if (watch)
                        close_relay_handle(relay, watch);
                if (f->backoff_init) {
                        f->backoff_init = false;
                        close_relay_handle(relay, (uv_handle_t *)&f->backoff);
                }
                /* Closing the listening socket now makes new clients fail fast instead of
                 * queueing in a backlog nobody will accept. */
                sf_listener_close(&f->listener);
                /* A container's shared links take no new streams from us: the host gets
                 * GOAWAY. */
                sf_conn_links_drain(f);
        }
        /* Said once the listeners are closed, so that it is true when read. */
        sf_log(SF_LOG_INFO, NULL, 0, "stopping: no new connections%s", n ? ", draining the open ones" : "");
        if (n) {
                uv_timer_init(relay->loop, &relay->drain);
                relay->drain.data = relay;
                relay->drain_init = true;
                uv_timer_start(&relay->drain, on_drain_timeout, drain_ms, 0);
        }
        maybe_stopped(relay);
}

void sf_relay_run(uv_loop_t *loop, struct sf_relay *relay) {
        if (relay)
                sf_engine_run(&relay->eng, loop);
        else
                uv_run(loop, UV_RUN_DEFAULT);
}

void sf_relay_free(struct sf_relay *relay) {
        if (!relay)
                return;
        sf_engine_free(&relay->eng);
        for (size_t i = 0; i < relay->n_fwds; i++) {
                sf_conn_links_close(&relay->fwds[i]);
                sf_fwd_free(&relay->fwds[i]);
        }
        sf_link_table_free(relay->links);
        sf_bufpool_free(relay->pool);
        free(relay->fwds);
        free(relay);
}
