#pragma once
/* An edge-triggered epoll set of our own that drives the libuv loop. Connections register each
 * socket once, for reading and writing, and keep readiness flags themselves: uv_poll would
 * probe every new descriptor with ADD+DEL+ioctl and turn every change of interest into a DEL
 * and an ADD (14 epoll_ctl per relayed connection, measured in bench/RESULTS.md), where this
 * needs one ADD per socket. libuv's own epoll descriptor sits in the set, so one epoll_wait
 * per wake-up serves both, and libuv runs only when it has something to do. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "relay/engine/defer.h"

/* The Linux engine (relay/engine/linux.h): an sf_ev's callback gets the epoll events of its
 * descriptor, whose bits the SF_EV_* ones equal. */
struct sf_evset {
        int epfd; /* -1 when closed */
        uv_loop_t *loop;
        struct sf_deferq q;
};

/* Creates the epoll set with libuv's descriptor in it. 0 or -errno (logged). */
int sf_evset_init(struct sf_evset *s, uv_loop_t *loop);
/* Watches fd for input, output and hang-up, edge-triggered, until it is closed. The owner of
 * ev keeps it in memory until a libuv close callback has run after the close: events
 * collected in one pass may still name it. 0 or -errno. */
int sf_evset_add(struct sf_evset *s, int fd, struct sf_ev *ev);
/* Watches a listening socket for input, level-triggered: a burst left in the backlog after one
 * batch of accepts is reported again. 0 or -errno. */
int sf_evset_add_listener(struct sf_evset *s, int fd, struct sf_ev *ev);
/* Edge-triggered readability alone (a libuv stream whose reads the relay does itself). */
int sf_evset_add_reader(struct sf_evset *s, int fd, struct sf_ev *ev);
/* Stops watching fd (which stays open). 0 or -errno. */
int sf_evset_del(struct sf_evset *s, int fd);
/* Calls ev->cb(ev, 0) from the loop soon, once, after what is pending now: for work left
 * undone on purpose (a busy connection yields to the others). */
void sf_evset_defer(struct sf_evset *s, struct sf_ev *ev);
/* Drops a deferred call; safe when none is pending. */
void sf_evset_cancel(struct sf_evset *s, struct sf_ev *ev);
/* Runs the loop, dispatching the set's events and libuv's, until the set is closed; then
 * uv_run(UV_RUN_DEFAULT) finishes what libuv still has. */
void sf_evset_run(struct sf_evset *s);
/* Closes the set. Safe to call twice, and on a set whose init failed or never ran (epfd -1). */
void sf_evset_close(struct sf_evset *s);
