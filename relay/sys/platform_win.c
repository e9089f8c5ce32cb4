#include "relay/sys/platform.h"

#include <windows.h>

#include <errno.h>
#include <stdio.h>

#include "relay/sys/account_win.h"

/* Windows: named pipes and TCP through libuv (relay/engine/uv_win.c, relay/listen/listener_win.c);
 * the POSIX mechanisms below have no counterpart, and configuration refuses the endpoints that
 * would need them (conf/platform_win.c). */

const int sf_af_vsock = -1;
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

/* The relay's pipes admit this account and SYSTEM only (their DACL, relay/listen/listener_win.c);
 * this asks again per client, by the account of the process at the other end, for what the
 * DACL cannot cover: the moment between the pipe's creation and its DACL's change. */
bool sf_peer_trusted(uv_stream_t *s, char *who, size_t who_cap, char *allowed, size_t allowed_cap) {
        uv_os_fd_t h;
        ULONG pid = 0;
        union sf_win_user mine, theirs;
        PSID them = NULL;
        snprintf(allowed, allowed_cap, "this account and SYSTEM");
        if (s->type != UV_NAMED_PIPE)
                return true; /* TCP: the link's token is the check */
        if (uv_fileno((uv_handle_t *)s, &h) < 0 || !GetNamedPipeClientProcessId(h, &pid)) {
                snprintf(who, who_cap, "a pipe client whose process cannot be told (error %lu)", GetLastError());
                return false;
        }
        HANDLE p = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid);
        if (p)
                them = sf_win_process_user(p, &theirs);
        DWORD err = them ? 0 : GetLastError();
        if (p)
                CloseHandle(p);
        if (!them) {
                snprintf(who, who_cap, "pid %lu, whose account cannot be read (error %lu)", pid, err);
                return false;
        }
        PSID me = sf_win_process_user(GetCurrentProcess(), &mine);
        if ((me && EqualSid(me, them)) || IsWellKnownSid(them, WinLocalSystemSid))
                return true;
        char name[600];
        sf_win_account_name(them, name, sizeof name);
        snprintf(who, who_cap, "pid %lu of %s", pid, name);
        return false;
}

/* Windows has no such call: its heap decommits free blocks by its own rules (not measured). */
void sf_memory_trim(void) {
}
