/* sockferry stats: ask a running relay's control socket for its counters. */
#include <getopt.h>
#include <stdio.h>

#include "relay/control/control.h"
#include "shim/cli.h"
#include "shim/ctlclient.h"

static void help(void) {
        fputs("Usage: sockferry stats [-c FILE | --control PATH] [--format text|json|prometheus]\n"
              "\n"
              "Print the counters of a running relay (sockferry relay or run with control = unix:PATH):\n"
              "per forward active and total connections, bytes each way, errors by kind, the last\n"
              "error and the connect candidate in use; per process open fds, RSS and uptime.\n"
              "\n"
              "  -c, --config FILE     take the control socket from FILE's control = key\n"
              "      --control PATH    the control socket: PATH, unix:PATH or unix:@NAME (npipe:NAME on\n"
              "                        Windows)\n"
              "  -f, --format FORMAT   text (default), json or prometheus\n"
              "  -V, --version         show the version\n"
              "  -h, --help            show this help\n"
              "\n"
              "Exit status: 0 ok, 1 the relay could not be asked, 64 usage, 78 configuration.\n",
              stdout);
}

int sf_cmd_stats(int argc, char **argv) {
        enum { OPT_CONTROL = 256 };
        static const struct option opts[] = {
                { "config", required_argument, NULL, 'c' }, { "control", required_argument, NULL, OPT_CONTROL },
                { "format", required_argument, NULL, 'f' }, { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },      {}
        };
        struct sf_cli_opts o = {};
        const char *control = NULL;
        enum sf_stats_format fmt = SF_STATS_TEXT;
        int c;

        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:c:f:Vh", opts, NULL)) != -1) {
                switch (c) {
                case OPT_CONTROL: control = optarg; break;
                case 'f':
                        if (sf_stats_format_parse(optarg, &fmt) < 0)
                                return sf_cli_usage_error("stats", "--format %s: expected text, json or prometheus",
                                                          optarg);
                        break;
                case 'h':
                        help();
                        return 0;
                default: {
                        int r = sf_cli_opt("stats", c, argv, &o);
                        if (r != SF_CLI_NEXT)
                                return r == SF_CLI_EXIT_OK ? 0 : r;
                }
                }
        }
        if (optind < argc)
                return sf_cli_usage_error("stats", "unexpected argument '%s'", argv[optind]);
        static const char *const names[] = {
                [SF_STATS_TEXT] = "text", [SF_STATS_JSON] = "json", [SF_STATS_PROMETHEUS] = "prometheus"
        };
        char req[SF_CONTROL_LINE_MAX];
        snprintf(req, sizeof req, "stats %s\n", names[fmt]);
        return sf_ctlclient_ask("stats", &o, control, req);
}
