#pragma once
/* The socket directory of a user that is not root. /run/sockferry is where every example puts
 * sockets, and only root can make it: a container started with `-u 1000` could not bind a
 * single one. Such a process makes the sockets configured under /run/sockferry in a directory
 * of its own instead, and says so (doc/sockferry.conf.5.scd, "listen"). */
#include <stdbool.h>
#include <stddef.h>

#include "conf/conf.h"

/* The conventional socket directory, which only root can make. */
#define SF_SOCKDIR_DEFAULT "/run/sockferry"

/* The directory a process that is not root makes its sockets in: $XDG_RUNTIME_DIR/sockferry
 * when XDG_RUNTIME_DIR names a directory of the effective uid with mode 0700 (as the XDG Base
 * Directory specification requires of it), else /tmp/sockferry-UID. Written to buf; why (may be
 * NULL) gets the reason XDG_RUNTIME_DIR was not taken, or "" when it was. Returns buf. */
const char *sf_sockdir_own(char *buf, size_t cap, char *why, size_t why_cap);

enum sf_sockdir_use {
        SF_SOCKDIR_FIND, /* check, stats: look where the relay makes them; create nothing */
        SF_SOCKDIR_TEST, /* -t: say where they would be made (warning); create nothing */
        SF_SOCKDIR_BIND, /* relay, run, link: make the directory (0700) and say where (warning) */
};

/* For a process that is not root: the unix listen and control paths of c under /run/sockferry
 * whose directory this process cannot create files in are moved, with the rest of their path,
 * to sf_sockdir_own(), and one line names it. An own directory that exists but is not this
 * user's (a link, another owner, writable by others) is refused: someone else may have made it
 * to catch the sockets. Returns 0, or -EPERM (refused) / -ENAMETOOLONG / another -errno (the
 * directory cannot be made), logged. */
int sf_sockdir_apply(struct sf_conf *c, enum sf_sockdir_use use);
