#include "relay/platform.h"

#include <errno.h>
#include <stdio.h>

/* Windows: named pipes and TCP through libuv (relay/engine_uv_win.c, relay/listener_win.c);
 * the POSIX mechanisms below have no counterpart, and configuration refuses the endpoints that
 * would need them (conf/platform_win.c). */

const int sf_af_vsock = -1;
const char sf_platform_name[] = "windows";

int sf_socket(int family, int type) {
        return -EAFNOSUPPORT;
}

int sf_accept(int fd) {
        return -EOPNOTSUPP;
}

int sf_peer_cred(int fd, uid_t *uid, gid_t *gid, pid_t *pid) {
        return -ENOTSUP;
}

int sf_vsock_sockaddr(unsigned cid, unsigned port, struct sockaddr_storage *ss, socklen_t *len) {
        return -EAFNOSUPPORT;
}

bool sf_vsock_peer(const struct sockaddr_storage *ss, unsigned *cid, unsigned *port) {
        return false;
}

bool sf_mount_point(const char *path) {
        return false;
}

/* libuv numbers its errors apart from the C library's on Windows (uv/errno.h). */
int sf_errno_uv(int uv_error) {
        static const struct {
                int uv, err;
        } map[] = {
                { UV_EAGAIN, EAGAIN },
                { UV_EACCES, EACCES },
                { UV_EADDRINUSE, EADDRINUSE },
                { UV_EADDRNOTAVAIL, EADDRNOTAVAIL },
                { UV_EAFNOSUPPORT, EAFNOSUPPORT },
                { UV_EALREADY, EALREADY },
                { UV_EBADF, EBADF },
                { UV_EBUSY, EBUSY },
                { UV_ECANCELED, ECANCELED },
                { UV_ECONNABORTED, ECONNABORTED },
                { UV_ECONNREFUSED, ECONNREFUSED },
                { UV_ECONNRESET, ECONNRESET },
                { UV_EEXIST, EEXIST },
                { UV_EHOSTUNREACH, EHOSTUNREACH },
                { UV_EINTR, EINTR },
                { UV_EINVAL, EINVAL },
                { UV_EIO, EIO },
                { UV_EISCONN, EISCONN },
                { UV_EMFILE, EMFILE },
                { UV_EMSGSIZE, EMSGSIZE },
                { UV_ENAMETOOLONG, ENAMETOOLONG },
                { UV_ENETDOWN, ENETDOWN },
                { UV_ENETUNREACH, ENETUNREACH },
                { UV_ENFILE, ENFILE },
                { UV_ENOBUFS, ENOBUFS },
                { UV_ENOENT, ENOENT },
                { UV_ENOMEM, ENOMEM },
                { UV_ENOSYS, ENOSYS },
                { UV_ENOTCONN, ENOTCONN },
                { UV_ENOTSOCK, ENOTSOCK },
                { UV_ENOTSUP, ENOTSUP },
                { UV_EPERM, EPERM },
                { UV_EPIPE, EPIPE },
                { UV_EPROTO, EPROTO },
                { UV_ESHUTDOWN, ESHUTDOWN },
                { UV_ETIMEDOUT, ETIMEDOUT },
        };
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
                if (map[i].uv == uv_error)
                        return map[i].err;
        return EIO;
}

/* The relay's pipes admit this account and SYSTEM only (relay/listener_win.c): whoever got in
 * is trusted already. */
bool sf_peer_trusted(uv_stream_t *s, char *who, size_t who_cap, char *allowed, size_t allowed_cap) {
        return true;
}
