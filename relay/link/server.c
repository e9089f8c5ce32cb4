#include "relay/link/server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "conf/log.h"
#include "relay/link/link.h"
#include "relay/link/mux.h"
#include "relay/list.h"

/* One accepted link: its parameters live as long as it does. */
struct srv_link {
        struct sf_list_node node; /* in ls->links */
        struct sf_link_server *ls;
        struct sf_link *link;
        struct sf_link_params params;
        char name[160];
};

struct sf_link_server {
        uv_loop_t *loop;
        struct sf_bufpool *pool;
        struct sf_engine *eng;
        const struct sf_link_route *route;
        void *owner;
        struct sf_link_server_limits lim;
        struct sf_list links;
        bool draining;
};

static void srv_stream_new(void *owner, struct sf_link *l, struct sf_mux_stream *s, const char *service,
                           bool by_default, bool probe) {
        (void)l;
        struct srv_link *sl = owner;
        sl->ls->route->stream(sl->ls->owner, s, service, by_default, probe, sl->name);
}

static void srv_link_free(struct srv_link *sl) {
        sf_list_remove(&sl->ls->links, &sl->node);
        sf_link_close(sl->link);
        free(sl);
}

static void srv_ended(void *owner, struct sf_link *l) {
        struct srv_link *sl = owner;
        struct sf_link_server *ls = sl->ls;
        /* Closed first (its memory stays until libuv let go of its handles, after this turn):
         * the owner may free the whole set from its callback. */
        srv_link_free(sl);
        if (ls->route->ended)
                ls->route->ended(ls->owner, l);
}

static void srv_state(void *owner, struct sf_link *l) {
        struct srv_link *sl = owner;
        if (sf_link_state(l) == SF_LINK_UP && sl->ls->route->up)
                sl->ls->route->up(sl->ls->owner, l);
}

static const struct sf_link_ops srv_ops = { .state_changed = srv_state, .stream_new = srv_stream_new, .ended = srv_ended };

int sf_link_server_new(uv_loop_t *loop, struct sf_bufpool *pool, struct sf_engine *eng,
                       const struct sf_link_route *route, void *owner, const struct sf_link_server_limits *lim,
                       struct sf_link_server **out) {
        struct sf_link_server *ls = calloc(1, sizeof *ls);
        if (!ls)
                return -ENOMEM;
        ls->loop = loop;
        ls->pool = pool;
        ls->eng = eng;
        ls->route = route;
        ls->owner = owner;
        ls->lim = *lim;
        *out = ls;
        return 0;
}

void sf_link_server_close(struct sf_link_server *ls) {
        while (ls->links.first)
                srv_link_free(sf_list_entry(ls->links.first, struct srv_link, node));
}

void sf_link_server_free(struct sf_link_server *ls) {
        if (!ls)
                return;
        sf_link_server_close(ls);
        free(ls);
}

bool sf_link_server_full(const struct sf_link_server *ls) {
        return ls->draining || (ls->lim.max_links && ls->links.n >= ls->lim.max_links);
}

int sf_link_server_adopt(struct sf_link_server *ls, const char *peer, bool quiet, uv_stream_t *rd, uv_stream_t *wr,
                         uv_close_cb close_cb, struct sf_link **out) {
        struct srv_link *sl = calloc(1, sizeof *sl);
        if (!sl) {
                sf_link_transport_close(rd, wr, close_cb);
                return -ENOMEM;
        }
        snprintf(sl->name, sizeof sl->name, "%s", peer);
        sl->ls = ls;
        sl->params = (struct sf_link_params){
                .name = sl->name,
                .keepalive_ms = ls->lim.keepalive_ms,
                .quiet = quiet,
                .eng = ls->eng,
        };
        sf_mux_config_init(&sl->params.mux, ls->lim.max_streams);
        int r = sf_link_adopt(ls->loop, ls->pool, &sl->params, &srv_ops, sl, SF_MUX_SERVER, rd, wr, close_cb,
                              &sl->link);
        if (r < 0) {
                free(sl);
                return r;
        }
        sf_list_push_back(&ls->links, &sl->node);
        if (out)
                *out = sl->link;
        return 0;
}

void sf_link_server_set_owner(struct sf_link_server *ls, void *owner) {
        ls->owner = owner;
}

void sf_link_server_set_limits(struct sf_link_server *ls, const struct sf_link_server_limits *lim) {
        ls->lim = *lim;
        struct sf_mux_config cfg;
        sf_mux_config_init(&cfg, lim->max_streams);
        for (struct sf_list_node *n = ls->links.first; n; n = n->next) {
                struct srv_link *sl = sf_list_entry(n, struct srv_link, node);
                sl->params.keepalive_ms = lim->keepalive_ms;
                if (sf_link_set_max_streams(sl->link, cfg.max_streams) < 0)
                        sf_log(SF_LOG_WARN, NULL, 0, "link from %s: out of memory for its new stream limit", sl->name);
        }
}

void sf_link_server_drain(struct sf_link_server *ls) {
        ls->draining = true;
        for (struct sf_list_node *n = ls->links.first; n; n = n->next)
                sf_link_drain(sf_list_entry(n, struct srv_link, node)->link);
}

bool sf_link_server_close_idle(struct sf_link_server *ls) {
        for (struct sf_list_node *n = ls->links.first, *next; n; n = next) {
                next = n->next;
                struct srv_link *sl = sf_list_entry(n, struct srv_link, node);
                struct sf_link_stats st;
                sf_link_stats_get(sl->link, &st);
                if (st.streams_open == 0)
                        srv_link_free(sl);
        }
        return !sf_list_empty(&ls->links);
}

size_t sf_link_server_size(const struct sf_link_server *ls) {
        return ls ? ls->links.n : 0;
}

struct sf_link *sf_link_server_at(const struct sf_link_server *ls, size_t i) {
        for (struct sf_list_node *n = ls ? ls->links.first : NULL; n; n = n->next, i--)
                if (i == 0)
                        return sf_list_entry(n, struct srv_link, node)->link;
        return NULL;
}
