#pragma once
/* The shared link's multiplexer (sockferry/2, doc/PROTOCOL.md "The shared link"): one HTTP/2
 * session (libnghttp2, with HTTP's messaging rules turned off) carries every client connection
 * of a link as a stream, with per-stream and per-link flow control, pings and a graceful
 * shutdown. The mux does no I/O of its own: the owner feeds it what it read from the link
 * (sf_mux_input) and writes what it hands out (sf_mux_output), so the same code runs over a
 * socket, a pipe or a fuzzer's bytes.
 *
 * A stream looks to its user (a relayed connection) like a non-blocking socket: recv, send,
 * shutdown for writing, close, and readiness events (SF_MUX_EV_*) delivered through a callback
 * once the mux is outside nghttp2's own callbacks (after sf_mux_input, sf_mux_output or a
 * stream call returns), so a user may call anything, close included, from its callback.
 *
 * Memory: a stream holds a receive buffer only while bytes sit in it and a send buffer only
 * while bytes wait to go out (pooled, SF_BUF_SIZE each); what the peer may send unread is
 * bounded by the stream window and, across all streams, by the link window; what a user may
 * queue is one send buffer per stream; the number of streams is bounded by max_streams. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sf_bufpool;
struct sf_mux;
struct sf_mux_stream;

enum sf_mux_role { SF_MUX_CLIENT, SF_MUX_SERVER };

/* Readiness of a stream, as the engine reports a socket's (relay/engine/engine.h). */
enum {
        SF_MUX_EV_IN = 0x1,    /* bytes to read, the end of the stream, or an error */
        SF_MUX_EV_OUT = 0x4,   /* room to send again */
        SF_MUX_EV_RDHUP = 0x8, /* the peer ended its side (half-close) */
        SF_MUX_EV_HUP = 0x10,  /* the stream is over both ways (finished, reset, link gone) */
        SF_MUX_EV_ERR = 0x20,  /* reset or refused: sf_mux_stream_error says why */
};

/* Stream status codes a server sends when a stream opens (the sf-status header field); the
 * numbers are the handshake's status codes (relay/link/frames.h) where they mean the same. */
enum sf_mux_status {
        SF_MUX_OK = 0,
        SF_MUX_UPSTREAM_UNAVAILABLE = 2,
        SF_MUX_UNKNOWN_SERVICE = 5,
        SF_MUX_BUSY = 6, /* max-conns reached on the host */
};

/* Longest service name (the configuration's forward names) and reason text on the wire. */
#define SF_MUX_SERVICE_MAX 63 /* SF_HS_SERVICE_MAX */
#define SF_MUX_REASON_MAX 255

struct sf_mux_config {
        uint32_t max_streams;   /* streams the peer may have open at once (SETTINGS) */
        uint32_t stream_window; /* bytes the peer may send on a stream before we read them */
        uint32_t link_window;   /* bytes in flight on the link, not yet taken into a stream */
        /* Streams the peer may reset: a burst, then so many a second (libnghttp2's rapid-reset
         * limiter, a server's only); beyond it the session ends (GOAWAY). */
        uint32_t resets_burst, resets_per_s;
};

/* A stream's window is one pooled buffer (SF_BUF_SIZE): what the peer may send unread fits
 * the buffer that holds it. What a link holds unread is at most stream_window x max_streams
 * (doc/PROTOCOL.md "Flow control"). */
#define SF_MUX_STREAM_WINDOW (256 * 1024)
/* Streams a link may carry at once: HTTP/2 allows more, the ids of one link do not. */
#define SF_MUX_STREAMS_MAX 65535
/* A client end's limit for its peer, which opens no streams (it only answers): this bounds
 * what a broken peer could make it hold. */
#define SF_MUX_CLIENT_END_STREAMS 16

/* The one place a link's settings come from, for both ends and attach: max_streams (capped at
 * SF_MUX_STREAMS_MAX), the stream window, the link window and the reset limits that go with
 * them. */
void sf_mux_config_init(struct sf_mux_config *cfg, uint64_t max_streams);

struct sf_mux_ops {
        /* Server: the peer opened a stream for service ("" when it named none; by_default when
         * the name is its forward's own, not one it asked for: a single service may answer
         * it whatever its name); probe when it only asks whether the service answers. The owner answers it with sf_mux_stream_accept
         * or sf_mux_stream_refuse (now or later) and owns it until sf_mux_stream_close. */
        void (*stream_new)(void *owner, struct sf_mux_stream *s, const char *service, bool by_default, bool probe);
        /* The mux has bytes for the link: the owner calls sf_mux_output (it may defer that to
         * the end of its turn, so that one write carries every stream's bytes). */
        void (*want_output)(void *owner);
        /* The answer to the ping sent with sf_mux_ping(m, sent) came back. */
        void (*pong)(void *owner, uint64_t sent);
        /* The peer sent GOAWAY: it takes no new streams (its open ones go on). NULL: ignored. */
        void (*goaway)(void *owner);
};

/* A new session for role; pool lends the streams' buffers. 0 or -ENOMEM. */
int sf_mux_new(enum sf_mux_role role, const struct sf_mux_config *cfg, const struct sf_mux_ops *ops, void *owner,
               struct sf_bufpool *pool, struct sf_mux **out);
/* Ends the session: every stream still open ends with ECONNRESET and cause as its reason (e.g.
 * "the link to X went down: ..."), its user is told, and it stays a closed socket until its
 * user closes it. NULL-safe. Not from inside an ops or stream callback. */
void sf_mux_free(struct sf_mux *m, const char *cause);

/* Bytes read from the link. 0, or -EPROTO when the peer broke the protocol (why says how, in
 * plain words): the owner ends the link. */
int sf_mux_input(struct sf_mux *m, const uint8_t *data, size_t len, char *why, size_t why_cap);
/* Copies the next bytes to write to the link into buf (at most cap): their length, 0 when
 * there is nothing to send, or -EPROTO (why says it). */
ssize_t sf_mux_output(struct sf_mux *m, uint8_t *buf, size_t cap, char *why, size_t why_cap);
/* The same without the copy: *p points at the next bytes to write, in the mux's own memory;
 * their length, 0 when there is nothing to send, or -EPROTO (why says it). They stay valid
 * and unchanged until the owner calls sf_mux_output_advance with what it wrote (0 included)
 * and until the next sf_mux_output or sf_mux_output_peek: what was not written comes again.
 * Stream callbacks may run in here, as in sf_mux_output. */
ssize_t sf_mux_output_peek(struct sf_mux *m, const uint8_t **p, char *why, size_t why_cap);
/* n bytes of those sf_mux_output_peek gave were written. */
void sf_mux_output_advance(struct sf_mux *m, size_t n);
/* Sends a ping carrying sent (the owner's clock); its answer reaches ops->pong. 0 or -ENOMEM. */
int sf_mux_ping(struct sf_mux *m, uint64_t sent);
/* Graceful shutdown (SIGTERM): the peer may open no more streams (GOAWAY); open ones go on. */
void sf_mux_drain(struct sf_mux *m);
/* Whether the peer's SETTINGS arrived: before, its stream limit is not known, and streams
 * opened beyond it would be refused, so a link is used once it is ready. */
bool sf_mux_ready(const struct sf_mux *m);
/* Whether the peer asked us to stop opening streams (it sent GOAWAY), or we are draining. */
bool sf_mux_draining(const struct sf_mux *m);
/* A reload changed the limits: the peer hears of the new max_streams (SETTINGS). 0 or -ENOMEM. */
int sf_mux_set_max_streams(struct sf_mux *m, uint32_t max_streams);
/* Client: whether the session can open no stream any more (its stream ids ran out): the owner
 * takes a new link for new streams and lets this one drain. */
bool sf_mux_exhausted(const struct sf_mux *m);
/* Client: the next stream id this session opens (the test hook that starts a link's ids near
 * the end, SF_TEST_STREAM_ID_START). 0 or -EINVAL. */
int sf_mux_set_next_stream_id(struct sf_mux *m, uint32_t id);
/* Streams open now, and since the start. */
size_t sf_mux_streams_open(const struct sf_mux *m);
uint64_t sf_mux_streams_total(const struct sf_mux *m);

/* Client: opens a stream for service (NULL or "": none named; by_default: see stream_new);
 * its bytes may follow at once. NULL with *err (-ENOMEM, -EAGAIN when the peer refuses new
 * streams: it is draining). */
struct sf_mux_stream *sf_mux_stream_open(struct sf_mux *m, const char *service, bool by_default, bool probe,
                                         int *err);

/* Where a stream's readiness goes: cb(ev, events) with SF_MUX_EV_* bits. */
void sf_mux_stream_watch(struct sf_mux_stream *s, void (*cb)(void *ev, uint32_t events), void *ev);
/* Server: the upstream answers; the stream's bytes may flow back. The answer (sf-status 0)
 * goes out with the stream's first bytes or its end, in their frame's write; a probe's at
 * once. */
int sf_mux_stream_accept(struct sf_mux_stream *s);
/* Server: refuses the stream with status and reason (plain words for the client's log). */
int sf_mux_stream_refuse(struct sf_mux_stream *s, enum sf_mux_status status, const char *reason);

/* n, 0 at the end of the peer's side, -1 with errno: EAGAIN (nothing yet), ECONNRESET (reset,
 * or the link went down), ECONNREFUSED (the server refused the stream). */
ssize_t sf_mux_stream_recv(struct sf_mux_stream *s, void *buf, size_t n);
/* n (some or all), or -1 with errno EAGAIN (the send buffer is full: SF_MUX_EV_OUT follows),
 * EPIPE (shut or over) or ECONNRESET. */
ssize_t sf_mux_stream_send(struct sf_mux_stream *s, const void *buf, size_t n);
/* recv without the copy, for a caller whose buffers come from pool (SF_BUF_SIZE each) and
 * whose *buf holds nothing: the stream's receive buffer is handed over whole (the caller's
 * goes back to the pool), its bytes at (*buf)[*off, *off + n). Returns n, or as recv does;
 * from another pool the bytes are copied into *buf (taken from pool when NULL), *off 0. */
ssize_t sf_mux_stream_recv_buf(struct sf_mux_stream *s, struct sf_bufpool *pool, char **buf, uint32_t *off);
/* send without the copy: *p, *room is the free end of the stream's send buffer (taken from
 * the pool when it has none; room may be 0). 0, or -1 with errno as send says it. The caller
 * puts bytes there and says how many with sf_mux_stream_commit (0 included) before any other
 * call into the mux. */
int sf_mux_stream_send_space(struct sf_mux_stream *s, char **p, size_t *room);
void sf_mux_stream_commit(struct sf_mux_stream *s, size_t n);
/* Whether the free end of the send buffer holds min bytes (or sending fails anyway: send says
 * why); when not, SF_MUX_EV_OUT follows once there is room, as after a send that said EAGAIN. */
bool sf_mux_stream_has_room(struct sf_mux_stream *s, size_t min);
/* Ends our side once what was sent has gone (half-close). */
void sf_mux_stream_shutdown(struct sf_mux_stream *s);
/* The user is done with s. When both sides were ended (the peer's, and ours with
 * sf_mux_stream_shutdown) what is queued still goes out; any other stream is reset (CANCEL).
 * Frees s once the session let go of it. Safe on NULL. */
void sf_mux_stream_close(struct sf_mux_stream *s);
/* 0, or the errno the stream failed with (as recv reports it). */
int sf_mux_stream_error(const struct sf_mux_stream *s);
/* Plain words for why it failed ("" when it did not). */
const char *sf_mux_stream_reason(const struct sf_mux_stream *s);
/* Client: the server's status once it answered (-1 before). */
int sf_mux_stream_status(const struct sf_mux_stream *s);
/* Client: whether the stream's opening went out (false while it waits for a free place under
 * the peer's max_streams). */
bool sf_mux_stream_sent(const struct sf_mux_stream *s);
/* Bytes received and not read yet. */
size_t sf_mux_stream_unread(const struct sf_mux_stream *s);
int32_t sf_mux_stream_id(const struct sf_mux_stream *s);
