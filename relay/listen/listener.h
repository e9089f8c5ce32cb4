#pragma once
/* Listening sockets: creation with exact mode/owner/group, stale-socket replacement, socket
 * activation. */
#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "conf/conf.h"

struct sf_watch;
struct sf_listen_srv;
struct sf_safedir_policy;

struct sf_listener {
        int fd;            /* -1 when closed, or when srv took it */
        int family;        /* AF_UNIX for a named pipe too (Windows) */
        /* Once it serves through libuv (sf_listener_serve; always on Windows, where libuv
         * listens on named pipes and TCP and the relay accepts from it): the stream. */
        struct sf_listen_srv *srv;
        bool owned;        /* a unix socket file we created: removed on close if still ours */
        int dirfd;         /* when owned: its directory, pinned and checked (relay/listen/safedir.h) */
        dev_t dev;
        ino_t ino;
        char path[SF_UNIX_PATH_MAX];
};

/* Binds and listens on f->listen; logs the forward, endpoint, cause and fix on failure. A unix
 * path must lie in directories that only root, the effective user and the socket's user can
 * change (sf_listener_policy); what is made in that user's directories is made as that user.
 * Returns 0 or -errno: -EPERM when a policy refuses the endpoint (a configuration error). */
int sf_listener_open(uv_loop_t *loop, const struct sf_forward *f, const struct sf_conf *c, struct sf_listener *l);
/* The directory policy of f's unix listen path and alias (relay/listen/safedir.h): trusted are
 * root, the effective uid and the user the socket is for, its `owner`, else c's `user`;
 * what is made as that user gets the forward's `group`, else the effective gid. */
void sf_listener_policy(const struct sf_forward *f, const struct sf_conf *c, struct sf_safedir_policy *p);
/* For a process that is not root: unix listen and control paths under /run/sockferry that it
 * cannot make move to a directory of its own (relay/listen/sockdir.h); create: make that
 * directory (relay, run), test: only say so (-t). 0 or -errno, logged; nothing on Windows. */
int sf_listener_default_dir(struct sf_conf *c, bool create, bool test);
/* Whether the directories on a unix listen path pass the relay's policy (relay/listen/safedir.h),
 * for a configuration test: missing ones are not checked (the relay creates them). 0, or
 * -EPERM when the policy refuses the place (logged). */
int sf_listener_place_check(const struct sf_forward *f, const struct sf_conf *c);
/* For a configuration test: a systemd: or fd: listener's passed socket, when this process has
 * it, checked as sf_listener_open would (a listening socket, its address under the policy);
 * when it has none, says so (info) and returns 0. 0, -EPERM when the policy refuses the
 * address, or another -errno when what was passed cannot be used (Windows: always, it has no
 * socket activation); logged. */
int sf_listener_passed_test(const struct sf_forward *f);
/* Hands the listener to libuv, which calls cb(stream, status) with data as the stream's data
 * for each client (uv_accept takes it): for a listener the relay does not accept from itself
 * (the control socket). 0 or -errno. */
int sf_listener_serve(struct sf_listener *l, uv_loop_t *loop, int backlog, uv_connection_cb cb, void *data);
/* Closes the socket (and its libuv stream) and removes our socket file if it is still the one
 * we created. Safe to call twice. */
void sf_listener_close(struct sf_listener *l);
