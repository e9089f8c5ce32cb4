/* The buffer pool (relay/engine/bufpool.h): its reserve, and when it asks for the freed memory
 * to go back to the system. */
#include <criterion/criterion.h>
#include <stddef.h>

#include "relay/engine/bufpool.h"

static int trims;

static void count_trim(void) {
        trims++;
}

/* More buffers than the reserve keeps, and what freeing the rest comes to. */
#define BURST 40
#define RESERVE 4

static struct sf_bufpool *pool;
static void *out[BURST];

static void setup(void) {
        trims = 0;
        pool = sf_bufpool_new(RESERVE, count_trim);
        cr_assert_not_null(pool);
        /* The test is about a burst past the trim's threshold. */
        cr_assert_geq((BURST - RESERVE) * (size_t)SF_BUF_SIZE, SF_BUFPOOL_TRIM_AFTER);
}

static void teardown(void) {
        sf_bufpool_free(pool);
}

static void burst(void) {
        for (int i = 0; i < BURST; i++)
                cr_assert_not_null(out[i] = sf_bufpool_get(pool));
        cr_assert_eq(sf_bufpool_in_use(pool), BURST);
}

TestSuite(bufpool, .init = setup, .fini = teardown);

Test(bufpool, a_burst_is_trimmed_once_the_last_buffer_is_back) {
        burst();
        for (int i = 0; i < BURST - 1; i++)
                sf_bufpool_put(pool, out[i]);
        cr_assert_eq(trims, 0, "trimmed while a buffer was still out");
        sf_bufpool_put(pool, out[BURST - 1]);
        cr_assert_eq(trims, 1);
        cr_assert_eq(sf_bufpool_in_use(pool), 0);
        /* The next burst is trimmed too, once. */
        burst();
        for (int i = 0; i < BURST; i++)
                sf_bufpool_put(pool, out[i]);
        cr_assert_eq(trims, 2);
}

Test(bufpool, buffers_through_the_reserve_are_never_trimmed) {
        /* One connection after another, each with its two buffers: the reserve recycles them,
         * malloc never gets one back, and the pool never trims. */
        for (int i = 0; i < 10000; i++) {
                void *a = sf_bufpool_get(pool), *b = sf_bufpool_get(pool);
                cr_assert(a && b);
                sf_bufpool_put(pool, a);
                sf_bufpool_put(pool, b);
        }
        cr_assert_eq(trims, 0);
}

Test(bufpool, a_small_burst_is_not_trimmed) {
        /* Under the threshold: what malloc got back is not worth a walk of its heap. */
        size_t n = RESERVE + SF_BUFPOOL_TRIM_AFTER / SF_BUF_SIZE - 1;
        cr_assert_leq(n, BURST);
        for (size_t i = 0; i < n; i++)
                cr_assert_not_null(out[i] = sf_bufpool_get(pool));
        for (size_t i = 0; i < n; i++)
                sf_bufpool_put(pool, out[i]);
        cr_assert_eq(trims, 0);
}

Test(bufpool, no_trim_given_is_none_called) {
        struct sf_bufpool *p = sf_bufpool_new(0, NULL);
        cr_assert_not_null(p);
        for (int i = 0; i < BURST; i++)
                out[i] = sf_bufpool_get(p);
        for (int i = 0; i < BURST; i++)
                sf_bufpool_put(p, out[i]);
        cr_assert_eq(sf_bufpool_in_use(p), 0);
        sf_bufpool_free(p);
}
