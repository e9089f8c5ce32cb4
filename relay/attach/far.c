#include "relay/attach/far.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "conf/log.h"
#include "relay/engine/bufpool.h"
#include "relay/link/link.h"
#include "relay/link/mux.h"
#include "relay/link/table.h"
#include "relay/listen/listener.h"
#include "relay/relay.h"
#include "relay/sys/platform.h"

/* The sections of a configuration file at most (conf/load.c reads no more either). */
#define CONF_TEXT_MAX (1024 * 1024)
#define KEEPALIVE_MS 15000

static const int stop_signals[] = { SIGTERM, SIGINT };
#define N_STOP_SIGNALS (sizeof stop_signals / sizeof stop_signals[0])

/* (Not "struct far": windef.h defines far away.) */
struct far_end {
        uv_loop_t loop;
        const struct sf_link_stdio_params *p;
        struct sf_bufpool *pool;
        struct sf_link_params lp;
        struct sf_link_entry *entry;
        struct sf_link_waiter waiter;

        struct sf_mux_stream *cfg;
        bool cfg_asked;
        char *text;
        size_t len, cap;

        struct sf_conf conf;
        struct sf_relay *relay;
        bool relay_started;
        uv_signal_t sigs[N_STOP_SIGNALS];
        bool signals_on;
        uv_timer_t end_timer; /* the end runs outside the link's callbacks */
        bool ending;
        int status;
};

static void on_relay_stopped(struct sf_relay *relay, void *data) {
        (void)relay;
        struct far_end *f = data;
        sf_link_wait_cancel(f->entry, &f->waiter);
        sf_link_entry_free(f->entry);
        f->entry = NULL;
}

static void on_end(uv_timer_t *t) {
        struct far_end *f = t->data;
        uv_close((uv_handle_t *)&f->end_timer, NULL);
        for (size_t i = 0; f->signals_on && i < N_STOP_SIGNALS; i++)
                uv_close((uv_handle_t *)&f->sigs[i], NULL);
        f->signals_on = false;
        if (f->cfg) {
                sf_mux_stream_close(f->cfg);
                f->cfg = NULL;
        }
        if (f->relay) {
                sf_relay_stop(f->relay, 0, on_relay_stopped, f);
                return;
        }
        on_relay_stopped(NULL, f);
}

/* The link ended, a signal came, or it failed: the sockets go (the relay's stop closes and
 * removes them at once), then the link, in the loop's next turn: the link may not be freed
 * from inside its own callbacks, where this is called. */
static void far_end(struct far_end *f, int status) {
        if (f->ending)
                return;
        f->ending = true;
        if (status)
                f->status = status;
        uv_timer_start(&f->end_timer, on_end, 0, 0);
}

/* The host's sections: bound as any relay's, every candidate the link. */
static void configure(struct far_end *f) {
        static const struct sf_endpoint host_ep = { .kind = SF_EP_UNIX, .text = "the host (sockferry attach)" };
        sf_conf_init(&f->conf);
        int r = sf_conf_load_text(&f->conf, "attach", f->text ? f->text : "", f->len);
        for (size_t i = 0; r == 0 && i < f->conf.n_forwards; i++) {
                struct sf_forward *fw = &f->conf.forwards[i];
                if (!(fw->connect = malloc(sizeof *fw->connect))) {
                        r = -ENOMEM;
                        break;
                }
                *fw->connect = host_ep;
                fw->n_connect = 1;
        }
        if (r == 0 && f->conf.n_forwards == 0) {
                sf_log_error("attach sent no listen section: give attach a forward (-F NAME:LISTEN=CONNECT)");
                r = -EINVAL;
        }
        /* A far end that is not root makes what is under /run/sockferry in a place of its own. */
        if (r < 0 || sf_conf_validate(&f->conf) < 0 || sf_listener_default_dir(&f->conf, true, false) < 0) {
                far_end(f, SF_EX_CONFIG);
                return;
        }
        if (sf_relay_new(&f->loop, &f->conf, &f->relay) < 0) {
                far_end(f, SF_EX_CONFIG);
                return;
        }
        if (sf_relay_bind(f->relay) < 0) {
                far_end(f, 1);
                return;
        }
        if (f->p->bound)
                f->p->bound(&f->conf, f->p->data);
        sf_relay_use_link(f->relay, f->entry);
        if (sf_relay_start(f->relay) < 0) {
                far_end(f, 1);
                return;
        }
        f->relay_started = true;
        sf_log_info("ready: %zu forward%s over stdin/stdout", f->conf.n_forwards, f->conf.n_forwards == 1 ? "" : "s");
        /* The relay's engine serves its sockets from here on (sf_relay_run). */
        uv_stop(&f->loop);
}

static void on_cfg(void *ev, uint32_t events) {
        (void)events;
        struct far_end *f = ev;
        for (;;) {
                if (f->len == f->cap) {
                        size_t cap = f->cap ? f->cap * 2 : 4096;
                        char *t = cap <= CONF_TEXT_MAX ? realloc(f->text, cap) : NULL;
                        if (!t) {
                                sf_log_error("the listen sections from attach: more than %d bytes, or out of memory",
                                             CONF_TEXT_MAX);
                                far_end(f, 1);
                                return;
                        }
                        f->text = t;
                        f->cap = cap;
                }
                ssize_t n = sf_mux_stream_recv(f->cfg, f->text + f->len, f->cap - f->len);
                if (n > 0) {
                        f->len += (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n < 0) {
                        const char *why = sf_mux_stream_reason(f->cfg);
                        sf_log_error("attach did not send the listen sections: %s", why[0] ? why : strerror(errno));
                        far_end(f, 1);
                        return;
                }
                sf_mux_stream_close(f->cfg);
                f->cfg = NULL;
                configure(f);
                return;
        }
}

static void on_link_state(struct sf_link_waiter *w, struct sf_link *l) {
        struct far_end *f = (struct far_end *)((char *)w - offsetof(struct far_end, waiter));
        enum sf_link_state st = sf_link_state(l);
        if (st == SF_LINK_UP && !f->cfg_asked) {
                f->cfg_asked = true;
                int err = 0;
                f->cfg = sf_link_stream_open(l, NULL, false, false, &err);
                if (!f->cfg) {
                        sf_log_error("asking attach for the listen sections: %s", strerror(-err));
                        far_end(f, 1);
                        return;
                }
                sf_mux_stream_watch(f->cfg, on_cfg, f);
                sf_mux_stream_shutdown(f->cfg);
                return;
        }
        if (st == SF_LINK_DOWN || st == SF_LINK_CLOSED) {
                const char *cause = sf_link_cause(l);
                bool eof = strcmp(cause, "the peer closed it") == 0;
                if (f->relay_started)
                        sf_log(eof ? SF_LOG_INFO : SF_LOG_WARN, NULL, 0, "the link to attach ended (%s): removing the sockets",
                               eof ? "stdin closed" : cause);
                else if (!eof)
                        sf_log_warn("the link to attach ended before the sockets were bound: %s", cause);
                far_end(f, eof || f->ending ? 0 : 1);
        }
}

static void on_signal(uv_signal_t *s, int signum) {
        struct far_end *f = s->data;
        sf_log_info("%s received: removing the sockets", strsignal(signum));
        far_end(f, 0);
}

static int pipe_of(uv_loop_t *loop, int fd, const char *what, uv_pipe_t **out) {
        uv_pipe_t *p = malloc(sizeof *p);
        if (!p)
                return -ENOMEM;
        uv_pipe_init(loop, p, 0);
        int r = uv_pipe_open(p, fd);
        if (r < 0) {
                sf_log_error("link --stdio: %s is not a pipe or socket (%s): it is started by sockferry attach, "
                             "which gives it pipes",
                             what, uv_strerror(r));
                uv_close((uv_handle_t *)p, (uv_close_cb)free);
                return r;
        }
        *out = p;
        return 0;
}

int sf_link_stdio_run(int in_fd, int out_fd, const struct sf_link_stdio_params *p) {
        struct far_end f = { .p = p };
        uv_loop_init(&f.loop);
        uv_timer_init(&f.loop, &f.end_timer);
        f.end_timer.data = &f;
        sf_conf_init(&f.conf);
        f.pool = sf_bufpool_new(8, sf_memory_trim);
        f.lp = (struct sf_link_params){
                .name = "attach (stdin/stdout)",
                .keepalive_ms = KEEPALIVE_MS,
        };
        sf_mux_config_init(&f.lp.mux, SF_MUX_CLIENT_END_STREAMS);
        uv_pipe_t *in = NULL, *out = NULL;
        int status = 1;
        if (!f.pool || pipe_of(&f.loop, in_fd, "stdin", &in) < 0 || pipe_of(&f.loop, out_fd, "stdout", &out) < 0) {
                if (in)
                        uv_close((uv_handle_t *)in, (uv_close_cb)free);
                goto out;
        }
        if (sf_link_entry_adopt(&f.loop, f.pool, &f.lp, SF_MUX_CLIENT, (uv_stream_t *)in, (uv_stream_t *)out, NULL,
                                &f.entry) < 0) {
                sf_log_error("link --stdio: out of memory");
                goto out;
        }
        for (size_t i = 0; i < N_STOP_SIGNALS; i++) {
                uv_signal_init(&f.loop, &f.sigs[i]);
                f.sigs[i].data = &f;
                uv_signal_start(&f.sigs[i], on_signal, stop_signals[i]);
        }
        f.signals_on = true;
        f.waiter.cb = on_link_state;
        sf_link_wait(f.entry, &f.waiter);
        uv_run(&f.loop, UV_RUN_DEFAULT);
        if (f.relay_started)
                sf_relay_run(&f.loop, f.relay);
        status = f.status;
out:
        if (!uv_is_closing((uv_handle_t *)&f.end_timer))
                uv_close((uv_handle_t *)&f.end_timer, NULL);
        uv_run(&f.loop, UV_RUN_DEFAULT);
        sf_relay_free(f.relay);
        uv_loop_close(&f.loop);
        sf_bufpool_free(f.pool);
        sf_conf_free(&f.conf);
        free(f.text);
        return status;
}
