#include "relay/relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include "conf/compare.h"
#include "conf/log.h"
#include "relay/conn/conn.h"
#include "relay/engine/bufpool.h"
#include "relay/engine/engine.h"
#include "relay/forward.h"
#include "relay/link/mux.h"
#include "relay/link/server.h"
#include "relay/link/table.h"
#include "relay/listen/accept.h"
#include "relay/listen/listener.h"
#include "relay/sys/platform.h"

/* Spare copy buffers kept after a burst: 8 MiB of SF_BUF_SIZE ones at most. */
#define BUFPOOL_RESERVE 32

/* A forward of the relay: its run-time object, the copy of its keys it runs with (a reload frees
 * the configuration it came from while its connections go on), and, once a reload took it
 * out, its place among the retired forwards whose connections finish. */
struct rfwd {
        struct sf_fwd f;
        struct sf_forward conf;
        struct sf_list_node retired_node; /* in relay->retired */
        bool retired;
        uint64_t drain_until; /* a removed forward's connections are closed then (uv_now); 0: none */
        unsigned closing;     /* its own handles (watch, backoff timer) libuv has not let go of yet */
};

#define RFWD(fwd) sf_list_entry(fwd, struct rfwd, f)

struct sf_relay {
        uv_loop_t *loop;
        const struct sf_conf *conf;
        struct rfwd **fwds; /* in the order of conf->forwards */
        size_t n_fwds;
        /* Forwards a reload removed or replaced: no listener, their connections finish. */
        struct sf_list retired;
        uv_timer_t sweep; /* frees retired forwards, ends a removed one's drain */
        bool sweep_init;
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
        return forward < relay->n_fwds ? &relay->fwds[forward]->f.listener : NULL;
}

const struct sf_relay_stats *sf_relay_stats_get(const struct sf_relay *relay, size_t forward) {
        return forward < relay->n_fwds ? relay->fwds[forward]->f.stats : NULL;
}

const struct sf_conf *sf_relay_conf(const struct sf_relay *relay) {
        return relay->conf;
}

/* Gives back the shared links the forward dialled through (after its connections). */
static void fwd_links_put(struct sf_relay *relay, struct sf_fwd *f) {
        for (size_t k = 0; k < SF_MAX_CANDIDATES; k++) {
                if (relay->links)
                        sf_link_table_put(relay->links, f->links[k]);
                f->links[k] = NULL;
        }
}

static void fwd_destroy(struct sf_relay *relay, struct rfwd *w) {
        if (!w)
                return;
        sf_list_remove(&relay->retired, &w->retired_node);
        fwd_links_put(relay, &w->f);
        sf_link_server_free(w->f.links_in);
        w->f.links_in = NULL;
        sf_fwd_free(&w->f);
        sf_conf_forward_clear(&w->conf);
        free(w);
}

/* ---- the streams of shared links: one router ------------------------------------------------
 *
 * Every stream a peer opens on a link the relay serves, a listener's (by service) or attach's
 * exec link (by forward name), becomes a connection of the forward it names; a name nobody
 * answers to is refused with what is offered, in log lines rate-limited as a connection's. */

static void stream_refuse(struct sf_fwd *f, struct sf_mux_stream *s, enum sf_mux_status st, const char *why,
                          const char *peer, const char *service) {
        if (f) {
                sf_fwd_note_error(f, &f->stats->err_other, why);
                if (sf_fwd_ratelimit(f))
                        sf_log(SF_LOG_WARN, f->conf->name, 0, "unknown service: %s asked for %s: %s", peer,
                               service[0] ? service : "none", why);
        }
        sf_mux_stream_refuse(s, st, why);
        sf_mux_stream_close(s);
}

/* A listener's link: the service of its group that answers the name. */
static void listener_stream(void *owner, struct sf_mux_stream *s, const char *service, bool by_default, bool probe,
                            const char *peer) {
        struct sf_fwd *lf = owner;
        char why[SF_MUX_REASON_MAX + 1], label[SF_MUX_SERVICE_MAX + 16];
        struct sf_fwd *f = sf_fwd_service(lf, service, by_default, why, sizeof why);
        if (!f) {
                stream_refuse(lf, s, SF_MUX_UNKNOWN_SERVICE, why, peer, service);
                return;
        }
        snprintf(label, sizeof label, "service %s", f->conf->service);
        sf_conn_new_stream(f, s, probe, label);
}

static const struct sf_link_route listener_route = { .stream = listener_stream };

void sf_relay_stream_new(struct sf_relay *relay, struct sf_mux_stream *s, const char *service, bool probe) {
        struct sf_fwd *f = NULL;
        char why[SF_MUX_REASON_MAX + 1], label[SF_MUX_SERVICE_MAX + 16];
        for (size_t i = 0; i < relay->n_fwds && !f; i++)
                if (strcmp(relay->fwds[i]->conf.name, service) == 0)
                        f = &relay->fwds[i]->f;
        if (!f) {
                /* The far end got its sections from us: a name we do not know is another
                 * configuration's (an exec that outlived a restart of attach). */
                snprintf(why, sizeof why, "no forward named \"%s\" on the host (attach knows ", service);
                for (size_t i = 0; i < relay->n_fwds; i++)
                        snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s", i ? ", " : "",
                                 relay->fwds[i]->conf.name);
                snprintf(why + strlen(why), sizeof why - strlen(why), ")");
                stream_refuse(relay->n_fwds ? &relay->fwds[0]->f : NULL, s, SF_MUX_UNKNOWN_SERVICE, why, "the far end",
                              service);
                return;
        }
        snprintf(label, sizeof label, "[%s]", f->conf->name);
        sf_conn_new_stream(f, s, probe, label);
}

/* The limits of the link set of the listener f owns (its services' together). */
static void links_in_limits(struct sf_fwd *f) {
        char offers[SF_HS_REASON_MAX + 1];
        struct sf_link_server_limits lim;
        if (!f->links_in || f->group)
                return;
        sf_fwd_offers(f, offers, sizeof offers, &lim);
        sf_link_server_set_limits(f->links_in, &lim);
}

/* Ends the links f's listener accepted (their streams end): the relay stops, or a removed
 * forward's drain-timeout is over. */
static void links_in_close(struct sf_fwd *f) {
        sf_link_server_free(f->links_in);
        f->links_in = NULL;
}

/* A forward's run-time object for fc of conf, its token read (a rotated one: a reload). */
static int fwd_new(struct sf_relay *relay, const struct sf_conf *conf, const struct sf_forward *fc, struct rfwd **out) {
        struct rfwd *w = calloc(1, sizeof *w);
        if (!w || sf_conf_forward_copy_resolved(&w->conf, fc, conf) < 0) {
                free(w);
                sf_log(SF_LOG_ERROR, fc->name, 0, "out of memory");
                return -ENOMEM;
        }
        w->f.relay = relay;
        w->f.accepted = sf_conn_new;
        w->f.conn_gone = on_conn_gone;
        w->f.fatal = on_fwd_fatal;
        int e = sf_fwd_init(&w->f, conf, &w->conf, relay->loop, relay->pool, &relay->eng);
        /* The shared links its listener may accept (a forward with auth = token): their limits
         * follow once its services are known (links_in_limits). */
        struct sf_link_server_limits lim = { .max_streams = 1, .max_links = 1 };
        if (e == 0 && w->f.has_key)
                e = sf_link_server_new(relay->loop, relay->pool, &relay->eng, &listener_route, &w->f, &lim,
                                       &w->f.links_in);
        if (e < 0) {
                fwd_destroy(relay, w);
                return e;
        }
        *out = w;
        return 0;
}

/* The forward in fwds[0..n) that owns the listener of fwds[i]: the first one on its listen
 * endpoint. */
static size_t owner_index(struct rfwd *const *fwds, size_t i) {
        for (size_t j = 0; j < i; j++)
                if (sf_endpoint_equal(&fwds[j]->conf.listen, &fwds[i]->conf.listen))
                        return j;
        return i;
}

/* Services: the first forward on a listen endpoint owns the listener, the others answer
 * through it (configuration checked they may). */
static void groups_link(struct rfwd *const *fwds, size_t n) {
        for (size_t i = 0; i < n; i++)
                fwds[i]->f.group = fwds[i]->f.next_service = NULL;
        for (size_t i = 0; i < n; i++) {
                size_t o = owner_index(fwds, i);
                if (o == i)
                        continue;
                struct sf_fwd *f = &fwds[i]->f;
                f->group = &fwds[o]->f;
                struct sf_fwd **tail = &f->group->next_service;
                while (*tail)
                        tail = &(*tail)->next_service;
                *tail = f;
        }
        for (size_t i = 0; i < n; i++)
                links_in_limits(&fwds[i]->f);
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
                const struct sf_fwd *f = &relay->fwds[k]->f;
                size_t m = sf_link_server_size(f->links_in);
                if (i < m) {
                        sf_link_stats_get(sf_link_server_at(f->links_in, i), st);
                        *forward = f->conf->name;
                        return true;
                }
                i -= m;
        }
        return false;
}

int sf_relay_new(uv_loop_t *loop, const struct sf_conf *conf, struct sf_relay **out) {
        struct sf_relay *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->loop = loop;
        r->conf = conf;
        r->fwds = calloc(conf->n_forwards ? conf->n_forwards : 1, sizeof *r->fwds);
        r->pool = sf_bufpool_new(BUFPOOL_RESERVE, sf_memory_trim);
        if (!r->fwds || !r->pool) {
                sf_bufpool_free(r->pool);
                free(r->fwds);
                free(r);
                return -ENOMEM;
        }
        for (size_t i = 0; i < conf->n_forwards; i++) {
                int e = fwd_new(r, conf, &conf->forwards[i], &r->fwds[i]);
                if (e < 0) {
                        sf_relay_free(r);
                        return e;
                }
                r->n_fwds++;
        }
        groups_link(r->fwds, r->n_fwds);
        int e = sf_link_table_new(loop, r->pool, &r->links);
        if (e < 0) {
                sf_relay_free(r);
                return e;
        }
        *out = r;
        return 0;
}

/* The shared links of a forward that reaches host relays with auth = token (link = shared):
 * one per network candidate and token, dialled now unless another forward has it. */
static int fwd_links_open(struct sf_relay *relay, struct sf_fwd *f) {
        const struct sf_forward *c = f->conf;
        if (!f->connect_key || c->link != SF_LINK_SHARED)
                return 0;
        struct sf_link_settings s = {
                .connect_timeout_ms = c->connect_timeout_ms,
                .handshake_timeout_ms = c->handshake_timeout_ms,
                .keepalive_ms = c->keepalive_ms,
                .eng = &relay->eng,
        };
        for (size_t k = 0; k < c->n_connect; k++) {
                if (!sf_endpoint_is_network(&c->connect[k]) || f->links[k])
                        continue;
                int err = 0;
                f->links[k] = sf_link_table_get(relay->links, &c->connect[k], &f->key, f->token_file, &s, &err);
                if (!f->links[k])
                        return err;
        }
        return 0;
}

/* Says what was bound (bound: a new socket, not one a reload passed on); a host relay
 * authenticates its listener and dials its upstream plainly (a passed systemd: or fd: network
 * socket is one as much as a tcp: listener). */
static void fwd_bound(struct sf_fwd *f, bool bound) {
        if (!f->conf->connect_auth_set && (f->listener.family == AF_INET || f->listener.family == AF_INET6 ||
                                           f->listener.family == sf_af_vsock))
                f->connect_key = false;
        for (struct sf_fwd *s = f->next_service; s; s = s->next_service)
                s->listener.family = f->listener.family;
        if (!bound)
                return;
        sf_log(SF_LOG_INFO, f->conf->name, 0, "listening on %s", f->conf->listen.text);
        if (f->conf->allow_insecure && f->conf->auth == SF_AUTH_NONE &&
            ((f->conf->listen.kind == SF_EP_TCP && !sf_endpoint_is_loopback(&f->conf->listen)) ||
             f->conf->listen.kind == SF_EP_VSOCK))
                sf_log(SF_LOG_WARN, f->conf->name, 0,
                       "%s accepts unauthenticated connections from the network (allow-insecure = yes): "
                       "anyone who reaches it reaches the upstream",
                       f->conf->listen.text);
}

static void service_bound(const struct sf_fwd *f) {
        sf_log(SF_LOG_INFO, f->conf->name, 0, "service %s on %s (the listener of [%s])", f->conf->service,
               f->conf->listen.text, f->group->conf->name);
}

static int links_open(struct sf_relay *relay) {
        for (size_t i = 0; i < relay->n_fwds; i++) {
                int r = fwd_links_open(relay, &relay->fwds[i]->f);
                if (r < 0)
                        return r;
        }
        return 0;
}

int sf_relay_bind(struct sf_relay *relay) {
        for (size_t i = 0; i < relay->n_fwds; i++) {
                struct sf_fwd *f = &relay->fwds[i]->f;
                if (f->group) {
                        service_bound(f);
                        continue;
                }
                int r = sf_listener_open(relay->loop, f->conf, relay->conf, &f->listener);
                if (r < 0) {
                        for (size_t j = 0; j < i; j++)
                                sf_listener_close(&relay->fwds[j]->f.listener);
                        return r;
                }
                fwd_bound(f, true);
        }
        return 0;
}

int sf_relay_start(struct sf_relay *relay) {
        int e = sf_engine_init(&relay->eng, relay->loop, relay->pool);
        if (e < 0)
                return e;
        for (size_t i = 0; i < relay->n_fwds; i++) {
                struct sf_fwd *f = &relay->fwds[i]->f;
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

int sf_relay_start_unbound(struct sf_relay *relay) {
        int e = sf_engine_init(&relay->eng, relay->loop, relay->pool);
        if (e < 0)
                return e;
        for (size_t i = 0; i < relay->n_fwds; i++)
                relay->fwds[i]->f.listen_started = true;
        return links_open(relay);
}

void sf_relay_use_link(struct sf_relay *relay, struct sf_link_entry *e) {
        for (size_t i = 0; i < relay->n_fwds; i++) {
                struct sf_fwd *f = &relay->fwds[i]->f;
                for (size_t k = 0; k < f->conf->n_connect; k++)
                        f->links[k] = e;
        }
}

/* Runs body with f set to every forward, the current ones and those a reload retired (body may
 * free the retired one it is given). */
#define EACH_FWD(relay, f, body)                                                                             \
        do {                                                                                                 \
                for (size_t i_ = 0; i_ < (relay)->n_fwds; i_++) {                                            \
                        struct sf_fwd *f = &(relay)->fwds[i_]->f;                                            \
                        body;                                                                                \
                }                                                                                            \
                for (struct sf_list_node *n_ = (relay)->retired.first, *next_; n_; n_ = next_) {             \
                        next_ = n_->next;                                                                    \
                        struct sf_fwd *f = &sf_list_entry(n_, struct rfwd, retired_node)->f;                 \
                        body;                                                                                \
                }                                                                                            \
        } while (0)

static size_t active_total(const struct sf_relay *relay) {
        size_t n = 0;
        EACH_FWD(relay, f, n += f->stats->active);
        return n;
}

/* Connections whose memory is not freed yet: they still point at their forward. */
static size_t allocated_total(const struct sf_relay *relay) {
        size_t n = 0;
        EACH_FWD(relay, f, n += f->n_conns_allocated);
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
        EACH_FWD(relay, f, links_in_close(f));
        EACH_FWD(relay, f, fwd_links_put(relay, f));
        sf_link_table_free(relay->links);
        relay->links = NULL;
        relay->stopped = true;
        sf_engine_close(&relay->eng);
        sf_log(SF_LOG_INFO, NULL, 0, "stopped");
        if (relay->stopped_cb)
                relay->stopped_cb(relay, relay->stopped_data);
}

static void sweep_soon(struct sf_relay *relay);

static void on_conn_gone(struct sf_fwd *fwd) {
        /* Spare pipes are descriptors: an idle relay holds none. */
        if (allocated_total(fwd->relay) == 0)
                sf_engine_trim(&fwd->relay->eng);
        if (!sf_list_empty(&fwd->relay->retired))
                sweep_soon(fwd->relay);
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

static void on_fwd_handle_closed(uv_handle_t *h) {
        struct rfwd *w = h->data;
        struct sf_relay *relay = w->f.relay;
        w->closing--;
        relay->pending_closes--;
        if (w->retired)
                sweep_soon(relay);
        maybe_stopped(relay);
}

/* A handle inside a forward's object: the object is not freed before libuv let go of it. */
static void close_fwd_handle(struct sf_fwd *f, uv_handle_t *h) {
        struct rfwd *w = RFWD(f);
        h->data = w;
        w->closing++;
        f->relay->pending_closes++;
        uv_close(h, on_fwd_handle_closed);
}

static void on_drain_timeout(uv_timer_t *t) {
        struct sf_relay *relay = t->data;
        size_t n = active_total(relay);
        if (n)
                sf_log(SF_LOG_WARN, NULL, 0, "drain timeout: closing %zu connection%s still open", n,
                       n == 1 ? "" : "s");
        EACH_FWD(relay, f, sf_conn_close_all(f, "drain timeout"));
}

/* Stops accepting on f for good: its watch and backoff timer closed, its listening socket
 * closed unless another forward took it (a reload). */
static void fwd_unlisten(struct sf_fwd *f) {
        sf_fwd_listen_pause(f);
        f->listen_started = false;
        /* Closed before its descriptor: libuv drops a descriptor it watches when the watcher
         * closes, and the number may be reused by then. */
        uv_handle_t *watch = sf_watch_handle(&f->listen_watch);
        if (watch)
                close_fwd_handle(f, watch);
        if (f->backoff_init) {
                f->backoff_init = false;
                close_fwd_handle(f, (uv_handle_t *)&f->backoff);
        }
        sf_listener_close(&f->listener);
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
        if (relay->sweep_init) {
                relay->sweep_init = false;
                close_relay_handle(relay, (uv_handle_t *)&relay->sweep);
        }
        /* Closing the listening sockets now makes new clients fail fast instead of queueing in
         * a backlog nobody will accept. A container's shared links take no new streams from us:
         * the host gets GOAWAY. */
        EACH_FWD(relay, f, {
                fwd_unlisten(f);
                if (f->links_in)
                        sf_link_server_drain(f->links_in);
        });
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

/* ---- reload ----------------------------------------------------------------------------------
 *
 * A new configuration is applied in two steps. The first changes nothing that runs: it builds a
 * forward object for each new forward (its token read again), keeps the running object of each
 * forward whose keys and token are the same, and binds the listening sockets no running forward
 * has; any failure undoes what it made. The second cannot fail: a listening socket whose endpoint
 * stays passes to the forward that owns it now (with its shared links when the token is the same),
 * the forwards left over are retired (no listener; a removed one's connections get drain-timeout,
 * a replaced one's keep going), and the new owners start accepting. */

static void on_sweep(uv_timer_t *t);
/* How soon a retired forward's links are looked at again while streams remain. */
#define SWEEP_AGAIN_MS 1000

static void sweep_soon(struct sf_relay *relay) {
        if (relay->sweep_init)
                uv_timer_start(&relay->sweep, on_sweep, 0, 0);
}

/* Frees the retired forwards that have nothing left, closes their idle links, and ends the
 * drain of removed ones whose drain-timeout passed. */
static void on_sweep(uv_timer_t *t) {
        struct sf_relay *relay = t->data;
        uint64_t now = uv_now(relay->loop), next = 0;
        for (struct sf_list_node *n = relay->retired.first, *after; n; n = after) {
                after = n->next;
                struct rfwd *w = sf_list_entry(n, struct rfwd, retired_node);
                if (w->drain_until && now >= w->drain_until) {
                        w->drain_until = 0;
                        if (w->f.stats->active)
                                sf_log(SF_LOG_WARN, w->conf.name, 0,
                                       "drain timeout: closing %llu connection%s of this removed forward",
                                       (unsigned long long)w->f.stats->active, w->f.stats->active == 1 ? "" : "s");
                        sf_conn_close_all(&w->f, "drain timeout");
                        links_in_close(&w->f);
                }
                /* The connections close in later turns: their conn_gone sweeps again. */
                if (w->f.n_conns_allocated == 0 && !(w->f.links_in && sf_link_server_close_idle(w->f.links_in)) &&
                    !w->closing) {
                        sf_log(SF_LOG_DEBUG, w->conf.name, 0, "the forward a reload retired is gone");
                        fwd_destroy(relay, w);
                        continue;
                }
                if (w->drain_until && (!next || w->drain_until < next))
                        next = w->drain_until;
                /* A link's last stream may end after its connection is gone (the mux closes it
                 * in a later turn): looked at again within a second. */
                if (sf_link_server_size(w->f.links_in) && (!next || now + SWEEP_AGAIN_MS < next))
                        next = now + SWEEP_AGAIN_MS;
        }
        if (next)
                uv_timer_start(t, on_sweep, next - now, 0);
}

static bool same_key(const struct sf_fwd *a, const struct sf_fwd *b) {
        return a->has_key == b->has_key &&
               (!a->has_key || (a->key.len == b->key.len && sodium_memcmp(a->key.bytes, b->key.bytes, a->key.len) == 0));
}

/* The running forward named name, or NULL. */
static struct rfwd *running(const struct sf_relay *relay, const char *name) {
        for (size_t i = 0; i < relay->n_fwds; i++)
                if (strcmp(relay->fwds[i]->conf.name, name) == 0)
                        return relay->fwds[i];
        return NULL;
}

/* The running forward that holds a listening socket on ep, or NULL. */
static struct rfwd *listening_on(const struct sf_relay *relay, const struct sf_endpoint *ep) {
        for (size_t i = 0; i < relay->n_fwds; i++) {
                const struct sf_fwd *f = &relay->fwds[i]->f;
                if (!f->group && (f->listener.fd >= 0 || f->listener.srv) && sf_endpoint_equal(&f->conf->listen, ep))
                        return relay->fwds[i];
        }
        return NULL;
}

/* from's listening socket (and its links, when to has the same token) is to's from now on. */
static void listener_handover(struct sf_fwd *from, struct sf_fwd *to) {
        sf_fwd_listen_pause(from);
        from->listen_started = false;
        uv_handle_t *watch = sf_watch_handle(&from->listen_watch);
        if (watch)
                close_fwd_handle(from, watch);
        to->listener = from->listener;
        from->listener = (struct sf_listener){ .fd = -1, .family = to->listener.family };
        if (same_key(from, to) && from->links_in && to->links_in) {
                /* The links and their streams go on with the new owner (and its limits). */
                struct sf_link_server *ls = to->links_in;
                to->links_in = from->links_in;
                from->links_in = ls;
                sf_link_server_set_owner(to->links_in, to);
                sf_link_server_set_owner(from->links_in, from);
        } else if (from->links_in) {
                sf_link_server_drain(from->links_in);
        }
        if (!sf_conf_forward_listen_equal(from->conf, to->conf))
                sf_log(SF_LOG_WARN, to->conf->name, 0,
                       "%s keeps its socket: a new mode, owner or group applies when it is bound again (a restart, "
                       "or another listen path)",
                       to->conf->listen.text);
}

/* w leaves the forwards; removed (not in the new configuration conf at all): its connections
 * get conf's drain-timeout. */
static void fwd_retire(struct sf_relay *relay, const struct sf_conf *conf, struct rfwd *w, bool removed) {
        struct sf_fwd *f = &w->f;
        size_t n = f->stats->active;
        fwd_unlisten(f);
        if (f->links_in)
                sf_link_server_drain(f->links_in);
        f->group = f->next_service = NULL;
        w->retired = true;
        if (removed) {
                w->drain_until = uv_now(relay->loop) + conf->drain_timeout_ms;
                if (w->drain_until == 0)
                        w->drain_until = 1;
                sf_log(SF_LOG_INFO, w->conf.name, 0, "removed: no longer on %s%s", w->conf.listen.text,
                       n ? ", its open connections drain (drain-timeout)" : "");
        } else if (n) {
                sf_log(SF_LOG_INFO, w->conf.name, 0, "changed: %zu open connection%s keep%s the settings %s started with",
                       n, n == 1 ? "" : "s", n == 1 ? "s" : "", n == 1 ? "it" : "they");
        }
        sf_list_push_back(&relay->retired, &w->retired_node);
}

/* What a reload does with one forward of the new configuration. */
struct plan {
        enum { KEPT, ADDED, CHANGED } kind;
        struct rfwd *old;  /* CHANGED: the running forward of that name */
        struct rfwd *from; /* the running forward whose listening socket it takes, if any */
        bool bound;        /* its socket was bound by the reload */
};

int sf_relay_reload(struct sf_relay *relay, const struct sf_conf *conf, struct sf_relay_reload_counts *out) {
        size_t n = conf->n_forwards;
        struct rfwd **next = calloc(n ? n : 1, sizeof *next);
        struct plan *plan = calloc(n ? n : 1, sizeof *plan);
        struct sf_relay_reload_counts c = { 0 };
        int e = 0;
        if (!next || !plan) {
                sf_log(SF_LOG_ERROR, NULL, 0, "reload: out of memory; nothing changed");
                e = -ENOMEM;
                goto fail;
        }
        if (relay->stopping) {
                sf_log(SF_LOG_WARN, NULL, 0, "reload: the relay is stopping; nothing changed");
                e = -ECANCELED;
                goto fail;
        }
        /* Step 1: nothing that runs changes. */
        for (size_t i = 0; i < n; i++) {
                struct rfwd *cand, *old = running(relay, conf->forwards[i].name);
                if ((e = fwd_new(relay, conf, &conf->forwards[i], &cand)) < 0) {
                        sf_log(SF_LOG_ERROR, conf->forwards[i].name, 0, "reload: nothing changed");
                        goto fail;
                }
                if (old && sf_conf_forward_equal(&old->conf, &cand->conf) && same_key(&old->f, &cand->f)) {
                        fwd_destroy(relay, cand);
                        next[i] = old;
                        plan[i].kind = KEPT;
                } else {
                        next[i] = cand;
                        plan[i].kind = old ? CHANGED : ADDED;
                        plan[i].old = old;
                }
        }
        for (size_t i = 0; i < n; i++) {
                struct sf_fwd *f = &next[i]->f;
                if (owner_index(next, i) != i || (plan[i].from = listening_on(relay, &f->conf->listen)))
                        continue;
                if ((e = sf_listener_open(relay->loop, f->conf, conf, &f->listener)) < 0) {
                        sf_log(SF_LOG_ERROR, f->conf->name, 0, "reload: nothing changed");
                        goto fail;
                }
                plan[i].bound = true;
        }
        if (!relay->sweep_init) {
                uv_timer_init(relay->loop, &relay->sweep);
                relay->sweep.data = relay;
                relay->sweep_init = true;
        }

        /* Step 2: cannot fail. */
        for (size_t i = 0; i < n; i++) {
                /* A changed forward goes on counting where it was: its open connections (the
                 * old object's) and its new ones in one set of counters. */
                if (plan[i].kind == CHANGED)
                        sf_fwd_stats_share(&next[i]->f, &plan[i].old->f);
                if (plan[i].from && plan[i].from != next[i])
                        listener_handover(&plan[i].from->f, &next[i]->f);
        }
        for (size_t j = 0; j < relay->n_fwds; j++) {
                struct rfwd *w = relay->fwds[j];
                bool kept = false, named = false;
                for (size_t i = 0; i < n && !kept; i++) {
                        kept = next[i] == w;
                        named = named || strcmp(conf->forwards[i].name, w->conf.name) == 0;
                }
                if (kept)
                        continue;
                c.removed += !named;
                fwd_retire(relay, conf, w, !named);
        }
        free(relay->fwds);
        relay->fwds = next;
        relay->n_fwds = n;
        relay->conf = conf;
        groups_link(next, n);
        for (size_t i = 0; i < n; i++) {
                struct sf_fwd *f = &next[i]->f;
                c.unchanged += plan[i].kind == KEPT;
                c.added += plan[i].kind == ADDED;
                c.changed += plan[i].kind == CHANGED;
                if (plan[i].kind == CHANGED)
                        sf_log(SF_LOG_INFO, f->conf->name, 0, "changed: new connections use the new settings");
                if (f->group) {
                        if (plan[i].kind != KEPT)
                                service_bound(f);
                        f->listen_started = true;
                        continue;
                }
                if (plan[i].from == next[i])
                        continue; /* its own socket, accepting as before */
                fwd_bound(f, plan[i].bound);
                int r = sf_fwd_start(f);
                if (r < 0)
                        on_fwd_fatal(f, r);
        }
        for (size_t i = 0; i < n; i++) {
                struct sf_fwd *f = &next[i]->f;
                if (f->group)
                        f->listener.family = f->group->listener.family;
                if (plan[i].kind != KEPT && fwd_links_open(relay, f) < 0)
                        sf_log(SF_LOG_ERROR, f->conf->name, 0,
                               "out of memory for its shared links: its clients wait for connect-timeout and fail");
        }
        free(plan);
        sweep_soon(relay);
        *out = c;
        return 0;
fail:
        for (size_t i = 0; next && plan && i < n; i++) {
                if (plan[i].kind != KEPT)
                        fwd_destroy(relay, next[i]);
                else if (plan[i].bound)
                        sf_listener_close(&next[i]->f.listener);
        }
        free(next);
        free(plan);
        return e;
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
        EACH_FWD(relay, f, links_in_close(f));
        while (relay->retired.first)
                fwd_destroy(relay, sf_list_entry(relay->retired.first, struct rfwd, retired_node));
        for (size_t i = 0; i < relay->n_fwds; i++)
                fwd_destroy(relay, relay->fwds[i]);
        sf_link_table_free(relay->links);
        sf_bufpool_free(relay->pool);
        free(relay->fwds);
        free(relay);
}
