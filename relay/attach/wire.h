#pragma once
/* What attach tells `link --stdio` (doc/PROTOCOL.md "attach"): the listen half of every
 * forward, as the text of a configuration file, sent on the first stream the far end opens
 * (the one that names no service). The far end binds each listen as any relay would and
 * carries each client to the host as a stream naming the forward. */
#include <stddef.h>

#include "conf/conf.h"

/* The sections for c's forwards (listen, mode, owner, group, alias, allow-uid, allow-gid,
 * max-conns, timeouts; owner and group by number, as the host resolved them) in *out, len
 * bytes, on the heap. 0 or -ENOMEM. */
int sf_attach_wire_text(const struct sf_conf *c, char **out, size_t *len);
