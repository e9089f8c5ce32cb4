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
#include "relay/link/server.h"

/* The sockferry link handshake inside a connection (relay/link/frames.h has the frames): the
 * listening side greets, checks the client frame and answers with a status frame once its
 * upstream answers; the connecting side waits for the hello, sends its frame with the client's
 * early bytes behind it (at most SF_EARLY_MAX of them, held for the next candidate) and takes
 * the status frame off the front of the upstream's first bytes. Every outcome goes to the hub:
 * a failure toward a candidate moves on to the next one. */

uint64_t *sf_conn_link_counter(struct sf_conn *c, enum sf_link_err kind) {
        struct sf_relay_stats *st = c->fwd->stats;
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

/* Connecting side: the candidate failed its handshake. */
static void link_failed(struct sf_conn *c, enum sf_link_err kind, const char *msg) {
        sf_conn_cand_failed(c, sf_conn_link_counter(c, kind), false, msg);
}

bool sf_conn_status_send(struct sf_conn *c, enum sf_hs_status st, const char *reason) {
        size_t n = sf_hs_status_build(c->hs, &c->fwd->key, c->snonce, c->cnonce, st, reason);
        /* A fresh socket's send buffer is empty, so the frame goes out whole or not at all. */
        if (sf_side_send(c, CLIENT, c->hs, n) != (ssize_t)n)
                return false;
        /* Close only after the peer has read the status: closing with its bytes unread
         * would send a reset that can overtake the status frame. */
        sf_side_shutdown(c, CLIENT);
        return true;
}

bool sf_conn_server_confirm(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        size_t n = sf_hs_status_build(c->hs, &fwd->key, c->snonce, c->cnonce, SF_HS_OK, "");
        if (c->hs_flags & SF_HS_FLAG_PROBE) {
                if (sf_side_send(c, CLIENT, c->hs, n) == (ssize_t)n)
                        sf_log(SF_LOG_DEBUG, fname(c), c->id, "probe: upstream %s answers", cand_ep(c)->text);
                sf_conn_close(c, "probe answered");
                return false;
        }
        /* Ahead of the upstream's bytes; those read along with its own status frame (a relay
         * chained behind another) fit where that frame was, which was no shorter than ours. */
        if (sf_dir_put_front(c, UPSTREAM, c->hs, n) < 0) {
                sf_conn_close(c, "out of memory");
                return false;
        }
        c->hs_server = false;
        return true;
}

bool sf_conn_greeting_unexpected(struct sf_conn *c, char *msg, size_t cap) {
        uint8_t got[SF_HS_MAGIC_LEN + 1];
        size_t n = sf_dir_peek(c, UPSTREAM, got, sizeof got);
        return sf_link_greeting_unexpected(got, n, cand_ep(c)->text, fname(c), msg, cap);
}

/* Listening side: a client failed the handshake; counted, and logged as a warning since it
 * is the peer's problem, not ours. */
static void client_refused(struct sf_conn *c, uint64_t *counter, const char *msg) {
        note_error(c, counter, msg);
        if (sf_fwd_ratelimit(c->fwd))
                sf_log(SF_LOG_WARN, fname(c), c->id, "%s", msg);
}

/* How much of a stray service's first bytes a "wrong peer" quotes. */
#define WRONG_PEER_QUOTE 40

/* Reads up to want-hs_len bytes of a handshake frame. 1: complete, 0: more to come,
 * -1: connection closed (c->hs_len says how much arrived), -2: error (errno). */
static int hs_read(struct sf_conn *c, int side, size_t want) {
        while (c->hs_len < want) {
                ssize_t n = sf_side_recv(c, side, c->hs + c->hs_len, want - c->hs_len);
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

void sf_conn_peer_name(struct sf_conn *c, char *out, size_t cap) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        char host[INET6_ADDRSTRLEN] = "?";
        unsigned cid, port;
        if (sf_side_peername(c, CLIENT, &ss, &len) < 0) {
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

/* The verified client asked for a shared link: the status goes first (its reason lists the
 * services, under the MAC: the client speaks HTTP/2 only once it verified it), then the socket
 * belongs to the listener's link set (relay/link/server.h), which serves it from here on; the
 * connection's part is over. Beyond max-links the client is refused in words. */
static void link_hand_over(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        char services[SF_HS_REASON_MAX + 1], peer[96], name[160];
        struct sf_link_server_limits lim;
        sf_fwd_offers(fwd, services, sizeof services, &lim);
        sf_conn_peer_name(c, peer, sizeof peer);
        if (!fwd->links_in || sf_link_server_full(fwd->links_in)) {
                char why[SF_HS_REASON_MAX + 1];
                if (!fwd->links_in || !fwd->listen_started)
                        snprintf(why, sizeof why, "the host relay is stopping");
                else
                        snprintf(why, sizeof why, "the host relay serves max-links = %u shared links on %s already",
                                 lim.max_links, fwd->conf->listen.text);
                char msg[400];
                snprintf(msg, sizeof msg, "a shared link from %s refused: %s", peer, why);
                client_refused(c, &fwd->stats->err_other, msg);
                sf_conn_refuse(c, SF_HS_UPSTREAM_UNAVAILABLE, why);
                return;
        }
        size_t n = sf_hs_status_build(c->hs, &fwd->key, c->snonce, c->cnonce, SF_HS_OK, services);
        if (sf_side_send(c, CLIENT, c->hs, n) != (ssize_t)n) {
                sf_conn_close(c, "status frame not sent");
                return;
        }
        sf_conn_preauth_leave(c);
        uv_stream_t *stream;
        uv_close_cb close_cb;
        int r = sf_sock_release(fwd->eng, &c->sock[CLIENT], fwd->loop, &stream, &close_cb);
        if (r < 0) {
                sf_log(SF_LOG_WARN, fname(c), c->id, "a shared link from %s: %s", peer,
                       r == -EBUSY ? "it spoke before the status (not a sockferry relay's link)" : strerror(-r));
                sf_conn_close(c, "the link could not be taken over");
                return;
        }
        bool quiet = (c->hs_flags & SF_HS_FLAG_PROBE) != 0;
        snprintf(name, sizeof name, "%s (%s)", peer, fwd->conf->listen.text);
        if (sf_link_server_adopt(fwd->links_in, name, quiet, stream, stream, close_cb, NULL) < 0) {
                sf_conn_close(c, "out of memory for a shared link");
                return;
        }
        sf_log(quiet ? SF_LOG_DEBUG : SF_LOG_INFO, fname(c), c->id, "shared link from %s up (%s)%s", peer, services,
               quiet ? " for sockferry check" : "");
        sf_conn_close(c, "handed over to a shared link");
}

/* The verified client frame names a service (or none): the forward of the listener's group
 * that serves it, or a refusal that lists what the listener offers. */
static void client_service(struct sf_conn *c, const char *name) {
        struct sf_fwd *fwd = c->fwd, *to;
        char why[SF_HS_REASON_MAX + 1];
        if (c->hs_flags & SF_HS_FLAG_LINK) {
                link_hand_over(c);
                return;
        }
        to = sf_fwd_service(fwd, name, (c->hs_flags & SF_HS_FLAG_DEFAULT) != 0, why, sizeof why);
        if (!to) {
                char msg[400];
                snprintf(msg, sizeof msg, "unknown service: a client asked for %s%s%s: %s", name[0] ? "\"" : "",
                         name[0] ? name : "none", name[0] ? "\"" : "", why);
                client_refused(c, &fwd->stats->err_other, msg);
                sf_conn_refuse(c, SF_HS_UNKNOWN_SERVICE, why);
                return;
        }
        if (to != fwd && to->stats->active - to->preauth.all.n >= to->conf->max_conns) {
                snprintf(why, sizeof why, "service %s serves max-conns = %u connections already", to->conf->service,
                         to->conf->max_conns);
                client_refused(c, &to->stats->err_other, why);
                sf_conn_refuse(c, SF_HS_UPSTREAM_UNAVAILABLE, why);
                return;
        }
        sf_conn_preauth_leave(c);
        sf_conn_move(c, to);
        sf_conn_event(c, EV_DIAL);
}

void sf_conn_on_client_frame(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        int r = hs_read(c, CLIENT, SF_HS_CLIENT_LEN);
        if (r == 0)
                return;
        uint8_t version = 0;
        int v = r > 0 ? sf_hs_client_verify(c->hs, &fwd->key, c->snonce, c->cnonce, &c->hs_flags, &version) : 0;
        if (r > 0 && v == 0) {
                char name[SF_HS_SERVICE_MAX + 1] = "";
                if (c->hs_flags & SF_HS_FLAG_SERVICE) {
                        /* The service extension: its length byte, then the name and its MAC. */
                        r = hs_read(c, CLIENT, SF_HS_CLIENT_LEN + 1);
                        if (r > 0)
                                r = hs_read(c, CLIENT,
                                            SF_HS_CLIENT_LEN + sf_hs_service_ext_len(c->hs + SF_HS_CLIENT_LEN, 1));
                        if (r == 0)
                                return;
                        if (r > 0)
                                v = sf_hs_service_verify(c->hs + SF_HS_CLIENT_LEN, c->hs_len - SF_HS_CLIENT_LEN, &fwd->key,
                                                         c->snonce, c->cnonce, name);
                }
                if (r > 0 && v == 0) {
                        client_service(c, name);
                        return;
                }
        }
        /* Only a refusal names the peer: getpeername is not for every connection. */
        char peer[96], msg[256];
        sf_conn_peer_name(c, peer, sizeof peer);
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
                client_refused(c, &fwd->stats->err_wrong_peer, msg);
                sf_conn_close(c, msg);
                return;
        }
        if (r == -EPROTONOSUPPORT) {
                snprintf(msg, sizeof msg, "version mismatch: %s speaks sockferry/%u, we speak sockferry/%u", peer,
                         version, SF_HS_VERSION);
                client_refused(c, &fwd->stats->err_other, msg);
                sf_conn_refuse(c, SF_HS_VERSION_MISMATCH, "");
                return;
        }
        if (r == -EACCES) {
                snprintf(msg, sizeof msg, "auth rejected: %s does not hold our token (%s)", peer,
                         fwd->token_file ? fwd->token_file : "token-file");
                client_refused(c, &fwd->stats->err_auth, msg);
                sf_conn_refuse(c, SF_HS_AUTH_REJECTED, "");
                return;
        }
        /* -EBADMSG: the MAC holds, the flags are not ours. */
        snprintf(msg, sizeof msg, "bad frame: %s set flags this relay does not know (0x%02x)", peer, c->hs_flags);
        note_error(c, &fwd->stats->err_other, msg);
        sf_conn_refuse(c, SF_HS_BAD_FRAME, "unknown flags");
}

/* Reads what the upstream handshake (relay/link/client.h) needs, no more: the upstream's own
 * bytes follow its status. The step it came to, or SF_HSC_MORE with rd cleared (nothing yet);
 * a closed or failed upstream is SF_HSC_FAILED with the words for where the handshake was. */
static enum sf_hsc_step up_read(struct sf_conn *c) {
        uint8_t buf[SF_HS_STATUS_MAX];
        for (;;) {
                /* Before our frame a relay sends its hello and nothing more, while a stray
                 * service's banner is recognisable by its first 40 bytes: that much is read. */
                size_t want = sf_hs_client_need(c->up);
                if (!c->up->hello_done && want < WRONG_PEER_QUOTE - c->up->have)
                        want = WRONG_PEER_QUOTE - c->up->have;
                ssize_t n = sf_side_recv(c, UPSTREAM, buf, want);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        c->rd[UPSTREAM] = false;
                        return SF_HSC_MORE;
                }
                if (n <= 0)
                        return sf_hs_client_eof(c->up);
                size_t used;
                enum sf_hsc_step step = sf_hs_client_input(c->up, buf, (size_t)n, &used);
                if (step != SF_HSC_MORE)
                        return step;
                /* A short read emptied the socket (a wrong peer's quote may want more). */
                if ((size_t)n < want && !c->rdhup[UPSTREAM]) {
                        c->rd[UPSTREAM] = false;
                        return SF_HSC_MORE;
                }
        }
}

void sf_conn_on_hello(struct sf_conn *c) {
        enum sf_hsc_step step = up_read(c);
        if (step == SF_HSC_MORE)
                return;
        if (step != SF_HSC_FRAME) {
                link_failed(c, c->up->kind, c->up->msg);
                return;
        }
        /* The frame goes ahead of the client's bytes: they may follow at once, no round trip. */
        uint8_t frame[SF_HSC_FRAME_MAX];
        size_t n = sf_hs_client_frame(c->up, frame);
        if (sf_dir_hold_frame(c, frame, n) < 0) {
                sf_conn_close(c, "out of memory");
                return;
        }
        sf_conn_event(c, EV_HELLO);
}

/* The status frame that follows our client frame; the first read usually brings the
 * upstream's first bytes with it: it goes into the direction's buffer, the frame is taken off
 * its front and the rest waits there for the client. */
static void on_status(struct sf_conn *c) {
        struct sf_fwd *fwd = c->fwd;
        enum sf_hsc_step step = SF_HSC_MORE;
        if (c->up->have == 0) {
                /* Nothing came from the upstream before its status: the read lands at the
                 * buffer's start, through recv (a first read is never bulk). */
                ssize_t n;
                do
                        n = sf_dir_read_some(c, UPSTREAM);
                while (n < 0 && errno == EINTR);
                if (n < 0 && errno == EAGAIN) {
                        c->rd[UPSTREAM] = false;
                        return;
                }
                if (n <= 0) {
                        sf_hs_client_eof(c->up);
                        link_failed(c, c->up->kind, c->up->msg);
                        return;
                }
                uint8_t head[SF_HS_STATUS_MAX];
                size_t got = sf_dir_peek(c, UPSTREAM, head, sizeof head), used;
                step = sf_hs_client_input(c->up, head, got, &used);
                sf_dir_take(c, UPSTREAM, head, used);
                sf_dir_count(c, UPSTREAM, (size_t)n - used);
        }
        if (step == SF_HSC_MORE)
                step = up_read(c);
        if (step == SF_HSC_MORE)
                return;
        if (step == SF_HSC_OLD_PEER) {
                /* It verified our frame but not the service flag: a relay from before services. */
                fwd->cand_plain[c->cand] = true;
                sf_log(SF_LOG_INFO, fname(c), c->id,
                       "%s is an older sockferry (no services): its handshake goes without the service name",
                       cand_ep(c)->text);
                sf_conn_cand_retry(c);
                return;
        }
        if (step != SF_HSC_OK) {
                link_failed(c, c->up->kind, c->up->msg);
                return;
        }
        sf_conn_event(c, EV_STATUS_OK);
}

void sf_conn_on_await_status(struct sf_conn *c) {
        /* The client's early bytes, up to the bound: reading it stops there until the status
         * verifies. */
        int r = sf_dir_hold_read(c);
        if (r < 0) {
                sf_conn_io_error(c, -r);
                return;
        }
        if (dir_pending(&c->dir[CLIENT]) && c->wr[UPSTREAM] && (r = sf_dir_flush(c, CLIENT)) < 0) {
                sf_conn_handshake_error(c, -r);
                return;
        }
        if (c->rd[UPSTREAM])
                on_status(c);
}

void sf_conn_greet(struct sf_conn *c) {
        if (!sf_conn_preauth_enter(c))
                return;
        uint8_t hello[SF_HS_HELLO_LEN];
        sf_hs_nonce_new(c->snonce);
        sf_hs_hello_build(hello, c->snonce);
        if (sf_side_send(c, CLIENT, hello, sizeof hello) != (ssize_t)sizeof hello) {
                sf_conn_close(c, "greeting not sent");
                return;
        }
        c->hs_server = true;
        sf_conn_event(c, EV_GREET);
}

void sf_conn_handshake_error(struct sf_conn *c, int e) {
        if (e == ENOMEM) {
                sf_conn_io_error(c, e);
                return;
        }
        /* The peer reset or closed the link: a relay that refused us, or not a relay. */
        sf_hs_client_eof(c->up);
        link_failed(c, c->up->kind, c->up->msg);
}

void sf_conn_handshake_timeout(struct sf_conn *c) {
        char msg[300];
        if (c->state == ST_GREETED) {
                char peer[96];
                sf_conn_peer_name(c, peer, sizeof peer);
                snprintf(msg, sizeof msg, "no greeting: %s sent no handshake within %llums", peer,
                         (unsigned long long)c->fwd->conf->handshake_timeout_ms);
                sf_log(SF_LOG_DEBUG, fname(c), c->id, "%s", msg);
                note_error(c, &c->fwd->stats->err_timeout, msg);
                sf_conn_close(c, msg);
                return;
        }
        sf_hs_client_timeout(c->up, c->fwd->conf->handshake_timeout_ms);
        link_failed(c, c->up->kind, c->up->msg);
}
