#pragma once
/* Calls put off until after the events pending now: a busy connection yields to the others
 * and goes on in a deferred call. Both engines keep their deferred calls in one of these. */
#include <stdbool.h>
#include <stdint.h>

#include "relay/list.h"

struct sf_ev;
/* events: SF_EV_* bits of the socket (relay/engine/engine.h), or 0 for a deferred call. */
typedef void (*sf_ev_cb)(struct sf_ev *ev, uint32_t events);

struct sf_ev {
        sf_ev_cb cb;
        struct sf_list_node deferred; /* linked while a deferred call is pending */
};

struct sf_deferq {
        struct sf_list list;
};

/* Queues ev->cb(ev, 0), once. */
void sf_deferq_add(struct sf_deferq *q, struct sf_ev *ev);
/* Drops a deferred call; safe when none is pending. */
void sf_deferq_cancel(struct sf_deferq *q, struct sf_ev *ev);
/* Runs the calls queued now; one that defers itself again waits for the next turn. */
void sf_deferq_run(struct sf_deferq *q);
/* Drops every pending call. */
void sf_deferq_clear(struct sf_deferq *q);
/* Whether a call is pending. */
bool sf_deferq_pending(const struct sf_deferq *q);
