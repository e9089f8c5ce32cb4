#include "shim/capture.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>

#include "relay/sys/platform.h"

struct capture {
        char *out;
        size_t len, cap;
        int64_t status;
        int term_signal;
        uv_process_t proc;
        uv_timer_t timer;
        bool exited;
};

static void cap_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
        (void)suggested;
        static char skip[256];
        struct capture *c = h->data;
        if (c->len + 1 < c->cap)
                *buf = uv_buf_init(c->out + c->len, (unsigned)(c->cap - 1 - c->len));
        else
                *buf = uv_buf_init(skip, sizeof skip);
}

static void cap_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
        struct capture *c = s->data;
        if (n < 0) {
                uv_close((uv_handle_t *)s, NULL);
                return;
        }
        if (buf->base == c->out + c->len)
                c->len += (size_t)n;
}

static void cap_exit(uv_process_t *p, int64_t status, int term_signal) {
        struct capture *c = p->data;
        c->status = status;
        c->term_signal = term_signal;
        c->exited = true;
        uv_close((uv_handle_t *)p, NULL);
        uv_close((uv_handle_t *)&c->timer, NULL);
}

static void cap_timeout(uv_timer_t *t) {
        struct capture *c = t->data;
        if (!c->exited)
                uv_process_kill(&c->proc, SIGKILL);
}

int sf_capture_run(char *argv[], uv_file in_fd, char *out, size_t cap, uint64_t timeout_ms) {
        struct capture c = { .out = out, .cap = cap };
        uv_loop_t loop;
        uv_pipe_t pipes[2];
        out[0] = '\0';
        if (uv_loop_init(&loop) < 0)
                return -ENOMEM;
        for (int i = 0; i < 2; i++) {
                uv_pipe_init(&loop, &pipes[i], 0);
                pipes[i].data = &c;
        }
        c.proc.data = &c;
        uv_timer_init(&loop, &c.timer);
        c.timer.data = &c;
        uv_stdio_container_t stdio[3] = {
                { .flags = in_fd >= 0 ? UV_INHERIT_FD : UV_IGNORE, .data.fd = in_fd },
                { .flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&pipes[0] },
                { .flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&pipes[1] },
        };
        uv_process_options_t opts = { .exit_cb = cap_exit, .file = argv[0], .args = argv, .stdio_count = 3,
                                      .stdio = stdio, .flags = UV_PROCESS_WINDOWS_HIDE };
        int r = uv_spawn(&loop, &c.proc, &opts);
        for (int i = 0; i < 2; i++)
                if (r < 0)
                        uv_close((uv_handle_t *)&pipes[i], NULL);
                else
                        uv_read_start((uv_stream_t *)&pipes[i], cap_alloc, cap_read);
        if (r < 0) {
                uv_close((uv_handle_t *)&c.proc, NULL);
                uv_close((uv_handle_t *)&c.timer, NULL);
        } else {
                uv_timer_start(&c.timer, cap_timeout, timeout_ms, 0);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        out[c.len] = '\0';
        if (r < 0)
                return -sf_errno_uv(r);
        return c.term_signal ? 128 + c.term_signal : (int)c.status;
}
