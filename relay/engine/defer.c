#include "relay/engine/defer.h"

void sf_deferq_add(struct sf_deferq *q, struct sf_ev *ev) {
        sf_list_push_back(&q->list, &ev->deferred);
}

void sf_deferq_cancel(struct sf_deferq *q, struct sf_ev *ev) {
        sf_list_remove(&q->list, &ev->deferred);
}

void sf_deferq_run(struct sf_deferq *q) {
        /* Only as many calls as are queued now, so that the loop polls in between. */
        for (size_t n = q->list.n; n > 0 && q->list.first; n--) {
                struct sf_ev *ev = sf_list_entry(q->list.first, struct sf_ev, deferred);
                sf_deferq_cancel(q, ev);
                ev->cb(ev, 0);
        }
}

void sf_deferq_clear(struct sf_deferq *q) {
        while (q->list.first)
                sf_list_remove(&q->list, q->list.first);
}

bool sf_deferq_pending(const struct sf_deferq *q) {
        return !sf_list_empty(&q->list);
}
