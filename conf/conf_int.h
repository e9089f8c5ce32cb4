#pragma once
/* What the files of conf/ share with each other; nothing outside conf/ includes this.
 *
 *   conf.c      the configuration object: every default, the forwards, messages about one
 *   keys.c      the value of each key, the key table and the typo suggestions
 *   load.c      the INI file (inih)
 *   spec.c      -F NAME:LISTEN=CONNECT[,key=value...]
 *   preset.c    the presets' table: the defaults of ssh-agent, gpg-agent, docker
 *   validate.c  the checks that need every forward: missing keys, duplicates, policy
 *   index.c     finding forwards by a key in constant time
 *   text.c      the small text helpers below, the endpoint parser's too */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/compare.h"
#include "conf/conf.h"

#define GLOBAL_SECTION "sockferry"
#define MSG_MAX 1024
#define NAME_EXPECTED "expected letters, digits, '_', '.' and '-', at most 63 characters"
/* Messages quote at most this much of a -F argument or a path, so that the log line (2 KiB)
 * still has room for what was wrong. */
#define QUOTE_MAX 512

/* Text helpers (text.c). */

/* Writes the message into err (which may be NULL) and returns -EINVAL. */
int sf_conf_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Appends to the string in buf, cutting at size. */
void sf_conf_append(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Cuts whitespace at both ends, in place. */
char *sf_conf_trim(char *s);
/* Advances *p past the next item of a list separated by any of sep; returns its length,
 * 0 at the end. A separator inside double quotes is part of the item. */
size_t sf_conf_next_item(const char **p, const char *sep, const char **item);
/* The first of chars in s outside double quotes, or NULL. */
const char *sf_conf_find_unquoted(const char *s, const char *chars);
/* Whether every double quote in s is closed. */
bool sf_conf_quotes_closed(const char *s);
/* A path or an endpoint as written, s[0..len): without a quote, *out is s itself; in double
 * quotes with \" and \\ inside, *out is buf (size bytes) holding the text between them. A
 * quote anywhere else, a bad escape or an unclosed quote is an error written into err. */
int sf_conf_unquote(const char *s, size_t len, char *buf, size_t size, const char **out, size_t *out_len, char *err,
                    size_t errlen);

/* The configuration object (conf.c). */

/* A forward with every default set and nothing on the heap. */
void sf_conf_forward_init(struct sf_forward *f);
/* Sets the origin, formatted; returns 0 or -ENOMEM. */
int sf_conf_forward_origin(struct sf_forward *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The defaults that depend on other keys, once all of a forward's keys are known. */
void sf_conf_forward_resolve(struct sf_forward *f);
/* Letters, digits, '_', '.' and '-', at most SF_NAME_MAX - 1 of them. */
bool sf_conf_name_valid(const char *name);
struct sf_forward *sf_conf_forward_find(const struct sf_conf *c, const char *name);
/* Moves *f into the configuration (*f is left with the defaults and owns nothing); returns 0
 * or -ENOMEM, and then *f still owns what it held. */
int sf_conf_forward_add(struct sf_conf *c, struct sf_forward *f);
/* How much of a forward's origin to print after "first defined at": a file origin
 * "FILE:LINE: [name]" without its " [name]" tail, or the whole -F argument. */
int sf_conf_place_len(const struct sf_forward *f);
/* Logs an error about a forward at its origin, with the key when there is one. */
void sf_conf_forward_error(const struct sf_forward *f, const char *key, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* An index of forwards by a key (a name, an endpoint, a path), index.c: open addressing over
 * positions in the forwards array, so that finding the first forward with a key costs O(1)
 * and checking a configuration stays linear in its size. A slot holds a position + 1, 0 when
 * empty. */
struct sf_conf_index {
        size_t *slot;
        size_t mask;
};

/* Room for n keys; returns 0 or -ENOMEM. */
int sf_conf_index_init(struct sf_conf_index *ix, size_t n);
void sf_conf_index_free(struct sf_conf_index *ix);
/* The slot of the first forward for which same(forward, key) holds, or the empty slot where
 * that key goes; hash must be the same for keys that are the same. */
size_t *sf_conf_index_slot(const struct sf_conf_index *ix, uint64_t hash, const struct sf_forward *forwards,
                           bool (*same)(const struct sf_forward *f, const void *key), const void *key);
/* FNV-1a of n bytes, continuing from h (start with SF_CONF_HASH_START); fold: ASCII case
 * folded, for names compared without case. */
#define SF_CONF_HASH_START 14695981039346656037ull
uint64_t sf_conf_hash(uint64_t h, const void *p, size_t n, bool fold);

/* The keys (keys.c). A key valid in a forward section has .forward, one valid in [sockferry]
 * has .global; token-file has both. */
struct sf_conf_key {
        const char *name;
        int (*forward)(struct sf_forward *f, const char *v, char *err, size_t errlen);
        int (*global)(struct sf_conf *c, const char *v, char *err, size_t errlen);
};

#define SF_CONF_N_KEYS 31
/* Every key, in the order the "expected one of" lists show them. */
extern const struct sf_conf_key sf_conf_keys[SF_CONF_N_KEYS];

/* The keys that -F takes from NAME:LISTEN=CONNECT rather than from ",key=value". */
int sf_conf_parse_listen(struct sf_forward *f, const char *v, char *err, size_t errlen);
int sf_conf_parse_connect(struct sf_forward *f, const char *v, char *err, size_t errlen);
const struct sf_conf_key *sf_conf_key_find(const char *name);
bool sf_conf_key_in_scope(const struct sf_conf_key *k, bool global);
/* The message for a key that is not valid in this kind of section: where it belongs, or the
 * keys that are, with the likeliest one for a typo. */
void sf_conf_key_describe_bad(const char *name, bool global, char *msg, size_t size);
