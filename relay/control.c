#include "relay/control.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/platform.h"
#include "relay/listener.h"

/* A client that connects and says nothing must not hold a slot for long. */
#define REQUEST_TIMEOUT_MS 2000
/* Requests are rare (a scraper, a person): a few at a time is plenty, more are turned away. */
#define MAX_CLIENTS 8
/* Clients beyond MAX_CLIENTS are accepted and closed, not left to fail with EAGAIN. */
#define LISTEN_BACKLOG 128
#define REQUEST_EXPECTED "expected \"stats [text|json|prometheus]\""
/* Refused peers are logged at most once per this many milliseconds (with a count). */
#define REFUSED_LOG_INTERVAL_MS 10000

struct client {
        struct client *next, *prev;
        struct sf_control *ctl;
        uv_pipe_t pipe;
        uv_timer_t timer;
        uv_write_t write_req;
        uv_shutdown_t shutdown_req;
        unsigned pending_closes;
        bool closing;
        bool answered;
        char line[SF_CONTROL_LINE_MAX];
        size_t len;
        char *answer;
        size_t answer_len;
};

struct sf_control {
        const struct sf_conf *conf;
        const struct sf_relay *relay;
        struct sf_listener listener; /* serves through a libuv stream of its own */
        struct client *clients;
        unsigned n_clients;
        bool closing;
        unsigned long long refused; /* connections from another user, in all */
        uint64_t refused_logged_at; /* uv_now of the last line about them; 0: none yet */
};

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

static bool is_blank(char ch) {
        return ch == ' ' || ch == '\t';
}

int sf_control_request_parse(const char *buf, size_t len, enum sf_stats_format *fmt) {
        const char *nl = memchr(buf, '\n', len < SF_CONTROL_LINE_MAX ? len : SF_CONTROL_LINE_MAX);
        if (!nl)
                return len >= SF_CONTROL_LINE_MAX ? -EMSGSIZE : 0;

        /* Split the line into at most three words; a third one is an error. */
        char words[2][SF_CONTROL_LINE_MAX];
        size_t n = 0;
        const char *p = buf, *end = nl;
        if (end > p && end[-1] == '\r')
                end--;
        while (p < end) {
                while (p < end && is_blank(*p))
                        p++;
                if (p == end)
                        break;
                const char *w = p;
                while (p < end && !is_blank(*p))
                        p++;
                if (n == 2 || memchr(w, '\0', (size_t)(p - w)))
                        return -EINVAL;
                memcpy(words[n], w, (size_t)(p - w));
                words[n][p - w] = '\0';
                n++;
        }
        if (n == 0 || strcmp(words[0], "stats") != 0)
                return -EINVAL;
        if (n == 1) {
                *fmt = SF_STATS_TEXT;
                return 1;
        }
        return sf_stats_format_parse(words[1], fmt) < 0 ? -EINVAL : 1;
}

/* ---- measuring and rendering ------------------------------------------------------------ */

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
                fprintf(out, "%s: %s, %llu active, %llu total, %llu bytes up, %llu bytes down, via %s\n", f->name,
                        f->listen.text, (unsigned long long)st->active, (unsigned long long)st->total,
                        (unsigned long long)st->bytes_up, (unsigned long long)st->bytes_down,
                        cand ? cand : "(no connection yet)");
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
        fprintf(out, "{\"process\":{\"pid\":%d,\"open_fds\":%lu,\"rss_bytes\":%llu,\"uptime_seconds\":%.3f},"
                     "\"forwards\":[",
                (int)p->pid, p->open_fds, p->rss_bytes, p->uptime_s);
        for (size_t i = 0; i < sf_relay_n_forwards(relay); i++) {
                const struct sf_forward *f = &conf->forwards[i];
                const struct sf_relay_stats *st = sf_relay_stats_get(relay, i);
                const char *cand = candidate_text(f, st);
                fprintf(out, "%s{\"name\":", i ? "," : "");
                put_escaped(out, f->name, true);
                fputs(",\"listen\":", out);
                put_escaped(out, f->listen.text, true);
                fprintf(out, ",\"active\":%llu,\"total\":%llu,\"bytes_up\":%llu,\"bytes_down\":%llu,\"errors\":{",
                        (unsigned long long)st->active, (unsigned long long)st->total,
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
        prom_header(out, "sockferry_open_fds", "gauge", "Open file descriptors of the relay process.");
        fprintf(out, "sockferry_open_fds %lu\n", p->open_fds);
        prom_header(out, "sockferry_resident_memory_bytes", "gauge", "Resident memory of the relay process.");
        fprintf(out, "sockferry_resident_memory_bytes %llu\n", p->rss_bytes);
        prom_header(out, "sockferry_uptime_seconds", "gauge", "Seconds since the relay process started.");
        fprintf(out, "sockferry_uptime_seconds %.3f\n", p->uptime_s);
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

/* ---- the server ------------------------------------------------------------------------- */

static void control_maybe_free(struct sf_control *ctl) {
        if (ctl->closing && !ctl->clients)
                free(ctl);
}

static void on_client_closed(uv_handle_t *h) {
        struct client *cl = h->data;
        if (--cl->pending_closes > 0)
                return;
        struct sf_control *ctl = cl->ctl;
        if (cl->prev)
                cl->prev->next = cl->next;
        else
                ctl->clients = cl->next;
        if (cl->next)
                cl->next->prev = cl->prev;
        ctl->n_clients--;
        free(cl->answer);
        free(cl);
        control_maybe_free(ctl);
}

static void client_close(struct client *cl) {
        if (cl->closing)
                return;
        cl->closing = true;
        cl->pending_closes = 2;
        uv_close((uv_handle_t *)&cl->pipe, on_client_closed);
        uv_close((uv_handle_t *)&cl->timer, on_client_closed);
}

static void on_request_timeout(uv_timer_t *t) {
        client_close(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
        if (status < 0)
                client_close(req->data);
}

/* The answer is out: end our side and wait for the client's end (or the timer). Closing with
 * request bytes still unread would reset the connection, and the reset can overtake the answer. */
static void on_written(uv_write_t *req, int status) {
        struct client *cl = req->data;
        cl->shutdown_req.data = cl;
        if (status < 0 || uv_shutdown(&cl->shutdown_req, (uv_stream_t *)&cl->pipe, on_shutdown) < 0)
                client_close(cl);
}

static void client_answer(struct client *cl, int parsed, enum sf_stats_format fmt) {
        FILE *out = open_memstream(&cl->answer, &cl->answer_len);
        if (!out) {
                client_close(cl);
                return;
        }
        if (parsed == 1) {
                struct sf_proc_stats p;
                sf_proc_stats_read(&p);
                sf_stats_render(out, fmt, cl->ctl->conf, cl->ctl->relay, &p);
        } else if (parsed == -EMSGSIZE) {
                fprintf(out, "error: request longer than %d bytes without a newline; " REQUEST_EXPECTED "\n",
                        SF_CONTROL_LINE_MAX - 1);
        } else {
                fputs("error: unknown request; " REQUEST_EXPECTED "\n", out);
        }
        if (fclose(out) != 0) {
                client_close(cl);
                return;
        }
        cl->answered = true;
        uv_timer_start(&cl->timer, on_request_timeout, REQUEST_TIMEOUT_MS, 0);
        uv_buf_t buf = uv_buf_init(cl->answer, (unsigned)cl->answer_len);
        cl->write_req.data = cl;
        if (uv_write(&cl->write_req, (uv_stream_t *)&cl->pipe, &buf, 1, on_written) < 0)
                client_close(cl);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
        struct client *cl = h->data;
        /* Once answered, whatever else the client sends is read into the line and dropped. */
        if (cl->answered)
                *buf = uv_buf_init(cl->line, sizeof cl->line);
        else
                *buf = uv_buf_init(cl->line + cl->len, (unsigned)(sizeof cl->line - cl->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        struct client *cl = s->data;
        if (cl->closing)
                return;
        if (n < 0) {
                client_close(cl);
                return;
        }
        if (cl->answered)
                return;
        cl->len += (size_t)n;
        enum sf_stats_format fmt;
        int r = sf_control_request_parse(cl->line, cl->len, &fmt);
        if (r != 0)
                client_answer(cl, r, fmt);
}

/* Only root and the relay's own user may read the counters (they include the last error: peer
 * addresses, token paths). An abstract socket (unix:@NAME) has no file mode, and a path's mode
 * can be loosened by whoever owns its directory: the system's word on the peer is what counts
 * (relay/platform.h). */
static bool peer_allowed(struct sf_control *ctl, struct client *cl) {
        char who[96], allowed[64];
        if (sf_peer_trusted((uv_stream_t *)&cl->pipe, who, sizeof who, allowed, sizeof allowed))
                return true;
        ctl->refused++;
        uint64_t now = uv_now(cl->pipe.loop);
        if (ctl->refused_logged_at != 0 && now - ctl->refused_logged_at < REFUSED_LOG_INTERVAL_MS)
                return false;
        ctl->refused_logged_at = now ? now : 1;
        sf_log_warn("control %s: refused a connection from %s: only %s may read the stats "
                    "(%llu refused in all; at most one such line every %d s)",
                    ctl->conf->control.text, who, allowed, ctl->refused, REFUSED_LOG_INTERVAL_MS / 1000);
        return false;
}

static void on_connection(uv_stream_t *server, int status) {
        struct sf_control *ctl = server->data;
        if (status < 0 || ctl->closing)
                return;
        struct client *cl = calloc(1, sizeof *cl);
        if (!cl) {
                sf_log_warn("control %s: out of memory; a request was not answered", ctl->conf->control.text);
                return;
        }
        cl->ctl = ctl;
        uv_pipe_init(server->loop, &cl->pipe, 0);
        uv_timer_init(server->loop, &cl->timer);
        cl->pipe.data = cl->timer.data = cl;
        cl->next = ctl->clients;
        if (cl->next)
                cl->next->prev = cl;
        ctl->clients = cl;
        ctl->n_clients++;
        if (uv_accept(server, (uv_stream_t *)&cl->pipe) < 0 || !peer_allowed(ctl, cl) ||
            ctl->n_clients > MAX_CLIENTS) {
                client_close(cl);
                return;
        }
        uv_timer_start(&cl->timer, on_request_timeout, REQUEST_TIMEOUT_MS, 0);
        uv_read_start((uv_stream_t *)&cl->pipe, on_alloc, on_read);
}

int sf_control_new(uv_loop_t *loop, const struct sf_conf *conf, const struct sf_relay *relay,
                   struct sf_control **out) {
        struct sf_control *ctl = calloc(1, sizeof *ctl);
        struct sf_forward *f = calloc(1, sizeof *f);
        int r = -ENOMEM;
        if (!ctl || !f) {
                sf_log_error("control %s: out of memory", conf->control.text);
                goto fail;
        }
        ctl->conf = conf;
        ctl->relay = relay;
        /* Bound like a forward's listen socket, so the same rules hold: exact mode from the
         * first instant, stale socket replaced, anything else left alone. Only root (or the
         * relay's own user) may read the counters. */
        snprintf(f->name, sizeof f->name, "control");
        f->listen = conf->control;
        f->mode = 0600;
        r = sf_listener_open(loop, f, conf, &ctl->listener);
        if (r < 0)
                goto fail;
        r = sf_listener_serve(&ctl->listener, loop, LISTEN_BACKLOG, on_connection, ctl);
        if (r < 0) {
                sf_log_error("control %s: cannot serve: %s", conf->control.text, strerror(-r));
                sf_listener_close(&ctl->listener);
                goto fail;
        }
        free(f);
        sf_log_info("control socket on %s", conf->control.text);
        *out = ctl;
        return 0;
fail:
        free(f);
        free(ctl);
        return r;
}

void sf_control_close(struct sf_control *ctl) {
        if (!ctl)
                return;
        ctl->closing = true;
        for (struct client *cl = ctl->clients; cl; cl = cl->next)
                client_close(cl);
        sf_listener_close(&ctl->listener);
        control_maybe_free(ctl);
}
