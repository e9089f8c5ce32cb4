#pragma once
/* The portable engine (relay/engine/engine.h has the contract): each side of a connection is a
 * libuv stream (uv_tcp_t, uv_pipe_t) made to behave like the non-blocking socket the state machine
 * expects. Reads land in a per-side inbox (a pooled buffer, read no further than the room the
 * owner's last sf_sock_recv left, which is the backpressure) and sf_sock_recv empties it;
 * sf_sock_send writes what uv_try_write takes and the rest through a per-side outbox with
 * uv_write, answering EAGAIN until that is written. No
 * descriptor of a connection is polled directly, which is what lets the same engine carry
 * Windows' named pipes. On POSIX, listening sockets are watched with uv_poll and accepted by the
 * relay (relay/listen/accept.c): libuv's own accept would close pending clients when out of
 * descriptors, where they should wait in the backlog; Windows' listeners are libuv streams
 * (relay/listen/listener_win.c). */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

#include "relay/engine/bufpool.h"
#include "relay/engine/defer.h"
#include "relay/listen/listener.h"

#define SF_ENGINE_NAME "portable"

enum {
        SF_EV_IN = 1,
        SF_EV_OUT = 2,
        SF_EV_RDHUP = 4,
        SF_EV_HUP = 8,
        SF_EV_ERR = 16,
};

/* No splice: the pump's pipe calls say so, and it copies. */
struct sf_pipe {
        int rd, wr;
        size_t size;
};

struct sf_engine {
        uv_loop_t *loop;
        struct sf_bufpool *pool;
        struct sf_deferq q;
        uv_idle_t idle; /* runs the deferred calls while there are any */
        uv_pipe_t first; /* see sf_engine_init */
        bool open;
};

/* A listener's readiness: on POSIX a uv_poll on its descriptor; on Windows libuv's own
 * listening stream (relay/listen/listener_win.c), which reports each client it took in. */
struct sf_watch {
        struct sf_ev ev;
#ifdef _WIN32
        struct sf_listener *l;
        bool armed;
#else
        uv_poll_t poll;
#endif
        bool init;
};

/* An accepted connection not yet adopted by a connection's sf_sock. */
struct sf_uvsock;
struct sf_incoming {
#ifdef _WIN32
        struct sf_uvsock *h;
#else
        int fd;
#endif
};

struct sf_sock {
        struct sf_ev ev;
        /* The stream and its buffers; allocated apart because libuv holds it until its close
         * callback, after the connection may have moved on (failover) or be gone. */
        struct sf_uvsock *h;
};

int sf_engine_init(struct sf_engine *e, uv_loop_t *loop, struct sf_bufpool *pool);
void sf_engine_close(struct sf_engine *e);
void sf_engine_free(struct sf_engine *e);
void sf_engine_run(struct sf_engine *e, uv_loop_t *loop);
void sf_engine_defer(struct sf_engine *e, struct sf_ev *ev);
void sf_engine_cancel(struct sf_engine *e, struct sf_ev *ev);
void sf_engine_trim(struct sf_engine *e);

int sf_watch_start(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l, sf_ev_cb cb);
void sf_watch_stop(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l);
uv_handle_t *sf_watch_handle(struct sf_watch *w);
int sf_watch_accept(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l, struct sf_incoming *in);
void sf_incoming_close(struct sf_engine *e, struct sf_incoming *in);
int sf_incoming_cred(const struct sf_incoming *in, uid_t *uid, gid_t *gid, pid_t *pid);
bool sf_incoming_trusted(const struct sf_incoming *in, char *who, size_t who_cap, char *allowed, size_t allowed_cap);

/* Streams are read by libuv here: sf_reader_start says -ENOTSUP and its owner reads with
 * uv_read_start (the Linux engine reads some streams from its own epoll set). */
struct sf_reader {
        struct sf_ev ev;
        int fd;
};

static inline int sf_reader_start(struct sf_engine *e, struct sf_reader *r, uv_stream_t *s, sf_ev_cb cb) {
        (void)e;
        (void)s;
        (void)cb;
        r->fd = -1;
        return -ENOTSUP;
}

static inline void sf_reader_stop(struct sf_engine *e, struct sf_reader *r) {
        (void)e;
        (void)r;
}

static inline ssize_t sf_reader_read(struct sf_reader *r, void *buf, size_t n) {
        (void)r;
        (void)buf;
        (void)n;
        errno = ENOTSUP;
        return -1;
}

void sf_sock_init(struct sf_sock *s, sf_ev_cb cb);
int sf_sock_adopt(struct sf_engine *e, struct sf_sock *s, struct sf_incoming *in, int family);
int sf_sock_connect(struct sf_engine *e, struct sf_sock *s, const struct sockaddr *addr, socklen_t len,
                    bool *in_progress);
int sf_sock_connect_pipe(struct sf_engine *e, struct sf_sock *s, const char *name, bool *in_progress);
ssize_t sf_sock_recv(struct sf_sock *s, void *buf, size_t n);
ssize_t sf_sock_send(struct sf_sock *s, const void *buf, size_t n);
void sf_sock_shutdown(struct sf_sock *s);
void sf_sock_close(struct sf_engine *e, struct sf_sock *s);
int sf_sock_error(struct sf_sock *s);
bool sf_sock_sending(const struct sf_sock *s);
void sf_sock_nodelay(struct sf_sock *s);
int sf_sock_peername(struct sf_sock *s, struct sockaddr_storage *ss, socklen_t *len);
int sf_sock_release(struct sf_engine *e, struct sf_sock *s, uv_loop_t *loop, uv_stream_t **out,
                    uv_close_cb *close_cb);

static inline int sf_sock_pipe_get(struct sf_engine *e, struct sf_pipe *p) {
        (void)e;
        (void)p;
        return -ENOSYS;
}

static inline void sf_sock_pipe_put(struct sf_engine *e, struct sf_pipe *p, size_t bytes_left) {
        (void)e;
        (void)bytes_left;
        p->rd = p->wr = -1;
}

static inline ssize_t sf_sock_to_pipe(struct sf_sock *s, struct sf_pipe *p, size_t n) {
        (void)s;
        (void)p;
        (void)n;
        errno = EINVAL;
        return -1;
}

static inline ssize_t sf_sock_from_pipe(struct sf_pipe *p, struct sf_sock *s, size_t n) {
        (void)s;
        (void)p;
        (void)n;
        errno = EINVAL;
        return -1;
}
