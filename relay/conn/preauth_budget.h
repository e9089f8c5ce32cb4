#pragma once
/* The pre-authentication budget of one forward (doc/SECURITY.md, "Pre-authentication
 * budget"): connections that were greeted and have not yet proved they hold the token, in
 * arrival order and counted per source address, bounded in all and per source. When a new one
 * would exceed either bound the oldest one goes — of its source when that source is at its
 * bound, else of all — so a flood costs the flooder its own oldest connections, and a client
 * that answers the greeting within one round trip gets through whatever arrived before it.
 * Every operation is O(1) (expected, for the source table). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "relay/list.h"

/* The bounds come from the forward's preauth-max (conf/), by default four times max-conns:
 * that many in all, a quarter of it per source. Why: doc/SECURITY.md, "Pre-authentication
 * budget". */

/* IPv4 (as v4-mapped), an IPv6 /64 (what one subscriber gets), a vsock CID: family tag + 16. */
#define SF_PREAUTH_KEY_LEN 17

struct sf_preauth_node {
        struct sf_list_node all;         /* every one in, oldest first; linked while in */
        struct sf_list_node same_source; /* those of the same source, oldest first */
        uint8_t key[SF_PREAUTH_KEY_LEN];
};

struct sf_preauth_src;

struct sf_preauth {
        struct sf_list all; /* all.n: how many are in */
        size_t max, per_source;
        struct sf_preauth_src *tab; /* open addressing, linear probing; NULL before init */
        size_t cap;                 /* a power of two, at least twice max */
        uint8_t seed[16];           /* keyed hash: a peer cannot aim its addresses at one slot */
        void (*evict)(struct sf_preauth_node *n); /* closes n's connection, which removes n */
        uint64_t evicted;                         /* in all, for the stats */
        uint64_t evicted_unlogged;                /* since the last log line */
        uint64_t logged_ms;                       /* time of the last log line, 0 none */
};

/* 0 or -ENOMEM. evict must remove the node (sf_preauth_remove) before it returns. */
int sf_preauth_init(struct sf_preauth *pa, size_t max, size_t per_source, void (*evict)(struct sf_preauth_node *n));
/* Safe to call twice, and on a budget never initialised (zeroed). */
void sf_preauth_free(struct sf_preauth *pa);

/* Sets n's source from a peer address (len 0 or an unknown family: one shared "unknown"). */
void sf_preauth_node_source(struct sf_preauth_node *n, const struct sockaddr *sa, socklen_t len);
/* Adds n as the newest, evicting first what has to go. Returns how many were evicted. */
size_t sf_preauth_add(struct sf_preauth *pa, struct sf_preauth_node *n);
/* The node that would be evicted to make room for one more from n's source, or NULL. */
struct sf_preauth_node *sf_preauth_victim(const struct sf_preauth *pa, const struct sf_preauth_node *n);
/* Takes n out (it authenticated, or its connection closed); nothing when it is not in. */
void sf_preauth_remove(struct sf_preauth *pa, struct sf_preauth_node *n);
/* Evicts the oldest (to free a descriptor); false when there is none. */
bool sf_preauth_evict_oldest(struct sf_preauth *pa);
/* How many of n's source are in. */
size_t sf_preauth_source_count(const struct sf_preauth *pa, const struct sf_preauth_node *n);

/* Counts an eviction; true when a log line is due (the first, then one a minute): *n_out is
 * then the number it covers. */
bool sf_preauth_note_eviction(struct sf_preauth *pa, uint64_t now_ms, uint64_t *n_out);
