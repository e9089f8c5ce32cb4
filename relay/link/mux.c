#include "relay/link/mux.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/engine/bufpool.h"
#include "relay/link/frames.h"
#include "relay/list.h"

/* The header fields of sockferry/2 (doc/PROTOCOL.md): lower case, as HTTP/2 wants names. */
#define H_SERVICE "sf-service"
#define H_PROBE "sf-probe"
#define H_DEFAULT "sf-default"
#define H_STATUS "sf-status"
#define H_REASON "sf-reason"
/* What a header block may hold: a service name, a status and a reason fit in far less. */
#define HEADER_LIST_MAX 1024
/* DATA frames of up to this much (the peer's SETTINGS_MAX_FRAME_SIZE): fewer frames per byte
 * for bulk transfers, while one frame of a bulk stream still goes out in a few microseconds
 * ahead of an interactive neighbour's. */
#define FRAME_MAX (64 * 1024)
/* A stream that filled its send buffer is told it may send again once this much is free. */
#define SEND_RESUME (SF_BUF_SIZE / 2)
/* Bytes in flight on a link before they reach their streams' buffers: a bulk transfer across
 * a VM's network stack keeps its pace. */
#define LINK_WINDOW (8 * 1024 * 1024)
/* libnghttp2's own default burst of stream resets, and what each stream of the limit adds. */
#define RESETS_MIN 1000
#define RESETS_PER_STREAM 16

struct sf_mux_stream {
        struct sf_mux *m; /* NULL once the session is gone */
        struct sf_bufpool *pool;
        int32_t id;       /* 0 until the client's HEADERS went out or the server saw them */
        struct sf_list_node node;   /* in m->streams */
        struct sf_list_node notify; /* in m->notify while events are pending */
        uint32_t pending;
        void (*cb)(void *ev, uint32_t events);
        void *ev;

        char *in; /* received, not read: in[in_off..in_len) */
        uint32_t in_off, in_len;
        char *out; /* sent by the user, not framed yet: out[out_off..out_len) */
        uint32_t out_off, out_len;

        bool is_new;      /* server: stream_new is due */
        bool owned;       /* a user holds it: the client that opened it, the server's owner */
        bool probe;
        bool by_default;
        bool answered;    /* server: accepted or refused */
        bool ok_held;     /* server: accepted; the answer waits for the stream's first bytes or end */
        bool peer_eof;    /* the peer ended its side */
        bool shut;        /* the user ended its side */
        bool eof_sent;    /* our END_STREAM went out */
        bool deferred;    /* the data source said "nothing yet" */
        bool out_blocked; /* send said EAGAIN: EV_OUT is due once there is room */
        bool ng_closed;   /* nghttp2 is done with the stream */
        bool rst_sent;
        bool rst_after_answer; /* refused: reset once the answer went out */
        bool user_closed;
        bool free_due; /* freed once its DATA frame in m->nc is out */
        bool headers_sent; /* client: its opening went out */
        int status; /* client: the server's sf-status, -1 before */
        int err;
        char service[SF_MUX_SERVICE_MAX + 1];
        char reason[SF_MUX_REASON_MAX + 1];
};

struct sf_mux {
        nghttp2_session *ng;
        enum sf_mux_role role;
        struct sf_mux_config cfg;
        const struct sf_mux_ops *ops;
        void *owner;
        struct sf_bufpool *pool;
        struct sf_list streams;
        struct sf_list notify;
        bool dispatching;
        bool draining;
        bool peer_goaway;
        bool peer_settings; /* the peer's first SETTINGS arrived: its limits are known */
        /* nghttp2 ended the session for a protocol error of the peer's (its GOAWAY went out
         * with the error): the link ends once that is written, why says what the peer did. */
        bool terminated;
        uint64_t total;
        /* What is handed out and not written yet: bytes of mem_send's, or a part of nc. */
        const uint8_t *left;
        size_t left_len;
        enum { LEFT_NG, LEFT_NC_HEAD, LEFT_NC_DATA } left_kind;
        /* A DATA frame nghttp2 left to us to write (NGHTTP2_DATA_FLAG_NO_COPY): its header,
         * then its payload straight from the stream's send buffer, which stays where it is
         * (no compaction, no free) until the payload is out. */
        struct sf_mux_stream *nc;
        uint8_t nc_head[9];
        size_t nc_len;
        char why[200]; /* a protocol error found inside a callback */
};

static void stream_free(struct sf_mux_stream *s);

/* Whether the stream's send buffer is being written from in place (m->nc): it stays put. */
static bool pinned(const struct sf_mux_stream *s) {
        return s->m && s->m->nc == s;
}

static void notify(struct sf_mux_stream *s, uint32_t events) {
        s->pending |= events;
        if (s->m && s->cb)
                sf_list_push_back(&s->m->notify, &s->notify);
}

/* Runs the users' callbacks for the events gathered while nghttp2 was working. A callback may
 * call anything on its stream, close included; streams it touches are queued again. */
static void dispatch(struct sf_mux *m) {
        if (m->dispatching)
                return;
        m->dispatching = true;
        while (m->notify.first) {
                struct sf_mux_stream *s = sf_list_entry(m->notify.first, struct sf_mux_stream, notify);
                sf_list_remove(&m->notify, &s->notify);
                if (s->is_new) {
                        /* Its bytes may have come with its opening: the events gathered so far
                         * reach the owner once it watches the stream. */
                        s->is_new = false;
                        s->owned = true;
                        m->ops->stream_new(m->owner, s, s->service, s->by_default, s->probe);
                        continue;
                }
                uint32_t ev = s->pending;
                s->pending = 0;
                if (ev && s->cb && !s->user_closed)
                        s->cb(s->ev, ev);
        }
        m->dispatching = false;
}

static void want_output(struct sf_mux *m) {
        if (m->ops->want_output && nghttp2_session_want_write(m->ng))
                m->ops->want_output(m->owner);
}

static void buf_release(struct sf_mux_stream *s, char **buf, uint32_t *off, uint32_t *len) {
        *off = *len = 0;
        sf_bufpool_put(s->pool, *buf);
        *buf = NULL;
}

/* Unread bytes count against their stream's window while it is open: given back when the user
 * reads them, or drops them. The link's window went back when they arrived (on_data_chunk):
 * a reader that stalls holds its own stream's window, never its neighbours'. */
static void consume(struct sf_mux_stream *s, size_t n) {
        if (!s->m || !n || s->ng_closed)
                return;
        nghttp2_session_consume_stream(s->m->ng, s->id, n);
        want_output(s->m);
}

static void rst(struct sf_mux_stream *s, uint32_t code) {
        if (s->rst_sent || !s->m || s->ng_closed)
                return;
        s->rst_sent = true;
        nghttp2_submit_rst_stream(s->m->ng, NGHTTP2_FLAG_NONE, s->id, code);
        want_output(s->m);
}

/* Stream failed: err for recv/send, reason in plain words for the user's log. */
static void stream_fail(struct sf_mux_stream *s, int err, const char *reason) {
        if (!s->err) {
                s->err = err;
                snprintf(s->reason, sizeof s->reason, "%s", reason);
        }
        notify(s, SF_MUX_EV_IN | SF_MUX_EV_OUT | SF_MUX_EV_ERR | SF_MUX_EV_HUP);
}

static const char *h2_error_words(uint32_t code) {
        switch (code) {
        case NGHTTP2_NO_ERROR: return "closed";
        case NGHTTP2_PROTOCOL_ERROR: return "protocol error";
        case NGHTTP2_INTERNAL_ERROR: return "internal error";
        case NGHTTP2_FLOW_CONTROL_ERROR: return "flow control error";
        case NGHTTP2_STREAM_CLOSED: return "stream closed";
        case NGHTTP2_FRAME_SIZE_ERROR: return "frame size error";
        case NGHTTP2_REFUSED_STREAM: return "refused: too many streams, or the peer is shutting down";
        case NGHTTP2_CANCEL: return "cancelled by the peer (its client went away)";
        case NGHTTP2_ENHANCE_YOUR_CALM: return "the peer finds this link too busy";
        default: return "unknown error code";
        }
}

/* ---- nghttp2's callbacks ---------------------------------------------------------------- */

static struct sf_mux_stream *stream_of(struct sf_mux *m, int32_t id) {
        return id ? nghttp2_session_get_stream_user_data(m->ng, id) : NULL;
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *user) {
        struct sf_mux *m = user;
        if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST || m->role != SF_MUX_SERVER)
                return 0;
        struct sf_mux_stream *s = calloc(1, sizeof *s);
        if (!s)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets this stream alone */
        s->m = m;
        s->pool = m->pool;
        s->id = f->hd.stream_id;
        s->status = -1;
        sf_list_push_back(&m->streams, &s->node);
        m->total++;
        nghttp2_session_set_stream_user_data(ng, s->id, s);
        return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user) {
        (void)ng;
        (void)flags;
        struct sf_mux *m = user;
        struct sf_mux_stream *s = stream_of(m, f->hd.stream_id);
        if (!s || f->hd.type != NGHTTP2_HEADERS)
                return 0;
#define IS(h) (namelen == sizeof h - 1 && memcmp(name, h, namelen) == 0)
        if (m->role == SF_MUX_SERVER && IS(H_SERVICE)) {
                /* The same names as the handshake's service extension; anything else resets this
                 * stream alone. */
                if (valuelen > SF_MUX_SERVICE_MAX)
                        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
                memcpy(s->service, value, valuelen);
                s->service[valuelen] = '\0';
                if (!sf_hs_service_valid(s->service))
                        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        } else if (m->role == SF_MUX_SERVER && IS(H_PROBE)) {
                s->probe = true;
        } else if (m->role == SF_MUX_SERVER && IS(H_DEFAULT)) {
                s->by_default = true;
        } else if (m->role == SF_MUX_CLIENT && IS(H_STATUS)) {
                int st = 0;
                for (size_t i = 0; i < valuelen && i < 3; i++)
                        st = value[i] >= '0' && value[i] <= '9' ? st * 10 + (value[i] - '0') : 999;
                s->status = valuelen == 0 || valuelen > 3 ? 999 : st;
        } else if (m->role == SF_MUX_CLIENT && IS(H_REASON)) {
                size_t n = valuelen < SF_MUX_REASON_MAX ? valuelen : SF_MUX_REASON_MAX;
                /* The reason ends up in log lines: printable ASCII only. */
                for (size_t i = 0; i < n; i++)
                        s->reason[i] = value[i] >= 0x20 && value[i] < 0x7f ? (char)value[i] : '?';
                s->reason[n] = '\0';
        }
#undef IS
        return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *user) {
        (void)ng;
        struct sf_mux *m = user;
        if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) {
                uint64_t sent;
                memcpy(&sent, f->ping.opaque_data, sizeof sent);
                if (m->ops->pong)
                        m->ops->pong(m->owner, sent);
                return 0;
        }
        if (f->hd.type == NGHTTP2_GOAWAY) {
                m->peer_goaway = true;
                if (m->ops->goaway)
                        m->ops->goaway(m->owner);
                return 0;
        }
        if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK)) {
                m->peer_settings = true;
                return 0;
        }
        struct sf_mux_stream *s = stream_of(m, f->hd.stream_id);
        if (!s)
                return 0;
        if (f->hd.type == NGHTTP2_HEADERS && (f->hd.flags & NGHTTP2_FLAG_END_HEADERS)) {
                if (m->role == SF_MUX_SERVER && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
                        s->is_new = true;
                        sf_list_push_back(&m->notify, &s->notify);
                } else if (m->role == SF_MUX_CLIENT && f->headers.cat == NGHTTP2_HCAT_RESPONSE) {
                        if (s->status < 0)
                                s->status = 999; /* a response without a status is not ours */
                        if (s->status != SF_MUX_OK) {
                                char why[SF_MUX_REASON_MAX + 1];
                                snprintf(why, sizeof why, "%s", s->reason[0] ? s->reason : "no reason given");
                                s->reason[0] = '\0';
                                stream_fail(s, ECONNREFUSED, why);
                        } else {
                                notify(s, SF_MUX_EV_OUT);
                        }
                }
        }
        if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
                s->peer_eof = true;
                notify(s, SF_MUX_EV_IN | SF_MUX_EV_RDHUP);
        }
        return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *user) {
        (void)flags;
        struct sf_mux *m = user;
        struct sf_mux_stream *s = stream_of(m, id);
        if (!s || s->user_closed || s->err) {
                /* Nobody reads it: give the link window back at once. */
                nghttp2_session_consume_connection(ng, len);
                return 0;
        }
        if (s->in_off == s->in_len)
                s->in_off = s->in_len = 0;
        if (!s->in && !(s->in = sf_bufpool_get(m->pool))) {
                nghttp2_session_consume_connection(ng, len);
                rst(s, NGHTTP2_INTERNAL_ERROR);
                stream_fail(s, ENOMEM, "out of memory for the stream's bytes");
                return 0;
        }
        if (SF_BUF_SIZE - s->in_len < len) {
                memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
                s->in_len -= s->in_off;
                s->in_off = 0;
        }
        if (SF_BUF_SIZE - s->in_len < len) {
                /* More than the window we gave: the peer ignores flow control. */
                nghttp2_session_consume_connection(ng, len);
                rst(s, NGHTTP2_FLOW_CONTROL_ERROR);
                stream_fail(s, ECONNRESET, "the peer sent more than the stream's window");
                return 0;
        }
        memcpy(s->in + s->in_len, data, len);
        s->in_len += (uint32_t)len;
        /* In the stream's own buffer now, bounded by its window: the link's window goes back at
         * once, so that any number of stalled readers stall only their own streams. */
        nghttp2_session_consume_connection(ng, len);
        notify(s, SF_MUX_EV_IN);
        return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *user) {
        struct sf_mux *m = user;
        struct sf_mux_stream *s = stream_of(m, id);
        if (!s)
                return 0;
        nghttp2_session_set_stream_user_data(ng, id, NULL);
        s->ng_closed = true;
        /* Reset before its owner heard of it (a name that is not one): nobody holds it. */
        if (s->user_closed || !s->owned) {
                stream_free(s);
                return 0;
        }
        if (code != NGHTTP2_NO_ERROR || !s->peer_eof || !s->eof_sent) {
                char why[120];
                if (code == NGHTTP2_REFUSED_STREAM && m->peer_goaway)
                        snprintf(why, sizeof why, "the host relay is shutting down and took no more streams");
                else
                        snprintf(why, sizeof why, "the stream was reset: %s", h2_error_words(code));
                stream_fail(s, ECONNRESET, why);
        } else {
                notify(s, SF_MUX_EV_IN | SF_MUX_EV_HUP);
        }
        return 0;
}

/* A refusal's answer went out: now the reset that tells the client to stop sending (sent with
 * the answer, it would overtake it). */
static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *user) {
        (void)ng;
        struct sf_mux *m = user;
        if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code != NGHTTP2_NO_ERROR && !m->terminated) {
                /* A peer that broke the protocol (more streams than the limit it acknowledged,
                 * a flow control violation ...) gets no more of the link than the GOAWAY:
                 * nghttp2 would ignore what it sends, and the link would stay up for nothing. */
                m->terminated = true;
                int n = (int)(f->goaway.opaque_data_len < 120 ? f->goaway.opaque_data_len : 120);
                snprintf(m->why, sizeof m->why, "the peer broke the protocol (%s%s%.*s)",
                         h2_error_words(f->goaway.error_code), n ? ": " : "", n, (const char *)f->goaway.opaque_data);
                return 0;
        }
        struct sf_mux_stream *s = stream_of(m, f->hd.stream_id);
        if (s && m->role == SF_MUX_CLIENT && f->hd.type == NGHTTP2_HEADERS)
                s->headers_sent = true;
        if (s && s->rst_after_answer && f->hd.type == NGHTTP2_HEADERS) {
                s->rst_after_answer = false;
                rst(s, NGHTTP2_NO_ERROR);
        }
        return 0;
}

static ssize_t on_data_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                            nghttp2_data_source *src, void *user) {
        (void)ng;
        (void)id;
        (void)buf;
        (void)user;
        struct sf_mux_stream *s = src->ptr;
        size_t have = s->out_len - s->out_off;
        size_t n = have < length ? have : length;
        if (n == 0) {
                if (s->shut) {
                        *flags |= NGHTTP2_DATA_FLAG_EOF;
                        s->eof_sent = true;
                        return 0;
                }
                s->deferred = true;
                return NGHTTP2_ERR_DEFERRED;
        }
        /* No copy into nghttp2's frame: on_send_data hands the payload over in place. */
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
        if (n == have && s->shut) {
                *flags |= NGHTTP2_DATA_FLAG_EOF;
                s->eof_sent = true;
        }
        return (ssize_t)n;
}

/* The DATA frame of a no-copy read: written from m->nc by sf_mux_output(_peek); mem_send
 * returns at once (PAUSE), so there is one such frame at a time. */
static int on_send_data(nghttp2_session *ng, nghttp2_frame *f, const uint8_t *framehd, size_t length,
                        nghttp2_data_source *src, void *user) {
        (void)ng;
        struct sf_mux *m = user;
        if (f->data.padlen > 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE; /* no padding is ever asked for */
        m->nc = src->ptr;
        memcpy(m->nc_head, framehd, sizeof m->nc_head);
        m->nc_len = length;
        return NGHTTP2_ERR_PAUSE;
}

/* The payload of m->nc is out: the stream's buffer is its own again. */
static void nc_done(struct sf_mux *m) {
        struct sf_mux_stream *s = m->nc;
        m->nc = NULL;
        m->left_kind = LEFT_NG;
        if (s->free_due) {
                stream_free(s);
                return;
        }
        if (s->out_off == s->out_len)
                buf_release(s, &s->out, &s->out_off, &s->out_len);
        if (s->out_blocked && SF_BUF_SIZE - (s->out_len - s->out_off) >= SEND_RESUME) {
                s->out_blocked = false;
                notify(s, SF_MUX_EV_OUT);
        }
}

/* k bytes of m->left are written; a part of m->nc that is over leads to the next. */
static void left_taken(struct sf_mux *m, size_t k) {
        m->left += k;
        m->left_len -= k;
        if (m->left_kind == LEFT_NC_DATA)
                m->nc->out_off += (uint32_t)k;
        if (m->left_len || m->left_kind == LEFT_NG)
                return;
        if (m->left_kind == LEFT_NC_HEAD && m->nc_len) {
                struct sf_mux_stream *s = m->nc;
                m->left_kind = LEFT_NC_DATA;
                m->left = (const uint8_t *)s->out + s->out_off;
                m->left_len = m->nc_len;
                return;
        }
        nc_done(m);
}

static ssize_t on_read_length(nghttp2_session *ng, uint8_t type, int32_t id, int32_t session_window,
                              int32_t stream_window, uint32_t remote_max_frame, void *user) {
        (void)ng;
        (void)type;
        (void)id;
        (void)user;
        ssize_t n = remote_max_frame < FRAME_MAX ? remote_max_frame : FRAME_MAX;
        if (session_window < n)
                n = session_window;
        if (stream_window < n)
                n = stream_window;
        return n > 0 ? n : 1;
}

/* ---- the session ------------------------------------------------------------------------ */

int sf_mux_new(enum sf_mux_role role, const struct sf_mux_config *cfg, const struct sf_mux_ops *ops, void *owner,
               struct sf_bufpool *pool, struct sf_mux **out) {
        struct sf_mux *m = calloc(1, sizeof *m);
        nghttp2_session_callbacks *cbs = NULL;
        nghttp2_option *opt = NULL;
        if (!m || nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
                goto nomem;
        m->role = role;
        m->cfg = *cfg;
        m->ops = ops;
        m->owner = owner;
        m->pool = pool;
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
        nghttp2_session_callbacks_set_data_source_read_length_callback(cbs, on_read_length);
        nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
        nghttp2_session_callbacks_set_send_data_callback(cbs, on_send_data);
        /* Streams, not HTTP: no pseudo-header fields, no content-length rules. */
        nghttp2_option_set_no_http_messaging(opt, 1);
        /* The window opens as the user reads, so a stalled reader stalls its stream alone. */
        nghttp2_option_set_no_auto_window_update(opt, 1);
        nghttp2_option_set_no_closed_streams(opt, 1);
        nghttp2_option_set_max_send_header_block_length(opt, HEADER_LIST_MAX);
        /* A client that goes away mid-stream makes its relay reset the stream, and clients do
         * that by the thousand (Ctrl+C on a log follower): the limits come from the link's own
         * stream limit (sf_mux_config_init), not from libnghttp2's defaults for the web. */
        nghttp2_option_set_stream_reset_rate_limit(opt, cfg->resets_burst, cfg->resets_per_s);
        int r = role == SF_MUX_CLIENT ? nghttp2_session_client_new2(&m->ng, cbs, m, opt)
                                      : nghttp2_session_server_new2(&m->ng, cbs, m, opt);
        nghttp2_session_callbacks_del(cbs);
        nghttp2_option_del(opt);
        cbs = NULL;
        opt = NULL;
        if (r != 0)
                goto nomem;
        nghttp2_settings_entry iv[] = {
                { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg->max_streams },
                { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, cfg->stream_window },
                { NGHTTP2_SETTINGS_MAX_FRAME_SIZE, FRAME_MAX },
                { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
                { NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, HEADER_LIST_MAX },
        };
        if (nghttp2_submit_settings(m->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
            nghttp2_session_set_local_window_size(m->ng, NGHTTP2_FLAG_NONE, 0, (int32_t)cfg->link_window) != 0)
                goto nomem;
        *out = m;
        return 0;
nomem:
        nghttp2_session_callbacks_del(cbs);
        nghttp2_option_del(opt);
        if (m)
                nghttp2_session_del(m->ng);
        free(m);
        return -ENOMEM;
}

void sf_mux_free(struct sf_mux *m, const char *cause) {
        if (!m)
                return;
        /* What was not written never will be: the streams' buffers are theirs again. */
        m->nc = NULL;
        m->left_len = 0;
        /* Every stream still held by a user ends as a reset one, and its user hears of it
         * before the session goes; a server's stream its owner never saw goes with it. */
        for (struct sf_list_node *n = m->streams.first; n; n = n->next) {
                struct sf_mux_stream *s = sf_list_entry(n, struct sf_mux_stream, node);
                s->ng_closed = true;
                if (!s->is_new)
                        stream_fail(s, ECONNRESET, cause ? cause : "the link went down");
        }
        for (struct sf_list_node *n = m->notify.first, *next; n; n = next) {
                next = n->next;
                struct sf_mux_stream *s = sf_list_entry(n, struct sf_mux_stream, notify);
                if (s->is_new) {
                        s->is_new = false;
                        s->user_closed = true;
                }
        }
        dispatch(m);
        while (m->streams.first) {
                struct sf_mux_stream *s = sf_list_entry(m->streams.first, struct sf_mux_stream, node);
                sf_list_remove(&m->streams, &s->node);
                sf_list_remove(&m->notify, &s->notify);
                s->m = NULL;
                if (s->user_closed || !s->owned)
                        stream_free(s);
        }
        nghttp2_session_del(m->ng);
        free(m);
}

int sf_mux_input(struct sf_mux *m, const uint8_t *data, size_t len, char *why, size_t why_cap) {
        ssize_t r = nghttp2_session_mem_recv(m->ng, data, len);
        if (r < 0) {
                snprintf(why, why_cap, "%s", nghttp2_strerror((int)r));
                return -EPROTO;
        }
        dispatch(m);
        want_output(m);
        return 0;
}

/* The session ended for the peer's protocol error and everything up to its GOAWAY is out. */
static bool terminated_out(struct sf_mux *m, char *why, size_t why_cap) {
        if (m->terminated && !m->left_len && !m->nc && !nghttp2_session_want_write(m->ng)) {
                snprintf(why, why_cap, "%s", m->why);
                return true;
        }
        return false;
}

/* Refills m->left from nghttp2 when it is empty: 0 when there is nothing to send, 1, or
 * -EPROTO. */
static int refill(struct sf_mux *m, char *why, size_t why_cap) {
        if (m->left_len)
                return 1;
        ssize_t r = nghttp2_session_mem_send(m->ng, &m->left);
        if (r < 0) {
                snprintf(why, why_cap, "%s", nghttp2_strerror((int)r));
                return -EPROTO;
        }
        m->left_len = (size_t)r;
        if (r == 0 && m->nc) {
                /* A no-copy DATA frame (on_send_data): its header first. */
                m->left_kind = LEFT_NC_HEAD;
                m->left = m->nc_head;
                m->left_len = sizeof m->nc_head;
        }
        return m->left_len > 0;
}

ssize_t sf_mux_output(struct sf_mux *m, uint8_t *buf, size_t cap, char *why, size_t why_cap) {
        if (terminated_out(m, why, why_cap))
                return -EPROTO;
        size_t n = 0;
        while (n < cap) {
                int r = refill(m, why, why_cap);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                size_t k = m->left_len < cap - n ? m->left_len : cap - n;
                memcpy(buf + n, m->left, k);
                left_taken(m, k);
                n += k;
        }
        dispatch(m);
        return (ssize_t)n;
}

ssize_t sf_mux_output_peek(struct sf_mux *m, const uint8_t **p, char *why, size_t why_cap) {
        if (terminated_out(m, why, why_cap))
                return -EPROTO;
        int r = refill(m, why, why_cap);
        if (r < 0)
                return r;
        /* Streams that have room again (their bytes were framed) hear of it now. */
        dispatch(m);
        *p = m->left;
        return r ? (ssize_t)m->left_len : 0;
}

void sf_mux_output_advance(struct sf_mux *m, size_t n) {
        if (n > m->left_len)
                n = m->left_len;
        if (n)
                left_taken(m, n);
}

void sf_mux_config_init(struct sf_mux_config *cfg, uint64_t max_streams) {
        if (max_streams < 1)
                max_streams = 1;
        if (max_streams > SF_MUX_STREAMS_MAX)
                max_streams = SF_MUX_STREAMS_MAX;
        cfg->max_streams = (uint32_t)max_streams;
        cfg->stream_window = SF_MUX_STREAM_WINDOW;
        /* In flight only: bytes leave the link's window as they reach their stream's buffer. */
        cfg->link_window = LINK_WINDOW;
        /* An honest peer resets no more streams than it opens, and it opens them no faster than
         * its clients connect: RESETS_PER_STREAM for every stream of the limit, at once and
         * again each second, is more than one link carries (bench/RESULTS.md measures the
         * fastest honest aborts), while a flood of open-and-reset beyond it still ends its
         * own link (doc/SECURITY.md, "The shared link"). */
        uint64_t n = max_streams * RESETS_PER_STREAM < RESETS_MIN ? RESETS_MIN : max_streams * RESETS_PER_STREAM;
        cfg->resets_burst = (uint32_t)n;
        cfg->resets_per_s = (uint32_t)n;
}

int sf_mux_set_max_streams(struct sf_mux *m, uint32_t max_streams) {
        if (m->cfg.max_streams == max_streams)
                return 0;
        m->cfg.max_streams = max_streams;
        nghttp2_settings_entry iv[] = { { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams } };
        if (nghttp2_submit_settings(m->ng, NGHTTP2_FLAG_NONE, iv, 1) != 0)
                return -ENOMEM;
        want_output(m);
        return 0;
}

bool sf_mux_exhausted(const struct sf_mux *m) {
        /* nghttp2_session_get_next_stream_id says 2^31 once none is left. */
        return m->role == SF_MUX_CLIENT && nghttp2_session_get_next_stream_id(m->ng) > INT32_MAX;
}

int sf_mux_set_next_stream_id(struct sf_mux *m, uint32_t id) {
        return nghttp2_session_set_next_stream_id(m->ng, (int32_t)id) == 0 ? 0 : -EINVAL;
}

int sf_mux_ping(struct sf_mux *m, uint64_t sent) {
        uint8_t opaque[8];
        memcpy(opaque, &sent, sizeof sent);
        if (nghttp2_submit_ping(m->ng, NGHTTP2_FLAG_NONE, opaque) != 0)
                return -ENOMEM;
        want_output(m);
        return 0;
}

void sf_mux_drain(struct sf_mux *m) {
        if (m->draining)
                return;
        m->draining = true;
        if (m->role == SF_MUX_SERVER)
                nghttp2_submit_goaway(m->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(m->ng),
                                      NGHTTP2_NO_ERROR, NULL, 0);
        want_output(m);
}

bool sf_mux_ready(const struct sf_mux *m) {
        return m->peer_settings;
}

bool sf_mux_draining(const struct sf_mux *m) {
        return m->draining || m->peer_goaway;
}

size_t sf_mux_streams_open(const struct sf_mux *m) {
        return m->streams.n;
}

uint64_t sf_mux_streams_total(const struct sf_mux *m) {
        return m->total;
}

/* ---- streams ---------------------------------------------------------------------------- */

static void stream_free(struct sf_mux_stream *s) {
        struct sf_mux *m = s->m;
        if (m && m->nc == s) {
                /* Its payload is being written from its buffer: the frame goes out whole. */
                s->free_due = true;
                return;
        }
        if (m) {
                sf_list_remove(&m->streams, &s->node);
                sf_list_remove(&m->notify, &s->notify);
        }
        buf_release(s, &s->in, &s->in_off, &s->in_len);
        buf_release(s, &s->out, &s->out_off, &s->out_len);
        free(s);
}

struct sf_mux_stream *sf_mux_stream_open(struct sf_mux *m, const char *service, bool by_default, bool probe,
                                         int *err) {
        if (m->role != SF_MUX_CLIENT || sf_mux_draining(m)) {
                *err = -EAGAIN;
                return NULL;
        }
        struct sf_mux_stream *s = calloc(1, sizeof *s);
        if (!s) {
                *err = -ENOMEM;
                return NULL;
        }
        s->m = m;
        s->pool = m->pool;
        s->status = -1;
        s->probe = probe;
        s->owned = true;
        snprintf(s->service, sizeof s->service, "%s", service ? service : "");
        nghttp2_nv nv[3];
        size_t n = 0;
        if (s->service[0])
                nv[n++] = (nghttp2_nv){ (uint8_t *)H_SERVICE, (uint8_t *)s->service, sizeof H_SERVICE - 1,
                                        strlen(s->service), NGHTTP2_NV_FLAG_NO_COPY_NAME };
        if (s->service[0] && by_default)
                nv[n++] = (nghttp2_nv){ (uint8_t *)H_DEFAULT, (uint8_t *)"1", sizeof H_DEFAULT - 1, 1,
                                        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE };
        if (probe)
                nv[n++] = (nghttp2_nv){ (uint8_t *)H_PROBE, (uint8_t *)"1", sizeof H_PROBE - 1, 1,
                                        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE };
        nghttp2_data_provider prd = { .source.ptr = s, .read_callback = on_data_read };
        int32_t id = nghttp2_submit_request(m->ng, NULL, nv, n, &prd, s);
        if (id < 0) {
                free(s);
                *err = id == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EAGAIN;
                return NULL;
        }
        s->id = id;
        sf_list_push_back(&m->streams, &s->node);
        m->total++;
        want_output(m);
        return s;
}

void sf_mux_stream_watch(struct sf_mux_stream *s, void (*cb)(void *ev, uint32_t events), void *ev) {
        s->cb = cb;
        s->ev = ev;
        if (s->pending && s->m)
                sf_list_push_back(&s->m->notify, &s->notify);
}

static int answer_send(struct sf_mux_stream *s, enum sf_mux_status status, const char *reason) {
        struct sf_mux *m = s->m;
        char st[8];
        snprintf(st, sizeof st, "%d", (int)status);
        uint8_t why[SF_MUX_REASON_MAX + 1];
        /* What the handshake's status frames carry: printable ASCII, our dashes as '-'. */
        size_t wn = sf_hs_reason_ascii(why, reason ? reason : "");
        nghttp2_nv nv[2] = {
                { (uint8_t *)H_STATUS, (uint8_t *)st, sizeof H_STATUS - 1, strlen(st), NGHTTP2_NV_FLAG_NO_COPY_NAME },
                { (uint8_t *)H_REASON, why, sizeof H_REASON - 1, wn, NGHTTP2_NV_FLAG_NO_COPY_NAME },
        };
        int r;
        if (status == SF_MUX_OK) {
                nghttp2_data_provider prd = { .source.ptr = s, .read_callback = on_data_read };
                r = nghttp2_submit_response(m->ng, s->id, nv, 1, &prd);
        } else {
                /* The answer ends our side; the reset tells the client to stop sending. */
                r = nghttp2_submit_response(m->ng, s->id, nv, wn ? 2 : 1, NULL);
                s->eof_sent = s->shut = true;
                s->rst_after_answer = true;
        }
        want_output(m);
        return r == 0 ? 0 : -ENOMEM;
}

/* A held OK goes out now: the stream has bytes or its end for the client. */
static void answer_release(struct sf_mux_stream *s) {
        if (!s->ok_held)
                return;
        s->ok_held = false;
        if (answer_send(s, SF_MUX_OK, NULL) < 0) {
                rst(s, NGHTTP2_INTERNAL_ERROR);
                stream_fail(s, ENOMEM, "out of memory for the stream's answer");
        }
}

static int answer(struct sf_mux_stream *s, enum sf_mux_status status, const char *reason) {
        struct sf_mux *m = s->m;
        if (!m || s->answered || s->ng_closed || m->role != SF_MUX_SERVER)
                return -EINVAL;
        s->answered = true;
        if (status == SF_MUX_OK && !s->probe) {
                /* The client sends without waiting for the answer, and reads nothing from a
                 * "0" but that its upstream is there, which the upstream's first bytes (or
                 * the stream's end) say as well. Held until then, the HEADERS go in the
                 * same write as those bytes: one segment less per stream across a VM's
                 * network stack, one wake-up less of the container relay. A reset ends a held
                 * stream as it ends an answered one (the client's words are the same). */
                s->ok_held = true;
                return 0;
        }
        return answer_send(s, status, reason);
}

int sf_mux_stream_accept(struct sf_mux_stream *s) {
        return answer(s, SF_MUX_OK, NULL);
}

int sf_mux_stream_refuse(struct sf_mux_stream *s, enum sf_mux_status status, const char *reason) {
        return answer(s, status, reason);
}

ssize_t sf_mux_stream_recv(struct sf_mux_stream *s, void *buf, size_t n) {
        size_t have = s->in_len - s->in_off;
        if (have && n) {
                size_t k = have < n ? have : n;
                memcpy(buf, s->in + s->in_off, k);
                s->in_off += (uint32_t)k;
                if (s->in_off == s->in_len)
                        buf_release(s, &s->in, &s->in_off, &s->in_len);
                consume(s, k);
                return (ssize_t)k;
        }
        if (s->err) {
                errno = s->err;
                return -1;
        }
        if (s->peer_eof)
                return 0;
        errno = EAGAIN;
        return -1;
}

ssize_t sf_mux_stream_recv_buf(struct sf_mux_stream *s, struct sf_bufpool *pool, char **buf, uint32_t *off) {
        size_t have = s->in_len - s->in_off;
        if (have && pool == s->pool) {
                /* The caller's buffer is empty: it goes back to the pool, and the stream holds
                 * none until bytes come again. */
                sf_bufpool_put(pool, *buf);
                *buf = s->in;
                *off = s->in_off;
                s->in = NULL;
                s->in_off = s->in_len = 0;
                consume(s, have);
                return (ssize_t)have;
        }
        *off = 0;
        if (have && !*buf && !(*buf = sf_bufpool_get(pool))) {
                errno = ENOMEM;
                return -1;
        }
        return sf_mux_stream_recv(s, *buf, SF_BUF_SIZE);
}

/* Why a send fails now: -1 with errno, or 0. */
static int send_check(const struct sf_mux_stream *s) {
        if (s->err) {
                errno = s->err == ECONNREFUSED ? ECONNRESET : s->err;
                return -1;
        }
        if (s->shut || !s->m || s->ng_closed) {
                errno = EPIPE;
                return -1;
        }
        return 0;
}

/* New bytes in s->out, or the stream's end: a held answer goes, the data source goes on. */
static void sent(struct sf_mux_stream *s) {
        answer_release(s);
        if (s->deferred) {
                s->deferred = false;
                nghttp2_session_resume_data(s->m->ng, s->id);
        }
        want_output(s->m);
}

/* The stream may take bytes and has a send buffer (an empty one starts over at its front):
 * 0, or -1 with errno. */
static int send_ready(struct sf_mux_stream *s) {
        if (send_check(s) < 0)
                return -1;
        if (s->out_off == s->out_len)
                s->out_off = s->out_len = 0;
        if (!s->out && !(s->out = sf_bufpool_get(s->m->pool))) {
                errno = ENOMEM;
                return -1;
        }
        return 0;
}

int sf_mux_stream_send_space(struct sf_mux_stream *s, char **p, size_t *room) {
        if (send_ready(s) < 0)
                return -1;
        *p = s->out + s->out_len;
        *room = SF_BUF_SIZE - s->out_len;
        return 0;
}

bool sf_mux_stream_has_room(struct sf_mux_stream *s, size_t min) {
        if (s->err || s->shut || !s->m || s->ng_closed)
                return true; /* a send says why not */
        if (s->out_off == s->out_len)
                s->out_off = s->out_len = 0;
        uint32_t pending = s->out_len - s->out_off;
        if (SF_BUF_SIZE - s->out_len < min && s->out_off && pending <= SF_BUF_SIZE / 8 && !pinned(s)) {
                /* Little waits, far in: a small move frees the buffer. */
                memmove(s->out, s->out + s->out_off, pending);
                s->out_off = 0;
                s->out_len = pending;
        }
        if (SF_BUF_SIZE - s->out_len >= min)
                return true;
        s->out_blocked = true;
        return false;
}

void sf_mux_stream_commit(struct sf_mux_stream *s, size_t n) {
        s->out_len += (uint32_t)n;
        if (s->out_off == s->out_len)
                buf_release(s, &s->out, &s->out_off, &s->out_len);
        else if (n)
                sent(s);
}

ssize_t sf_mux_stream_send(struct sf_mux_stream *s, const void *buf, size_t n) {
        if (send_ready(s) < 0)
                return -1;
        if (s->out_off && SF_BUF_SIZE - s->out_len < n && !pinned(s)) {
                memmove(s->out, s->out + s->out_off, s->out_len - s->out_off);
                s->out_len -= s->out_off;
                s->out_off = 0;
        }
        size_t room = SF_BUF_SIZE - s->out_len, k = room < n ? room : n;
        if (k == 0) {
                s->out_blocked = true;
                errno = EAGAIN;
                return -1;
        }
        memcpy(s->out + s->out_len, buf, k);
        s->out_len += (uint32_t)k;
        sent(s);
        return (ssize_t)k;
}

void sf_mux_stream_shutdown(struct sf_mux_stream *s) {
        if (s->shut)
                return;
        s->shut = true;
        if (!s->m || s->ng_closed)
                return;
        sent(s);
}

void sf_mux_stream_close(struct sf_mux_stream *s) {
        if (!s || s->user_closed)
                return;
        s->user_closed = true;
        s->cb = NULL;
        /* Unread bytes go back to the link's window. */
        consume(s, s->in_len - s->in_off);
        buf_release(s, &s->in, &s->in_off, &s->in_len);
        struct sf_mux *m = s->m;
        if (!m || s->ng_closed) {
                stream_free(s);
                return;
        }
        if (m->role == SF_MUX_SERVER && !s->answered) {
                /* Dropped before it was answered (the relay is stopping): say so. */
                answer(s, SF_MUX_UPSTREAM_UNAVAILABLE, "the host relay dropped the stream");
                return;
        }
        /* Both sides ended: what is still queued goes out, then the stream ends by itself.
         * Anything else is an abort. */
        if (!(s->peer_eof && s->shut) && !s->rst_after_answer)
                rst(s, NGHTTP2_CANCEL);
}

int sf_mux_stream_error(const struct sf_mux_stream *s) {
        return s->err;
}

const char *sf_mux_stream_reason(const struct sf_mux_stream *s) {
        return s->reason;
}

int sf_mux_stream_status(const struct sf_mux_stream *s) {
        return s->status;
}

bool sf_mux_stream_sent(const struct sf_mux_stream *s) {
        return s->headers_sent;
}

size_t sf_mux_stream_unread(const struct sf_mux_stream *s) {
        return s->in_len - s->in_off;
}

int32_t sf_mux_stream_id(const struct sf_mux_stream *s) {
        return s->id;
}
