#include "relay/sys/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/log.h"

const int sf_af_vsock = -1;
/* What accept4/SOCK_NONBLOCK|SOCK_CLOEXEC do in one call on Linux; and where the system has
 * SO_NOSIGPIPE (macOS has no MSG_NOSIGNAL), no SIGPIPE from a send to a closed peer. */
static int prepare(int fd) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
#ifdef SO_NOSIGPIPE
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
        return fd;
}

int sf_socket(int family, int type) {
        int fd = socket(family, type, 0);
        return fd < 0 ? -errno : prepare(fd);
}

int sf_accept(int fd) {
        int c = accept(fd, NULL, NULL);
        return c < 0 ? -errno : prepare(c);
}

int sf_peer_cred(int fd, uid_t *uid, gid_t *gid, pid_t *pid) {
#ifdef SO_PEERCRED
        /* Linux built portable: glibc has no getpeereid. */
        struct ucred cred = { .pid = 0 };
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        *uid = cred.uid;
        *gid = cred.gid;
        *pid = cred.pid;
#else
        /* macOS and the BSDs: the peer's pid is not part of it. */
        if (getpeereid(fd, uid, gid) < 0)
                return -errno;
        *pid = 0;
#endif
        return 0;
}

int sf_vsock_sockaddr(unsigned cid, unsigned port, struct sockaddr_storage *ss, socklen_t *len) {
        return -EAFNOSUPPORT;
}

bool sf_vsock_peer(const struct sockaddr_storage *ss, unsigned *cid, unsigned *port) {
        return false;
}

/* No mount flag to ask for: a mount point's device differs from its parent's, or it is its
 * parent (the root). A bind mount within one filesystem goes unseen, which is a Linux habit. */
bool sf_mount_point(const char *path) {
        char real[PATH_MAX], parent[PATH_MAX];
        struct stat st, pst;
        if (!realpath(path, real) || stat(real, &st) < 0)
                return false;
        snprintf(parent, sizeof parent, "%s", real);
        char *dir = dirname(parent);
        if (stat(dir, &pst) < 0)
                return false;
        return st.st_dev != pst.st_dev || (st.st_ino == pst.st_ino && st.st_dev == pst.st_dev);
}

/* No per-thread file-system ids here: the effective ids, which the saved ones (root's) bring
 * back. The group first, while the process may still change it. */
static uid_t fs_euid;
static gid_t fs_egid;

int sf_fs_user_enter(uid_t uid, gid_t gid) {
        fs_euid = geteuid();
        fs_egid = getegid();
        if (setegid(gid) < 0)
                return -EPERM;
        if (seteuid(uid) < 0) {
                sf_fs_user_leave();
                return -EPERM;
        }
        return 0;
}

void sf_fs_user_leave(void) {
        if (seteuid(fs_euid) < 0 || setegid(fs_egid) < 0)
                sf_log_warn("cannot take back uid %u, gid %u after acting as another user: %s", (unsigned)fs_euid,
                            (unsigned)fs_egid, strerror(errno));
}
