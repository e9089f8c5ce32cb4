#pragma once
/* A command run to its end with what it printed captured: attach's short engine commands
 * (uname, the --inject copy, the presets' set-up in the container, the host's gpg). */
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Long enough for an engine that pulls nothing and copies a few MiB in; a hung exec (an engine
 * that stopped answering) is ended, not waited for. */
#define SF_CAPTURE_TIMEOUT_MS 60000

/* Runs argv (argv[0] looked up in PATH) to its end on a loop of its own (the caller's waits),
 * its stdin the file in_fd (-1: none); what it printed, both streams, raw in out (cap bytes at
 * most, NUL-terminated; the rest is read and dropped). Killed after timeout_ms. The exit status
 * (128 + the signal that ended it), or -errno when it could not run. */
int sf_capture_run(char *argv[], uv_file in_fd, char *out, size_t cap, uint64_t timeout_ms);
