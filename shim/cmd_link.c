/* sockferry link --stdio: the far end of attach, started by it in the container. */
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/attach/far.h"
#include "shim/alias.h"
#include "shim/cli.h"

static void help(void) {
        fputs("Usage: sockferry link --stdio [-v|-q]\n"
              "\n"
              "The far end of `sockferry attach`, which starts it in the container (docker exec -i,\n"
              "kubectl exec -i, nsenter, ssh ...): the shared link runs over its stdin and stdout, with\n"
              "no handshake and no token. attach sends the listen sections over the link; each listen\n"
              "socket is bound here (mode, owner, group, alias as for any listen) and each client is\n"
              "carried to the host. The log goes to stderr, which attach relays to the host's log.\n"
              "When stdin ends, or on SIGTERM/SIGINT, the sockets are removed and it exits.\n"
              "\n"
              "      --stdio         the link is stdin/stdout (the only transport)\n"
              "  -v, --verbose       more log output (repeatable)\n"
              "  -q, --quiet         less log output (repeatable)\n"
              "  -V, --version       show the version\n"
              "  -h, --help          show this help\n"
              "\n"
              "Exit status: 0 stdin ended or stopped by a signal, 1 runtime failure (a listen path\n"
              "refused, the link broken), 64 usage, 78 the sections do not parse here.\n",
              stdout);
}

static void aliases_apply(const struct sf_conf *c, void *data) {
        (void)data;
        for (size_t i = 0; i < c->n_forwards; i++)
                if (c->forwards[i].alias[0])
                        sf_alias_apply(&c->forwards[i], c);
}

int sf_cmd_link(int argc, char **argv) {
        enum { OPT_STDIO = 0x300 };
        static const struct option opts[] = {
                { "stdio", no_argument, NULL, OPT_STDIO }, { "verbose", no_argument, NULL, 'v' },
                { "quiet", no_argument, NULL, 'q' },       { "version", no_argument, NULL, 'V' },
                { "help", no_argument, NULL, 'h' },        {},
        };
        bool stdio = false;
        int verbose = 0, c;
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:vqVh", opts, NULL)) != -1) {
                switch (c) {
                case OPT_STDIO: stdio = true; break;
                case 'v': verbose++; break;
                case 'q': verbose--; break;
                case 'V': sf_cli_version(); return 0;
                case 'h': help(); return 0;
                default: return sf_cli_usage_error("link", "unknown option or missing value: '%s'", argv[optind - 1]);
                }
        }
        if (optind < argc)
                return sf_cli_usage_error("link", "unexpected argument '%s'", argv[optind]);
        if (!stdio)
                return sf_cli_usage_error("link", "expected --stdio (sockferry attach starts it so)");
        int level = (int)SF_LOG_INFO + verbose;
        sf_log_setup((enum sf_log_level)(level < SF_LOG_ERROR ? SF_LOG_ERROR : level > SF_LOG_DEBUG ? SF_LOG_DEBUG : level),
                     SF_LOG_TEXT);
        signal(SIGPIPE, SIG_IGN);
        sf_cli_raise_nofile();
        const struct sf_link_stdio_params p = { .bound = aliases_apply };
        return sf_link_stdio_run(STDIN_FILENO, STDOUT_FILENO, &p);
}
