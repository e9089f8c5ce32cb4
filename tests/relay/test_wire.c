/* What attach sends link --stdio (relay/attach/wire.h): the listen half of every forward as
 * configuration text, which the far end loads (sf_conf_load_text) into the same keys. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "relay/attach/wire.h"

/* A host's forwards through the wire and back, as the far end reads them. */
static void round_trip(struct sf_conf *host, struct sf_conf *far) {
        char *text;
        size_t len;
        cr_assert_eq(sf_attach_wire_text(host, &text, &len), 0);
        cr_assert_eq(strlen(text), len);
        sf_conf_init(far);
        cr_assert_eq(sf_conf_load_text(far, "attach", text, len), 0, "the far end refused:\n%s", text);
        cr_assert_str_eq(far->file, "attach");
        free(text);
}

/* A host configuration as attach loads it: its listen endpoints are the far end's. */
static void host_init(struct sf_conf *host) {
        sf_conf_init(host);
        host->listen_elsewhere = true;
}

Test(wire, listen_keys_round_trip) {
        struct sf_conf host, far;
        host_init(&host);
        cr_assert_eq(sf_conf_add_spec(&host, "agent:unix:/run/x/agent.sock=unix:/host/agent.sock|tcp:127.0.0.1:7,"
                                             "mode=0600,owner=1000,group=1001,alias=/run/ward/agent.sock,"
                                             "allow-uid=1000 1002,allow-gid=5,max-conns=7,idle-timeout=90s"),
                     0);
        cr_assert_eq(sf_conf_add_spec(&host, "web:tcp:127.0.0.1:8080=unix:/host/web.sock,connect-timeout=250ms"), 0);
        cr_assert_eq(sf_conf_validate(&host), 0);
        round_trip(&host, &far);
        cr_assert_eq(far.n_forwards, 2);
        const struct sf_forward *a = &far.forwards[0], *w = &far.forwards[1];
        cr_assert_str_eq(a->name, "agent");
        cr_assert_str_eq(a->listen.path, "/run/x/agent.sock");
        cr_assert_eq(a->n_connect, 0, "the far end's candidates are the link, not the host's");
        cr_assert_eq(a->mode, 0600);
        cr_assert(a->owner_set && a->owner == 1000);
        cr_assert(a->group_set && a->group == 1001);
        cr_assert_str_eq(a->alias, "/run/ward/agent.sock");
        cr_assert_eq(a->n_allow_uid, 2);
        cr_assert_eq(a->allow_uid[1], 1002);
        cr_assert_eq(a->n_allow_gid, 1);
        cr_assert_eq(a->max_conns, 7);
        cr_assert_eq(a->idle_timeout_ms, 90000);
        cr_assert_str_eq(w->name, "web");
        cr_assert_eq(w->listen.kind, SF_EP_TCP);
        cr_assert_eq(w->listen.port, 8080);
        cr_assert(!w->owner_set && !w->group_set);
        cr_assert_eq(w->connect_timeout_ms, 250);
        sf_conf_free(&host);
        sf_conf_free(&far);
}

Test(wire, a_path_with_spaces_and_quotes) {
        struct sf_conf host, far;
        char dir[] = "/tmp/sf-wire-XXXXXX";
        cr_assert_not_null(mkdtemp(dir));
        char path[256];
        snprintf(path, sizeof path, "%s/conf", dir);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs("[odd]\nlisten = \"unix:/run/Group Containers/a \\\"b\\\".sock\"\nconnect = unix:/host/x.sock\n", f);
        fclose(f);
        host_init(&host);
        cr_assert_eq(sf_conf_load(&host, path), 0);
        unlink(path);
        rmdir(dir);
        round_trip(&host, &far);
        cr_assert_str_eq(far.forwards[0].listen.path, "/run/Group Containers/a \"b\".sock");
        sf_conf_free(&host);
        sf_conf_free(&far);
}

/* The accounts are the container's: names go over as written, for the far end to look up
 * there (this system may not know them, or on Windows know no accounts at all). */
Test(wire, account_names_are_looked_up_by_the_far_end) {
        struct sf_conf host, far;
        host_init(&host);
        cr_assert_eq(sf_conf_add_spec(&host, "db:unix:/run/postgresql/.s.PGSQL.5432=unix:/host/pg.sock,"
                                             "owner=sf-no-such-user-here,group=root,allow-uid=1000 app,allow-gid=0"),
                     0);
        cr_assert_eq(sf_conf_validate(&host), 0);
        char *text;
        size_t len;
        cr_assert_eq(sf_attach_wire_text(&host, &text, &len), 0);
        cr_assert_not_null(strstr(text, "owner = sf-no-such-user-here\n"), "%s", text);
        cr_assert_not_null(strstr(text, "group = root\n"), "%s", text);
        cr_assert_not_null(strstr(text, "allow-uid = 1000 app\n"), "%s", text);
        cr_assert_not_null(strstr(text, "allow-gid = 0\n"), "%s", text);
        free(text);
        /* The far end resolves what it knows and refuses what it does not, naming it. */
        sf_conf_free(&host);
        host_init(&host);
        cr_assert_eq(
                sf_conf_add_spec(&host, "a:unix:/run/a.sock=unix:/host/a.sock,owner=0,group=root,allow-uid=root 7"), 0);
        cr_assert_eq(sf_conf_validate(&host), 0);
        round_trip(&host, &far);
        cr_assert(far.forwards[0].owner_set && far.forwards[0].owner == 0);
        cr_assert(far.forwards[0].group_set && far.forwards[0].group == 0);
        cr_assert_eq(far.forwards[0].n_allow_uid, 2);
        cr_assert_eq(far.forwards[0].allow_uid[0], 0);
        cr_assert_eq(far.forwards[0].allow_uid[1], 7);
        sf_conf_free(&host);
        sf_conf_free(&far);
}

/* Only the form is checked on the host: what could not be an account is refused there. */
Test(wire, an_account_that_cannot_be_is_refused_on_the_host) {
        static const char *const bad[] = {
                "a:unix:/run/a.sock=unix:/h.sock,owner=",
                "a:unix:/run/a.sock=unix:/h.sock,owner=a/b",
                "a:unix:/run/a.sock=unix:/h.sock,owner=-x",
                "a:unix:/run/a.sock=unix:/h.sock,group=99999999999",
                "a:unix:/run/a.sock=unix:/h.sock,allow-uid=app \"x\"",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                struct sf_conf host;
                host_init(&host);
                cr_expect_lt(sf_conf_add_spec(&host, bad[i]), 0, "accepted: %s", bad[i]);
                sf_conf_free(&host);
        }
}
