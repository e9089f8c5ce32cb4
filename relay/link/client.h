#pragma once
/* The client half of the sockferry/1 handshake (doc/PROTOCOL.md), without I/O: a relay's
 * connection toward a candidate (relay/conn/handshake.c), a shared link's dial
 * (relay/link/link.c) and `sockferry check` (shim/cmd_check.c) feed it what the peer sends and
 * send what it gives, so all three speak the protocol, and name its failures, one way. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/link/frames.h"
#include "relay/link/messages.h"

/* Our client frame and its service extension. */
#define SF_HSC_FRAME_MAX (SF_HS_CLIENT_LEN + SF_HS_SERVICE_EXT_MAX)

enum sf_hsc_step {
        SF_HSC_MORE,     /* more of the peer's bytes are needed (sf_hs_client_need says how many) */
        SF_HSC_FRAME,    /* the hello came: send sf_hs_client_frame's bytes, then go on reading */
        SF_HSC_OK,       /* the status verified OK; reason holds its text (what a link's host offers) */
        SF_HSC_OLD_PEER, /* the peer verified our frame but not its flags: a relay from before links
                          * (LINK asked), or before services (a service named): ask it the old way */
        SF_HSC_FAILED,   /* kind and msg say why, in relay/link/messages.h's words */
};

struct sf_hs_client {
        /* The caller's, set before the first input and kept as long as the handshake runs. */
        const struct sf_hs_key *key;
        const char *ep;         /* the candidate as written, for messages */
        const char *token_file; /* for messages; NULL: "token-file" */
        const char *forward;    /* the forward's name, for the fix of an unknown service */
        uint8_t flags;          /* SF_HS_FLAG_PROBE and SF_HS_FLAG_LINK */
        const char *service;    /* the service asked for; NULL: none named (an older relay) */
        bool service_set;       /* the forward named it (service =), not its own name by default */

        /* What came of it. */
        enum sf_link_err kind;
        char msg[400];
        char reason[SF_HS_REASON_MAX + 1];

        /* Its own. */
        bool hello_done;
        uint8_t sent_flags;
        uint8_t snonce[SF_HS_NONCE_LEN], cnonce[SF_HS_NONCE_LEN];
        uint8_t in[SF_HS_STATUS_MAX];
        size_t have;
};

/* Starts over (a new connection to the same or another candidate): the caller's fields stay. */
void sf_hs_client_reset(struct sf_hs_client *h);
/* How many bytes the frame it reads still needs (at least 1 while it reads one): a caller that
 * must not read past the handshake (the upstream's bytes follow the status) reads no more. */
size_t sf_hs_client_need(const struct sf_hs_client *h);
/* n bytes the peer sent; *used says how many it took (at most sf_hs_client_need, or a little
 * more of a wrong peer's first bytes, to quote them). */
enum sf_hsc_step sf_hs_client_input(struct sf_hs_client *h, const uint8_t *in, size_t n, size_t *used);
/* After SF_HSC_FRAME: our frame into out; its length. */
size_t sf_hs_client_frame(struct sf_hs_client *h, uint8_t out[SF_HSC_FRAME_MAX]);
/* The peer closed, or nothing came within ms: SF_HSC_FAILED with the words for where the
 * handshake was. */
enum sf_hsc_step sf_hs_client_eof(struct sf_hs_client *h);
enum sf_hsc_step sf_hs_client_timeout(struct sf_hs_client *h, uint64_t ms);
