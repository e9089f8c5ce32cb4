/* The pure parts of the payload's environment: env values, the preload map, LD_PRELOAD. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "shim/env.h"

static struct sf_forward fwd(const char *name, const char *listen, const char *alias) {
        struct sf_forward f = { 0 };
        snprintf(f.name, sizeof f.name, "%s", name);
        cr_assert_eq(sf_endpoint_parse(listen, &f.listen, NULL, 0), 0, "bad test endpoint %s", listen);
        if (alias)
                snprintf(f.alias, sizeof f.alias, "%s", alias);
        return f;
}

static void value_is(const struct sf_forward *f, enum sf_env_format format, const char *want) {
        struct sf_forward g = *f;
        char buf[256];
        g.env_format = format;
        cr_assert_eq(sf_env_value(&g, buf, sizeof buf), 0, "%s", f->listen.text);
        cr_assert_str_eq(buf, want);
}

Test(env_value, unix_path_and_url) {
        struct sf_forward f = fwd("d", "unix:/run/sockferry/d.sock", NULL);
        value_is(&f, SF_ENV_PATH, "/run/sockferry/d.sock");
        value_is(&f, SF_ENV_UNIX_URL, "unix:///run/sockferry/d.sock");
}

Test(env_value, abstract_and_tcp) {
        struct sf_forward a = fwd("a", "unix:@sf-agent", NULL);
        value_is(&a, SF_ENV_PATH, "@sf-agent");
        value_is(&a, SF_ENV_UNIX_URL, "unix://@sf-agent");
        struct sf_forward t = fwd("t", "tcp:127.0.0.1:2375", NULL);
        value_is(&t, SF_ENV_PATH, "127.0.0.1:2375");
        value_is(&t, SF_ENV_UNIX_URL, "tcp://127.0.0.1:2375");
        struct sf_forward v6 = fwd("v", "tcp:[::1]:7000", NULL);
        value_is(&v6, SF_ENV_UNIX_URL, "tcp://[::1]:7000");
}

Test(env_value, no_address_and_too_long) {
        struct sf_forward s = fwd("s", "systemd:broker", NULL);
        char buf[256];
        cr_assert_eq(sf_env_value(&s, buf, sizeof buf), -EINVAL);
        struct sf_forward f = fwd("d", "unix:/run/sockferry/d.sock", NULL);
        cr_assert_eq(sf_env_value(&f, buf, 10), -ENAMETOOLONG);
}

Test(preload_map, aliases_only_in_order) {
        struct sf_forward fs[] = {
                fwd("a", "unix:/run/sockferry/a.sock", "/run/ward/a.sock"),
                fwd("b", "unix:/run/sockferry/b.sock", NULL),
                fwd("c", "tcp:127.0.0.1:7000", "/var/run/c.sock"),
        };
        struct sf_conf c = { .forwards = fs, .n_forwards = 3 };
        char buf[512];
        cr_assert(sf_env_preload_wanted(&c));
        cr_assert_eq(sf_env_preload_map(&c, buf, sizeof buf), 2);
        cr_assert_str_eq(buf, "/run/ward/a.sock=unix:/run/sockferry/a.sock;/var/run/c.sock=tcp:127.0.0.1:7000");
}

Test(preload_map, unusable_entries_left_out) {
        struct sf_forward fs[] = {
                fwd("s", "systemd:broker", "/run/ward/s.sock"),
                fwd("e", "unix:/run/sockferry/e.sock", "/run/ward/a=b.sock"),
        };
        struct sf_conf c = { .forwards = fs, .n_forwards = 2 };
        char buf[512];
        cr_assert_eq(sf_env_preload_map(&c, buf, sizeof buf), 0);
        cr_assert_str_eq(buf, "");
}

Test(preload_map, no_alias_no_preload) {
        struct sf_forward fs[] = { fwd("b", "unix:/run/sockferry/b.sock", NULL) };
        struct sf_conf c = { .forwards = fs, .n_forwards = 1 };
        char buf[8];
        cr_assert_not(sf_env_preload_wanted(&c));
        cr_assert_eq(sf_env_preload_map(&c, buf, sizeof buf), 0);
}

Test(preload_map, too_long) {
        struct sf_forward fs[] = { fwd("a", "unix:/run/sockferry/a.sock", "/run/ward/a.sock") };
        struct sf_conf c = { .forwards = fs, .n_forwards = 1 };
        char buf[16];
        cr_assert_eq(sf_env_preload_map(&c, buf, sizeof buf), -ENAMETOOLONG);
}

static void ld_is(const char *list, const char *want) {
        char buf[256];
        cr_assert_eq(sf_env_ld_preload_add(list, "/usr/lib/sockferry/sockferry-preload.so", buf, sizeof buf), 0);
        cr_assert_str_eq(buf, want, "from %s", list ? list : "(unset)");
}

Test(ld_preload, added_after_existing_entries_once) {
        ld_is(NULL, "/usr/lib/sockferry/sockferry-preload.so");
        ld_is("", "/usr/lib/sockferry/sockferry-preload.so");
        ld_is("/lib/libasan.so.8", "/lib/libasan.so.8:/usr/lib/sockferry/sockferry-preload.so");
        ld_is("/a.so /b.so", "/a.so /b.so:/usr/lib/sockferry/sockferry-preload.so");
        ld_is("/a.so:/usr/lib/sockferry/sockferry-preload.so", "/a.so:/usr/lib/sockferry/sockferry-preload.so");
        ld_is("/usr/lib/sockferry/sockferry-preload.so /b.so", "/usr/lib/sockferry/sockferry-preload.so /b.so");
        ld_is("/usr/lib/sockferry/sockferry-preload.so.old",
              "/usr/lib/sockferry/sockferry-preload.so.old:/usr/lib/sockferry/sockferry-preload.so");
}

Test(ld_preload, too_long) {
        char buf[8];
        cr_assert_eq(sf_env_ld_preload_add("/a.so", "/b.so", buf, sizeof buf), -ENAMETOOLONG);
}
