#include "relay/conn/state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/log.h"
#include "relay/link/link.h"

/* A host relay's side of the shared link (doc/PROTOCOL.md "The shared link"): a client whose
 * verified frame asked for a link gets the status, and its connection is handed over to a link
 * (relay/link/link.c) owned by the listener; each stream the container opens names a service
 * of that listener and becomes a connection of its own, whose client side is the stream. */

/* Streams a link may carry at once: what its services serve, within HTTP/2's bounds. */
#define LINK_STREAMS_MAX 65535
/* A stream's window is one pooled buffer: what the peer may send unread fits the buffer that
 * holds it. The link's bounds what all its streams hold unread together (doc/PROTOCOL.md). */
#define STREAM_WINDOW (256 * 1024)
#define LINK_WINDOW (8 * 1024 * 1024)

struct sf_srv_link {
        struct sf_list_node node; /* in owner->links_in */
        struct sf_fwd *owner;
        struct sf_link *link;
        struct sf_link_params params;
        char name[128];
};

static void srv_stream_new(void *owner, struct sf_link *l, struct sf_mux_stream *s, const char *service,
                           bool by_default, bool probe) {
        (void)l;
        struct sf_srv_link *sl = owner;
        char why[SF_MUX_REASON_MAX + 1];
        struct sf_fwd *f = sf_fwd_service(sl->owner, service, by_default, why, sizeof why);
        if (!f) {
                sf_log(SF_LOG_WARN, sl->owner->conf->name, 0, "unknown service: %s asked for %s: %s", sl->name,
                       service[0] ? service : "none", why);
                sf_mux_stream_refuse(s, SF_MUX_UNKNOWN_SERVICE, why);
                sf_mux_stream_close(s);
                return;
        }
        char label[SF_MUX_SERVICE_MAX + 16];
        snprintf(label, sizeof label, "service %s", f->conf->service);
        sf_conn_new_stream(f, s, probe, label);
}

static void srv_link_free(struct sf_srv_link *sl) {
        sf_list_remove(&sl->owner->links_in, &sl->node);
        sf_link_close(sl->link);
        free(sl);
}

static void srv_ended(void *owner, struct sf_link *l) {
        (void)l;
        srv_link_free(owner);
}

static const struct sf_link_ops srv_ops = { .stream_new = srv_stream_new, .ended = srv_ended };

static size_t offered(struct sf_fwd *owner, char *out, size_t cap) {
        size_t o = (size_t)snprintf(out, cap, "offers ");
        uint64_t streams = 0;
        for (struct sf_fwd *f = owner; f && o < cap; f = f->next_service) {
                o += (size_t)snprintf(out + o, cap - o, "%s%s", f == owner ? "" : ", ", f->conf->service);
                streams += f->conf->max_conns;
        }
        return streams < LINK_STREAMS_MAX ? (size_t)streams : LINK_STREAMS_MAX;
}

void sf_conn_link_accept(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        char services[SF_HS_REASON_MAX + 1];
        size_t streams = offered(fwd, services, sizeof services);
        struct sf_srv_link *sl = calloc(1, sizeof *sl);
        if (!sl) {
                sf_conn_close(c, "out of memory for a shared link");
                return;
        }
        char peer[96];
        sf_conn_peer_name(c, peer, sizeof peer);
        snprintf(sl->name, sizeof sl->name, "%s (%s)", peer, fwd->conf->listen.text);
        sl->owner = fwd;
        sl->params = (struct sf_link_params){
                .name = sl->name,
                .keepalive_ms = fwd->conf->keepalive_ms,
                .quiet = (c->hs_flags & SF_HS_FLAG_PROBE) != 0,
                .mux = { .max_streams = (uint32_t)streams, .stream_window = STREAM_WINDOW, .link_window = LINK_WINDOW },
                .eng = fwd->eng,
        };
        /* The status (its reason lists the services, under the MAC) goes first: the client
         * speaks HTTP/2 only once it verified it. */
        size_t n = sf_hs_status_build(c->hs, &fwd->key, c->snonce, c->cnonce, SF_HS_OK, services);
        if (sf_side_send(c, CLIENT, c->hs, n) != (ssize_t)n) {
                free(sl);
                sf_conn_close(c, "status frame not sent");
                return;
        }
        sf_conn_preauth_leave(c);
        uv_stream_t *stream;
        uv_close_cb close_cb;
        int r = sf_sock_release(fwd->eng, &c->sock[CLIENT], fwd->loop, &stream, &close_cb);
        if (r < 0) {
                free(sl);
                sf_log(SF_LOG_WARN, fname(c), c->id, "a shared link from %s: %s", peer,
                       r == -EBUSY ? "it spoke before the status (not a sockferry relay's link)" : strerror(-r));
                sf_conn_close(c, "the link could not be taken over");
                return;
        }
        r = sf_link_adopt(fwd->loop, fwd->pool, &sl->params, &srv_ops, sl, SF_MUX_SERVER, stream, stream, close_cb,
                          &sl->link);
        if (r < 0) {
                free(sl);
                sf_conn_close(c, "out of memory for a shared link");
                return;
        }
        sf_list_push_back(&fwd->links_in, &sl->node);
        fwd->links_accepted++;
        sf_log(sl->params.quiet ? SF_LOG_DEBUG : SF_LOG_INFO, fname(c), c->id, "shared link from %s up (%s)%s", peer,
               services, sl->params.quiet ? " for sockferry check" : "");
        sf_conn_close(c, "handed over to a shared link");
}

void sf_conn_links_drain(struct sf_fwd *fwd) {
        for (struct sf_list_node *n = fwd->links_in.first; n; n = n->next)
                sf_link_drain(sf_list_entry(n, struct sf_srv_link, node)->link);
}

void sf_conn_links_move(struct sf_fwd *from, struct sf_fwd *to) {
        while (from->links_in.first) {
                struct sf_srv_link *sl = sf_list_entry(from->links_in.first, struct sf_srv_link, node);
                sf_list_remove(&from->links_in, &sl->node);
                sl->owner = to;
                sf_list_push_back(&to->links_in, &sl->node);
        }
}

bool sf_conn_links_close_idle(struct sf_fwd *fwd) {
        for (struct sf_list_node *n = fwd->links_in.first, *next; n; n = next) {
                next = n->next;
                struct sf_srv_link *sl = sf_list_entry(n, struct sf_srv_link, node);
                struct sf_link_stats st;
                sf_link_stats_get(sl->link, &st);
                if (st.streams_open == 0)
                        srv_link_free(sl);
        }
        return !sf_list_empty(&fwd->links_in);
}

struct sf_link *sf_conn_link_at(const struct sf_fwd *fwd, size_t i) {
        for (struct sf_list_node *n = fwd->links_in.first; n; n = n->next, i--)
                if (i == 0)
                        return sf_list_entry(n, struct sf_srv_link, node)->link;
        return NULL;
}

void sf_conn_links_close(struct sf_fwd *fwd) {
        while (fwd->links_in.first)
                srv_link_free(sf_list_entry(fwd->links_in.first, struct sf_srv_link, node));
}
