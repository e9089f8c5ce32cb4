#include "relay/conn/state.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "conf/log.h"
#include "relay/engine/bufpool.h"
#include "relay/link/messages.h"

/* The sockferry link handshake inside a connection (relay/link/frames.h has the frames): the
 * listening side greets, checks the client frame and answers with a status frame once its
 * upstream answers; the connecting side waits for the hello, sends its frame ahead of the
 * client's bytes and takes the status frame off the front of the upstream's first bytes. */

static uint64_t *link_counter(struct sf_conn *c, enum sf_link_err kind) {
        struct sf_relay_stats *st = &c->fwd->stats;
        switch (kind) {
        case SF_LINK_WRONG_PEER: return &st->err_wrong_peer;
        case SF_LINK_AUTH: return &st->err_auth;
        case SF_LINK_UPSTREAM: return &st->err_upstream;
        case SF_LINK_TIMEOUT: return &st->err_timeout;
        case SF_LINK_OK:
        case SF_LINK_OTHER: break;
        }
        return &st->err_other;
}

void sf_conn_status_and_linger(struct sf_conn *c, enum sf_hs_status st, const char *reason) {
        size_t n = sf_hs_status_build(c->hs, &c->fwd->key, c->snonce, c->cnonce, st, reason);
        /* A fresh socket's send buffer is empty, so the frame goes out whole or not at all. */
        if (sf_sock_send(&c->sock[CLIENT], c->hs, n) != (ssize_t)n) {
                sf_conn_close(c, "status frame not sent");
                return;
        }
        /* Close only after the peer has read the status: closing with its bytes unread
         * would send a reset that can overtake the status frame. */
        sf_sock_shutdown(&c->sock[CLIENT]);
        c->state = ST_LINGER;
        sf_conn_drop_upstream(c);
        sf_conn_timer_arm(c, LINGER_MS);
        sf_conn_progress(c);
}

/* Listening side of an authenticated link: the upstream answers, tell the client. The status
 * frame is queued ahead of the upstream's bytes. Returns false when the connection is gone. */
bool sf_conn_server_confirm(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        size_t n = sf_hs_status_build(c->hs, &fwd->key, c->snonce, c->cnonce, SF_HS_OK, "");
        if (c->hs_flags & SF_HS_FLAG_PROBE) {
                if (sf_sock_send(&c->sock[CLIENT], c->hs, n) == (ssize_t)n)
                        sf_log(SF_LOG_DEBUG, fname(c), c->id, "probe: upstream %s answers", cand_ep(c)->text);
                sf_conn_close(c, "probe answered");
                return false;
        }
        struct dir *d = &c->dir[UPSTREAM];
        if (!d->buf && !(d->buf = sf_bufpool_get(fwd->pool))) {
                sf_conn_close(c, "out of memory");
                return false;
        }
        /* Bytes of the far end read along with its status frame go after ours; they fit where
         * that frame was, which was no shorter than this one. */
        uint32_t rest = d->len - d->off;
        memmove(d->buf + n, d->buf + d->off, rest);
        memcpy(d->buf, c->hs, n);
        d->off = 0;
        d->len = (uint32_t)n + rest;
        c->hs_server = false;
        return true;
}

static void handshake_failed(struct sf_conn *c, enum sf_link_err kind, const char *msg) {
        note_error(c, link_counter(c, kind), msg);
        if (sf_fwd_ratelimit(c->fwd))
                sf_log(SF_LOG_ERROR, fname(c), c->id, "%s", msg);
        /* Chained between two links: our client is a relay waiting for our status. */
        if (c->hs_server)
                sf_conn_status_and_linger(c, SF_HS_UPSTREAM_UNAVAILABLE, msg);
        else
                sf_conn_close(c, msg);
}

bool sf_conn_greeting_refused(struct sf_conn *c) {
        const struct dir *d = &c->dir[UPSTREAM];
        char msg[600];
        c->greeting_check = false;
        if (!sf_link_greeting_unexpected((const uint8_t *)d->buf, d->len, cand_ep(c)->text, fname(c), msg, sizeof msg))
                return false;
        handshake_failed(c, SF_LINK_WRONG_PEER, msg);
        return true;
}

/* Listening side: a client failed the handshake; counted, and logged as a warning since it
 * is the peer's problem, not ours. */
static void client_refused(struct sf_conn *c, uint64_t *counter, const char *msg) {
        note_error(c, counter, msg);
        if (sf_fwd_ratelimit(c->fwd))
                sf_log(SF_LOG_WARN, fname(c), c->id, "%s", msg);
}

static void wrong_peer(struct sf_conn *c) {
        char msg[300];
        /* Quote a little more than a greeting's length when the peer already sent it: a
         * banner such as SSH's is recognisable by its first 40 bytes. */
        if (c->hs_len < 40) {
                ssize_t n = sf_sock_recv(&c->sock[UPSTREAM], c->hs + c->hs_len, 40 - c->hs_len);
                if (n > 0)
                        c->hs_len += (uint16_t)n;
        }
        handshake_failed(c, sf_link_wrong_peer(c->hs, c->hs_len, cand_ep(c)->text, msg, sizeof msg), msg);
}

/* Reads up to want-hs_len bytes of a handshake frame. 1: complete, 0: more to come,
 * -1: connection closed (c->hs_len says how much arrived), -2: error (errno). */
static int hs_read(struct sf_conn *c, int side, size_t want) {
        while (c->hs_len < want) {
                ssize_t n = sf_sock_recv(&c->sock[side], c->hs + c->hs_len, want - c->hs_len);
                if (n > 0) {
                        c->hs_len += (uint16_t)n;
                        continue;
                }
                if (n == 0)
                        return -1;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -2;
                c->rd[side] = false;
                return 0;
        }
        return 1;
}

static void peer_name(struct sf_conn *c, char *out, size_t cap) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        char host[INET6_ADDRSTRLEN] = "?";
        unsigned cid, port;
        if (sf_sock_peername(&c->sock[CLIENT], &ss, &len) < 0) {
                snprintf(out, cap, "an unknown peer");
                return;
        }
        if (ss.ss_family == AF_INET) {
                struct sockaddr_in *s = (struct sockaddr_in *)&ss;
                inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
                snprintf(out, cap, "%s:%u", host, ntohs(s->sin_port));
        } else if (ss.ss_family == AF_INET6) {
                struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
                inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
                snprintf(out, cap, "[%s]:%u", host, ntohs(s->sin6_port));
        } else if (sf_vsock_peer(&ss, &cid, &port)) {
                snprintf(out, cap, "vsock CID %u port %u", cid, port);
        } else {
                snprintf(out, cap, "a local peer");
        }
}

/* Listening side: the client frame arrived (or not). */
void sf_conn_on_client_frame(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        int r = hs_read(c, CLIENT, SF_HS_CLIENT_LEN);
        if (r == 0)
                return;
        uint8_t version = 0;
        int v = r > 0 ? sf_hs_client_verify(c->hs, &fwd->key, c->snonce, c->cnonce, &c->hs_flags, &version) : 0;
        if (r > 0 && v == 0) {
                sf_conn_preauth_leave(c);
                uv_timer_stop(&c->timer);
                sf_conn_dial_start(c);
                return;
        }
        /* Only a refusal names the peer: getpeername is not for every connection. */
        char peer[96], msg[256];
        peer_name(c, peer, sizeof peer);
        if (r < 0) {
                snprintf(msg, sizeof msg, "no greeting: %s closed the link during the handshake", peer);
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "%s", msg);
                sf_conn_close(c, msg);
                return;
        }
        /* The magic is checked before anything else so a stray client is named as such. */
        r = v;
        if (r == -EPROTO) {
                snprintf(msg, sizeof msg, "wrong peer: %s is not a sockferry relay (it did not answer our greeting)",
                         peer);
                client_refused(c, &fwd->stats.err_wrong_peer, msg);
                sf_conn_close(c, msg);
                return;
        }
        if (r == -EPROTONOSUPPORT) {
                snprintf(msg, sizeof msg, "version mismatch: %s speaks sockferry/%u, we speak sockferry/%u", peer,
                         version, SF_HS_VERSION);
                client_refused(c, &fwd->stats.err_other, msg);
                sf_conn_status_and_linger(c, SF_HS_VERSION_MISMATCH, "");
                return;
        }
        if (r == -EACCES) {
                snprintf(msg, sizeof msg, "auth rejected: %s does not hold our token (%s)", peer,
                         fwd->token_file ? fwd->token_file : "token-file");
                client_refused(c, &fwd->stats.err_auth, msg);
                sf_conn_status_and_linger(c, SF_HS_AUTH_REJECTED, "");
                return;
        }
        /* -EBADMSG: the MAC holds, the flags are not ours. */
        snprintf(msg, sizeof msg, "bad frame: %s set flags this relay does not know (0x%02x)", peer, c->hs_flags);
        note_error(c, &fwd->stats.err_other, msg);
        sf_conn_status_and_linger(c, SF_HS_BAD_FRAME, "unknown flags");
}

/* Connecting side: the peer relay's greeting. */
void sf_conn_on_hello(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        int r = hs_read(c, UPSTREAM, SF_HS_HELLO_LEN);
        size_t cmp = c->hs_len < 4 ? c->hs_len : 4;
        if (memcmp(c->hs, SF_HS_MAGIC, cmp) != 0) {
                wrong_peer(c);
                return;
        }
        if (r == 0)
                return;
        if (r < 0) {
                char msg[300];
                handshake_failed(c, sf_link_hello_eof(c->hs_len, cand_ep(c)->text, msg, sizeof msg), msg);
                return;
        }
        uint8_t version = 0;
        r = sf_hs_hello_parse(c->hs, c->up_snonce, &version);
        if (r == -EPROTONOSUPPORT) {
                char msg[300];
                handshake_failed(c, sf_link_version_mismatch(version, cand_ep(c)->text, msg, sizeof msg), msg);
                return;
        }
        if (r < 0) {
                wrong_peer(c);
                return;
        }
        sf_hs_nonce_new(c->up_cnonce);
        struct dir *d = &c->dir[CLIENT];
        d->buf = sf_bufpool_get(fwd->pool);
        if (!d->buf) {
                sf_conn_close(c, "out of memory");
                return;
        }
        /* The frame is queued ahead of the client's bytes: they may follow at once, no round trip. */
        sf_hs_client_build((uint8_t *)d->buf, &fwd->key, c->up_snonce, c->up_cnonce, 0);
        d->off = 0;
        d->len = SF_HS_CLIENT_LEN;
        /* Whatever the client sent already goes out in the frame's segment: the host relay
         * wakes once for both. */
        if (c->rd[CLIENT] && (r = sf_conn_read_step(c, CLIENT)) < 0) {
                sf_conn_relay_error(c, -r);
                return;
        }
        c->hs_await_status = true;
        c->hs_len = 0;
        /* The host relay dials its upstream before it answers. */
        sf_conn_timer_arm(c, fwd->conf->handshake_timeout_ms + fwd->conf->connect_timeout_ms);
        sf_conn_start_relaying(c);
}

/* Connecting side, first read after our client frame: the status frame and usually the
 * upstream's first bytes arrive together, so they are read in one call into the direction's
 * buffer; the frame is taken from its front and the rest waits there for the client. 1: read
 * (the frame may still be incomplete), 0: nothing yet, -1: closed or failed. */
static int status_read_first(struct sf_conn *c) {
        struct dir *d = &c->dir[UPSTREAM];
        /* Nothing came from the upstream before its status: the read lands at the buffer's
         * start, through recv (a first read is never bulk). */
        ssize_t n;
        do
                n = sf_conn_read_some(c, UPSTREAM);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN) {
                c->rd[UPSTREAM] = false;
                return 0;
        }
        if (n <= 0)
                return -1;
        size_t take = (size_t)n;
        size_t need = sf_hs_status_frame_len((const uint8_t *)d->buf, (size_t)n);
        if (need && need < take)
                take = need;
        memcpy(c->hs, d->buf, take);
        c->hs_len = (uint16_t)take;
        d->off = (uint32_t)take;
        sf_conn_count_bytes(c, UPSTREAM, (size_t)n - take);
        return 1;
}

/* Connecting side: the status frame that follows our client frame. */
void sf_conn_on_status(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        int r = 1;
        if (c->hs_len == 0)
                r = status_read_first(c);
        if (r == 1 && c->hs_len < 2)
                r = hs_read(c, UPSTREAM, 2);
        if (r == 1)
                r = hs_read(c, UPSTREAM, sf_hs_status_frame_len(c->hs, c->hs_len));
        if (r == 0)
                return;
        char msg[400];
        if (r < 0) {
                handshake_failed(c, sf_link_status_eof(cand_ep(c)->text, msg, sizeof msg), msg);
                return;
        }
        enum sf_hs_status st;
        char reason[SF_HS_REASON_MAX + 1];
        r = sf_hs_status_parse(c->hs, c->hs_len, &fwd->key, c->up_snonce, c->up_cnonce, &st, reason);
        enum sf_link_err kind = sf_link_status_explain(r, st, reason, cand_ep(c)->text, fwd->token_file, msg, sizeof msg);
        if (kind != SF_LINK_OK) {
                handshake_failed(c, kind, msg);
                return;
        }
        c->hs_await_status = false;
        /* A relay chained behind another: confirm to our client only now that the far end did. */
        if (c->hs_server && !sf_conn_server_confirm(c))
                return;
        sf_conn_idle_arm(c);
}

void sf_conn_linger_drain(struct sf_conn *c) {
        char sink[4096];
        ssize_t n;
        while ((n = sf_sock_recv(&c->sock[CLIENT], sink, sizeof sink)) > 0)
                ;
        if (n == 0 || errno != EAGAIN)
                sf_conn_close(c, "failure status delivered");
        else
                c->rd[CLIENT] = false;
}

bool sf_conn_greet(struct sf_conn *c) {
        if (!sf_conn_preauth_enter(c))
                return false;
        uint8_t hello[SF_HS_HELLO_LEN];
        sf_hs_nonce_new(c->snonce);
        sf_hs_hello_build(hello, c->snonce);
        if (sf_sock_send(&c->sock[CLIENT], hello, sizeof hello) != (ssize_t)sizeof hello) {
                sf_conn_close(c, "greeting not sent");
                return false;
        }
        c->state = ST_AWAIT_CLIENT_FRAME;
        c->hs_server = true;
        sf_conn_timer_arm(c, c->fwd->conf->handshake_timeout_ms);
        return true;
}

void sf_conn_link_timeout(struct sf_conn *c) {
        char msg[300];
        switch (c->state) {
        case ST_AWAIT_CLIENT_FRAME: {
                char peer[96];
                peer_name(c, peer, sizeof peer);
                snprintf(msg, sizeof msg, "no greeting: %s sent no handshake within %llums", peer,
                         (unsigned long long)c->fwd->conf->handshake_timeout_ms);
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "%s", msg);
                note_error(c, &c->fwd->stats.err_timeout, msg);
                sf_conn_close(c, msg);
                return;
        }
        case ST_AWAIT_HELLO:
                handshake_failed(
                        c, sf_link_hello_timeout(c->fwd->conf->handshake_timeout_ms, cand_ep(c)->text, msg, sizeof msg),
                        msg);
                return;
        default:
                handshake_failed(c, sf_link_status_timeout(cand_ep(c)->text, msg, sizeof msg), msg);
                return;
        }
}
