#include "relay/engine/evset.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "conf/log.h"

/* Events taken per wake-up; more stay ready in the set for the next one. */
#define BATCH 256

int sf_evset_init(struct sf_evset *s, uv_loop_t *loop) {
        memset(s, 0, sizeof *s);
        s->loop = loop;
        s->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (s->epfd < 0) {
                int e = errno;
                sf_log(SF_LOG_ERROR, NULL, 0, "epoll_create1: %s", strerror(e));
                return -e;
        }
        /* Level-triggered: libuv's descriptor stays readable until libuv has run. */
        struct epoll_event e = { .events = EPOLLIN, .data.ptr = NULL };
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, uv_backend_fd(loop), &e) < 0) {
                int err = errno;
                sf_log(SF_LOG_ERROR, NULL, 0, "adding libuv's epoll descriptor to ours: %s", strerror(err));
                sf_evset_close(s);
                return -err;
        }
        return 0;
}

int sf_evset_add(struct sf_evset *s, int fd, struct sf_ev *ev) {
        struct epoll_event e = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = ev };
        return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? -errno : 0;
}

int sf_evset_add_listener(struct sf_evset *s, int fd, struct sf_ev *ev) {
        struct epoll_event e = { .events = EPOLLIN, .data.ptr = ev };
        return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? -errno : 0;
}

int sf_evset_add_reader(struct sf_evset *s, int fd, struct sf_ev *ev) {
        struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = ev };
        return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? -errno : 0;
}

int sf_evset_del(struct sf_evset *s, int fd) {
        return epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL) < 0 ? -errno : 0;
}

void sf_evset_defer(struct sf_evset *s, struct sf_ev *ev) {
        sf_deferq_add(&s->q, ev);
}

void sf_evset_cancel(struct sf_evset *s, struct sf_ev *ev) {
        sf_deferq_cancel(&s->q, ev);
}

void sf_evset_run(struct sf_evset *s) {
        struct epoll_event evs[BATCH];
        uv_loop_t *loop = s->loop;

        while (s->epfd >= 0) {
                /* Without a libuv handle uv_backend_timeout says 0: the set alone waits then. */
                int timeout = sf_deferq_pending(&s->q) ? 0 : uv_loop_alive(loop) ? uv_backend_timeout(loop) : -1;
                uint64_t due = uv_now(loop) + (uint64_t)timeout;
                int n = epoll_wait(s->epfd, evs, BATCH, timeout);
                if (n < 0 && errno != EINTR) {
                        sf_log(SF_LOG_ERROR, NULL, 0, "epoll_wait: %s", strerror(errno));
                        break;
                }
                uv_update_time(loop);
                /* libuv runs when its descriptor is ready or its next timer is due. */
                bool run_uv = n <= 0 || (timeout >= 0 && uv_now(loop) >= due);
                /* A callback may close a connection that a later event of this batch names:
                 * its memory lives until libuv's close callbacks, which run after the batch. */
                for (int i = 0; i < n; i++) {
                        struct sf_ev *ev = evs[i].data.ptr;
                        if (ev)
                                ev->cb(ev, evs[i].events);
                        else
                                run_uv = true;
                }
                sf_deferq_run(&s->q);
                if (run_uv)
                        uv_run(loop, UV_RUN_NOWAIT);
        }
        uv_run(loop, UV_RUN_DEFAULT);
}

void sf_evset_close(struct sf_evset *s) {
        sf_deferq_clear(&s->q);
        if (s->epfd >= 0) {
                close(s->epfd);
                s->epfd = -1;
        }
}
