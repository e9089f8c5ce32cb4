#pragma once
/* A listener's libuv stream on Windows, shared by relay/listen/listener_win.c (which binds it and
 * takes libuv's connection callbacks) and relay/engine/uv_win.c (which accepts from it). */
#include <stdbool.h>
#include <uv.h>

struct sf_watch;

struct sf_listen_srv {
        union {
                uv_handle_t handle;
                uv_stream_t stream;
                uv_tcp_t tcp;
                uv_pipe_t pipe;
        } u;
        bool is_tcp;
        /* Served (sf_listener_serve): every client goes to serve_cb at once. */
        uv_connection_cb serve_cb;
        /* Watched (relay/listen/accept.c): libuv holds each client it took in until uv_accept; the
         * relay accepts while it has room, and what it leaves waits, as in a backlog. */
        struct sf_watch *watch;
        unsigned pending; /* clients libuv took in, not accepted yet */
        int err;          /* a failed accept, reported by the next sf_watch_accept */
};
