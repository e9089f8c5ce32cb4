#pragma once
/* uname(2) reports the kernel: for the hints that name a VM's kernel (relay/listen/sockpath.c).
 * Windows has none of those (compat/win/README.md). */
#include <errno.h>
#include <string.h>

struct utsname {
        char sysname[65], nodename[65], release[65], version[65], machine[65];
};

static inline int uname(struct utsname *u) {
        memset(u, 0, sizeof *u);
        strcpy(u->sysname, "Windows");
        return 0;
}
