#include "relay/conn/state.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "conf/log.h"

/* The connections' side of the pre-authentication budget (relay/conn/preauth_budget.h): a greeted
 * connection enters it, leaves it once its client frame verifies or it closes, and is closed
 * quietly when it is the oldest and room is needed. */

static void evict(struct sf_preauth_node *n) {
        struct sf_conn *c = (struct sf_conn *)((char *)n - offsetof(struct sf_conn, preauth));
        struct sf_fwd *fwd = c->fwd;
        uint64_t since;
        fwd->stats->err_preauth++;
        if (sf_preauth_note_eviction(&fwd->preauth, uv_now(fwd->loop), &since))
                sf_log(SF_LOG_WARN, fname(c), 0,
                       "%s: pre-auth budget full (%zu unauthenticated connections in all, %zu per source address) or "
                       "out of descriptors: closing the oldest unauthenticated ones to make room (%llu since the "
                       "last such line); "
                       "someone may be flooding the listener: doc/SECURITY.md, \"Pre-authentication budget\"",
                       fwd->conf->listen.text, fwd->preauth.max, fwd->preauth.per_source,
                       (unsigned long long)since);
        sf_conn_close(c, "pre-auth budget full: the oldest unauthenticated connection goes");
}

bool sf_conn_preauth_enter(struct sf_conn *c) {
        struct sf_preauth *pa = &c->fwd->preauth;
        if (!pa->tab) {
                const struct sf_forward *f = c->fwd->conf;
                size_t max = f->preauth_max;
                /* Unauthenticated peers get a quarter of the descriptors at most: the rest stay
                 * for the connections that authenticate and for their upstream sockets. */
                struct rlimit rl;
                if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && max > rl.rlim_cur / 4)
                        max = rl.rlim_cur / 4 < 4 ? 4 : rl.rlim_cur / 4;
                int r = sf_preauth_init(pa, max, max / 4, evict);
                if (r < 0) {
                        sf_log(SF_LOG_ERROR, fname(c), c->id, "pre-auth budget for %s: %s", c->fwd->conf->listen.text,
                               strerror(-r));
                        sf_conn_close(c, "no pre-auth budget");
                        return false;
                }
        }
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (sf_side_peername(c, CLIENT, &ss, &len) < 0)
                len = 0;
        sf_preauth_node_source(&c->preauth, (struct sockaddr *)&ss, len);
        sf_preauth_add(pa, &c->preauth);
        return true;
}

void sf_conn_preauth_leave(struct sf_conn *c) {
        sf_preauth_remove(&c->fwd->preauth, &c->preauth);
}
