/* Forwards compared and copied for a reload (conf/compare.h): which keys make a forward
 * "changed", which ones its listening socket depends on, and a copy that owns its memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/compare.h"
#include "helpers.h"

TestSuite(compare, .init = scratch_setup, .fini = scratch_teardown);

/* The first forward of text, after validation (defaults that follow other keys set). */
static void load_one(struct sf_conf *c, const char *text) {
        char *log;
        sf_conf_init(c);
        cr_assert_eq(load_text(c, text, &log), 0, "%s", log);
        free(log);
        cr_assert_eq(validate(c, &log), 0, "%s", log);
        free(log);
}

#define BASE "[a]\nlisten = unix:/run/a.sock\nconnect = unix:/run/up.sock tcp:127.0.0.1:7000\n"

static bool equal(const char *x, const char *y, bool *listen_equal) {
        struct sf_conf a, b;
        load_one(&a, x);
        load_one(&b, y);
        bool eq = sf_conf_forward_equal(&a.forwards[0], &b.forwards[0]);
        *listen_equal = sf_conf_forward_listen_equal(&a.forwards[0], &b.forwards[0]);
        sf_conf_free(&a);
        sf_conf_free(&b);
        return eq;
}

Test(compare, same_keys_are_equal_wherever_written) {
        bool listen;
        cr_assert(equal(BASE, "\n\n" BASE, &listen), "the line a forward is on counts");
        cr_assert(listen);
        cr_assert(equal(BASE "max-conns = 1024\n", BASE, &listen), "a default written out counts");
}

Test(compare, every_kind_of_key_makes_a_change) {
        static const char *const changes[] = {
                "connect-timeout = 2s\n", "handshake-timeout = 2s\n", "idle-timeout = 1m\n", "max-conns = 7\n",
                "preauth-max = 9\n",      "allow-uid = 1000\n",       "allow-gid = 1000\n",  "keepalive = 0\n",
                "link = per-connection\n", "service = other\n",       "env = X_SOCK\n",      "alias = /run/x.sock\n",
                "env-format = unix-url\n",
        };
        bool listen;
        for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++) {
                char text[512];
                snprintf(text, sizeof text, BASE "%s", changes[i]);
                cr_assert(!equal(BASE, text, &listen), "%s made no change", changes[i]);
                cr_assert(listen, "%s changed the listening socket", changes[i]);
        }
        cr_assert(!equal(BASE, "[a]\nlisten = unix:/run/a.sock\nconnect = tcp:127.0.0.1:7000 unix:/run/up.sock\n",
                         &listen),
                  "the candidates' order counts");
        cr_assert(!equal(BASE, "[a]\nlisten = unix:/run/a.sock\nconnect = unix:/run/up.sock\n", &listen));
        cr_assert(!equal(BASE, "[b]\nlisten = unix:/run/a.sock\nconnect = unix:/run/up.sock tcp:127.0.0.1:7000\n",
                         &listen),
                  "another name is another forward");
}

Test(compare, the_listening_socket_keys) {
        bool listen;
        cr_assert(!equal(BASE, BASE "mode = 0600\n", &listen));
        cr_assert(!listen, "mode is the socket's");
        cr_assert(!equal(BASE, BASE "group = 0\n", &listen));
        cr_assert(!listen, "group is the socket's");
        cr_assert(!equal(BASE, "[a]\nlisten = unix:/run/b.sock\nconnect = unix:/run/up.sock tcp:127.0.0.1:7000\n",
                         &listen));
        cr_assert(!listen, "another path is another socket");
}

Test(compare, token_files_compared_resolved) {
        const char *t1 = scratch_file("t1", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n");
        char g[1024], own[1024];
        snprintf(g, sizeof g, "[sockferry]\ntoken-file = %s\n[a]\nlisten = tcp:127.0.0.1:7000\nconnect = unix:/run/up.sock\n"
                 "auth = token\n", t1);
        snprintf(own, sizeof own, "[a]\nlisten = tcp:127.0.0.1:7000\nconnect = unix:/run/up.sock\nauth = token\n"
                 "token-file = %s\n", t1);
        struct sf_conf a, b;
        struct sf_forward ca, cb;
        load_one(&a, g);
        load_one(&b, own);
        cr_assert(!sf_conf_forward_equal(&a.forwards[0], &b.forwards[0]), "as written they differ");
        cr_assert_eq(sf_conf_forward_copy_resolved(&ca, &a.forwards[0], &a), 0);
        cr_assert_eq(sf_conf_forward_copy_resolved(&cb, &b.forwards[0], &b), 0);
        cr_assert(sf_conf_forward_equal(&ca, &cb), "the same file once resolved");
        cr_assert_str_eq(ca.token_file, t1);
        /* the copy owns its memory: the configuration can go */
        sf_conf_free(&a);
        sf_conf_free(&b);
        cr_assert_str_eq(ca.connect[0].text, "unix:/run/up.sock");
        cr_assert_eq(ca.n_connect, 1);
        cr_assert(sf_conf_forward_equal(&ca, &cb));
        sf_conf_forward_clear(&ca);
        sf_conf_forward_clear(&cb);
        sf_conf_forward_clear(&cb);
}
