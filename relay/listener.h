#pragma once
/* Listening sockets: creation with exact mode/owner/group, stale-socket replacement, socket
 * activation. */
#include <stdbool.h>
#include <sys/types.h>

#include "conf/conf.h"

struct sf_listener {
        int fd;            /* -1 when closed */
        int family;
        bool owned;        /* a unix socket file we created: removed on close if still ours */
        int dirfd;         /* when owned: its directory, pinned and checked (relay/safedir.h) */
        dev_t dev;
        ino_t ino;
        char path[SF_UNIX_PATH_MAX];
};

/* Binds and listens on f->listen; logs the forward, endpoint, cause and fix on failure. A unix
 * path must lie in directories that only root, the effective user and c's `user` can change
 * (relay/safedir.h). Returns 0 or -errno: -EPERM when a policy refuses the endpoint (a
 * configuration error). */
int sf_listener_open(const struct sf_forward *f, const struct sf_conf *c, struct sf_listener *l);
/* Closes the socket and removes our socket file if it is still the one we created.
 * Safe to call twice. */
void sf_listener_close(struct sf_listener *l);
