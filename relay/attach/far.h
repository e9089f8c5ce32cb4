#pragma once
/* `sockferry link --stdio`: the far end of attach (relay/attach/host.h), in the container.
 * Its stdin and stdout are the shared link, with no handshake; it opens the link's streams.
 * The first, naming no service, brings the listen sections (relay/attach/wire.h): each is
 * bound as any relay binds a listen endpoint, and each client that connects becomes a stream
 * naming its forward. Its log goes to stderr, which attach relays to the host's log. When
 * stdin ends (attach stopped, or the exec was cut) or on SIGTERM/SIGINT it removes its sockets
 * and returns. */
#include "conf/conf.h"

struct sf_link_stdio_params {
        /* Once the sockets are bound, before any client is served: the aliases (shim). */
        void (*bound)(const struct sf_conf *c, void *data);
        void *data;
};

/* Runs to the end over in_fd/out_fd. The exit status: 0 when stdin ended or a signal stopped
 * it, 1 a runtime failure (a listen path refused, the link broken), 78 sections that do not
 * parse here. */
int sf_link_stdio_run(int in_fd, int out_fd, const struct sf_link_stdio_params *p);
