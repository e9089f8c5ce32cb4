/* The checks that need the whole configuration: keys a forward lacks, what two forwards may
 * not share, and the policy on listeners open to the network. */
#include <errno.h>
#include <string.h>

#include "conf/conf_int.h"

/* Checks of one forward on its own; returns how many errors there were. */
static unsigned check_forward(const struct sf_conf *c, const struct sf_forward *f) {
        unsigned n = 0;

        if (!f->listen_set) {
                sf_conf_forward_error(f, NULL, "missing listen, expected listen = ENDPOINT");
                n++;
        }
        if (f->n_connect == 0) {
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

/* Checks of a forward b against an earlier one a; the error goes to b. */
static unsigned check_pair(const struct sf_forward *a, const struct sf_forward *b) {
        unsigned n = 0;

        if (a->listen_set && b->listen_set && sf_endpoint_equal(&a->listen, &b->listen)) {
                sf_conf_forward_error(b, "listen", "%s is also the listen endpoint of [%s] (%.*s), expected one forward per listen endpoint",
                                      b->listen.text, a->name, sf_conf_place_len(a), a->origin.where);
                n++;
        }
        if (b->alias[0] && strcmp(a->alias, b->alias) == 0) {
                sf_conf_forward_error(b, "alias", "%s is also the alias of [%s] (%.*s), expected one forward per alias", b->alias,
                                      a->name, sf_conf_place_len(a), a->origin.where);
                n++;
        }
        if (b->alias[0] && a->listen_set && a->listen.kind == SF_EP_UNIX && strcmp(a->listen.path, b->alias) == 0) {
                sf_conf_forward_error(b, "alias", "%s is the listen path of [%s] (%.*s), expected a path no forward listens on",
                                      b->alias, a->name, sf_conf_place_len(a), a->origin.where);
                n++;
        }
        if (a->alias[0] && b->listen_set && b->listen.kind == SF_EP_UNIX && strcmp(b->listen.path, a->alias) == 0) {
                sf_conf_forward_error(b, "listen", "%s is the alias of [%s] (%.*s), expected a path of its own", b->listen.path,
                                      a->name, sf_conf_place_len(a), a->origin.where);
                n++;
        }
        if (b->env[0] && strcmp(a->env, b->env) == 0) {
                sf_conf_forward_error(b, "env", "%s is also set by [%s] (%.*s), expected one forward per variable", b->env, a->name,
                                      sf_conf_place_len(a), a->origin.where);
                n++;
        }
        return n;
}

int sf_conf_validate(struct sf_conf *c) {
        unsigned n = 0;

        for (size_t j = 0; j < c->n_forwards; j++) {
                sf_conf_forward_resolve(&c->forwards[j]);
                const struct sf_forward *b = &c->forwards[j];
                n += check_forward(c, b);
                for (size_t i = 0; i < j; i++)
                        n += check_pair(&c->forwards[i], b);
                if (c->control_set && b->listen_set && sf_endpoint_equal(&c->control, &b->listen)) {
                        /* Only the config file sets control, but no line is kept for it. */
                        sf_log_error("%s%s[%s] control: %s is also the listen endpoint of [%s] (%.*s), expected a socket of its own",
                                     c->file, c->file[0] ? ": " : "", GLOBAL_SECTION, c->control.text, b->name,
                                     sf_conf_place_len(b), b->origin.where);
                        n++;
                }
        }
        return n ? -EINVAL : 0;
}
