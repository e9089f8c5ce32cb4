#include "relay/sys/platform.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* What the two POSIX builds (platform_linux.c, platform_portable.c) share. */

int sf_errno_uv(int uv_error) {
        return -uv_error;
}

bool sf_peer_trusted(uv_stream_t *s, char *who, size_t who_cap, char *allowed, size_t allowed_cap) {
        uv_os_fd_t fd;
        uid_t uid = (uid_t)-1;
        gid_t gid;
        pid_t pid;
        int r = uv_fileno((uv_handle_t *)s, &fd);
        if (r < 0)
                r = -sf_errno_uv(r);
        else
                r = sf_peer_cred(fd, &uid, &gid, &pid);
        if (r == 0 && (uid == 0 || uid == geteuid()))
                return true;
        if (r < 0)
                snprintf(who, who_cap, "a peer whose credentials cannot be read (%s)", strerror(-r));
        else
                snprintf(who, who_cap, "uid %u", (unsigned)uid);
        snprintf(allowed, allowed_cap, "root and uid %u", (unsigned)geteuid());
        return false;
}

void sf_memory_trim(void) {
#ifdef __GLIBC__
        malloc_trim(0);
#endif
}
