#pragma once
/* The socket layer under the connection state machine (relay/conn/): the
 * state machine is pull-style — an event sets readiness flags, and it reads and writes until a
 * call says EAGAIN — and this layer gives it non-blocking-socket semantics on two engines,
 * chosen at build time:
 *
 * - relay/engine/linux.h (default on Linux): real descriptors in the relay's own
 *   edge-triggered epoll set (relay/engine/evset.h), recv/send, splice through pooled pipes; every
 *   call is static inline, the same system calls as without the layer.
 * - relay/engine/uv.h (macOS, Windows; Linux with -Dportable=true): each side a libuv stream that
 *   emulates them: reads land in a per-side inbox that the "recv" empties, sends go out with
 *   uv_try_write and the rest through a per-side outbox, no splice.
 *
 * Both provide the same types and calls:
 *
 *   struct sf_engine  the loop's engine: sf_engine_init(e, loop, pool), sf_engine_close(e)
 *                     (safe twice; stops it), sf_engine_free(e) (after the loop ended), sf_engine_run(e, loop) (runs the loop until the engine is closed
 *                     and libuv has nothing left), sf_engine_defer(e, ev),
 *                     sf_engine_cancel(e, ev), sf_engine_trim(e) (an idle relay holds no spare
 *                     descriptors).
 *   struct sf_watch   a listener's readiness: sf_watch_start(e, w, listener, cb),
 *                     sf_watch_stop(e, w, listener), sf_watch_handle(w) (a libuv handle the
 *                     owner closes before the descriptor, or NULL), sf_watch_accept(e, w,
 *                     listener, &incoming) (0, -EAGAIN when nobody waits, or -errno).
 *   struct sf_reader  a libuv stream the relay reads itself: sf_reader_start(e, r, stream, cb)
 *                     (0, or -ENOTSUP: read it with uv_read_start; the portable engine always
 *                     says so), cb(ev, SF_EV_*) on readability (edge-triggered: read until
 *                     EAGAIN, or defer r->ev to go on), sf_reader_read(r, buf, n),
 *                     sf_reader_stop(e, r) before the stream is closed.
 *   struct sf_incoming an accepted connection until a sf_sock adopts it:
 *                     sf_incoming_close(e, in), sf_incoming_cred(in, &uid, &gid, &pid),
 *                     sf_incoming_trusted(in, who, cap, allowed, cap) (the system's own rule
 *                     for a local peer: on Windows a pipe client of another account is not).
 *   struct sf_sock    one side of a connection; its ev.cb gets SF_EV_* bits:
 *                     sf_sock_init(s, cb), sf_sock_adopt(e, s, in, family),
 *                     sf_sock_connect(e, s, addr, len, &in_progress),
 *                     sf_sock_connect_pipe(e, s, name, &in_progress) (Windows' named pipes;
 *                     -EAGAIN while every instance is busy), sf_sock_recv(s, buf, n),
 *                     sf_sock_send(s, buf, n), sf_sock_shutdown(s), sf_sock_close(e, s),
 *                     sf_sock_error(s), sf_sock_nodelay(s), sf_sock_peername(s, ss, len),
 *                     sf_sock_sending(s) (bytes send took are still the engine's, not the
 *                     kernel's: a close now would lose them),
 *                     sf_sock_release(e, s, loop, &stream, &close_cb) (hands the connection
 *                     over as a libuv stream, which the caller closes with close_cb: the
 *                     shared link takes over a connection whose handshake asked for it),
 *                     and for bulk transfers sf_sock_pipe_get/put(e, pipe, left),
 *                     sf_sock_to_pipe(s, pipe, n), sf_sock_from_pipe(pipe, s, n) (EINVAL
 *                     where there is no splice).
 *
 * recv/send return n, 0 at EOF (recv), or -1 with errno (EAGAIN: wait for the next event).
 * SF_EV_IN: readable (or EOF, or error); SF_EV_OUT: writable; SF_EV_RDHUP: the peer shut down
 * its side (a half-close, or more); SF_EV_HUP: both directions are shut, the peer is gone (the
 * Linux engine only: libuv streams report the EOF alone); SF_EV_ERR: sf_sock_error says why. */
#ifdef SF_PORTABLE
#include "relay/engine/uv.h"
#else
#include "relay/engine/linux.h"
#endif
