/* sockferry reload: ask a running relay, through its control socket, to read its configuration
 * again (what SIGHUP does; the only way on Windows, which has no SIGHUP). */
#include <getopt.h>
#include <stdio.h>

#include "relay/control/control.h"
#include "shim/cli.h"
#include "shim/ctlclient.h"

static void help(void) {
        fputs("Usage: sockferry reload [-c FILE | --control PATH]\n"
              "\n"
              "Make a running relay (sockferry relay with control = unix:PATH) read its configuration\n"
              "file and token files again, as SIGHUP does: added forwards are bound, removed ones stop\n"
              "listening and drain, changed ones serve new connections with the new settings, unchanged\n"
              "ones keep their sockets and connections. Prints the relay's summary, or what is wrong\n"
              "with the file (nothing changed then).\n"
              "\n"
              "  -c, --config FILE     take the control socket from FILE's control = key\n"
              "      --control PATH    the control socket: PATH, unix:PATH or unix:@NAME (npipe:NAME on\n"
              "                        Windows)\n"
              "  -V, --version         show the version\n"
              "  -h, --help            show this help\n"
              "\n"
              "Exit status: 0 reloaded, 1 the relay could not be asked or refused the configuration\n"
              "(nothing changed), 64 usage, 78 configuration.\n",
              stdout);
}

int sf_cmd_reload(int argc, char **argv) {
        enum { OPT_CONTROL = 256 };
        static const struct option opts[] = {
                { "config", required_argument, NULL, 'c' }, { "control", required_argument, NULL, OPT_CONTROL },
                { "help", no_argument, NULL, 'h' },         { "version", no_argument, NULL, 'V' },
                {}
        };
        struct sf_cli_opts o = {};
        const char *control = NULL;
        int c;

        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:c:Vh", opts, NULL)) != -1) {
                switch (c) {
                case OPT_CONTROL: control = optarg; break;
                case 'h':
                        help();
                        return 0;
                default: {
                        int r = sf_cli_opt("reload", c, argv, &o);
                        if (r != SF_CLI_NEXT)
                                return r == SF_CLI_EXIT_OK ? 0 : r;
                }
                }
        }
        if (optind < argc)
                return sf_cli_usage_error("reload", "unexpected argument '%s'", argv[optind]);
        return sf_ctlclient_ask("reload", &o, control, "reload\n");
}
