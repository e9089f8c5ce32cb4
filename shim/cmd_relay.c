/* sockferry relay: run the forwards in the foreground until SIGTERM/SIGINT. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "conf/log.h"
#include "relay/control.h"
#include "relay/relay.h"
#include "relay/sandbox.h"
#include "shim/cli.h"
#include "shim/notify.h"
#include "shim/privs.h"

struct relay_main {
        struct sf_relay *relay;
        struct sf_control *control;
        const struct sf_conf *conf;
        uv_signal_t sigterm, sigint;
        int signals_seen;
        bool failed;
};

static void help(void) {
        fputs("Usage: sockferry relay [-c FILE] [-F SPEC]... [--user U] [-v|-q]\n"
              "\n"
              "Run the configured forwards in the foreground until SIGTERM or SIGINT, then drain.\n"
              "\n"
              "  -c, --config FILE   INI configuration (see sockferry.conf(5))\n"
              "  -F, --forward SPEC  NAME:LISTEN=CONNECT[|CONNECT...][,key=value]... (repeatable)\n"
              "  -u, --user U        after binding, run as U (NAME|UID[:GROUP])\n"
              "  -v, --verbose       more log output (repeatable)\n"
              "  -q, --quiet         less log output (repeatable)\n"
              "  -h, --help          show this help\n",
              stdout);
}

static void on_stopped(struct sf_relay *relay, void *data) {
        struct relay_main *m = data;
        sf_control_close(m->control);
        m->control = NULL;
        sf_sandbox_close();
        uv_close((uv_handle_t *)&m->sigterm, NULL);
        uv_close((uv_handle_t *)&m->sigint, NULL);
        /* Closing the handles restores the default action: a late second SIGTERM would turn
         * the clean exit that is under way into a death by signal. */
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
}

static void on_fatal(struct sf_relay *relay, int err, void *data) {
        struct relay_main *m = data;
        m->failed = true;
        sf_relay_stop(relay, m->conf->drain_timeout_ms, on_stopped, m);
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
        static const struct option opts[] = {
                { "config", required_argument, NULL, 'c' }, { "forward", required_argument, NULL, 'F' },
                { "user", required_argument, NULL, 'u' },   { "verbose", no_argument, NULL, 'v' },
                { "quiet", no_argument, NULL, 'q' },        { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *file = NULL, *user = NULL;
        char **specs = calloc((size_t)argc + 1, sizeof *specs);
        size_t n_specs = 0;
        int verbose = 0, c;

        if (!specs)
                return 1;
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+c:F:u:vqh", opts, NULL)) != -1) {
                switch (c) {
                case 'c': file = optarg; break;
                case 'F': specs[n_specs++] = optarg; break;
                case 'u': user = optarg; break;
                case 'v': verbose++; break;
                case 'q': verbose--; break;
                case 'h':
                        free(specs);
                        help();
                        return 0;
                default:
                        free(specs);
                        if (optopt)
                                return sf_cli_usage_error("relay", "option -%c %s", optopt,
                                                          strchr("cFu", optopt) ? "needs an argument" : "is unknown");
                        return sf_cli_usage_error("relay", "unknown or incomplete option '%s'", argv[optind - 1]);
                }
        }
        if (optind < argc) {
                free(specs);
                return sf_cli_usage_error("relay", "unexpected argument '%s'", argv[optind]);
        }

        struct sf_conf conf;
        sf_conf_init(&conf);
        int status = sf_cli_conf_load(&conf, file, specs, n_specs, verbose, user);
        free(specs);
        if (status == 0 && conf.n_forwards == 0) {
                sf_log_error("nothing to relay: give a forward with -F NAME:LISTEN=CONNECT or a config file "
                             "with a [NAME] section (-c FILE)");
                status = SF_EX_CONFIG;
        }
        if (status) {
                sf_conf_free(&conf);
                return status;
        }

        signal(SIGPIPE, SIG_IGN);
        sf_cli_raise_nofile();
        /* Before the loop exists: libuv >= 1.45 would set up an io_uring ring in uv_loop_init,
         * which the sandbox must refuse later (relay/sandbox.h). */
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
        /* The control socket is bound with the listeners, before privileges are dropped. */
        if (sf_relay_bind(m.relay) < 0 ||
            (conf.control_set && sf_control_new(&loop, &conf, m.relay, &m.control) < 0) ||
            sf_privs_drop(&conf) < 0 || sf_relay_start(m.relay) < 0) {
                status = 1;
                goto out;
        }
        uv_signal_init(&loop, &m.sigterm);
        uv_signal_init(&loop, &m.sigint);
        m.sigterm.data = m.sigint.data = &m;
        uv_signal_start(&m.sigterm, on_signal, SIGTERM);
        uv_signal_start(&m.sigint, on_signal, SIGINT);
        sf_relay_on_fatal(m.relay, on_fatal, &m);
        /* Bound, tokens read, privileges dropped, loop handles set up: from here on the relay
         * only moves bytes, and the sandbox allows no more than that (relay/sandbox.h). */
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
