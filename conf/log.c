#include "conf/log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static enum sf_log_level log_level = SF_LOG_INFO;
static enum sf_log_format log_format = SF_LOG_TEXT;

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static char *capture_buf;
static size_t capture_cap;

void sf_log_capture(char *buf, size_t cap) {
        capture_buf = cap ? buf : NULL;
        capture_cap = cap;
        if (capture_buf)
                capture_buf[0] = '\0';
}

static void capture(const char *forward, const char *msg) {
        size_t used = strlen(capture_buf);
        if (used + 1 >= capture_cap)
                return;
        snprintf(capture_buf + used, capture_cap - used, "%s%s%s%s%s", used ? "; " : "", forward ? "[" : "",
                 forward ? forward : "", forward ? "] " : "", msg);
}

void sf_log_setup(enum sf_log_level level, enum sf_log_format format) {
        log_level = level;
        log_format = format;
}

enum sf_log_format sf_log_get_format(void) {
        return log_format;
}

enum sf_log_level sf_log_get_level(void) {
        return log_level;
}

int sf_log_level_parse(const char *s, enum sf_log_level *out) {
        for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
                if (strcasecmp(s, level_names[i]) == 0) {
                        *out = (enum sf_log_level)i;
                        return 0;
                }
        if (strcasecmp(s, "warning") == 0) {
                *out = SF_LOG_WARN;
                return 0;
        }
        return -EINVAL;
}

int sf_log_format_parse(const char *s, enum sf_log_format *out) {
        if (strcasecmp(s, "text") == 0)
                *out = SF_LOG_TEXT;
        else if (strcasecmp(s, "json") == 0)
                *out = SF_LOG_JSON;
        else
                return -EINVAL;
        return 0;
}

/* JSON string body escaping; truncates rather than allocating. */
static size_t json_escape(char *dst, size_t cap, const char *src) {
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *)src; *p && o + 7 < cap; p++) {
                if (*p == '"' || *p == '\\') {
                        dst[o++] = '\\';
                        dst[o++] = (char)*p;
                } else if (*p == '\n') {
                        dst[o++] = '\\';
                        dst[o++] = 'n';
                } else if (*p < 0x20) {
                        o += (size_t)snprintf(dst + o, cap - o, "\\u%04x", *p);
                } else {
                        dst[o++] = (char)*p;
                }
        }
        dst[o] = '\0';
        return o;
}

/* True when stderr is the stream systemd connected to the journal (sd_journal_stream_fd(3)
 * documents JOURNAL_STREAM as "DEVICE:INODE" of that stream); a copy inherited by a process
 * whose stderr was redirected elsewhere does not count. */
static bool stderr_is_journal(void) {
        const char *v = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;
        return v && sscanf(v, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
               (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void sf_logv(enum sf_log_level level, const char *forward, uint64_t conn, const char *fmt, va_list ap) {
        /* The syslog priorities journald reads from a "<N>" line prefix (sd-daemon.h). */
        static const int priorities[] = { 3, 4, 6, 7 };
        static int journal = -1;
        if (level > log_level)
                return;
        int saved = errno;
        char msg[2048], line[4608], ts[40] = "", prio[8] = "";
        struct timespec now;
        struct tm tm;

        vsnprintf(msg, sizeof msg, fmt, ap);
        /* Errors are never filtered out (the lowest level there is). */
        if (level == SF_LOG_ERROR && capture_buf)
                capture(forward, msg);
        if (journal < 0)
                journal = stderr_is_journal();
        /* The journal stamps each line itself and filters by the priority prefix. */
        if (journal) {
                snprintf(prio, sizeof prio, "<%d>", priorities[level]);
        } else {
                clock_gettime(CLOCK_REALTIME, &now);
                gmtime_r(&now.tv_sec, &tm);
                size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
                snprintf(ts + n, sizeof ts - n, ".%03ldZ", now.tv_nsec / 1000000);
        }

        int len;
        if (log_format == SF_LOG_JSON) {
                char emsg[4096], efwd[256];
                json_escape(emsg, sizeof emsg, msg);
                json_escape(efwd, sizeof efwd, forward ? forward : "");
                len = snprintf(line, sizeof line, "%s{%s%s%s\"level\":\"%s\"%s%s%s", prio, ts[0] ? "\"ts\":\"" : "", ts,
                               ts[0] ? "\"," : "", level_names[level], forward ? ",\"forward\":\"" : "",
                               forward ? efwd : "", forward ? "\"" : "");
                if (conn && len > 0 && (size_t)len < sizeof line)
                        len += snprintf(line + len, sizeof line - (size_t)len, ",\"conn\":%llu",
                                        (unsigned long long)conn);
                if (len > 0 && (size_t)len < sizeof line)
                        len += snprintf(line + len, sizeof line - (size_t)len, ",\"msg\":\"%s\"}\n", emsg);
        } else {
                char ctx[300] = "";
                if (forward && conn)
                        snprintf(ctx, sizeof ctx, " [%s #%llu]", forward, (unsigned long long)conn);
                else if (forward)
                        snprintf(ctx, sizeof ctx, " [%s]", forward);
                len = snprintf(line, sizeof line, "%s%s%ssockferry %s%s: %s\n", prio, ts, ts[0] ? " " : "",
                               level_names[level], ctx, msg);
        }
        if (len > 0) {
                size_t total = (size_t)len < sizeof line ? (size_t)len : sizeof line - 1;
                if (line[total - 1] != '\n')
                        line[total - 1] = '\n';
                /* One write(2) per line so lines from several processes never interleave. */
                ssize_t w = write(STDERR_FILENO, line, total);
                (void)w;
        }
        errno = saved;
}

void sf_log(enum sf_log_level level, const char *forward, uint64_t conn, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        sf_logv(level, forward, conn, fmt, ap);
        va_end(ap);
}

/* The length of the UTF-8 character at p (n bytes left), 0 when p starts none or starts a
 * C1 control (U+0080..U+009F, which some terminals obey as ESC sequences). */
static size_t utf8_char(const unsigned char *p, size_t n) {
        size_t len = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
        if (len == 0 || len > n)
                return 0;
        for (size_t i = 1; i < len; i++)
                if ((p[i] & 0xc0) != 0x80)
                        return 0;
        /* Overlong forms, UTF-16 surrogates, beyond U+10FFFF, C1 controls. */
        if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) || (p[0] == 0xf0 && p[1] < 0x90) ||
            (p[0] == 0xf4 && p[1] >= 0x90) || (p[0] == 0xc2 && p[1] < 0xa0))
                return 0;
        return len;
}

size_t sf_log_escape(const char *in, size_t len, char *out, size_t cap) {
        const unsigned char *p = (const unsigned char *)in;
        size_t o = 0, i = 0, keep = 0; /* keep: the last end of a piece that leaves room for "..." */
        while (i < len) {
                char piece[5];
                size_t n = p[i] < 0x80 ? 1 : utf8_char(p + i, len - i), w = n;
                if (n > 1) {
                        memcpy(piece, p + i, n);
                } else if (n == 1 && (p[i] >= 0x20 || p[i] == '\t') && p[i] != 0x7f) {
                        piece[0] = (char)p[i];
                } else {
                        w = (size_t)snprintf(piece, sizeof piece, "\\x%02x", p[i]);
                        n = 1;
                }
                if (o + w > cap - 1)
                        break;
                memcpy(out + o, piece, w);
                o += w;
                i += n;
                if (o + 3 <= cap - 1)
                        keep = o;
        }
        if (i < len) {
                memcpy(out + keep, "...", 3);
                o = keep + 3;
        }
        out[o] = '\0';
        return o;
}

bool sf_log_ratelimit(struct sf_log_ratelimit *r, unsigned per_sec, uint64_t now_ms, unsigned *dropped) {
        *dropped = 0;
        if (now_ms - r->start_ms >= 1000) {
                *dropped = r->dropped;
                r->start_ms = now_ms;
                r->count = 0;
                r->dropped = 0;
        }
        if (r->count < per_sec) {
                r->count++;
                return true;
        }
        r->dropped++;
        return false;
}

unsigned sf_log_ratelimit_flush(struct sf_log_ratelimit *r) {
        unsigned n = r->dropped;
        r->dropped = 0;
        return n;
}
