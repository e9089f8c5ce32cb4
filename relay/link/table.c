#include "relay/link/table.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

/* A link the entry replaced (the peer sent GOAWAY, or its stream ids ran out): its streams
 * finish on it, then it ends. */
struct old_link {
        struct sf_list_node node; /* in entry->old */
        struct sf_link_entry *e;
        struct sf_link *link;
};

struct sf_link_entry {
        struct sf_list_node node; /* in the table */
        struct sf_link_table *t;  /* NULL for an adopted entry */
        uv_loop_t *loop;
        struct sf_bufpool *pool;
        struct sf_endpoint ep;
        struct sf_hs_key key;
        char *token_file;
        struct sf_link_params params;
        struct sf_link *link;
        struct sf_list old;
        struct sf_list waiters;
        unsigned refs; /* forwards that use it (sf_link_table_get, sf_link_table_put) */
};

struct sf_link_table {
        uv_loop_t *loop;
        struct sf_bufpool *pool;
        struct sf_list entries;
};

static void on_state(void *owner, struct sf_link *l) {
        struct sf_link_entry *e = owner;
        if (l != e->link)
                return; /* a retired link: nobody waits on it */
        /* A waiter may cancel itself from its callback (and may add new ones): the list is
         * walked from a private copy, each waiter put back before it is called. */
        struct sf_list todo = e->waiters;
        e->waiters = (struct sf_list){ 0 };
        while (todo.first) {
                struct sf_link_waiter *w = sf_list_entry(todo.first, struct sf_link_waiter, node);
                sf_list_remove(&todo, &w->node);
                sf_list_push_back(&e->waiters, &w->node);
                w->cb(w, l);
        }
}

static void old_free(struct old_link *o) {
        sf_list_remove(&o->e->old, &o->node);
        sf_link_close(o->link);
        free(o);
}

static void on_ended(void *owner, struct sf_link *l) {
        struct sf_link_entry *e = owner;
        for (struct sf_list_node *n = e->old.first; n; n = n->next) {
                struct old_link *o = sf_list_entry(n, struct old_link, node);
                if (o->link == l) {
                        old_free(o);
                        return;
                }
        }
}

static void on_draining(void *owner, struct sf_link *l);

static const struct sf_link_ops entry_ops = {
        .state_changed = on_state,
        .ended = on_ended,
        .draining = on_draining,
};

/* The link takes no new streams: a new one, dialled now, takes them, while this one's streams
 * finish on it. Clients never hear "shutting down" from a host that only asked for a new link.
 * An adopted entry (an exec link) has nothing to dial: it waits for its owner's next run. */
static void on_draining(void *owner, struct sf_link *l) {
        struct sf_link_entry *e = owner;
        if (l != e->link || !e->t)
                return;
        struct old_link *o = calloc(1, sizeof *o);
        struct sf_link *fresh = NULL;
        if (!o || sf_link_client_new(e->loop, e->pool, &e->params, &entry_ops, e, &fresh) < 0) {
                /* No memory for a second link: this one stays, and its streams are refused
                 * until it drops and is dialled again. */
                free(o);
                return;
        }
        o->e = e;
        o->link = l;
        sf_list_push_back(&e->old, &o->node);
        e->link = fresh;
        sf_link_inherit(fresh, l);
        sf_link_retire(l);
}

int sf_link_table_new(uv_loop_t *loop, struct sf_bufpool *pool, struct sf_link_table **out) {
        struct sf_link_table *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->loop = loop;
        t->pool = pool;
        *out = t;
        return 0;
}

static void entry_free(struct sf_link_table *t, struct sf_link_entry *e) {
        sf_list_remove(&t->entries, &e->node);
        while (e->old.first)
                old_free(sf_list_entry(e->old.first, struct old_link, node));
        sf_link_close(e->link);
        sodium_memzero(&e->key, sizeof e->key);
        free(e->token_file);
        free(e);
}

void sf_link_table_free(struct sf_link_table *t) {
        if (!t)
                return;
        while (t->entries.first)
                entry_free(t, sf_list_entry(t->entries.first, struct sf_link_entry, node));
        free(t);
}

struct sf_link_entry *sf_link_table_get(struct sf_link_table *t, const struct sf_endpoint *ep,
                                        const struct sf_hs_key *key, const char *token_file,
                                        const struct sf_link_settings *s, int *err) {
        for (struct sf_list_node *n = t->entries.first; n; n = n->next) {
                struct sf_link_entry *e = sf_list_entry(n, struct sf_link_entry, node);
                if (strcmp(e->ep.text, ep->text) == 0 && e->key.len == key->len &&
                    sodium_memcmp(e->key.bytes, key->bytes, key->len) == 0) {
                        e->refs++;
                        return e;
                }
        }
        struct sf_link_entry *e = calloc(1, sizeof *e);
        if (!e || !(e->token_file = strdup(token_file ? token_file : ""))) {
                free(e);
                *err = -ENOMEM;
                return NULL;
        }
        e->t = t;
        e->loop = t->loop;
        e->pool = t->pool;
        e->ep = *ep;
        e->key = *key;
        e->params = (struct sf_link_params){
                .name = e->ep.text,
                .ep = &e->ep,
                .key = &e->key,
                .token_file = e->token_file,
                .connect_timeout_ms = s->connect_timeout_ms,
                .handshake_timeout_ms = s->handshake_timeout_ms,
                .keepalive_ms = s->keepalive_ms,
                .eng = s->eng,
        };
        /* The host opens no streams toward us: the windows bound what it may send unread
         * (doc/PROTOCOL.md "Flow control"). */
        sf_mux_config_init(&e->params.mux, SF_MUX_CLIENT_END_STREAMS);
        int r = sf_link_client_new(t->loop, t->pool, &e->params, &entry_ops, e, &e->link);
        if (r < 0) {
                free(e->token_file);
                free(e);
                *err = r;
                return NULL;
        }
        e->refs = 1;
        sf_list_push_back(&t->entries, &e->node);
        return e;
}

void sf_link_table_put(struct sf_link_table *t, struct sf_link_entry *e) {
        /* An entry of sf_link_entry_adopt is its owner's, not the table's. */
        if (e && e->node.linked && --e->refs == 0)
                entry_free(t, e);
}

int sf_link_entry_adopt(uv_loop_t *loop, struct sf_bufpool *pool, const struct sf_link_params *p,
                        enum sf_mux_role role, uv_stream_t *rd, uv_stream_t *wr, uv_close_cb close_cb,
                        struct sf_link_entry **out) {
        struct sf_link_entry *e = calloc(1, sizeof *e);
        if (!e) {
                sf_link_transport_close(rd, wr, close_cb);
                return -ENOMEM;
        }
        e->loop = loop;
        e->pool = pool;
        e->params = *p;
        *out = e;
        int r = sf_link_adopt(loop, pool, &e->params, &entry_ops, e, role, rd, wr, close_cb, &e->link);
        if (r < 0) {
                free(e);
                *out = NULL;
        }
        return r;
}

void sf_link_entry_free(struct sf_link_entry *e) {
        if (!e)
                return;
        while (e->old.first)
                old_free(sf_list_entry(e->old.first, struct old_link, node));
        sf_link_close(e->link);
        free(e);
}

struct sf_link *sf_link_entry_link(struct sf_link_entry *e) {
        return e->link;
}

void sf_link_wait(struct sf_link_entry *e, struct sf_link_waiter *w) {
        sf_list_push_back(&e->waiters, &w->node);
        sf_link_hurry(e->link);
}

void sf_link_wait_cancel(struct sf_link_entry *e, struct sf_link_waiter *w) {
        sf_list_remove(&e->waiters, &w->node);
}

struct sf_link *sf_link_table_at(const struct sf_link_table *t, size_t i) {
        for (struct sf_list_node *n = t->entries.first; n; n = n->next) {
                struct sf_link_entry *e = sf_list_entry(n, struct sf_link_entry, node);
                if (i == 0)
                        return e->link;
                i--;
                if (i < e->old.n) {
                        struct sf_list_node *k = e->old.first;
                        while (i--)
                                k = k->next;
                        return sf_list_entry(k, struct old_link, node)->link;
                }
                i -= e->old.n;
        }
        return NULL;
}

size_t sf_link_table_size(const struct sf_link_table *t) {
        size_t n = 0;
        for (struct sf_list_node *k = t->entries.first; k; k = k->next)
                n += 1 + sf_list_entry(k, struct sf_link_entry, node)->old.n;
        return n;
}
