#include "shim/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h> /* SIGHUP on Windows (uv-win.h), for sf_cli_stop_signals */

#include "conf/value.h"
#include "relay/listen/listener.h"

int sf_cli_usage_error(const char *cmd, const char *fmt, ...) {
        va_list ap;
        fprintf(stderr, "sockferry %s: ", cmd);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nRun 'sockferry %s --help' for usage.\n", cmd);
        return SF_EX_USAGE;
}

int sf_cli_opts_init(struct sf_cli_opts *o, int argc) {
        *o = (struct sf_cli_opts){ 0 };
        o->specs = calloc((size_t)argc + 1, sizeof *o->specs);
        return o->specs ? 0 : -ENOMEM;
}

void sf_cli_opts_free(struct sf_cli_opts *o) {
        free(o->specs);
        o->specs = NULL;
}

void sf_cli_version(void) {
        printf("sockferry %s\n", SF_VERSION);
}

/* The option as the user wrote it: "-c" for a short one (even inside "-vc"), "--name"
 * without its "=value" for a long one. */
static void option_name(char **argv, char *out, size_t cap) {
        const char *arg = argv[optind - 1];
        if (optopt > 0 && optopt < 0x100 && strncmp(arg, "--", 2) != 0) {
                snprintf(out, cap, "-%c", optopt);
                return;
        }
        snprintf(out, cap, "%.*s", (int)strcspn(arg, "="), arg);
}

int sf_cli_opt(const char *cmd, int c, char **argv, struct sf_cli_opts *o) {
        char name[64];
        switch (c) {
        case 'c': o->file = optarg; return SF_CLI_NEXT;
        case 'F': o->specs[o->n_specs++] = optarg; return SF_CLI_NEXT;
        case 'u': o->user = optarg; return SF_CLI_NEXT;
        case 'v': o->verbose++; return SF_CLI_NEXT;
        case 'q': o->verbose--; return SF_CLI_NEXT;
        case 't': o->test = true; return SF_CLI_NEXT;
        case SF_OPT_LOG_FORMAT:
                if (sf_log_format_parse(optarg, &o->log_format) < 0)
                        return sf_cli_usage_error(cmd, "--log-format %s: expected text or json", optarg);
                o->log_format_set = true;
                return SF_CLI_NEXT;
        case 'V':
                sf_cli_version();
                return SF_CLI_EXIT_OK;
        case ':':
                option_name(argv, name, sizeof name);
                return sf_cli_usage_error(cmd, "option '%s' needs a value", name);
        default:
                option_name(argv, name, sizeof name);
                return sf_cli_usage_error(cmd, "unknown option '%s'", name);
        }
}

int sf_cli_conf_load(struct sf_conf *c, const struct sf_cli_opts *o, bool quiet_default) {
        bool failed = false;

        if (o->log_format_set)
                sf_log_setup(sf_log_get_level(), o->log_format);
        if (o->file && sf_conf_load(c, o->file) < 0)
                failed = true;
        for (size_t i = 0; i < o->n_specs; i++)
                if (sf_conf_add_spec(c, o->specs[i]) < 0)
                        failed = true;
        if (o->user) {
                char err[256];
                if (sf_user_group_parse(o->user, &c->uid, &c->gid, err, sizeof err) < 0) {
                        sf_log_error("--user %s: %s", o->user, err);
                        failed = true;
                } else {
                        c->user_set = true;
                        snprintf(c->user, sizeof c->user, "%s", o->user);
                }
        }
        if (!failed && sf_conf_validate(c) < 0)
                failed = true;

        /* An init is quiet unless asked (tini): its log would mix with the payload's. */
        int level = (int)(c->log_level_set || !quiet_default ? c->log_level : SF_LOG_WARN) + o->verbose;
        if (level < SF_LOG_ERROR)
                level = SF_LOG_ERROR;
        if (level > SF_LOG_DEBUG)
                level = SF_LOG_DEBUG;
        sf_log_setup((enum sf_log_level)level, o->log_format_set ? o->log_format : c->log_format);
        /* After the log level is set: the move is said at the level the configuration asks for. */
        if (!failed && o->sockets != SF_CLI_SOCKETS_ELSEWHERE &&
            sf_listener_default_dir(c, o->sockets == SF_CLI_SOCKETS_MADE, o->test) < 0)
                failed = true;
        return failed ? SF_EX_CONFIG : 0;
}

void sf_cli_raise_nofile(void) {
        struct rlimit rl;
        /* Every relayed connection holds two descriptors; the 1024 soft default would cap a
         * relay near 500 clients although the hard limit allows far more (no select() here). */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
}

const int sf_cli_stop_signals[SF_CLI_N_STOP_SIGNALS] = {
        SIGTERM, SIGINT,
#ifdef SIGBREAK
        SIGBREAK, SIGHUP,
#endif
};
