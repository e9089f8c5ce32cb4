#pragma once
/* What `sockferry stats` shows: the counters of every forward and the process's own numbers,
 * rendered as text, JSON or Prometheus' exposition format. */
#include <stdio.h>
#include <sys/types.h>

#include "conf/conf.h"
#include "relay/relay.h"

enum sf_stats_format { SF_STATS_TEXT = 0, SF_STATS_JSON, SF_STATS_PROMETHEUS };

/* "text", "json" or "prometheus". 0 or -EINVAL. */
int sf_stats_format_parse(const char *s, enum sf_stats_format *out);

/* What the process itself holds, measured when a request is answered. */
struct sf_proc_stats {
        pid_t pid;
        unsigned long open_fds; /* entries of /proc/self/fd, the control connection included */
        unsigned long long rss_bytes;
        double uptime_s;
        double start_time_s; /* when the process started, in seconds since the Unix epoch */
};

/* Fills p (relay/control/procstats_*.c: /proc/self, or Windows' process information, where open_fds
 * counts handles); a value that cannot be read stays 0. */
void sf_proc_stats_read(struct sf_proc_stats *p);

/* Writes the counters of every forward of relay (created from conf) and p to out. */
void sf_stats_render(FILE *out, enum sf_stats_format fmt, const struct sf_conf *conf, const struct sf_relay *relay,
                     const struct sf_proc_stats *p);
