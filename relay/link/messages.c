#include "relay/link/messages.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "relay/listen/sockpath.h"
#include "relay/sys/platform.h"

static const char *pipe_hint(int e) {
        switch (e) {
        case ENOENT:
                return " — no such pipe: is the service running (the OpenSSH Authentication Agent service, Docker "
                       "Desktop, ...), and is the name right?";
        case EACCES:
        case EPERM:
                return " — the pipe's security descriptor does not let the relay's account in: run the relay as "
                       "the user the service belongs to";
        case ETIMEDOUT:
                return " — every instance of the pipe stayed busy: the service serves fewer clients at once";
        default:
                return "";
        }
}

static const char *connect_hint(const struct sf_endpoint *ep, int e) {
        bool net = ep->kind == SF_EP_TCP || ep->kind == SF_EP_VSOCK;
        if (ep->kind == SF_EP_NPIPE)
                return pipe_hint(e);
        switch (e) {
        case ECONNREFUSED:
                return net ? " — is the host-side relay (or the service) running and listening there?"
                           : " — nobody accepts on that socket: is the service running?";
        case ENOENT:
                return " — is the service running, and is the path right?";
        case EACCES:
        case EPERM:
                return " — the relay's user may not use that socket: check its mode and owner";
        case ETIMEDOUT:
                return " — is a firewall dropping the packets, or the host unreachable?";
        case ENETUNREACH:
        case EHOSTUNREACH:
                return " — no route to that address from here";
        default:
                return "";
        }
}

void sf_link_connect_cause(const struct sf_endpoint *ep, int e, char *out, size_t cap) {
        if (ep->kind == SF_EP_VSOCK && (e == EPERM || e == EACCES)) {
                snprintf(out, cap,
                         "AF_VSOCK sockets are denied here (%s): Docker's default seccomp profile blocks them; use "
                         "a tcp: endpoint instead",
                         strerror(e));
                return;
        }
        if (ep->kind == SF_EP_VSOCK && e == EAFNOSUPPORT) {
                snprintf(out, cap, "%s; use a tcp: endpoint",
                         sf_af_vsock < 0 ? "vsock exists on Linux only" : "this kernel has no vsock support");
                return;
        }
        if (ep->kind == SF_EP_UNIX && e == ECONNREFUSED) {
                enum sf_sockpath_state st = sf_sockpath_probe(ep->path);
                if (st == SF_PATH_MOUNT_DIR) {
                        snprintf(out, cap,
                                 "is a directory, not a socket: the host socket bind mount did not carry a socket "
                                 "(Docker Desktop?)");
                        return;
                }
                if (st == SF_PATH_EMPTY_DIR) {
                        snprintf(out, cap, "is a directory, not a socket");
                        return;
                }
        }
        snprintf(out, cap, "%s%s", strerror(e), connect_hint(ep, e));
}

void sf_link_timeout_cause(const struct sf_endpoint *ep, uint64_t ms, char *out, size_t cap) {
        snprintf(out, cap, "timed out after %llums%s", (unsigned long long)ms, connect_hint(ep, ETIMEDOUT));
}

void sf_link_dial_cause(const struct sf_endpoint *ep, int r, uint64_t timeout_ms, char *out, size_t cap) {
        if (r == -ETIMEDOUT)
                sf_link_timeout_cause(ep, timeout_ms, out, cap);
        else
                sf_link_connect_cause(ep, -r, out, cap);
}

void sf_link_resolve_cause(const struct sf_endpoint *ep, const char *why, char *out, size_t cap) {
        snprintf(out, cap, "cannot resolve %s: %s%s", ep->host, why,
                 strcmp(ep->host, "host.docker.internal") == 0
                         ? " — on native Linux start the container with --add-host=host.docker.internal:host-gateway"
                         : "");
}

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
        char quoted[72];
        /* A text banner (SSH, SMTP, a shell prompt) reads best as it is, up to its line end; a
         * binary peer (TLS, a database) is shown escaped so people can still recognise it. */
        quote_printable(quoted, sizeof quoted, got, len);
        if (!quoted[0])
                sf_hs_quote(got, len < 16 ? len : 16, quoted, sizeof quoted);
        snprintf(out, cap, "wrong peer: %s is not a sockferry relay: it sent \"%s\"", ep, quoted);
        return SF_LINK_WRONG_PEER;
}

void sf_link_exec_noise(const uint8_t *got, size_t len, char *out, size_t cap) {
        /* A command's message, up to its line end: what an engine CLI prints on stdout when the
         * exec fails (docker's "OCI runtime exec failed: ..."). */
        char quoted[240];
        size_t o = 0;
        for (size_t i = 0; i < len && o + 1 < sizeof quoted; i++) {
                if (got[i] < 0x20 || got[i] > 0x7e)
                        break;
                quoted[o++] = (char)got[i];
        }
        quoted[o] = '\0';
        if (!quoted[0])
                sf_hs_quote(got, len < 16 ? len : 16, quoted, sizeof quoted);
        snprintf(out, cap, "it wrote \"%s\" where the link's first frames belong (not sockferry link --stdio at the far end)",
                 quoted);
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
        /* A relay with auth = token greets at once; one with auth = none waits for its client,
         * as many services do. The usual cause is the host relay left at auth = none. */
        snprintf(out, cap,
                 "wrong peer: %s sent nothing within %llums: it may be a plain TCP service (then auth = none "
                 "here) or, the usual case, a sockferry relay with auth = none: set auth = token and the same "
                 "token-file on that relay (one with auth = token greets at once)",
                 ep, (unsigned long long)ms);
        return SF_LINK_WRONG_PEER;
}

bool sf_link_greeting_unexpected(const uint8_t *got, size_t len, const char *ep, const char *forward, char *out,
                                 size_t cap) {
        uint8_t version = 0;
        if (len <= SF_HS_MAGIC_LEN || sf_hs_prefix_check(got, len, &version) == -EPROTO)
                return false;
        snprintf(out, cap,
                 "wrong peer: %s is a sockferry relay with auth = token (it sent the sockferry/%u greeting), and "
                 "this forward has auth = none: set auth = token and token-file (the same token as that relay's) "
                 "in [%s] here; the connection was closed so the greeting does not reach the client as data",
                 ep, (unsigned)version, forward);
        return true;
}

enum sf_link_err sf_link_version_mismatch(unsigned version, const char *ep, char *out, size_t cap) {
        snprintf(out, cap,
                 "version mismatch: %s speaks sockferry/%u, we speak sockferry/%u — run the same sockferry "
                 "version on both sides",
                 ep, version, SF_HS_VERSION);
        return SF_LINK_OTHER;
}

enum sf_link_err sf_link_status_eof(const char *ep, char *out, size_t cap) {
        /* It greeted us, so it is a sockferry relay with auth = token; and such a relay answers
         * a frame it refuses with a status. Closing without one is what it does to connections
         * it drops before they authenticate: the oldest when its pre-auth budget is full, any
         * at its handshake-timeout or when it stops. */
        snprintf(out, cap,
                 "not confirmed: the relay at %s greeted us, then closed the link before confirming it: it "
                 "may be overloaded by unauthenticated connections (see \"pre-auth evicted\" in its stats), "
                 "stopping, or it did not get our frame within its handshake-timeout; its log says which",
                 ep);
        return SF_LINK_OTHER;
}

enum sf_link_err sf_link_status_timeout(const char *ep, char *out, size_t cap) {
        snprintf(out, cap, "no greeting: %s did not confirm the link in time", ep);
        return SF_LINK_TIMEOUT;
}

enum sf_link_err sf_link_status_explain(int parse_r, enum sf_hs_status st, const char *reason, const char *ep,
                                        const char *token_file, char *out, size_t cap) {
        /* A status whose MAC does not verify comes from a peer without our token: never OK. */
        /* Whatever the status says, an answer that does not carry our token's MAC comes from a
         * peer without our token (or was altered on the way): its reason cannot be trusted. */
        if (st == SF_HS_AUTH_REJECTED || parse_r < 0) {
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
