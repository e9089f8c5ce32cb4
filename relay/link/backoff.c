#include "relay/link/backoff.h"

#include <sodium.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

uint64_t sf_backoff_next(struct sf_backoff *b) {
        b->step_ms = b->step_ms ? b->step_ms * 2 : BACKOFF_MIN_MS;
        if (b->step_ms > BACKOFF_MAX_MS)
                b->step_ms = BACKOFF_MAX_MS;
        return b->step_ms / 2 + randombytes_uniform((uint32_t)(b->step_ms / 2 + 1));
}

void sf_backoff_reset(struct sf_backoff *b) {
        b->step_ms = 0;
}
