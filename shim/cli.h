#pragma once
/* Subcommands of the sockferry binary and the option handling they share. Each sf_cmd_*
 * returns the process exit status (sysexits for usage/config). */
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "conf/conf.h"

int sf_cmd_relay(int argc, char **argv);
int sf_cmd_run(int argc, char **argv);
int sf_cmd_keygen(int argc, char **argv);
int sf_cmd_check(int argc, char **argv);
int sf_cmd_probe(int argc, char **argv);
int sf_cmd_stats(int argc, char **argv);
int sf_cmd_reload(int argc, char **argv);
int sf_cmd_version(int argc, char **argv);
int sf_cmd_attach(int argc, char **argv);
int sf_cmd_link(int argc, char **argv);

/* The options relay, run and check share: each letter means the same in every command. */
enum { SF_OPT_LOG_FORMAT = 0x200 };
#define SF_CLI_SHORTOPTS "c:F:vqtVh"
#define SF_CLI_LONGOPTS                                                                                          \
        { "config", required_argument, NULL, 'c' }, { "forward", required_argument, NULL, 'F' },                \
        { "verbose", no_argument, NULL, 'v' }, { "quiet", no_argument, NULL, 'q' },                            \
        { "test", no_argument, NULL, 't' }, { "log-format", required_argument, NULL, SF_OPT_LOG_FORMAT },      \
        { "version", no_argument, NULL, 'V' }, { "help", no_argument, NULL, 'h' }

/* Where a command's unix sockets are, for the default socket directory of a user that is not
 * root (sf_listener_default_dir). */
enum sf_cli_sockets {
        SF_CLI_SOCKETS_FOUND = 0, /* check, stats, reload: looked for where the relay makes them */
        SF_CLI_SOCKETS_MADE,      /* relay, run: made here */
        SF_CLI_SOCKETS_ELSEWHERE, /* attach: made in the container, by link --stdio */
};

struct sf_cli_opts {
        const char *file;
        char **specs;   /* argc entries, from sf_cli_opts_init */
        size_t n_specs;
        const char *user;
        int verbose;    /* the count of -v minus the count of -q */
        bool test;      /* -t: check the configuration, bind nothing */
        bool log_format_set;
        enum sf_log_format log_format;
        enum sf_cli_sockets sockets;
};

/* sf_cli_opt's answers besides an exit status. */
#define SF_CLI_NEXT (-1)    /* handled: go on parsing */
#define SF_CLI_EXIT_OK (-2) /* --version printed: exit 0 */

/* Returns -ENOMEM or 0. */
int sf_cli_opts_init(struct sf_cli_opts *o, int argc);
void sf_cli_opts_free(struct sf_cli_opts *o);
/* Takes getopt's answer c for one of SF_CLI_LONGOPTS or -u, and getopt's errors (':', '?')
 * in one wording for every command. Returns an SF_CLI_* value above or the exit status. */
int sf_cli_opt(const char *cmd, int c, char **argv, struct sf_cli_opts *o);
/* Prints "sockferry VERSION" on stdout. */
void sf_cli_version(void);

/* Loads -c FILE and every -F spec into c and validates it; o->verbose is added to the
 * log-level, whose default is quiet_default ? warn : info when the file sets none. Sockets
 * under /run/sockferry move to the default directory of a user that is not root, as
 * o->sockets says.
 * Returns 0 or SF_EX_CONFIG / SF_EX_USAGE, logged. */
int sf_cli_conf_load(struct sf_conf *c, const struct sf_cli_opts *o, bool quiet_default);

/* -t: checks what can be checked without binding (token files, listen paths, host names)
 * and prints one line per forward, what would be bound and where it would connect.
 * Returns 0 or SF_EX_CONFIG. */
int sf_cli_conf_test(const struct sf_conf *c);

/* Raises the soft limit on open files to the hard limit. */
void sf_cli_raise_nofile(void);

/* The exit status of `run` when it fails itself after the payload started (as docker run). */
#define SF_EX_RUN_FAILED 125

/* Prints "sockferry CMD: MSG" and a hint to --help on stderr; returns SF_EX_USAGE. */
int sf_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The signals that stop relay and attach, draining: SIGTERM and SIGINT; where the system has
 * Ctrl+Break (Windows) that too, and the console's closing, which libuv reports there as SIGHUP. */
#ifdef SIGBREAK
#define SF_CLI_N_STOP_SIGNALS 4
#else
#define SF_CLI_N_STOP_SIGNALS 2
#endif
extern const int sf_cli_stop_signals[SF_CLI_N_STOP_SIGNALS];
