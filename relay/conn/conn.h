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
/* Closes every open connection of fwd (the drain timeout at shutdown). */
void sf_conn_close_all(struct sf_fwd *fwd, const char *reason);
