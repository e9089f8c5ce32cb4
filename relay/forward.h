#pragma once
/* Run-time state of one forward: its listener (relay/forward.c), the state its connections
 * share, and its counters. The relay owns it and sets the callbacks. */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "conf/conf.h"
#include "relay/engine.h"
#include "relay/handshake.h"
#include "relay/listener.h"
#include "relay/preauth.h"
#include "relay/relay.h"

struct sf_conn;
struct sf_bufpool;
struct sf_pipepool;

struct sf_fwd {
        struct sf_relay *relay; /* for the callbacks */
        /* Set by the relay before sf_fwd_start. accepted takes ownership of in (an accepted
         * connection); conn_gone runs after sf_fwd_conn_gone did its part; fatal once
         * the listening socket failed (logged). */
        int (*accepted)(struct sf_fwd *fwd, struct sf_incoming *in);
        void (*conn_gone)(struct sf_fwd *fwd);
        void (*fatal)(struct sf_fwd *fwd, int err);
        uv_loop_t *loop;
        const struct sf_forward *conf;
        struct sf_bufpool *pool;
        struct sf_engine *eng;

        struct sf_listener listener;
        struct sf_watch listen_watch;
        bool listen_started; /* between sf_relay_start and sf_relay_stop */
        bool listening;      /* watched for connections */
        uv_timer_t backoff;  /* accept retry after EMFILE/ENFILE */
        bool backoff_init;
        uint64_t backoff_ms;
        bool paused_full;    /* max-conns reached */
        bool paused_fds;     /* out of file descriptors */
        uint64_t fds_logged_ms;

        struct sf_hs_key key;
        bool has_key;
        const char *token_file; /* for messages: never the token itself */

        int last_good;                            /* candidate to try first, -1 none */
        bool cand_failing[SF_MAX_CANDIDATES];     /* logged as failing: log again on recovery */

        uint64_t next_conn_id;
        struct sf_conn *conns; /* intrusive list of open connections */
        size_t n_conns_allocated; /* open or closing, memory not yet freed */
        struct sf_relay_stats stats;
        /* Greeted, not yet authenticated: not counted against max-conns (relay/preauth.h). */
        struct sf_preauth preauth;

        uint64_t ratelimit_start_ms; /* one-second windows for per-connection error lines */
        unsigned ratelimit_count;
        unsigned ratelimit_suppressed;
};

/* Starts accepting: the backoff timer, the listener watched. 0 or -errno (logged). */
int sf_fwd_start(struct sf_fwd *fwd);
/* Stops accepting until resumed (max-conns, out of descriptors) or for good (stop). */
void sf_fwd_listen_pause(struct sf_fwd *fwd);

/* Called by a connection when it is gone (memory about to be freed), so the forward can
 * resume a listener paused by max-conns and finish a graceful stop. */
void sf_fwd_conn_gone(struct sf_fwd *fwd);

/* Counts an error in *counter (one of fwd->stats) and keeps msg as the last error. */
void sf_fwd_note_error(struct sf_fwd *fwd, uint64_t *counter, const char *msg);

/* Out of descriptors (err: EMFILE, ENFILE, ...) while doing `what`: stops accepting and
 * retries with a growing backoff, so that clients wait in the backlog instead of being
 * accepted only to fail; logged at most once a minute. */
void sf_fwd_pause_out_of_fds(struct sf_fwd *fwd, const char *what, int err);

/* true when a per-connection error line may be logged now (at most a few per second per
 * forward; the count of suppressed lines is logged with the next one). */
bool sf_fwd_ratelimit(struct sf_fwd *fwd);
