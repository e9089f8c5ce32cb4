#include "conf/conf.h"

#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/platform.h"
#include "conf/value.h"

#define GLOBAL_SECTION "sockferry"
#define MSG_MAX 1024
#define SPEC_EXPECTED "expected NAME:LISTEN=CONNECT[,key=value...]"
#define NAME_EXPECTED "expected letters, digits, '_', '.' and '-', at most 63 characters"
#define SYNTAX_ERROR "syntax error, expected [section] or key = value"
/* Messages quote at most this much of a -F argument or a path, so that the log line (2 KiB)
 * still has room for what was wrong. */
#define QUOTE_MAX 512
/* A config file is a few kilobytes: anything beyond these is not one (or a hostile one), and
 * reading it must not cost more memory or time than this. */
#define CONF_FILE_MAX (1024 * 1024)
#define CONF_LINE_MAX 4096

/* connect candidates are separated by whitespace or '|' (the -F form cannot use spaces
 * comfortably); allow-uid/allow-gid also take ',' in the file, as names never contain one. */
#define CONNECT_SEP " \t|"
#define ALLOW_SEP " \t|,"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static void append(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t size, const char *fmt, ...) {
        size_t len = strlen(buf);
        va_list ap;
        if (len + 1 >= size)
                return;
        va_start(ap, fmt);
        vsnprintf(buf + len, size - len, fmt, ap);
        va_end(ap);
}

/* Cuts whitespace at both ends, in place. */
static char *trim(char *s) {
        s += strspn(s, " \t\r\n");
        size_t n = strlen(s);
        while (n > 0 && strchr(" \t\r\n", s[n - 1]))
                n--;
        s[n] = '\0';
        return s;
}

/* Advances *p past the next item of a list separated by any of sep; returns its length,
 * 0 at the end. */
static size_t next_item(const char **p, const char *sep, const char **item) {
        *p += strspn(*p, sep);
        *item = *p;
        size_t n = strcspn(*p, sep);
        *p += n;
        return n;
}

static bool valid_name(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n >= SF_NAME_MAX)
                return false;
        return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

static void forward_init(struct sf_forward *f) {
        memset(f, 0, sizeof *f);
        f->auth = SF_AUTH_NONE;
        f->env_format = SF_ENV_PATH;
        f->mode = 0660;
        f->max_conns = 1024;
        f->connect_timeout_ms = 5000;
        f->handshake_timeout_ms = 5000;
        f->idle_timeout_ms = 0;
}

static struct sf_forward *find_forward(const struct sf_conf *c, const char *name) {
        for (size_t i = 0; i < c->n_forwards; i++)
                if (strcmp(c->forwards[i].name, name) == 0)
                        return &c->forwards[i];
        return NULL;
}

static int add_forward(struct sf_conf *c, const struct sf_forward *f) {
        struct sf_forward *a = realloc(c->forwards, (c->n_forwards + 1) * sizeof *a);
        if (!a)
                return -ENOMEM;
        c->forwards = a;
        c->forwards[c->n_forwards++] = *f;
        return 0;
}

static bool is_from_spec(const struct sf_forward *f) {
        return strncmp(f->origin.where, "-F '", 4) == 0;
}

/* How much of a forward's origin to print after "first defined at": a file origin
 * "FILE:LINE: [name]" without its " [name]" tail, or the whole -F argument. */
static int place_len(const struct sf_forward *f) {
        size_t n = strlen(f->origin.where);
        size_t tail = strlen(f->name) + 4; /* ": [" name "]" */
        if (!is_from_spec(f) && n > tail)
                return (int)(n - tail);
        return (int)n;
}

/* Logs an error about a forward at its origin. A file origin "FILE:LINE: [name]" reads
 * well followed directly by the key, an -F origin "-F 'SPEC'" needs a colon first. */
static void forward_error(const struct sf_forward *f, const char *key, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void forward_error(const struct sf_forward *f, const char *key, const char *fmt, ...) {
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

/* Per-forward keys. */

static int parse_listen(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (sf_endpoint_parse(v, &f->listen, err, errlen) < 0 || sf_endpoint_supported(&f->listen, err, errlen) < 0)
                return -EINVAL;
        f->listen_set = true;
        return 0;
}

static int parse_connect(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        struct sf_endpoint eps[SF_MAX_CANDIDATES];
        const char *item;
        size_t n = 0, len;

        for (const char *p = v; (len = next_item(&p, CONNECT_SEP, &item)) > 0; n++) {
                if (n == SF_MAX_CANDIDATES)
                        return fail(err, errlen, "more than %d endpoints, expected at most %d candidates",
                                    SF_MAX_CANDIDATES, SF_MAX_CANDIDATES);
                struct sf_endpoint *ep = &eps[n];
                if (sf_endpoint_parse_n(item, len, ep, err, errlen) < 0 || sf_endpoint_supported(ep, err, errlen) < 0)
                        return -EINVAL;
                if (ep->kind == SF_EP_SYSTEMD || ep->kind == SF_EP_FD)
                        return fail(err, errlen,
                                    "%s can only listen (socket activation), expected unix:, tcp: or vsock: endpoints to connect to",
                                    ep->text);
                if (ep->kind == SF_EP_VSOCK && ep->cid == SF_VSOCK_CID_ANY)
                        return fail(err, errlen, "%s can only listen, expected vsock:host:PORT or vsock:CID:PORT to connect to",
                                    ep->text);
        }
        if (n == 0)
                return fail(err, errlen, "empty value, expected one or more endpoints separated by spaces or |");
        memcpy(f->connect, eps, n * sizeof eps[0]);
        f->n_connect = n;
        return 0;
}

static int parse_auth(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (strcasecmp(v, "none") == 0)
                f->auth = SF_AUTH_NONE;
        else if (strcasecmp(v, "token") == 0)
                f->auth = SF_AUTH_TOKEN;
        else
                return fail(err, errlen, "\"%s\" is not an auth mode, expected none or token", v);
        return 0;
}

static int parse_allow_insecure(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return sf_bool_parse(v, &f->allow_insecure, err, errlen);
}

/* A relative token file would depend on the directory the relay happens to start in. */
static int parse_token_path(const char *v, char *dst, size_t size, char *err, size_t errlen) {
        if (!sf_path_is_absolute(v))
                return fail(err, errlen, "\"%s\" is not an absolute path, expected an absolute path such as %s", v,
                            sf_token_path_example);
        if (strlen(v) >= size)
                return fail(err, errlen, "path is too long (%zu bytes at most), expected a shorter path", size - 1);
        strcpy(dst, v);
        return 0;
}

static int parse_forward_token_file(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return parse_token_path(v, f->token_file, sizeof f->token_file, err, errlen);
}

static int parse_alias(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (v[0] != '/')
                return fail(err, errlen, "\"%s\" is not an absolute path, expected the absolute path clients connect to, such as /run/app.sock", v);
        /* Clients connect(2) to the alias, so it has the same limit as a listen path. */
        if (strlen(v) >= sizeof f->alias)
                return fail(err, errlen, "\"%s\" is too long, expected at most %zu bytes (the limit of a unix socket path)", v,
                            sizeof f->alias - 1);
        strcpy(f->alias, v);
        return 0;
}

static int parse_env(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        static const char *const reserved[] = { "LD_PRELOAD", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES" };
        size_t n = strlen(v);

        if (n == 0)
                return fail(err, errlen, "empty value, expected an environment variable name such as DOCKER_HOST");
        if ((v[0] >= '0' && v[0] <= '9') ||
            strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != n)
                return fail(err, errlen, "\"%s\" is not an environment variable name, expected letters, digits and '_', not starting with a digit", v);
        if (n >= sizeof f->env)
                return fail(err, errlen, "\"%.32s...\" is too long, expected at most %zu characters", v, sizeof f->env - 1);
        /* sockferry run sets these for the payload itself; a forward must not overwrite them. */
        bool taken = strncmp(v, "SOCKFERRY_", 10) == 0;
        for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
                taken = taken || strcmp(v, reserved[i]) == 0;
        if (taken)
                return fail(err, errlen, "%s is set by sockferry itself, expected a variable of your own such as DOCKER_HOST", v);
        strcpy(f->env, v);
        return 0;
}

static int parse_env_format(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (strcasecmp(v, "path") == 0)
                f->env_format = SF_ENV_PATH;
        else if (strcasecmp(v, "unix-url") == 0)
                f->env_format = SF_ENV_UNIX_URL;
        else
                return fail(err, errlen, "\"%s\" is not an env-format, expected path or unix-url", v);
        return 0;
}

static int parse_mode(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        return sf_mode_parse(v, &f->mode, err, errlen);
}

static int parse_owner(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        gid_t primary;
        if (sf_user_parse(v, &f->owner, &primary, err, errlen) < 0)
                return -EINVAL;
        f->owner_set = true;
        return 0;
}

static int parse_group(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        if (sf_group_parse(v, &f->group, err, errlen) < 0)
                return -EINVAL;
        f->group_set = true;
        return 0;
}

/* allow-uid and allow-gid: a list of users or groups, each resolved to its id. */
static int parse_id_list(const char *v, bool users, uint32_t *ids, size_t *n_ids, char *err, size_t errlen) {
        uint32_t tmp[SF_MAX_ALLOW];
        char name[256];
        const char *item;
        size_t n = 0, len;

        for (const char *p = v; (len = next_item(&p, ALLOW_SEP, &item)) > 0; n++) {
                if (n == SF_MAX_ALLOW)
                        return fail(err, errlen, "more than %d entries, expected at most %d %s", SF_MAX_ALLOW,
                                    SF_MAX_ALLOW, users ? "users" : "groups");
                if (len >= sizeof name)
                        return fail(err, errlen, "\"%.32s...\" is too long, expected a %s", item,
                                    users ? "user name or a numeric UID" : "group name or a numeric GID");
                memcpy(name, item, len);
                name[len] = '\0';
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
                return fail(err, errlen, "empty value, expected one or more %s separated by spaces",
                            users ? "user names or UIDs" : "group names or GIDs");
        memcpy(ids, tmp, n * sizeof tmp[0]);
        *n_ids = n;
        return 0;
}

static int parse_allow_uid(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        _Static_assert(sizeof(uid_t) == sizeof(uint32_t), "uid_t is 32 bits");
        return parse_id_list(v, true, (uint32_t *)f->allow_uid, &f->n_allow_uid, err, errlen);
}

static int parse_allow_gid(struct sf_forward *f, const char *v, char *err, size_t errlen) {
        _Static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t is 32 bits");
        return parse_id_list(v, false, (uint32_t *)f->allow_gid, &f->n_allow_gid, err, errlen);
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
                return fail(err, errlen, "\"%s\" would time out every connection at once, expected a duration above 0 such as 5s", v);
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

/* Global keys. */

static int parse_log_level(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        if (sf_log_level_parse(v, &c->log_level) < 0)
                return fail(err, errlen, "\"%s\" is not a log level, expected error, warn, info or debug", v);
        c->log_level_set = true;
        return 0;
}

static int parse_log_format(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        if (sf_log_format_parse(v, &c->log_format) < 0)
                return fail(err, errlen, "\"%s\" is not a log format, expected text or json", v);
        return 0;
}

static int parse_control(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        if (sf_endpoint_parse(v, &c->control, err, errlen) < 0 || sf_endpoint_supported(&c->control, err, errlen) < 0)
                return -EINVAL;
        /* The control socket answers stats and must not be reachable from the network. */
        if (c->control.kind != SF_EP_UNIX && c->control.kind != SF_EP_ABSTRACT && c->control.kind != SF_EP_NPIPE)
                return fail(err, errlen, "%s is not %s", v, sf_conf_local_endpoints);
        c->control_set = true;
        return 0;
}

static int parse_global_token_file(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        return parse_token_path(v, c->token_file, sizeof c->token_file, err, errlen);
}

static int parse_user(struct sf_conf *c, const char *v, char *err, size_t errlen) {
        if (strlen(v) >= sizeof c->user)
                return fail(err, errlen, "\"%.32s...\" is too long, expected NAME|UID[:GROUP|GID] of at most %zu characters", v,
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

/* Every key, in the order the "expected one of" lists show them. A key valid in a forward
 * section has .forward, one valid in [sockferry] has .global; token-file has both. */
static const struct key {
        const char *name;
        int (*forward)(struct sf_forward *f, const char *v, char *err, size_t errlen);
        int (*global)(struct sf_conf *c, const char *v, char *err, size_t errlen);
} keys[] = {
        { "listen", parse_listen, NULL },
        { "connect", parse_connect, NULL },
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
        { "preauth-max", parse_preauth_max, NULL },
        { "connect-timeout", parse_connect_timeout, NULL },
        { "handshake-timeout", parse_handshake_timeout, NULL },
        { "idle-timeout", parse_idle_timeout, NULL },
        { "log-level", NULL, parse_log_level },
        { "log-format", NULL, parse_log_format },
        { "control", NULL, parse_control },
        { "user", NULL, parse_user },
        { "no-new-privs", NULL, parse_no_new_privs },
        { "drain-timeout", NULL, parse_drain_timeout },
        { "seccomp", NULL, parse_seccomp },
};

#define N_KEYS (sizeof keys / sizeof keys[0])

static bool key_in_scope(const struct key *k, bool global) {
        return global ? k->global != NULL : k->forward != NULL;
}

static const struct key *find_key(const char *name) {
        for (size_t i = 0; i < N_KEYS; i++)
                if (strcmp(keys[i].name, name) == 0)
                        return &keys[i];
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

/* The message for a key that is not valid in this kind of section. */
static void describe_bad_key(const char *name, bool global, char *msg, size_t size) {
        const struct key *k = find_key(name);
        const char *best = NULL;
        size_t best_d = SIZE_MAX;
        bool first = true;

        msg[0] = '\0';
        if (k && global) {
                append(msg, size, "per-forward key in [%s], expected it in the section of a forward such as [dispatch]",
                       GLOBAL_SECTION);
                return;
        }
        if (k) {
                append(msg, size, "global key in a forward section, expected it in [%s]", GLOBAL_SECTION);
                return;
        }
        append(msg, size, "unknown key, expected one of");
        for (size_t i = 0; i < N_KEYS; i++) {
                if (!key_in_scope(&keys[i], global))
                        continue;
                append(msg, size, "%s %s", first ? "" : ",", keys[i].name);
                first = false;
                /* The distance is at least the difference in length: skip what cannot be
                 * within the two edits suggested below. */
                size_t ln = strlen(name), lk = strlen(keys[i].name);
                if (ln > lk + 2 || lk > ln + 2)
                        continue;
                size_t d = edit_distance(name, keys[i].name);
                if (d < best_d) {
                        best_d = d;
                        best = keys[i].name;
                }
        }
        /* Two edits catch most typos; a bound below the length keeps "ab" from becoming "env". */
        if (best && best_d <= 2 && best_d < strlen(name))
                append(msg, size, "; did you mean %s?", best);
}

/* The INI file. inih splits key = value lines and strips comments; the line reader around
 * it counts lines (inih r55 cannot report them portably), handles [section] headers itself
 * so that empty and repeated sections are seen, and hands inih each line without its
 * leading whitespace: inih would otherwise take an indented "key = value" as a
 * continuation of the previous key's value. */

enum section_kind { SECTION_NONE, SECTION_GLOBAL, SECTION_FORWARD };

struct loader {
        struct sf_conf *conf;
        const char *path;
        FILE *f;
        char buf[CONF_LINE_MAX + 1];
        size_t bytes; /* read so far, at most CONF_FILE_MAX */
        unsigned line;
        /* The current line went to inih as key = value; it stays set unless the handler
         * sees it, which means inih found no key in it. */
        bool pending;

        enum section_kind kind;
        char section[128]; /* the current section's name as written, for messages */
        /* A forward section whose name is bad or taken parses into scratch so that the
         * errors in its keys are still reported, and is then dropped. */
        bool use_scratch;
        size_t forward;
        struct sf_forward scratch;
        unsigned global_line;   /* where [sockferry] started, 0 before */
        unsigned key_line[N_KEYS]; /* where each key was set in the current section */

        unsigned n_errors;
        int error; /* -errno that ends the load: a read error or no memory */
};

static void loader_error(struct loader *l, bool in_section, const char *key, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* "FILE:LINE: [section] key: msg"; the section and the key are left out when there is none. */
static void loader_error(struct loader *l, bool in_section, const char *key, const char *fmt, ...) {
        char msg[MSG_MAX], where[512] = "";
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (in_section && l->kind != SECTION_NONE)
                snprintf(where, sizeof where, " [%s]%s", l->section, key ? "" : ":");
        if (key)
                append(where, sizeof where, " %s:", key);
        sf_log_error("%s:%u:%s %s", l->path, l->line, where, msg);
        l->n_errors++;
}

static struct sf_forward *loader_forward(struct loader *l) {
        return l->use_scratch ? &l->scratch : &l->conf->forwards[l->forward];
}

static void start_forward(struct loader *l, const char *name) {
        const struct sf_forward *first = find_forward(l->conf, name);
        struct sf_forward f;

        l->kind = SECTION_FORWARD;
        l->use_scratch = true;
        forward_init(&l->scratch);
        if (!valid_name(name)) {
                loader_error(l, true, NULL, "not a valid forward name, " NAME_EXPECTED);
                return;
        }
        if (first) {
                loader_error(l, true, NULL, "duplicate forward name, first defined at %.*s", place_len(first),
                             first->origin.where);
                return;
        }
        forward_init(&f);
        strcpy(f.name, name);
        snprintf(f.origin.where, sizeof f.origin.where, "%s:%u: [%s]", l->path, l->line, name);
        if (add_forward(l->conf, &f) < 0) {
                l->error = -ENOMEM;
                return;
        }
        l->use_scratch = false;
        l->forward = l->conf->n_forwards - 1;
}

/* A "[name]" line, with only whitespace or a comment after the ']'. */
static void start_section(struct loader *l, char *s) {
        char *close = strchr(s, ']');
        const char *rest = close ? close + 1 + strspn(close + 1, " \t") : NULL;
        bool ok = rest && (*rest == '\0' || *rest == ';' || *rest == '#');

        if (close)
                *close = '\0';
        char *name = trim(s + 1);
        /* Even a broken header starts a new section: the keys below it belong to it, not to
         * the section before. */
        memset(l->key_line, 0, sizeof l->key_line);
        snprintf(l->section, sizeof l->section, "%s", name);
        if (!ok) {
                loader_error(l, false, NULL, SYNTAX_ERROR);
                l->kind = SECTION_FORWARD;
                l->use_scratch = true;
                forward_init(&l->scratch);
                return;
        }
        if (strcmp(name, GLOBAL_SECTION) != 0) {
                start_forward(l, name);
                return;
        }
        l->kind = SECTION_GLOBAL;
        if (l->global_line)
                loader_error(l, true, NULL, "duplicate section, first defined at %s:%u", l->path, l->global_line);
        else
                l->global_line = l->line;
}

/* Called by inih for each key = value line; returns nonzero, as errors are collected here. */
static int handle_pair(void *user, const char *section, const char *name, const char *value) {
        struct loader *l = user;
        char err[MSG_MAX];

        l->pending = false;
        /* inih also splits at ':', so "listen unix:/a" (no '=') arrives as key "listen unix". */
        if (!*name || strpbrk(name, " \t")) {
                loader_error(l, false, NULL, SYNTAX_ERROR);
                return 1;
        }
        if (l->kind == SECTION_NONE) {
                loader_error(l, false, name, "key outside a section, expected [%s] or [NAME] above it", GLOBAL_SECTION);
                return 1;
        }
        bool global = l->kind == SECTION_GLOBAL;
        const struct key *k = find_key(name);
        if (!k || !key_in_scope(k, global)) {
                describe_bad_key(name, global, err, sizeof err);
                loader_error(l, true, name, "%s", err);
                return 1;
        }
        size_t i = (size_t)(k - keys);
        if (l->key_line[i]) {
                loader_error(l, true, name, "duplicate key, first set at %s:%u, expected each key once per section",
                             l->path, l->key_line[i]);
                return 1;
        }
        l->key_line[i] = l->line;
        int r = global ? k->global(l->conf, value, err, sizeof err) : k->forward(loader_forward(l), value, err, sizeof err);
        if (r < 0)
                loader_error(l, true, name, "%s", err);
        return 1;
}

static char *blank_line(char *str) {
        str[0] = '\n';
        str[1] = '\0';
        return str;
}

/* inih's fgets-like reader: one call per line of the file. */
static char *read_line(char *str, int num, void *stream) {
        struct loader *l = stream;

        if (l->pending)
                loader_error(l, false, NULL, SYNTAX_ERROR);
        l->pending = false;
        if (l->error)
                return NULL;
        /* A line is read up to CONF_LINE_MAX bytes; the rest of a longer one is skipped, and
         * the whole file is read up to CONF_FILE_MAX bytes. */
        size_t n = 0, skipped = 0;
        bool nul = false, capped = false;
        int ch = EOF;
        errno = 0;
        for (;;) {
                if (l->bytes >= CONF_FILE_MAX) {
                        capped = true;
                        break;
                }
                if ((ch = getc(l->f)) == EOF)
                        break;
                l->bytes++;
                if (n < CONF_LINE_MAX)
                        l->buf[n++] = (char)ch;
                else
                        skipped++;
                nul |= ch == '\0';
                if (ch == '\n')
                        break;
        }
        if (ch == EOF && ferror(l->f)) {
                l->error = errno ? -errno : -EIO;
                return NULL;
        }
        if (capped && getc(l->f) != EOF) {
                l->error = -EFBIG;
                return NULL;
        }
        if (n == 0)
                return NULL;
        l->buf[n] = '\0';
        l->line++;
        char *s = l->buf;
        if (skipped) {
                loader_error(l, false, NULL, "line is longer than %d bytes, expected a short key = value line",
                             CONF_LINE_MAX);
                return blank_line(str);
        }
        if (nul) {
                loader_error(l, false, NULL, "line contains a NUL byte, expected text");
                return blank_line(str);
        }
        if (l->line == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
                s += 3;
        s = trim(s);
        if (!*s || *s == ';' || *s == '#')
                return blank_line(str);
        if (*s == '[') {
                start_section(l, s);
                return blank_line(str);
        }
        size_t len = strlen(s);
        /* inih reads at most num - 1 bytes and needs room for the newline. */
        if (len + 2 > (size_t)num) {
                loader_error(l, false, NULL, "line is too long, expected at most %d characters", num - 2);
                return blank_line(str);
        }
        memcpy(str, s, len);
        str[len] = '\n';
        str[len + 1] = '\0';
        l->pending = true;
        return str;
}

void sf_conf_init(struct sf_conf *c) {
        memset(c, 0, sizeof *c);
        c->log_level = SF_LOG_INFO;
        c->log_format = SF_LOG_TEXT;
        c->drain_timeout_ms = 10000;
        c->seccomp = true;
}

static const char *file_kind(mode_t mode) {
        switch (mode & S_IFMT) {
        case S_IFDIR: return "a directory";
        case S_IFIFO: return "a FIFO (named pipe)";
        case S_IFCHR: return "a character device";
        case S_IFBLK: return "a block device";
        case S_IFSOCK: return "a socket";
        default: return "not a regular file";
        }
}

/* Opens a config file: a regular file of at most CONF_FILE_MAX bytes. O_NONBLOCK keeps open()
 * from waiting for a writer on a FIFO; the type is checked on the open fd, not by name. */
static int open_regular(const char *path, FILE **out) {
        struct stat st;
        int r = 0, fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0 || fstat(fd, &st) < 0) {
                r = -errno;
                sf_log_error("%s: cannot read config: %s", path, strerror(-r));
        } else if (!S_ISREG(st.st_mode)) {
                r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
                sf_log_error("%s: cannot read config: it is %s, expected a regular file", path,
                             file_kind(st.st_mode));
        } else if (st.st_size > CONF_FILE_MAX) {
                r = -EFBIG;
                sf_log_error("%s: cannot read config: %lld bytes, expected a config file of at most %d bytes", path,
                             (long long)st.st_size, CONF_FILE_MAX);
        } else if (fcntl(fd, F_SETFL, O_RDONLY) < 0 || !(*out = fdopen(fd, "r"))) {
                r = -errno;
                sf_log_error("%s: cannot read config: %s", path, strerror(-r));
        }
        if (r < 0 && fd >= 0)
                close(fd);
        return r;
}

int sf_conf_load(struct sf_conf *c, const char *path) {
        struct loader l = { .conf = c, .path = path };
        int r;

        if (strlen(path) >= sizeof c->file) {
                sf_log_error("%.*s...: cannot read config: %s", QUOTE_MAX, path, strerror(ENAMETOOLONG));
                return -ENAMETOOLONG;
        }
        r = open_regular(path, &l.f);
        if (r < 0)
                return r;
        strcpy(c->file, path);
        r = ini_parse_stream(read_line, &l, handle_pair, &l);
        /* -2 is inih failing to allocate its line buffer, in builds without INI_USE_STACK. */
        if (r == -2 && !l.error)
                l.error = -ENOMEM;
        fclose(l.f);
        if (l.error == -EFBIG) {
                sf_log_error("%s: cannot read config: larger than %d bytes, expected a config file (it grew while "
                             "being read)",
                             path, CONF_FILE_MAX);
                return l.error;
        }
        if (l.error) {
                sf_log_error("%s: cannot read config: %s", path, strerror(-l.error));
                return l.error;
        }
        return l.n_errors ? -EINVAL : 0;
}

static void spec_error(const char *spec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void spec_error(const char *spec, const char *fmt, ...) {
        char msg[MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        sf_log_error("-F '%.*s%s': %s", QUOTE_MAX, spec, strlen(spec) > QUOTE_MAX ? "..." : "", msg);
}

/* The ",key=value" items after CONNECT; returns how many errors there were. */
static unsigned parse_spec_keys(struct sf_forward *f, char *items) {
        bool seen[N_KEYS] = { false };
        char err[MSG_MAX];
        unsigned n_errors = 0;

        for (char *item = items, *next; item; item = next) {
                next = strchr(item, ',');
                if (next)
                        *next++ = '\0';
                item = trim(item);
                char *eq = strchr(item, '=');
                if (!*item) {
                        forward_error(f, NULL, "empty item after ',', expected key=value");
                        n_errors++;
                        continue;
                }
                if (!eq || eq == item) {
                        forward_error(f, NULL, "\"%s\" has no %s, expected key=value", item, eq ? "key" : "'='");
                        n_errors++;
                        continue;
                }
                *eq = '\0';
                const char *name = trim(item), *value = trim(eq + 1);
                const struct key *k = find_key(name);
                if (k && (k->forward == parse_listen || k->forward == parse_connect))
                        forward_error(f, name, "comes from NAME:LISTEN=CONNECT, expected only other keys after the ','");
                else if (k && !k->forward)
                        forward_error(f, name, "global key, expected a per-forward key (globals go in [%s] of a config file)",
                                      GLOBAL_SECTION);
                else if (!k) {
                        describe_bad_key(name, false, err, sizeof err);
                        forward_error(f, name, "%s", err);
                } else if (seen[k - keys])
                        forward_error(f, name, "duplicate key, expected each key once");
                else {
                        seen[k - keys] = true;
                        if (k->forward(f, value, err, sizeof err) >= 0)
                                continue;
                        forward_error(f, name, "%s", err);
                }
                n_errors++;
        }
        return n_errors;
}

/* A spec that starts with its listen endpoint, the NAME left out: "/run/x.sock=..." or
 * "unix:/run/x.sock=...", where the first ':' would otherwise make "unix" the name. Says so
 * and returns true. */
static bool spec_name_missing(const char *spec) {
        const char *eq = strchr(spec, '=');
        if (!eq)
                return false;
        size_t len = (size_t)(eq - spec);
        const char *colon = memchr(spec, ':', len);
        struct sf_endpoint ep;
        char err[MSG_MAX];
        if (colon && sf_endpoint_parse_n(colon + 1, len - (size_t)(colon - spec) - 1, &ep, err, sizeof err) == 0)
                return false;
        bool bare_path = spec[0] == '/' && !colon;
        if (!bare_path && sf_endpoint_parse_n(spec, len, &ep, err, sizeof err) < 0)
                return false;
        spec_error(spec, "the forward's NAME is missing before the listen endpoint, " SPEC_EXPECTED ", e.g. -F mysock:%s%.*s=...",
                   bare_path ? "unix:" : "", (int)len, spec);
        return true;
}

int sf_conf_add_spec(struct sf_conf *c, const char *spec) {
        struct sf_forward f;
        const struct sf_forward *first;
        char err[MSG_MAX];
        unsigned n_errors = 0;
        int r = -EINVAL;

        char *copy = strdup(spec);
        if (!copy) {
                spec_error(spec, "%s", strerror(ENOMEM));
                return -ENOMEM;
        }
        char *colon = strchr(copy, ':');
        char *eq = colon ? strchr(colon + 1, '=') : NULL;
        if (spec_name_missing(spec))
                goto out;
        if (!colon) {
                spec_error(spec, "missing ':' after the name, " SPEC_EXPECTED);
                goto out;
        }
        if (!eq) {
                spec_error(spec, "missing '=', " SPEC_EXPECTED);
                goto out;
        }
        *colon = '\0';
        *eq = '\0';
        char *items = strchr(eq + 1, ',');
        if (items)
                *items++ = '\0';
        const char *name = trim(copy), *listen = trim(colon + 1), *connect = trim(eq + 1);

        forward_init(&f);
        snprintf(f.origin.where, sizeof f.origin.where, "-F '%.*s%s'", QUOTE_MAX, spec,
                 strlen(spec) > QUOTE_MAX ? "..." : "");
        if (!valid_name(name))
                spec_error(spec, "\"%s\" is not a valid forward name, " NAME_EXPECTED, name);
        else if (strcmp(name, GLOBAL_SECTION) == 0)
                /* The file could not have it: [sockferry] holds the globals. */
                spec_error(spec, "\"%s\" is the name of the global section, expected another forward name", name);
        else if ((first = find_forward(c, name)))
                spec_error(spec, "duplicate forward name, first defined at %.*s", place_len(first), first->origin.where);
        else
                strcpy(f.name, name);
        if (!f.name[0])
                n_errors++;
        if (parse_listen(&f, listen, err, sizeof err) < 0) {
                forward_error(&f, "listen", "%s", err);
                n_errors++;
        }
        if (parse_connect(&f, connect, err, sizeof err) < 0) {
                forward_error(&f, "connect", "%s", err);
                n_errors++;
        }
        if (items)
                n_errors += parse_spec_keys(&f, items);
        if (n_errors == 0) {
                r = add_forward(c, &f);
                if (r < 0)
                        spec_error(spec, "%s", strerror(-r));
        }
out:
        free(copy);
        return r;
}

/* Checks of one forward on its own; returns how many errors there were. */
static unsigned check_forward(const struct sf_conf *c, const struct sf_forward *f) {
        unsigned n = 0;

        if (!f->listen_set) {
                forward_error(f, NULL, "missing listen, expected listen = ENDPOINT");
                n++;
        }
        if (f->n_connect == 0) {
                forward_error(f, NULL, "missing connect, expected connect = ENDPOINT [ENDPOINT...]");
                n++;
        }
        if (f->listen_set && f->listen.kind == SF_EP_TCP && !sf_endpoint_is_loopback(&f->listen) &&
            f->auth == SF_AUTH_NONE && !f->allow_insecure) {
                forward_error(f, "listen",
                              "%s accepts connections from the network without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes",
                              f->listen.text);
                n++;
        }
        /* The text decides for vsock: any CID that reaches the port is another machine. */
        if (f->listen_set && f->listen.kind == SF_EP_VSOCK && f->auth == SF_AUTH_NONE && !f->allow_insecure) {
                forward_error(f, "listen",
                              "%s accepts connections from other machines (VMs or the host) without authentication; set auth = token (see sockferry keygen) or allow-insecure = yes",
                              f->listen.text);
                n++;
        }
        if (f->auth == SF_AUTH_TOKEN && !sf_conf_token_file(c, f)) {
                forward_error(f, "auth",
                              "auth = token needs a token file, expected token-file = PATH in [%s] or in [%s] (sockferry keygen -o PATH writes one)",
                              f->name, GLOBAL_SECTION);
                n++;
        }
        for (size_t k = 0; f->listen_set && k < f->n_connect; k++)
                if (sf_endpoint_equal(&f->listen, &f->connect[k])) {
                        forward_error(f, "connect", "%s is the listen endpoint of this forward, expected another endpoint (it would connect to itself)",
                                      f->connect[k].text);
                        n++;
                }
        if (f->alias[0] && f->listen_set && f->listen.kind == SF_EP_UNIX && strcmp(f->alias, f->listen.path) == 0) {
                forward_error(f, "alias", "%s is the listen path itself, expected the other path clients connect to",
                              f->alias);
                n++;
        }
        /* allow-uid/allow-gid check SO_PEERCRED, which only unix sockets carry; systemd and fd
         * listeners may well be unix sockets, so only the certain cases are refused. */
        if (f->listen_set && (f->listen.kind == SF_EP_TCP || f->listen.kind == SF_EP_VSOCK)) {
                if (f->n_allow_uid) {
                        forward_error(f, "allow-uid", "%s has no peer credentials, expected a unix: listen endpoint for allow-uid",
                                      f->listen.text);
                        n++;
                }
                if (f->n_allow_gid) {
                        forward_error(f, "allow-gid", "%s has no peer credentials, expected a unix: listen endpoint for allow-gid",
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
                forward_error(b, "listen", "%s is also the listen endpoint of [%s] (%.*s), expected one forward per listen endpoint",
                              b->listen.text, a->name, place_len(a), a->origin.where);
                n++;
        }
        if (b->alias[0] && strcmp(a->alias, b->alias) == 0) {
                forward_error(b, "alias", "%s is also the alias of [%s] (%.*s), expected one forward per alias", b->alias,
                              a->name, place_len(a), a->origin.where);
                n++;
        }
        if (b->alias[0] && a->listen_set && a->listen.kind == SF_EP_UNIX && strcmp(a->listen.path, b->alias) == 0) {
                forward_error(b, "alias", "%s is the listen path of [%s] (%.*s), expected a path no forward listens on",
                              b->alias, a->name, place_len(a), a->origin.where);
                n++;
        }
        if (a->alias[0] && b->listen_set && b->listen.kind == SF_EP_UNIX && strcmp(b->listen.path, a->alias) == 0) {
                forward_error(b, "listen", "%s is the alias of [%s] (%.*s), expected a path of its own", b->listen.path,
                              a->name, place_len(a), a->origin.where);
                n++;
        }
        if (b->env[0] && strcmp(a->env, b->env) == 0) {
                forward_error(b, "env", "%s is also set by [%s] (%.*s), expected one forward per variable", b->env, a->name,
                              place_len(a), a->origin.where);
                n++;
        }
        return n;
}

int sf_conf_validate(struct sf_conf *c) {
        unsigned n = 0;

        for (size_t j = 0; j < c->n_forwards; j++) {
                const struct sf_forward *b = &c->forwards[j];
                n += check_forward(c, b);
                for (size_t i = 0; i < j; i++)
                        n += check_pair(&c->forwards[i], b);
                if (c->control_set && b->listen_set && sf_endpoint_equal(&c->control, &b->listen)) {
                        /* Only the config file sets control, but no line is kept for it. */
                        sf_log_error("%s%s[%s] control: %s is also the listen endpoint of [%s] (%.*s), expected a socket of its own",
                                     c->file, c->file[0] ? ": " : "", GLOBAL_SECTION, c->control.text, b->name,
                                     place_len(b), b->origin.where);
                        n++;
                }
        }
        return n ? -EINVAL : 0;
}

const char *sf_conf_token_file(const struct sf_conf *c, const struct sf_forward *f) {
        if (f && f->token_file[0])
                return f->token_file;
        return c->token_file[0] ? c->token_file : NULL;
}

void sf_conf_free(struct sf_conf *c) {
        free(c->forwards);
        c->forwards = NULL;
        c->n_forwards = 0;
}
