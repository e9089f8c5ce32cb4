#include "relay/engine/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "relay/engine/uv_int.h"
#include "relay/sys/platform.h"

/* The portable engine on POSIX systems (macOS; Linux built with -Dportable=true): listening
 * sockets are descriptors watched with uv_poll and accepted by the relay, local streams (unix,
 * vsock) are descriptors of ours that libuv is handed once connected. */

static void on_watch(uv_poll_t *p, int status, int events) {
        struct sf_watch *w = p->data;
        w->ev.cb(&w->ev, status < 0 ? SF_EV_ERR : SF_EV_IN);
}

int sf_watch_start(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l, sf_ev_cb cb) {
        w->ev.cb = cb;
        if (!w->init) {
                int r = uv_poll_init(e->loop, &w->poll, l->fd);
                if (r < 0)
                        return -sf_errno_uv(r);
                w->poll.data = w;
                w->init = true;
        }
        int r = uv_poll_start(&w->poll, UV_READABLE, on_watch);
        return r < 0 ? -sf_errno_uv(r) : 0;
}

void sf_watch_stop(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l) {
        if (w->init)
                uv_poll_stop(&w->poll);
}

uv_handle_t *sf_watch_handle(struct sf_watch *w) {
        if (!w->init)
                return NULL;
        w->init = false;
        return (uv_handle_t *)&w->poll;
}

int sf_watch_accept(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l, struct sf_incoming *in) {
        in->fd = sf_accept(l->fd);
        return in->fd < 0 ? in->fd : 0;
}

void sf_incoming_close(struct sf_engine *e, struct sf_incoming *in) {
        if (in->fd >= 0)
                close(in->fd);
        in->fd = -1;
}

int sf_incoming_cred(const struct sf_incoming *in, uid_t *uid, gid_t *gid, pid_t *pid) {
        return sf_peer_cred(in->fd, uid, gid, pid);
}

/* A unix socket's file mode and allow-uid decide who gets in here. */
bool sf_incoming_trusted(const struct sf_incoming *in, char *who, size_t who_cap, char *allowed, size_t allowed_cap) {
        return true;
}

/* Opens the stream on a connected descriptor (which it then owns) and starts reading. 0 or
 * -errno; the descriptor is closed on failure. */
static int stream_open(struct sf_uvsock *h, int fd, int family) {
        int r;
        h->is_tcp = family == AF_INET || family == AF_INET6;
        if (h->is_tcp) {
                uv_tcp_init(h->e->loop, &h->u.tcp);
                h->opened = true;
                r = uv_tcp_open(&h->u.tcp, fd);
        } else {
                uv_pipe_init(h->e->loop, &h->u.pipe, 0);
                h->opened = true;
                r = uv_pipe_open(&h->u.pipe, fd);
        }
        if (r < 0) {
                close(fd);
                return -sf_errno_uv(r);
        }
        r = sf_uvsock_read_start(h);
        return r < 0 ? -sf_errno_uv(r) : 0;
}

int sf_sock_adopt(struct sf_engine *e, struct sf_sock *s, struct sf_incoming *in, int family) {
        int fd = in->fd;
        in->fd = -1;
        struct sf_uvsock *h = sf_uvsock_new(e, s);
        if (!h) {
                close(fd);
                return -ENOMEM;
        }
        return stream_open(h, fd, family);
}

static void on_connect_poll(uv_poll_t *p, int status, int events) {
        struct sf_uvsock *h = p->data;
        int err = 0;
        socklen_t len = sizeof err;
        (void)events;
        if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
        if (!err && status < 0)
                err = sf_errno_uv(status);
        uv_close((uv_handle_t *)p, sf_uvsock_handle_freed);
        h->poll = NULL;
        int fd = h->fd;
        h->fd = -1;
        if (err) {
                close(fd);
                h->err = err;
                sf_uvsock_report(h, SF_EV_ERR | SF_EV_HUP);
                return;
        }
        int r = stream_open(h, fd, h->is_tcp ? AF_INET : AF_UNIX);
        if (r < 0) {
                h->err = -r;
                sf_uvsock_report(h, SF_EV_ERR | SF_EV_HUP);
                return;
        }
        sf_uvsock_report(h, SF_EV_OUT);
}

/* unix and vsock sockets on a descriptor of ours: a unix connect finishes at once or says
 * EAGAIN (a full backlog), which the dialer retries. */
int sf_sock_connect_local(struct sf_engine *e, struct sf_sock *s, const struct sockaddr *addr, socklen_t len,
                          bool *in_progress) {
        int family = addr->sa_family;
        int fd = sf_socket(family, SOCK_STREAM);
        if (fd < 0)
                return fd;
        if (connect(fd, addr, len) == 0) {
                struct sf_uvsock *h = sf_uvsock_new(e, s);
                if (!h) {
                        close(fd);
                        return -ENOMEM;
                }
                int r = stream_open(h, fd, family);
                if (r < 0)
                        sf_sock_close(e, s);
                return r;
        }
        int err = errno;
        if (err != EINPROGRESS) {
                close(fd);
                return -err;
        }
        struct sf_uvsock *h = sf_uvsock_new(e, s);
        uv_poll_t *p = malloc(sizeof *p);
        if (!h || !p) {
                free(p);
                close(fd);
                if (h)
                        sf_sock_close(e, s);
                return -ENOMEM;
        }
        h->fd = fd;
        int r = uv_poll_init(e->loop, p, fd);
        if (r < 0) {
                free(p);
                sf_sock_close(e, s);
                return -sf_errno_uv(r);
        }
        p->data = h;
        h->poll = p;
        uv_poll_start(p, UV_WRITABLE, on_connect_poll);
        *in_progress = true;
        return 0;
}

bool sf_sock_shutdown_local(struct sf_uvsock *h) {
        return false;
}

int sf_sock_connect_pipe(struct sf_engine *e, struct sf_sock *s, const char *name, bool *in_progress) {
        return -EAFNOSUPPORT;
}

/* A unix or vsock stream has a descriptor. */
int sf_sock_peername_local(struct sf_uvsock *h, struct sockaddr_storage *ss, socklen_t *len) {
        uv_os_fd_t fd;
        if (uv_fileno(&h->u.handle, &fd) < 0)
                return -ENOTCONN;
        return getpeername(fd, (struct sockaddr *)ss, len) < 0 ? -errno : 0;
}
