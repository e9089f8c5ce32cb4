/* sockferry relay: run the forwards in the foreground until SIGTERM/SIGINT. */
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

/* The signals that stop the relay, draining: SIGTERM and SIGINT; where the system has Ctrl+Break
 * (Windows) that too, and the console's closing, which libuv reports there as SIGHUP. */
static const int stop_signals[] = {
        SIGTERM, SIGINT,
#ifdef SIGBREAK
        SIGBREAK, SIGHUP,
#endif
};
#define N_STOP_SIGNALS (sizeof stop_signals / sizeof stop_signals[0])

struct relay_main {
        struct sf_relay *relay;
        struct sf_control *control;
        const struct sf_conf *conf;
        uv_signal_t sigs[N_STOP_SIGNALS];
        int signals_seen;
        bool failed;
};

static void help(void) {
        fputs("Usage: sockferry relay [-c FILE] [-F SPEC]... [-u U] [-t] [-v|-q] [--log-format text|json]\n"
              "\n"
              "Run the configured forwards in the foreground until SIGTERM or SIGINT (Ctrl+C; on Windows\n"
              "also Ctrl+Break or the console's closing), then drain.\n"
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

static void on_stopped(struct sf_relay *relay, void *data) {
        struct relay_main *m = data;
        sf_control_close(m->control);
        m->control = NULL;
        sf_sandbox_close();
        /* Closing the handles restores the default action: a late second SIGTERM would turn
         * the clean exit that is under way into a death by signal. */
        for (size_t i = 0; i < N_STOP_SIGNALS; i++) {
                uv_close((uv_handle_t *)&m->sigs[i], NULL);
                signal(stop_signals[i], SIG_IGN);
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
        struct sf_cli_opts o;
        int c;

        if (sf_cli_opts_init(&o, argc) < 0)
                return 1;
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:" SF_CLI_SHORTOPTS "u:", opts, NULL)) != -1) {
                int r = c == 'h' ? (help(), SF_CLI_EXIT_OK) : sf_cli_opt("relay", c, argv, &o);
                if (r != SF_CLI_NEXT) {
                        sf_cli_opts_free(&o);
                        return r == SF_CLI_EXIT_OK ? 0 : r;
                }
        }
        if (optind < argc) {
                sf_cli_opts_free(&o);
                return sf_cli_usage_error("relay", "unexpected argument '%s'", argv[optind]);
        }

        char found[PATH_MAX], places[2 * PATH_MAX];
        if (!o.file && o.n_specs == 0)
                o.file = sf_confsearch_find(found, sizeof found);
        struct sf_conf conf;
        sf_conf_init(&conf);
        int status = sf_cli_conf_load(&conf, &o, false);
        bool test = o.test;
        sf_cli_opts_free(&o);
        if (status == 0 && conf.n_forwards == 0) {
                sf_log_error("nothing to relay: give a forward with -F NAME:LISTEN=CONNECT or a config file "
                             "with a [NAME] section (-c FILE; without -c and -F: %s)",
                             sf_confsearch_places(places, sizeof places));
                status = SF_EX_CONFIG;
        }
        if (status == 0 && test)
                status = sf_cli_conf_test(&conf);
        if (status || test) {
                sf_conf_free(&conf);
                return status;
        }

        signal(SIGPIPE, SIG_IGN);
        sf_cli_raise_nofile();
        /* Before the loop exists: libuv >= 1.45 would set up an io_uring ring in uv_loop_init,
         * which the sandbox must refuse later (relay/sys/sandbox.h). */
        int prepared = conf.seccomp ? sf_sandbox_prepare() : -ENOSYS;
        if (prepared < 0 && prepared != -ENOSYS && prepared != -ENOTSUP) {
                sf_conf_free(&conf);
                return 1;
        }
        uv_loop_t loop;
        struct relay_main m = { .conf = &conf };
        uv_loop_init(&loop);
        int r = sf_relay_new(&loop, &conf, &m.relay);
        if (r < 0) {
                status = SF_EX_CONFIG;
                goto out;
        }
        /* The control socket is bound with the listeners, before privileges are dropped. A
         * path or address that a policy refuses (-EPERM) is a configuration error. */
        if ((r = sf_relay_bind(m.relay)) < 0 ||
            (conf.control_set && (r = sf_control_new(&loop, &conf, m.relay, &m.control)) < 0)) {
                status = r == -EPERM ? SF_EX_CONFIG : 1;
                goto out;
        }
        /* Before the relay starts, which may start libuv's threadpool (a name to resolve). */
        int confined = prepared == 0 ? sandbox_confine(&m) : -ENOSYS;
        if (sf_privs_drop(&conf) < 0 || (confined < 0 && confined != -ENOSYS && confined != -ENOTSUP) ||
            sf_relay_start(m.relay) < 0) {
                status = 1;
                goto out;
        }
        for (size_t i = 0; i < N_STOP_SIGNALS; i++) {
                uv_signal_init(&loop, &m.sigs[i]);
                m.sigs[i].data = &m;
                uv_signal_start(&m.sigs[i], on_signal, stop_signals[i]);
        }
        sf_relay_on_fatal(m.relay, on_fatal, &m);
        /* Bound, tokens read, privileges dropped, loop handles set up: from here on the relay
         * only moves bytes, and the sandbox allows no more than that (relay/sys/sandbox.h). */
        int sandbox = conf.seccomp ? sf_sandbox_apply(&loop) : -ENOSYS;
        if (sandbox < 0 && sandbox != -ENOSYS && sandbox != -ENOTSUP) {
                m.failed = true;
                sf_relay_stop(m.relay, 0, on_stopped, &m);
        } else {
                if (conf.seccomp && !sf_sandbox_available())
                        sf_log_debug("seccomp sandbox: not in this build");
                sf_log_info("ready: %zu forward%s", conf.n_forwards, conf.n_forwards == 1 ? "" : "s");
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
        sf_conf_free(&conf);
        return status;
}
