#pragma once
/* Run-time state of one forward: its listener (accepting: relay/listen/accept.c), the state its
 * connections share, and its counters. The relay owns it and sets the callbacks. */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "conf/conf.h"
#include "conf/log.h"
#include "relay/conn/preauth_budget.h"
#include "relay/engine/engine.h"
#include "relay/link/frames.h"
#include "relay/list.h"
#include "relay/listen/listener.h"
#include "relay/relay.h"

struct sf_conn;
struct sf_bufpool;
struct sf_link_entry;
struct sf_link_server;
struct sf_link_server_limits;
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
        /* The shared link a candidate is reached through (NULL: dialled per connection), and
         * candidates found to be relays from before services (their handshake is sent without
         * the service extension). */
        struct sf_link_entry *links[SF_MAX_CANDIDATES];
        bool cand_plain[SF_MAX_CANDIDATES];
        /* connect-auth, resolved: the handshake toward network candidates. */
        bool connect_key;

        /* Services: the forward that owns the listener this one shares (NULL: its own, or
         * none shared), the next service of the same listener, and on the owner the shared
         * links it accepted (relay/link/server.h; made by the relay, whose route callback
         * gives their streams to the services). */
        struct sf_fwd *group;
        struct sf_fwd *next_service;
        struct sf_link_server *links_in;

        uint64_t next_conn_id;
        struct sf_list conns; /* the open connections (struct sf_conn) */
        size_t n_conns_allocated; /* open or closing, memory not yet freed */
        /* Its counters: shared with the object it replaced in a reload that changed it, whose
         * connections go on counting in them (total = closed + active at every moment). */
        struct sf_relay_stats *stats;
        /* Greeted, not yet authenticated: not counted against max-conns
         * (relay/conn/preauth_budget.h). */
        struct sf_preauth preauth;

        struct sf_log_ratelimit ratelimit; /* per-connection error lines */
};

/* Sets fwd up for the forward fc of conf (both must outlive it): its engine, pool and
 * loop, no listener yet, and its token when auth = token (read now, before binding and before
 * privileges are dropped: a problem with it is a configuration error, and the file may be
 * readable by root only). The owner sets the callbacks. 0 or -errno, logged. */
int sf_fwd_init(struct sf_fwd *fwd, const struct sf_conf *conf, const struct sf_forward *fc, uv_loop_t *loop,
                struct sf_bufpool *pool, struct sf_engine *eng);
/* Closes the listener, wipes the key, frees the pre-auth budget and its share of the counters.
 * Safe to call twice. */
void sf_fwd_free(struct sf_fwd *fwd);
/* fwd replaces from (a reload changed the forward): one set of counters for both from now on. */
void sf_fwd_stats_share(struct sf_fwd *fwd, struct sf_fwd *from);

/* The service of owner's listener that answers a client asking for name ("" for none;
 * by_default: the client's own forward name, any single service answers it). NULL with why
 * (what the listener offers) when none does. */
struct sf_fwd *sf_fwd_service(struct sf_fwd *owner, const char *name, bool by_default, char *why, size_t cap);

/* What the listener of owner (the first forward on it) offers its shared links: "offers a, b"
 * into out, and the limits its link set applies (the streams of a link are every service's
 * max-conns together; max-links within an eighth of the descriptor limit). */
void sf_fwd_offers(const struct sf_fwd *owner, char *out, size_t cap, struct sf_link_server_limits *lim);

/* Counts an error in *counter (one of fwd->stats) and keeps msg as the last error. */
void sf_fwd_note_error(struct sf_fwd *fwd, uint64_t *counter, const char *msg);

/* true when a per-connection error line may be logged now (at most a few per second per
 * forward; the count of suppressed lines is logged with the next one). */
bool sf_fwd_ratelimit(struct sf_fwd *fwd);
