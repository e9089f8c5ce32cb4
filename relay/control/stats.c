#include "relay/control/stats.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

/* The counters of `sockferry stats` rendered as text, JSON or Prometheus' exposition format. */

int sf_stats_format_parse(const char *s, enum sf_stats_format *out) {
        static const char *const names[] = {
                [SF_STATS_TEXT] = "text", [SF_STATS_JSON] = "json", [SF_STATS_PROMETHEUS] = "prometheus"
        };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
                if (strcmp(s, names[i]) == 0) {
                        *out = (enum sf_stats_format)i;
                        return 0;
                }
        return -EINVAL;
}

/* JSON string (json) or Prometheus label value (!json) escaping; both quote " and \. */
static void put_escaped(FILE *out, const char *s, bool json) {
        fputc('"', out);
        for (; *s; s++) {
                unsigned char ch = (unsigned char)*s;
                if (ch == '"' || ch == '\\')
                        fprintf(out, "\\%c", ch);
                else if (ch == '\n')
                        fputs("\\n", out);
                else if (json && ch < 0x20)
                        fprintf(out, "\\u%04x", ch);
                else
                        fputc(ch, out);
        }
        fputc('"', out);
}

static void time_iso(time_t t, char *out, size_t cap) {
        struct tm tm;
        if (!gmtime_r(&t, &tm) || strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
                snprintf(out, cap, "%lld", (long long)t);
}

static const char *candidate_text(const struct sf_forward *f, const struct sf_relay_stats *st) {
        return st->candidate >= 0 && (size_t)st->candidate < f->n_connect ? f->connect[st->candidate].text : NULL;
}

static const struct {
        const char *key;   /* json and prometheus kind */
        const char *words; /* text */
        size_t offset;
} error_kinds[] = {
        { "connect_refused", "connect refused", offsetof(struct sf_relay_stats, err_refused) },
        { "timeout", "timeout", offsetof(struct sf_relay_stats, err_timeout) },
        { "auth_rejected", "auth rejected", offsetof(struct sf_relay_stats, err_auth) },
        { "wrong_peer", "wrong peer", offsetof(struct sf_relay_stats, err_wrong_peer) },
        { "upstream_unavailable", "upstream unavailable", offsetof(struct sf_relay_stats, err_upstream) },
        { "peer_denied", "peer denied", offsetof(struct sf_relay_stats, err_denied) },
        { "other", "other", offsetof(struct sf_relay_stats, err_other) },
        { "preauth_evicted", "pre-auth evicted", offsetof(struct sf_relay_stats, err_preauth) },
};
#define N_ERROR_KINDS (sizeof error_kinds / sizeof error_kinds[0])

static unsigned long long error_count(const struct sf_relay_stats *st, size_t kind) {
        return *(const uint64_t *)((const char *)st + error_kinds[kind].offset);
}

static void render_text(FILE *out, const struct sf_conf *conf, const struct sf_relay *relay,
                        const struct sf_proc_stats *p) {
        unsigned long long up = (unsigned long long)p->uptime_s;
        fprintf(out, "process: pid %d, %lu open fds, RSS %.1f MiB, up %lluh%02llum%02llus\n", (int)p->pid,
                p->open_fds, (double)p->rss_bytes / (1024.0 * 1024.0), up / 3600, up / 60 % 60, up % 60);
        for (size_t i = 0; i < sf_relay_n_forwards(relay); i++) {
                const struct sf_forward *f = &conf->forwards[i];
                const struct sf_relay_stats *st = sf_relay_stats_get(relay, i);
                const char *cand = candidate_text(f, st);
                fprintf(out, "%s: %s, %llu active, %llu total, %llu bytes up, %llu bytes down, %llu closed, via %s\n",
                        f->name, f->listen.text, (unsigned long long)st->active, (unsigned long long)st->total,
                        (unsigned long long)st->bytes_up, (unsigned long long)st->bytes_down,
                        (unsigned long long)st->closed, cand ? cand : "(no connection yet)");
                fputs("  errors:", out);
                for (size_t k = 0; k < N_ERROR_KINDS; k++)
                        fprintf(out, "%s %s %llu", k ? "," : "", error_kinds[k].words, error_count(st, k));
                fputc('\n', out);
                if (st->last_error_time) {
                        char when[64];
                        time_iso(st->last_error_time, when, sizeof when);
                        fprintf(out, "  last error: %s %s\n", when, st->last_error);
                }
        }
}

static void render_json(FILE *out, const struct sf_conf *conf, const struct sf_relay *relay,
                        const struct sf_proc_stats *p) {
        fprintf(out, "{\"process\":{\"pid\":%d,\"open_fds\":%lu,\"rss_bytes\":%llu,\"uptime_seconds\":%.3f,"
                     "\"start_time_seconds\":%.3f},\"forwards\":[",
                (int)p->pid, p->open_fds, p->rss_bytes, p->uptime_s, p->start_time_s);
        for (size_t i = 0; i < sf_relay_n_forwards(relay); i++) {
                const struct sf_forward *f = &conf->forwards[i];
                const struct sf_relay_stats *st = sf_relay_stats_get(relay, i);
                const char *cand = candidate_text(f, st);
                fprintf(out, "%s{\"name\":", i ? "," : "");
                put_escaped(out, f->name, true);
                fputs(",\"listen\":", out);
                put_escaped(out, f->listen.text, true);
                fprintf(out,
                        ",\"active\":%llu,\"total\":%llu,\"closed\":%llu,\"bytes_up\":%llu,\"bytes_down\":%llu,"
                        "\"errors\":{",
                        (unsigned long long)st->active, (unsigned long long)st->total, (unsigned long long)st->closed,
                        (unsigned long long)st->bytes_up, (unsigned long long)st->bytes_down);
                for (size_t k = 0; k < N_ERROR_KINDS; k++)
                        fprintf(out, "%s\"%s\":%llu", k ? "," : "", error_kinds[k].key, error_count(st, k));
                fputs("},\"last_error\":", out);
                if (st->last_error_time) {
                        char when[64];
                        time_iso(st->last_error_time, when, sizeof when);
                        fputs("{\"message\":", out);
                        put_escaped(out, st->last_error, true);
                        fprintf(out, ",\"time\":\"%s\",\"unix_time\":%lld}", when, (long long)st->last_error_time);
                } else {
                        fputs("null", out);
                }
                fputs(",\"candidate\":", out);
                if (cand)
                        put_escaped(out, cand, true);
                else
                        fputs("null", out);
                fputc('}', out);
        }
        fputs("]}\n", out);
}

static void prom_header(FILE *out, const char *name, const char *type, const char *help) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample per forward of the value at offset in its stats. */
static void prom_per_forward(FILE *out, const struct sf_conf *conf, const struct sf_relay *relay, const char *name,
                             const char *type, const char *help, size_t offset) {
        prom_header(out, name, type, help);
        for (size_t i = 0; i < sf_relay_n_forwards(relay); i++) {
                const struct sf_relay_stats *st = sf_relay_stats_get(relay, i);
                fprintf(out, "%s{forward=", name);
                put_escaped(out, conf->forwards[i].name, false);
                fprintf(out, "} %llu\n", (unsigned long long)*(const uint64_t *)((const char *)st + offset));
        }
}

static void render_prometheus(FILE *out, const struct sf_conf *conf, const struct sf_relay *relay,
                              const struct sf_proc_stats *p) {
        size_t n = sf_relay_n_forwards(relay);
        prom_per_forward(out, conf, relay, "sockferry_connections_active", "gauge", "Connections open now.",
                         offsetof(struct sf_relay_stats, active));
        prom_per_forward(out, conf, relay, "sockferry_connections_total", "counter", "Connections accepted.",
                         offsetof(struct sf_relay_stats, total));
        prom_per_forward(out, conf, relay, "sockferry_connections_closed_total", "counter",
                         "Connections ended (accepted = closed + active).", offsetof(struct sf_relay_stats, closed));
        prom_header(out, "sockferry_bytes_total", "counter", "Bytes relayed: up is client to upstream.");
        for (size_t i = 0; i < n; i++) {
                const struct sf_relay_stats *st = sf_relay_stats_get(relay, i);
                for (int up = 1; up >= 0; up--) {
                        fputs("sockferry_bytes_total{forward=", out);
                        put_escaped(out, conf->forwards[i].name, false);
                        fprintf(out, ",direction=\"%s\"} %llu\n", up ? "up" : "down",
                                (unsigned long long)(up ? st->bytes_up : st->bytes_down));
                }
        }
        prom_header(out, "sockferry_errors_total", "counter", "Failed connections by kind.");
        for (size_t i = 0; i < n; i++) {
                const struct sf_relay_stats *st = sf_relay_stats_get(relay, i);
                for (size_t k = 0; k < N_ERROR_KINDS; k++) {
                        fputs("sockferry_errors_total{forward=", out);
                        put_escaped(out, conf->forwards[i].name, false);
                        fprintf(out, ",kind=\"%s\"} %llu\n", error_kinds[k].key, error_count(st, k));
                }
        }
        prom_header(out, "sockferry_last_error_timestamp_seconds", "gauge",
                    "When the last error happened (0: never).");
        for (size_t i = 0; i < n; i++) {
                fputs("sockferry_last_error_timestamp_seconds{forward=", out);
                put_escaped(out, conf->forwards[i].name, false);
                fprintf(out, "} %lld\n", (long long)sf_relay_stats_get(relay, i)->last_error_time);
        }
        prom_header(out, "sockferry_candidate_info", "gauge", "The connect candidate in use (1).");
        for (size_t i = 0; i < n; i++) {
                const char *cand = candidate_text(&conf->forwards[i], sf_relay_stats_get(relay, i));
                if (!cand)
                        continue;
                fputs("sockferry_candidate_info{forward=", out);
                put_escaped(out, conf->forwards[i].name, false);
                fputs(",candidate=", out);
                put_escaped(out, cand, false);
                fputs("} 1\n", out);
        }
        /* The process metrics under the names Prometheus' client libraries give them, so the
         * dashboards and alerts written for those work unchanged. */
        prom_header(out, "process_open_fds", "gauge", "Number of open file descriptors.");
        fprintf(out, "process_open_fds %lu\n", p->open_fds);
        prom_header(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        fprintf(out, "process_resident_memory_bytes %llu\n", p->rss_bytes);
        prom_header(out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
        fprintf(out, "process_start_time_seconds %.2f\n", p->start_time_s);
}

void sf_stats_render(FILE *out, enum sf_stats_format fmt, const struct sf_conf *conf, const struct sf_relay *relay,
                     const struct sf_proc_stats *p) {
        switch (fmt) {
        case SF_STATS_TEXT:
                render_text(out, conf, relay, p);
                return;
        case SF_STATS_JSON:
                render_json(out, conf, relay, p);
                return;
        case SF_STATS_PROMETHEUS:
                render_prometheus(out, conf, relay, p);
                return;
        }
}
