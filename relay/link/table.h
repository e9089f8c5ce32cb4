#pragma once
/* The relay's client links: one per (connect endpoint, token), shared by every forward and
 * every connection that dials that endpoint with that token (doc/PROTOCOL.md "The shared
 * link"). An entry is made, and its link dialled, when the relay starts; connections that find
 * its link not up wait on it (sf_link_wait) until it comes up, fails or their own deadline. */
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "conf/endpoint.h"
#include "relay/link/frames.h"
#include "relay/link/link.h"
#include "relay/list.h"

struct sf_bufpool;
struct sf_link_table;
struct sf_link_entry;

/* Told of every change of the link's state while waiting; it stays on the list until it
 * cancels (sf_link_wait_cancel, safe twice; from its own callback it may cancel itself only). */
struct sf_link_waiter {
        struct sf_list_node node;
        void (*cb)(struct sf_link_waiter *w, struct sf_link *l);
};

/* What a link's behaviour comes from: the first forward that uses the entry sets it. */
struct sf_link_settings {
        uint64_t connect_timeout_ms;
        uint64_t handshake_timeout_ms;
        uint64_t keepalive_ms;
        struct sf_engine *eng;
};

int sf_link_table_new(uv_loop_t *loop, struct sf_bufpool *pool, struct sf_link_table **out);
/* Closes every link (their streams end) and frees the table once libuv let go. NULL-safe. */
void sf_link_table_free(struct sf_link_table *t);

/* The entry for (ep, key), made and dialled on first use, with one more user; the entry keeps
 * its own copies of ep, the key and token_file. NULL on -ENOMEM (*err). */
struct sf_link_entry *sf_link_table_get(struct sf_link_table *t, const struct sf_endpoint *ep,
                                        const struct sf_hs_key *key, const char *token_file,
                                        const struct sf_link_settings *s, int *err);
/* One user less (a forward gone, after its connections: none waits on the entry then); the last
 * one closes the link (a reload that changed the endpoint or rotated the token) and frees the
 * entry. NULL-safe. */
void sf_link_table_put(struct sf_link_table *t, struct sf_link_entry *e);
struct sf_link *sf_link_entry_link(struct sf_link_entry *e);
/* An entry of no table, for a link over rd/wr (an exec's pipes: relay/link/link.h,
 * sf_link_adopt, whose ownership rules it keeps): its waiters are told as any entry's are.
 * p is copied. 0 or -ENOMEM. */
int sf_link_entry_adopt(uv_loop_t *loop, struct sf_bufpool *pool, const struct sf_link_params *p,
                        enum sf_mux_role role, uv_stream_t *rd, uv_stream_t *wr, uv_close_cb close_cb,
                        struct sf_link_entry **out);
/* Closes the link of an adopted entry (its streams end) and frees the entry. NULL-safe. */
void sf_link_entry_free(struct sf_link_entry *e);

void sf_link_wait(struct sf_link_entry *e, struct sf_link_waiter *w);
void sf_link_wait_cancel(struct sf_link_entry *e, struct sf_link_waiter *w);

/* Every entry's links, for stats (each entry's current one, then those it replaced whose
 * streams are finishing): i from 0 while it returns non-NULL. */
struct sf_link *sf_link_table_at(const struct sf_link_table *t, size_t i);
size_t sf_link_table_size(const struct sf_link_table *t);
