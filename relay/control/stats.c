#include "relay/control/stats.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "relay/link/link.h"

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

/* The shared links: "link to ENDPOINT" for those the relay dials, "link from PEER" for those
 * its listeners accepted, as the log lines name them. */
static void render_links_text(FILE *out, const struct sf_relay *relay) {
        struct sf_link_stats st;
        const char *forward;
        for (size_t i = 0; sf_relay_link_stats(relay, i, &st, &forward); i++) {
                char when[64];
                time_iso(st.since, when, sizeof when);
                fprintf(out, "link %s %s", st.dialer ? "to" : "from", st.name);
                if (st.dialer && st.token_file[0])
                        fprintf(out, " (token-file %s)", st.token_file);
                else if (forward)
                        fprintf(out, " (forward %s)", forward);
                fprintf(out, ": %s since %s", sf_link_state_name(st.state), when);
                if (st.cause[0])
                        fprintf(out, " (%s)", st.cause);
                if (st.rtt_us)
                        fprintf(out, ", RTT %.3f ms", (double)st.rtt_us / 1000.0);
                else
                        fputs(", RTT not measured yet", out);
                fprintf(out, ", %zu streams open, %llu total, %llu reconnects, %llu bytes in, %llu bytes out\n",
                        st.streams_open, (unsigned long long)st.streams_total, (unsigned long long)st.reconnects,
                        (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_out);
        }
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
        render_links_text(out, relay);
}

static void render_links_json(FILE *out, const struct sf_relay *relay) {
        struct sf_link_stats st;
        const char *forward;
        fputs(",\"links\":[", out);
        for (size_t i = 0; sf_relay_link_stats(relay, i, &st, &forward); i++) {
                char when[64];
                time_iso(st.since, when, sizeof when);
                fprintf(out, "%s{\"role\":\"%s\",\"%s\":", i ? "," : "", st.dialer ? "client" : "server",
                        st.dialer ? "endpoint" : "peer");
                put_escaped(out, st.name, true);
                fputs(",\"token_file\":", out);
                if (st.dialer)
                        put_escaped(out, st.token_file, true);
                else
                        fputs("null", out);
                fputs(",\"forward\":", out);
                if (forward)
                        put_escaped(out, forward, true);
                else
                        fputs("null", out);
                fprintf(out, ",\"state\":\"%s\",\"since\":\"%s\",\"since_unix\":%lld,\"cause\":",
                        sf_link_state_name(st.state), when, (long long)st.since);
                if (st.cause[0])
                        put_escaped(out, st.cause, true);
                else
                        fputs("null", out);
                fputs(",\"rtt_seconds\":", out);
                if (st.rtt_us)
                        fprintf(out, "%.6f", (double)st.rtt_us / 1e6);
                else
                        fputs("null", out);
                fprintf(out, ",\"streams_open\":%zu,\"streams_total\":%llu,\"reconnects\":%llu,\"bytes_in\":%llu,"
                             "\"bytes_out\":%llu}",
                        st.streams_open, (unsigned long long)st.streams_total, (unsigned long long)st.reconnects,
                        (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_out);
        }
        fputc(']', out);
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
        fputc(']', out);
        render_links_json(out, relay);
        fputs("}\n", out);
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

static void prom_link_labels(FILE *out, const char *name, const struct sf_link_stats *st) {
        fprintf(out, "%s{role=\"%s\",peer=", name, st->dialer ? "client" : "server");
        put_escaped(out, st->name, false);
        if (st->dialer && st->token_file[0]) {
                fputs(",token_file=", out);
                put_escaped(out, st->token_file, false);
        }
}

enum link_metric { LM_UP, LM_SINCE, LM_RTT, LM_OPEN, LM_TOTAL, LM_RECONNECTS, LM_BYTES, LM_STATE };

/* One metric for every link: role is client (it dials peer, an endpoint) or server (peer
 * opened it to one of our listeners). */
static void prom_per_link(FILE *out, const struct sf_relay *relay, enum link_metric metric, const char *name,
                          const char *type, const char *help) {
        static const enum sf_link_state states[] = { SF_LINK_CONNECTING, SF_LINK_UP, SF_LINK_DOWN, SF_LINK_OLD_PEER };
        struct sf_link_stats st;
        const char *forward;
        prom_header(out, name, type, help);
        for (size_t i = 0; sf_relay_link_stats(relay, i, &st, &forward); i++) {
                switch (metric) {
                case LM_BYTES:
                        for (int in = 1; in >= 0; in--) {
                                prom_link_labels(out, name, &st);
                                fprintf(out, ",direction=\"%s\"} %llu\n", in ? "in" : "out",
                                        (unsigned long long)(in ? st.bytes_in : st.bytes_out));
                        }
                        continue;
                case LM_STATE:
                        for (size_t k = 0; k < sizeof states / sizeof states[0]; k++) {
                                prom_link_labels(out, name, &st);
                                fprintf(out, ",state=\"%s\"} %d\n", sf_link_state_name(states[k]), st.state == states[k]);
                        }
                        continue;
                case LM_RTT:
                        if (!st.rtt_us)
                                continue; /* no sample rather than a round trip of 0 */
                        prom_link_labels(out, name, &st);
                        fprintf(out, "} %.6f\n", (double)st.rtt_us / 1e6);
                        continue;
                default:
                        break;
                }
                unsigned long long v = metric == LM_UP           ? st.state == SF_LINK_UP
                                       : metric == LM_SINCE      ? (unsigned long long)st.since
                                       : metric == LM_OPEN       ? st.streams_open
                                       : metric == LM_TOTAL      ? st.streams_total
                                                                 : st.reconnects;
                prom_link_labels(out, name, &st);
                fprintf(out, "} %llu\n", v);
        }
}

static void render_prometheus_links(FILE *out, const struct sf_relay *relay) {
        prom_per_link(out, relay, LM_UP, "sockferry_link_up", "gauge", "Whether the shared link is up (1) or not (0).");
        prom_per_link(out, relay, LM_STATE, "sockferry_link_state", "gauge",
                      "The shared link's state: 1 for the one it is in.");
        prom_per_link(out, relay, LM_SINCE, "sockferry_link_state_since_timestamp_seconds", "gauge",
                      "When the shared link entered its state.");
        prom_per_link(out, relay, LM_RTT, "sockferry_link_rtt_seconds", "gauge",
                      "The last ping's round trip on the shared link.");
        prom_per_link(out, relay, LM_OPEN, "sockferry_link_streams_open", "gauge", "Streams open on the shared link.");
        prom_per_link(out, relay, LM_TOTAL, "sockferry_link_streams_total", "counter",
                      "Streams opened on the shared link.");
        prom_per_link(out, relay, LM_RECONNECTS, "sockferry_link_reconnects_total", "counter",
                      "Times the shared link came up again after it had been up.");
        prom_per_link(out, relay, LM_BYTES, "sockferry_link_bytes_total", "counter",
                      "Bytes of the shared link's transport, frames included.");
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
        render_prometheus_links(out, relay);
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
