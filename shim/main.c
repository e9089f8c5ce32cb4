/* sockferry: make a host unix socket usable inside a container. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "relay/link/token.h"
#include "shim/cli.h"

static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
} commands[] = {
        { "relay", sf_cmd_relay },
        { "run", sf_cmd_run },
        { "attach", sf_cmd_attach },
        { "link", sf_cmd_link },
        { "keygen", sf_cmd_keygen },
        { "check", sf_cmd_check },
        { "probe", sf_cmd_probe },
        { "stats", sf_cmd_stats },
        { "reload", sf_cmd_reload },
        { "version", sf_cmd_version },
};

static void help(FILE *out) {
        fprintf(out, "Usage: sockferry COMMAND [OPTIONS]\n"
              "\n"
              "Make a host unix socket usable inside a container when a bind mount cannot carry it.\n"
              "\n"
              "Commands:\n"
              "  relay [-c FILE] [-F SPEC]... [-u U] [-t] [-v|-q]\n"
              "                      run forwards in the foreground\n"
              "  run   [-c FILE] [-F SPEC]... [-u U] [-t] [--preload PATH|--no-preload] -- CMD [ARG]...\n"
              "                      container entrypoint: bind, then run CMD as an init (Linux only;\n"
              "                      elsewhere it says so and exits 64)\n"
              "  attach [-c FILE] [-F SPEC]... [--engine docker|podman|kubectl] [--inject[=PATH]] TARGET\n"
              "  attach [-c FILE] [-F SPEC]... -- CMD [ARG]...\n"
              "                      host sockets in a running container over an exec: no port, no token\n"
              "  link --stdio        the far end of attach, started by it in the container\n"
              "  keygen [-o FILE] [--force]\n"
              "                      write a new token (64 hex characters, %s)\n"
              "  check [-c FILE] [-F SPEC]... [--timeout 5s] [--link-only]\n"
              "                      end-to-end health probe of every forward (HEALTHCHECK)\n"
              "  probe PATH          explain what is at a socket path (exit 0 live ... 4 other)\n"
              "  stats [-c FILE | --control PATH] [--format text|json|prometheus]\n"
              "                      counters of a running relay\n"
              "  reload [-c FILE | --control PATH]\n"
              "                      make a running relay read its configuration again (as SIGHUP)\n"
              "  version             version, engine, libuv, sandbox, platform, build (for bug reports)\n"
              "  help COMMAND        show a command's help (also --help COMMAND, -h COMMAND)\n"
              "\n"
              "  -F NAME:LISTEN=CONNECT[|CONNECT...][,key=value]...\n"
              "      e.g. -F docker:unix:/run/docker.sock=tcp:host.docker.internal:2375\n"
              "\n"
              "Options:\n"
              "  -h, --help          show this help\n"
              "  -V, --version       show the version (also after any command)\n"
              "\n"
              "Exit status: 0 ok, 64 usage; each command's --help lists its own.\n"
              "Run 'sockferry help COMMAND' for a command's options. See sockferry(1).\n",
              sf_token_protection);
}

static bool is_version(const char *arg) {
        return strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0;
}

static bool is_help(const char *arg) {
        return strcmp(arg, "help") == 0 || strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int main(int argc, char **argv) {
        if (argc < 2) {
                help(stderr);
                return SF_EX_USAGE;
        }
        const char *cmd = argv[1];
        bool want_help = false;
        /* help COMMAND, --help COMMAND and -h COMMAND are one request. */
        if (is_help(cmd) && argc == 3 && !is_help(argv[2])) {
                cmd = argv[2];
                want_help = true;
        } else if (is_help(cmd)) {
                if (argc > 3)
                        return sf_cli_usage_error("help", "expected at most one COMMAND");
                help(stdout);
                return 0;
        }
        /* Every command takes --version; those that parse their own options take it anywhere,
         * the others (probe PATH, keygen) right after the command's name. */
        if (is_version(cmd) || (argc == 3 && !want_help && is_version(argv[2]))) {
                sf_cli_version();
                return 0;
        }
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
                if (strcmp(cmd, commands[i].name) != 0)
                        continue;
                if (want_help) {
                        char *help_argv[] = { argv[2], "--help", NULL };
                        return commands[i].run(2, help_argv);
                }
                return commands[i].run(argc - 1, argv + 1);
        }
        fprintf(stderr, "sockferry: unknown command '%s'; run 'sockferry --help' for the list\n", cmd);
        return SF_EX_USAGE;
}
