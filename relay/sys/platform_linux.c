#include "relay/sys/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

const int sf_af_vsock = AF_VSOCK;
int sf_socket(int family, int type) {
        int fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        return fd < 0 ? -errno : fd;
}

int sf_accept(int fd) {
        int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        return c < 0 ? -errno : c;
}

int sf_peer_cred(int fd, uid_t *uid, gid_t *gid, pid_t *pid) {
        struct ucred cred = { .pid = 0 };
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        *uid = cred.uid;
        *gid = cred.gid;
        *pid = cred.pid;
        return 0;
}

int sf_vsock_sockaddr(unsigned cid, unsigned port, struct sockaddr_storage *ss, socklen_t *len) {
        struct sockaddr_vm *sa = (struct sockaddr_vm *)ss;
        memset(ss, 0, sizeof *ss);
        sa->svm_family = AF_VSOCK;
        sa->svm_cid = cid;
        sa->svm_port = port;
        *len = sizeof *sa;
        return 0;
}

bool sf_vsock_peer(const struct sockaddr_storage *ss, unsigned *cid, unsigned *port) {
        if (ss->ss_family != AF_VSOCK)
                return false;
        const struct sockaddr_vm *sa = (const struct sockaddr_vm *)ss;
        *cid = sa->svm_cid;
        *port = sa->svm_port;
        return true;
}

bool sf_mount_point(const char *path) {
        struct statx stx;
        if (statx(AT_FDCWD, path, 0, STATX_BASIC_STATS, &stx) == 0 &&
            (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
                return (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;

        /* Older kernels: a bind mount on the same filesystem keeps st_dev, so only the mount
         * table can tell; compare the resolved path against every mount point. */
        char real[4096];
        if (!realpath(path, real))
                return false;
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return false;
        char line[8192];
        bool found = false;
        while (!found && fgets(line, sizeof line, f)) {
                char mnt[4096];
                if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 && strcmp(mnt, real) == 0)
                        found = true;
        }
        fclose(f);
        return found;
}

/* setfsuid() answers with the previous id whether or not it changed it; asking again with an
 * id that can never be set (-1) answers the current one. */
int sf_fs_user_enter(uid_t uid, gid_t gid) {
        setfsgid(gid);
        setfsuid(uid);
        if ((uid_t)setfsuid((uid_t)-1) == uid && (gid_t)setfsgid((gid_t)-1) == gid)
                return 0;
        sf_fs_user_leave();
        return -EPERM;
}

void sf_fs_user_leave(void) {
        setfsuid(geteuid());
        setfsgid(getegid());
}
