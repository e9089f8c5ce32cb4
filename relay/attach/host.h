#pragma once
/* attach's host side (doc/PROTOCOL.md "attach"): runs a command whose far end is `sockferry
 * link --stdio` (docker exec, kubectl exec, nsenter, ssh) with pipes for its stdin, stdout and
 * stderr, and carries the shared link over the first two with no handshake: the right to run
 * that command is the authentication. The far end opens the streams: its first, naming no
 * service, gets the listen sections (relay/attach/wire.h); every other is a client of a
 * forward and goes to the relay (sf_relay_stream_new), which dials the forward's candidates
 * on the host. The far end's stderr lines go to the host's log. When the command ends, why is
 * logged (its exit status and last stderr line, in plain words) and it starts again with a
 * jittered backoff (100 ms doubling to 5 s). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "conf/conf.h"

struct sf_attach;
struct sf_relay;

/* How a run of the command ended, for the owner's words. */
struct sf_attach_end {
        int spawn_err;       /* the command could not be started: -errno (0: it ran) */
        int64_t exit_status; /* as waitpid says; -1 when a signal ended it */
        int term_signal;
        bool was_up;         /* the link came up in this run */
        bool ever_up;        /* the link came up in some run */
        const char *last_line; /* its last stderr line ("" none) */
};

enum sf_attach_next { SF_ATTACH_RETRY, SF_ATTACH_GIVE_UP };

struct sf_attach_params {
        /* The command, read at each start: the owner may change it between runs (ended). */
        char **argv;
        /* For messages: the command as people know it ("docker exec app"). */
        const char *what;
        uint64_t keepalive_ms;
        /* A run ended: plain words for why into why (the owner's knowledge of its engine), and
         * whether to start again. NULL: the status and the last line, and start again. */
        enum sf_attach_next (*ended)(void *data, const struct sf_attach_end *end, char *why, size_t cap);
        /* Before each run of the command (NULL: none): the owner's set-up in the container,
         * done again after a restart made the container anew. It may block briefly. */
        void (*starting)(void *data);
        /* attach gave up (ended said so): the owner stops. */
        void (*failed)(void *data);
        void *data;
};

/* Starts the command now. conf (the forwards), relay (started with sf_relay_start_unbound)
 * and p must outlive it. 0 or -errno. */
int sf_attach_new(uv_loop_t *loop, const struct sf_conf *conf, struct sf_relay *relay,
                  const struct sf_attach_params *p, struct sf_attach **out);
/* SIGTERM: the far end may open no more streams (its open ones go on) and the command is
 * not started again. */
void sf_attach_drain(struct sf_attach *a);
/* Closes the link (the command's stdin: the far end removes its sockets and exits), ends the
 * command if it does not exit within a few seconds, and runs cb once it exited and every
 * handle is closed; a second call only keeps the first cb. */
void sf_attach_close(struct sf_attach *a, void (*cb)(void *data), void *data);
/* After the loop ended. NULL-safe. */
void sf_attach_free(struct sf_attach *a);
