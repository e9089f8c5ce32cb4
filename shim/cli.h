#pragma once
/* Subcommands of the sockferry binary and the option handling they share. Each sf_cmd_*
 * returns the process exit status (sysexits for usage/config). */
#include <stddef.h>

#include "conf/conf.h"

int sf_cmd_relay(int argc, char **argv);
int sf_cmd_run(int argc, char **argv);
int sf_cmd_keygen(int argc, char **argv);
int sf_cmd_check(int argc, char **argv);
int sf_cmd_probe(int argc, char **argv);
int sf_cmd_stats(int argc, char **argv);

/* Loads -c FILE and every -F spec into c and validates it; verbose is the count of -v minus
 * the count of -q (overrides log-level). Returns 0 or SF_EX_CONFIG / SF_EX_USAGE, logged. */
int sf_cli_conf_load(struct sf_conf *c, const char *file, char *const *specs, size_t n_specs, int verbose,
                     const char *user);

/* Raises the soft limit on open files to the hard limit. */
void sf_cli_raise_nofile(void);

/* Prints "sockferry CMD: MSG" and a hint to --help on stderr; returns SF_EX_USAGE. */
int sf_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
