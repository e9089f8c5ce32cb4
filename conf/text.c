/* Text helpers every parser in conf/ uses; the preload library compiles this file in with the
 * endpoint parser, so it needs libc alone and allocates nothing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "conf/conf_int.h"

int sf_conf_fail(char *err, size_t errlen, const char *fmt, ...) {
        if (err && errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

void sf_conf_append(char *buf, size_t size, const char *fmt, ...) {
        size_t len = strlen(buf);
        va_list ap;
        if (len + 1 >= size)
                return;
        va_start(ap, fmt);
        vsnprintf(buf + len, size - len, fmt, ap);
        va_end(ap);
}

char *sf_conf_trim(char *s) {
        s += strspn(s, " \t\r\n");
        size_t n = strlen(s);
        while (n > 0 && strchr(" \t\r\n", s[n - 1]))
                n--;
        s[n] = '\0';
        return s;
}

/* p is at an opening quote: past its closing quote, or NULL when there is none. Inside, a
 * backslash takes the next character with it, so \" does not close. */
static const char *skip_quoted(const char *p) {
        for (p++; *p && *p != '"'; p++)
                if (*p == '\\' && p[1])
                        p++;
        return *p ? p + 1 : NULL;
}

/* The first of stop in s outside quotes, or the end of s. An unclosed quote runs to the
 * end: sf_conf_unquote() says what is wrong with it. */
static const char *scan(const char *s, const char *stop) {
        while (*s && !strchr(stop, *s)) {
                const char *q = *s == '"' ? skip_quoted(s) : s + 1;
                s = q ? q : s + strlen(s);
        }
        return s;
}

size_t sf_conf_next_item(const char **p, const char *sep, const char **item) {
        *p += strspn(*p, sep);
        *item = *p;
        *p = scan(*p, sep);
        return (size_t)(*p - *item);
}

const char *sf_conf_find_unquoted(const char *s, const char *chars) {
        s = scan(s, chars);
        return *s ? s : NULL;
}

bool sf_conf_quotes_closed(const char *s) {
        while ((s = strchr(s, '"')))
                if (!(s = skip_quoted(s)))
                        return false;
        return true;
}

int sf_conf_unquote(const char *s, size_t len, char *buf, size_t size, const char **out, size_t *out_len, char *err,
                    size_t errlen) {
        /* Messages show this much of the value as written. */
        int show = len > 200 ? 200 : (int)len;
        const char *more = len > 200 ? "..." : "";
        size_t n = 0;

        if (!memchr(s, '"', len)) {
                *out = s;
                *out_len = len;
                return 0;
        }
        if (s[0] != '"')
                return sf_conf_fail(err, errlen,
                                    "'%.*s%s' has a quote inside, expected the whole value in double quotes, such as "
                                    "\"unix:/path with spaces/agent.sock\"",
                                    show, s, more);
        for (size_t i = 1; i < len; i++) {
                char ch = s[i];
                if (ch == '"') {
                        if (i + 1 != len)
                                return sf_conf_fail(err, errlen,
                                                    "'%.*s%s' goes on after its closing quote, expected the closing quote "
                                                    "at the end of the value",
                                                    show, s, more);
                        buf[n] = '\0';
                        *out = buf;
                        *out_len = n;
                        return 0;
                }
                if (ch == '\\' && i + 1 < len) {
                        ch = s[++i];
                        if (ch != '"' && ch != '\\')
                                return sf_conf_fail(err, errlen,
                                                    "'%.*s%s' has \\%c inside quotes, expected \\\" for a quote or \\\\ "
                                                    "for a backslash",
                                                    show, s, more, ch);
                }
                if (n + 1 >= size)
                        return sf_conf_fail(err, errlen, "'%.40s...' is too long, expected at most %zu bytes in quotes", s,
                                            size - 1);
                buf[n++] = ch;
        }
        return sf_conf_fail(err, errlen,
                            "'%.*s%s' has no closing quote, expected a '\"' at the end of the value (\\\" for a quote "
                            "and \\\\ for a backslash inside)",
                            show, s, more);
}
