#pragma once
/* Plain words for the failures of a link handshake, seen from the connecting side: the relay
 * logs them and counts them, `sockferry check` prints them. One wording for both, so a person
 * who saw one in a log recognises it in a health check. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/endpoint.h"
#include "relay/link/frames.h"

/* Which counter of struct sf_relay_stats a failure belongs to. */
enum sf_link_err {
        SF_LINK_OK = 0,
        SF_LINK_WRONG_PEER, /* the peer is not a sockferry relay, or closed without confirming */
        SF_LINK_AUTH,       /* the tokens differ */
        SF_LINK_UPSTREAM,   /* the host relay could not reach its upstream */
        SF_LINK_TIMEOUT,    /* the link was not confirmed in time */
        SF_LINK_OTHER,      /* version mismatch, an unknown status */
};

/* Why connecting to ep failed with errno e, and what to do: "Connection refused — is the
 * host-side relay running ...", a directory where a unix socket should be, AF_VSOCK denied by
 * a seccomp profile, ... */
void sf_link_connect_cause(const struct sf_endpoint *ep, int e, char *out, size_t cap);
/* The connect to ep did not finish within ms. */
void sf_link_timeout_cause(const struct sf_endpoint *ep, uint64_t ms, char *out, size_t cap);
/* Why a dial that returned r (-errno) failed: the timeout's words for -ETIMEDOUT, else
 * sf_link_connect_cause's. */
void sf_link_dial_cause(const struct sf_endpoint *ep, int r, uint64_t timeout_ms, char *out, size_t cap);
/* ep's host name did not resolve; why is the resolver's message. */
void sf_link_resolve_cause(const struct sf_endpoint *ep, const char *why, char *out, size_t cap);

/* Each writes a sentence naming the endpoint ep (as written in the configuration), the cause
 * and the fix into out, and returns the kind. */

/* The first len bytes of the peer's greeting are not a sockferry hello; got is quoted. */
enum sf_link_err sf_link_wrong_peer(const uint8_t *got, size_t len, const char *ep, char *out, size_t cap);
/* An exec link's far end sent got (len bytes) before its first frames: not sockferry, or the
 * engine's own words on stdout; the sentence, quoting them, in out. */
void sf_link_exec_noise(const uint8_t *got, size_t len, char *out, size_t cap);
/* The peer closed after len bytes of its greeting (len may be 0). */
enum sf_link_err sf_link_hello_eof(size_t len, const char *ep, char *out, size_t cap);
/* Nothing arrived within ms. */
enum sf_link_err sf_link_hello_timeout(uint64_t ms, const char *ep, char *out, size_t cap);
/* Connecting side of a forward with auth = none: got is the first len bytes the upstream
 * sent. True, with the sentence in out, when they are a sockferry greeting (the magic and a
 * version byte): the upstream is a relay with auth = token, whose greeting the client would
 * otherwise receive as data. forward is the forward's name, for the fix. */
bool sf_link_greeting_unexpected(const uint8_t *got, size_t len, const char *ep, const char *forward, char *out,
                                 size_t cap);
/* The hello announced another version. */
enum sf_link_err sf_link_version_mismatch(unsigned version, const char *ep, char *out, size_t cap);
/* The peer greeted us, then closed before its status frame was complete. */
enum sf_link_err sf_link_status_eof(const char *ep, char *out, size_t cap);
/* The status frame did not arrive in time. */
enum sf_link_err sf_link_status_timeout(const char *ep, char *out, size_t cap);
/* A whole status frame: parse_r and st as sf_hs_status_parse returned them, reason its text.
 * Returns SF_LINK_OK (out empty) only for a verified OK. token_file may be NULL. */
enum sf_link_err sf_link_status_explain(int parse_r, enum sf_hs_status st, const char *reason, const char *ep,
                                        const char *token_file, char *out, size_t cap);
