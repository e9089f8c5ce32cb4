#include "shim/platform.h"

#include <errno.h>
#include <sys/prctl.h>

int sf_proc_no_new_privs(void) {
        return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ? -errno : 0;
}

int sf_proc_child_subreaper(void) {
        return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 ? -errno : 0;
}
