#pragma once
/* The control socket (`control = unix:PATH`): a local client connects, sends one request line,
 * gets the answer and the connection closes. The only request is `stats [text|json|prometheus]`,
 * which `sockferry stats` sends. */
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <uv.h>

#include "conf/conf.h"
#include "relay/relay.h"

/* A request line is short; a client that sends more without a newline is cut off. */
#define SF_CONTROL_LINE_MAX 64

enum sf_stats_format { SF_STATS_TEXT = 0, SF_STATS_JSON, SF_STATS_PROMETHEUS };

/* "text", "json" or "prometheus". 0 or -EINVAL. */
int sf_stats_format_parse(const char *s, enum sf_stats_format *out);

/* Parses what a control client sent so far: buf holds len bytes, not NUL-terminated, any
 * content. Returns 1 with *fmt set once a whole line "stats [FORMAT]" is there (a trailing CR
 * and runs of blanks are allowed); 0 when the line is not complete yet; -EMSGSIZE when
 * SF_CONTROL_LINE_MAX bytes came without a newline; -EINVAL for any other line. Pure. */
int sf_control_request_parse(const char *buf, size_t len, enum sf_stats_format *fmt);

/* What the process itself holds, measured when a request is answered. */
struct sf_proc_stats {
        pid_t pid;
        unsigned long open_fds; /* entries of /proc/self/fd, the control connection included */
        unsigned long long rss_bytes;
        double uptime_s;
};

/* Fills p (relay/procstats_*.c: /proc/self, or Windows' process information, where open_fds
 * counts handles); a value that cannot be read stays 0. */
void sf_proc_stats_read(struct sf_proc_stats *p);

/* Writes the counters of every forward of relay (created from conf) and p to out. */
void sf_stats_render(FILE *out, enum sf_stats_format fmt, const struct sf_conf *conf, const struct sf_relay *relay,
                     const struct sf_proc_stats *p);

struct sf_control;

/* Binds conf->control as a listen socket is bound (mode 0600, owner root or whoever runs us,
 * a stale socket replaced, nothing else) and serves requests on loop. Returns 0 or -errno,
 * logged. */
int sf_control_new(uv_loop_t *loop, const struct sf_conf *conf, const struct sf_relay *relay,
                   struct sf_control **out);
/* Stops serving, closes every handle and removes the socket file; the memory is freed once
 * libuv released the handles, so the loop must run once more. NULL-safe, not idempotent. */
void sf_control_close(struct sf_control *ctl);
