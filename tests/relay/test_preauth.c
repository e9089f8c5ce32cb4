/* The pre-authentication budget: eviction order, per-source accounting, source keys. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "relay/conn/preauth_budget.h"

static struct sf_preauth pa;
static struct sf_preauth_node *evicted[4096];
static size_t n_evicted;

static void evict(struct sf_preauth_node *n) {
        evicted[n_evicted++] = n;
        sf_preauth_remove(&pa, n);
}

static void setup(void) {
        n_evicted = 0;
        cr_assert_eq(sf_preauth_init(&pa, 8, 3, evict), 0);
}

static void teardown(void) {
        sf_preauth_free(&pa);
        sf_preauth_free(&pa);
}

static void v4(struct sf_preauth_node *n, const char *addr) {
        struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(1234) };
        cr_assert_eq(inet_pton(AF_INET, addr, &s.sin_addr), 1);
        memset(n, 0, sizeof *n);
        sf_preauth_node_source(n, (struct sockaddr *)&s, sizeof s);
}

static void v6(struct sf_preauth_node *n, const char *addr) {
        struct sockaddr_in6 s = { .sin6_family = AF_INET6, .sin6_port = htons(1234) };
        cr_assert_eq(inet_pton(AF_INET6, addr, &s.sin6_addr), 1);
        memset(n, 0, sizeof *n);
        sf_preauth_node_source(n, (struct sockaddr *)&s, sizeof s);
}

/* n[0..count) from count distinct addresses, added in order. */
static void fill(struct sf_preauth_node *n, int count) {
        char addr[32];
        for (int i = 0; i < count; i++) {
                snprintf(addr, sizeof addr, "10.0.0.%d", i + 1);
                v4(&n[i], addr);
                cr_assert_eq(sf_preauth_add(&pa, &n[i]), 0);
        }
}

TestSuite(preauth, .init = setup, .fini = teardown);

Test(preauth, full_budget_evicts_the_oldest_in_arrival_order) {
        struct sf_preauth_node n[12];
        char addr[32];
        fill(n, 8);
        cr_assert_eq(pa.all.n, 8);
        for (int i = 8; i < 12; i++) {
                snprintf(addr, sizeof addr, "10.0.1.%d", i);
                v4(&n[i], addr);
                cr_assert_eq(sf_preauth_add(&pa, &n[i]), 1);
        }
        cr_assert_eq(n_evicted, 4);
        for (int i = 0; i < 4; i++) {
                cr_assert_eq(evicted[i], &n[i], "eviction %d took node %ld", i, (long)(evicted[i] - n));
                cr_assert_not(n[i].all.linked);
        }
        cr_assert_eq(pa.all.n, 8);
        cr_assert_eq(pa.all.first, &n[4].all);
        cr_assert_eq(pa.all.last, &n[11].all);
}

Test(preauth, a_node_that_authenticated_is_never_evicted) {
        struct sf_preauth_node n[9];
        fill(n, 8);
        sf_preauth_remove(&pa, &n[0]); /* authenticated: out of the budget */
        sf_preauth_remove(&pa, &n[0]); /* and its close after that changes nothing */
        sf_preauth_remove(&pa, &n[3]);
        cr_assert_eq(pa.all.n, 6);
        v4(&n[8], "10.0.2.1");
        cr_assert_eq(sf_preauth_add(&pa, &n[8]), 0);
        cr_assert_eq(pa.all.n, 7);
        cr_assert_null(sf_preauth_victim(&pa, &n[8]));
        /* out of descriptors: the oldest still unauthenticated goes first */
        cr_assert(sf_preauth_evict_oldest(&pa));
        cr_assert_eq(evicted[0], &n[1]);
        cr_assert_eq(pa.all.first, &n[2].all);
}

Test(preauth, one_source_at_its_bound_evicts_its_own_oldest_only) {
        struct sf_preauth_node a[3], flood[10];
        v4(&a[0], "192.0.2.1");
        v4(&a[1], "192.0.2.2");
        v4(&a[2], "192.0.2.3");
        for (int i = 0; i < 3; i++)
                sf_preauth_add(&pa, &a[i]);
        for (int i = 0; i < 10; i++) {
                v4(&flood[i], "198.51.100.7");
                sf_preauth_add(&pa, &flood[i]);
                cr_assert_leq(sf_preauth_source_count(&pa, &flood[i]), 3);
        }
        /* the flooder pushed out only its own, oldest first; the others are all there */
        cr_assert_eq(n_evicted, 7);
        for (int i = 0; i < 7; i++)
                cr_assert_eq(evicted[i], &flood[i]);
        for (int i = 0; i < 3; i++) {
                cr_assert(a[i].all.linked);
                cr_assert_eq(sf_preauth_source_count(&pa, &a[i]), 1);
        }
        cr_assert_eq(sf_preauth_source_count(&pa, &flood[9]), 3);
        cr_assert_eq(pa.all.n, 6);
        /* a newcomer sharing the flooder's address (one NAT address) pushes out the flooder's
         * oldest, and is itself the newest of that source */
        struct sf_preauth_node good;
        v4(&good, "198.51.100.7");
        sf_preauth_add(&pa, &good);
        cr_assert_eq(evicted[7], &flood[7]);
        cr_assert(good.all.linked);
        cr_assert_eq(sf_preauth_source_count(&pa, &good), 3);
        sf_preauth_remove(&pa, &good);
        sf_preauth_remove(&pa, &flood[8]);
        sf_preauth_remove(&pa, &flood[9]);
        cr_assert_eq(sf_preauth_source_count(&pa, &good), 0);
        cr_assert_eq(pa.all.n, 3);
}

Test(preauth, source_keys) {
        struct sf_preauth_node a, b;
        /* one IPv6 /64 is one source; the next /64 is another */
        v6(&a, "2001:db8:1:2::1");
        v6(&b, "2001:db8:1:2:ffff:1:2:3");
        cr_assert_eq(memcmp(a.key, b.key, sizeof a.key), 0);
        v6(&b, "2001:db8:1:3::1");
        cr_assert_neq(memcmp(a.key, b.key, sizeof a.key), 0);
        /* an IPv4 peer on a dual-stack listener arrives v4-mapped: the same source */
        v4(&a, "192.0.2.9");
        v6(&b, "::ffff:192.0.2.9");
        cr_assert_eq(memcmp(a.key, b.key, sizeof a.key), 0);
        v6(&b, "::ffff:192.0.2.10");
        cr_assert_neq(memcmp(a.key, b.key, sizeof a.key), 0);
}

/* Many sources coming and going in any order: the table's backward-shift deletion keeps every
 * remaining source findable with its count. */
Test(preauth, table_stays_consistent_under_churn) {
        sf_preauth_free(&pa);
        cr_assert_eq(sf_preauth_init(&pa, 64, 2, evict), 0);
        static struct sf_preauth_node n[2000];
        char addr[32];
        unsigned seed = 7;
        for (int i = 0; i < 2000; i++) {
                seed = seed * 1103515245u + 12345u;
                snprintf(addr, sizeof addr, "10.1.%u.%u", (seed >> 8) % 4, (seed >> 16) % 40);
                v4(&n[i], addr);
                sf_preauth_add(&pa, &n[i]);
                if (i % 3 == 0)
                        sf_preauth_remove(&pa, &n[(seed >> 4) % (unsigned)(i + 1)]);
                cr_assert_leq(pa.all.n, 64);
        }
        size_t total = 0;
        for (struct sf_list_node *xn = pa.all.first; xn; xn = xn->next) {
                struct sf_preauth_node *x = sf_list_entry(xn, struct sf_preauth_node, all);
                cr_assert(x->all.linked);
                size_t same = 0;
                for (struct sf_list_node *yn = pa.all.first; yn; yn = yn->next) {
                        struct sf_preauth_node *y = sf_list_entry(yn, struct sf_preauth_node, all);
                        same += memcmp(x->key, y->key, sizeof x->key) == 0;
                }
                cr_assert_eq(sf_preauth_source_count(&pa, x), same);
                cr_assert_leq(same, 2);
                total++;
        }
        cr_assert_eq(total, pa.all.n);
}

Test(preauth, eviction_log_lines_are_rate_limited) {
        uint64_t since = 0;
        cr_assert(sf_preauth_note_eviction(&pa, 1000, &since));
        cr_assert_eq(since, 1);
        for (int i = 0; i < 50; i++)
                cr_assert_not(sf_preauth_note_eviction(&pa, 2000 + (uint64_t)i, &since));
        cr_assert(sf_preauth_note_eviction(&pa, 61000, &since));
        cr_assert_eq(since, 51);
        cr_assert_eq(pa.evicted, 52);
}
