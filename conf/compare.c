#include "conf/compare.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Compared key by key, not with memcmp: the struct has padding and pointers to the heap. */

static bool str_equal(const char *a, const char *b) {
        return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

bool sf_conf_forward_listen_equal(const struct sf_forward *a, const struct sf_forward *b) {
        return sf_endpoint_equal(&a->listen, &b->listen) && a->mode == b->mode && a->owner_set == b->owner_set &&
               (!a->owner_set || a->owner == b->owner) && a->group_set == b->group_set &&
               (!a->group_set || a->group == b->group) && a->accounts_elsewhere == b->accounts_elsewhere &&
               strcmp(a->owner_name, b->owner_name) == 0 && strcmp(a->group_name, b->group_name) == 0;
}

bool sf_conf_forward_equal(const struct sf_forward *a, const struct sf_forward *b) {
        if (strcmp(a->name, b->name) != 0 || !sf_conf_forward_listen_equal(a, b) ||
            strcmp(a->listen.text, b->listen.text) != 0 || a->n_connect != b->n_connect)
                return false;
        for (size_t i = 0; i < a->n_connect; i++)
                if (strcmp(a->connect[i].text, b->connect[i].text) != 0)
                        return false;
        if (a->n_allow_uid != b->n_allow_uid || a->n_allow_gid != b->n_allow_gid ||
            strcmp(a->allow_uid_names, b->allow_uid_names) != 0 || strcmp(a->allow_gid_names, b->allow_gid_names) != 0)
                return false;
        for (size_t i = 0; i < a->n_allow_uid; i++)
                if (a->allow_uid[i] != b->allow_uid[i])
                        return false;
        for (size_t i = 0; i < a->n_allow_gid; i++)
                if (a->allow_gid[i] != b->allow_gid[i])
                        return false;
        return a->auth == b->auth && a->allow_insecure == b->allow_insecure && str_equal(a->token_file, b->token_file) &&
               a->connect_auth == b->connect_auth && a->connect_auth_set == b->connect_auth_set &&
               strcmp(a->service, b->service) == 0 && a->service_set == b->service_set && a->link == b->link &&
               a->keepalive_ms == b->keepalive_ms && strcmp(a->alias, b->alias) == 0 && strcmp(a->env, b->env) == 0 &&
               a->env_format == b->env_format && a->max_conns == b->max_conns && a->max_links == b->max_links && a->preauth_max == b->preauth_max &&
               a->connect_timeout_ms == b->connect_timeout_ms && a->handshake_timeout_ms == b->handshake_timeout_ms &&
               a->idle_timeout_ms == b->idle_timeout_ms;
}

int sf_conf_forward_copy_resolved(struct sf_forward *dst, const struct sf_forward *src, const struct sf_conf *c) {
        *dst = *src;
        dst->origin.where = NULL;
        dst->connect = NULL;
        dst->token_file = NULL;
        const char *token = sf_conf_token_file(c, src);
        if ((src->origin.where && !(dst->origin.where = strdup(src->origin.where))) ||
            (token && !(dst->token_file = strdup(token))))
                goto fail;
        if (src->n_connect) {
                dst->connect = malloc(src->n_connect * sizeof *dst->connect);
                if (!dst->connect)
                        goto fail;
                memcpy(dst->connect, src->connect, src->n_connect * sizeof *dst->connect);
        }
        return 0;
fail:
        sf_conf_forward_clear(dst);
        return -ENOMEM;
}
