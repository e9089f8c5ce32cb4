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

Test(wire, listen_keys_round_trip) {
        struct sf_conf host, far;
        sf_conf_init(&host);
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
        sf_conf_init(&host);
        cr_assert_eq(sf_conf_load(&host, path), 0);
        unlink(path);
        rmdir(dir);
        round_trip(&host, &far);
        cr_assert_str_eq(far.forwards[0].listen.path, "/run/Group Containers/a \"b\".sock");
        sf_conf_free(&host);
        sf_conf_free(&far);
}
