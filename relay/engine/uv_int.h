#pragma once
/* The portable engine's parts (relay/engine/uv.h): what uv.c, shared by every system,
 * and uv_posix.c / uv_win.c, one per system, use of each other. */
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "relay/engine/engine.h"

struct sf_uvsock {
        union {
                uv_handle_t handle;
                uv_stream_t stream;
                uv_tcp_t tcp;
                uv_pipe_t pipe;
        } u;
        struct sf_engine *e;
        struct sf_sock *sock; /* NULL once its owner closed it: nothing is reported any more */
        uv_connect_t creq;
        uv_write_t wreq;
        uv_shutdown_t sreq;
        uv_poll_t *poll; /* a connect in progress on a descriptor (unix, vsock) */
        int fd;          /* that descriptor until the stream is opened on it */
        bool opened;     /* u is an initialised handle */
        bool is_tcp;
        bool reading;
        bool eof;
        bool shut;
        bool accepted;        /* taken from a listener (Windows: the server end of a pipe) */
        bool end_after_write; /* a pipe's client end: the connection ends once out is written */
        uv_write_t eofreq;    /* the zero-length message that ends a request on a pipe */
        struct sf_ev endev;   /* reports an input ended by end_after_write in the next turn */
        uv_timer_t *quiet;    /* when set, restarted by every read: the input ends when it fires
                               * (Windows: a byte-mode pipe after the end of the request) */
        int err;         /* sticky: what recv/send and sf_sock_error report */
        char *in;        /* inbox: bytes read, not yet taken by sf_sock_recv */
        uint32_t in_off, in_len;
        uint32_t want;   /* room its owner's last sf_sock_recv left: the inbox reads no more */
        char *out;       /* outbox: bytes accepted by sf_sock_send, being written */
};

/* A side's stream state, bound to e and to s (its owner; NULL for a connection accepted but
 * not adopted yet); NULL when out of memory. */
struct sf_uvsock *sf_uvsock_new(struct sf_engine *e, struct sf_sock *s);
/* Starts reading into the inbox unless at EOF, failed, reading already or its owner has no
 * room: 0 or a libuv error. */
int sf_uvsock_read_start(struct sf_uvsock *h);
/* Passes events to the owner, if it still has one. */
void sf_uvsock_report(struct sf_uvsock *h, uint32_t events);
/* The close callback of a side's stream: releases its buffers and frees it. */
void sf_uvsock_closed(uv_handle_t *handle);
/* The close callback of a handle the engine allocated on its own (a uv_poll_t, a timer). */
void sf_uvsock_handle_freed(uv_handle_t *handle);

/* Ends a side's input as if the peer had shut down: what is unread is dropped. */
void sf_uvsock_end_input(struct sf_uvsock *h);
/* The platform's part of sf_sock_shutdown: true when it ended the side's output its own way
 * (Windows' pipes, which have no half-close), false for libuv's uv_shutdown. */
bool sf_sock_shutdown_local(struct sf_uvsock *h);

/* The platform's part of sf_sock_connect (unix and vsock on POSIX; nothing on Windows) and of
 * sf_sock_peername (a stream that is not TCP). */
int sf_sock_connect_local(struct sf_engine *e, struct sf_sock *s, const struct sockaddr *addr, socklen_t len,
                          bool *in_progress);
int sf_sock_peername_local(struct sf_uvsock *h, struct sockaddr_storage *ss, socklen_t *len);
