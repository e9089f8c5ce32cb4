/* sockferry run: the container entrypoint. Binds every listen socket, links the aliases,
 * exports the environment, starts the payload with the configured privileges, then serves
 * and acts as its init until it exits. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <uv.h>

#include "relay/control/control.h"
#include "relay/listen/listener.h"
#include "relay/relay.h"
#include "shim/alias.h"
#include "shim/cli.h"
#include "shim/env.h"
#include "shim/init.h"
#include "shim/notify.h"
#include "shim/privs.h"
#include "shim/spawn.h"

/* Runtime failure at start (a listen path in the way, a port in use); once the payload runs,
 * a relay that cannot serve makes run exit SF_EX_RUN_FAILED instead. */
#define EX_START 1

struct options {
        struct sf_cli_opts cli;
        const char *preload;
        bool no_preload;
        bool signal_group;
        char **cmd;
};

struct run {
        const struct sf_conf *conf;
        struct sf_relay *relay;
        struct sf_control *control;
        struct sf_init *init;
        bool relay_failed;
        bool relay_stopped;
        bool init_finished;
        int status;
};

static void help(void) {
        fputs("Usage: sockferry run [OPTIONS] -- CMD [ARG]...\n"
              "\n"
              "Container entrypoint: bind every listen socket, link the aliases, export the\n"
              "environment, then run CMD as an init (signals forwarded, zombies reaped) while\n"
              "serving the forwards. Quiet unless something is wrong (-v for more).\n"
              "\n"
              "Options:\n"
              "  -c, --config FILE     configuration file\n"
              "  -F, --forward SPEC    add a forward: NAME:LISTEN=CONNECT[|CONNECT...][,key=value]...\n"
              "  -u, --user U          run CMD as NAME|UID[:GROUP], with no capabilities\n"
              "      --preload PATH    the preload library to add for aliases\n"
              "      --no-preload      do not add the preload library\n"
              "      --signal-group    send forwarded signals to CMD's process group\n"
              "  -t, --test            check the configuration, token files and paths, print what would\n"
              "                        be bound, then exit; binds nothing and runs no CMD (CMD optional)\n"
              "  -v, --verbose         more log: -v adds info, -vv debug (the default is warnings)\n"
              "  -q, --quiet           less log (errors only)\n"
              "      --log-format F    text or json (overrides log-format)\n"
              "  -V, --version         show the version\n"
              "  -h, --help            show this help\n"
              "\n"
              "Exit status: CMD's status, 128+N if signal N killed it, 125 run itself failed after\n"
              "CMD started (the relay could not serve), 126 CMD cannot be run, 127 CMD not found,\n"
              "1 failure before CMD started (a listen path in the way, a port in use), 64 usage,\n"
              "78 configuration (-t: 0 the configuration is good).\n"
              "\n"
              "Example:\n"
              "  ENTRYPOINT [\"sockferry\", \"run\", \"-c\", \"/etc/sockferry.conf\", \"--\"]\n",
              stdout);
}

/* Returns 0 to go on, -1 after --help or --version, or SF_EX_USAGE. */
static int options_parse(int argc, char **argv, struct options *o) {
        enum { OPT_PRELOAD = 256, OPT_NO_PRELOAD, OPT_SIGNAL_GROUP };
        static const struct option longopts[] = {
                SF_CLI_LONGOPTS,
                { "user", required_argument, NULL, 'u' },
                { "preload", required_argument, NULL, OPT_PRELOAD },
                { "no-preload", no_argument, NULL, OPT_NO_PRELOAD },
                { "signal-group", no_argument, NULL, OPT_SIGNAL_GROUP },
                {},
        };

        if (sf_cli_opts_init(&o->cli, argc) < 0) {
                sf_log_error("out of memory");
                return EX_START;
        }
        o->cli.sockets = SF_CLI_SOCKETS_MADE;
        opterr = 0;
        optind = 1;
        int opt;
        /* '+': the first word that is not an option starts CMD, so CMD's own options are
         * never taken for ours even without "--". */
        while ((opt = getopt_long(argc, argv, "+:" SF_CLI_SHORTOPTS "u:", longopts, NULL)) != -1) {
                switch (opt) {
                case OPT_PRELOAD:
                        o->preload = optarg;
                        break;
                case OPT_NO_PRELOAD:
                        o->no_preload = true;
                        break;
                case OPT_SIGNAL_GROUP:
                        o->signal_group = true;
                        break;
                case 'h':
                        help();
                        return -1;
                default: {
                        int r = sf_cli_opt("run", opt, argv, &o->cli);
                        if (r == SF_CLI_EXIT_OK)
                                return -1;
                        if (r != SF_CLI_NEXT)
                                return r;
                }
                }
        }
        if (o->preload && o->no_preload)
                return sf_cli_usage_error("run", "--preload and --no-preload contradict each other");
        if (optind >= argc && !o->cli.test)
                return sf_cli_usage_error("run", "missing the command to run: sockferry run [OPTIONS] -- CMD [ARG]...");
        o->cmd = argv + optind;
        return 0;
}

/* The socket's owner defaults to `user`, so the payload can connect to a 0660 socket. */
static void owners_default(struct sf_conf *c) {
        if (!c->user_set)
                return;
        for (size_t i = 0; i < c->n_forwards; i++) {
                struct sf_forward *f = &c->forwards[i];
                if (f->listen.kind == SF_EP_UNIX && !f->owner_set) {
                        f->owner = c->uid;
                        f->owner_set = true;
                }
        }
}

/* What the serving process still needs once everything is bound: CAP_KILL to signal the
 * payload and, as PID 1, the processes left behind, whatever user they turned into; and
 * CAP_DAC_OVERRIDE when a forward connects to a unix socket, which may belong to another user
 * (a bind-mounted ssh-agent socket is 0600) and which root could reach before. */
static void privs_limit(const struct sf_conf *c) {
        int keep[2];
        size_t n = 0;
        keep[n++] = CAP_KILL;
        for (size_t i = 0; i < c->n_forwards && n < 2; i++)
                for (size_t j = 0; j < c->forwards[i].n_connect; j++)
                        if (c->forwards[i].connect[j].kind == SF_EP_UNIX) {
                                keep[n++] = CAP_DAC_OVERRIDE;
                                break;
                        }
        sf_privs_limit(keep, n);
}

/* Links every alias and warns when clients there need the preload library and will not
 * have it. Returns SF_EX_CONFIG when an alias lies in a directory others could change, EX_START
 * when another user's socket or link holds it and cannot be replaced. */
static int aliases_apply(const struct sf_conf *c, bool have_preload) {
        for (size_t i = 0; i < c->n_forwards; i++) {
                const struct sf_forward *f = &c->forwards[i];
                if (!f->alias[0])
                        continue;
                enum sf_alias_result r = sf_alias_apply(f, c);
                if (r == SF_ALIAS_UNSAFE)
                        return SF_EX_CONFIG;
                if (r == SF_ALIAS_FOREIGN)
                        return EX_START;
                if (sf_alias_needs_preload(r) && !have_preload)
                        sf_log(SF_LOG_WARN, f->name, 0,
                               "alias %s: clients that connect there will fail without the preload library, which is not in use (install it, or drop --no-preload)",
                               f->alias);
        }
        return 0;
}

static void maybe_done(struct run *run) {
        if (!run->relay_stopped || !run->init_finished)
                return;
        run->status = run->relay_failed ? SF_EX_RUN_FAILED : sf_init_status(run->init);
        sf_init_close(run->init);
        run->init = NULL;
}

static void on_relay_stopped(struct sf_relay *relay, void *data) {
        struct run *run = data;
        sf_control_close(run->control);
        run->control = NULL;
        run->relay_stopped = true;
        maybe_done(run);
}

static void on_init_finished(struct sf_init *init, void *data) {
        struct run *run = data;
        run->init_finished = true;
        maybe_done(run);
}

/* The payload is gone: drain the relay and, as PID 1, let the others go, both at once so
 * that a container stop fits in one grace period. */
static void on_payload_exited(struct sf_init *init, void *data) {
        struct run *run = data;
        sf_notify("STOPPING=1");
        if (run->relay)
                sf_relay_stop(run->relay, run->conf->drain_timeout_ms, on_relay_stopped, run);
        else
                run->relay_stopped = true;
        sf_init_finish(init, on_init_finished, run);
}

/* Creates and binds the relay; it starts accepting only once the payload runs. Returns 0 or
 * the exit status. */
static int relay_open(uv_loop_t *loop, struct sf_conf *c, struct run *run) {
        if (c->n_forwards == 0) {
                sf_log_debug("no forwards: running as a plain init");
                return 0;
        }
        /* A token file that cannot be used is a configuration error; it is read here, before
         * anything is bound. */
        if (sf_relay_new(loop, c, &run->relay) < 0)
                return SF_EX_CONFIG;
        /* A path or address that a policy refuses (-EPERM) is a configuration error. */
        int r = sf_relay_bind(run->relay);
        if (r < 0)
                return r == -EPERM ? SF_EX_CONFIG : EX_START;
        return 0;
}

/* The relay cannot serve: the payload is stopped (SIGTERM, then SIGKILL after the grace
 * period) and run exits non-zero once it is gone. */
static void relay_failed(struct run *run) {
        sf_log_error("the relay cannot serve; stopping the payload");
        run->relay_failed = true;
        sf_init_terminate(run->init);
}

static void on_relay_fatal(struct sf_relay *relay, int err, void *data) {
        relay_failed(data);
}

/* The forwards took their passed sockets: the payload gets none of them, nor the variables
 * about them and the service manager's notify socket (shim/env.h). */
static bool relay_listens_on(int fd, void *data) {
        const struct sf_relay *relay = data;
        for (size_t i = 0; relay && i < sf_relay_n_forwards(relay); i++)
                if (sf_relay_listener(relay, i)->fd == fd)
                        return true;
        return false;
}

static void activation_clear(struct run *run) {
        sf_notify_keep();
        sf_env_activation_clear(relay_listens_on, run->relay);
}

/* Everything before the payload starts; returns 0 or the exit status. */
static int prepare(uv_loop_t *loop, struct sf_conf *c, const struct options *o, struct run *run) {
        char preload[PATH_MAX];
        bool have_preload = false;
        if (!o->no_preload && sf_env_preload_wanted(c)) {
                int r = sf_env_preload_find(o->preload, preload, sizeof preload);
                if (r == 0)
                        have_preload = true;
                else if (r != -ENOENT)
                        return SF_EX_CONFIG;
                else
                        sf_log_info("preload library not installed; aliases work through links only");
        }
        owners_default(c);

        int status = relay_open(loop, c, run);
        if (status)
                return status;
        activation_clear(run);
        if ((status = aliases_apply(c, have_preload)))
                return status;
        if (sf_env_export(c) < 0)
                return EX_START;
        if (have_preload && sf_env_preload_export(c, preload) < 0)
                return EX_START;
        if (sf_init_new(loop, o->signal_group, &run->init) < 0)
                return EX_START;
        return 0;
}

static int run_main(struct sf_conf *c, const struct options *o) {
        uv_loop_t loop;
        int r = uv_loop_init(&loop);
        if (r < 0) {
                sf_log_error("cannot create the event loop: %s", uv_strerror(r));
                return EX_START;
        }
        struct run run = { .conf = c };
        sf_init_prepare();

        int status = prepare(&loop, c, o, &run);
        pid_t pid = 0;
        if (status == 0)
                status = sf_spawn(o->cmd, c, &pid);
        if (status == 0) {
                privs_limit(c);
                sf_init_watch(run.init, pid, on_payload_exited, &run);
                /* Connections made before this wait in the listen backlog: bound is enough
                 * for a payload that connects at once. */
                if (run.relay)
                        sf_relay_on_fatal(run.relay, on_relay_fatal, &run);
                if (run.relay && (sf_relay_start(run.relay) < 0 ||
                                  (c->control_set && sf_control_new(&loop, c, run.relay, &run.control) < 0)))
                        relay_failed(&run);
                else
                        sf_notify("READY=1");
        } else {
                /* Nothing runs: close what is open without draining. */
                if (run.init)
                        sf_init_close(run.init);
                if (run.relay)
                        sf_relay_stop(run.relay, 0, NULL, NULL);
        }
        sf_relay_run(&loop, run.relay);
        if (status == 0)
                status = run.status;

        sf_relay_free(run.relay);
        r = uv_loop_close(&loop);
        if (r < 0)
                sf_log_warn("event loop closed with handles still open: %s", uv_strerror(r));
        return status;
}

int sf_cmd_run(int argc, char **argv) {
        struct options o = {};
        int status = options_parse(argc, argv, &o);
        if (status) {
                sf_cli_opts_free(&o.cli);
                return status < 0 ? 0 : status;
        }

        struct sf_conf c;
        sf_conf_init(&c);
        status = sf_cli_conf_load(&c, &o.cli, true);
        if (status == 0 && o.cli.test) {
                char preload[PATH_MAX];
                if (!o.no_preload && sf_env_preload_wanted(&c) &&
                    sf_env_preload_find(o.preload, preload, sizeof preload) == -EINVAL)
                        status = SF_EX_CONFIG;
                else
                        status = sf_cli_conf_test(&c);
        } else if (status == 0)
                status = run_main(&c, &o);
        sf_conf_free(&c);
        sf_cli_opts_free(&o.cli);
        return status;
}
