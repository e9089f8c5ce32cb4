/* sockferry: make a host unix socket usable inside a container. */
#include <stdio.h>
#include <string.h>

#include "shim/cli.h"

static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
} commands[] = {
        { "relay", sf_cmd_relay },
        { "run", sf_cmd_run },
        { "keygen", sf_cmd_keygen },
        { "check", sf_cmd_check },
        { "probe", sf_cmd_probe },
        { "stats", sf_cmd_stats },
};

static void help(FILE *out) {
        fputs("Usage: sockferry COMMAND [OPTIONS]\n"
              "\n"
              "Make a host unix socket usable inside a container when a bind mount cannot carry it.\n"
              "\n"
              "Commands:\n"
              "  relay [-c FILE] [-F SPEC]... [--user U] [-v|-q]\n"
              "                      run forwards in the foreground\n"
              "  run   [-c FILE] [-F SPEC]... [--user U] [--preload PATH|--no-preload] -- CMD [ARG]...\n"
              "                      container entrypoint: bind, then run CMD as an init (Linux only;\n"
              "                      elsewhere it says so and exits 64)\n"
              "  keygen [-o FILE] [--force]\n"
              "                      write a new token (64 hex characters, mode 0600)\n"
              "  check [-c FILE] [-F SPEC]... [--timeout 5s]\n"
              "                      end-to-end health probe of every forward (HEALTHCHECK)\n"
              "  probe PATH          explain what is at a socket path (exit 0 live ... 4 other)\n"
              "  stats [-c FILE | --control PATH] [--format text|json|prometheus]\n"
              "                      counters of a running relay\n"
              "\n"
              "  -F NAME:LISTEN=CONNECT[|CONNECT...][,key=value]...\n"
              "      e.g. -F docker:unix:/run/docker.sock=tcp:host.docker.internal:2375\n"
              "\n"
              "Options:\n"
              "  -h, --help          show this help\n"
              "  -V, --version       show the version\n"
              "\n"
              "Run 'sockferry COMMAND --help' for a command's options. See sockferry(1).\n",
              out);
}

int main(int argc, char **argv) {
        if (argc < 2) {
                help(stderr);
                return SF_EX_USAGE;
        }
        const char *cmd = argv[1];
        if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
                help(stdout);
                return 0;
        }
        if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
                printf("sockferry %s\n", SF_VERSION);
                return 0;
        }
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (strcmp(cmd, commands[i].name) == 0)
                        return commands[i].run(argc - 1, argv + 1);
        fprintf(stderr, "sockferry: unknown command '%s'; run 'sockferry --help' for the list\n", cmd);
        return SF_EX_USAGE;
}
