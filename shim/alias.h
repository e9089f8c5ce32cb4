#pragma once
/* The alias: the path clients expect the socket at. Where the path is free, a symbolic link to
 * the listen socket goes there and clients need nothing else; where the failed host-socket
 * bind mount sits, only the preload library can redirect them. */
#include "conf/conf.h"

enum sf_alias_result {
        SF_ALIAS_LINKED,      /* a link to the listen socket is in place, made now or before */
        SF_ALIAS_IS_LISTEN,   /* the alias is the listen socket itself */
        SF_ALIAS_LIVE_SOCKET, /* a socket something listens on (the bind mount worked): left alone */
        SF_ALIAS_MOUNT_POINT, /* a mount point (the failed bind mount): left for the preload map */
        SF_ALIAS_NOT_A_PATH,  /* the listener is not a unix path: the preload map is the only way */
        SF_ALIAS_LEFT,        /* a file, a non-empty directory or another link: left alone */
        SF_ALIAS_FAILED,      /* the link could not be put in place */
        SF_ALIAS_UNSAFE,      /* a directory or link on the way is not safe: refused, logged */
        SF_ALIAS_FOREIGN,     /* another user's socket or link is there and cannot be replaced */
};

/* Looks at f->alias (which must be set) and puts a link to the listen socket there when the path is
 * missing, an empty directory that is not a mount point, a socket nothing listens on, or a socket
 * or link that a user the policy does not trust owns (never left for clients to use: when it
 * cannot be replaced, SF_ALIAS_FOREIGN). The
 * alias's directories must pass the same policy as a listen path's (relay/listen/safedir.h, with
 * c's `user`). Logs what it found and did. Call after the listen socket is bound, at start-up only
 * (it changes the working directory for a moment). */
enum sf_alias_result sf_alias_apply(const struct sf_forward *f, const struct sf_conf *c);

/* True when clients connecting to the alias depend on the preload library. */
bool sf_alias_needs_preload(enum sf_alias_result r);
