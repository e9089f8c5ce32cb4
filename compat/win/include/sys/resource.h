#pragma once
/* Windows has no per-process descriptor limit to read or raise (compat/win/README.md):
 * getrlimit fails, and callers go on with their defaults. */
#include <errno.h>

typedef unsigned long long rlim_t;
struct rlimit {
        rlim_t rlim_cur, rlim_max;
};
#define RLIMIT_NOFILE 7
#define RLIM_INFINITY (~(rlim_t)0)

static inline int getrlimit(int resource, struct rlimit *rl) {
        (void)resource;
        (void)rl;
        errno = ENOSYS;
        return -1;
}

static inline int setrlimit(int resource, const struct rlimit *rl) {
        (void)resource;
        (void)rl;
        errno = ENOSYS;
        return -1;
}
