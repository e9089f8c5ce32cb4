#pragma once
/* One relayed connection: dial the candidates, run the link handshake, copy both ways with
 * backpressure and half-close, and free everything in one place. */
#include <stdbool.h>

#include "relay/forward.h"

struct sf_conn;

/* Takes ownership of in (an accepted connection): on failure it is closed. */
int sf_conn_new(struct sf_fwd *fwd, struct sf_incoming *in);
/* Closes both sockets and frees the connection once libuv released its handles. Safe to call
 * twice; reason (may be NULL) is logged at debug level. */
void sf_conn_close(struct sf_conn *c, const char *reason);
/* A host relay's connection for a stream of a shared link (the stream is its client side),
 * dialling fwd's candidates now; probe: tell the stream whether the upstream answers, then
 * end. A forward at max-conns or stopping refuses the stream as busy, in words that name it
 * by label ("service docker", "[docker]"). Takes ownership of s: on failure it is refused and
 * closed. 0, -EBUSY or -ENOMEM. */
struct sf_mux_stream;
int sf_conn_new_stream(struct sf_fwd *fwd, struct sf_mux_stream *s, bool probe, const char *label);
/* Closes every open connection of fwd (the drain timeout at shutdown). */
void sf_conn_close_all(struct sf_fwd *fwd, const char *reason);
