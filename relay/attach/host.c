#include "relay/attach/host.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "conf/log.h"
#include "relay/attach/wire.h"
#include "relay/link/backoff.h"
#include "relay/engine/bufpool.h"
#include "relay/link/link.h"
#include "relay/link/server.h"
#include "relay/link/mux.h"
#include "relay/relay.h"
#include "relay/sys/platform.h"

/* A run whose link stayed up this long was a good one: the next failure starts the backoff
 * over (a container restart re-attaches at once). */
#define GOOD_RUN_MS 5000
/* The command exited: what it left in its pipes arrives within this, then they are closed
 * (a grandchild may hold them). */
#define EXIT_GRACE_MS 1000
/* The link ended (its stdin is closed) but the command goes on: SIGTERM after this, SIGKILL
 * after as much again. */
#define KILL_GRACE_MS 3000
/* A line of the far end's stderr as logged (escaped, conf/log.h): longer ones are cut. */
#define LINE_MAX_LEN 1024
/* The far end's stderr lines logged a second at most; the rest are counted (a container that
 * floods its stderr costs the host's log a line a second). */
#define FAR_LINES_PER_SEC 20
/* Why a run ended, in plain words. */
#define WHY_MAX 1200

struct sf_attach {
        uv_loop_t *loop;
        const struct sf_conf *conf;
        struct sf_relay *relay;
        const struct sf_attach_params *p;
        struct sf_bufpool *pool;
        char *wire;
        size_t wire_len;
        /* The exec's link, served as a host relay serves its listeners' (relay/link/server.h):
         * one at a time, the one of the current run. */
        struct sf_link_server *links;

        /* One run of the command: over once it exited, its link ended and its stderr closed. */
        bool running;
        uv_process_t *proc;
        bool proc_alive;
        struct sf_link *link;
        uv_pipe_t *err;
        char line[LINE_MAX_LEN]; /* raw bytes of the line under way */
        size_t line_len;
        struct sf_log_ratelimit far_rate;
        char last[LINE_MAX_LEN];     /* the far end's last line */
        char last_err[LINE_MAX_LEN]; /* its last error or warning, or a line not of its log */
        char prev_err[LINE_MAX_LEN]; /* the run before's: the same line again is not news */
        char last_said[WHY_MAX + 200]; /* the last run's end as logged: the same again is not news */
        char cause[256]; /* why the link ended */
        int64_t status;
        int term_signal;
        int spawn_err;
        bool was_up, ever_up;
        uint64_t up_at;
        unsigned kill_stage;

        uv_timer_t timer; /* the backoff, or the grace after an exit or the link's end */
        struct sf_backoff backoff;
        unsigned handles; /* closes due: the timer, a process, a stderr pipe */
        bool draining, closing, timer_closed, closed;
        void (*close_cb)(void *data);
        void *close_data;
};

static void spawn(struct sf_attach *a);
static void run_check(struct sf_attach *a);

/* ---- the configuration stream ------------------------------------------------------------- */

/* The far end's first stream: the listen sections go out, then the stream ends both ways. */
struct cfg_stream {
        struct sf_mux_stream *s;
        char *text;
        size_t len, off;
        bool shut, peer_done;
};

static void cfg_end(struct cfg_stream *cs) {
        sf_mux_stream_close(cs->s);
        free(cs->text);
        free(cs);
}

static void cfg_event(void *ev, uint32_t events) {
        (void)events;
        struct cfg_stream *cs = ev;
        while (cs->off < cs->len) {
                ssize_t n = sf_mux_stream_send(cs->s, cs->text + cs->off, cs->len - cs->off);
                if (n < 0) {
                        if (errno == EAGAIN)
                                return;
                        cfg_end(cs);
                        return;
                }
                cs->off += (size_t)n;
        }
        if (!cs->shut) {
                sf_mux_stream_shutdown(cs->s);
                cs->shut = true;
        }
        char buf[256];
        while (!cs->peer_done) {
                ssize_t n = sf_mux_stream_recv(cs->s, buf, sizeof buf);
                if (n > 0)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                cs->peer_done = true;
        }
        cfg_end(cs);
}

static void cfg_stream_new(struct sf_attach *a, struct sf_mux_stream *s) {
        struct cfg_stream *cs = calloc(1, sizeof *cs);
        if (cs && (cs->text = malloc(a->wire_len)))
                memcpy(cs->text, a->wire, a->wire_len);
        if (!cs || !cs->text) {
                free(cs);
                sf_mux_stream_refuse(s, SF_MUX_UPSTREAM_UNAVAILABLE, "out of memory on the host");
                sf_mux_stream_close(s);
                return;
        }
        cs->s = s;
        cs->len = a->wire_len;
        sf_mux_stream_watch(s, cfg_event, cs);
        sf_mux_stream_accept(s);
        cfg_event(cs, SF_MUX_EV_OUT);
}

/* ---- the link ------------------------------------------------------------------------------ */

static void on_link_up(void *owner, struct sf_link *l) {
        (void)l;
        struct sf_attach *a = owner;
        a->was_up = a->ever_up = true;
        a->up_at = uv_now(a->loop);
        sf_log(SF_LOG_INFO, NULL, 0, "attached through %s: the far end binds %zu listen socket%s", a->p->what,
               a->conf->n_forwards, a->conf->n_forwards == 1 ? "" : "s");
}

static void on_stream_new(void *owner, struct sf_mux_stream *s, const char *service, bool by_default, bool probe,
                          const char *peer) {
        (void)by_default;
        (void)peer;
        struct sf_attach *a = owner;
        if (!service[0]) {
                cfg_stream_new(a, s);
                return;
        }
        sf_relay_stream_new(a->relay, s, service, probe);
}

static void on_link_ended(void *owner, struct sf_link *l) {
        struct sf_attach *a = owner;
        snprintf(a->cause, sizeof a->cause, "%s", sf_link_cause(l));
        a->link = NULL;
        run_check(a);
}

static const struct sf_link_route link_route = {
        .stream = on_stream_new,
        .up = on_link_up,
        .ended = on_link_ended,
};

/* The current run's link ends now (the command exited, or attach stops). */
static void link_end(struct sf_attach *a, const char *cause) {
        if (!a->link)
                return;
        snprintf(a->cause, sizeof a->cause, "%s", cause);
        sf_link_server_close(a->links);
        a->link = NULL;
}

/* ---- the far end's stderr ------------------------------------------------------------------ */

static void far_dropped(unsigned n) {
        if (n)
                sf_log(SF_LOG_WARN, NULL, 0, "%u line%s of the far end's stderr dropped (more than %d a second)", n,
                       n == 1 ? "" : "s", FAR_LINES_PER_SEC);
}

/* Whether a line of the far end at level may go to the host's log now (within the rate). */
static bool far_may_log(struct sf_attach *a, enum sf_log_level level) {
        if (level > sf_log_get_level())
                return false;
        unsigned dropped;
        bool ok = sf_log_ratelimit(&a->far_rate, FAR_LINES_PER_SEC, uv_hrtime() / 1000000, &dropped);
        far_dropped(dropped);
        return ok;
}

/* A line of the far end (len raw bytes): its own log lines ("TIME sockferry LEVEL [fwd]: msg")
 * keep their level and lose their time (ours comes first); anything else (the engine's CLI) is
 * a warning in its own words. Whatever the container wrote, it is escaped first: it reaches
 * the operator's terminal and the host's log. */
static void relay_line(struct sf_attach *a, const char *raw, size_t len) {
        while (len && (raw[len - 1] == '\r' || raw[len - 1] == ' '))
                len--;
        if (!len)
                return;
        char line[LINE_MAX_LEN];
        sf_log_escape(raw, len, line, sizeof line);
        snprintf(a->last, sizeof a->last, "%s", line);
        static const char *const levels[] = { "error", "warn", "info", "debug" };
        /* Its own: "sockferry LEVEL" first, or after the time (one word). */
        const char *p = strncmp(line, "sockferry ", 10) == 0 ? line : strchr(line, ' ');
        if (p && p != line && strncmp(++p, "sockferry ", 10) != 0)
                p = NULL;
        for (int lv = 0; p && lv < 4; lv++) {
                size_t k = strlen(levels[lv]);
                const char *rest = p + strlen("sockferry ");
                if (strncmp(rest, levels[lv], k) == 0 && (rest[k] == ':' || rest[k] == ' ')) {
                        rest += k;
                        if (*rest == ':')
                                rest++;
                        while (*rest == ' ')
                                rest++;
                        snprintf(a->last, sizeof a->last, "%s", rest);
                        if (lv <= SF_LOG_WARN)
                                snprintf(a->last_err, sizeof a->last_err, "%s", rest);
                        if (far_may_log(a, (enum sf_log_level)lv))
                                sf_log((enum sf_log_level)lv, NULL, 0, "far end: %s", rest);
                        return;
                }
        }
        snprintf(a->last_err, sizeof a->last_err, "%s", line);
        enum sf_log_level lv = strcmp(line, a->prev_err) == 0 ? SF_LOG_DEBUG : SF_LOG_WARN;
        if (far_may_log(a, lv))
                sf_log(lv, NULL, 0, "%s: %s", a->p->what, line);
}

static void err_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
        (void)suggested;
        struct sf_attach *a = h->data;
        *buf = uv_buf_init(a->line + a->line_len, (unsigned)(sizeof a->line - a->line_len));
}

static void on_handle_closed(uv_handle_t *h) {
        struct sf_attach *a = h->data;
        if (h != (uv_handle_t *)&a->timer)
                free(h);
        a->handles--;
        if (a->timer_closed && a->handles == 0 && !a->closed) {
                a->closed = true;
                if (a->close_cb)
                        a->close_cb(a->close_data);
        }
}

/* Closing and no run under way: the timer goes, and cb follows the last close. */
static void finish(struct sf_attach *a) {
        if (a->timer_closed)
                return;
        a->timer_closed = true;
        uv_timer_stop(&a->timer);
        a->handles++;
        uv_close((uv_handle_t *)&a->timer, on_handle_closed);
}

static void err_drop(struct sf_attach *a) {
        if (!a->err)
                return;
        if (a->line_len) {
                relay_line(a, a->line, a->line_len);
                a->line_len = 0;
        }
        far_dropped(sf_log_ratelimit_flush(&a->far_rate));
        a->handles++;
        uv_close((uv_handle_t *)a->err, on_handle_closed);
        a->err = NULL;
}

static void on_err_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        (void)buf;
        struct sf_attach *a = s->data;
        if (n < 0) {
                err_drop(a);
                run_check(a);
                return;
        }
        a->line_len += (size_t)n;
        char *start = a->line, *end = a->line + a->line_len, *nl;
        while ((nl = memchr(start, '\n', (size_t)(end - start)))) {
                relay_line(a, start, (size_t)(nl - start));
                start = nl + 1;
        }
        a->line_len = (size_t)(end - start);
        memmove(a->line, start, a->line_len);
        /* A line longer than the buffer is cut there. */
        if (a->line_len == sizeof a->line) {
                relay_line(a, a->line, a->line_len);
                a->line_len = 0;
        }
}

/* ---- one run of the command ------------------------------------------------------------ */

static void on_kill_timer(uv_timer_t *t) {
        struct sf_attach *a = t->data;
        if (!a->proc_alive)
                return;
        int sig = a->kill_stage++ == 0 ? SIGTERM : SIGKILL;
        sf_log(SF_LOG_INFO, NULL, 0, "%s goes on after its link ended: sending it %s", a->p->what,
               sig == SIGTERM ? "SIGTERM" : "SIGKILL");
        uv_process_kill(a->proc, sig);
        if (sig == SIGTERM)
                uv_timer_start(&a->timer, on_kill_timer, KILL_GRACE_MS, 0);
}

static void on_exit_grace(uv_timer_t *t) {
        struct sf_attach *a = t->data;
        link_end(a, "the command exited");
        err_drop(a);
        run_check(a);
}

static void on_proc_exit(uv_process_t *proc, int64_t status, int term_signal) {
        struct sf_attach *a = proc->data;
        a->status = term_signal ? -1 : status;
        a->term_signal = term_signal;
        a->proc_alive = false;
        a->handles++;
        uv_close((uv_handle_t *)proc, on_handle_closed);
        a->proc = NULL;
        if (a->link || a->err)
                uv_timer_start(&a->timer, on_exit_grace, EXIT_GRACE_MS, 0);
        run_check(a);
}

static void describe_status(const struct sf_attach *a, char *out, size_t cap) {
        if (a->spawn_err)
                snprintf(out, cap, "it could not be started: %s", strerror(-a->spawn_err));
        else if (a->term_signal)
                snprintf(out, cap, "killed by signal %d (%s)", a->term_signal, strsignal(a->term_signal));
        else
                snprintf(out, cap, "exit status %lld", (long long)a->status);
}

static void on_backoff(uv_timer_t *t) {
        spawn(t->data);
}

/* The run is over: why, then the next one after the backoff (or the end). */
static void run_over(struct sf_attach *a) {
        a->running = false;
        uv_timer_stop(&a->timer);
        char status[160], why[WHY_MAX] = "";
        describe_status(a, status, sizeof status);
        struct sf_attach_end end = {
                .spawn_err = a->spawn_err,
                .exit_status = a->status,
                .term_signal = a->term_signal,
                .was_up = a->was_up,
                .ever_up = a->ever_up,
                /* Its last error; else, before the link came up, what it wrote instead of frames
                 * (an engine's message on stdout); else its last line. */
                .last_line = a->last_err[0]                              ? a->last_err
                             : !a->was_up && strncmp(a->cause, "it wrote", 8) == 0 ? a->cause
                                                                         : a->last,
        };
        enum sf_attach_next next = a->p->ended ? a->p->ended(a->p->data, &end, why, sizeof why) : SF_ATTACH_RETRY;
        if (!why[0] && end.last_line[0])
                snprintf(why, sizeof why, "the far end said: %s", end.last_line);
        /* The link's own cause adds something only when it broke (not a plain end of file). */
        if (a->cause[0] && strcmp(a->cause, "the peer closed it") != 0 && end.last_line != a->cause &&
            strlen(why) + 2 < sizeof why)
                snprintf(why + strlen(why), sizeof why - strlen(why), "%sthe link: %s", why[0] ? "; " : "", a->cause);
        if (a->closing) {
                sf_log(SF_LOG_INFO, NULL, 0, "detached: %s ended (%s)", a->p->what, status);
                finish(a);
                return;
        }
        if (a->was_up && uv_now(a->loop) - a->up_at >= GOOD_RUN_MS)
                sf_backoff_reset(&a->backoff);
        if (next == SF_ATTACH_GIVE_UP && !a->ever_up) {
                sf_log(SF_LOG_ERROR, NULL, 0, "cannot attach: %s ended (%s)%s%s", a->p->what, status, why[0] ? ": " : "",
                       why);
                if (a->p->failed)
                        a->p->failed(a->p->data);
                return;
        }
        if (a->draining) {
                sf_log(SF_LOG_INFO, NULL, 0, "%s ended (%s) while stopping", a->p->what, status);
                return;
        }
        uint64_t wait = sf_backoff_next(&a->backoff);
        /* Logged once per change: an exec that keeps failing the same way is not news each time. */
        char said[sizeof a->last_said];
        snprintf(said, sizeof said, "%s%s%s", status, why[0] ? "; " : "", why);
        bool same = strcmp(said, a->last_said) == 0;
        snprintf(a->last_said, sizeof a->last_said, "%s", said);
        sf_log(same ? SF_LOG_DEBUG : a->was_up ? SF_LOG_WARN : SF_LOG_INFO, NULL, 0, "%s ended (%s): attaching again in %llums",
               a->p->what, said, (unsigned long long)wait);
        uv_timer_start(&a->timer, on_backoff, wait, 0);
}

static void run_check(struct sf_attach *a) {
        if (!a->running)
                return;
        if (!a->link && a->proc_alive && !uv_is_active((uv_handle_t *)&a->timer)) {
                /* Its stdin is closed: the far end exits on its own, or is made to. */
                a->kill_stage = 0;
                uv_timer_start(&a->timer, on_kill_timer, KILL_GRACE_MS, 0);
        }
        if (!a->proc_alive && !a->link && !a->err)
                run_over(a);
}

static uv_pipe_t *pipe_new(struct sf_attach *a) {
        uv_pipe_t *p = malloc(sizeof *p);
        if (p) {
                uv_pipe_init(a->loop, p, 0);
                p->data = a;
        }
        return p;
}

static void pipe_drop(struct sf_attach *a, uv_pipe_t *p) {
        if (!p)
                return;
        a->handles++;
        p->data = a;
        uv_close((uv_handle_t *)p, on_handle_closed);
}

static void spawn(struct sf_attach *a) {
        if (a->p->starting)
                a->p->starting(a->p->data);
        a->running = true;
        a->spawn_err = 0;
        a->status = 0;
        a->term_signal = 0;
        a->was_up = false;
        memcpy(a->prev_err, a->last_err, sizeof a->prev_err);
        a->last[0] = a->last_err[0] = a->cause[0] = '\0';
        a->line_len = 0;
        uv_pipe_t *in = pipe_new(a), *out = pipe_new(a), *err = pipe_new(a);
        a->proc = calloc(1, sizeof *a->proc);
        if (!in || !out || !err || !a->proc) {
                free(a->proc);
                a->proc = NULL;
                pipe_drop(a, in);
                pipe_drop(a, out);
                pipe_drop(a, err);
                a->spawn_err = -ENOMEM;
                run_check(a);
                return;
        }
        uv_stdio_container_t stdio[3] = {
                { .flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)in },
                { .flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)out },
                { .flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)err },
        };
        /* Its own session: Ctrl+C in the terminal reaches attach, which drains and then ends
         * the command, not the command first. */
        uv_process_options_t opts = {
                .exit_cb = on_proc_exit,
                .file = a->p->argv[0],
                .args = a->p->argv,
                .stdio_count = 3,
                .stdio = stdio,
                .flags = UV_PROCESS_DETACHED | UV_PROCESS_WINDOWS_HIDE,
        };
        a->proc->data = a;
        int r = uv_spawn(a->loop, a->proc, &opts);
        if (r < 0) {
                a->handles++;
                uv_close((uv_handle_t *)a->proc, on_handle_closed);
                a->proc = NULL;
                pipe_drop(a, in);
                pipe_drop(a, out);
                pipe_drop(a, err);
                a->spawn_err = -sf_errno_uv(r);
                run_check(a);
                return;
        }
        a->proc_alive = true;
        sf_log(SF_LOG_DEBUG, NULL, 0, "started %s (pid %d)", a->p->what, a->proc->pid);
        a->err = err;
        uv_read_start((uv_stream_t *)err, err_alloc, on_err_read);
        /* The far end's stdout is what we read, its stdin what we write. */
        if (sf_link_server_adopt(a->links, a->p->what, false, (uv_stream_t *)out, (uv_stream_t *)in, NULL,
                                 &a->link) < 0) {
                a->link = NULL;
                snprintf(a->cause, sizeof a->cause, "out of memory for the link");
        }
        run_check(a);
}

/* ---- the API ------------------------------------------------------------------------------ */

int sf_attach_new(uv_loop_t *loop, const struct sf_conf *conf, struct sf_relay *relay,
                  const struct sf_attach_params *p, struct sf_attach **out) {
        struct sf_attach *a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->loop = loop;
        a->conf = conf;
        a->relay = relay;
        a->p = p;
        a->pool = sf_bufpool_new(8, sf_memory_trim);
        if (!a->pool || sf_attach_wire_text(conf, &a->wire, &a->wire_len) < 0) {
                sf_bufpool_free(a->pool);
                free(a);
                return -ENOMEM;
        }
        /* Every forward's max-conns, and the configuration's stream. */
        struct sf_link_server_limits lim = { .max_streams = 1, .keepalive_ms = p->keepalive_ms };
        for (size_t i = 0; i < conf->n_forwards; i++)
                lim.max_streams += conf->forwards[i].max_conns;
        if (sf_link_server_new(loop, a->pool, NULL, &link_route, a, &lim, &a->links) < 0) {
                sf_bufpool_free(a->pool);
                free(a->wire);
                free(a);
                return -ENOMEM;
        }
        uv_timer_init(loop, &a->timer);
        a->timer.data = a;
        *out = a;
        spawn(a);
        return 0;
}

void sf_attach_drain(struct sf_attach *a) {
        a->draining = true;
        if (!a->running)
                uv_timer_stop(&a->timer);
        sf_link_server_drain(a->links);
}

void sf_attach_close(struct sf_attach *a, void (*cb)(void *data), void *data) {
        if (a->closing)
                return;
        a->closing = a->draining = true;
        a->close_cb = cb;
        a->close_data = data;
        uv_timer_stop(&a->timer);
        link_end(a, "attach stopped");
        if (a->running)
                run_check(a);
        else
                finish(a);
}

void sf_attach_free(struct sf_attach *a) {
        if (!a)
                return;
        sf_link_server_free(a->links);
        sf_bufpool_free(a->pool);
        free(a->wire);
        free(a);
}
