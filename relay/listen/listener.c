#include "relay/listen/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sodium.h>

#include "conf/log.h"
#include "relay/listen/policy.h"
#include "relay/listen/safedir.h"
#include "relay/listen/sockdir.h"
#include "relay/listen/sockpath.h"
#include "relay/sys/platform.h"

#define LISTEN_BACKLOG 4096
/* A name bind() takes whole: sun_path and its terminating NUL. */
#define HIDDEN_MAX sizeof(((struct sockaddr_un *)0)->sun_path)

/* Refuses anything at base in the pinned directory dirfd but a stale socket, which it
 * removes. Runs with dirfd as the working directory, so the probe's connect() reaches the
 * very entry examined here. */
static int clear_path(const char *name, const char *path, int dirfd, const char *base) {
        struct stat st, again;
        if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT)
                        return 0;
                int e = errno;
                sf_log(SF_LOG_ERROR, name, 0, "listen unix:%s: cannot examine the path: %s", path, strerror(e));
                return -e;
        }
        if (S_ISLNK(st.st_mode)) {
                sf_log(SF_LOG_ERROR, name, 0,
                       "listen unix:%s: the path is a symbolic link; refusing to replace it — remove it or "
                       "listen on another path",
                       path);
                return -EEXIST;
        }
        switch (sf_sockpath_probe_settled(base)) {
        case SF_PATH_MISSING:
                return 0;
        case SF_PATH_STALE_SOCKET:
                /* Removed only if the entry is still the socket that was probed. */
                if (fstatat(dirfd, base, &again, AT_SYMLINK_NOFOLLOW) < 0 || again.st_dev != st.st_dev ||
                    again.st_ino != st.st_ino || !S_ISSOCK(again.st_mode)) {
                        sf_log(SF_LOG_ERROR, name, 0,
                               "listen unix:%s: the path changed while it was examined; left untouched — find "
                               "out what else manages it, or listen on another path",
                               path);
                        return -EAGAIN;
                }
                if (unlinkat(dirfd, base, 0) < 0 && errno != ENOENT) {
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

/* bind() creates the file with 0777 & ~umask; setting the umask around it means the socket
 * never exists with more permissions than configured, even for an instant. */
static int bind_umask(int fd, const struct sockaddr_un *sa, socklen_t salen, mode_t mode) {
        mode_t old = umask(~mode & 0777);
        int r = bind(fd, (const struct sockaddr *)sa, salen) < 0 ? -errno : 0;
        umask(old);
        return r;
}

/* bind() in the checked directory failed with e, made by uid. */
static void bind_failed(const char *name, const char *what, int e, uid_t uid) {
        char own[PATH_MAX];
        if (e != EACCES)
                sf_log(SF_LOG_ERROR, name, 0, "%s: bind: %s", what, strerror(e));
        else if (uid == 0)
                sf_log(SF_LOG_ERROR, name, 0, "%s: bind: %s — root cannot create files in that directory", what,
                       strerror(e));
        else
                sf_log(SF_LOG_ERROR, name, 0,
                       "%s: bind: %s — uid %u cannot create files in that directory; a user that is not root makes "
                       "its sockets in %s",
                       what, strerror(e), (unsigned)uid, sf_sockdir_own(own, sizeof own, NULL, 0));
}

/* A fresh hidden name for the socket before it gets its path base: random, so that nobody who
 * may write in the directory can take it first, and with base in it where that fits, so that
 * what lists sockets by the name they were bound to (ss -xl, lsof) still shows which one it
 * is. */
static void hidden_name(char *out, size_t cap, const char *base) {
        uint8_t r[8];
        char hex[2 * sizeof r + 1];
        randombytes_buf(r, sizeof r);
        sodium_bin2hex(hex, sizeof hex, r, sizeof r);
        if ((size_t)snprintf(out, cap, ".%s.%s", base, hex) >= cap)
                snprintf(out, cap, ".sockferry.%s", hex);
}

/* Binds fd under a hidden name in the working directory (the pinned one), in tmp. */
static int bind_hidden(const char *name, const char *what, int fd, mode_t mode, const char *base,
                       char tmp[static HIDDEN_MAX], uid_t as) {
        if (sodium_init() < 0) {
                sf_log(SF_LOG_ERROR, name, 0, "%s: libsodium failed to initialise (no usable random source?)", what);
                return -EIO;
        }
        int r = -EADDRINUSE;
        for (int i = 0; i < 4 && r == -EADDRINUSE; i++) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                hidden_name(tmp, HIDDEN_MAX, base);
                snprintf(sa.sun_path, sizeof sa.sun_path, "%s", tmp);
                r = bind_umask(fd, &sa, sizeof sa, mode);
        }
        if (r < 0)
                bind_failed(name, what, -r, as);
        return r;
}

/* listen() on a bound unix socket, logged. */
static int listen_unix(const struct sf_forward *f, int fd) {
        if (listen(fd, LISTEN_BACKLOG) == 0)
                return 0;
        int r = -errno;
        sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: listen: %s", f->listen.text, strerror(-r));
        return r;
}

static int link_path(int dirfd, const char *tmp, const char *base) {
        return linkat(dirfd, tmp, dirfd, base, 0) < 0 ? -errno : 0;
}

/* Gives the socket, listening and owned as configured, its path. linkat() fails rather than
 * replace what another process put there since clear_path() looked. given: the socket's owner
 * is another uid than the relay's. The caller removes the hidden name. */
static int publish(const struct sf_forward *f, const char *what, int dirfd, const char *tmp, const char *base,
                   bool given) {
        int r = link_path(dirfd, tmp, base);
        if (r == -EPERM && given && fchownat(dirfd, tmp, geteuid(), (gid_t)-1, AT_SYMLINK_NOFOLLOW) == 0) {
                /* fs.protected_hardlinks: without CAP_FOWNER (a container started with
                 * --cap-drop ALL --cap-add CHOWN) only a file's owner may link it. The socket is
                 * the relay's for the link and its owner's right after, at its path, as before
                 * hidden names: in a directory nobody else may change (a user's own directory
                 * never gets here, the socket is made as that user there). */
                r = link_path(dirfd, tmp, base);
                if (r == 0 && fchownat(dirfd, base, f->owner, (gid_t)-1, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = -errno;
                        sf_log(SF_LOG_ERROR, f->name, 0, "%s: cannot set owner/group: %s", what, strerror(-r));
                        unlinkat(dirfd, base, 0);
                        return r;
                }
        }
        if (r == -EEXIST)
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "%s: something else appeared at the path while the socket was made; left untouched — find "
                       "out what else manages it, or listen on another path",
                       what);
        else if (r == -EPERM || r == -EOPNOTSUPP || r == -ENOTSUP || r == -EMLINK)
                sf_log(SF_LOG_ERROR, f->name, 0,
                       "%s: cannot give the socket its name (link): %s — the file system there takes no hard "
                       "links; listen on a local one (/run/sockferry/NAME.sock)",
                       what, strerror(-r));
        else if (r < 0)
                sf_log(SF_LOG_ERROR, f->name, 0, "%s: cannot give the socket its name (link): %s", what,
                       strerror(-r));
        return r;
}

/* A listen path: its directory is opened and checked from / down (relay/listen/safedir.h) and stays
 * pinned in l->dirfd; the stale-socket check, bind, chown and the removal at close all go
 * through it. bind() takes a path only, and binding to /proc/self/fd/N/NAME is not honoured
 * for AF_UNIX on every kernel, so the pinned directory is made the working directory and the
 * socket bound by its bare name. The working directory belongs to the whole process: this is
 * safe because it runs at start-up, before the event loop, on the only thread that exists
 * (libuv starts its thread pool on first use, later), or at a reload on the loop's thread, while
 * the thread pool at most resolves names (absolute paths only): nothing else resolves a relative
 * path meanwhile; the old working directory is restored right after (a payload started by
 * `run` inherits it).
 *
 * The socket is bound under a hidden name, given its owner and group, listened on, and only then
 * linked to its path: whoever sees the path can connect at once. Bound under the path itself it
 * would refuse connections between bind() and listen() (ECONNREFUSED, which a client takes for a
 * relay that is not there), and the configured owner between bind() and chown() (EACCES). */
static int bind_path(const struct sf_forward *f, const struct sf_safedir_policy *trust, int fd,
                     struct sf_listener *l) {
        const char *name = f->name, *path = f->listen.path, *base;
        char what[SF_UNIX_PATH_MAX + 16], tmp[HIDDEN_MAX];
        struct sf_safedir_found found;
        snprintf(what, sizeof what, "listen %s", f->listen.text);
        int dirfd = sf_safedir_open(trust, path, true, name, what, &base, &found);
        if (dirfd < 0)
                return dirfd;
        int cwd = sf_safedir_enter(dirfd), r = cwd < 0 ? cwd : 0;
        if (r < 0)
                sf_log(SF_LOG_ERROR, name, 0, "%s: cannot enter its directory: %s", what, strerror(-r));
        else {
                r = clear_path(name, path, dirfd, base);
                /* In a directory the socket's user can change, the socket is made as that user,
                 * with that user's rights: root never chowns a name someone else can swap for a
                 * link to another file, nor makes a file where that user's link points. */
                bool as_user = r == 0 && found.users;
                if (as_user)
                        r = sf_safedir_as_user(trust, name, what);
                bool bound = false;
                if (r == 0) {
                        r = bind_hidden(name, what, fd, f->mode, base, tmp, as_user ? trust->user : geteuid());
                        bound = r == 0;
                }
                if (r == 0 && as_user && f->group_set &&
                    fchownat(dirfd, tmp, (uid_t)-1, f->group, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = -errno;
                        sf_log(SF_LOG_ERROR, name, 0,
                               "%s: cannot give the socket group %u as uid %u, in whose directory it is: %s",
                               what, (unsigned)f->group, (unsigned)trust->user, strerror(-r));
                }
                /* Made as its user, with its group, the socket has nothing left to change. */
                if (r == 0 && !as_user && (f->owner_set || f->group_set) &&
                    fchownat(dirfd, tmp, f->owner_set ? f->owner : (uid_t)-1, f->group_set ? f->group : (gid_t)-1,
                             AT_SYMLINK_NOFOLLOW) < 0) {
                        r = -errno;
                        sf_log(SF_LOG_ERROR, name, 0, "%s: cannot set owner/group: %s%s", what, strerror(-r),
                               r == -EPERM ? " — changing the owner needs root (CAP_CHOWN)" : "");
                }
                if (r == 0)
                        r = listen_unix(f, fd);
                if (r == 0)
                        r = publish(f, what, dirfd, tmp, base, !as_user && f->owner_set && f->owner != geteuid());
                /* Published or not, the hidden name goes. */
                if (bound)
                        unlinkat(dirfd, tmp, 0);
                if (as_user)
                        sf_fs_user_leave();
                sf_safedir_leave(cwd);
        }
        struct stat st;
        if (r == 0 && fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                r = -errno;
                sf_log(SF_LOG_ERROR, name, 0, "%s: cannot examine the new socket: %s", what, strerror(-r));
                unlinkat(dirfd, base, 0);
        }
        if (r < 0) {
                close(dirfd);
                return r;
        }
        l->owned = true;
        l->dirfd = dirfd;
        l->dev = st.st_dev;
        l->ino = st.st_ino;
        snprintf(l->path, sizeof l->path, "%s", path);
        return 0;
}

static int open_unix(const struct sf_forward *f, const struct sf_safedir_policy *trust, struct sf_listener *l) {
        int fd = sf_socket(AF_UNIX, SOCK_STREAM);
        if (fd < 0) {
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: socket: %s", f->listen.text, strerror(-fd));
                return fd;
        }
        int r;
        if (f->listen.kind == SF_EP_ABSTRACT) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                size_t n = strlen(f->listen.path);
                memcpy(sa.sun_path + 1, f->listen.path, n);
                r = bind_umask(fd, &sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n), f->mode);
                if (r < 0)
                        sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: bind: %s", f->listen.text, strerror(-r));
                if (r == 0)
                        r = listen_unix(f, fd);
        } else {
                /* Listening before its path appears (bind_path). */
                r = bind_path(f, trust, fd, l);
        }
        if (r < 0) {
                close(fd);
                sf_listener_close(l);
                return r;
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
        struct addrinfo *res;
        int r = sf_listen_tcp_resolve(f, &res);
        if (r < 0)
                return r;
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
                /* -EPERM stands for a policy refusal (listener.h); a denied socket() is not one. */
                return e == EPERM ? -EACCES : -e;
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

/* sd_listen_fds(3) protocol: fds from 3 on, LISTEN_PID must be us, names in LISTEN_FDNAMES.
 * quiet: no error logged when nothing was passed (-EBADF). */
static int systemd_fd(const struct sf_forward *f, bool quiet) {
        const char *pid = getenv("LISTEN_PID"), *nfds = getenv("LISTEN_FDS"), *names = getenv("LISTEN_FDNAMES");
        if (!pid || !nfds || strtol(pid, NULL, 10) != (long)getpid()) {
                if (quiet)
                        return -EBADF;
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

/* A passed descriptor must be a listening socket, and its address must pass the policy a
 * listener the relay binds itself passes (relay/listen/policy.h). *family: its address family.
 * 0, -EPERM (refused by the policy) or -errno, logged. */
static int passed_check(const struct sf_forward *f, int fd, int *family) {
        int accepting = 0;
        socklen_t len = sizeof accepting;
        struct sockaddr_storage ss;
        socklen_t sslen = sizeof ss;
        errno = 0;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) < 0 || !accepting ||
            getsockname(fd, (struct sockaddr *)&ss, &sslen) < 0) {
                int e = errno == 0 || accepting == 0 ? ENOTSOCK : errno;
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: fd %d is not a listening socket", f->listen.text, fd);
                return -e;
        }
        *family = ss.ss_family;
        return sf_listen_passed_policy(f, (struct sockaddr *)&ss, sslen);
}

static int open_passed(const struct sf_forward *f, struct sf_listener *l) {
        int fd = f->listen.kind == SF_EP_FD ? f->listen.fd : systemd_fd(f, false), family;
        if (fd < 0)
                return fd;
        int r = passed_check(f, fd, &family);
        if (r < 0)
                return r;
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        l->fd = fd;
        l->family = family;
        return 0;
}

int sf_listener_passed_test(const struct sf_forward *f) {
        int fd = f->listen.kind == SF_EP_FD ? f->listen.fd : systemd_fd(f, true), family;
        if (fd == -EBADF || (fd >= 0 && fcntl(fd, F_GETFD) < 0)) {
                sf_log(SF_LOG_INFO, f->name, 0,
                       "listen %s: no socket is passed to this test; whether its address needs auth = token is "
                       "checked when the relay starts",
                       f->listen.text);
                return 0;
        }
        return fd < 0 ? fd : passed_check(f, fd, &family);
}

/* The libuv stream of a listener that sf_listener_serve handed over. */
struct sf_listen_srv {
        uv_pipe_t pipe;
};

static void on_srv_closed(uv_handle_t *h) {
        free(h);
}

int sf_listener_serve(struct sf_listener *l, uv_loop_t *loop, int backlog, uv_connection_cb cb, void *data) {
        struct sf_listen_srv *srv = malloc(sizeof *srv);
        if (!srv)
                return -ENOMEM;
        uv_pipe_init(loop, &srv->pipe, 0);
        srv->pipe.data = data;
        int r = uv_pipe_open(&srv->pipe, l->fd);
        if (r == 0) {
                l->fd = -1; /* libuv's now */
                r = uv_listen((uv_stream_t *)&srv->pipe, backlog, cb);
        }
        l->srv = srv;
        return r < 0 ? -sf_errno_uv(r) : 0;
}

void sf_listener_policy(const struct sf_forward *f, const struct sf_conf *c, struct sf_safedir_policy *p) {
        bool user_set = f->owner_set || c->user_set;
        sf_safedir_policy_init(p, user_set, f->owner_set ? f->owner : c->uid, f->group_set ? f->group : getegid());
}

int sf_listener_default_dir(struct sf_conf *c, bool create, bool test) {
        return sf_sockdir_apply(c, test ? SF_SOCKDIR_TEST : create ? SF_SOCKDIR_BIND : SF_SOCKDIR_FIND);
}

int sf_listener_open(uv_loop_t *loop, const struct sf_forward *f, const struct sf_conf *c, struct sf_listener *l) {
        struct sf_safedir_policy trust;
        sf_listener_policy(f, c, &trust);
        memset(l, 0, sizeof *l);
        l->fd = -1;
        switch (f->listen.kind) {
        case SF_EP_UNIX:
        case SF_EP_ABSTRACT:
                return open_unix(f, &trust, l);
        case SF_EP_TCP:
                return open_tcp(f, l);
        case SF_EP_VSOCK:
                return open_vsock(f, l);
        case SF_EP_SYSTEMD:
        case SF_EP_FD:
                return open_passed(f, l);
        case SF_EP_NPIPE:
                break; /* refused by the configuration here (conf/platform_posix.c) */
        }
        return -EINVAL;
}

int sf_listener_place_check(const struct sf_forward *f, const struct sf_conf *c) {
        char dir[SF_UNIX_PATH_MAX];
        struct stat st;
        snprintf(dir, sizeof dir, "%s", f->listen.path);
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir || (*slash = '\0', stat(dir, &st) < 0))
                return 0;
        struct sf_safedir_policy trust;
        sf_listener_policy(f, c, &trust);
        char what[SF_UNIX_PATH_MAX + 16];
        const char *base;
        snprintf(what, sizeof what, "listen %s", f->listen.text);
        int fd = sf_safedir_open(&trust, f->listen.path, false, f->name, what, &base, NULL);
        if (fd >= 0)
                close(fd);
        return fd == -EPERM ? -EPERM : 0;
}

void sf_listener_close(struct sf_listener *l) {
        if (l->srv) {
                uv_close((uv_handle_t *)&l->srv->pipe, on_srv_closed);
                l->srv = NULL;
        }
        if (l->fd >= 0) {
                close(l->fd);
                l->fd = -1;
        }
        if (l->owned) {
                struct stat st;
                const char *base = strrchr(l->path, '/') + 1;
                /* Only remove the file if it is still ours: another instance may have taken over. */
                if (fstatat(l->dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == l->dev &&
                    st.st_ino == l->ino)
                        unlinkat(l->dirfd, base, 0);
                close(l->dirfd);
                l->owned = false;
        }
}
