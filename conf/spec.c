/* -F NAME:LISTEN=CONNECT[,key=value...]: NAME ends at the first ':', LISTEN at the first '='
 * after it, CONNECT at the first ','; an '=' or ',' inside double quotes is part of a value. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_int.h"

#define SPEC_EXPECTED "expected NAME:LISTEN=CONNECT[,key=value...]"

static void spec_error(const char *spec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The first of chars in s outside double quotes, or NULL. */
static char *find_unquoted(char *s, const char *chars) {
        const char *p = sf_conf_find_unquoted(s, chars);
        return p ? s + (p - s) : NULL;
}

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
        bool seen[SF_CONF_N_KEYS] = { false };
        char err[MSG_MAX];
        unsigned n_errors = 0;

        for (char *item = items, *next; item; item = next) {
                next = find_unquoted(item, ",");
                if (next)
                        *next++ = '\0';
                item = sf_conf_trim(item);
                char *eq = strchr(item, '=');
                if (!*item) {
                        sf_conf_forward_error(f, NULL, "empty item after ',', expected key=value");
                        n_errors++;
                        continue;
                }
                if (!eq || eq == item) {
                        sf_conf_forward_error(f, NULL, "\"%s\" has no %s, expected key=value", item, eq ? "key" : "'='");
                        n_errors++;
                        continue;
                }
                *eq = '\0';
                const char *name = sf_conf_trim(item), *value = sf_conf_trim(eq + 1);
                const struct sf_conf_key *k = sf_conf_key_find(name);
                if (k && (k->forward == sf_conf_parse_listen || k->forward == sf_conf_parse_connect))
                        sf_conf_forward_error(f, name, "comes from NAME:LISTEN=CONNECT, expected only other keys after the ','");
                else if (k && !k->forward)
                        sf_conf_forward_error(f, name, "global key, expected a per-forward key (globals go in [%s] of a config file)",
                                              GLOBAL_SECTION);
                else if (!k) {
                        sf_conf_key_describe_bad(name, false, err, sizeof err);
                        sf_conf_forward_error(f, name, "%s", err);
                } else if (seen[k - sf_conf_keys])
                        sf_conf_forward_error(f, name, "duplicate key, expected each key once");
                else {
                        seen[k - sf_conf_keys] = true;
                        if (k->forward(f, value, err, sizeof err) >= 0)
                                continue;
                        sf_conf_forward_error(f, name, "%s", err);
                }
                n_errors++;
        }
        return n_errors;
}

/* A spec that starts with its listen endpoint, the NAME left out: "/run/x.sock=..." or
 * "unix:/run/x.sock=...", where the first ':' would otherwise make "unix" the name. Says so
 * and returns true. */
static bool spec_name_missing(const char *spec) {
        const char *eq = sf_conf_find_unquoted(spec, "=");
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

        sf_conf_forward_init(&f);
        f.accounts_elsewhere = c->listen_elsewhere;
        char *copy = strdup(spec);
        if (!copy) {
                spec_error(spec, "%s", strerror(ENOMEM));
                return -ENOMEM;
        }
        char *colon = strchr(copy, ':');
        char *eq = colon ? find_unquoted(colon + 1, "=") : NULL;
        /* Where a quote is not closed, nothing after it can be split. */
        if (!sf_conf_quotes_closed(spec)) {
                spec_error(spec, "a double quote is not closed, expected \"...\" around a value, with \\\" for a quote "
                                 "and \\\\ for a backslash inside");
                goto out;
        }
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
        char *items = find_unquoted(eq + 1, ",");
        if (items)
                *items++ = '\0';
        const char *name = sf_conf_trim(copy), *listen = sf_conf_trim(colon + 1), *connect = sf_conf_trim(eq + 1);

        if (sf_conf_forward_origin(&f, "-F '%.*s%s'", QUOTE_MAX, spec, strlen(spec) > QUOTE_MAX ? "..." : "") < 0) {
                spec_error(spec, "%s", strerror(ENOMEM));
                r = -ENOMEM;
                goto out;
        }
        if (c->n_forwards >= SF_MAX_FORWARDS) {
                spec_error(spec, "more than %d forwards, expected at most %d in one configuration (each is a listening "
                                 "socket and holds descriptors for its connections)%s%s: split the forwards across relays",
                           SF_MAX_FORWARDS, SF_MAX_FORWARDS, c->file[0] ? ", with those of " : "", c->file);
                goto out;
        }
        if (!sf_conf_name_valid(name))
                spec_error(spec, "\"%s\" is not a valid forward name, " NAME_EXPECTED, name);
        else if (strcmp(name, GLOBAL_SECTION) == 0)
                /* The file could not have it: [sockferry] holds the globals. */
                spec_error(spec, "\"%s\" is the name of the global section, expected another forward name", name);
        else if ((first = sf_conf_forward_find(c, name)))
                spec_error(spec, "duplicate forward name, first defined at %.*s", sf_conf_place_len(first), first->origin.where);
        else
                strcpy(f.name, name);
        if (!f.name[0])
                n_errors++;
        if (sf_conf_parse_listen(&f, listen, err, sizeof err) < 0) {
                sf_conf_forward_error(&f, "listen", "%s", err);
                n_errors++;
        }
        if (sf_conf_parse_connect(&f, connect, err, sizeof err) < 0) {
                sf_conf_forward_error(&f, "connect", "%s", err);
                n_errors++;
        }
        if (items)
                n_errors += parse_spec_keys(&f, items);
        if (n_errors == 0) {
                r = sf_conf_forward_add(c, &f);
                if (r < 0)
                        spec_error(spec, "%s", strerror(-r));
        }
out:
        sf_conf_forward_clear(&f);
        free(copy);
        return r;
}
