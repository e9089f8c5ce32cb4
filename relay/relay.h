#pragma once
/* The relay engine: one listener per forward, a libuv loop, single thread. */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "conf/conf.h"

struct sf_relay;

/* Per-forward counters, kept for `sockferry stats`. */
struct sf_relay_stats {
        uint64_t active;
        uint64_t total;  /* accepted */
        uint64_t closed; /* ended, whatever the cause: total = closed + active at any moment */
        uint64_t bytes_up;   /* client -> upstream */
        uint64_t bytes_down; /* upstream -> client */
        uint64_t err_refused;
        uint64_t err_timeout;
        uint64_t err_auth;
        uint64_t err_wrong_peer;
        uint64_t err_upstream; /* the host relay reported its upstream unreachable */
        uint64_t err_denied;   /* local peers refused by allow-uid/allow-gid */
        uint64_t err_other;
        uint64_t err_preauth;  /* unauthenticated connections closed for the pre-auth budget */
        uint64_t streams_opened; /* connections carried as streams of a shared link */
        char last_error[256];
        time_t last_error_time;
        int candidate; /* index into connect[] that worked last, -1 before the first */
};

typedef void (*sf_relay_stopped_cb)(struct sf_relay *relay, void *data);

/* Creates the relay for every forward of conf (which must outlive it) and loads the token
 * files of forwards with auth = token (-EINVAL etc. on a bad one, logged). Binds nothing. */
int sf_relay_new(uv_loop_t *loop, const struct sf_conf *conf, struct sf_relay **out);
/* Binds every listen socket (mode/owner/group exact, stale sockets replaced). On failure
 * everything bound so far is closed again. Returns 0 or -errno, logged with the fix. */
int sf_relay_bind(struct sf_relay *relay);
/* Starts accepting. */
int sf_relay_start(struct sf_relay *relay);

/* attach (relay/attach/host.h): the forwards' listeners are in the container, behind an exec's
 * link, whose streams reach the forwards through sf_relay_stream_new. Starts the engine and
 * the forwards without binding anything. 0 or -errno. */
int sf_relay_start_unbound(struct sf_relay *relay);
struct sf_mux_stream;
/* A stream of an exec link for the forward named service: a connection that dials its
 * candidates (takes s; refused with the names the relay knows when none has that name, or
 * with BUSY at max-conns). */
void sf_relay_stream_new(struct sf_relay *relay, struct sf_mux_stream *s, const char *service, bool probe);
struct sf_link_entry;
/* `link --stdio` (relay/attach/far.h): every candidate of every forward is reached through
 * the link of e, which the caller owns and frees after the relay. Before sf_relay_start. */
void sf_relay_use_link(struct sf_relay *relay, struct sf_link_entry *e);
/* Stops accepting, lets active connections finish for up to drain_ms, then closes them;
 * cb runs once every handle is closed. Safe to call twice: the first callback is kept, and a
 * second call with drain_ms 0 closes the remaining connections at once. */
void sf_relay_stop(struct sf_relay *relay, uint64_t drain_ms, sf_relay_stopped_cb cb, void *data);
typedef void (*sf_relay_fatal_cb)(struct sf_relay *relay, int err, void *data);
/* cb runs once, when a forward can no longer accept (its listening socket failed); the cause
 * is logged already. The owner decides what follows, normally sf_relay_stop(). */
void sf_relay_on_fatal(struct sf_relay *relay, sf_relay_fatal_cb cb, void *data);

/* What a reload did, forward by forward (file forwards and -F ones alike: a forward is
 * unchanged when every key and its token are the same). */
struct sf_relay_reload_counts {
        size_t added, removed, changed, unchanged;
};
/* Applies conf (which must outlive the relay, or the next reload; the previous one may be freed
 * once this returns 0) to the running relay: forwards added are bound and accept; removed ones
 * stop listening and their connections drain within conf's drain-timeout; changed ones (a key or
 * the token file's content) serve new connections with the new settings while the open ones keep
 * theirs, on the same listening socket unless the listen endpoint changed; unchanged ones keep
 * their socket and connections. Services follow their listener's new owner; client links no
 * forward uses any more close once their connections are gone. Any failure (a token file, a
 * socket that cannot be bound) changes nothing: -errno, logged. */
int sf_relay_reload(struct sf_relay *relay, const struct sf_conf *conf, struct sf_relay_reload_counts *out);
/* The configuration the relay runs now (the last one a reload applied). */
const struct sf_conf *sf_relay_conf(const struct sf_relay *relay);

/* Runs the loop until the relay has stopped and libuv has no handle left, in place of uv_run(loop,
 * UV_RUN_DEFAULT): on the Linux engine the relay's listeners and connections are served only by
 * this (relay/engine/engine.h). relay may be NULL. The process must ignore SIGPIPE: the Linux
 * engine's pipe path, which moves bulk data, has no MSG_NOSIGNAL. */
void sf_relay_run(uv_loop_t *loop, struct sf_relay *relay);

/* Frees the relay after it stopped (or was never started); removes its unix sockets. NULL-safe. */
void sf_relay_free(struct sf_relay *relay);

size_t sf_relay_n_forwards(const struct sf_relay *relay);
struct sf_listener;
/* The listener of forward (relay/listen/listener.h): between sf_relay_bind and sf_relay_start
 * its fd is the listening socket (a passed one keeps its number), and a unix socket's pinned
 * directory is its dirfd. NULL past the last forward. */
const struct sf_listener *sf_relay_listener(const struct sf_relay *relay, size_t forward);
const struct sf_relay_stats *sf_relay_stats_get(const struct sf_relay *relay, size_t forward);

struct sf_link_stats;
/* The relay's shared links, for stats: first those it dials (one per connect endpoint and
 * token), then those its listeners accepted, with i from 0. Fills st (relay/link/link.h) and
 * *forward (the accepting listener's forward, NULL for a dialled link); false past the last. */
bool sf_relay_link_stats(const struct sf_relay *relay, size_t i, struct sf_link_stats *st, const char **forward);
