#include "relay/defer.h"

void sf_deferq_add(struct sf_deferq *q, struct sf_ev *ev) {
        if (ev->deferred)
                return;
        ev->deferred = true;
        ev->next = NULL;
        ev->prev = q->tail;
        if (q->tail)
                q->tail->next = ev;
        else
                q->head = ev;
        q->tail = ev;
        q->n++;
}

void sf_deferq_cancel(struct sf_deferq *q, struct sf_ev *ev) {
        if (!ev->deferred)
                return;
        ev->deferred = false;
        q->n--;
        if (ev->prev)
                ev->prev->next = ev->next;
        else
                q->head = ev->next;
        if (ev->next)
                ev->next->prev = ev->prev;
        else
                q->tail = ev->prev;
        ev->prev = ev->next = NULL;
}

void sf_deferq_run(struct sf_deferq *q) {
        /* Only as many calls as are queued now, so that the loop polls in between. */
        for (size_t n = q->n; n > 0 && q->head; n--) {
                struct sf_ev *ev = q->head;
                sf_deferq_cancel(q, ev);
                ev->cb(ev, 0);
        }
}

void sf_deferq_clear(struct sf_deferq *q) {
        while (q->head)
                sf_deferq_cancel(q, q->head);
}
