#pragma once
/* Forwards compared and copied, for a reload (relay/relay.c): which forwards of a new
 * configuration are the running ones unchanged, and a forward's keys kept apart from the
 * configuration they were read from. */
#include <stdbool.h>

#include "conf/conf.h"

/* Whether a and b have the same value for every key. Where they were written (origin) does not
 * count; token_file is compared as written (NULL: none), so the caller compares resolved ones
 * (sf_conf_forward_copy_resolved). Pure. */
bool sf_conf_forward_equal(const struct sf_forward *a, const struct sf_forward *b);

/* Whether the keys that make a forward's listening socket are the same: its listen endpoint,
 * mode, owner and group. Pure. */
bool sf_conf_forward_listen_equal(const struct sf_forward *a, const struct sf_forward *b);

/* A deep copy of src into dst (whose own memory is not freed first), with the token file
 * resolved against c: dst->token_file is src's, else c's global one, else NULL. 0 or -ENOMEM
 * (dst then holds nothing to free). dst is freed with sf_conf_forward_clear. */
int sf_conf_forward_copy_resolved(struct sf_forward *dst, const struct sf_forward *src, const struct sf_conf *c);

/* Frees what a forward holds on the heap and sets the defaults again; safe to repeat. */
void sf_conf_forward_clear(struct sf_forward *f);
