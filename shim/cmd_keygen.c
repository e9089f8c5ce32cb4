#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "conf/log.h"
#include "relay/link/token.h"
#include "shim/cli.h"

static void keygen_help(void) {
        printf("Usage: sockferry keygen [-o FILE] [--force]\n"
               "\n"
               "Writes a new random token for auth = token: 32 bytes as 64 hex characters and a\n"
               "newline. Give the same token to the relays at both ends of the link.\n"
               "\n"
               "  -o, --output FILE  write to FILE (%s), creating missing directories private\n"
               "                     to you (default: standard output)\n"
               "      --force        replace FILE if it exists, by a new file: never written in place\n"
               "  -h, --help         show this help\n",
               sf_token_protection);
}

int sf_cmd_keygen(int argc, char **argv) {
        enum { OPT_FORCE = 0x100 };
        static const struct option options[] = {
                { "output", required_argument, NULL, 'o' },
                { "force", no_argument, NULL, OPT_FORCE },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *output = NULL;
        bool force = false;
        int c;

        /* 0 re-initialises getopt: the dispatcher may have parsed its own options already. */
        optind = 0;
        opterr = 0;
        while ((c = getopt_long(argc, argv, ":o:h", options, NULL)) >= 0) {
                switch (c) {
                case 'o':
                        output = optarg;
                        break;
                case OPT_FORCE:
                        force = true;
                        break;
                case 'h':
                        keygen_help();
                        return 0;
                case ':':
                        return sf_cli_usage_error("keygen", "option '%s' needs an argument", argv[optind - 1]);
                default:
                        if (optopt)
                                return sf_cli_usage_error("keygen", "unknown option '-%c'", optopt);
                        return sf_cli_usage_error("keygen", "unknown option '%s'", argv[optind - 1]);
                }
        }
        if (optind < argc)
                return sf_cli_usage_error("keygen", "unexpected argument '%s'", argv[optind]);
        if (force && !output)
                return sf_cli_usage_error("keygen", "--force needs -o FILE (standard output is never replaced)");
        if (output && output[0] == '\0')
                return sf_cli_usage_error("keygen", "-o needs a file name");

        if (sf_token_generate(output, force) < 0)
                return 1;
        if (output)
                sf_log_info("wrote a new token to %s (%s); point token-file at it on both ends", output, sf_token_protection);
        return 0;
}
