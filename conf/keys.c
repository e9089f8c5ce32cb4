/* The value of every key, the key table, and the suggestions for a mistyped key. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_int.h"
#include "conf/platform.h"
#include "conf/preset.h"
#include "conf/value.h"

/* connect candidates are separated by whitespace or '|' (the -F form cannot use spaces
 * comfortably); allow-uid/allow-gid also take ',' in the file, as names never contain one. */
#define CONNECT_SEP " \t|"
#define ALLOW_SEP " \t|,"

/* The value of a path or endpoint key, which may be double-quoted (for a path with spaces):
 * *out is v itself or its text between the quotes, in buf. */
static int unquoted(const char *v, char buf[PATH_MAX], const char **out, char *err, size_t errlen) {
        size_t len;
        return sf_conf_unquote(v, strlen(v), buf, PATH_MAX, out, &len, err, errlen);
}

/* Per-forward keys. */

int sf_conf_parse_listen(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        char buf[PATH_MAX];
        /* Whether this system can listen there is validation's to say (sf_conf_validate): the
         * listen endpoints of attach are made by the far end, in a Linux container. */
        if (unquoted(v, buf, &v, err, errlen) < 0 || sf_endpoint_parse(v, &f->listen, err, errlen) < 0)
                return -EINVAL;
        f->listen_set = true;
        return 0;
}

int sf_conf_parse_connect(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        struct sf_endpoint eps[SF_MAX_CANDIDATES];
        char buf[PATH_MAX];
        const char *item, *text;
        size_t n = 0, len, text_len;

        for (const char *p = v; (len = sf_conf_next_item(&p, CONNECT_SEP, &item)) > 0; n++) {
                if (n == SF_MAX_CANDIDATES)
                        return sf_conf_fail(err, errlen, "more than %d endpoints, expected at most %d candidates",
                                            SF_MAX_CANDIDATES, SF_MAX_CANDIDATES);
                struct sf_endpoint *ep = &eps[n];
                if (sf_conf_unquote(item, len, buf, sizeof buf, &text, &text_len, err, errlen) < 0 ||
                    sf_endpoint_parse_n(text, text_len, ep, err, errlen) < 0 || sf_endpoint_supported(ep, err, errlen) < 0)
                        return -EINVAL;
                if (ep->kind == SF_EP_SYSTEMD || ep->kind == SF_EP_FD)
                        return sf_conf_fail(err, errlen,
                                            "%s can only listen (socket activation), expected unix:, tcp: or vsock: endpoints to connect to",
                                            ep->text);
                if (ep->kind == SF_EP_VSOCK && ep->cid == SF_VSOCK_CID_ANY)
                        return sf_conf_fail(err, errlen, "%s can only listen, expected vsock:host:PORT or vsock:CID:PORT to connect to",
                                            ep->text);
        }
        if (n == 0)
                return sf_conf_fail(err, errlen, "empty value, expected one or more endpoints separated by spaces or |");
        struct sf_endpoint *a = malloc(n * sizeof *a);
        if (!a)
                return sf_conf_fail(err, errlen, "%s", strerror(ENOMEM));
        memcpy(a, eps, n * sizeof eps[0]);
        free(f->connect);
        f->connect = a;
        f->n_connect = n;
        return 0;
}

static int parse_auth(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (strcasecmp(v, "none") == 0)
                f->auth = SF_AUTH_NONE;
        else if (strcasecmp(v, "token") == 0)
                f->auth = SF_AUTH_TOKEN;
        else
                return sf_conf_fail(err, errlen, "\"%s\" is not an auth mode, expected none or token", v);
        return 0;
}

static int parse_allow_insecure(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return sf_bool_parse(v, &f->allow_insecure, err, errlen);
}

/* A relative token file would depend on the directory the relay happens to start in. The
 * path goes into buf (PATH_MAX bytes). */
/* A token file's path: "~/..." is the home directory's, as a shell would have it ("~user/..."
 * is not expanded: said so). Anything else must be absolute. */
static int parse_token_path(const char *v, char *buf, char *err, size_t errlen) {
        char unq[PATH_MAX], home_path[PATH_MAX];
        if (unquoted(v, unq, &v, err, errlen) < 0)
                return -EINVAL;
        if (v[0] == '~') {
                const char *var, *home = sf_conf_home(&var);
                if (v[1] && v[1] != '/' && v[1] != '\\')
                        return sf_conf_fail(err, errlen,
                                            "\"%s\": only ~/ (the home directory) is expanded, not ~USER, expected an absolute path such as %s",
                                            v, sf_token_path_example);
                if (!home || !sf_path_is_absolute(home))
                        return sf_conf_fail(err, errlen,
                                            "\"%s\": ~ stands for the home directory, and %s is %s, expected an absolute path such as %s",
                                            v, var, home ? "not an absolute path" : "not set", sf_token_path_example);
                if ((size_t)snprintf(home_path, sizeof home_path, "%s%s", home, v + 1) >= sizeof home_path)
                        return sf_conf_fail(err, errlen, "path is too long (%d bytes at most), expected a shorter path",
                                            PATH_MAX - 1);
                v = home_path;
        }
        if (!sf_path_is_absolute(v))
                return sf_conf_fail(err, errlen, "\"%s\" is not an absolute path, expected an absolute path such as %s", v,
                                    sf_token_path_example);
        if (strlen(v) >= PATH_MAX)
                return sf_conf_fail(err, errlen, "path is too long (%d bytes at most), expected a shorter path", PATH_MAX - 1);
        strcpy(buf, v);
        return 0;
}

static int parse_forward_token_file(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        char path[PATH_MAX];
        if (parse_token_path(v, path, err, errlen) < 0)
                return -EINVAL;
        char *copy = strdup(path);
        if (!copy)
                return sf_conf_fail(err, errlen, "%s", strerror(ENOMEM));
        free(f->token_file);
        f->token_file = copy;
        return 0;
}

static int parse_alias(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        char buf[PATH_MAX];
        if (unquoted(v, buf, &v, err, errlen) < 0)
                return -EINVAL;
        if (v[0] != '/')
                return sf_conf_fail(err, errlen, "\"%s\" is not an absolute path, expected the absolute path clients connect to, such as /run/app.sock", v);
        /* Clients connect(2) to the alias, so it has the same limit as a listen path. */
        if (strlen(v) >= sizeof f->alias)
                return sf_conf_fail(err, errlen, "\"%s\" is too long, expected at most %zu bytes (the limit of a unix socket path)", v,
                                    sizeof f->alias - 1);
        strcpy(f->alias, v);
        return 0;
}

static int parse_env(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        static const char *const reserved[] = { "LD_PRELOAD", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES" };
        size_t n = strlen(v);

        if (n == 0)
                return sf_conf_fail(err, errlen, "empty value, expected an environment variable name such as DOCKER_HOST");
        if ((v[0] >= '0' && v[0] <= '9') ||
            strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != n)
                return sf_conf_fail(err, errlen, "\"%s\" is not an environment variable name, expected letters, digits and '_', not starting with a digit", v);
        if (n >= sizeof f->env)
                return sf_conf_fail(err, errlen, "\"%.32s...\" is too long, expected at most %zu characters", v, sizeof f->env - 1);
        /* sockferry run sets these for the payload itself; a forward must not overwrite them. */
        bool taken = strncmp(v, "SOCKFERRY_", 10) == 0;
        for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
                taken = taken || strcmp(v, reserved[i]) == 0;
        if (taken)
                return sf_conf_fail(err, errlen, "%s is set by sockferry itself, expected a variable of your own such as DOCKER_HOST", v);
        strcpy(f->env, v);
        return 0;
}

static int parse_env_format(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (strcasecmp(v, "path") == 0)
                f->env_format = SF_ENV_PATH;
        else if (strcasecmp(v, "unix-url") == 0)
                f->env_format = SF_ENV_UNIX_URL;
        else
                return sf_conf_fail(err, errlen, "\"%s\" is not an env-format, expected path or unix-url", v);
        return 0;
}

static int parse_mode(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (sf_mode_parse(v, &f->mode, err, errlen) < 0)
                return -EINVAL;
        f->mode_set = true;
        return 0;
}

static int parse_preset(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return sf_conf_preset_parse(v, &f->preset, err, errlen);
}

/* An account of the far end's (accounts_elsewhere), kept as written in out. */
static int keep_account_name(const char *v, bool users, char *out, size_t cap, char *err, size_t errlen) {
        if (sf_account_name_check(v, users, err, errlen) < 0)
                return -EINVAL;
        snprintf(out, cap, "%s", v);
        return 0;
}

static int parse_owner(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        gid_t primary;
        if (f->accounts_elsewhere ? keep_account_name(v, true, f->owner_name, sizeof f->owner_name, err, errlen) < 0
                                  : sf_user_parse(v, &f->owner, &primary, err, errlen) < 0)
                return -EINVAL;
        f->owner_set = true;
        return 0;
}

static int parse_group(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (f->accounts_elsewhere ? keep_account_name(v, false, f->group_name, sizeof f->group_name, err, errlen) < 0
                                  : sf_group_parse(v, &f->group, err, errlen) < 0)
                return -EINVAL;
        f->group_set = true;
        return 0;
}

/* allow-uid and allow-gid: a list of users or groups, each resolved to its id; for the far
 * end's accounts (names non-NULL), each checked and the list kept as names, space-separated. */
static int parse_id_list(const char *v, bool users, uint32_t *ids, size_t *n_ids, char *names, size_t names_cap,
                         char *err, size_t errlen) {
        uint32_t tmp[SF_MAX_ALLOW];
        char name[256];
        const char *item;
        size_t n = 0, len, used = 0;

        for (const char *p = v; (len = sf_conf_next_item(&p, ALLOW_SEP, &item)) > 0; n++) {
                if (n == SF_MAX_ALLOW)
                        return sf_conf_fail(err, errlen, "more than %d entries, expected at most %d %s", SF_MAX_ALLOW,
                                            SF_MAX_ALLOW, users ? "users" : "groups");
                if (len >= sizeof name)
                        return sf_conf_fail(err, errlen, "\"%.32s...\" is too long, expected a %s", item,
                                            users ? "user name or a numeric UID" : "group name or a numeric GID");
                memcpy(name, item, len);
                name[len] = '\0';
                if (names) {
                        if (sf_account_name_check(name, users, err, errlen) < 0)
                                return -EINVAL;
                        /* SF_MAX_ALLOW names of at most 255 bytes may not all fit. */
                        int w = snprintf(names + used, names_cap - used, "%s%s", n ? " " : "", name);
                        if (w < 0 || (size_t)w >= names_cap - used)
                                return sf_conf_fail(err, errlen, "the %s names are longer than %zu bytes in all",
                                                    users ? "user" : "group", names_cap - 1);
                        used += (size_t)w;
                        continue;
                }
                if (users) {
                        uid_t uid;
                        gid_t primary;
                        if (sf_user_parse(name, &uid, &primary, err, errlen) < 0)
                                return -EINVAL;
                        tmp[n] = uid;
                } else {
                        gid_t gid;
                        if (sf_group_parse(name, &gid, err, errlen) < 0)
                                return -EINVAL;
                        tmp[n] = gid;
                }
        }
        if (n == 0)
                return sf_conf_fail(err, errlen, "empty value, expected one or more %s separated by spaces",
                                    users ? "user names or UIDs" : "group names or GIDs");
        if (!names)
                memcpy(ids, tmp, n * sizeof tmp[0]);
        *n_ids = n;
        return 0;
}

static int parse_allow_uid(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        _Static_assert(sizeof(uid_t) == sizeof(uint32_t), "uid_t is 32 bits");
        return parse_id_list(v, true, (uint32_t *)f->allow_uid, &f->n_allow_uid,
                             f->accounts_elsewhere ? f->allow_uid_names : NULL, sizeof f->allow_uid_names, err, errlen);
}

static int parse_allow_gid(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        _Static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t is 32 bits");
        return parse_id_list(v, false, (uint32_t *)f->allow_gid, &f->n_allow_gid,
                             f->accounts_elsewhere ? f->allow_gid_names : NULL, sizeof f->allow_gid_names, err, errlen);
}

/* A count of connections, min to a million. */
static int parse_conn_count(const char *v, uint64_t min, uint32_t *out, char *err, size_t errlen) {
        uint64_t n;
        if (sf_uint_parse(v, min, 1000000, &n, err, errlen) < 0)
                return -EINVAL;
        *out = (uint32_t)n;
        return 0;
}

static int parse_max_conns(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return parse_conn_count(v, 1, &f->max_conns, err, errlen);
}

static int parse_max_links(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return parse_conn_count(v, 1, &f->max_links, err, errlen);
}

/* At least four, so that each source may hold one (a quarter of the budget each). */
static int parse_preauth_max(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return parse_conn_count(v, 4, &f->preauth_max, err, errlen);
}

/* A zero connect or handshake timeout would fail every connection at once. */
static int parse_nonzero_duration(const char *v, uint64_t *ms, char *err, size_t errlen) {
        uint64_t t;
        if (sf_duration_parse(v, &t, err, errlen) < 0)
                return -EINVAL;
        if (t == 0)
                return sf_conf_fail(err, errlen, "\"%s\" would time out every connection at once, expected a duration above 0 such as 5s", v);
        *ms = t;
        return 0;
}

static int parse_connect_timeout(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return parse_nonzero_duration(v, &f->connect_timeout_ms, err, errlen);
}

static int parse_handshake_timeout(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return parse_nonzero_duration(v, &f->handshake_timeout_ms, err, errlen);
}

static int parse_idle_timeout(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return sf_duration_parse(v, &f->idle_timeout_ms, err, errlen);
}

static int parse_keepalive(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return sf_duration_parse(v, &f->keepalive_ms, err, errlen);
}

static int parse_connect_auth(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (strcasecmp(v, "none") == 0)
                f->connect_auth = SF_AUTH_NONE;
        else if (strcasecmp(v, "token") == 0)
                f->connect_auth = SF_AUTH_TOKEN;
        else
                return sf_conf_fail(err, errlen, "\"%s\" is not an auth mode, expected none or token", v);
        f->connect_auth_set = true;
        return 0;
}

static int parse_service(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (!sf_conf_name_valid(v))
                return sf_conf_fail(err, errlen, "\"%s\" is not a service name, " NAME_EXPECTED, v);
        snprintf(f->service, sizeof f->service, "%s", v);
        f->service_set = true;
        return 0;
}

static int parse_link(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (strcasecmp(v, "shared") == 0)
                f->link = SF_LINK_SHARED;
        else if (strcasecmp(v, "per-connection") == 0)
                f->link = SF_LINK_PER_CONNECTION;
        else
                return sf_conf_fail(err, errlen, "\"%s\" is not a link mode, expected shared or per-connection", v);
        return 0;
}

/* Global keys. */

static int parse_log_level(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        if (sf_log_level_parse(v, &c->log_level) < 0)
                return sf_conf_fail(err, errlen, "\"%s\" is not a log level, expected error, warn, info or debug", v);
        c->log_level_set = true;
        return 0;
}

static int parse_log_format(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        if (sf_log_format_parse(v, &c->log_format) < 0)
                return sf_conf_fail(err, errlen, "\"%s\" is not a log format, expected text or json", v);
        return 0;
}

static int parse_control(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        char buf[PATH_MAX];
        if (unquoted(v, buf, &v, err, errlen) < 0 || sf_endpoint_parse(v, &c->control, err, errlen) < 0 ||
            sf_endpoint_supported(&c->control, err, errlen) < 0)
                return -EINVAL;
        /* The control socket answers stats and must not be reachable from the network. */
        if (c->control.kind != SF_EP_UNIX && c->control.kind != SF_EP_ABSTRACT && c->control.kind != SF_EP_NPIPE)
                return sf_conf_fail(err, errlen, "%s is not %s", v, sf_conf_local_endpoints);
        c->control_set = true;
        return 0;
}

static int parse_global_token_file(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        _Static_assert(sizeof c->token_file == PATH_MAX, "the global token file holds any path");
        return parse_token_path(v, c->token_file, err, errlen);
}

static int parse_user(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        if (strlen(v) >= sizeof c->user)
                return sf_conf_fail(err, errlen, "\"%.32s...\" is too long, expected NAME|UID[:GROUP|GID] of at most %zu characters", v,
                                    sizeof c->user - 1);
        if (sf_user_group_parse(v, &c->uid, &c->gid, err, errlen) < 0)
                return -EINVAL;
        strcpy(c->user, v);
        c->user_set = true;
        return 0;
}

static int parse_no_new_privs(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        return sf_bool_parse(v, &c->no_new_privs, err, errlen);
}

static int parse_drain_timeout(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        return sf_duration_parse(v, &c->drain_timeout_ms, err, errlen);
}

static int parse_seccomp(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        return sf_bool_parse(v, &c->seccomp, err, errlen);
}

const struct sf_conf_key sf_conf_keys[] = {
        { "listen", sf_conf_parse_listen, NULL },
        { "connect", sf_conf_parse_connect, NULL },
        { "auth", parse_auth, NULL },
        { "allow-insecure", parse_allow_insecure, NULL },
        { "token-file", parse_forward_token_file, parse_global_token_file },
        { "alias", parse_alias, NULL },
        { "env", parse_env, NULL },
        { "env-format", parse_env_format, NULL },
        { "mode", parse_mode, NULL },
        { "owner", parse_owner, NULL },
        { "group", parse_group, NULL },
        { "allow-uid", parse_allow_uid, NULL },
        { "allow-gid", parse_allow_gid, NULL },
        { "max-conns", parse_max_conns, NULL },
        { "max-links", parse_max_links, NULL },
        { "preauth-max", parse_preauth_max, NULL },
        { "connect-timeout", parse_connect_timeout, NULL },
        { "handshake-timeout", parse_handshake_timeout, NULL },
        { "idle-timeout", parse_idle_timeout, NULL },
        { "connect-auth", parse_connect_auth, NULL },
        { "service", parse_service, NULL },
        { "link", parse_link, NULL },
        { "keepalive", parse_keepalive, NULL },
        { "preset", parse_preset, NULL },
        { "log-level", NULL, parse_log_level },
        { "log-format", NULL, parse_log_format },
        { "control", NULL, parse_control },
        { "user", NULL, parse_user },
        { "no-new-privs", NULL, parse_no_new_privs },
        { "drain-timeout", NULL, parse_drain_timeout },
        { "seccomp", NULL, parse_seccomp },
};

_Static_assert(sizeof sf_conf_keys / sizeof sf_conf_keys[0] == SF_CONF_N_KEYS, "SF_CONF_N_KEYS counts the keys");

bool sf_conf_key_in_scope(const struct sf_conf_key *k, bool global) {
        return global ? k->global != NULL : k->forward != NULL;
}

const struct sf_conf_key *sf_conf_key_find(const char *name) {
        for (size_t i = 0; i < SF_CONF_N_KEYS; i++)
                if (strcmp(sf_conf_keys[i].name, name) == 0)
                        return &sf_conf_keys[i];
        return NULL;
}

/* Optimal string alignment distance (Levenshtein plus adjacent transpositions), so that
 * both "lisen" and "lsiten" suggest listen. */
static size_t edit_distance(const char *a, const char *b) {
        enum { MAX = 32 };
        size_t d[MAX + 1][MAX + 1];
        size_t la = strlen(a), lb = strlen(b);

        if (la > MAX || lb > MAX)
                return SIZE_MAX;
        for (size_t i = 0; i <= la; i++)
                d[i][0] = i;
        for (size_t j = 0; j <= lb; j++)
                d[0][j] = j;
        for (size_t i = 1; i <= la; i++)
                for (size_t j = 1; j <= lb; j++) {
                        size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
                        size_t v = d[i - 1][j - 1] + cost;
                        if (d[i - 1][j] + 1 < v)
                                v = d[i - 1][j] + 1;
                        if (d[i][j - 1] + 1 < v)
                                v = d[i][j - 1] + 1;
                        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                                v = d[i - 2][j - 2] + 1;
                        d[i][j] = v;
                }
        return d[la][lb];
}

void sf_conf_key_describe_bad(const char *name, bool global, char *msg, size_t size) {
        const struct sf_conf_key *k = sf_conf_key_find(name);
        const char *best = NULL;
        size_t best_d = SIZE_MAX;
        bool first = true;

        msg[0] = '\0';
        if (k && global) {
                sf_conf_append(msg, size, "per-forward key in [%s], expected it in the section of a forward such as [dispatch]",
                               GLOBAL_SECTION);
                return;
        }
        if (k) {
                sf_conf_append(msg, size, "global key in a forward section, expected it in [%s]", GLOBAL_SECTION);
                return;
        }
        sf_conf_append(msg, size, "unknown key, expected one of");
        for (size_t i = 0; i < SF_CONF_N_KEYS; i++) {
                if (!sf_conf_key_in_scope(&sf_conf_keys[i], global))
                        continue;
                sf_conf_append(msg, size, "%s %s", first ? "" : ",", sf_conf_keys[i].name);
                first = false;
                /* The distance is at least the difference in length: skip what cannot be
                 * within the two edits suggested below. */
                size_t ln = strlen(name), lk = strlen(sf_conf_keys[i].name);
                if (ln > lk + 2 || lk > ln + 2)
                        continue;
                size_t d = edit_distance(name, sf_conf_keys[i].name);
                if (d < best_d) {
                        best_d = d;
                        best = sf_conf_keys[i].name;
                }
        }
        /* Two edits catch most typos; a bound below the length keeps "ab" from becoming "env". */
        if (best && best_d <= 2 && best_d < strlen(name))
                sf_conf_append(msg, size, "; did you mean %s?", best);
}
