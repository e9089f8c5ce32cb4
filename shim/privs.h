#pragma once
/* Privilege dropping with libcap-ng: the payload runs as `user` with no capabilities, and the
 * process that keeps serving holds only the capabilities it still needs after binding. */
#include <stddef.h>

#include "conf/conf.h"

/* Switches the calling process to c->uid:c->gid when c->user_set, with no supplementary
 * groups and every capability set emptied (effective, permitted, inheritable, ambient and
 * bounding), then checks that nothing is left. Sets PR_SET_NO_NEW_PRIVS when
 * c->no_new_privs. Without a user, only no-new-privs is applied. Returns 0 or -errno,
 * logged with the user and the cause. */
int sf_privs_drop(const struct sf_conf *c);

/* Keeps the uid and gid but empties every capability set except the capabilities in keep[]
 * that the process already has, which stay effective and permitted. Clears the bounding and
 * ambient sets too when the process may. Returns 0 or -errno, logged. */
int sf_privs_limit(const int *keep, size_t n_keep);
