#include "shim/notify.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "relay/sys/platform.h"

/* NOTIFY_SOCKET as sf_notify_keep() found it. */
static char kept[4096];
static bool is_kept;

void sf_notify_keep(void) {
        const char *path = getenv("NOTIFY_SOCKET");
        if (is_kept || !path)
                return;
        snprintf(kept, sizeof kept, "%s", path);
        is_kept = true;
}

int sf_notify(const char *state) {
        const char *path = is_kept ? kept : getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (!path || !path[0])
                return 0;
        size_t n = strlen(path);
        if ((path[0] != '/' && path[0] != '@') || n >= sizeof sa.sun_path)
                return -EINVAL;
        memcpy(sa.sun_path, path, n);
        if (path[0] == '@')
                sa.sun_path[0] = '\0';
        /* One socket for the process's life, opened at the first state: a relay's descriptors
         * then do not change around READY=1 (a watcher that counts them right after it would
         * count a socket about to close). Unconnected, so a notify listener that restarts is
         * found again. */
        static int fd = -1;
        if (fd < 0 && (fd = socket(AF_UNIX, SOCK_DGRAM | SF_SOCK_CLOEXEC, 0)) < 0)
                return -errno;
        /* Never waits: a listener that reads nothing (its queue full after a few reloads)
         * must not stop the relay's loop; the state is lost then, not the relay. */
        ssize_t r = sendto(fd, state, strlen(state), SF_MSG_NOSIGNAL | SF_MSG_DONTWAIT, (struct sockaddr *)&sa,
                           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n));
        return r < 0 ? -errno : 0;
}
