#include "relay/conn/state.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/log.h"

/* The connection's hub: created for an accepted socket, driven by its sides' readiness
 * (direction.c) and its one timer, every state change taken here from the transition table of
 * relay/conn/state.h, closed and freed in one place. The phases (dial.c, handshake.c, pump.c)
 * report what happened with sf_conn_event and the calls next to it. */

static void on_timer(uv_timer_t *t);

#define TRANSITION(from, ev, to) [from][ev] = (to) + 1,
/* next state + 1; 0 where the table has no row */
static const uint8_t transitions[ST_COUNT][EV_COUNT] = { SF_CONN_TRANSITIONS(TRANSITION) };
#undef TRANSITION

enum conn_state sf_conn_next_state(enum conn_state st, enum conn_event ev) {
        if ((unsigned)st >= ST_COUNT || (unsigned)ev >= EV_COUNT || !transitions[st][ev])
                return ST_COUNT;
        return (enum conn_state)(transitions[st][ev] - 1);
}

const char *sf_conn_state_name(enum conn_state st) {
        static const char *const names[ST_COUNT] = {
                [ST_NEW] = "new", [ST_GREETED] = "greeted", [ST_DIALING] = "dialing",
                [ST_AWAIT_HELLO] = "await-hello", [ST_AWAIT_STATUS] = "await-status",
                [ST_RELAYING] = "relaying", [ST_LINGER] = "linger", [ST_CLOSED] = "closed",
        };
        return (unsigned)st < ST_COUNT ? names[st] : "?";
}

const char *sf_conn_event_name(enum conn_event ev) {
        static const char *const names[EV_COUNT] = {
                [EV_GREET] = "greet", [EV_DIAL] = "dial", [EV_DIAL_WAIT] = "dial-wait",
                [EV_CONNECTED] = "connected", [EV_STREAM_OPEN] = "stream-open", [EV_CONNECTED_LINK] = "connected-link", [EV_HELLO] = "hello",
                [EV_STATUS_OK] = "status-ok", [EV_CAND_FAILED] = "candidate-failed", [EV_REFUSED] = "refused",
                [EV_CLOSE] = "close",
        };
        return (unsigned)ev < EV_COUNT ? names[ev] : "?";
}

/* Deadlines are sums of configured durations: saturate, never wrap (a wrapped sum would
 * expire at once). */
static uint64_t sat_add(uint64_t a, uint64_t b) {
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The timeout of the state just entered (relay/conn/state.h, the table's last column). */
static void timer_arm(struct sf_conn *c) {
        const struct sf_forward *f = c->fwd->conf;
        uint64_t ms = 0, now = uv_now(c->fwd->loop);
        switch (c->state) {
        case ST_GREETED:
        case ST_AWAIT_HELLO:
                ms = f->handshake_timeout_ms;
                break;
        case ST_AWAIT_STATUS:
                /* The host relay dials its upstream before it answers. */
                ms = sat_add(f->handshake_timeout_ms, f->connect_timeout_ms);
                break;
        case ST_DIALING:
                ms = c->dial_deadline > now ? c->dial_deadline - now : 1;
                if (c->dial_retry && ms > DIAL_RETRY_MS)
                        ms = DIAL_RETRY_MS;
                break;
        case ST_RELAYING:
                ms = f->idle_timeout_ms;
                /* A stream still waiting for a place under the host's stream limit waits no
                 * longer than its dial may take. */
                if (c->up_unanswered && c->stream[UPSTREAM] && !sf_mux_stream_sent(c->stream[UPSTREAM]) &&
                    (!ms || c->dial_deadline - now < ms))
                        ms = c->dial_deadline > now ? c->dial_deadline - now : 1;
                break;
        case ST_LINGER:
                ms = LINGER_MS;
                break;
        case ST_NEW:
        case ST_CLOSED:
        case ST_COUNT:
                break;
        }
        if (ms)
                uv_timer_start(&c->timer, on_timer, ms, 0);
        else
                uv_timer_stop(&c->timer);
}

/* Runs the state as far as the readiness flags let it. */
static void progress(struct sf_conn *c) {
        switch (c->state) {
        case ST_GREETED:
                if (c->rd[CLIENT])
                        sf_conn_on_client_frame(c);
                return;
        case ST_AWAIT_HELLO:
                if (c->rd[UPSTREAM])
                        sf_conn_on_hello(c);
                return;
        case ST_AWAIT_STATUS:
                sf_conn_on_await_status(c);
                return;
        case ST_RELAYING:
                if (c->up_unanswered && !sf_conn_stream_answer(c))
                        return;
                if (c->greeting_check && c->rd[UPSTREAM]) {
                        /* The upstream's first bytes are looked at before the client gets them. */
                        int r = sf_dir_read(c, UPSTREAM);
                        if (r < 0) {
                                sf_conn_io_error(c, -r);
                                return;
                        }
                        char msg[600];
                        if (r > 0) {
                                c->greeting_check = false;
                                if (sf_conn_greeting_unexpected(c, msg, sizeof msg)) {
                                        note_error(c, &c->fwd->stats->err_wrong_peer, msg);
                                        if (sf_fwd_ratelimit(c->fwd))
                                                sf_log(SF_LOG_ERROR, fname(c), c->id, "%s", msg);
                                        sf_conn_close(c, msg);
                                        return;
                                }
                        }
                }
                sf_conn_relay_step(c);
                return;
        case ST_LINGER:
                if (c->rd[CLIENT] && sf_dir_discard(c, CLIENT))
                        sf_conn_close(c, "failure status delivered");
                return;
        case ST_NEW:
        case ST_DIALING: /* the upstream's events drive the dial */
        case ST_CLOSED:
        case ST_COUNT:
                return;
        }
}

/* Entering DIALING for a candidate: connect-timeout from now. */
static void dial_candidate(struct sf_conn *c) {
        c->dial_deadline = sat_add(uv_now(c->fwd->loop), c->fwd->conf->connect_timeout_ms);
        c->dial_retry = false;
        timer_arm(c);
        sf_conn_dial(c);
}

/* A host relay's connection for a stream: the upstream answered; the stream is told, and a
 * probe (sockferry check) ends here. false when the connection is gone. */
static bool stream_answer(struct sf_conn *c) {
        if (c->stream_answered)
                return true;
        c->stream_answered = true;
        if (sf_mux_stream_accept(c->stream[CLIENT]) < 0) {
                sf_conn_close(c, "the stream ended before the upstream answered");
                return false;
        }
        if (c->stream_probe) {
                sf_mux_stream_shutdown(c->stream[CLIENT]);
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "probe: upstream %s answers", cand_ep(c)->text);
                sf_conn_close(c, "probe answered");
                return false;
        }
        return true;
}

void sf_conn_event(struct sf_conn *c, enum conn_event ev) {
        enum conn_state from = c->state, to = sf_conn_next_state(from, ev);
        if (from == ST_CLOSED)
                return;
        if (ev == EV_CLOSE) {
                sf_conn_close(c, NULL);
                return;
        }
        if (to == ST_COUNT) {
                sf_log(SF_LOG_ERROR, fname(c), c->id, "internal error: event %s in state %s: closing",
                       sf_conn_event_name(ev), sf_conn_state_name(from));
                sf_conn_close(c, "internal error");
                return;
        }
        c->state = to;
        switch (ev) {
        case EV_DIAL:
                if (from == ST_GREETED)
                        sf_conn_preauth_leave(c);
                sf_conn_dial_first(c);
                dial_candidate(c);
                return;
        case EV_CAND_FAILED:
                dial_candidate(c);
                return;
        case EV_CONNECTED:
        case EV_STATUS_OK:
                free(c->up);
                c->up = NULL;
                timer_arm(c);
                sf_conn_cand_good(c);
                /* Toward a candidate without a handshake, the early bytes held for one with a
                 * handshake go without its frame. */
                sf_dir_hold_end(c, ev == EV_STATUS_OK);
                /* A relay chained behind another confirms to its client only now. */
                if (c->hs_server && !sf_conn_server_confirm(c))
                        return;
                if (c->stream[CLIENT] && !stream_answer(c))
                        return;
                progress(c);
                return;
        case EV_STREAM_OPEN:
                /* Good once it answers (sf_conn_stream_answer): the client's bytes go at once
                 * and are kept meanwhile, for the next candidate should it be refused. */
                c->up_unanswered = true;
                timer_arm(c);
                if (sf_dir_hold_frame(c, NULL, 0) < 0) {
                        sf_conn_close(c, "out of memory");
                        return;
                }
                if (c->hs_server && !sf_conn_server_confirm(c))
                        return;
                if (c->stream[CLIENT] && !stream_answer(c))
                        return;
                progress(c);
                return;
        case EV_CONNECTED_LINK: {
                const struct sf_forward *f = c->fwd->conf;
                if (!c->up && !(c->up = malloc(sizeof *c->up))) {
                        sf_conn_close(c, "out of memory");
                        return;
                }
                /* The service goes with the frame, under the MAC, unless the candidate is a
                 * relay from before services. */
                *c->up = (struct sf_hs_client){
                        .key = &c->fwd->key,
                        .ep = cand_ep(c)->text,
                        .token_file = c->fwd->token_file,
                        .forward = f->name,
                        .service = c->fwd->cand_plain[c->cand] ? NULL : f->service,
                        .service_set = f->service_set,
                };
                timer_arm(c);
                progress(c);
                return;
        }
        case EV_REFUSED:
                sf_conn_dial_cancel(c);
                timer_arm(c);
                progress(c);
                return;
        case EV_GREET:
        case EV_DIAL_WAIT:
        case EV_HELLO:
                timer_arm(c);
                progress(c);
                return;
        case EV_CLOSE:
        case EV_COUNT:
                return;
        }
}

void sf_conn_cand_failed(struct sf_conn *c, uint64_t *counter, bool dial, const char *msg) {
        if (c->state == ST_CLOSED)
                return;
        sf_conn_cand_note(c, counter, dial, msg);
        sf_conn_dial_cancel(c);
        sf_dir_upstream_reset(c);
        if (sf_conn_cand_advance(c)) {
                sf_conn_event(c, EV_CAND_FAILED);
                return;
        }
        char line[SF_FAILS_MAX + 64];
        const char *reason = sf_conn_cand_summary(c, msg, line, sizeof line);
        note_error(c, c->fail_counter, line);
        if (sf_fwd_ratelimit(c->fwd))
                sf_log(SF_LOG_ERROR, fname(c), c->id, "%s; closing the client connection", line);
        /* Chained between two links: our client is a relay waiting for our status. */
        if (c->hs_server) {
                sf_conn_refuse(c, SF_HS_UPSTREAM_UNAVAILABLE, reason);
                return;
        }
        /* A stream of a shared link: its refusal carries the reason to the container. */
        if (c->stream[CLIENT]) {
                c->stream_answered = true;
                sf_mux_stream_refuse(c->stream[CLIENT], SF_MUX_UPSTREAM_UNAVAILABLE, reason);
        }
        sf_conn_close(c, line);
}

void sf_conn_cand_retry(struct sf_conn *c) {
        sf_conn_dial_cancel(c);
        sf_dir_upstream_reset(c);
        sf_conn_event(c, EV_CAND_FAILED);
}

void sf_conn_refuse(struct sf_conn *c, enum sf_hs_status st, const char *reason) {
        if (!sf_conn_status_send(c, st, reason)) {
                sf_conn_close(c, "status frame not sent");
                return;
        }
        sf_conn_event(c, EV_REFUSED);
}

void sf_conn_io_error(struct sf_conn *c, int e) {
        char msg[600];
        /* A stream of a shared link says why in the host relay's words. */
        if (c->stream[UPSTREAM] && sf_mux_stream_error(c->stream[UPSTREAM])) {
                const char *why = sf_side_reason(c, UPSTREAM);
                int st = sf_mux_stream_status(c->stream[UPSTREAM]);
                if (st > 0 && st != SF_MUX_UPSTREAM_UNAVAILABLE)
                        snprintf(msg, sizeof msg, "upstream unavailable: the host relay at %s refused the stream: %s",
                                 cand_ep(c)->text, why);
                else if (st > 0)
                        snprintf(msg, sizeof msg, "upstream unavailable: the host relay at %s could not reach its upstream: %s",
                                 cand_ep(c)->text, why);
                else
                        snprintf(msg, sizeof msg, "upstream unavailable: %s", why);
                note_error(c, &c->fwd->stats->err_upstream, msg);
                if (sf_fwd_ratelimit(c->fwd))
                        sf_log(SF_LOG_ERROR, fname(c), c->id, "%s; closing the client connection", msg);
                sf_conn_close(c, msg);
                return;
        }
        if (c->stream[CLIENT] && sf_mux_stream_error(c->stream[CLIENT])) {
                snprintf(msg, sizeof msg, "the client's stream ended: %s", sf_side_reason(c, CLIENT));
                sf_conn_close(c, msg);
                return;
        }
        snprintf(msg, sizeof msg, "connection error: %s", strerror(e));
        if (e != ECONNRESET && e != EPIPE)
                sf_log(SF_LOG_WARN, fname(c), c->id, "%s", msg);
        sf_conn_close(c, msg);
}

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
        if (!c || c->state == ST_CLOSED)
                return;
        /* A client that never got an answer gets an end, not a reset: what it sent is read
         * (a little of it: a flood is reset all the same) so that the close is a FIN. */
        if (c->state != ST_RELAYING && c->state != ST_LINGER && !c->stream[CLIENT]) {
                char sink[16384];
                for (int i = 0; i < 4 && sf_side_recv(c, CLIENT, sink, sizeof sink) > 0; i++)
                        ;
        }
        c->state = sf_conn_next_state(c->state, EV_CLOSE);
        if (reason)
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "closed: %s", reason);

        struct sf_fwd *fwd = c->fwd;
        sf_list_remove(&fwd->conns, &c->node);
        fwd->stats->active--;
        fwd->stats->closed++;
        sf_conn_preauth_leave(c);

        /* The memory waits for the timer's close callback, after any event of the current
         * batch that still names it. */
        for (int i = 0; i < 2; i++) {
                sf_side_close(c, i);
                sf_dir_release(c, i);
        }
        sf_conn_dial_cancel(c);
        free(c->fails);
        c->fails = NULL;
        free(c->up);
        c->up = NULL;
        uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

void sf_conn_on_ready(struct sf_conn *c, int side, uint32_t events) {
        if (c->state == ST_CLOSED)
                return;
        if (!events) {
                progress(c); /* a deferred call: a busy direction goes on */
                return;
        }
        c->last_activity = uv_now(c->fwd->loop);
        if (events & (SF_EV_IN | SF_EV_RDHUP | SF_EV_HUP | SF_EV_ERR))
                c->rd[side] = true;
        if (events & (SF_EV_RDHUP | SF_EV_HUP))
                c->rdhup[side] = true;
        if (events & (SF_EV_OUT | SF_EV_HUP | SF_EV_ERR))
                c->wr[side] = true;
        bool dialing = c->state == ST_DIALING || c->state == ST_AWAIT_HELLO || c->state == ST_AWAIT_STATUS;
        if (dialing && side == CLIENT && (events & SF_EV_HUP)) {
                /* Gone before its upstream answered, whatever it sent: nobody reads the answer,
                 * so the dial and its descriptors go now, not at connect-timeout. A client that
                 * only half-closed (RDHUP) may still wait for the reply, and keeps its dial. */
                sf_conn_close(c, "the client hung up while its upstream was being dialed");
                return;
        }
        if (c->state == ST_DIALING && side == UPSTREAM) {
                /* The edge that says connected may say readable too: the flags keep it. */
                sf_conn_dial_ready(c, events);
                return;
        }
        if (side == UPSTREAM && c->up_unanswered && !sf_conn_stream_answer(c))
                return; /* its stream was refused: the next candidate has it */
        if (events & SF_EV_ERR) {
                /* The socket's own error says what happened; reading it also clears it. */
                int err = sf_side_error(c, side);
                if (err) {
                        if (dialing && side == UPSTREAM)
                                sf_conn_handshake_error(c, err);
                        else
                                sf_conn_io_error(c, err);
                        return;
                }
        }
        progress(c);
}

static void on_timer(uv_timer_t *t) {
        struct sf_conn *c = t->data;
        switch (c->state) {
        case ST_DIALING:
                sf_conn_dial_timeout(c);
                return;
        case ST_GREETED:
        case ST_AWAIT_HELLO:
        case ST_AWAIT_STATUS:
                sf_conn_handshake_timeout(c);
                return;
        case ST_LINGER:
                sf_conn_close(c, "linger over");
                return;
        case ST_RELAYING: {
                if (sf_conn_stream_unsent(c))
                        return;
                uint64_t idle = c->fwd->conf->idle_timeout_ms, now = uv_now(c->fwd->loop);
                if (!idle)
                        return;
                if (now - c->last_activity >= idle) {
                        sf_log(SF_LOG_DEBUG, fname(c), c->id, "idle for %llums: closing",
                               (unsigned long long)idle);
                        sf_conn_close(c, "idle timeout");
                        return;
                }
                /* Activity does not restart the timer (that would cost a call per event): the
                 * rest of the idle time is waited for now. */
                uv_timer_start(&c->timer, on_timer, idle - (now - c->last_activity), 0);
                return;
        }
        case ST_NEW:
        case ST_CLOSED:
        case ST_COUNT:
                return;
        }
}

static void conn_link(struct sf_conn *c, struct sf_fwd *fwd) {
        c->fwd = fwd;
        sf_list_push_back(&fwd->conns, &c->node);
        fwd->stats->active++;
        fwd->stats->total++;
        fwd->n_conns_allocated++;
}

void sf_conn_move(struct sf_conn *c, struct sf_fwd *to) {
        struct sf_fwd *from = c->fwd;
        if (from == to)
                return;
        /* The listener's forward counted it while it was unauthenticated; it is the service's
         * from now on, as if that one had accepted it. */
        sf_list_remove(&from->conns, &c->node);
        from->stats->active--;
        from->stats->total--;
        conn_link(c, to);
        c->dir[CLIENT].copy_only = true;
        /* Its memory is to's to wait for now: from counts one allocation less (and may resume
         * accepting, or finish stopping). */
        sf_fwd_conn_gone(from);
}

int sf_conn_new_stream(struct sf_fwd *fwd, struct sf_mux_stream *s, bool probe, const char *label) {
        /* Connections still in their handshake do not count: a flood of them must not keep an
         * authenticated link's streams out (the pre-auth budget bounds them on its own). */
        if (fwd->stats->active - fwd->preauth.all.n >= fwd->conf->max_conns || !fwd->listen_started) {
                char why[SF_MUX_REASON_MAX + 1];
                if (fwd->listen_started)
                        snprintf(why, sizeof why, "%s serves max-conns = %u connections already", label,
                                 fwd->conf->max_conns);
                else
                        snprintf(why, sizeof why, "the host side is stopping (%s)", label);
                sf_fwd_note_error(fwd, &fwd->stats->err_other, why);
                sf_mux_stream_refuse(s, SF_MUX_BUSY, why);
                sf_mux_stream_close(s);
                return -EBUSY;
        }
        struct sf_conn *c = calloc(1, sizeof *c);
        if (!c) {
                sf_mux_stream_refuse(s, SF_MUX_UPSTREAM_UNAVAILABLE, "out of memory on the host");
                sf_mux_stream_close(s);
                return -ENOMEM;
        }
        c->id = ++fwd->next_conn_id;
        c->state = ST_NEW;
        sf_side_init(c);
        uv_timer_init(fwd->loop, &c->timer);
        c->timer.data = c;
        c->last_activity = uv_now(fwd->loop);
        conn_link(c, fwd);
        fwd->stats->streams_opened++;
        sf_side_attach_stream(c, CLIENT, s);
        c->stream_probe = probe;
        sf_conn_event(c, EV_DIAL);
        return 0;
}

int sf_conn_new(struct sf_fwd *fwd, struct sf_incoming *in) {
        struct sf_conn *c = calloc(1, sizeof *c);
        if (!c) {
                sf_incoming_close(fwd->eng, in);
                return -ENOMEM;
        }
        c->fwd = fwd;
        c->id = ++fwd->next_conn_id;
        c->state = ST_NEW;
        sf_side_init(c);
        c->dir[CLIENT].copy_only = fwd->listener.family == AF_UNIX;
        c->cand = 0;
        uv_timer_init(fwd->loop, &c->timer);
        c->timer.data = c;
        c->last_activity = uv_now(fwd->loop);

        conn_link(c, fwd);

        int r = sf_side_adopt(c, CLIENT, in, fwd->listener.family);
        if (r < 0) {
                sf_log(SF_LOG_ERROR, fname(c), c->id, "watching the accepted socket: %s", strerror(-r));
                sf_conn_close(c, "watching the accepted socket failed");
                return r;
        }
        /* A socket just accepted has an empty send buffer. */
        c->wr[CLIENT] = true;
        if (fwd->listener.family == AF_INET || fwd->listener.family == AF_INET6)
                sf_side_nodelay(c, CLIENT);
        if (fwd->has_key && is_net_family(fwd->listener.family)) {
                sf_conn_greet(c);
                return 0;
        }
        sf_conn_event(c, EV_DIAL);
        return 0;
}
