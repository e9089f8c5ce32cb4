/* sockferry attach: a host socket in a running container over an exec's stdin and stdout (no
 * port, no token). The engine's words for its failures are turned into plain ones here. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "conf/log.h"
#include "relay/attach/host.h"
#include "relay/control/control.h"
#include "relay/relay.h"
#include "shim/attach_engine.h"
#include "shim/attach_preset.h"
#include "shim/cli.h"


struct attach_main {
        uv_loop_t loop;
        struct sf_conf conf;
        struct sf_relay *relay;
        struct sf_attach *attach;
        struct sf_control *control; /* `control =`: sockferry stats of attach's forwards */
        struct sf_attach_engine eng;
        struct sf_attach_params params;
        struct sf_attach_preset preset;
        uv_signal_t sigs[SF_CLI_N_STOP_SIGNALS];
        int signals_seen;
        bool failed, stopping;
};

static void help(void) {
        fputs("Usage: sockferry attach [--ssh-agent] [--gpg-agent [--no-gpg-keys]] [--docker] [--user USER]\n"
              "                        [-c FILE] [-F SPEC]... [--engine docker|podman|kubectl] [--engine-cmd PATH]\n"
              "                        [--inject[=PATH]] [--inject-dir DIR] [-v|-q] TARGET\n"
              "       sockferry attach [-c FILE] [-F SPEC]... [-v|-q] -- CMD [ARG]...\n"
              "\n"
              "Carry host sockets into a running container with no port and no token: run\n"
              "`docker exec -i -u 0 TARGET sockferry link --stdio` (podman exec, kubectl exec -i TARGET --),\n"
              "or any CMD that starts `sockferry link --stdio` at the far end (nsenter, ssh, wsl.exe), and\n"
              "carry the shared link over its stdin and stdout. Each forward's LISTEN is created in the\n"
              "container (mode, owner, group, alias), its CONNECT is dialled here. The right to exec into\n"
              "the container is the authentication. When the exec ends it is started again (100 ms to 5 s);\n"
              "SIGTERM/SIGINT drain, end it, and the container's sockets are removed.\n"
              "\n"
              "      --ssh-agent      this shell's agent ($SSH_AUTH_SOCK) at /run/sockferry/ssh-agent.sock,\n"
              "                       USER's; SSH_AUTH_SOCK set for bash and login shells there\n"
              "      --gpg-agent      gpg-agent's extra socket at USER's agent socket there (gpgconf --list-dirs\n"
              "                       agent-socket), with no-autostart and the public keys of the secret keys\n"
              "      --no-gpg-keys    with --gpg-agent: import no public keys\n"
              "      --docker         the engine's socket here (DOCKER_HOST, else the context) at\n"
              "                       /var/run/docker.sock, USER's and USER's group's (0660)\n"
              "      --user USER      who the presets' sockets are for (default: the container's user)\n"
              "  -c, --config FILE    INI configuration (see sockferry.conf(5))\n"
              "  -F, --forward SPEC   NAME:LISTEN=CONNECT[|CONNECT...][,key=value]... (repeatable)\n"
              "      --engine E       docker (default), podman or kubectl\n"
              "      --engine-cmd P   the engine's CLI (default: $SOCKFERRY_DOCKER, else the engine's name)\n"
              "      --inject[=PATH]  when the container has no sockferry, copy a static Linux one of its\n"
              "                       architecture in (PATH, else $SOCKFERRY_STATIC, else the installed\n"
              "                       " SF_INJECT_DIR "/linux-ARCH/sockferry) and run it from a new\n"
              "                       root-only directory, its checksum checked first\n"
              "      --inject-dir DIR where in the container that directory is made (default /tmp; a volume\n"
              "                       for a read-only root filesystem); implies --inject\n"
              "  -v, --verbose        more log output (repeatable)\n"
              "  -q, --quiet          less log output (repeatable)\n"
              "      --log-format F   text or json (overrides log-format)\n"
              "  -V, --version        show the version\n"
              "  -h, --help           show this help\n"
              "\n"
              "Exit status: 0 stopped by SIGTERM/SIGINT, 1 it cannot attach (the engine's CLI missing, no\n"
              "such container, no sockferry in it), 64 usage, 78 configuration.\n",
              stdout);
}

static void close_signals(struct attach_main *m) {
        for (size_t i = 0; i < SF_CLI_N_STOP_SIGNALS; i++) {
                if (!uv_is_closing((uv_handle_t *)&m->sigs[i]))
                        uv_close((uv_handle_t *)&m->sigs[i], NULL);
                signal(sf_cli_stop_signals[i], SIG_IGN);
        }
}

static void on_detached(void *data) {
        struct attach_main *m = data;
        close_signals(m);
}

/* Every connection ended: the exec goes (its stdin closes, the far end removes its sockets). */
static void on_relay_stopped(struct sf_relay *relay, void *data) {
        (void)relay;
        struct attach_main *m = data;
        sf_control_close(m->control);
        m->control = NULL;
        sf_attach_close(m->attach, on_detached, m);
}

static void stop(struct attach_main *m, uint64_t drain_ms) {
        if (!m->stopping)
                sf_attach_drain(m->attach);
        m->stopping = true;
        sf_relay_stop(m->relay, drain_ms, on_relay_stopped, m);
}

static void on_failed(void *data) {
        struct attach_main *m = data;
        m->failed = true;
        stop(m, 0);
}

static void on_signal(uv_signal_t *s, int signum) {
        struct attach_main *m = s->data;
        if (m->signals_seen++ == 0) {
                sf_log_info("%s received: detaching", strsignal(signum));
                stop(m, m->conf.drain_timeout_ms);
        } else {
                sf_log_warn("%s received again: closing every connection now", strsignal(signum));
                stop(m, 0);
        }
}

static enum sf_attach_next on_ended(void *data, const struct sf_attach_end *end, char *why, size_t cap) {
        struct attach_main *m = data;
        return sf_attach_engine_explain(&m->eng, end, why, cap);
}

static void on_starting(void *data) {
        struct attach_main *m = data;
        sf_attach_preset_setup(&m->preset, &m->eng);
}

int sf_cmd_attach(int argc, char **argv) {
        enum { OPT_ENGINE = 0x300, OPT_ENGINE_CMD, OPT_INJECT, OPT_INJECT_DIR, OPT_SSH, OPT_GPG, OPT_NO_KEYS, OPT_DOCKER,
               OPT_USER };
        /* The common options but -t: what attach would bind is in the container. */
        static const struct option opts[] = { { "config", required_argument, NULL, 'c' },
                                               { "forward", required_argument, NULL, 'F' },
                                               { "verbose", no_argument, NULL, 'v' },
                                               { "quiet", no_argument, NULL, 'q' },
                                               { "log-format", required_argument, NULL, SF_OPT_LOG_FORMAT },
                                               { "version", no_argument, NULL, 'V' },
                                               { "help", no_argument, NULL, 'h' },
                                               { "engine", required_argument, NULL, OPT_ENGINE },
                                               { "engine-cmd", required_argument, NULL, OPT_ENGINE_CMD },
                                               { "inject", optional_argument, NULL, OPT_INJECT },
                                               { "inject-dir", required_argument, NULL, OPT_INJECT_DIR },
                                               { "ssh-agent", no_argument, NULL, OPT_SSH },
                                               { "gpg-agent", no_argument, NULL, OPT_GPG },
                                               { "no-gpg-keys", no_argument, NULL, OPT_NO_KEYS },
                                               { "docker", no_argument, NULL, OPT_DOCKER },
                                               { "user", required_argument, NULL, OPT_USER },
                                               {} };
        struct sf_cli_opts o;
        struct attach_main m = { 0 };
        const char *engine = "docker", *engine_cmd = NULL, *inject = NULL, *inject_dir = NULL;
        bool want_inject = false, no_keys = false;
        int c;

        if (sf_cli_opts_init(&o, argc) < 0)
                return 1;
        o.sockets = SF_CLI_SOCKETS_ELSEWHERE;
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:c:F:vqVh", opts, NULL)) != -1) {
                int r = SF_CLI_NEXT;
                if (c == 'h')
                        r = (help(), SF_CLI_EXIT_OK);
                else if (c == OPT_ENGINE)
                        engine = optarg;
                else if (c == OPT_ENGINE_CMD)
                        engine_cmd = optarg;
                else if (c == OPT_INJECT)
                        want_inject = true, inject = optarg;
                else if (c == OPT_INJECT_DIR)
                        want_inject = true, inject_dir = optarg;
                else if (c == OPT_SSH)
                        m.preset.ssh = true;
                else if (c == OPT_GPG)
                        m.preset.gpg = true;
                else if (c == OPT_NO_KEYS)
                        no_keys = true;
                else if (c == OPT_DOCKER)
                        m.preset.docker = true;
                else if (c == OPT_USER)
                        m.preset.user = optarg;
                else
                        r = sf_cli_opt("attach", c, argv, &o);
                if (r != SF_CLI_NEXT) {
                        sf_cli_opts_free(&o);
                        return r == SF_CLI_EXIT_OK ? 0 : r;
                }
        }
        bool command = optind > 1 && strcmp(argv[optind - 1], "--") == 0;
        int status = 0;
        if (command && optind >= argc)
                status = sf_cli_usage_error("attach", "expected a command after --");
        else if (!command && optind >= argc)
                status = sf_cli_usage_error("attach", "expected TARGET (a container) or -- CMD [ARG]...");
        else if (!command && optind + 1 < argc)
                status = sf_cli_usage_error("attach", "unexpected argument '%s' after TARGET %s (a command goes after --)",
                                            argv[optind + 1], argv[optind]);
        else if (command && (want_inject || engine_cmd))
                status = sf_cli_usage_error("attach", "--inject, --inject-dir and --engine-cmd go with TARGET, not with -- CMD");
        else if (inject_dir && (inject_dir[0] != '/' || strchr(inject_dir, '\n')))
                status = sf_cli_usage_error("attach", "--inject-dir %s: expected an absolute path in the container", inject_dir);
        if (!status) {
                if (!engine_cmd)
                        engine_cmd = getenv("SOCKFERRY_DOCKER");
                status = sf_attach_engine_init(&m.eng, command ? NULL : engine, engine_cmd, command ? NULL : argv[optind],
                                               command ? argv + optind : NULL, want_inject, inject, inject_dir);
        }
        if (!status && (no_keys || m.preset.user) && !sf_attach_preset_any(&m.preset))
                status = sf_cli_usage_error("attach", "%s goes with --ssh-agent, --gpg-agent or --docker",
                                            no_keys ? "--no-gpg-keys" : "--user");
        m.preset.gpg_keys = !no_keys;
        if (!status && sf_attach_preset_any(&m.preset))
                status = sf_attach_preset_prepare(&m.preset, &m.eng, &o);
        if (status) {
                sf_cli_opts_free(&o);
                sf_attach_preset_free(&m.preset);
                sf_attach_engine_free(&m.eng);
                return status;
        }

        sf_conf_init(&m.conf);
        m.conf.listen_elsewhere = true;
        status = sf_cli_conf_load(&m.conf, &o, false);
        sf_cli_opts_free(&o);
        if (status == 0 && m.conf.n_forwards == 0) {
                sf_log_error("nothing to attach: give a forward with -F NAME:LISTEN=CONNECT (LISTEN in the container, "
                             "CONNECT here) or -c FILE with a [NAME] section");
                status = SF_EX_CONFIG;
        }
        for (size_t i = 0; status == 0 && i < m.conf.n_forwards; i++) {
                const struct sf_forward *f = &m.conf.forwards[i];
                if (f->listen.kind == SF_EP_UNIX || f->listen.kind == SF_EP_ABSTRACT || f->listen.kind == SF_EP_TCP)
                        continue;
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "%s: %s listen endpoints cannot be made in the container by attach (no socket activation, "
                       "no vsock there), expected unix:/PATH, unix:@NAME or tcp:HOST:PORT",
                       f->origin.where, sf_endpoint_kind_name(f->listen.kind));
                status = SF_EX_CONFIG;
        }
        if (status) {
                sf_conf_free(&m.conf);
                sf_attach_preset_free(&m.preset);
                sf_attach_engine_free(&m.eng);
                return status;
        }

        signal(SIGPIPE, SIG_IGN);
        sf_cli_raise_nofile();
        uv_loop_init(&m.loop);
        m.params = (struct sf_attach_params){
                .argv = m.eng.argv,
                .what = m.eng.what,
                .keepalive_ms = m.conf.n_forwards ? m.conf.forwards[0].keepalive_ms : 15000,
                .ended = on_ended,
                .starting = on_starting,
                .failed = on_failed,
                .data = &m,
        };
        if (sf_relay_new(&m.loop, &m.conf, &m.relay) < 0) {
                status = SF_EX_CONFIG;
                goto out;
        }
        if ((m.conf.control_set && sf_control_new(&m.loop, &m.conf, m.relay, &m.control) < 0) ||
            sf_relay_start_unbound(m.relay) < 0 || sf_attach_new(&m.loop, &m.conf, m.relay, &m.params, &m.attach) < 0) {
                status = 1;
                sf_control_close(m.control);
                sf_relay_stop(m.relay, 0, NULL, NULL);
                sf_relay_run(&m.loop, m.relay);
                goto out;
        }
        for (size_t i = 0; i < SF_CLI_N_STOP_SIGNALS; i++) {
                uv_signal_init(&m.loop, &m.sigs[i]);
                m.sigs[i].data = &m;
                uv_signal_start(&m.sigs[i], on_signal, sf_cli_stop_signals[i]);
        }
        sf_relay_run(&m.loop, m.relay);
        if (m.failed)
                status = 1;
out:
        sf_attach_free(m.attach);
        sf_relay_free(m.relay);
        uv_loop_close(&m.loop);
        sf_conf_free(&m.conf);
        sf_attach_preset_free(&m.preset);
        sf_attach_engine_free(&m.eng);
        return status;
}
