#include "relay/conn/state.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/log.h"
#include "relay/engine/bufpool.h"

/* The connection's lifetime: created for an accepted socket, driven by its sockets' events
 * and its one timer, closed and freed in one place. Dialing (dial.c), the link handshake
 * (handshake.c) and the byte pump (pump.c) run on the state kept here. */

static void on_timer(uv_timer_t *t);

void sf_conn_close_all(struct sf_fwd *fwd, const char *reason) {
        while (fwd->conns.first) {
                struct sf_conn *c = sf_list_entry(fwd->conns.first, struct sf_conn, node);
                sf_conn_close(c, reason);
        }
}

static void on_timer_closed(uv_handle_t *h) {
        struct sf_conn *c = h->data;
        struct sf_fwd *fwd = c->fwd;
        free(c);
        sf_fwd_conn_gone(fwd);
}

void sf_conn_close(struct sf_conn *c, const char *reason) {
        if (!c || c->closing)
                return;
        c->closing = true;
        if (reason)
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "closed: %s", reason);

        struct sf_fwd *fwd = c->fwd;
        sf_list_remove(&fwd->conns, &c->node);
        fwd->stats.active--;
        fwd->stats.closed++;
        sf_conn_preauth_leave(c);

        /* The memory waits for the timer's close callback, after any event of the current
         * batch that still names it. */
        for (int i = 0; i < 2; i++) {
                sf_sock_close(fwd->eng, &c->sock[i]);
                sf_conn_release_buf(c, i);
        }
        sf_conn_dial_cancel(c);
        uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

void sf_conn_timer_arm(struct sf_conn *c, uint64_t ms) {
        uv_timer_start(&c->timer, on_timer, ms, 0);
}

void sf_conn_idle_arm(struct sf_conn *c) {
        uint64_t idle = c->fwd->conf->idle_timeout_ms;
        if (idle)
                uv_timer_start(&c->timer, on_timer, idle, 0);
        else
                uv_timer_stop(&c->timer);
}

/* Runs the connection's state as far as the readiness flags let it. */
void sf_conn_progress(struct sf_conn *c) {
        if (c->closing)
                return;
        switch (c->state) {
        case ST_DIALING:
                return; /* the upstream's events drive the dial */
        case ST_AWAIT_CLIENT_FRAME:
                if (c->rd[CLIENT])
                        sf_conn_on_client_frame(c);
                return;
        case ST_AWAIT_HELLO:
                if (c->rd[UPSTREAM])
                        sf_conn_on_hello(c);
                return;
        case ST_LINGER:
                if (c->rd[CLIENT])
                        sf_conn_linger_drain(c);
                return;
        case ST_RELAYING:
                sf_conn_relay_step(c);
                return;
        }
}

static void on_event(struct sf_conn *c, int side, uint32_t events) {
        if (c->closing)
                return;
        if (!events) {
                sf_conn_progress(c); /* a deferred call: a busy direction goes on */
                return;
        }
        c->last_activity = uv_now(c->fwd->loop);
        if (events & (SF_EV_IN | SF_EV_RDHUP | SF_EV_HUP | SF_EV_ERR))
                c->rd[side] = true;
        if (events & (SF_EV_RDHUP | SF_EV_HUP))
                c->rdhup[side] = true;
        if (events & (SF_EV_OUT | SF_EV_HUP | SF_EV_ERR))
                c->wr[side] = true;
        if (c->state == ST_DIALING && side == CLIENT && (events & SF_EV_HUP) && !sf_sock_unread(&c->sock[CLIENT])) {
                /* Gone with nothing left to deliver before its upstream answered: the dial
                 * and its descriptors go now, not at connect-timeout. A client that only
                 * half-closed (RDHUP) may still wait for the reply, and keeps its dial. */
                sf_conn_close(c, "the client hung up while its upstream was being dialed");
                return;
        }
        if (c->state == ST_DIALING && side == UPSTREAM) {
                /* The edge that says connected may say readable too: the flags keep it. */
                sf_conn_dial_ready(c, events);
                return;
        }
        if (events & SF_EV_ERR) {
                /* The socket's own error says what happened; reading it also clears it. */
                int err = sf_sock_error(&c->sock[side]);
                if (err) {
                        sf_conn_relay_error(c, err);
                        return;
                }
        }
        sf_conn_progress(c);
}

static void on_client_ev(struct sf_ev *ev, uint32_t events) {
        on_event((struct sf_conn *)((char *)ev - offsetof(struct sf_conn, sock[CLIENT].ev)), CLIENT, events);
}

static void on_upstream_ev(struct sf_ev *ev, uint32_t events) {
        on_event((struct sf_conn *)((char *)ev - offsetof(struct sf_conn, sock[UPSTREAM].ev)), UPSTREAM, events);
}

static void on_timer(uv_timer_t *t) {
        struct sf_conn *c = t->data;
        if (c->closing)
                return;
        switch (c->state) {
        case ST_DIALING:
                sf_conn_dial_timeout(c);
                return;
        case ST_AWAIT_CLIENT_FRAME:
        case ST_AWAIT_HELLO:
                sf_conn_link_timeout(c);
                return;
        case ST_LINGER:
                sf_conn_close(c, "linger over");
                return;
        case ST_RELAYING:
                if (c->hs_await_status) {
                        sf_conn_link_timeout(c);
                        return;
                }
                uint64_t idle = c->fwd->conf->idle_timeout_ms, now = uv_now(c->fwd->loop);
                if (now - c->last_activity >= idle) {
                        sf_log(SF_LOG_DEBUG, fname(c), c->id, "idle for %llums: closing",
                               (unsigned long long)idle);
                        sf_conn_close(c, "idle timeout");
                        return;
                }
                uv_timer_start(&c->timer, on_timer, idle - (now - c->last_activity), 0);
                return;
        }
}

int sf_conn_new(struct sf_fwd *fwd, struct sf_incoming *in) {
        struct sf_conn *c = calloc(1, sizeof *c);
        if (!c) {
                sf_incoming_close(fwd->eng, in);
                return -ENOMEM;
        }
        c->fwd = fwd;
        c->id = ++fwd->next_conn_id;
        sf_sock_init(&c->sock[CLIENT], on_client_ev);
        sf_sock_init(&c->sock[UPSTREAM], on_upstream_ev);
        for (int i = 0; i < 2; i++)
                c->dir[i].pipe.rd = c->dir[i].pipe.wr = -1;
        c->dir[CLIENT].copy_only = fwd->listener.family == AF_UNIX;
        c->cand = 0;
        uv_timer_init(fwd->loop, &c->timer);
        c->timer.data = c;
        c->last_activity = uv_now(fwd->loop);

        sf_list_push_back(&fwd->conns, &c->node);
        fwd->stats.active++;
        fwd->stats.total++;
        fwd->n_conns_allocated++;

        int r = sf_sock_adopt(fwd->eng, &c->sock[CLIENT], in, fwd->listener.family);
        if (r < 0) {
                sf_log(SF_LOG_ERROR, fname(c), c->id, "watching the accepted socket: %s", strerror(-r));
                sf_conn_close(c, "watching the accepted socket failed");
                return r;
        }
        /* A socket just accepted has an empty send buffer. */
        c->wr[CLIENT] = true;
        if (fwd->listener.family == AF_INET || fwd->listener.family == AF_INET6)
                sf_sock_nodelay(&c->sock[CLIENT]);
        if (fwd->has_key && is_net_family(fwd->listener.family)) {
                sf_conn_greet(c);
                return 0;
        }
        sf_conn_dial_start(c);
        return 0;
}
