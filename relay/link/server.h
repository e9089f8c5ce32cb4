#pragma once
/* The server end of shared links (doc/PROTOCOL.md "The shared link"): the set of links one
 * listener accepted (a host relay), or attach's exec link. It knows nothing of forwards: each
 * stream a peer opens goes to the owner's route callback, which answers it (relay/link/mux.h,
 * sf_mux_stream_accept or sf_mux_stream_refuse) and owns it from then on. The set counts its
 * links against max_links, applies new limits to open links (a reload), drains them (SIGTERM,
 * a listener a reload closed), and passes to a new owner with the listener. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct sf_bufpool;
struct sf_engine;
struct sf_link;
struct sf_link_server;
struct sf_mux_stream;

struct sf_link_route {
        /* A stream of one of the links: service as it asked ("" for none), by_default when the
         * name is its forward's own, probe when it only asks whether the service answers; peer
         * names the link for messages. */
        void (*stream)(void *owner, struct sf_mux_stream *s, const char *service, bool by_default, bool probe,
                       const char *peer);
        /* A link of the set is up (the peer's settings came); NULL: nothing to do. */
        void (*up)(void *owner, struct sf_link *l);
        /* A link of the set ended (the peer closed it, or it broke: sf_link_cause says why, until
         * the end of this loop turn); the set no longer has it. NULL: nothing to do. */
        void (*ended)(void *owner, struct sf_link *l);
};

struct sf_link_server_limits {
        uint64_t max_streams;  /* per link (SETTINGS), capped at SF_MUX_STREAMS_MAX */
        uint32_t max_links;    /* links at once; 0: no limit (attach's one exec link) */
        uint64_t keepalive_ms; /* pings; 0: none */
};

int sf_link_server_new(uv_loop_t *loop, struct sf_bufpool *pool, struct sf_engine *eng,
                       const struct sf_link_route *route, void *owner, const struct sf_link_server_limits *lim,
                       struct sf_link_server **out);
/* Ends every link now (their streams end; no ended callback): attach stops, or its command
 * exited. The set stays. */
void sf_link_server_close(struct sf_link_server *ls);
/* Closes every link (their streams end) and frees the set. NULL-safe. */
void sf_link_server_free(struct sf_link_server *ls);

/* Whether another link would be over max_links. */
bool sf_link_server_full(const struct sf_link_server *ls);
/* A link over rd/wr (one stream for a socket), which the set now owns and closes with close_cb
 * (NULL: free()); peer names it in messages ("198.18.0.2:41234 (tcp:...)"); quiet: a link of
 * `sockferry check`, whose end is logged at debug level. 0, or -ENOMEM (rd/wr closed); over
 * max_links the caller refused it already (sf_link_server_full). The link is out, with *out
 * set when out is not NULL. */
int sf_link_server_adopt(struct sf_link_server *ls, const char *peer, bool quiet, uv_stream_t *rd, uv_stream_t *wr,
                         uv_close_cb close_cb, struct sf_link **out);

/* The set belongs to owner from now on (a reload gave its listener to another forward object). */
void sf_link_server_set_owner(struct sf_link_server *ls, void *owner);
/* New limits for new links and for the open ones: their peers hear of max_streams (SETTINGS). */
void sf_link_server_set_limits(struct sf_link_server *ls, const struct sf_link_server_limits *lim);
/* No new streams on any link (GOAWAY); open ones go on. New links are refused from now on. */
void sf_link_server_drain(struct sf_link_server *ls);
/* Ends the links that carry no stream; true while some remain. */
bool sf_link_server_close_idle(struct sf_link_server *ls);

size_t sf_link_server_size(const struct sf_link_server *ls);
/* The i-th link, for stats; NULL past the last. */
struct sf_link *sf_link_server_at(const struct sf_link_server *ls, size_t i);
