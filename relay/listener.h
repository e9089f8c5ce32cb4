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
        dev_t dev;
        ino_t ino;
        char path[SF_UNIX_PATH_MAX];
};

/* Binds and listens on f->listen; logs the forward, endpoint, cause and fix on failure.
 * Returns 0 or -errno. */
int sf_listener_open(const struct sf_forward *f, struct sf_listener *l);
/* Closes the socket and removes our socket file if it is still the one we created.
 * Safe to call twice. */
void sf_listener_close(struct sf_listener *l);
