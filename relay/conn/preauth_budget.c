#include "relay/conn/preauth_budget.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "relay/sys/platform.h"

#define LOG_EVERY_MS 60000

struct sf_preauth_src {
        uint8_t key[SF_PREAUTH_KEY_LEN];
        bool used;
        uint32_t hash;
        struct sf_list nodes; /* moves with the entry: no node points back at it */
};

static struct sf_preauth_node *all_node(struct sf_list_node *n) {
        return n ? sf_list_entry(n, struct sf_preauth_node, all) : NULL;
}

int sf_preauth_init(struct sf_preauth *pa, size_t max, size_t per_source, void (*evict)(struct sf_preauth_node *n)) {
        memset(pa, 0, sizeof *pa);
        size_t cap = 16;
        while (cap < 2 * max)
                cap *= 2;
        pa->tab = calloc(cap, sizeof *pa->tab);
        if (!pa->tab)
                return -ENOMEM;
        if (sodium_init() < 0) {
                free(pa->tab);
                pa->tab = NULL;
                return -EIO;
        }
        randombytes_buf(pa->seed, sizeof pa->seed);
        pa->cap = cap;
        pa->max = max;
        pa->per_source = per_source < max ? per_source : max;
        pa->evict = evict;
        return 0;
}

void sf_preauth_free(struct sf_preauth *pa) {
        free(pa->tab);
        pa->tab = NULL;
        pa->cap = 0;
}

void sf_preauth_node_source(struct sf_preauth_node *n, const struct sockaddr *sa, socklen_t len) {
        memset(n->key, 0, sizeof n->key);
        uint8_t *a = n->key + 1;
        if (sa && sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
                const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
                n->key[0] = AF_INET6;
                a[10] = a[11] = 0xff;
                memcpy(a + 12, &s->sin_addr, 4);
        } else if (sa && sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
                const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
                n->key[0] = AF_INET6;
                memcpy(a, &s->sin6_addr, 16);
                /* One subscriber, one host even, holds a whole /64: counting single addresses
                 * would let it take the whole budget. A v4-mapped address stays whole. */
                if (!IN6_IS_ADDR_V4MAPPED(&s->sin6_addr))
                        memset(a + 8, 0, 8);
        } else if (sa && len > 0 && (size_t)len <= sizeof(struct sockaddr_storage)) {
                struct sockaddr_storage ss;
                unsigned cid, port;
                memset(&ss, 0, sizeof ss);
                memcpy(&ss, sa, (size_t)len);
                if (sf_vsock_peer(&ss, &cid, &port)) {
                        n->key[0] = (uint8_t)sf_af_vsock;
                        memcpy(a, &cid, sizeof cid);
                }
        }
}

static uint32_t key_hash(const struct sf_preauth *pa, const uint8_t *key) {
        uint8_t h[crypto_shorthash_BYTES];
        crypto_shorthash(h, key, SF_PREAUTH_KEY_LEN, pa->seed);
        uint32_t v;
        memcpy(&v, h, sizeof v);
        return v;
}

/* The slot holding key, or the free slot where it would go. The table is never more than
 * half full, so the probe ends. */
static size_t slot_of(const struct sf_preauth *pa, const uint8_t *key, uint32_t hash) {
        size_t mask = pa->cap - 1, i = hash & mask;
        while (pa->tab[i].used && (pa->tab[i].hash != hash || memcmp(pa->tab[i].key, key, SF_PREAUTH_KEY_LEN) != 0))
                i = (i + 1) & mask;
        return i;
}

static struct sf_preauth_src *src_find(const struct sf_preauth *pa, const uint8_t *key) {
        if (!pa->tab)
                return NULL;
        struct sf_preauth_src *s = &pa->tab[slot_of(pa, key, key_hash(pa, key))];
        return s->used ? s : NULL;
}

/* Backward-shift deletion: entries after the freed slot that probed past it move back, so
 * lookups never meet a hole in their run and no tombstones accumulate. */
static void src_delete(struct sf_preauth *pa, struct sf_preauth_src *s) {
        size_t mask = pa->cap - 1, i = (size_t)(s - pa->tab), j = i;
        pa->tab[i].used = false;
        for (;;) {
                j = (j + 1) & mask;
                if (!pa->tab[j].used)
                        return;
                size_t home = pa->tab[j].hash & mask;
                bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
                if (stays)
                        continue;
                pa->tab[i] = pa->tab[j];
                pa->tab[j].used = false;
                i = j;
        }
}

size_t sf_preauth_source_count(const struct sf_preauth *pa, const struct sf_preauth_node *n) {
        const struct sf_preauth_src *s = src_find(pa, n->key);
        return s ? s->nodes.n : 0;
}

struct sf_preauth_node *sf_preauth_victim(const struct sf_preauth *pa, const struct sf_preauth_node *n) {
        const struct sf_preauth_src *s = src_find(pa, n->key);
        if (s && s->nodes.n >= pa->per_source)
                return sf_list_entry(s->nodes.first, struct sf_preauth_node, same_source);
        if (pa->all.n >= pa->max)
                return all_node(pa->all.first);
        return NULL;
}

size_t sf_preauth_add(struct sf_preauth *pa, struct sf_preauth_node *n) {
        size_t evicted = 0;
        struct sf_preauth_node *v;
        while ((v = sf_preauth_victim(pa, n))) {
                pa->evict(v);
                evicted++;
        }
        uint32_t hash = key_hash(pa, n->key);
        struct sf_preauth_src *s = &pa->tab[slot_of(pa, n->key, hash)];
        if (!s->used) {
                memcpy(s->key, n->key, SF_PREAUTH_KEY_LEN);
                s->used = true;
                s->hash = hash;
                s->nodes = (struct sf_list){ 0 };
        }
        sf_list_push_back(&s->nodes, &n->same_source);
        sf_list_push_back(&pa->all, &n->all);
        return evicted;
}

void sf_preauth_remove(struct sf_preauth *pa, struct sf_preauth_node *n) {
        if (!n->all.linked)
                return;
        struct sf_preauth_src *s = src_find(pa, n->key);
        sf_list_remove(&s->nodes, &n->same_source);
        if (sf_list_empty(&s->nodes))
                src_delete(pa, s);
        sf_list_remove(&pa->all, &n->all);
}

bool sf_preauth_evict_oldest(struct sf_preauth *pa) {
        if (sf_list_empty(&pa->all))
                return false;
        pa->evict(all_node(pa->all.first));
        return true;
}

bool sf_preauth_note_eviction(struct sf_preauth *pa, uint64_t now_ms, uint64_t *n_out) {
        pa->evicted++;
        pa->evicted_unlogged++;
        if (pa->logged_ms && now_ms - pa->logged_ms < LOG_EVERY_MS)
                return false;
        *n_out = pa->evicted_unlogged;
        pa->evicted_unlogged = 0;
        pa->logged_ms = now_ms ? now_ms : 1;
        return true;
}
