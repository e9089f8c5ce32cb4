/* The INI file. inih splits key = value lines and strips comments; the line reader around
 * it counts lines (inih r55 cannot report them portably), handles [section] headers itself
 * so that empty and repeated sections are seen, and hands inih each line without its
 * leading whitespace: inih would otherwise take an indented "key = value" as a
 * continuation of the previous key's value. */
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf_int.h"

#define SYNTAX_ERROR "syntax error, expected [section] or key = value"
/* A config file is a few kilobytes: anything beyond these is not one (or a hostile one), and
 * reading it must not cost more memory or time than this. */
#define CONF_FILE_MAX (1024 * 1024)
#define CONF_LINE_MAX 4096

enum section_kind { SECTION_NONE, SECTION_GLOBAL, SECTION_FORWARD };

struct loader {
        struct sf_conf *conf;
        const char *path;
        FILE *f;             /* a file, or NULL when the text is in memory: */
        const char *mem;     /* sf_conf_load_text's text, mem_len bytes, read up to mem_pos */
        size_t mem_len, mem_pos;
        char buf[CONF_LINE_MAX + 1];
        size_t bytes; /* read so far, at most CONF_FILE_MAX */
        unsigned line;
        /* The current line went to inih as key = value; it stays set unless the handler
         * sees it, which means inih found no key in it. */
        bool pending;
        const char *text; /* the current line as written, trimmed (in buf) */

        enum section_kind kind;
        char section[128]; /* the current section's name as written, for messages */
        /* A forward section whose name is bad or taken parses into scratch so that the
         * errors in its keys are still reported, and is then dropped. */
        bool use_scratch;
        size_t forward;
        struct sf_forward scratch;
        struct sf_conf_index names; /* the forwards by name */
        unsigned global_line;   /* where [sockferry] started, 0 before */
        unsigned key_line[SF_CONF_N_KEYS]; /* where each key was set in the current section */

        unsigned n_errors;
        int error; /* -errno that ends the load: a read error or no memory */
        bool full; /* SF_MAX_FORWARDS reached: the rest of the file is not read */
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
                sf_conf_append(where, sizeof where, " %s:", key);
        sf_log_error("%s:%u:%s %s", l->path, l->line, where, msg);
        l->n_errors++;
}

static struct sf_forward *loader_forward(struct loader *l) {
        return l->use_scratch ? &l->scratch : &l->conf->forwards[l->forward];
}

static bool same_name(const struct sf_forward *f, const void *name) {
        return strcmp(f->name, name) == 0;
}

static size_t *name_slot(const struct loader *l, const char *name) {
        return sf_conf_index_slot(&l->names, sf_conf_hash(SF_CONF_HASH_START, name, strlen(name), false),
                                  l->conf->forwards, same_name, name);
}

static void start_forward(struct loader *l, const char *name) {
        struct sf_conf *c = l->conf;
        struct sf_forward f;

        l->kind = SECTION_FORWARD;
        l->use_scratch = true;
        sf_conf_forward_clear(&l->scratch);
        if (!sf_conf_name_valid(name)) {
                loader_error(l, true, NULL, "not a valid forward name, " NAME_EXPECTED);
                return;
        }
        size_t *slot = name_slot(l, name);
        if (*slot) {
                const struct sf_forward *first = &c->forwards[*slot - 1];
                loader_error(l, true, NULL, "duplicate forward name, first defined at %.*s", sf_conf_place_len(first),
                             first->origin.where);
                return;
        }
        if (c->n_forwards >= SF_MAX_FORWARDS) {
                loader_error(l, true, NULL,
                             "more than %d forwards, expected at most %d in one configuration (each is a listening "
                             "socket and holds descriptors for its connections); the rest of %s is not read: split "
                             "the forwards across relays",
                             SF_MAX_FORWARDS, SF_MAX_FORWARDS, l->path);
                l->full = true;
                return;
        }
        sf_conf_forward_init(&f);
        f.accounts_elsewhere = c->listen_elsewhere;
        strcpy(f.name, name);
        if (sf_conf_forward_origin(&f, "%s:%u: [%s]", l->path, l->line, name) < 0 || sf_conf_forward_add(c, &f) < 0) {
                sf_conf_forward_clear(&f);
                l->error = -ENOMEM;
                return;
        }
        l->use_scratch = false;
        l->forward = c->n_forwards - 1;
        *slot = c->n_forwards;
}

/* A "[name]" line, with only whitespace or a comment after the ']'. */
static void start_section(struct loader *l, char *s) {
        char *close = strchr(s, ']');
        const char *rest = close ? close + 1 + strspn(close + 1, " \t") : NULL;
        bool ok = rest && (*rest == '\0' || *rest == ';' || *rest == '#');

        if (close)
                *close = '\0';
        char *name = sf_conf_trim(s + 1);
        /* Even a broken header starts a new section: the keys below it belong to it, not to
         * the section before. */
        memset(l->key_line, 0, sizeof l->key_line);
        snprintf(l->section, sizeof l->section, "%s", name);
        if (!ok) {
                loader_error(l, false, NULL, SYNTAX_ERROR);
                l->kind = SECTION_FORWARD;
                l->use_scratch = true;
                sf_conf_forward_clear(&l->scratch);
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

/* inih ends a value at a ';' that follows whitespace, inside double quotes too: when a quoted
 * value is wrong, that may be why. */
static bool comment_in_quotes(const char *line) {
        const char *q = strchr(line, '"');
        for (const char *p = q; p && *p; p++)
                if (*p == ';' && (p[-1] == ' ' || p[-1] == '\t'))
                        return true;
        return false;
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
        const struct sf_conf_key *k = sf_conf_key_find(name);
        if (!k || !sf_conf_key_in_scope(k, global)) {
                sf_conf_key_describe_bad(name, global, err, sizeof err);
                loader_error(l, true, name, "%s", err);
                return 1;
        }
        size_t i = (size_t)(k - sf_conf_keys);
        if (l->key_line[i]) {
                loader_error(l, true, name, "duplicate key, first set at %s:%u, expected each key once per section",
                             l->path, l->key_line[i]);
                return 1;
        }
        l->key_line[i] = l->line;
        int r = global ? k->global(l->conf, value, err, sizeof err) : k->forward(loader_forward(l), value, err, sizeof err);
        if (r < 0)
                loader_error(l, true, name, "%s%s", err,
                             comment_in_quotes(l->text) ? "; a ';' after a space starts a comment, even inside quotes" : "");
        return 1;
}

static char *blank_line(char *str) {
        str[0] = '\n';
        str[1] = '\0';
        return str;
}

static int next_char(struct loader *l) {
        if (!l->f)
                return l->mem_pos < l->mem_len ? (unsigned char)l->mem[l->mem_pos++] : EOF;
        return getc(l->f);
}

/* inih's fgets-like reader: one call per line of the file. */
static char *read_line(char *str, int num, void *stream) {
        struct loader *l = stream;

        if (l->pending)
                loader_error(l, false, NULL, SYNTAX_ERROR);
        l->pending = false;
        if (l->error || l->full)
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
                if ((ch = next_char(l)) == EOF)
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
        if (ch == EOF && l->f && ferror(l->f)) {
                l->error = errno ? -errno : -EIO;
                return NULL;
        }
        if (capped && next_char(l) != EOF) {
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
        s = sf_conf_trim(s);
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
        l->text = s;
        l->pending = true;
        return str;
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

static int name_check(const struct sf_conf *c, const char *path) {
        if (strlen(path) < sizeof c->file)
                return 0;
        sf_log_error("%.*s...: cannot read config: %s", QUOTE_MAX, path, strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
}

/* Parses what l reads (a file or a text) into c, whose name for messages is path (checked). */
static int load(struct loader *l, struct sf_conf *c, const char *path) {
        int r;

        /* Room for every forward a configuration may have, with those already added. */
        r = sf_conf_index_init(&l->names, SF_MAX_FORWARDS);
        if (r < 0) {
                sf_log_error("%s: cannot read config: %s", path, strerror(-r));
                return r;
        }
        for (size_t i = 0; i < c->n_forwards; i++) {
                size_t *slot = name_slot(l, c->forwards[i].name);
                if (!*slot)
                        *slot = i + 1;
        }
        strcpy(c->file, path);
        r = ini_parse_stream(read_line, l, handle_pair, l);
        /* -2 is inih failing to allocate its line buffer, in builds without INI_USE_STACK. */
        if (r == -2 && !l->error)
                l->error = -ENOMEM;
        sf_conf_forward_clear(&l->scratch);
        sf_conf_index_free(&l->names);
        if (l->error == -EFBIG) {
                sf_log_error("%s: cannot read config: larger than %d bytes, expected a config file (it grew while "
                             "being read)",
                             path, CONF_FILE_MAX);
                return l->error;
        }
        if (l->error) {
                sf_log_error("%s: cannot read config: %s", path, strerror(-l->error));
                return l->error;
        }
        return l->n_errors ? -EINVAL : 0;
}

int sf_conf_load(struct sf_conf *c, const char *path) {
        struct loader l = { .conf = c, .path = path };
        int r = name_check(c, path);
        if (r < 0 || (r = open_regular(path, &l.f)) < 0)
                return r;
        r = load(&l, c, path);
        fclose(l.f);
        return r;
}

int sf_conf_load_text(struct sf_conf *c, const char *name, const char *text, size_t len) {
        struct loader l = { .conf = c, .path = name, .mem = text, .mem_len = len };
        int r = name_check(c, name);
        return r < 0 ? r : load(&l, c, name);
}
