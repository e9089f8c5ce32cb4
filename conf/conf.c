/* The configuration object: every default, the array of forwards, and the messages that name
 * where a forward was defined. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_int.h"
#include "conf/log.h"

/* Every default, in one place: the globals, a forward's keys, and below, in
 * sf_conf_forward_resolve(), the defaults that follow other keys. doc/sockferry.conf.5.scd
 * states each of them. */
static const struct sf_conf conf_defaults = {
        .log_level = SF_LOG_INFO,
        .log_format = SF_LOG_TEXT,
        .drain_timeout_ms = 10000,
        .seccomp = true,
};

static const struct sf_forward forward_defaults = {
        .auth = SF_AUTH_NONE,
        .env_format = SF_ENV_PATH,
        .mode = 0660,
        .max_conns = 1024,
        .max_links = 64,
        .connect_timeout_ms = 5000,
        .handshake_timeout_ms = 5000,
        .idle_timeout_ms = 0, /* none */
        .link = SF_LINK_SHARED,
        .keepalive_ms = 15000,
};

void sf_conf_init(struct sf_conf *c) {
        *c = conf_defaults;
}

void sf_conf_forward_init(struct sf_forward *f) {
        *f = forward_defaults;
}

void sf_conf_forward_clear(struct sf_forward *f) {
        free(f->origin.where);
        free(f->connect);
        free(f->token_file);
        *f = forward_defaults;
}

int sf_conf_forward_origin(struct sf_forward *f, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        char *where = n < 0 ? NULL : malloc((size_t)n + 1);
        if (!where)
                return -ENOMEM;
        va_start(ap, fmt);
        vsnprintf(where, (size_t)n + 1, fmt, ap);
        va_end(ap);
        free(f->origin.where);
        f->origin.where = where;
        return 0;
}

void sf_conf_forward_resolve(struct sf_forward *f) {
        /* Four handshakes in flight per connection the forward serves, so that one source (a
         * quarter of the budget) may have as many as the forward serves connections. */
        if (!f->preauth_max)
                f->preauth_max = 4 * f->max_conns;
        if (!f->service_set)
                snprintf(f->service, sizeof f->service, "%s", f->name);
        /* A host relay authenticates its listener; its upstream (a local service, a dev
         * server on TCP) is dialled plainly unless it is itself a relay (connect-auth). */
        if (!f->connect_auth_set)
                f->connect_auth = f->listen_set && sf_endpoint_is_network(&f->listen) ? SF_AUTH_NONE : f->auth;
}

bool sf_conf_name_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n >= SF_NAME_MAX)
                return false;
        return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

struct sf_forward *sf_conf_forward_find(const struct sf_conf *c, const char *name) {
        for (size_t i = 0; i < c->n_forwards; i++)
                if (strcmp(c->forwards[i].name, name) == 0)
                        return &c->forwards[i];
        return NULL;
}

int sf_conf_forward_add(struct sf_conf *c, struct sf_forward *f) {
        size_t n = c->n_forwards;
        /* The array doubles when it holds a power of two, so that n forwards cost O(n) copies;
         * its size follows from n_forwards alone. */
        if ((n & (n - 1)) == 0) {
                struct sf_forward *a = realloc(c->forwards, (n ? 2 * n : 1) * sizeof *a);
                if (!a)
                        return -ENOMEM;
                c->forwards = a;
        }
        c->forwards[c->n_forwards++] = *f;
        sf_conf_forward_init(f);
        return 0;
}

static bool is_from_spec(const struct sf_forward *f) {
        return strncmp(f->origin.where, "-F '", 4) == 0;
}

int sf_conf_place_len(const struct sf_forward *f) {
        size_t n = strlen(f->origin.where);
        size_t tail = strlen(f->name) + 4; /* ": [" name "]" */
        if (!is_from_spec(f) && n > tail)
                return (int)(n - tail);
        return (int)n;
}

/* A file origin "FILE:LINE: [name]" reads well followed directly by the key, an -F origin
 * "-F 'SPEC'" needs a colon first. */
void sf_conf_forward_error(const struct sf_forward *f, const char *key, const char *fmt, ...) {
        char msg[MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (!key)
                sf_log_error("%s: %s", f->origin.where, msg);
        else
                sf_log_error("%s%s %s: %s", f->origin.where, is_from_spec(f) ? ":" : "", key, msg);
}

const char *sf_conf_token_file(const struct sf_conf *c, const struct sf_forward *f) {
        if (f && f->token_file && f->token_file[0])
                return f->token_file;
        return c->token_file[0] ? c->token_file : NULL;
}

void sf_conf_free(struct sf_conf *c) {
        for (size_t i = 0; i < c->n_forwards; i++)
                sf_conf_forward_clear(&c->forwards[i]);
        free(c->forwards);
        c->forwards = NULL;
        c->n_forwards = 0;
}
