#pragma once
/* The Linux engine (relay/engine/engine.h has the contract): descriptors in the relay's own
 * edge-triggered epoll set, recv/send, splice through pooled pipes. All inline: the data path
 * makes the same system calls as it would without the layer. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "relay/engine/bufpool.h"
#include "relay/engine/evset.h"
#include "relay/engine/pipepool.h"
#include "relay/listen/listener.h"
#include "relay/sys/platform.h"

#define SF_ENGINE_NAME "linux"

enum {
        SF_EV_IN = EPOLLIN,
        SF_EV_OUT = EPOLLOUT,
        SF_EV_RDHUP = EPOLLRDHUP,
        SF_EV_HUP = EPOLLHUP,
        SF_EV_ERR = EPOLLERR,
};

/* Spare pipes kept after a burst of bulk transfers. */
#define SF_ENGINE_PIPE_RESERVE 16

struct sf_engine {
        struct sf_evset ev;
        struct sf_pipepool *pipes;
        bool open;
};

struct sf_watch {
        struct sf_ev ev;
};

struct sf_sock {
        struct sf_ev ev;
        int fd; /* -1 when closed */
};

/* An accepted connection not yet adopted by a connection's sf_sock. */
struct sf_incoming {
        int fd;
};

static inline int sf_engine_init(struct sf_engine *e, uv_loop_t *loop, struct sf_bufpool *pool) {
        (void)pool;
        if (!e->pipes && !(e->pipes = sf_pipepool_new(SF_ENGINE_PIPE_RESERVE)))
                return -ENOMEM;
        int r = sf_evset_init(&e->ev, loop);
        e->open = r == 0;
        return r;
}

static inline void sf_engine_close(struct sf_engine *e) {
        if (e->open)
                sf_evset_close(&e->ev);
        e->open = false;
}

/* The spare pipes too. Safe on a zeroed engine that was never initialised. */
static inline void sf_engine_free(struct sf_engine *e) {
        sf_engine_close(e);
        sf_pipepool_free(e->pipes);
        e->pipes = NULL;
}

static inline void sf_engine_run(struct sf_engine *e, uv_loop_t *loop) {
        if (e->open)
                sf_evset_run(&e->ev);
        else
                uv_run(loop, UV_RUN_DEFAULT);
}

static inline void sf_engine_defer(struct sf_engine *e, struct sf_ev *ev) {
        sf_evset_defer(&e->ev, ev);
}

static inline void sf_engine_cancel(struct sf_engine *e, struct sf_ev *ev) {
        sf_evset_cancel(&e->ev, ev);
}

static inline void sf_engine_trim(struct sf_engine *e) {
        if (e->pipes)
                sf_pipepool_trim(e->pipes);
}

/* In the relay's epoll set, as the connections are: an accept costs no libuv turn. */
static inline int sf_watch_start(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l, sf_ev_cb cb) {
        w->ev.cb = cb;
        return sf_evset_add_listener(&e->ev, l->fd, &w->ev);
}

static inline void sf_watch_stop(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l) {
        (void)w;
        sf_evset_del(&e->ev, l->fd);
}

static inline int sf_watch_accept(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l,
                                  struct sf_incoming *in) {
        (void)e;
        (void)w;
        in->fd = sf_accept(l->fd);
        return in->fd < 0 ? in->fd : 0;
}

static inline void sf_incoming_close(struct sf_engine *e, struct sf_incoming *in) {
        (void)e;
        if (in->fd >= 0)
                close(in->fd);
        in->fd = -1;
}

static inline int sf_incoming_cred(const struct sf_incoming *in, uid_t *uid, gid_t *gid, pid_t *pid) {
        return sf_peer_cred(in->fd, uid, gid, pid);
}

/* A unix socket's file mode and allow-uid decide who gets in here. */
static inline bool sf_incoming_trusted(const struct sf_incoming *in, char *who, size_t who_cap, char *allowed,
                                       size_t allowed_cap) {
        (void)in;
        (void)who;
        (void)who_cap;
        (void)allowed;
        (void)allowed_cap;
        return true;
}

/* A libuv stream read from the relay's own epoll set (the shared link's transport): a read
 * costs no libuv turn. libuv keeps writing it and closing it. */
struct sf_reader {
        struct sf_ev ev;
        int fd; /* -1 while not watched */
};

static inline int sf_reader_start(struct sf_engine *e, struct sf_reader *r, uv_stream_t *s, sf_ev_cb cb) {
        uv_os_fd_t fd;
        r->fd = -1;
        if (!e->open || uv_fileno((const uv_handle_t *)s, &fd) < 0)
                return -ENOTSUP;
        r->ev.cb = cb;
        int rc = sf_evset_add_reader(&e->ev, fd, &r->ev);
        if (rc == 0)
                r->fd = fd;
        return rc;
}

/* Before the stream is closed. Safe when not started. */
static inline void sf_reader_stop(struct sf_engine *e, struct sf_reader *r) {
        if (r->fd < 0)
                return;
        sf_evset_cancel(&e->ev, &r->ev);
        sf_evset_del(&e->ev, r->fd);
        r->fd = -1;
}

static inline ssize_t sf_reader_read(struct sf_reader *r, void *buf, size_t n) {
        return read(r->fd, buf, n);
}

static inline uv_handle_t *sf_watch_handle(struct sf_watch *w) {
        (void)w;
        return NULL;
}

static inline void sf_sock_init(struct sf_sock *s, sf_ev_cb cb) {
        s->ev.cb = cb;
        s->fd = -1;
}

/* Takes the descriptor; on failure it stays in s and goes with sf_sock_close. */
static inline int sf_sock_adopt(struct sf_engine *e, struct sf_sock *s, struct sf_incoming *in, int family) {
        (void)family;
        s->fd = in->fd;
        in->fd = -1;
        return sf_evset_add(&e->ev, s->fd, &s->ev);
}

/* Named pipes are Windows': configuration refuses npipe: endpoints here. */
static inline int sf_sock_connect_pipe(struct sf_engine *e, struct sf_sock *s, const char *name, bool *in_progress) {
        (void)e;
        (void)s;
        (void)name;
        *in_progress = false;
        return -EAFNOSUPPORT;
}

static inline int sf_sock_connect(struct sf_engine *e, struct sf_sock *s, const struct sockaddr *addr,
                                  socklen_t len, bool *in_progress) {
        *in_progress = false;
        int fd = sf_socket(addr->sa_family, SOCK_STREAM);
        if (fd < 0)
                return fd;
        int err = connect(fd, addr, len) < 0 ? errno : 0;
        if (err == EINPROGRESS) {
                *in_progress = true;
                err = 0;
        }
        /* Added after connect(): a socket not connected yet reports EPOLLHUP, and the ADD
         * itself reports a connection that completed in between. */
        if (err == 0) {
                int r = sf_evset_add(&e->ev, fd, &s->ev);
                if (r < 0) {
                        err = -r;
                        *in_progress = false;
                }
        }
        if (err) {
                close(fd);
                return -err;
        }
        s->fd = fd;
        return 0;
}

static inline ssize_t sf_sock_recv(struct sf_sock *s, void *buf, size_t n) {
        return recv(s->fd, buf, n, 0);
}

static inline ssize_t sf_sock_send(struct sf_sock *s, const void *buf, size_t n) {
        return send(s->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static inline void sf_sock_shutdown(struct sf_sock *s) {
        shutdown(s->fd, SHUT_WR);
}

/* close() also drops the descriptor from the epoll set. */
static inline void sf_sock_close(struct sf_engine *e, struct sf_sock *s) {
        sf_evset_cancel(&e->ev, &s->ev);
        if (s->fd >= 0) {
                close(s->fd);
                s->fd = -1;
        }
}

/* What send took is in the kernel's send buffer, which close() does not drop. */
static inline bool sf_sock_sending(const struct sf_sock *s) {
        (void)s;
        return false;
}

static inline int sf_sock_error(struct sf_sock *s) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
        return err;
}

static inline void sf_sock_nodelay(struct sf_sock *s) {
        int one = 1;
        setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Out of line (relay/engine/linux.c): a libuv stream on the descriptor, taken out of the set. */
int sf_sock_release(struct sf_engine *e, struct sf_sock *s, uv_loop_t *loop, uv_stream_t **out,
                    uv_close_cb *close_cb);

static inline int sf_sock_peername(struct sf_sock *s, struct sockaddr_storage *ss, socklen_t *len) {
        return getpeername(s->fd, (struct sockaddr *)ss, len) < 0 ? -errno : 0;
}

static inline int sf_sock_pipe_get(struct sf_engine *e, struct sf_pipe *p) {
        return sf_pipepool_get(e->pipes, p);
}

static inline void sf_sock_pipe_put(struct sf_engine *e, struct sf_pipe *p, size_t bytes_left) {
        sf_pipepool_put(e->pipes, p, bytes_left);
}

static inline ssize_t sf_sock_to_pipe(struct sf_sock *s, struct sf_pipe *p, size_t n) {
        return splice(s->fd, NULL, p->wr, NULL, n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
}

/* No MSG_NOSIGNAL here: the relay's process ignores SIGPIPE (relay.h). */
static inline ssize_t sf_sock_from_pipe(struct sf_pipe *p, struct sf_sock *s, size_t n) {
        return splice(p->rd, NULL, s->fd, NULL, n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
}
