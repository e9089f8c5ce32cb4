#pragma once
/* Private to the connection's files (conn.c lifetime, dial.c, handshake.c, pump.c, preauth.c): the
 * state they share. Not an API: nothing outside those files includes it. */
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
#include "relay/link/frames.h"
#include "relay/list.h"
#include "relay/listen/accept.h"
#include "relay/sys/platform.h"

/* Side 0 is the accepted client, side 1 the upstream. dir[i] carries bytes read from side i
 * that still have to be written to side 1-i. */
enum { CLIENT = 0, UPSTREAM = 1 };

enum conn_state {
        ST_AWAIT_CLIENT_FRAME, /* listening side of an authenticated link: hello sent */
        ST_DIALING,
        ST_AWAIT_HELLO,        /* connecting side: waiting for the peer relay's greeting */
        ST_RELAYING,
        ST_LINGER,             /* failure status sent: drain the peer's bytes so it reads it */
};

#define DIAL_RETRY_MS 10
#define LINGER_MS 2000
#define PUMP_ROUNDS 8

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
        bool closing;

        struct sf_sock sock[2];
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
        char dial_error[200];
        int dial_errno;

        /* link handshake */
        bool hs_server;       /* we greeted the client: it gets a status frame */
        bool hs_await_status; /* we sent our frame upstream: its status comes first */
        bool greeting_check;  /* auth = none over a network: the upstream's first read is looked at */
        uint8_t hs_flags;
        uint16_t hs_len;
        /* The nonces of the handshake with our client (we are its server) and of the one with
         * our upstream (we are its client): a relay chained between two links runs both. */
        uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];
        uint8_t up_snonce[SF_HS_NONCE_LEN], up_cnonce[SF_HS_NONCE_LEN];
        uint8_t hs[SF_HS_STATUS_MAX];

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

/* conn.c: the connection's lifetime, timers and events. */
void sf_conn_timer_arm(struct sf_conn *c, uint64_t ms);
/* The idle timeout, or no timer when there is none. */
void sf_conn_idle_arm(struct sf_conn *c);
/* Runs the connection's state as far as the readiness flags let it. */
void sf_conn_progress(struct sf_conn *c);

/* dial.c: the upstream candidates, in order from the last good one, with failover. */
void sf_conn_dial_start(struct sf_conn *c);
/* An event on the upstream socket while it connects. */
void sf_conn_dial_ready(struct sf_conn *c, uint32_t events);
/* connect-timeout, or the retry of a unix connect refused for a full backlog. */
void sf_conn_dial_timeout(struct sf_conn *c);
/* Drops a pending name resolution and its results (the connection closes). */
void sf_conn_dial_cancel(struct sf_conn *c);
/* Drops the upstream socket of a failed attempt. */
void sf_conn_drop_upstream(struct sf_conn *c);

/* handshake.c: the sockferry link handshake inside a connection. */
/* Listening side of an authenticated link: greets the client. false when the connection is
 * gone. */
bool sf_conn_greet(struct sf_conn *c);
void sf_conn_on_client_frame(struct sf_conn *c);
void sf_conn_on_hello(struct sf_conn *c);
void sf_conn_on_status(struct sf_conn *c);
/* The client of a failure status: its bytes are read and dropped until it closes. */
void sf_conn_linger_drain(struct sf_conn *c);
/* Handshake timers: the client frame, the peer's hello, the status frame. */
void sf_conn_link_timeout(struct sf_conn *c);
/* Tells the client relay why (status frame), then lingers until it has read it. */
/* auth = none here: once, on the upstream's first read, a sockferry greeting there (a relay
 * with auth = token) closes the connection with the fix instead of reaching the client as
 * data. True when it did. */
bool sf_conn_greeting_refused(struct sf_conn *c);
void sf_conn_status_and_linger(struct sf_conn *c, enum sf_hs_status st, const char *reason);
/* Listening side: the upstream answers, tell the client. false when the connection is gone. */
bool sf_conn_server_confirm(struct sf_conn *c);

/* preauth.c: the pre-authentication budget. enter evicts the oldest when the budget is
 * full; false when c itself is gone. leave: c authenticated or closes (safe to call twice). */
bool sf_conn_preauth_enter(struct sf_conn *c);
void sf_conn_preauth_leave(struct sf_conn *c);

/* pump.c: bytes both ways with backpressure and half-close. */
void sf_conn_start_relaying(struct sf_conn *c);
void sf_conn_relay_step(struct sf_conn *c);
void sf_conn_relay_error(struct sf_conn *c, int e);
ssize_t sf_conn_read_some(struct sf_conn *c, int from);
int sf_conn_read_step(struct sf_conn *c, int from);
void sf_conn_count_bytes(struct sf_conn *c, int from, size_t n);
/* Gives the direction's buffer and pipe back to their pools. */
void sf_conn_release_buf(struct sf_conn *c, int i);
