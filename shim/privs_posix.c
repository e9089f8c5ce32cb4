#include "shim/privs.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "conf/log.h"

/* Systems without Linux capabilities (macOS): root's power is the uid, so dropping it is
 * setgroups, setgid, setuid, checked by trying to get root back. no-new-privs is Linux's
 * and has no counterpart here. */
int sf_privs_drop(const struct sf_conf *c) {
        if (!c->user_set)
                return 0;
        gid_t gid = c->gid;
        const char *step = "cannot drop the supplementary groups";
        if (setgroups(1, &gid) == 0) {
                step = "cannot change the group";
                if (setgid(c->gid) == 0) {
                        step = "cannot change the user";
                        if (setuid(c->uid) == 0) {
                                if (c->uid != 0 && setuid(0) == 0) {
                                        sf_log_error("user %s (uid %u): root could be taken back after dropping it; "
                                                     "refusing to go on",
                                                     c->user, (unsigned)c->uid);
                                        return -EPERM;
                                }
                                return 0;
                        }
                }
        }
        int err = errno;
        sf_log_error("user %s (uid %u, gid %u): %s: %s (sockferry must start as root to change user)", c->user,
                     (unsigned)c->uid, (unsigned)c->gid, step, strerror(err));
        return -err;
}
