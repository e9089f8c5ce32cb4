#pragma once
/* One shared link (sockferry/2, doc/PROTOCOL.md "The shared link"): a long-lived transport
 * between two relays carrying every client connection as a stream of its mux
 * (relay/link/mux.h).
 *
 * The client end (in the container) dials its endpoint, runs the sockferry/1 handshake asking
 * for a link (the LINK flag), keeps the link alive with pings (dead after two unanswered) and
 * dials it again with a jittered backoff (100 ms doubling to 5 s) when it drops. The server
 * end (on the host) takes over an accepted connection whose handshake asked for a link, or,
 * without a handshake, the pipes of an exec (attach). The transport is libuv streams (a TCP
 * or vsock socket, or an exec's two pipes), so the link is the same on every system. */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "conf/endpoint.h"
#include "relay/link/frames.h"
#include "relay/link/messages.h"
#include "relay/link/mux.h"

struct sf_bufpool;
struct sf_link;

enum sf_link_state {
        SF_LINK_CONNECTING, /* dialing, or in the handshake */
        SF_LINK_UP,         /* streams may open */
        SF_LINK_DOWN,       /* the last attempt failed or the link dropped: a new one is due */
        SF_LINK_OLD_PEER,   /* the peer relay does not know links: use one connection per client */
        SF_LINK_CLOSED,
};

struct sf_link_params {
        /* For messages: the endpoint as written (client), or who the peer is (server). */
        const char *name;
        /* Client: where to dial, a tcp: or vsock: endpoint. */
        const struct sf_endpoint *ep;
        /* The handshake's key; NULL on a link with no handshake (an exec's pipes). */
        const struct sf_hs_key *key;
        const char *token_file; /* for messages, never the token */
        uint64_t connect_timeout_ms;
        uint64_t handshake_timeout_ms;
        uint64_t keepalive_ms; /* 0: no pings */
        /* Server: a link `sockferry check` opened (the probe flag with the link flag): its end
         * is logged at debug level, as a probe connection's is, not at every health check. */
        bool quiet;
        struct sf_mux_config mux;
        /* The relay's engine, whose deferred calls run right after the events of a turn: the
         * streams' bytes of a turn go out in one write then (NULL: at libuv's next turn). */
        struct sf_engine *eng;
};

struct sf_link_ops {
        /* The link came up, went down, or found an old peer: sf_link_state and sf_link_cause
         * say which and why. */
        void (*state_changed)(void *owner, struct sf_link *l);
        /* Server: the peer opened a stream (relay/link/mux.h, stream_new). */
        void (*stream_new)(void *owner, struct sf_link *l, struct sf_mux_stream *s, const char *service,
                           bool by_default, bool probe);
        /* Server, or a retired client link: the link ended for good (the peer closed it, it
         * broke, or a retired one carries no stream any more); the owner calls sf_link_close. */
        void (*ended)(void *owner, struct sf_link *l);
        /* Client: the link takes no new streams (the peer sent GOAWAY, or its stream ids ran
         * out); its open streams go on. The owner takes a new link for new streams and retires
         * this one (sf_link_retire). NULL: nothing to do. */
        void (*draining)(void *owner, struct sf_link *l);
};

struct sf_link_stats {
        const char *name;       /* sf_link_name */
        const char *token_file; /* a client's, "" on a server end (it tells links apart, never the token) */
        bool dialer;            /* the client end, which dials; false: one a listener accepted */
        enum sf_link_state state;
        time_t since;       /* when it entered that state (connecting and down count as one) */
        uint64_t rtt_us;    /* the last ping's round trip, 0 before the first */
        size_t streams_open;
        uint64_t streams_total;
        uint64_t reconnects; /* times it came up again after having been up */
        uint64_t bytes_in, bytes_out;
        char cause[256]; /* why it is not up ("" when it is) */
        bool refused;    /* down because the peer refused it (wrong peer, version, token) */
        /* The last attempt failed in a way the next one would too, now: refused (above), or
         * the connection refused, the host unreachable or its name unknown. A client waiting
         * for the link is told at once; after anything else (a close before the greeting, a
         * restart under way) it waits for the next attempt, within its connect-timeout. */
        bool fail_now;
        enum sf_link_err refused_kind; /* which refusal (SF_LINK_OK when not refused) */
};

/* Client: a link to p->ep, dialed now. p and what it points to must outlive the link. 0 or
 * -ENOMEM. */
int sf_link_client_new(uv_loop_t *loop, struct sf_bufpool *pool, const struct sf_link_params *p,
                       const struct sf_link_ops *ops, void *owner, struct sf_link **out);
/* A link over rd/wr (the same stream for a socket), which it now owns and closes with
 * close_cb (NULL: free()); role says which end of the mux this is (an exec link's container end
 * is the client, as it opens the streams). It does not dial again when it ends. 0 or -ENOMEM
 * (rd/wr closed). */
int sf_link_adopt(uv_loop_t *loop, struct sf_bufpool *pool, const struct sf_link_params *p,
                  const struct sf_link_ops *ops, void *owner, enum sf_mux_role role, uv_stream_t *rd,
                  uv_stream_t *wr, uv_close_cb close_cb, struct sf_link **out);

/* Closes a transport no link took (rd/wr as sf_link_adopt's), with close_cb (NULL: free()). */
void sf_link_transport_close(uv_stream_t *rd, uv_stream_t *wr, uv_close_cb close_cb);

/* A new stream for service (NULL: none named), once the link is up. NULL with *err: -EAGAIN
 * when it is not up or the peer takes no new streams (it is draining), -ENOMEM. */
struct sf_mux_stream *sf_link_stream_open(struct sf_link *l, const char *service, bool by_default, bool probe,
                                          int *err);

enum sf_link_state sf_link_state(const struct sf_link *l);
/* Why the link is not up, in plain words; "" when it is. */
const char *sf_link_cause(const struct sf_link *l);
void sf_link_stats_get(const struct sf_link *l, struct sf_link_stats *st);
/* "connecting", "up", "down", "old-peer" or "closed". */
const char *sf_link_state_name(enum sf_link_state st);

/* A client waits for this link, which is down: its next attempt starts now rather than at the
 * end of a backoff that may outlast the client's connect-timeout (a host relay back after a
 * restart is found by the first client); one in progress is not started again. */
void sf_link_hurry(struct sf_link *l);
/* Stops opening streams (GOAWAY on the server end); open ones go on. */
void sf_link_drain(struct sf_link *l);
/* Client: l takes over from old, which it replaces (old's ops->draining): the endpoint's
 * history goes on in it (streams so far, reconnects: coming up counts as one, and is logged
 * as the link being up again). */
void sf_link_inherit(struct sf_link *l, const struct sf_link *old);
/* Client: a link replaced by a new one (its ops->draining said so): it opens no more streams,
 * never dials again, and ends (ops->ended) once its last stream is over or it drops. */
void sf_link_retire(struct sf_link *l);
/* A reload changed the limits: the peer may have max_streams open at once from now on. 0 or
 * -ENOMEM. */
int sf_link_set_max_streams(struct sf_link *l, uint32_t max_streams);
/* Ends the link and its streams (their users see ECONNRESET) and frees it once libuv let go of
 * its handles. Safe on NULL and twice. */
void sf_link_close(struct sf_link *l);
