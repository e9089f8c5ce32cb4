#pragma once
/* sockferry/1 link handshake frames (doc/PROTOCOL.md). Pure functions over byte buffers:
 * no I/O, no allocation, no logging except sf_hs_init. HMAC-SHA256, randomness and
 * comparison come from libsodium. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SF_HS_MAGIC "SFRY"
#define SF_HS_MAGIC_LEN 4
#define SF_HS_VERSION 1
#define SF_HS_NONCE_LEN 32
#define SF_HS_MAC_LEN 32
#define SF_HS_KEY_MIN 32
#define SF_HS_KEY_MAX 128
/* server hello: magic(4) version(1) server-nonce(32) */
#define SF_HS_HELLO_LEN 37
/* client frame: magic(4) version(1) flags(1) client-nonce(32) mac(32) */
#define SF_HS_CLIENT_LEN 70
/* status frame: status(1) reason-length(1) reason(0..255) mac(32) */
#define SF_HS_STATUS_MIN 34
#define SF_HS_STATUS_MAX (SF_HS_STATUS_MIN + 255)
#define SF_HS_REASON_MAX 255

/* client frame flags */
#define SF_HS_FLAG_PROBE 0x01 /* check: verify the upstream answers, then close */
#define SF_HS_FLAG_LINK 0x02  /* the client asks for a shared link (sockferry/2) after the status */
#define SF_HS_FLAG_SERVICE 0x04 /* a service extension follows the frame (sf_hs_service_build) */
/* With SERVICE: the name is the client forward's own, not one it asked for: a listener that
 * offers a single service answers whatever its name, one that offers several matches it. */
#define SF_HS_FLAG_DEFAULT 0x08
#define SF_HS_FLAGS_KNOWN (SF_HS_FLAG_PROBE | SF_HS_FLAG_LINK | SF_HS_FLAG_SERVICE | SF_HS_FLAG_DEFAULT)

enum sf_hs_status {
        SF_HS_OK = 0,
        SF_HS_AUTH_REJECTED = 1,
        SF_HS_UPSTREAM_UNAVAILABLE = 2,
        SF_HS_VERSION_MISMATCH = 3,
        SF_HS_BAD_FRAME = 4,
        SF_HS_UNKNOWN_SERVICE = 5,
};

/* service extension: length(1) name(1..SF_HS_SERVICE_MAX) mac(32), after the client frame */
#define SF_HS_SERVICE_MAX 63
#define SF_HS_SERVICE_EXT_MAX (1 + SF_HS_SERVICE_MAX + SF_HS_MAC_LEN)

struct sf_hs_key {
        uint8_t bytes[SF_HS_KEY_MAX];
        size_t len; /* SF_HS_KEY_MIN..SF_HS_KEY_MAX as sf_token_load returns it */
};

/* Initialises libsodium; every other sf_hs_* function needs it done once. Idempotent and
 * thread-safe. sf_token_load and sf_token_generate call it themselves, so code holding a key
 * from sf_token_load is covered. Returns 0 or -EIO (logged). */
int sf_hs_init(void);

/* Plain words for a status code; "unknown status" for codes this version does not define. */
const char *sf_hs_status_name(enum sf_hs_status st);

/* Fills nonce with random bytes (libsodium). */
void sf_hs_nonce_new(uint8_t nonce[SF_HS_NONCE_LEN]);

/* Checks the first len bytes received of a hello or client frame (both start magic, version)
 * so a reader can give up before the whole frame arrived: -EPROTO as soon as they differ from
 * the magic (not a sockferry peer); -EPROTONOSUPPORT once the version byte is there and is not
 * SF_HS_VERSION (*version says which, version may be NULL); 0 while they could still be one. */
int sf_hs_prefix_check(const uint8_t *in, size_t len, uint8_t *version);

void sf_hs_hello_build(uint8_t out[SF_HS_HELLO_LEN], const uint8_t snonce[SF_HS_NONCE_LEN]);
/* 0 and snonce filled; -EPROTO when in[] is not a sockferry greeting (wrong magic);
 * -EPROTONOSUPPORT when the version differs (*version says which; version may be NULL). */
int sf_hs_hello_parse(const uint8_t in[SF_HS_HELLO_LEN], uint8_t snonce[SF_HS_NONCE_LEN], uint8_t *version);

void sf_hs_client_build(uint8_t out[SF_HS_CLIENT_LEN], const struct sf_hs_key *key,
                        const uint8_t snonce[SF_HS_NONCE_LEN], const uint8_t cnonce[SF_HS_NONCE_LEN],
                        uint8_t flags);
/* 0 when the frame verifies; -EPROTO bad magic (nothing filled: close without a status frame);
 * -EPROTONOSUPPORT other version; -EACCES MAC mismatch (compared in constant time); -EBADMSG
 * the MAC verifies but flags has bits outside SF_HS_FLAGS_KNOWN. Except for -EPROTO, cnonce,
 * *flags and *version are filled from the frame's sockferry/1 offsets, so the server can always
 * answer with a status frame (VERSION_MISMATCH, AUTH_REJECTED, BAD_FRAME). version may be NULL. */
int sf_hs_client_verify(const uint8_t in[SF_HS_CLIENT_LEN], const struct sf_hs_key *key,
                        const uint8_t snonce[SF_HS_NONCE_LEN], uint8_t cnonce[SF_HS_NONCE_LEN],
                        uint8_t *flags, uint8_t *version);

/* Writes the service extension for name (1..SF_HS_SERVICE_MAX bytes of [A-Za-z0-9._-]) to out
 * (room for SF_HS_SERVICE_EXT_MAX) and returns its length, or 0 for a name that cannot be one.
 * Its MAC binds the name to this connection's nonces: a relay that relays our connection to
 * another listener holding the same token cannot make it answer for another service. */
size_t sf_hs_service_build(uint8_t *out, const struct sf_hs_key *key, const uint8_t snonce[SF_HS_NONCE_LEN],
                           const uint8_t cnonce[SF_HS_NONCE_LEN], const char *name);
/* Given len bytes received of an extension: its whole length once its first byte is there (0
 * before). */
size_t sf_hs_service_ext_len(const uint8_t *in, size_t len);
/* The extension at in (len bytes, at least its whole length): 0 and name filled (NUL-terminated)
 * when it verifies; -EACCES when its MAC does not; -EBADMSG when it is no name at all (empty,
 * too long, a byte outside [A-Za-z0-9._-]). */
int sf_hs_service_verify(const uint8_t *in, size_t len, const struct sf_hs_key *key,
                         const uint8_t snonce[SF_HS_NONCE_LEN], const uint8_t cnonce[SF_HS_NONCE_LEN],
                         char name[SF_HS_SERVICE_MAX + 1]);
/* Whether name may be a service name. */
bool sf_hs_service_valid(const char *name);

/* Copies reason into out as printable ASCII, at most SF_HS_REASON_MAX bytes: receivers show
 * any other byte as '?', so the dashes of our own messages (U+2013, U+2014) become '-' and
 * any other UTF-8 sequence one '?'. Returns the length (out is not NUL-terminated). */
size_t sf_hs_reason_ascii(uint8_t *out, const char *reason);

/* Writes a status frame to out (room for SF_HS_STATUS_MAX bytes) and returns its length; reason
 * (NULL for none) goes on the wire as printable ASCII (an en or em dash as '-', any other non-ASCII
 * character as '?'), cut at SF_HS_REASON_MAX bytes. Frames sent before the client is authenticated
 * must carry no host details in reason. */
size_t sf_hs_status_build(uint8_t *out, const struct sf_hs_key *key, const uint8_t snonce[SF_HS_NONCE_LEN],
                          const uint8_t cnonce[SF_HS_NONCE_LEN], enum sf_hs_status status, const char *reason);
/* Given len bytes received so far: returns the full frame length once known (>= SF_HS_STATUS_MIN)
 * or 0 if fewer than 2 bytes are there. */
size_t sf_hs_status_frame_len(const uint8_t *in, size_t len);
/* Parses the status frame at the start of in (bytes after it are not looked at). -EBADMSG when
 * len is shorter than the frame (nothing filled). 0 and *status/reason filled when the MAC
 * verifies; -EACCES when it does not (status and reason are still filled, unauthenticated).
 * reason is NUL-terminated with every byte outside printable ASCII replaced by '?', so it can
 * be logged as is. *status may be a code this version does not define: anything but SF_HS_OK
 * is a refusal. */
int sf_hs_status_parse(const uint8_t *in, size_t len, const struct sf_hs_key *key,
                       const uint8_t snonce[SF_HS_NONCE_LEN], const uint8_t cnonce[SF_HS_NONCE_LEN],
                       enum sf_hs_status *status, char reason[SF_HS_REASON_MAX + 1]);

/* Renders bytes a peer sent for a "wrong peer" message: printable ASCII as is, \" \\ \r \n \t
 * and \xNN for the rest, "..." when out is too small. Always NUL-terminates (outlen > 0);
 * returns the string length. */
size_t sf_hs_quote(const uint8_t *in, size_t len, char *out, size_t outlen);
