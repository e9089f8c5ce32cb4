#pragma once
/* A forward's accept loop (relay/listen/accept.c): batches, admission of local peers, pauses
 * at max-conns and when out of descriptors. */
#include "relay/forward.h"

/* Starts accepting: the backoff timer (once), the listener watched. 0 or -errno (logged). */
int sf_fwd_start(struct sf_fwd *fwd);
/* Stops accepting until resumed (max-conns, out of descriptors) or for good (stop). */
void sf_fwd_listen_pause(struct sf_fwd *fwd);

/* Called by a connection when it is gone (memory about to be freed), so the forward can
 * resume a listener paused by max-conns and finish a graceful stop. */
void sf_fwd_conn_gone(struct sf_fwd *fwd);

/* Out of descriptors (err: EMFILE, ENFILE, ...) while doing `what`: stops accepting and
 * retries with a growing backoff, so that clients wait in the backlog instead of being
 * accepted only to fail; logged at most once a minute. */
void sf_fwd_pause_out_of_fds(struct sf_fwd *fwd, const char *what, int err);
