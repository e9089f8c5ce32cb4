#pragma once
/* The jittered backoff of everything that reconnects (a client link, attach's exec): 100 ms
 * doubling to 5 s, each wait drawn from the upper half of the current step, so that many
 * containers (or attaches) do not all come back to a host at the same instant. */
#include <stdint.h>

struct sf_backoff {
        uint64_t step_ms; /* 0: the next failure starts at the first step */
};

/* The wait before the next attempt, in ms; the step doubles for the one after. */
uint64_t sf_backoff_next(struct sf_backoff *b);
/* A success (a link up, a good run): the next failure starts over. */
void sf_backoff_reset(struct sf_backoff *b);
