/* The checks that need the whole configuration: keys a forward lacks, what two forwards may
 * not share, and the policy on listeners open to the network. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "conf/conf_int.h"
#include "conf/preset.h"

/* Checks of one forward on its own; returns how many errors there were. A preset that found no
 * connect default (preset_ok false) said why already. */
static unsigned check_forward(const struct sf_conf *c, const struct sf_forward *f, bool preset_ok) {
        unsigned n = 0;
        char why[MSG_MAX];
        if (f->listen_set && !c->listen_elsewhere && sf_endpoint_supported(&f->listen, why, sizeof why) < 0) {
                sf_conf_forward_error(f, "listen", "%s", why);
                n++;
        }

        if (!f->listen_set) {
                sf_conf_forward_error(f, NULL, "missing listen, expected listen = ENDPOINT");
                n++;
        }
        if (f->n_connect == 0 && preset_ok) {
                sf_conf_forward_error(f, NULL, "missing connect, expected connect = ENDPOINT [ENDPOINT...]");
                n++;
        }
        if (f->listen_set && f->listen.kind == SF_EP_TCP && !sf_endpoint_is_loopback(&f->listen) &&
            f->auth == SF_AUTH_NONE && !f->allow_insecure) {
                sf_conf_forward_error(f, "listen",
                                      "%s accepts connections from the network without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes",
                                      f->listen.text);
                n++;
        }
        /* The text decides for vsock: any CID that reaches the port is another machine. */
        if (f->listen_set && f->listen.kind == SF_EP_VSOCK && f->auth == SF_AUTH_NONE && !f->allow_insecure) {
                sf_conf_forward_error(f, "listen",
                                      "%s accepts connections from other machines (VMs or the host) without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes",
                                      f->listen.text);
                n++;
        }
        if (f->auth == SF_AUTH_TOKEN && !sf_conf_token_file(c, f)) {
                sf_conf_forward_error(f, "auth",
                                      "auth = token needs a token file, expected token-file = PATH in [%s] or in [%s] (sockferry keygen -o PATH writes one)",
                                      f->name, GLOBAL_SECTION);
                n++;
        }
        for (size_t k = 0; f->listen_set && k < f->n_connect; k++)
                if (sf_endpoint_equal(&f->listen, &f->connect[k])) {
                        sf_conf_forward_error(f, "connect", "%s is the listen endpoint of this forward, expected another endpoint (it would connect to itself)",
                                              f->connect[k].text);
                        n++;
                }
        if (f->alias[0] && f->listen_set && f->listen.kind == SF_EP_UNIX && strcmp(f->alias, f->listen.path) == 0) {
                sf_conf_forward_error(f, "alias", "%s is the listen path itself, expected the other path clients connect to",
                                      f->alias);
                n++;
        }
        /* allow-uid/allow-gid check SO_PEERCRED, which only unix sockets carry; systemd and fd
         * listeners may well be unix sockets, so only the certain cases are refused. */
        if (f->listen_set && (f->listen.kind == SF_EP_TCP || f->listen.kind == SF_EP_VSOCK)) {
                if (f->n_allow_uid) {
                        sf_conf_forward_error(f, "allow-uid", "%s has no peer credentials, expected a unix: listen endpoint for allow-uid",
                                              f->listen.text);
                        n++;
                }
                if (f->n_allow_gid) {
                        sf_conf_forward_error(f, "allow-gid", "%s has no peer credentials, expected a unix: listen endpoint for allow-gid",
                                              f->listen.text);
                        n++;
                }
        }
        return n;
}

/* What no two forwards may share, each found in O(1): the first forward by listen endpoint,
 * by alias, by variable, and by service on a listen endpoint. */
struct shared {
        struct sf_conf_index listen, alias, env, service;
};

struct listen_service {
        const struct sf_endpoint *ep;
        const char *service;
};

static uint64_t endpoint_hash(const struct sf_endpoint *ep) {
        uint64_t h = sf_conf_hash(SF_CONF_HASH_START, &ep->kind, sizeof ep->kind, false);
        /* What sf_endpoint_equal() compares, folded where it ignores case. */
        switch (ep->kind) {
        case SF_EP_UNIX:
        case SF_EP_ABSTRACT:
        case SF_EP_SYSTEMD:
                return sf_conf_hash(h, ep->path, strlen(ep->path), false);
        case SF_EP_TCP:
                h = sf_conf_hash(h, &ep->port, sizeof ep->port, false);
                return sf_conf_hash(h, ep->host, strlen(ep->host), true);
        case SF_EP_VSOCK:
                h = sf_conf_hash(h, &ep->port, sizeof ep->port, false);
                return sf_conf_hash(h, &ep->cid, sizeof ep->cid, false);
        case SF_EP_FD:
                return sf_conf_hash(h, &ep->fd, sizeof ep->fd, false);
        case SF_EP_NPIPE:
                return sf_conf_hash(h, ep->pipe, strlen(ep->pipe), true);
        }
        return h;
}

static uint64_t string_hash(const char *s) {
        return sf_conf_hash(SF_CONF_HASH_START, s, strlen(s), false);
}

/* The forward in an index slot, or NULL when it is empty. */
static const struct sf_forward *in_slot(const struct sf_forward *forwards, const size_t *slot) {
        return *slot ? &forwards[*slot - 1] : NULL;
}

static bool same_listen(const struct sf_forward *f, const void *ep) {
        return f->listen_set && sf_endpoint_equal(&f->listen, ep);
}

static bool same_alias(const struct sf_forward *f, const void *alias) {
        return strcmp(f->alias, alias) == 0;
}

static bool same_env(const struct sf_forward *f, const void *env) {
        return strcmp(f->env, env) == 0;
}

static bool same_service(const struct sf_forward *f, const void *key) {
        const struct listen_service *k = key;
        return same_listen(f, k->ep) && strcmp(f->service, k->service) == 0;
}

static bool same_token(const struct sf_conf *c, const struct sf_forward *a, const struct sf_forward *b) {
        const char *ta = sf_conf_token_file(c, a), *tb = sf_conf_token_file(c, b);
        return ta && tb && strcmp(ta, tb) == 0;
}

/* b shares the listen endpoint of a (the first forward on it): allowed for services of an
 * authenticated network listener (doc/PROTOCOL.md "Services"), which read one token and greet
 * before they know the service, so the keys that act before that must agree. */
static unsigned check_service(const struct sf_conf *c, const struct sf_forward *a, const struct sf_forward *b) {
        if (!sf_endpoint_is_network(&b->listen)) {
                sf_conf_forward_error(b, "listen", "%s is also the listen endpoint of [%s] (%.*s), expected one forward per listen endpoint",
                                      b->listen.text, a->name, sf_conf_place_len(a), a->origin.where);
                return 1;
        }
        if (a->auth != SF_AUTH_TOKEN || b->auth != SF_AUTH_TOKEN) {
                sf_conf_forward_error(b, "listen",
                                      "%s is also the listen endpoint of [%s] (%.*s), expected one forward per listen endpoint, or services sharing it, each with auth = token",
                                      b->listen.text, a->name, sf_conf_place_len(a), a->origin.where);
                return 1;
        }
        unsigned n = 0;
        if (!same_token(c, a, b)) {
                sf_conf_forward_error(b, "token-file",
                                      "[%s] (%.*s) offers its service on %s with another token file, expected the services of one listen endpoint to share a token",
                                      a->name, sf_conf_place_len(a), a->origin.where, b->listen.text);
                n++;
        }
        if (a->handshake_timeout_ms != b->handshake_timeout_ms || a->preauth_max != b->preauth_max ||
            a->max_links != b->max_links) {
                sf_conf_forward_error(b,
                                      a->handshake_timeout_ms != b->handshake_timeout_ms ? "handshake-timeout"
                                      : a->preauth_max != b->preauth_max                 ? "preauth-max"
                                                                                         : "max-links",
                                      "differs from [%s] (%.*s), which listens on %s too, expected the same value for every service of a listen endpoint (they apply before the service is known)",
                                      a->name, sf_conf_place_len(a), a->origin.where, b->listen.text);
                n++;
        }
        return n;
}

/* Checks of forward j against the earlier ones, then adds its keys to the index; an error
 * goes to forward j and names the first earlier forward it clashes with. */
static unsigned check_shared(const struct sf_conf *c, const struct shared *sh, size_t j) {
        const struct sf_forward *b = &c->forwards[j], *fw = c->forwards, *a;
        size_t *listen = NULL, *alias = NULL, *env = NULL, *s;
        unsigned n = 0;

        if (b->listen_set) {
                listen = sf_conf_index_slot(&sh->listen, endpoint_hash(&b->listen), fw, same_listen, &b->listen);
                if ((a = in_slot(fw, listen)))
                        n += check_service(c, a, b);
                struct listen_service key = { &b->listen, b->service };
                s = sf_conf_index_slot(&sh->service, sf_conf_hash(endpoint_hash(&b->listen), b->service, strlen(b->service), false),
                                       fw, same_service, &key);
                if (a && (a = in_slot(fw, s))) {
                        sf_conf_forward_error(b, "service", "%s is also the service of [%s] (%.*s) on %s, expected a service name of its own (service = NAME)",
                                              b->service, a->name, sf_conf_place_len(a), a->origin.where, b->listen.text);
                        n++;
                }
                if (!*s)
                        *s = j + 1;
        }
        if (b->alias[0]) {
                alias = sf_conf_index_slot(&sh->alias, string_hash(b->alias), fw, same_alias, b->alias);
                if ((a = in_slot(fw, alias))) {
                        sf_conf_forward_error(b, "alias", "%s is also the alias of [%s] (%.*s), expected one forward per alias", b->alias,
                                              a->name, sf_conf_place_len(a), a->origin.where);
                        n++;
                }
                /* An alias is a path: the listen endpoint it would clash with is unix:ALIAS. */
                struct sf_endpoint path = { .kind = SF_EP_UNIX };
                snprintf(path.path, sizeof path.path, "%s", b->alias);
                s = sf_conf_index_slot(&sh->listen, endpoint_hash(&path), fw, same_listen, &path);
                if ((a = in_slot(fw, s))) {
                        sf_conf_forward_error(b, "alias", "%s is the listen path of [%s] (%.*s), expected a path no forward listens on",
                                              b->alias, a->name, sf_conf_place_len(a), a->origin.where);
                        n++;
                }
        }
        if (b->listen_set && b->listen.kind == SF_EP_UNIX) {
                s = sf_conf_index_slot(&sh->alias, string_hash(b->listen.path), fw, same_alias, b->listen.path);
                if ((a = in_slot(fw, s))) {
                        sf_conf_forward_error(b, "listen", "%s is the alias of [%s] (%.*s), expected a path of its own", b->listen.path,
                                              a->name, sf_conf_place_len(a), a->origin.where);
                        n++;
                }
        }
        if (b->env[0]) {
                env = sf_conf_index_slot(&sh->env, string_hash(b->env), fw, same_env, b->env);
                if ((a = in_slot(fw, env))) {
                        sf_conf_forward_error(b, "env", "%s is also set by [%s] (%.*s), expected one forward per variable", b->env, a->name,
                                              sf_conf_place_len(a), a->origin.where);
                        n++;
                }
        }
        /* The first forward with a key stays the one that later clashes name. */
        if (listen && !*listen)
                *listen = j + 1;
        if (alias && !*alias)
                *alias = j + 1;
        if (env && !*env)
                *env = j + 1;
        return n;
}

int sf_conf_validate(struct sf_conf *c) {
        struct shared sh = { 0 };
        unsigned n = 0;
        int r = 0;

        if (sf_conf_index_init(&sh.listen, c->n_forwards) < 0 || sf_conf_index_init(&sh.alias, c->n_forwards) < 0 ||
            sf_conf_index_init(&sh.env, c->n_forwards) < 0 || sf_conf_index_init(&sh.service, c->n_forwards) < 0) {
                sf_log_error("%s%scannot check the configuration: %s", c->file, c->file[0] ? ": " : "", strerror(ENOMEM));
                r = -ENOMEM;
                goto out;
        }
        for (size_t j = 0; j < c->n_forwards; j++) {
                /* Every key of the forward is known here, so a preset's defaults fill only what
                 * none of them set, whatever their order. */
                char why[MSG_MAX];
                bool preset_ok = sf_conf_preset_apply(&c->forwards[j], why, sizeof why) == 0;
                if (!preset_ok) {
                        sf_conf_forward_error(&c->forwards[j], "preset", "%s", why);
                        n++;
                }
                sf_conf_forward_resolve(&c->forwards[j]);
                const struct sf_forward *b = &c->forwards[j];
                n += check_forward(c, b, preset_ok);
                n += check_shared(c, &sh, j);
                if (c->control_set && b->listen_set && sf_endpoint_equal(&c->control, &b->listen)) {
                        /* Only the config file sets control, but no line is kept for it. */
                        sf_log_error("%s%s[%s] control: %s is also the listen endpoint of [%s] (%.*s), expected a socket of its own",
                                     c->file, c->file[0] ? ": " : "", GLOBAL_SECTION, c->control.text, b->name,
                                     sf_conf_place_len(b), b->origin.where);
                        n++;
                }
        }
        if (n)
                r = -EINVAL;
out:
        sf_conf_index_free(&sh.listen);
        sf_conf_index_free(&sh.alias);
        sf_conf_index_free(&sh.env);
        sf_conf_index_free(&sh.service);
        return r;
}
