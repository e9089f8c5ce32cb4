#pragma once
/* Starting the payload: its own process group, the terminal's foreground, the configured
 * user, clean signal state, and an exec failure the parent can tell apart from an exit. */
#include <sys/types.h>

#include "conf/conf.h"

/* Starts argv[0] (looked up in PATH) in a process group of its own, in the terminal's
 * foreground when stdin is one, as c->user with no capabilities when a user is set, with
 * PR_SET_NO_NEW_PRIVS when configured, default signal dispositions and an empty signal mask.
 * On success stores the pid and returns 0. Otherwise the child is reaped, the cause logged,
 * and the exit status to use is returned: 127 command not found, 126 found but not
 * executable, 1 anything else (fork, privileges). */
int sf_spawn(char *const *argv, const struct sf_conf *c, pid_t *pid);
