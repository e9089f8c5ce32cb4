#pragma once
/* Where relay, check and stats look for a configuration file when neither -c nor -F is given:
 * the user's own ($XDG_CONFIG_HOME/sockferry/sockferry.conf, by default
 * ~/.config/sockferry/sockferry.conf: the place on macOS and for a relay run as a normal
 * user), then the system's (/etc/sockferry/sockferry.conf). */
#include <stddef.h>

/* Fills buf with the first of those paths where something exists and returns buf, or returns
 * NULL when there is none. A file that exists but cannot be read is returned all the same, so
 * that loading it says why. */
const char *sf_confsearch_find(char *buf, size_t size);
/* The paths looked at, for messages: "A, then B". */
const char *sf_confsearch_places(char *buf, size_t size);

/* The largest command line sf_confsearch_cmdline reads: far above any real one (Linux caps a
 * single argument at 128 KiB), small enough to read in one piece. */
#define SF_CONFSEARCH_CMDLINE_MAX (1024 * 1024)

/* `check --pid`: the command line of process pid, its arguments each ending in '\0' as
 * /proc/PID/cmdline has them, in *buf (*len bytes, freed by the caller). Returns 0 or -errno,
 * logged: -ESRCH no such process, -E2BIG longer than SF_CONFSEARCH_CMDLINE_MAX, -ENOSYS a
 * system without /proc. */
int sf_confsearch_cmdline(long pid, char **buf, size_t *len);
/* Its working directory, for a relative path on that command line (reading it takes the
 * right to trace the process). Returns 0 or -errno, logged. */
int sf_confsearch_cwd(long pid, char *cwd, size_t size);
