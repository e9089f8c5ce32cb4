#include "relay/engine/engine.h"

#include <windows.h>

#include <errno.h>
#include <io.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "relay/engine/uv_int.h"
#include "relay/engine/uv_listener_win.h"
#include "relay/sys/platform.h"

/* How long a byte-mode pipe may stay silent after the end of the request before the relay
 * takes it for the end of the answer (sf_sock_shutdown_local): a local service's answer to a
 * complete request starts well within it. */
#define PIPE_QUIET_MS 2000

/* The portable engine on Windows: listeners are libuv streams (relay/listen/listener_win.c) whose
 * connection callbacks this side counts and the relay accepts from; a named pipe is opened
 * here and handed to libuv, so that a busy pipe is retried by the dialer within
 * connect-timeout (libuv's own uv_pipe_connect waits up to 30 s in a thread, whatever the
 * timeout) and the pipe's server cannot impersonate the relay. */

int sf_watch_start(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l, sf_ev_cb cb) {
        if (!l->srv)
                return -EBADF;
        w->ev.cb = cb;
        w->l = l;
        w->init = true;
        w->armed = true;
        l->srv->watch = w;
        /* Clients that came while paused: accepted in the next turn, not from inside the
         * caller (a connection being freed). */
        if (l->srv->pending || l->srv->err)
                sf_engine_defer(e, &w->ev);
        return 0;
}

void sf_watch_stop(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l) {
        w->armed = false;
        sf_engine_cancel(e, &w->ev);
}

/* No handle of its own: the listener's stream goes with sf_listener_close. */
uv_handle_t *sf_watch_handle(struct sf_watch *w) {
        if (w->init && w->l->srv)
                w->l->srv->watch = NULL;
        w->init = false;
        return NULL;
}

int sf_watch_accept(struct sf_engine *e, struct sf_watch *w, struct sf_listener *l, struct sf_incoming *in) {
        struct sf_listen_srv *srv = l->srv;
        in->h = NULL;
        if (srv->err) {
                int err = srv->err;
                srv->err = 0;
                return -err;
        }
        if (!srv->pending)
                return -EAGAIN;
        struct sf_uvsock *h = sf_uvsock_new(e, NULL);
        if (!h)
                return -ENOMEM;
        h->is_tcp = srv->is_tcp;
        if (h->is_tcp)
                uv_tcp_init(e->loop, &h->u.tcp);
        else
                uv_pipe_init(e->loop, &h->u.pipe, 0);
        h->opened = true;
        int r = uv_accept(&srv->u.stream, &h->u.stream);
        srv->pending--;
        if (r < 0) {
                uv_close(&h->u.handle, sf_uvsock_closed);
                return -sf_errno_uv(r);
        }
        h->accepted = true;
        in->h = h;
        return 0;
}

void sf_incoming_close(struct sf_engine *e, struct sf_incoming *in) {
        if (in->h)
                uv_close(&in->h->u.handle, sf_uvsock_closed);
        in->h = NULL;
}

int sf_incoming_cred(const struct sf_incoming *in, uid_t *uid, gid_t *gid, pid_t *pid) {
        return -ENOTSUP;
}

bool sf_incoming_trusted(const struct sf_incoming *in, char *who, size_t who_cap, char *allowed, size_t allowed_cap) {
        return sf_peer_trusted(&in->h->u.stream, who, who_cap, allowed, allowed_cap);
}

int sf_sock_adopt(struct sf_engine *e, struct sf_sock *s, struct sf_incoming *in, int family) {
        struct sf_uvsock *h = in->h;
        in->h = NULL;
        h->sock = s;
        s->h = h;
        int r = sf_uvsock_read_start(h);
        return r < 0 ? -sf_errno_uv(r) : 0;
}

static void on_input_ended(struct sf_ev *ev, uint32_t events) {
        struct sf_uvsock *h = (struct sf_uvsock *)((char *)ev - offsetof(struct sf_uvsock, endev));
        sf_uvsock_report(h, SF_EV_IN | SF_EV_RDHUP);
}

/* Ends the side's input now and says so in the next turn, not from inside the caller (the
 * connection's own pump). */
static void end_input_next_turn(struct sf_uvsock *h) {
        sf_uvsock_end_input(h);
        h->endev.cb = on_input_ended;
        sf_engine_defer(h->e, &h->endev);
}

static void on_eof_message(uv_write_t *req, int status) {
        (void)req;
        (void)status;
}

static void on_quiet(uv_timer_t *t) {
        struct sf_uvsock *h = t->data;
        /* Still delivering (the inbox not emptied, reading paused for backpressure): the
         * service's silence is not what keeps it quiet. */
        if (h->eof || !h->sock || h->in_len > h->in_off || !h->reading)
                return;
        uv_timer_stop(t);
        sf_uvsock_end_input(h);
        sf_uvsock_report(h, SF_EV_IN | SF_EV_RDHUP);
}

static bool message_mode(struct sf_uvsock *h) {
        uv_os_fd_t ph;
        DWORD flags = 0;
        return uv_fileno(&h->u.handle, &ph) == 0 && GetNamedPipeInfo(ph, &flags, NULL, NULL, NULL) &&
               (flags & PIPE_TYPE_MESSAGE);
}

/* A named pipe has no half-close; libuv's uv_shutdown on one flushes it and then closes it
 * once 50 ms pass without data, which drops a slower answer.
 * - Toward a message-mode pipe the relay dialled (Docker's engine pipe), the end of the
 *   request is a zero-length message, the end of input as go-winio's CloseWrite writes it;
 *   the pipe stays open until the service closes it.
 * - A byte-mode pipe (the OpenSSH agent's) cannot be told: the only end it knows is the close.
 *   The pipe stays open for the answer while the service keeps sending, and is closed after
 *   PIPE_QUIET_MS without data, so that a client that simply closed (which reads the same as
 *   a half-close) does not leave the service's pipe open forever.
 * - Toward a client of the relay's own pipe listener, which could not be told either, the
 *   connection ends once what is queued for it is written: the client sees the pipe's end. */
bool sf_sock_shutdown_local(struct sf_uvsock *h) {
        if (h->is_tcp)
                return false;
        if (h->accepted) {
                h->end_after_write = true;
                if (!h->out)
                        end_input_next_turn(h);
                return true;
        }
        if (message_mode(h)) {
                static char none[1];
                uv_buf_t b = uv_buf_init(none, 0);
                uv_write(&h->eofreq, &h->u.stream, &b, 1, on_eof_message);
                return true;
        }
        h->quiet = malloc(sizeof *h->quiet);
        if (!h->quiet) {
                end_input_next_turn(h);
                return true;
        }
        uv_timer_init(h->e->loop, h->quiet);
        h->quiet->data = h;
        uv_timer_start(h->quiet, on_quiet, PIPE_QUIET_MS, PIPE_QUIET_MS);
        return true;
}

int sf_sock_connect_local(struct sf_engine *e, struct sf_sock *s, const struct sockaddr *addr, socklen_t len,
                          bool *in_progress) {
        return -EAFNOSUPPORT;
}

/* Opening a pipe never blocks: all instances busy is ERROR_PIPE_BUSY at once, -EAGAIN here,
 * which the dialer retries until connect-timeout. */
int sf_sock_connect_pipe(struct sf_engine *e, struct sf_sock *s, const char *name, bool *in_progress) {
        wchar_t path[9 + SF_NPIPE_NAME_MAX + 1] = L"\\\\.\\pipe\\";
        *in_progress = false;
        if (!MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, name, -1, path + 9, SF_NPIPE_NAME_MAX + 1))
                return -ENOENT;
        /* SECURITY_IDENTIFICATION: the server may learn who connects, not act as the relay. */
        HANDLE ph = CreateFileW(path, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING,
                                FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION, NULL);
        if (ph == INVALID_HANDLE_VALUE)
                return -sf_win_errno(GetLastError());
        int fd = _open_osfhandle((intptr_t)ph, 0);
        if (fd < 0) {
                CloseHandle(ph);
                return -EMFILE;
        }
        struct sf_uvsock *h = sf_uvsock_new(e, s);
        if (!h) {
                _close(fd);
                return -ENOMEM;
        }
        uv_pipe_init(e->loop, &h->u.pipe, 0);
        h->opened = true;
        int r = uv_pipe_open(&h->u.pipe, fd);
        if (r < 0) {
                _close(fd);
        } else {
                r = sf_uvsock_read_start(h);
        }
        if (r < 0) {
                sf_sock_close(e, s);
                return -sf_errno_uv(r);
        }
        return 0;
}

/* A named pipe has no peer address. */
int sf_sock_peername_local(struct sf_uvsock *h, struct sockaddr_storage *ss, socklen_t *len) {
        return -ENOTSUP;
}
