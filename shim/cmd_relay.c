/* sockferry relay: run the forwards in the foreground until SIGTERM/SIGINT; SIGHUP (or a
 * control-socket request, `sockferry reload`) reloads the configuration. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "conf/log.h"
#include "relay/control/control.h"
#include "relay/listen/listener.h"
#include "relay/relay.h"
#include "relay/sys/sandbox.h"
#include "shim/cli.h"
#include "shim/confsearch.h"
#include "shim/notify.h"
#include "shim/privs.h"

/* Where the system has no SIGHUP of its own (Windows) a reload is a control-socket request only. */
#ifdef SIGBREAK
#define HAVE_RELOAD_SIGNAL 0
#else
#define HAVE_RELOAD_SIGNAL 1
#endif

struct relay_main {
        uv_loop_t *loop;
        struct sf_relay *relay;
        struct sf_control *control;
        struct sf_control *control_old; /* closed in the next turn: it may answer a reload */
        uv_timer_t control_old_timer;    /* set up by the first reload that moves the socket */
        bool control_old_timer_init;
        struct sf_cli_opts opts; /* read again by a reload */
        struct sf_conf *conf;    /* the one the relay runs */
        uv_signal_t sigs[SF_CLI_N_STOP_SIGNALS];
        uv_signal_t hup;
        int signals_seen;
        bool failed;
};

static void help(void) {
        fputs("Usage: sockferry relay [-c FILE] [-F SPEC]... [-u U] [-t] [-v|-q] [--log-format text|json]\n"
              "\n"
              "Run the configured forwards in the foreground until SIGTERM or SIGINT (Ctrl+C; on Windows\n"
              "also Ctrl+Break or the console's closing), then drain. SIGHUP (or sockferry reload)\n"
              "reads the configuration and token files again: added forwards are bound, removed ones\n"
              "drain, changed ones serve new connections with the new settings; a bad file changes\n"
              "nothing.\n"
              "\n"
              "  -c, --config FILE   INI configuration (see sockferry.conf(5))\n"
              "  -F, --forward SPEC  NAME:LISTEN=CONNECT[|CONNECT...][,key=value]... (repeatable)\n"
              "  -u, --user U        after binding, run as U (NAME|UID[:GROUP])\n"
              "  -t, --test          check the configuration, token files and paths, print what would be\n"
              "                      bound, then exit; binds nothing\n"
              "  -v, --verbose       more log output (repeatable)\n"
              "  -q, --quiet         less log output (repeatable)\n"
              "      --log-format F  text or json (overrides log-format)\n"
              "  -V, --version       show the version\n"
              "  -h, --help          show this help\n"
              "\n"
              "Exit status: 0 stopped by SIGTERM/SIGINT (or -t: the configuration is good), 1 runtime\n"
              "failure (a listen path in the way, a port in use), 64 usage, 78 configuration.\n",
              stdout);
}

static void control_old_close(struct relay_main *m) {
        sf_control_close(m->control_old);
        m->control_old = NULL;
}

static void on_stopped(struct sf_relay *relay, void *data) {
        struct relay_main *m = data;
        sf_control_close(m->control);
        m->control = NULL;
        control_old_close(m);
        if (m->control_old_timer_init)
                uv_close((uv_handle_t *)&m->control_old_timer, NULL);
        if (HAVE_RELOAD_SIGNAL) {
                uv_close((uv_handle_t *)&m->hup, NULL);
                signal(SIGHUP, SIG_IGN);
        }
        sf_sandbox_close();
        /* Closing the handles restores the default action: a late second SIGTERM would turn
         * the clean exit that is under way into a death by signal. */
        for (size_t i = 0; i < SF_CLI_N_STOP_SIGNALS; i++) {
                uv_close((uv_handle_t *)&m->sigs[i], NULL);
                signal(sf_cli_stop_signals[i], SIG_IGN);
        }
}

static void on_fatal(struct sf_relay *relay, int err, void *data) {
        struct relay_main *m = data;
        m->failed = true;
        sf_relay_stop(relay, m->conf->drain_timeout_ms, on_stopped, m);
}

/* Landlock for the directories the relay's sockets are in (relay/sys/sandbox.h), while the
 * process has one thread. 0 or -errno, logged. */
static int sandbox_confine(const struct relay_main *m) {
        size_t n = sf_relay_n_forwards(m->relay), k = 0;
        int *dirs = calloc(n + 1, sizeof *dirs);
        if (!dirs) {
                sf_log_error("seccomp sandbox: out of memory");
                return -ENOMEM;
        }
        for (size_t i = 0; i <= n; i++) {
                const struct sf_listener *l = i < n ? sf_relay_listener(m->relay, i)
                                              : m->control ? sf_control_listener(m->control) : NULL;
                if (l && l->owned)
                        dirs[k++] = l->dirfd;
        }
        int r = sf_sandbox_confine(dirs, k);
        free(dirs);
        return r;
}

static void on_control_old_timer(uv_timer_t *t) {
        control_old_close(t->data);
}

/* The globals a running relay cannot take: said, so nobody believes they applied. */
static void warn_restart_keys(const struct sf_conf *now, const struct sf_conf *next) {
        if (now->user_set != next->user_set || (next->user_set && strcmp(now->user, next->user) != 0))
                sf_log_warn("reload: user changed: the relay keeps running as it started; restart it to change that");
        if (now->seccomp != next->seccomp || now->no_new_privs != next->no_new_privs)
                sf_log_warn("reload: seccomp or no-new-privs changed: applies at the next start");
}

/* Reads the configuration again (file and -F) and applies it. The answer is one line: the
 * summary, or what was wrong (the loader's own words, file:line) and that nothing changed. */
static int relay_reload(void *data, char *msg, size_t cap) {
        struct relay_main *m = data;
        char errors[1536];
        const char *what = m->opts.file ? m->opts.file : "the -F forwards";
        enum sf_log_level level = sf_log_get_level();
        struct sf_conf *next = calloc(1, sizeof *next);
        struct sf_control *ctl = m->control;
        bool ctl_new = false;
        int r = -ENOMEM;

        sf_log_info("reload: reading %s", what);
        sf_notify("RELOADING=1");
        sf_log_capture(errors, sizeof errors);
        if (next) {
                sf_conf_init(next);
                r = sf_cli_conf_load(next, &m->opts, false) ? -EINVAL : 0;
        }
        if (r == 0 && next->n_forwards == 0) {
                sf_log_error("%s: no forward left (a [NAME] section with listen and connect)", what);
                r = -EINVAL;
        }
        /* The control socket: one on a new endpoint is bound first (the reload fails if it
         * cannot be), the old one goes once the reload is done. */
        bool ctl_changed = r == 0 && (next->control_set != m->conf->control_set ||
                                      (next->control_set && !sf_endpoint_equal(&next->control, &m->conf->control)));
        if (ctl_changed && next->control_set) {
                r = sf_control_new(m->loop, next, m->relay, &ctl);
                ctl_new = r == 0;
        } else if (ctl_changed) {
                ctl = NULL;
        }
        struct sf_relay_reload_counts c;
        if (r == 0 && (r = sf_relay_reload(m->relay, next, &c)) < 0 && ctl_new)
                sf_control_close(ctl);
        sf_log_capture(NULL, 0);
        if (r < 0) {
                if (r == -EACCES && sf_sandbox_confined())
                        sf_log_error("reload: the sandbox lets the relay create sockets only in the directories it "
                                     "had at start: restart it for a new directory (or set seccomp = no)");
                if (next)
                        sf_conf_free(next);
                free(next);
                sf_log_setup(level, sf_log_get_format());
                snprintf(msg, cap, "reload of %s failed, nothing changed: %s", what, errors[0] ? errors : strerror(-r));
                sf_log_error("reload: nothing changed");
                sf_notify("READY=1");
                return r;
        }
        warn_restart_keys(m->conf, next);
        if (ctl_changed) {
                if (ctl)
                        sf_control_on_reload(ctl, relay_reload, m);
                if (m->control && ctl)
                        sf_log_info("reload: the control socket moves from %s to %s", m->conf->control.text,
                                    next->control.text);
                else if (ctl)
                        sf_log_info("reload: control socket on %s", next->control.text);
                else
                        sf_log_info("reload: control socket %s closed", m->conf->control.text);
                /* The old one may be answering this very request: it goes in the next turn. */
                control_old_close(m);
                if (m->control) {
                        if (!m->control_old_timer_init) {
                                uv_timer_init(m->loop, &m->control_old_timer);
                                m->control_old_timer.data = m;
                                m->control_old_timer_init = true;
                        }
                        m->control_old = m->control;
                        uv_timer_start(&m->control_old_timer, on_control_old_timer, 0, 0);
                }
                m->control = ctl;
        }
        sf_conf_free(m->conf);
        free(m->conf);
        m->conf = next;
        snprintf(msg, cap, "reload: %zu added, %zu removed, %zu changed, %zu unchanged", c.added, c.removed, c.changed,
                 c.unchanged);
        sf_log_info("%s", msg);
        sf_notify("READY=1");
        return 0;
}

static void on_hup(uv_signal_t *s, int signum) {
        (void)signum;
        char msg[2048];
        relay_reload(s->data, msg, sizeof msg);
}

static void on_signal(uv_signal_t *s, int signum) {
        struct relay_main *m = s->data;
        if (m->signals_seen++ == 0) {
                sf_log_info("%s received: stopping", strsignal(signum));
                sf_notify("STOPPING=1");
                sf_relay_stop(m->relay, m->conf->drain_timeout_ms, on_stopped, m);
        } else {
                sf_log_warn("%s received again: closing every connection now", strsignal(signum));
                sf_relay_stop(m->relay, 0, on_stopped, m);
        }
}

int sf_cmd_relay(int argc, char **argv) {
        static const struct option opts[] = { SF_CLI_LONGOPTS, { "user", required_argument, NULL, 'u' }, {} };
        struct relay_main m = { 0 };
        struct sf_cli_opts *o = &m.opts;
        int c;

        if (sf_cli_opts_init(o, argc) < 0)
                return 1;
        o->sockets = SF_CLI_SOCKETS_MADE;
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:" SF_CLI_SHORTOPTS "u:", opts, NULL)) != -1) {
                int r = c == 'h' ? (help(), SF_CLI_EXIT_OK) : sf_cli_opt("relay", c, argv, o);
                if (r != SF_CLI_NEXT) {
                        sf_cli_opts_free(o);
                        return r == SF_CLI_EXIT_OK ? 0 : r;
                }
        }
        if (optind < argc) {
                sf_cli_opts_free(o);
                return sf_cli_usage_error("relay", "unexpected argument '%s'", argv[optind]);
        }

        /* found outlives the loop: a reload reads the file again. */
        char found[PATH_MAX], places[2 * PATH_MAX];
        if (!o->file && o->n_specs == 0)
                o->file = sf_confsearch_find(found, sizeof found);
        m.conf = calloc(1, sizeof *m.conf);
        if (!m.conf) {
                sf_cli_opts_free(o);
                return 1;
        }
        struct sf_conf *conf = m.conf;
        sf_conf_init(conf);
        int status = sf_cli_conf_load(conf, o, false);
        bool test = o->test;
        if (status == 0 && conf->n_forwards == 0) {
                sf_log_error("nothing to relay: give a forward with -F NAME:LISTEN=CONNECT or a config file "
                             "with a [NAME] section (-c FILE; without -c and -F: %s)",
                             sf_confsearch_places(places, sizeof places));
                status = SF_EX_CONFIG;
        }
        if (status == 0 && test)
                status = sf_cli_conf_test(conf);
        if (status || test) {
                sf_conf_free(conf);
                free(conf);
                sf_cli_opts_free(o);
                return status;
        }

        signal(SIGPIPE, SIG_IGN);
        sf_cli_raise_nofile();
        /* Before the loop exists: libuv >= 1.45 would set up an io_uring ring in uv_loop_init,
         * which the sandbox must refuse later (relay/sys/sandbox.h). */
        int prepared = conf->seccomp ? sf_sandbox_prepare() : -ENOSYS;
        if (prepared < 0 && prepared != -ENOSYS && prepared != -ENOTSUP) {
                sf_conf_free(conf);
                free(conf);
                sf_cli_opts_free(o);
                return 1;
        }
        uv_loop_t loop;
        m.loop = &loop;
        uv_loop_init(&loop);
        int r = sf_relay_new(&loop, conf, &m.relay);
        if (r < 0) {
                status = SF_EX_CONFIG;
                goto out;
        }
        /* The control socket is bound with the listeners, before privileges are dropped. A
         * path or address that a policy refuses (-EPERM) is a configuration error. */
        if ((r = sf_relay_bind(m.relay)) < 0 ||
            (conf->control_set && (r = sf_control_new(&loop, conf, m.relay, &m.control)) < 0)) {
                status = r == -EPERM ? SF_EX_CONFIG : 1;
                goto out;
        }
        if (m.control)
                sf_control_on_reload(m.control, relay_reload, &m);
        /* Before the relay starts, which may start libuv's threadpool (a name to resolve). */
        int confined = prepared == 0 ? sandbox_confine(&m) : -ENOSYS;
        if (sf_privs_drop(conf) < 0 || (confined < 0 && confined != -ENOSYS && confined != -ENOTSUP) ||
            sf_relay_start(m.relay) < 0) {
                status = 1;
                goto out;
        }
        for (size_t i = 0; i < SF_CLI_N_STOP_SIGNALS; i++) {
                uv_signal_init(&loop, &m.sigs[i]);
                m.sigs[i].data = &m;
                uv_signal_start(&m.sigs[i], on_signal, sf_cli_stop_signals[i]);
        }
        if (HAVE_RELOAD_SIGNAL) {
                uv_signal_init(&loop, &m.hup);
                m.hup.data = &m;
                uv_signal_start(&m.hup, on_hup, SIGHUP);
        }
        sf_relay_on_fatal(m.relay, on_fatal, &m);
        /* Bound, tokens read, privileges dropped, loop handles set up: from here on the relay
         * only moves bytes, and the sandbox allows no more than that (relay/sys/sandbox.h). */
        int sandbox = conf->seccomp ? sf_sandbox_apply(&loop) : -ENOSYS;
        if (sandbox < 0 && sandbox != -ENOSYS && sandbox != -ENOTSUP) {
                m.failed = true;
                sf_relay_stop(m.relay, 0, on_stopped, &m);
        } else {
                if (conf->seccomp && !sf_sandbox_available())
                        sf_log_debug("seccomp sandbox: not in this build");
                sf_log_info("ready: %zu forward%s", conf->n_forwards, conf->n_forwards == 1 ? "" : "s");
                sf_notify("READY=1");
        }
        sf_relay_run(&loop, m.relay);
        if (m.failed)
                status = 1;
out:
        if (m.relay && status) {
                /* Never started or failed to start: let libuv release what was opened. */
                sf_control_close(m.control);
                sf_relay_stop(m.relay, 0, NULL, NULL);
                sf_relay_run(&loop, m.relay);
        }
        sf_relay_free(m.relay);
        uv_loop_close(&loop);
        sf_conf_free(m.conf);
        free(m.conf);
        sf_cli_opts_free(o);
        return status;
}
