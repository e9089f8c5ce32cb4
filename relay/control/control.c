#include "relay/control/control.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/list.h"
#include "relay/listen/listener.h"
#include "relay/sys/platform.h"

/* A client that connects and says nothing must not hold a slot for long. */
#define REQUEST_TIMEOUT_MS 2000
/* Requests are rare (a scraper, a person): a few at a time is plenty, more are turned away.
 * Only admitted clients (root, the relay's user) count: a refused peer is closed at once and
 * never takes a place, so nobody else can keep them from their stats; admitted clients that
 * say nothing go after REQUEST_TIMEOUT_MS. */
#define MAX_CLIENTS 8
/* Connections accepted in one loop turn at most. libuv accepts until the backlog is empty, and
 * under a flood of refused peers it would not be empty for long: the admitted clients' reads
 * and timers would wait behind it. Past the batch a connection is taken on the next turn
 * (libuv stops watching the listener until uv_accept takes what it holds). */
#define ACCEPT_BATCH 16
/* Clients beyond MAX_CLIENTS are accepted and closed, not left to fail with EAGAIN. */
#define LISTEN_BACKLOG 128
#define REQUEST_EXPECTED "expected \"stats [text|json|prometheus]\" or \"reload\""
/* Refused peers are logged at most once per this many milliseconds (with a count). */
#define REFUSED_LOG_INTERVAL_MS 10000

struct client {
        struct sf_list_node node; /* in ctl->clients */
        struct sf_control *ctl;
        uv_pipe_t pipe;
        uv_timer_t timer;
        uv_write_t write_req;
        uv_shutdown_t shutdown_req;
        unsigned pending_closes;
        bool closing;
        bool admitted; /* counted in ctl->n_admitted */
        bool answered;
        bool grace; /* the timeout fired once and was given one more loop turn */
        char line[SF_CONTROL_LINE_MAX];
        size_t len;
        char *answer;
        size_t answer_len;
};

struct sf_control {
        struct sf_endpoint ep; /* a copy: a reload frees the configuration it came from */
        const struct sf_relay *relay;
        sf_control_reload_cb reload_cb;
        void *reload_data;
        struct sf_listener listener; /* serves through a libuv stream of its own */
        struct sf_list clients; /* every client until its handles are closed */
        unsigned n_admitted;    /* of them: admitted and not closing */
        uv_prepare_t turn;      /* each loop turn: a new batch, and the connection held back */
        bool turn_open;         /* until its close callback */
        uv_stream_t *server;    /* the listener's stream, once it reported a connection */
        unsigned accepted;      /* this turn */
        bool held;              /* a connection waits in libuv for the next turn */
        bool closing;
        unsigned long long refused; /* connections from another user, in all */
        uint64_t refused_logged_at; /* uv_now of the last line about them; 0: none yet */
};


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
        if (n == 1 && strcmp(words[0], "reload") == 0)
                return SF_CONTROL_RELOAD;
        if (n == 0 || strcmp(words[0], "stats") != 0)
                return -EINVAL;
        if (n == 1) {
                *fmt = SF_STATS_TEXT;
                return SF_CONTROL_STATS;
        }
        return sf_stats_format_parse(words[1], fmt) < 0 ? -EINVAL : SF_CONTROL_STATS;
}

static void control_maybe_free(struct sf_control *ctl) {
        if (ctl->closing && !ctl->turn_open && sf_list_empty(&ctl->clients))
                free(ctl);
}

static void on_turn_closed(uv_handle_t *h) {
        struct sf_control *ctl = h->data;
        ctl->turn_open = false;
        control_maybe_free(ctl);
}

static void on_client_closed(uv_handle_t *h) {
        struct client *cl = h->data;
        if (--cl->pending_closes > 0)
                return;
        struct sf_control *ctl = cl->ctl;
        sf_list_remove(&ctl->clients, &cl->node);
        free(cl->answer);
        free(cl);
        control_maybe_free(ctl);
}

static void client_close(struct client *cl) {
        if (cl->closing)
                return;
        cl->closing = true;
        if (cl->admitted) {
                cl->admitted = false;
                cl->ctl->n_admitted--;
        }
        cl->pending_closes = 2;
        uv_close((uv_handle_t *)&cl->pipe, on_client_closed);
        uv_close((uv_handle_t *)&cl->timer, on_client_closed);
}

/* libuv runs a turn's timers before it polls: after a turn longer than the timeout (a relay
 * busy with bulk streams on a loaded machine) the deadline fires with the client's request
 * already waiting unread, and closing then resets the connection. One more turn (a timer a
 * little later, so not in this turn's timer phase) lets the poll deliver it; a client that
 * really said nothing goes then. */
#define GRACE_MS 10
static void on_request_timeout(uv_timer_t *t) {
        struct client *cl = t->data;
        if (!cl->grace) {
                cl->grace = true;
                uv_timer_start(t, on_request_timeout, GRACE_MS, 0);
                return;
        }
        client_close(cl);
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
        if (parsed == SF_CONTROL_STATS) {
                struct sf_proc_stats p;
                sf_proc_stats_read(&p);
                sf_stats_render(out, fmt, sf_relay_conf(cl->ctl->relay), cl->ctl->relay, &p);
        } else if (parsed == SF_CONTROL_RELOAD && cl->ctl->reload_cb) {
                char msg[2048];
                int r = cl->ctl->reload_cb(cl->ctl->reload_data, msg, sizeof msg);
                fprintf(out, "%s%s\n", r < 0 ? "error: " : "", msg);
        } else if (parsed == SF_CONTROL_RELOAD) {
                fputs("error: this relay does not reload (sockferry run: restart the container)\n", out);
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
        cl->grace = false;
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
 * (relay/sys/platform.h). */
static bool peer_allowed(struct sf_control *ctl, struct client *cl) {
        char who[96], allowed[64];
        if (sf_peer_trusted((uv_stream_t *)&cl->pipe, who, sizeof who, allowed, sizeof allowed))
                return true;
        ctl->refused++;
        uint64_t now = uv_now(cl->pipe.loop);
        if (ctl->refused_logged_at != 0 && now - ctl->refused_logged_at < REFUSED_LOG_INTERVAL_MS)
                return false;
        ctl->refused_logged_at = now ? now : 1;
        sf_log_warn("control %s: refused a connection from %s: only %s may read the stats or reload "
                    "(%llu refused in all; at most one such line every %d s)",
                    ctl->ep.text, who, allowed, ctl->refused, REFUSED_LOG_INTERVAL_MS / 1000);
        return false;
}

static void client_accept(struct sf_control *ctl, uv_stream_t *server) {
        struct client *cl = calloc(1, sizeof *cl);
        if (!cl) {
                sf_log_warn("control %s: out of memory; a request was not answered", ctl->ep.text);
                return;
        }
        cl->ctl = ctl;
        uv_pipe_init(server->loop, &cl->pipe, 0);
        uv_timer_init(server->loop, &cl->timer);
        cl->pipe.data = cl->timer.data = cl;
        sf_list_push_back(&ctl->clients, &cl->node);
        if (uv_accept(server, (uv_stream_t *)&cl->pipe) < 0 || !peer_allowed(ctl, cl) ||
            ctl->n_admitted >= MAX_CLIENTS) {
                client_close(cl);
                return;
        }
        cl->admitted = true;
        ctl->n_admitted++;
        uv_timer_start(&cl->timer, on_request_timeout, REQUEST_TIMEOUT_MS, 0);
        uv_read_start((uv_stream_t *)&cl->pipe, on_alloc, on_read);
}

static void on_connection(uv_stream_t *server, int status) {
        struct sf_control *ctl = server->data;
        if (status < 0 || ctl->closing)
                return;
        ctl->server = server;
        if (ctl->accepted >= ACCEPT_BATCH) {
                ctl->held = true;
                return;
        }
        ctl->accepted++;
        client_accept(ctl, server);
}

/* Runs before the loop waits: the connection held back is taken, which lets libuv watch the
 * listener again. */
static void on_turn(uv_prepare_t *h) {
        struct sf_control *ctl = h->data;
        ctl->accepted = 0;
        if (!ctl->held || ctl->closing)
                return;
        ctl->held = false;
        ctl->accepted++;
        client_accept(ctl, ctl->server);
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
        ctl->ep = conf->control;
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
        uv_prepare_init(loop, &ctl->turn);
        ctl->turn.data = ctl;
        uv_prepare_start(&ctl->turn, on_turn);
        uv_unref((uv_handle_t *)&ctl->turn);
        ctl->turn_open = true;
        sf_log_info("control socket on %s", conf->control.text);
        *out = ctl;
        return 0;
fail:
        free(f);
        free(ctl);
        return r;
}

void sf_control_on_reload(struct sf_control *ctl, sf_control_reload_cb cb, void *data) {
        ctl->reload_cb = cb;
        ctl->reload_data = data;
}

const struct sf_listener *sf_control_listener(const struct sf_control *ctl) {
        return &ctl->listener;
}

void sf_control_close(struct sf_control *ctl) {
        if (!ctl)
                return;
        ctl->closing = true;
        /* A client that has its answer (a reload that moved the control socket answers on the
         * old one) ends on its own, within REQUEST_TIMEOUT_MS. */
        for (struct sf_list_node *n = ctl->clients.first; n; n = n->next) {
                struct client *cl = sf_list_entry(n, struct client, node);
                if (!cl->answered)
                        client_close(cl);
        }
        sf_listener_close(&ctl->listener);
        if (ctl->turn_open)
                uv_close((uv_handle_t *)&ctl->turn, on_turn_closed);
        control_maybe_free(ctl);
}
