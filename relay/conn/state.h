#pragma once
/* Private to the connection's files: its states, the events its phases report, the transition
 * table, and the state they share. Not an API: nothing outside relay/conn/ includes it (the unit
 * tests in tests/relay/ do, to drive a connection through every transition).
 *
 * The connection is a star. conn.c is the hub: it alone changes c->state and arms c->timer,
 * both in sf_conn_event (and sf_conn_close). Around it, the phases report what happened and
 * never call each other:
 *
 *   dial.c       the candidates: resolve, connect, retry, and which one is good
 *   handshake.c  the link handshake: greet, check the client frame, the hello, the status
 *   pump.c       bytes both ways once relaying, with a bound per loop turn
 *   preauth.c    the pre-authentication budget
 *
 * and all of them move bytes through direction.c: every I/O on a side (recv, send, shutdown,
 * close, its error, its readiness) and every primitive of a direction (read into its buffer or
 * pipe, flush it to the other side, count it, release it, pass its EOF on). A side is a socket
 * today; a side of another kind touches direction.c and the dial only.
 *
 * The transition table (state x event -> next state). Each state's timeout is armed on entry
 * (sf_conn_event); what its expiry does is in the last column.
 *
 *   state          event             next           timer on entry, and what its expiry does
 *   ------------   ---------------   ------------   -------------------------------------------------
 *   NEW            GREET             GREETED        (none)
 *                  DIAL              DIALING
 *                  CLOSE             CLOSED
 *   GREETED        DIAL              DIALING        handshake-timeout: no client frame, close
 *                  REFUSED           LINGER
 *                  CLOSE             CLOSED
 *   DIALING        DIAL_WAIT         DIALING        connect-timeout per candidate, or 10 ms for the
 *                  CONNECTED         RELAYING       retry of a full unix backlog: retry, or the
 *                  STREAM_OPEN       RELAYING       candidate failed (CAND_FAILED)
 *                  CONNECTED_LINK    AWAIT_HELLO
 *                  CAND_FAILED       DIALING
 *                  REFUSED           LINGER
 *                  CLOSE             CLOSED
 *   AWAIT_HELLO    HELLO             AWAIT_STATUS   handshake-timeout: the candidate failed
 *                  CAND_FAILED       DIALING
 *                  REFUSED           LINGER
 *                  CLOSE             CLOSED
 *   AWAIT_STATUS   STATUS_OK         RELAYING       handshake-timeout + connect-timeout (saturating):
 *                  CAND_FAILED       DIALING        the candidate failed
 *                  REFUSED           LINGER
 *                  CLOSE             CLOSED
 *   RELAYING       CAND_FAILED       DIALING        idle-timeout (none when 0): close; a stream not
 *                  CLOSE             CLOSED         sent yet (the host's stream limit): connect-
 *                                                   timeout from the dial, then the candidate failed
 *   LINGER         CLOSE             CLOSED         2 s: close
 *   CLOSED         (none)                           (none)
 *
 * CAND_FAILED goes to DIALING only while a candidate is left: when none is, the hub turns it
 * into REFUSED (it owes its client a status: it is that client's link server) or CLOSE, with
 * one log line that gives every candidate's cause. CONNECTED and STATUS_OK make the candidate
 * the good one; so does, over a shared link, the stream's answer (its status, or the
 * upstream's first bytes or end) once RELAYING: until it comes the client's bytes are kept
 * (one buffer of them) while they go out, and a stream refused or reset before any answer
 * fails its candidate (CAND_FAILED from RELAYING) with those bytes given to the next. An event
 * with no row here is a bug: the hub logs it and closes the connection. */
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

#include "relay/conn/conn.h"
#include "relay/conn/preauth_budget.h"
#include "relay/engine/engine.h"
#include "relay/forward.h"
#include "relay/link/client.h"
#include "relay/link/frames.h"
#include "relay/link/mux.h"
#include "relay/link/table.h"
#include "relay/list.h"
#include "relay/listen/accept.h"
#include "relay/sys/platform.h"

enum conn_state {
        ST_NEW,          /* allocated: nothing decided yet */
        ST_GREETED,      /* listening side of an authenticated link: hello sent, client frame awaited */
        ST_DIALING,      /* a candidate is being resolved or connected */
        ST_AWAIT_HELLO,  /* connecting side: the peer relay's greeting awaited */
        ST_AWAIT_STATUS, /* our client frame and the early bytes sent: the peer's status awaited */
        ST_RELAYING,     /* bytes both ways */
        ST_LINGER,       /* a failure status sent to our client: its bytes dropped until it has read it */
        ST_CLOSED,       /* closed: the memory goes in the timer's close callback */
        ST_COUNT
};

enum conn_event {
        EV_GREET,          /* an authenticated listener greeted the client */
        EV_DIAL,           /* dial the candidates: at once, or now that the client frame verified */
        EV_DIAL_WAIT,      /* the candidate resolves or connects, or is retried in 10 ms */
        EV_CONNECTED,      /* connected, and no handshake toward this candidate */
        EV_STREAM_OPEN,    /* a stream of a shared link opened toward it: bytes go at once */
        EV_CONNECTED_LINK, /* connected to a relay with auth = token: its hello comes first */
        EV_HELLO,          /* its hello parsed: our client frame and the early bytes are queued */
        EV_STATUS_OK,      /* its status frame verified */
        EV_CAND_FAILED,    /* this candidate failed and another is left */
        EV_REFUSED,        /* a failure status went to our client */
        EV_CLOSE,
        EV_COUNT
};

/* The table above, as the hub reads it (sf_conn_next_state). */
#define SF_CONN_TRANSITIONS(X)                              \
        X(ST_NEW, EV_GREET, ST_GREETED)                     \
        X(ST_NEW, EV_DIAL, ST_DIALING)                      \
        X(ST_NEW, EV_CLOSE, ST_CLOSED)                      \
        X(ST_GREETED, EV_DIAL, ST_DIALING)                  \
        X(ST_GREETED, EV_REFUSED, ST_LINGER)                \
        X(ST_GREETED, EV_CLOSE, ST_CLOSED)                  \
        X(ST_DIALING, EV_DIAL_WAIT, ST_DIALING)             \
        X(ST_DIALING, EV_CONNECTED, ST_RELAYING)            \
        X(ST_DIALING, EV_STREAM_OPEN, ST_RELAYING)          \
        X(ST_DIALING, EV_CONNECTED_LINK, ST_AWAIT_HELLO)    \
        X(ST_DIALING, EV_CAND_FAILED, ST_DIALING)           \
        X(ST_DIALING, EV_REFUSED, ST_LINGER)                \
        X(ST_DIALING, EV_CLOSE, ST_CLOSED)                  \
        X(ST_AWAIT_HELLO, EV_HELLO, ST_AWAIT_STATUS)        \
        X(ST_AWAIT_HELLO, EV_CAND_FAILED, ST_DIALING)       \
        X(ST_AWAIT_HELLO, EV_REFUSED, ST_LINGER)            \
        X(ST_AWAIT_HELLO, EV_CLOSE, ST_CLOSED)              \
        X(ST_AWAIT_STATUS, EV_STATUS_OK, ST_RELAYING)       \
        X(ST_AWAIT_STATUS, EV_CAND_FAILED, ST_DIALING)      \
        X(ST_AWAIT_STATUS, EV_REFUSED, ST_LINGER)           \
        X(ST_AWAIT_STATUS, EV_CLOSE, ST_CLOSED)             \
        X(ST_RELAYING, EV_CAND_FAILED, ST_DIALING)          \
        X(ST_RELAYING, EV_CLOSE, ST_CLOSED)                 \
        X(ST_LINGER, EV_CLOSE, ST_CLOSED)

/* Side 0 is the accepted client, side 1 the upstream. dir[i] carries bytes read from side i
 * that still have to be written to side 1-i. */
enum { CLIENT = 0, UPSTREAM = 1 };

#define DIAL_RETRY_MS 10
#define LINGER_MS 2000
/* Reads per direction, and per lingering connection, in one loop turn before it yields. */
#define PUMP_ROUNDS 8
/* What a peer gets of the client's stream before its status frame verified: the bytes the
 * client sent up to this many, behind the client frame; reading the client stops there until
 * the status verifies (doc/SECURITY.md, "What the token protects", says why this much). The
 * same bytes go again, behind its own frame, to the next candidate when this one fails. */
#define SF_EARLY_MAX (16 * 1024)
/* Room for our client frame and its service extension at the front of the held buffer: the
 * frame ends where the early bytes start, whatever the candidate's frame is. */
#define SF_HOLD_FRONT SF_HSC_FRAME_MAX
/* The causes of the candidates that failed, for the one line that gives them all. */
#define SF_FAILS_MAX 1536

/* A direction moves its bytes through a pooled buffer (recv/send), or, on an engine that has one
 * (relay/engine/engine.h), through a pooled kernel pipe once a read has filled the whole buffer:
 * bulk data then stays in the kernel, while small messages keep the path with the fewest system
 * calls. Either holds bytes only while the other side has not taken them. A direction that reads a
 * unix socket always copies: the pipe path out of one measured slower and costlier than a copy
 * (bench/RESULTS.md: unix to TCP about 1 600 against 2 500 MiB/s, 0.58 against 0.38 relay CPU s per
 * GiB). */
struct dir {
        char *buf;
        uint32_t off, len;
        struct sf_pipe pipe;
        size_t pipe_len;
        bool bulk;      /* a read filled the buffer: the pipe path from now on */
        bool copy_only; /* the source is a unix socket, or the pipe path was refused */
        bool eof;       /* read side returned EOF */
        bool shut;      /* the EOF was passed on with a shutdown for writing */
        /* The client's direction until the status verifies: its buffer holds the client frame
         * of the current candidate and the early bytes behind it, and keeps them while they are
         * sent, for the next candidate. */
        bool held;
};

struct gai_req {
        uv_getaddrinfo_t req;
        struct sf_conn *conn; /* NULL once the connection is gone: the request frees itself */
};

struct sf_conn {
        struct sf_list_node node; /* in fwd->conns */
        struct sf_fwd *fwd;
        uint64_t id;
        enum conn_state state;

        struct sf_sock sock[2];
        /* A side that is a stream of a shared link instead of a socket (relay/link/mux.h): the
         * upstream of a container relay's connection, the client of a host relay's. */
        struct sf_mux_stream *stream[2];
        struct side_ev {
                struct sf_conn *c;
                int side;
        } sev[2];
        bool stream_probe;    /* the client stream only asks whether the upstream answers */
        bool stream_answered; /* the client stream was told the upstream's answer */
        bool up_unanswered;   /* the upstream stream has not answered yet: its candidate is not good */
        /* Edge-triggered readiness: set by an event, cleared only when a call says EAGAIN
         * (or a read comes back short, which on a stream socket means it is empty). rdhup
         * keeps a read going to the EOF that arrived with the last edge. */
        bool rd[2], wr[2], rdhup[2];
        uv_timer_t timer;
        uint64_t last_activity;
        struct dir dir[2];

        /* dialing */
        unsigned tries;     /* candidates tried so far for this connection */
        int cand;           /* index into conf->connect */
        int upstream_family;
        struct gai_req *gai;
        struct addrinfo *ai_list, *ai_next;
        uint64_t dial_deadline;
        bool dial_retry;       /* waiting to try the same candidate again (a full backlog) */
        char *fails;           /* the causes of this connection's failed candidates, or NULL */
        uint64_t *fail_counter; /* the stats counter of the last one */
        bool fail_dial;         /* the last one failed to connect (not in the handshake) */
        /* Waiting for the shared link of the current candidate to come up. */
        struct sf_link_entry *link_wait;
        struct sf_link_waiter waiter;

        /* link handshake */
        bool hs_server;       /* we greeted the client: it gets a status frame */
        bool greeting_check;  /* auth = none over a network: the upstream's first read is looked at */
        uint8_t hs_flags;
        uint16_t hs_len;
        /* The handshake with our client (we are its server: its nonces and frames) and the one
         * with our upstream (we are its client: relay/link/client.h): a relay chained between
         * two links runs both. */
        uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];
        uint8_t hs[SF_HS_STATUS_MAX];
        struct sf_hs_client *up; /* while the handshake with the upstream runs */

        struct sf_preauth_node preauth; /* in fwd->preauth from the greeting to the client frame */
};

static inline const char *fname(const struct sf_conn *c) {
        return c->fwd->conf->name;
}

static inline const struct sf_endpoint *cand_ep(const struct sf_conn *c) {
        return &c->fwd->conf->connect[c->cand];
}

static inline void note_error(struct sf_conn *c, uint64_t *counter, const char *msg) {
        sf_fwd_note_error(c->fwd, counter, msg);
}

static inline bool is_net_family(int family) {
        return family == AF_INET || family == AF_INET6 || family == sf_af_vsock;
}

static inline bool dir_pending(const struct dir *d) {
        return d->off < d->len || d->pipe_len > 0;
}

/* conn.c, the hub. */
/* The next state for ev in state st, ST_COUNT when the table has none. */
enum conn_state sf_conn_next_state(enum conn_state st, enum conn_event ev);
const char *sf_conn_state_name(enum conn_state st);
const char *sf_conn_event_name(enum conn_event ev);
/* Takes the transition and arms the new state's timer; then does what entering it means
 * (dial a candidate, read what is ready, ...). The caller returns right after it. */
void sf_conn_event(struct sf_conn *c, enum conn_event ev);
/* The current candidate again, from its dial (an older relay, now asked the old way). */
void sf_conn_cand_retry(struct sf_conn *c);
/* The connection belongs to the service `to` from now on (a listener offers several). */
void sf_conn_move(struct sf_conn *c, struct sf_fwd *to);
/* The stats counter of c's forward that a link failure of this kind counts in. */
uint64_t *sf_conn_link_counter(struct sf_conn *c, enum sf_link_err kind);
/* The current candidate failed: why (msg, which names it), the stats counter it counts in if it
 * is the last one, and whether it failed to connect (dial) or in the handshake. The next
 * candidate is dialled, or, when none is left, the connection ends with every cause. */
void sf_conn_cand_failed(struct sf_conn *c, uint64_t *counter, bool dial, const char *msg);
/* Sends our client a failure status (we are its link server) and lingers (EV_REFUSED), or
 * closes when it cannot be sent. */
void sf_conn_refuse(struct sf_conn *c, enum sf_hs_status st, const char *reason);
/* An I/O error on either side: logged unless it is a reset, and the connection closes. */
void sf_conn_io_error(struct sf_conn *c, int e);
/* Readiness of side `side` (SF_EV_* bits), or 0 for a deferred call: sets the flags and runs
 * the state as far as they let it. */
void sf_conn_on_ready(struct sf_conn *c, int side, uint32_t events);

/* dial.c: the upstream candidates, in order from the last good one. */
/* The first candidate to try: the last good one. */
void sf_conn_dial_first(struct sf_conn *c);
/* Dials the current candidate; reports DIAL_WAIT, CONNECTED, CONNECTED_LINK or the failure. */
void sf_conn_dial(struct sf_conn *c);
/* An event on the upstream socket while it connects. */
void sf_conn_dial_ready(struct sf_conn *c, uint32_t events);
/* The timer of DIALING: the retry of a full unix backlog, or connect-timeout. */
void sf_conn_dial_timeout(struct sf_conn *c);
/* Drops a pending name resolution, its results and the upstream socket. */
void sf_conn_dial_cancel(struct sf_conn *c);
/* The current candidate answered as the forward expects: it is the one to try first. */
void sf_conn_cand_good(struct sf_conn *c);
/* RELAYING toward a stream that has not answered: its answer makes the candidate good, its
 * refusal (or a reset before any answer) fails it while the client's bytes can still go to the
 * next one. false when the connection moved on (another candidate, or closed). */
bool sf_conn_stream_answer(struct sf_conn *c);
/* RELAYING: the timer came while the stream still waits for a place under the host's stream
 * limit: the candidate failed. true when it was so (the connection moved on). */
bool sf_conn_stream_unsent(struct sf_conn *c);
/* Logs (once per change of a candidate's state) and keeps the cause of its failure. */
void sf_conn_cand_note(struct sf_conn *c, uint64_t *counter, bool dial, const char *msg);
/* Moves to the next candidate: false when every one was tried. */
bool sf_conn_cand_advance(struct sf_conn *c);
/* The line that ends a connection whose every candidate failed (last: the last one's cause),
 * into out; returns the part of it that is the reason a status frame carries. */
const char *sf_conn_cand_summary(struct sf_conn *c, const char *last, char *out, size_t cap);

/* handshake.c: the sockferry link handshake inside a connection. */
/* Listening side of an authenticated link: greets the client (reports GREET, or closes). */
void sf_conn_greet(struct sf_conn *c);
/* GREETED: the client frame. */
void sf_conn_on_client_frame(struct sf_conn *c);
/* AWAIT_HELLO: the peer relay's greeting. */
void sf_conn_on_hello(struct sf_conn *c);
/* AWAIT_STATUS: our frame and the early bytes out, the status frame in. */
void sf_conn_on_await_status(struct sf_conn *c);
/* The timer of GREETED, AWAIT_HELLO and AWAIT_STATUS. */
void sf_conn_handshake_timeout(struct sf_conn *c);
/* An error on the upstream socket during AWAIT_HELLO or AWAIT_STATUS: the candidate failed. */
void sf_conn_handshake_error(struct sf_conn *c, int e);
/* auth = none over a network: true, with the sentence in msg, when the upstream's first bytes
 * are a sockferry greeting (a relay with auth = token), which must not reach the client. */
bool sf_conn_greeting_unexpected(struct sf_conn *c, char *msg, size_t cap);
/* Sends a failure status to our client and shuts down its write side. false if not sent. */
bool sf_conn_status_send(struct sf_conn *c, enum sf_hs_status st, const char *reason);
/* Listening side: the upstream answers, tell the client (the probe flag: tell it and close).
 * false when the connection is gone. */
bool sf_conn_server_confirm(struct sf_conn *c);

/* Who the client is, for messages: "ADDRESS:PORT", "vsock CID N port P" or "a local peer". */
void sf_conn_peer_name(struct sf_conn *c, char *out, size_t cap);

/* preauth.c: the pre-authentication budget. enter evicts the oldest when the budget is
 * full; false when c itself is gone. leave: c authenticated or closes (safe to call twice). */
bool sf_conn_preauth_enter(struct sf_conn *c);
void sf_conn_preauth_leave(struct sf_conn *c);

/* pump.c: both directions as far as readiness allows, PUMP_ROUNDS reads each per turn. */
void sf_conn_relay_step(struct sf_conn *c);

/* direction.c: a side. */
void sf_side_init(struct sf_conn *c);
/* Side `side` becomes stream s, which the connection now owns (closed with the side). */
void sf_side_attach_stream(struct sf_conn *c, int side, struct sf_mux_stream *s);
/* Why a stream side failed, in plain words ("" for a socket). */
const char *sf_side_reason(struct sf_conn *c, int side);
int sf_side_adopt(struct sf_conn *c, int side, struct sf_incoming *in, int family);
ssize_t sf_side_recv(struct sf_conn *c, int side, void *buf, size_t n);
ssize_t sf_side_send(struct sf_conn *c, int side, const void *buf, size_t n);
void sf_side_shutdown(struct sf_conn *c, int side);
/* Closes the side and forgets its readiness. Safe when it is closed. */
void sf_side_close(struct sf_conn *c, int side);
int sf_side_error(struct sf_conn *c, int side);
/* Bytes sent to the side that the engine still holds (sf_sock_sending); a stream's are the
 * link's, which writes them after the stream's close too. */
bool sf_side_sending(struct sf_conn *c, int side);
void sf_side_nodelay(struct sf_conn *c, int side);
int sf_side_peername(struct sf_conn *c, int side, struct sockaddr_storage *ss, socklen_t *len);
/* The connection goes on in a deferred call, after the events pending now. */
void sf_side_yield(struct sf_conn *c);

/* direction.c: a direction (dir[from], bytes read from side `from`). */
/* One read into the pipe (bulk) or after what the buffer holds. n, 0 at EOF, -1 with errno. */
ssize_t sf_dir_read_some(struct sf_conn *c, int from);
/* Whether a read from side from has somewhere to go now: while relaying to a stream whose
 * send buffer is full it waits for the stream's room (SF_MUX_EV_OUT follows), rather than read
 * into the direction's buffer only to copy it later. */
bool sf_dir_room(struct sf_conn *c, int from);
/* read_some with what follows it: bytes counted, the EOF noted, readiness cleared on EAGAIN.
 * 1 when bytes or the EOF came, 0 when nothing did, -errno. */
int sf_dir_read(struct sf_conn *c, int from);
/* Writes what the direction holds to the other side; once all of it is out the buffer or
 * pipe goes back (unless held) and the EOF is passed on. 0 or -errno. */
int sf_dir_flush(struct sf_conn *c, int from);
void sf_dir_count(struct sf_conn *c, int from, size_t n);
/* Gives the direction's buffer and pipe back to their pools. */
void sf_dir_release(struct sf_conn *c, int from);
/* Once the direction is at its EOF and empty: shuts down the other side's write. */
void sf_dir_pass_eof(struct sf_conn *c, int from);
/* Copies up to max bytes from the front of what the buffer holds; take consumes them. */
size_t sf_dir_peek(struct sf_conn *c, int from, void *out, size_t max);
size_t sf_dir_take(struct sf_conn *c, int from, void *out, size_t max);
/* Queues n bytes ahead of what the direction holds (a status frame ahead of the upstream's
 * bytes; n is at most what was taken off its front, or the direction is empty). 0 or -ENOMEM. */
int sf_dir_put_front(struct sf_conn *c, int from, const void *bytes, size_t n);
/* The client's direction before the status: the frame of the current candidate at the front,
 * the early bytes held behind it, all of it to be sent. 0 or -ENOMEM. */
int sf_dir_hold_frame(struct sf_conn *c, const uint8_t *frame, size_t len);
/* Reads more early bytes, up to SF_EARLY_MAX in all. 0 or -errno. */
int sf_dir_hold_read(struct sf_conn *c);
/* The held bytes are let go: after the status verified (the frame was this candidate's), or
 * for a candidate without a handshake (the frame is skipped). */
void sf_dir_hold_end(struct sf_conn *c, bool with_frame);
/* The held bytes stay where they are, sent or not, but are no longer kept for another
 * candidate: the stream answered, or the client sent more than the buffer before it did. */
void sf_dir_hold_drop(struct sf_conn *c);
/* A candidate failed: the upstream's direction emptied, the client's sent again from the start. */
void sf_dir_upstream_reset(struct sf_conn *c);
/* LINGER: reads and drops what side `side` sent, PUMP_ROUNDS reads per turn (then a deferred
 * call goes on). 1 once the side is at EOF or failed, 0 while it may send more. */
int sf_dir_discard(struct sf_conn *c, int side);
