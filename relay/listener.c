#include "relay/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/platform.h"
#include "relay/sockpath.h"

#define LISTEN_BACKLOG 4096

static int mkdir_parents(const char *name, const char *path) {
        char buf[PATH_MAX];
        snprintf(buf, sizeof buf, "%s", path);
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(buf, 0755) < 0 && errno != EEXIST) {
                        int e = errno;
                        sf_log(SF_LOG_ERROR, name, 0, "listen unix:%s: cannot create directory %s: %s", path, buf,
                               strerror(e));
                        return -e;
                }
                *p = '/';
        }
        return 0;
}

/* Refuses anything at the path but a stale socket, which it removes. */
static int clear_path(const char *name, const char *path) {
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
                sf_log(SF_LOG_ERROR, name, 0,
                       "listen unix:%s: the path is a symbolic link; refusing to replace it — remove it or "
                       "listen on another path",
                       path);
                return -EEXIST;
        }
        switch (sf_sockpath_probe(path)) {
        case SF_PATH_MISSING:
                return 0;
        case SF_PATH_STALE_SOCKET:
                if (unlink(path) < 0 && errno != ENOENT) {
                        int e = errno;
                        sf_log(SF_LOG_ERROR, name, 0, "listen unix:%s: cannot remove the stale socket: %s", path,
                               strerror(e));
                        return -e;
                }
                sf_log(SF_LOG_INFO, name, 0, "listen unix:%s: removed a stale socket nobody was accepting on",
                       path);
                return 0;
        case SF_PATH_LIVE_SOCKET:
                sf_log(SF_LOG_ERROR, name, 0,
                       "listen unix:%s: another process is already accepting on this socket; stop it or "
                       "listen on another path",
                       path);
                return -EADDRINUSE;
        case SF_PATH_MOUNT_DIR: {
                const char *engine = sf_sockpath_engine_hint();
                sf_log(SF_LOG_ERROR, name, 0,
                       "listen unix:%s: the path is a directory and a mount point, left untouched: %s%s%s. "
                       "Listen on another path (e.g. /run/sockferry/NAME.sock) and point alias = %s at it",
                       path, sf_sockpath_dir_explanation(), engine ? "; this looks like " : "",
                       engine ? engine : "", path);
                return -EISDIR;
        }
        case SF_PATH_EMPTY_DIR:
        case SF_PATH_DIR:
                sf_log(SF_LOG_ERROR, name, 0,
                       "listen unix:%s: the path is a directory, not a socket; left untouched — remove it or "
                       "listen on another path",
                       path);
                return -EISDIR;
        case SF_PATH_REGULAR:
                sf_log(SF_LOG_ERROR, name, 0,
                       "listen unix:%s: a regular file is in the way; left untouched (sockferry only "
                       "removes stale sockets) — remove it or listen on another path",
                       path);
                return -EEXIST;
        case SF_PATH_OTHER:
                sf_log(SF_LOG_ERROR, name, 0,
                       "listen unix:%s: something that is not a socket is in the way; left untouched", path);
                return -EEXIST;
        case SF_PATH_ERROR:
        default: {
                int e = errno ? errno : EIO;
                sf_log(SF_LOG_ERROR, name, 0, "listen unix:%s: cannot examine the path: %s", path, strerror(e));
                return -e;
        }
        }
}

static int open_unix(const struct sf_forward *f, struct sf_listener *l) {
        const char *name = f->name, *path = f->listen.path;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        socklen_t salen;
        int r;

        if (f->listen.kind == SF_EP_ABSTRACT) {
                size_t n = strlen(path);
                memcpy(sa.sun_path + 1, path, n);
                salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
        } else {
                if ((r = mkdir_parents(name, path)) < 0 || (r = clear_path(name, path)) < 0)
                        return r;
                strcpy(sa.sun_path, path);
                salen = sizeof sa;
        }

        int fd = sf_socket(AF_UNIX, SOCK_STREAM);
        if (fd < 0) {
                r = fd;
                sf_log(SF_LOG_ERROR, name, 0, "listen %s: socket: %s", f->listen.text, strerror(-r));
                return r;
        }
        /* bind() creates the file with 0777 & ~umask; setting the umask around it means the
         * socket never exists with more permissions than configured, even for an instant. */
        mode_t old = umask(~f->mode & 0777);
        r = bind(fd, (struct sockaddr *)&sa, salen);
        int e = errno;
        umask(old);
        if (r < 0) {
                sf_log(SF_LOG_ERROR, name, 0, "listen %s: bind: %s%s", f->listen.text, strerror(e),
                       e == EACCES ? " — the relay's user cannot create files in that directory" : "");
                close(fd);
                return -e;
        }
        if (f->listen.kind == SF_EP_UNIX) {
                struct stat st;
                l->owned = true;
                snprintf(l->path, sizeof l->path, "%s", path);
                if ((f->owner_set || f->group_set) &&
                    lchown(path, f->owner_set ? f->owner : (uid_t)-1, f->group_set ? f->group : (gid_t)-1) < 0) {
                        e = errno;
                        sf_log(SF_LOG_ERROR, name, 0, "listen %s: cannot set owner/group: %s%s", f->listen.text,
                               strerror(e), e == EPERM ? " — changing the owner needs root (CAP_CHOWN)" : "");
                        close(fd);
                        unlink(path);
                        return -e;
                }
                if (lstat(path, &st) == 0) {
                        l->dev = st.st_dev;
                        l->ino = st.st_ino;
                }
        }
        if (listen(fd, LISTEN_BACKLOG) < 0) {
                e = errno;
                sf_log(SF_LOG_ERROR, name, 0, "listen %s: listen: %s", f->listen.text, strerror(e));
                close(fd);
                if (l->owned)
                        unlink(path);
                l->owned = false;
                return -e;
        }
        l->fd = fd;
        l->family = AF_UNIX;
        return 0;
}

static const char *bind_hint(int e) {
        switch (e) {
        case EADDRINUSE: return " — another process uses this port (ss -ltnp shows which)";
        case EADDRNOTAVAIL: return " — that address is not on this machine";
        case EACCES: return " — ports below 1024 need CAP_NET_BIND_SERVICE";
        default: return "";
        }
}

static int open_tcp(const struct sf_forward *f, struct sf_listener *l) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *res;
        char port[16];
        snprintf(port, sizeof port, "%u", f->listen.port);
        int r = getaddrinfo(f->listen.host, port, &hints, &res);
        if (r != 0) {
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: cannot resolve %s: %s", f->listen.text, f->listen.host,
                       gai_strerror(r));
                return -EADDRNOTAVAIL;
        }
        int e = EADDRNOTAVAIL;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = sf_socket(ai->ai_family, ai->ai_socktype);
                if (fd < 0) {
                        e = -fd;
                        continue;
                }
                int one = 1;
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
                if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, LISTEN_BACKLOG) == 0) {
                        l->fd = fd;
                        l->family = ai->ai_family;
                        freeaddrinfo(res);
                        return 0;
                }
                e = errno;
                close(fd);
        }
        freeaddrinfo(res);
        sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: %s%s", f->listen.text, strerror(e), bind_hint(e));
        return -e;
}

static int open_vsock(const struct sf_forward *f, struct sf_listener *l) {
        struct sockaddr_storage sa;
        socklen_t salen;
        if (sf_vsock_sockaddr(f->listen.cid, f->listen.port, &sa, &salen) < 0) {
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: vsock exists on Linux only; use a tcp: endpoint",
                       f->listen.text);
                return -EAFNOSUPPORT;
        }
        int fd = sf_socket(sf_af_vsock, SOCK_STREAM);
        if (fd < 0) {
                int e = -fd;
                if (e == EPERM || e == EACCES)
                        sf_log(SF_LOG_ERROR, f->name, 0,
                               "listen %s: AF_VSOCK sockets are denied here (%s): Docker's default seccomp "
                               "profile blocks them; use a tcp: endpoint instead",
                               f->listen.text, strerror(e));
                else
                        sf_log(SF_LOG_ERROR, f->name, 0,
                               "listen %s: this kernel has no vsock support (%s): load vsock/vhost_vsock or use "
                               "a tcp: endpoint",
                               f->listen.text, strerror(e));
                return -e;
        }
        if (bind(fd, (struct sockaddr *)&sa, salen) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
                int e = errno;
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: %s%s", f->listen.text, strerror(e), bind_hint(e));
                close(fd);
                return -e;
        }
        l->fd = fd;
        l->family = sf_af_vsock;
        return 0;
}

/* sd_listen_fds(3) protocol: fds from 3 on, LISTEN_PID must be us, names in LISTEN_FDNAMES. */
static int systemd_fd(const struct sf_forward *f) {
        const char *pid = getenv("LISTEN_PID"), *nfds = getenv("LISTEN_FDS"), *names = getenv("LISTEN_FDNAMES");
        if (!pid || !nfds || strtol(pid, NULL, 10) != (long)getpid()) {
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "listen %s: no sockets were passed (LISTEN_PID/LISTEN_FDS unset or not for this "
                       "process); start sockferry from a systemd socket unit or systemd-socket-activate",
                       f->listen.text);
                return -EBADF;
        }
        long n = strtol(nfds, NULL, 10);
        size_t want = strlen(f->listen.path);
        const char *p = names ? names : "";
        for (long i = 0; i < n; i++) {
                const char *end = strchr(p, ':');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                if (len == want && memcmp(p, f->listen.path, len) == 0)
                        return 3 + (int)i;
                if (!end)
                        break;
                p = end + 1;
        }
        sf_log(SF_LOG_ERROR, f->name, 0,
               "listen %s: no passed socket is named \"%s\" (LISTEN_FDNAMES=%s); set FileDescriptorName=%s in "
               "the socket unit",
               f->listen.text, f->listen.path, names ? names : "", f->listen.path);
        return -ENOENT;
}

static int open_passed(const struct sf_forward *f, struct sf_listener *l) {
        int fd = f->listen.kind == SF_EP_FD ? f->listen.fd : systemd_fd(f);
        if (fd < 0)
                return fd;
        int accepting = 0;
        socklen_t len = sizeof accepting;
        struct sockaddr_storage ss;
        socklen_t sslen = sizeof ss;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) < 0 || !accepting ||
            getsockname(fd, (struct sockaddr *)&ss, &sslen) < 0) {
                int e = errno == 0 || accepting == 0 ? ENOTSOCK : errno;
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: fd %d is not a listening socket", f->listen.text, fd);
                return -e;
        }
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        l->fd = fd;
        l->family = ss.ss_family;
        return 0;
}

int sf_listener_open(const struct sf_forward *f, struct sf_listener *l) {
        memset(l, 0, sizeof *l);
        l->fd = -1;
        switch (f->listen.kind) {
        case SF_EP_UNIX:
        case SF_EP_ABSTRACT:
                return open_unix(f, l);
        case SF_EP_TCP:
                return open_tcp(f, l);
        case SF_EP_VSOCK:
                return open_vsock(f, l);
        case SF_EP_SYSTEMD:
        case SF_EP_FD:
                return open_passed(f, l);
        }
        return -EINVAL;
}

void sf_listener_close(struct sf_listener *l) {
        if (l->fd >= 0) {
                close(l->fd);
                l->fd = -1;
        }
        if (l->owned) {
                struct stat st;
                /* Only remove the file if it is still ours: another instance may have taken over. */
                if (lstat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
                        unlink(l->path);
                l->owned = false;
        }
}
