#include "relay/attach/wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct text {
        char *buf;
        size_t len, cap;
        bool failed;
};

__attribute__((format(printf, 2, 3))) static void add(struct text *t, const char *fmt, ...) {
        if (t->failed)
                return;
        for (;;) {
                va_list ap;
                va_start(ap, fmt);
                int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
                va_end(ap);
                if (n < 0) {
                        t->failed = true;
                        return;
                }
                if (t->buf && t->len + (size_t)n < t->cap) {
                        t->len += (size_t)n;
                        return;
                }
                size_t cap = t->cap ? t->cap * 2 : 4096;
                while (cap <= t->len + (size_t)n)
                        cap *= 2;
                char *b = realloc(t->buf, cap);
                if (!b) {
                        t->failed = true;
                        return;
                }
                t->buf = b;
                t->cap = cap;
        }
}

/* A value between double quotes, with the configuration's \" and \\ (a path with spaces). */
static void add_quoted(struct text *t, const char *key, const char *v) {
        add(t, "%s = \"", key);
        for (const char *p = v; *p; p++)
                add(t, "%s%c", *p == '"' || *p == '\\' ? "\\" : "", *p);
        add(t, "\"\n");
}

int sf_attach_wire_text(const struct sf_conf *c, char **out, size_t *len) {
        struct text t = { 0 };
        add(&t, "; the listen sections of sockferry attach\n");
        for (size_t i = 0; i < c->n_forwards; i++) {
                const struct sf_forward *f = &c->forwards[i];
                add(&t, "[%s]\n", f->name);
                add_quoted(&t, "listen", f->listen.text);
                add(&t, "mode = %04o\n", (unsigned)f->mode);
                /* The far end looks the accounts up in the container (conf.h: accounts_elsewhere). */
                if (f->owner_set)
                        add(&t, "owner = %s\n", f->owner_name);
                if (f->group_set)
                        add(&t, "group = %s\n", f->group_name);
                if (f->alias[0])
                        add_quoted(&t, "alias", f->alias);
                if (f->n_allow_uid)
                        add(&t, "allow-uid = %s\n", f->allow_uid_names);
                if (f->n_allow_gid)
                        add(&t, "allow-gid = %s\n", f->allow_gid_names);
                add(&t, "max-conns = %u\n", f->max_conns);
                add(&t, "connect-timeout = %llums\n", (unsigned long long)f->connect_timeout_ms);
                if (f->idle_timeout_ms)
                        add(&t, "idle-timeout = %llums\n", (unsigned long long)f->idle_timeout_ms);
        }
        if (t.failed) {
                free(t.buf);
                return -ENOMEM;
        }
        *out = t.buf;
        *len = t.len;
        return 0;
}
