#include "relay/listen/listener.h"

#include <windows.h>
#include <aclapi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/log.h"
#include "relay/engine/engine.h"
#include "relay/engine/uv_listener_win.h"
#include "relay/listen/policy.h"
#include "relay/sys/account_win.h"
#include "relay/sys/platform.h"

/* Listeners on Windows: TCP and named pipes, both libuv streams from the start. libuv's
 * connection callback takes each client in; a served listener (the control pipe) hands it on
 * at once, a watched one (a forward) counts it for the relay to accept (relay/engine/uv_win.c). */

#define LISTEN_BACKLOG 4096
/* Pipe instances waiting for a client: a burst of this many connects at once without one
 * seeing ERROR_PIPE_BUSY (libuv creates the next instance as each is accepted). */
#define PIPE_INSTANCES 16

static void on_srv_closed(uv_handle_t *h) {
        free(h);
}

static void srv_close(struct sf_listen_srv *srv) {
        uv_close(&srv->u.handle, on_srv_closed);
}

static void on_connection(uv_stream_t *server, int status) {
        struct sf_listen_srv *srv = (struct sf_listen_srv *)server;
        if (srv->serve_cb) {
                srv->serve_cb(server, status);
                return;
        }
        if (status < 0)
                srv->err = sf_errno_uv(status);
        else
                srv->pending++;
        struct sf_watch *w = srv->watch;
        if (w && w->armed)
                w->ev.cb(&w->ev, SF_EV_IN);
}

static const char *bind_hint(int e) {
        switch (e) {
        case EADDRINUSE: return " — another process uses this port (netstat -ano -p tcp shows which)";
        case EADDRNOTAVAIL: return " — that address is not on this machine";
        case EACCES: return " — Windows reserves this port (netsh int ipv4 show excludedportrange protocol=tcp)";
        default: return "";
        }
}

static int open_tcp(uv_loop_t *loop, const struct sf_forward *f, struct sf_listener *l) {
        struct addrinfo *res;
        int r = sf_listen_tcp_resolve(f, &res);
        if (r < 0)
                return r;
        int e = EADDRNOTAVAIL;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                struct sf_listen_srv *srv = calloc(1, sizeof *srv);
                if (!srv) {
                        e = ENOMEM;
                        break;
                }
                srv->is_tcp = true;
                uv_tcp_init(loop, &srv->u.tcp);
                /* libuv reports a bind's failure (a port in use) at uv_listen on Windows. */
                r = uv_tcp_bind(&srv->u.tcp, ai->ai_addr, 0);
                if (r == 0)
                        r = uv_listen(&srv->u.stream, LISTEN_BACKLOG, on_connection);
                if (r == 0) {
                        l->srv = srv;
                        l->family = ai->ai_family;
                        freeaddrinfo(res);
                        return 0;
                }
                e = sf_errno_uv(r);
                srv_close(srv);
        }
        freeaddrinfo(res);
        sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: %s%s", f->listen.text, strerror(e), bind_hint(e));
        return -e;
}

/* A protected DACL with full access for this process's user and SYSTEM: the default one of a
 * named pipe lets Everyone and Anonymous read, which would let any local account read what a
 * forward relays. 0 or -errno. */
static int pipe_restrict(HANDLE pipe) {
        union sf_win_user user;
        PSID me = sf_win_process_user(GetCurrentProcess(), &user);
        if (!me)
                return -EACCES;
        char system_sid[SECURITY_MAX_SID_SIZE];
        DWORD sid_len = sizeof system_sid;
        if (!CreateWellKnownSid(WinLocalSystemSid, NULL, system_sid, &sid_len))
                return -EACCES;
        EXPLICIT_ACCESS_W ea[2] = {
                { .grfAccessPermissions = GENERIC_ALL, .grfAccessMode = SET_ACCESS, .grfInheritance = NO_INHERITANCE,
                  .Trustee = { .TrusteeForm = TRUSTEE_IS_SID, .TrusteeType = TRUSTEE_IS_USER,
                               .ptstrName = (LPWSTR)me } },
                { .grfAccessPermissions = GENERIC_ALL, .grfAccessMode = SET_ACCESS, .grfInheritance = NO_INHERITANCE,
                  .Trustee = { .TrusteeForm = TRUSTEE_IS_SID, .TrusteeType = TRUSTEE_IS_WELL_KNOWN_GROUP,
                               .ptstrName = (LPWSTR)system_sid } },
        };
        PACL acl = NULL;
        if (SetEntriesInAclW(2, ea, NULL, &acl) != ERROR_SUCCESS)
                return -ENOMEM;
        DWORD r = SetSecurityInfo(pipe, SE_KERNEL_OBJECT, DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
                                  NULL, NULL, acl, NULL);
        LocalFree(acl);
        return r == ERROR_SUCCESS ? 0 : -EACCES;
}

static int open_pipe(uv_loop_t *loop, const struct sf_forward *f, struct sf_listener *l) {
        char path[9 + SF_NPIPE_NAME_MAX + 1];
        snprintf(path, sizeof path, "\\\\.\\pipe\\%s", f->listen.pipe);
        struct sf_listen_srv *srv = calloc(1, sizeof *srv);
        if (!srv)
                return -ENOMEM;
        uv_pipe_init(loop, &srv->u.pipe, 0);
        uv_pipe_pending_instances(&srv->u.pipe, PIPE_INSTANCES);
        /* libuv creates the first instance with FILE_FLAG_FIRST_PIPE_INSTANCE: a pipe of that
         * name that another process serves already is refused, not shared. */
        int r = uv_pipe_bind(&srv->u.pipe, path);
        if (r < 0) {
                int e = sf_errno_uv(r);
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: %s%s", f->listen.text, strerror(e),
                       e == EADDRINUSE || e == EACCES ? " — another process serves a pipe of that name" : "");
                srv_close(srv);
                return -e;
        }
        /* The first instance's handle carries the pipe's security descriptor, which the
         * instances libuv creates later share. */
        r = pipe_restrict(srv->u.pipe.pipe.serv.accept_reqs[0].pipeHandle);
        if (r < 0) {
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: cannot restrict the pipe to this account: %s",
                       f->listen.text, strerror(-r));
                srv_close(srv);
                return r;
        }
        r = uv_listen(&srv->u.stream, LISTEN_BACKLOG, on_connection);
        if (r < 0) {
                int e = sf_errno_uv(r);
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: %s", f->listen.text, strerror(e));
                srv_close(srv);
                return -e;
        }
        l->srv = srv;
        l->family = AF_UNIX;
        return 0;
}

int sf_listener_open(uv_loop_t *loop, const struct sf_forward *f, const struct sf_conf *c, struct sf_listener *l) {
        memset(l, 0, sizeof *l);
        l->fd = -1;
        switch (f->listen.kind) {
        case SF_EP_TCP:
                return open_tcp(loop, f, l);
        case SF_EP_NPIPE:
                return open_pipe(loop, f, l);
        default:
                /* Refused by the configuration here (conf/platform_win.c). */
                sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: not supported on Windows", f->listen.text);
                return -EAFNOSUPPORT;
        }
}

int sf_listener_serve(struct sf_listener *l, uv_loop_t *loop, int backlog, uv_connection_cb cb, void *data) {
        if (!l->srv)
                return -EBADF;
        l->srv->serve_cb = cb;
        l->srv->u.stream.data = data;
        return 0;
}

/* No unix listen paths here: nothing under /run/sockferry to move. */
int sf_listener_default_dir(struct sf_conf *c, bool create, bool test) {
        (void)c;
        (void)create;
        (void)test;
        return 0;
}

/* Pipes and ports have no directories to judge. */
int sf_listener_place_check(const struct sf_forward *f, const struct sf_conf *c) {
        return 0;
}

/* Socket activation is systemd's: the configuration refuses systemd: and fd: here
 * (conf/platform_win.c), as sf_listener_open would. */
int sf_listener_passed_test(const struct sf_forward *f) {
        sf_log(SF_LOG_ERROR, f->name, 0, "listen %s: not supported on Windows", f->listen.text);
        return -EAFNOSUPPORT;
}

void sf_listener_close(struct sf_listener *l) {
        if (l->srv) {
                srv_close(l->srv);
                l->srv = NULL;
        }
}
