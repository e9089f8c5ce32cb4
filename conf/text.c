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

size_t sf_conf_next_item(const char **p, const char *sep, const char **item) {
        *p += strspn(*p, sep);
        *item = *p;
        size_t n = strcspn(*p, sep);
        *p += n;
        return n;
}
