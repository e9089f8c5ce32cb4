#include "relay/linkmsg.h"

#include <stdio.h>

/* A banner such as SSH's is recognisable by its first 40 bytes; stop at the first byte that
 * is not printable, so a binary protocol is not rendered as noise. */
static void quote_printable(char *out, size_t cap, const uint8_t *in, size_t len) {
        size_t o = 0;
        for (size_t i = 0; i < len && i < 40 && o + 1 < cap; i++) {
                if (in[i] < 0x20 || in[i] > 0x7e)
                        break;
                out[o++] = (char)in[i];
        }
        out[o] = '\0';
}

enum sf_link_err sf_link_wrong_peer(const uint8_t *got, size_t len, const char *ep, char *out, size_t cap) {
        char quoted[48];
        quote_printable(quoted, sizeof quoted, got, len);
        if (quoted[0])
                snprintf(out, cap, "wrong peer: %s is not a sockferry relay: it sent \"%s\"", ep, quoted);
        else
                snprintf(out, cap,
                         "wrong peer: %s is not a sockferry relay: it sent %zu bytes that are not a sockferry "
                         "greeting",
                         ep, len);
        return SF_LINK_WRONG_PEER;
}

enum sf_link_err sf_link_hello_eof(size_t len, const char *ep, char *out, size_t cap) {
        if (len == 0)
                snprintf(out, cap,
                         "no greeting: %s closed the connection without a word: it is not a sockferry relay, or "
                         "the relay there refused us (max-conns, allow-uid?)",
                         ep);
        else
                snprintf(out, cap, "no greeting: %s closed the connection in the middle of its greeting", ep);
        return SF_LINK_WRONG_PEER;
}

enum sf_link_err sf_link_hello_timeout(uint64_t ms, const char *ep, char *out, size_t cap) {
        snprintf(out, cap,
                 "wrong peer: %s sent nothing within %llums: it may be a plain TCP service (then auth = none is "
                 "what you meant) or an overloaded relay",
                 ep, (unsigned long long)ms);
        return SF_LINK_WRONG_PEER;
}

enum sf_link_err sf_link_version_mismatch(unsigned version, const char *ep, char *out, size_t cap) {
        snprintf(out, cap,
                 "version mismatch: %s speaks sockferry/%u, we speak sockferry/%u — run the same sockferry "
                 "version on both sides",
                 ep, version, SF_HS_VERSION);
        return SF_LINK_OTHER;
}

enum sf_link_err sf_link_status_eof(const char *ep, char *out, size_t cap) {
        snprintf(out, cap,
                 "no greeting: %s closed the link before confirming it (is it a sockferry relay with auth = "
                 "token?)",
                 ep);
        return SF_LINK_WRONG_PEER;
}

enum sf_link_err sf_link_status_timeout(const char *ep, char *out, size_t cap) {
        snprintf(out, cap, "no greeting: %s did not confirm the link in time", ep);
        return SF_LINK_TIMEOUT;
}

enum sf_link_err sf_link_status_explain(int parse_r, enum sf_hs_status st, const char *reason, const char *ep,
                                        const char *token_file, char *out, size_t cap) {
        /* A status whose MAC does not verify comes from a peer without our token: never OK. */
        if (st == SF_HS_AUTH_REJECTED || (parse_r < 0 && st == SF_HS_OK)) {
                snprintf(out, cap,
                         "auth rejected: %s does not accept our token (%s): both sides need the same token file",
                         ep, token_file ? token_file : "token-file");
                return SF_LINK_AUTH;
        }
        if (st == SF_HS_UPSTREAM_UNAVAILABLE) {
                snprintf(out, cap, "upstream unavailable: the host relay at %s could not reach its upstream: %s", ep,
                         reason[0] ? reason : "no reason given");
                return SF_LINK_UPSTREAM;
        }
        if (st == SF_HS_VERSION_MISMATCH) {
                snprintf(out, cap, "version mismatch: %s does not speak sockferry/%u", ep, SF_HS_VERSION);
                return SF_LINK_OTHER;
        }
        if (st != SF_HS_OK) {
                snprintf(out, cap, "wrong peer: %s answered with status %u (%s)", ep, (unsigned)st, reason);
                return SF_LINK_OTHER;
        }
        if (cap)
                out[0] = '\0';
        return SF_LINK_OK;
}
