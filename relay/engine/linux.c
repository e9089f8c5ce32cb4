#include "relay/engine/engine.h"

#include <errno.h>
#include <stdlib.h>

/* What the Linux engine does out of line: rare calls, kept from the inline data path. */

static void handle_freed(uv_handle_t *h) {
        free(h);
}

int sf_sock_release(struct sf_engine *e, struct sf_sock *s, uv_loop_t *loop, uv_stream_t **out,
                    uv_close_cb *close_cb) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (s->fd < 0 || getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0)
                return -EBADF;
        /* TCP gets libuv's TCP handle (nodelay, keepalive); anything else (vsock, unix) is a
         * stream to libuv as a pipe handle is. */
        bool tcp = ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
        uv_stream_t *h = malloc(tcp ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t));
        if (!h)
                return -ENOMEM;
        int r = tcp ? uv_tcp_init(loop, (uv_tcp_t *)h) : uv_pipe_init(loop, (uv_pipe_t *)h, 0);
        if (r == 0) {
                sf_evset_cancel(&e->ev, &s->ev);
                sf_evset_del(&e->ev, s->fd);
                r = tcp ? uv_tcp_open((uv_tcp_t *)h, s->fd) : uv_pipe_open((uv_pipe_t *)h, s->fd);
                if (r < 0) {
                        /* The descriptor stays s's: back in the set, closed with s. */
                        sf_evset_add(&e->ev, s->fd, &s->ev);
                        uv_close((uv_handle_t *)h, handle_freed);
                        return r == UV_ENOMEM ? -ENOMEM : -EINVAL;
                }
        } else {
                free(h);
                return -ENOMEM;
        }
        s->fd = -1;
        *out = h;
        *close_cb = handle_freed;
        return 0;
}
